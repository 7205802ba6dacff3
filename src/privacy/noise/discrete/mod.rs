//! The exact discrete Gaussian `N_Z(0, σ²)`, `P(z) ∝ exp(-z²/(2σ²))` on the integers, in integer
//! arithmetic from a stream of random bits: no floating point touches a probability.
//!
//! # The algorithm
//! Karney's Algorithm D ("Sampling exactly from the normal distribution", ACM TOMS 42(1), 2016)
//! with a finer envelope. With `m = 2^e` (`1 ≤ m ≤ 64`, chosen from `σ`) the half line is cut
//! into intervals `[k·w, (k + 1)·w)` of width `w = σ/m`, and one draw is:
//!
//! 1. `k ≥ 0` with `P(k) ∝ exp(-k²/(2m²))`: the inverse of its CDF `F` at a uniform `U ∈ [0, 1)`
//!    (`k` is the least with `U < F_k`), `U`'s bits read lazily (`Table`).
//! 2. `j` uniform in `[0, ⌈w⌉)`: `i = ⌈k·w⌉ + j` is the `j`-th integer at or after `k·w`, and
//!    `x = i/w - k ≥ 0`; rejected (back to 1) unless `x < 1`.
//! 3. Kept with probability `exp(-x(2k + x)/(2m²))`, else back to 1.
//! 4. A fair sign; `-0` is rejected (back to 1). The draw is `±i`.
//!
//! Every integer `i ≥ 0` lies in exactly one interval, as exactly one `(k, j)`: it is proposed
//! with probability `P(k)/⌈w⌉ ∝ exp(-k²/(2m²))` and kept with `exp(-x(2k + x)/(2m²))`, whose
//! product is `exp(-(k + x)²/(2m²)) = exp(-i²/(2σ²))` (`(k + x)·w = i`, `w·m = σ`); each sign
//! has probability `1/2`, and `0`, reachable with both, is kept with one. So a draw has exactly
//! the law `N_Z(0, σ²)`. Karney's algorithm is `m = 1` with `k` drawn by von Neumann's method
//! (a geometric `k` and a correction) and step 3 by his Algorithm B; here `k` comes from a table,
//! which makes a finer envelope free: a proposal is kept with probability about
//! `(w/⌈w⌉)·1.2533m/(1.2533m + 0.5)` (0.994 for `m = 64`, against 0.49 for Karney's `k` and
//! step 3 together).
//!
//! # Exactness of each step
//! - Step 1 compares `U`, bit by bit, with the exact `F_k = C_k/S`, `C_k = Σ_{i≤k} E^{i²}`,
//!   `S = Σ_{i≥0} E^{i²}`, `E = exp(-1/(2m²))`. A table built once per `m` (on first use: 3.4 ms
//!   for `m = 64`, 40 ms unoptimized) holds, for every `k` up to `F_k ≥ 1 - 2^-64`, integers
//!   `lo_k ≤ F_k·2^64 < hi_k + 1` certified by interval arithmetic at precision `2^-128` (`big`:
//!   `E` from its alternating series with a proven error bound, the powers `E^{k²}` by products
//!   rounded down for the lower and up for the upper bounds, `S`'s tail bounded by
//!   `∫_K^∞ e^{-x²/(2m²)} dx ≤ (m²/K)·E^{K²}`). The next 64 bits `u` of the stream decide `k`
//!   unless `lo_k ≤ u ≤ hi_k` for some `k` (at most two values of `u` a window, some `10·m`
//!   windows: probability below `2^-53`); then the comparison goes on, exactly, with more bits
//!   of `U` and brackets of twice the precision as needed, until decided (with probability 1:
//!   the brackets shrink to the exact values). The bits consumed are those up to the first where
//!   `u` leaves the two neighbouring windows, a stopping time (the first prefix clear of a fixed
//!   set of values), or the first 12 if that is more (the larger of two stopping times is one),
//!   so the bits after them are fresh. A guide indexed by those 12 bits gives the least
//!   candidate `k`, and for about 95% of `u` at `m = 64` (its slice lies between two windows)
//!   `k` itself, with no search.
//! - Step 2: Lemire's multiply-and-reject is exact (the products whose low half falls below
//!   `2^b mod ⌈w⌉` are redrawn).
//! - Step 3: Canonne, Kamath and Steinke's Algorithm 1 (2020, "The Discrete Gaussian for
//!   Differential Privacy"): for `γ ∈ [0, 1]`, `K ← 1`, while `Bernoulli(γ/K)` succeeds
//!   `K ← K + 1`; `K` is odd with probability `exp(-γ)`. Here `exp(-x(2k + x)/(2m²))` is the
//!   `R`-th power of `exp(-q·x)`, `q = (2k + x)/(2m²·R) < 1`, `R = 1` while `k < m²` (else the
//!   least power of two with `m²·R > k`): `R` independent draws, all to succeed, each by the
//!   series with `Bernoulli(q·x/K) = Bernoulli(q) ∧ Bernoulli(x/K)`, and `Bernoulli(q)` is
//!   `c < 2k`, or `c = 2k` and `Bernoulli(x)`, for `c` uniform in `[0, 2m²·R)` (`2e + 1 + log2 R`
//!   bits). (`k ≥ 2^20`, never seen: `exp(-k·x/m²)·exp(-x²/(2m²))`, the integer part of the
//!   first exponent as that many `Bernoulli(exp(-1))`.) `Bernoulli(n/d)` compares a lazily drawn
//!   uniform with `n/d`, 16 bits at a time, exactly.
//!
//! The scale is the rational `σ = a/D`, `D` a power of two, `a < 2^47`: with `Dm = m·D`,
//! `⌈k·w⌉ = ⌈k·a/Dm⌉` (a shift) and `x = n/a` with the integer `n = (⌈k·w⌉ + j)·Dm - k·a`.
//! A requested scale `s ≥ 1` is rounded UP to `σ = ⌈s·D⌉/D` with the largest such `D`, so
//! `s ≤ σ < s·(1 + 2^-45)`; scales up to `2^47 - 1` (1.4·10¹⁴) are accepted.
//!
//! Its running time depends on the draw (the rejections, the rare exact continuation of `k`):
//! a timing side channel, outside the guarantee (the statement says so).
//!
//! The one departure from the exact law: an `i > 2^63 - 1` is rejected (it would not fit an
//! `i64`), so the output is `N_Z(0, σ²)` conditioned on `|Z| < 2^63`, an event whose complement
//! has probability below `exp(-2^31)` (`σ < 2^47`; below `exp(-2^61)` for `σ < 2^32`).
//!
//! # Reading the stream
//! Each draw starts at a word boundary of the bit stream (the unread rest of the last draw's
//! word is skipped, never read). The usual draw is decided by that one 64-bit word, and then
//! consumes it whole ([`DiscreteGaussian::sample`]): where the next draw starts does not wait
//! on this one's table lookups and arithmetic, so the core overlaps consecutive draws. Any
//! other draw reads the same bits one part at a time, to the same effect, and goes on. Both
//! ends are stopping times (decided by the bits read so far), so every draw reads fresh bits:
//! the draws are independent, each of the exact law (and the same values as the algorithm run
//! from each word boundary, which a test checks).
//!
//! # Cost
//! At `σ ≈ 10⁶` (`m = 64`), 1.006 proposals a draw, and about 47 random bits decide one: 9 for
//! `k`, 23 for `j` (8 spare bits make Lemire's redraw rare), 13 for `c`, 1 for the sign; 19
//! draws in 20 are decided by their first word and take its 64 bits. Smaller scales pick the `m`
//! of least estimated time (`w ≤ 1`, one candidate an interval, is often best).

use rand::Rng;
use std::borrow::Cow;
use std::sync::OnceLock;

mod big;
mod bits;
#[cfg(test)]
mod tests;

use big::{Curve, Nat};
pub(super) use bits::Bits;
use bits::lemire;

/// The largest `e`: `m = 2^e` subintervals per `σ` at most (the table of `k` has about `9.4·m`
/// entries).
pub(super) const M_EXP_MAX: u32 = 6;

/// `a < 2^A_BITS`: keeps `Bernoulli(n/a)`'s 16-bit products, `2m²·a` and `Dm = m·D` in a `u64`.
const A_BITS: u32 = 47;

/// The guide to the table of `k` is indexed by the first `GUIDE_BITS` bits of `U`.
const GUIDE_BITS: u32 = 12;

/// `64 - GUIDE_BITS`: a slice of the guide holds `2^SLICE` values of `u`.
const SLICE: u32 = 64 - GUIDE_BITS;

/// The flag of a guide entry whose slice decides `k` ([`Table::decide`]).
const PURE: u16 = 1 << 15;

/// Spare bits in Lemire's draw of `j`: it is redrawn with probability below `2^-SPARE`.
const SPARE: u32 = 8;

/// The bounds of `F_k·2^64`, and those of `F_{k-1}·2^64` (`0` for `k = 0`).
#[derive(Clone, Copy, Debug)]
struct Window {
    lo: u64,
    hi: u64,
    /// `hi_{k-1}`.
    below: u64,
}

/// The law of `k` for one `m = 2^e`, `P(k) ∝ exp(-k²/(2m²))`, inverted from uniform bits.
struct Table {
    /// `lo_k ≤ F_k·2^64 < hi_k + 1`, both non-decreasing in `k`; the last has `hi = 2^64 - 1`.
    windows: Vec<Window>,
    /// `guide[t]`: the least `k` with `hi_k ≥ t·2^(64 - GUIDE_BITS)`, with [`PURE`] set when
    /// the first `GUIDE_BITS` bits `t` alone decide `k` (the slice `t` of `u` lies strictly
    /// between `F_{k-1}`'s window and `F_k`'s).
    guide: Vec<u16>,
    /// The brackets the windows come from (precision 2^-128), for the rare undecided draw.
    curve: Curve,
}

/// The tables, built on first use.
static TABLES: [OnceLock<Table>; M_EXP_MAX as usize + 1] =
    [const { OnceLock::new() }; M_EXP_MAX as usize + 1];

impl Table {
    fn get(e: u32) -> &'static Table {
        TABLES[e as usize].get_or_init(|| Table::build(e))
    }

    fn build(e: u32) -> Table {
        let mut curve = Curve::new(e, 128);
        let mut windows = Vec::new();
        for k in 0.. {
            curve.extend_to(k);
            let [c_lo, c_hi] = &curve.cum[k];
            // lo ≤ C_lo/S_hi·2^64 ≤ F_k·2^64 ≤ C_hi/S_lo·2^64 < hi + 1.
            let lo = big::quotient_u64(&c_lo.shl(64), &curve.s[1]);
            let hi = big::quotient_u64(&c_hi.shl(64), &curve.s[0]);
            let below = windows.last().map_or(0, |w: &Window| w.hi);
            windows.push(Window { lo, hi, below });
            if hi == u64::MAX {
                break;
            }
        }
        assert!(
            windows.len() < PURE as usize,
            "k fits a u16 beside the flag"
        );
        let mut k = 0;
        let guide = (0..1u64 << GUIDE_BITS)
            .map(|t| {
                let (first, last) = (t << SLICE, (t << SLICE) | ((1 << SLICE) - 1));
                while windows[k].hi < first {
                    k += 1;
                }
                let w = windows[k];
                // `below` is 0 for `k = 0`: the slice `t = 0` is not pure (see `decide`).
                let pure = last < w.lo && w.below < first;
                k as u16 | if pure { PURE } else { 0 }
            })
            .collect();
        Table {
            windows,
            guide,
            curve,
        }
    }

    /// `k`: the least with `U < F_k`, `U`'s bits from `bits`.
    #[inline]
    fn sample<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>) -> u64 {
        let u = bits.peek64();
        match self.decide(u) {
            Some((k, used)) => {
                bits.skip(used);
                k
            }
            None => {
                bits.skip(64);
                self.undecided(u, bits)
            }
        }
    }

    /// `k` and the number of leading bits of `u` it consumes, when the first 64 bits `u` of `U`
    /// decide it: the bits up to the first that decides it, and at least [`GUIDE_BITS`] (the
    /// larger of two stopping times is one), so that in a [`PURE`] slice of the guide, about
    /// 95% of draws at `m = 64`, `k` is known from the guide alone.
    #[inline]
    fn decide(&self, u: u64) -> Option<(u64, u32)> {
        let slot = self.guide[(u >> SLICE) as usize];
        if slot & PURE != 0 {
            return Some((u64::from(slot & !PURE), GUIDE_BITS));
        }
        let mut k = slot as usize;
        // Every window before `k` is below `u`: `U ≥ F_i`, `i < k`. The last `hi` is 2^64 - 1.
        // Most slices of the guide hold one boundary at most: one step without a branch.
        k += (u > self.windows[k].hi) as usize;
        while u > self.windows[k].hi {
            k += 1;
        }
        let w = self.windows[k];
        if u < w.lo {
            // U < F_k, decided by the bits up to the first one where `u` leaves both neighbouring
            // windows (every other window is further from `u`), or where it leaves 0 for
            // `k = 0`: a stopping time (the first prefix clear of a fixed set of values), so
            // the bits after it are fresh. Capped at 64, for `u = 0`.
            let common = (u ^ w.lo)
                .leading_zeros()
                .max((u ^ w.below).leading_zeros());
            return Some((k as u64, (common + 1).clamp(GUIDE_BITS, 64)));
        }
        None
    }

    /// [`sample`](Self::sample) when the first 64 bits `u` of `U` fall in a window.
    #[cold]
    #[inline(never)]
    fn undecided<R: Rng + ?Sized>(&self, u: u64, bits: &mut Bits<'_, R>) -> u64 {
        big::invert(&self.curve, Nat::from_u64(u), 64, || bits.take(64))
    }
}

/// The discrete Gaussian `N_Z(0, σ²)`, `P(z) ∝ exp(-z²/(2σ²))` on the integers, with the
/// rational scale `σ = a/D` (see the module's notes).
#[derive(Clone, Copy)]
pub(super) struct DiscreteGaussian {
    /// `σ = a/D`, `a < 2^47`.
    a: u64,
    /// `log2 D`.
    d_exp: u32,
    /// `m = 2^e` intervals per `σ`.
    e: u32,
    /// `m²`.
    m2: u64,
    /// `log2(m·D)`.
    dm_exp: u32,
    /// `⌈w⌉ = ⌈a/(m·D)⌉`: the candidates per interval.
    slots: u64,
    /// Lemire's bits and scaled threshold for `j < slots` ([`Bits::uniform`]).
    j_bits: u32,
    j_threshold: u64,
    table: &'static Table,
}

impl PartialEq for DiscreteGaussian {
    fn eq(&self, other: &Self) -> bool {
        (self.a, self.d_exp, self.e) == (other.a, other.d_exp, other.e)
    }
}

impl Eq for DiscreteGaussian {}

impl std::fmt::Debug for DiscreteGaussian {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscreteGaussian")
            .field("a", &self.a)
            .field("d", &(1u64 << self.d_exp))
            .field("m", &(1u64 << self.e))
            .finish()
    }
}

impl DiscreteGaussian {
    /// The discrete Gaussian of scale `σ = ⌈s·D⌉/D ≥ s` with the largest power of two `D` for
    /// which `⌈s·D⌉ < 2^47`; `None` unless `1 ≤ s ≤ 2^47 - 1`. The number `m ≤ 64` of intervals
    /// per `σ` is the one with the least estimated time (a choice of speed, not of law).
    pub(super) fn new(s: f64) -> Option<Self> {
        let (a, d_exp) = Self::scale_of(s)?;
        let best = (0..=M_EXP_MAX)
            .map(|e| (e, Self::cost(a, d_exp, e)))
            .fold((0, f64::MAX), |best, x| if x.1 < best.1 { x } else { best });
        Some(Self::with_parts(a, d_exp, best.0))
    }

    /// The scale `σ = ⌈s·D⌉/D` (exact: `⌈s·D⌉ < 2^47` and `D` a power of two).
    pub(super) fn sigma(&self) -> f64 {
        self.a as f64 / (1u64 << self.d_exp) as f64
    }

    #[cfg(test)]
    /// As [`new`](Self::new) with `m = 2^e` imposed, `e ≤` [`M_EXP_MAX`] (for tests and
    /// benchmarks).
    #[doc(hidden)]
    pub(super) fn with_m_exp(s: f64, e: u32) -> Option<Self> {
        let (a, d_exp) = Self::scale_of(s)?;
        (e <= M_EXP_MAX).then(|| Self::with_parts(a, d_exp, e))
    }

    /// `(a, log2 D)`.
    fn scale_of(s: f64) -> Option<(u64, u32)> {
        if !(s.is_finite() && s >= 1.0) {
            return None;
        }
        (0..A_BITS).rev().find_map(|d_exp| {
            // s·2^d is exact, its ceiling too; below 2^47 it converts exactly.
            let a = (s * (1u64 << d_exp) as f64).ceil();
            (a < (1u64 << A_BITS) as f64).then_some((a as u64, d_exp))
        })
    }

    /// A draw's time with `m = 2^e`, about, in ns on one core of a 2-core AVX-512 VM: a
    /// proposal (`k` and, with more than one slot, `j`) costs about 8 (13) and a test 6, a
    /// proposal is in its interval with probability `w/⌈w⌉` and then kept with about
    /// `1.2533m/(1.2533m + 0.5)` (always when `w = 1`: `x = 0`). With `m = 1` the test of `k ≥ 1`
    /// takes several parts ([`accept_power`](Self::accept_power)). A floating-point estimate that
    /// only picks `m`: the law does not depend on it. Its figures predate the usual draw's
    /// shortcut ([`usual`](Self::usual)), which made large scales twice as fast; timed again
    /// after it (every `m`, σ = 3, 100, 10⁴, 1.1·2^20 and 10⁹), the `m` it picks is the fastest
    /// or within 1% of it.
    fn cost(a: u64, d_exp: u32, e: u32) -> f64 {
        let unit = 1u64 << (d_exp + e);
        let w = a as f64 / unit as f64;
        let slots = a.div_ceil(unit);
        let m = (1u64 << e) as f64;
        let inside = w / slots as f64;
        let (kept, test) = if a == unit {
            (1.0, 0.0)
        } else {
            let test = if e == 0 { 30.0 } else { 6.0 };
            (1.2533 * m / (1.2533 * m + 0.5), test)
        };
        let proposals = 1.0 / (inside * kept);
        let proposal = if slots > 1 { 13.0 } else { 8.0 };
        proposals * (proposal + inside * test)
    }

    fn with_parts(a: u64, d_exp: u32, e: u32) -> Self {
        let dm_exp = d_exp + e;
        let slots = a.div_ceil(1u64 << dm_exp);
        let j_bits = if slots == 1 {
            0
        } else {
            (u64::BITS - (slots - 1).leading_zeros() + SPARE).min(64)
        };
        let j_threshold = if j_bits == 0 {
            0
        } else {
            // (2^b mod n)·2^(64-b) < 2^64.
            (((1u128 << j_bits) % slots as u128) << (64 - j_bits)) as u64
        };
        Self {
            a,
            d_exp,
            e,
            m2: 1 << (2 * e),
            dm_exp,
            slots,
            j_bits,
            j_threshold,
            table: Table::get(e),
        }
    }

    #[cfg(test)]
    /// `σ = a/D` as `(a, D)`.
    pub(super) fn scale(&self) -> (u64, u64) {
        (self.a, 1 << self.d_exp)
    }

    #[cfg(test)]
    /// `m`, the number of intervals per `σ`.
    pub(super) fn intervals_per_sigma(&self) -> u64 {
        1 << self.e
    }

    /// One draw, from the next word boundary of the stream on (the unread rest of the word
    /// the last draw ended in is never read). The usual draw ([`usual`](Self::usual)) is
    /// decided by that word alone and consumes it whole, so where the next draw starts does not
    /// wait on this one's arithmetic and the core works on several draws at once; any other
    /// draw runs the algorithm one part at a time from the same bits ([`parts`](Self::parts)).
    /// Either way the value is the algorithm's on the bits from the boundary on, and each draw
    /// ends at a stopping time of the stream, so the draws are independent, each of the exact
    /// law.
    #[inline(always)]
    pub(super) fn sample<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>) -> i64 {
        bits.align();
        let u = bits.peek64();
        if let Some(z) = self
            .table
            .decide(u)
            .and_then(|(k, used)| self.usual(u, k, used))
        {
            bits.skip(64);
            return z;
        }
        self.parts(bits)
    }

    /// The algorithm of the module's notes, one part at a time.
    #[inline(never)]
    fn parts<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>) -> i64 {
        loop {
            let k = self.table.sample(bits);
            let j = bits.uniform(self.slots, self.j_bits, self.j_threshold);
            let (i, n) = self.locate(k, j);
            if n >= self.a || i > i64::MAX as u128 || !self.accept(bits, k, n) {
                continue;
            }
            let negative = bits.bit();
            if i == 0 && negative {
                continue;
            }
            let i = i as i64;
            return if negative { -i } else { i };
        }
    }

    /// The usual draw, decided by the word `u` (the next 64 bits) whose first `used` bits
    /// decide `k`: the next bits give `j` at Lemire's first try, the candidate lies inside its
    /// interval and is kept at once (`x = 0`; or, for `k < m²`, the next `2e + 1` bits give a
    /// `c > 2k`: the first trial of [`accept`](Self::accept) fails), and the next bit is a sign
    /// that is kept. `None` when any of that fails or does not fit in `u` (then
    /// [`parts`](Self::parts) reads the same bits to the same effect). 19 draws in 20 at the DP
    /// scale.
    #[inline(always)]
    fn usual(&self, u: u64, k: u64, used: u32) -> Option<i64> {
        let c_bits = 2 * self.e + 1;
        if used + self.j_bits + c_bits + 1 > 64 {
            return None;
        }
        // `used ≤ 62`, `j_bits ≤ 62` and `1 ≤ c_bits ≤ 13`: the shifts are defined.
        let rest = u << used;
        let j = if self.j_bits == 0 {
            0
        } else {
            lemire(
                rest & !(u64::MAX >> self.j_bits),
                self.slots,
                self.j_threshold,
            )?
        };
        let (i, n) = self.locate(k, j);
        if n >= self.a || i > i64::MAX as u128 {
            return None;
        }
        let tail = rest << self.j_bits;
        let negative = if n == 0 {
            // `x = 0`: kept; the sign next (`-0` rejected).
            tail >> 63 == 1
        } else if k < self.m2 && tail >> (64 - c_bits) > 2 * k {
            (tail >> (63 - c_bits)) & 1 == 1
        } else {
            return None;
        };
        if i == 0 && negative {
            return None;
        }
        let i = i as i64;
        Some(if negative { -i } else { i })
    }

    /// The candidate `i = ⌈k·w⌉ + j` and `n = i·Dm - k·a` (`x = n/a`; `n < Dm + j·Dm`): in `u64`
    /// while `k·a < 2^63` (`k < 2^16`, `a < 2^47`), which the table's `k` always is.
    #[inline]
    fn locate(&self, k: u64, j: u64) -> (u128, u64) {
        if k >= 1 << 16 {
            return self.locate_wide(k, j);
        }
        let ka = k * self.a;
        let first = (ka + (1 << self.dm_exp) - 1) >> self.dm_exp;
        (
            first as u128 + j as u128,
            (first << self.dm_exp) - ka + (j << self.dm_exp),
        )
    }

    /// [`locate`](Self::locate) in `u128`, for any `k`.
    #[inline(never)]
    fn locate_wide(&self, k: u64, j: u64) -> (u128, u64) {
        let ka = k as u128 * self.a as u128;
        let first = (ka + (1u128 << self.dm_exp) - 1) >> self.dm_exp;
        // n0 < Dm, j·Dm < a + Dm < 2^53.
        let n0 = ((first << self.dm_exp) - ka) as u64;
        (first + j as u128, n0 + (j << self.dm_exp))
    }

    /// `Bernoulli(exp(-x(2k + x)/(2m²)))` for `x = n/a < 1`: the `R`-th power of
    /// `Bernoulli(exp(-γ))`, `γ = q·x`, `q = (2k + x)/(2m²·R)`, with `R = 2^r` the least power of
    /// two with `m²·R > k` (so `q < 1`; `R = 1` for `k < m²`): `R` independent draws, all to
    /// succeed.
    #[inline]
    fn accept<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>, k: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        if k >= self.m2 {
            return self.accept_power(bits, k, n);
        }
        self.accept_part(bits, k, n, 2 * self.e + 1)
    }

    /// One `Bernoulli(exp(-q·x))`, `q = (2k + x)/2^c_bits < 1`, by CKS's series:
    /// `Bernoulli(q·x/K) = Bernoulli(q) ∧ Bernoulli(x/K)`, and `Bernoulli(q)` is `c < 2k`, or
    /// `c = 2k` and `Bernoulli(x)`, for `c` uniform in `[0, 2^c_bits)`.
    #[inline(always)]
    fn accept_part<R: Rng + ?Sized>(
        &self,
        bits: &mut Bits<'_, R>,
        k: u64,
        n: u64,
        c_bits: u32,
    ) -> bool {
        let twice_k = 2 * k;
        // CKS's loop (`Bits::alternating_series`), written out: the first trial decides most
        // draws (`c > 2k`).
        let mut t: u64 = 1;
        loop {
            let c = bits.take(c_bits);
            let q = c < twice_k || (c == twice_k && bits.bernoulli(n, self.a));
            if !(q && bits.bernoulli_over(n, self.a, t)) {
                return t % 2 == 1;
            }
            t += 1;
        }
    }

    /// [`accept`](Self::accept) for `k ≥ m²`: `R = 2^r > k/m² ≥ 1` parts of `2e + 1 + r` bits
    /// each (`k < 2^20`: `r ≤ 20`); beyond, [`accept_far`](Self::accept_far).
    #[inline(never)]
    fn accept_power<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>, k: u64, n: u64) -> bool {
        if k >= 1 << 20 {
            return self.accept_far(bits, k, n);
        }
        let r = u64::BITS - (k >> (2 * self.e)).leading_zeros();
        (0..1u64 << r).all(|_| self.accept_part(bits, k, n, 2 * self.e + 1 + r))
    }

    /// [`accept`](Self::accept) for any `k` (here `k ≥ 2^20`): `exp(-k·x/m²)·exp(-x²/(2m²))`.
    #[inline(never)]
    fn accept_far<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>, k: u64, n: u64) -> bool {
        // m²·a < 2^59, 2m²·a < 2^60.
        let m2a = self.m2 * self.a;
        bits.bernoulli_exp(k as u128 * n as u128, m2a)
            && bits.alternating_series(|bits, t| {
                bits.bernoulli(n, self.a) && bits.bernoulli_over(n, 2 * m2a, t)
            })
    }
}
