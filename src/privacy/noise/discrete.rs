//! The exact discrete Gaussian `N_Z(0, σ²)` of Canonne, Kamath and Steinke (2020, "The Discrete
//! Gaussian for Differential Privacy", Algorithms 1–3), in integer arithmetic on `u64`/`u128`
//! from a stream of random bits: no floating point touches a probability.
//!
//! - `Bernoulli(n/d)`: `U < n/d` for a uniform `U ∈ [0, 1)` drawn lazily, up to 16 bits at a
//!   time, compared exactly in `u128` (more bits only when the first ones leave it undecided).
//! - `Bernoulli(exp(-x))`, `x = n/d ≥ 0` (CKS Algorithm 1): `⌊x⌋` draws of `Bernoulli(exp(-1))`,
//!   then for the fraction `f = x - ⌊x⌋` the alternating series: `K ← 1`, while
//!   `Bernoulli(f/K)` succeeds `K ← K + 1`; return `K` odd. (`Bernoulli(f/K)` is drawn as
//!   `Bernoulli(n'/(d·K))`, or as `Bernoulli(f) ∧ Bernoulli(1/K)` when `d·K` does not fit.)
//! - The discrete Laplace with integer scale `t` (CKS Algorithm 2): `U` uniform in `[0, t)`,
//!   kept with probability `exp(-U/t)`; `V` geometric with `P(V ≥ v) = exp(-v)`; `X = U + t·V`;
//!   a fair sign, `-0` rejected.
//! - The discrete Gaussian (CKS Algorithm 3): `t = ⌊σ⌋ + 1`, `Y` discrete Laplace of scale `t`,
//!   kept with probability `exp(-(|Y| - σ²/t)² / (2σ²))`.
//!
//! # Exactness
//! The scale is the rational `σ = a/D` with `D` a power of two and `a·t·D < 2^63`: then every
//! quantity fits, with `B = a·t·D`, `N = | |Y|·t·D² - a² | < 2^127`, `q = ⌊N/B⌋ < 2^63`,
//! `r = N mod B`, and the rejection's exponent is split exactly as
//! `(|Y| - σ²/t)²/(2σ²) = N²/(2B²) = q²/2 + q·r/B + r²/(2B²)` (three exact fractions, three
//! independent Bernoullis whose product is the one wanted; the last, almost always the only one
//! not trivially 1, is drawn in `u64` from `Bernoulli(r/B)` trials: `bernoulli_exp_square`). A requested scale `s ≥ 1` is
//! rounded UP to `σ = ⌈s·D⌉/D` with the largest such `D`, so `s ≤ σ < s·(1 + 2^-29)`; scales
//! up to `3.03·10⁹` (`a·(a+1) < 2^63` at `D = 1`) are accepted.
//!
//! The one departure from the exact law: a Laplace candidate with `|Y| ≥ 2^63` is rejected (it
//! would not fit an `i64`), so the output is `N_Z(0, σ²)` conditioned on `|Z| < 2^63`, an event
//! whose complement has probability below `exp(-2^63)` (`σ² < 2^63`). Reaching such a
//! candidate also takes `2^31` consecutive successes of `Bernoulli(exp(-1))` in the geometric
//! draw.

use rand::Rng;

/// Random bits drawn 64 at a time from `rng`, consumed one at a time.
pub(super) struct Bits<'a, R: Rng + ?Sized> {
    rng: &'a mut R,
    word: u64,
    left: u32,
}

impl<'a, R: Rng + ?Sized> Bits<'a, R> {
    pub(super) fn new(rng: &'a mut R) -> Self {
        Self {
            rng,
            word: 0,
            left: 0,
        }
    }

    #[inline]
    fn bit(&mut self) -> bool {
        if self.left == 0 {
            self.word = self.rng.next_u64();
            self.left = 64;
        }
        let b = self.word & 1 == 1;
        self.word >>= 1;
        self.left -= 1;
        b
    }

    /// `k ≤ 32` uniform bits.
    #[inline]
    fn bits(&mut self, k: u32) -> u64 {
        debug_assert!((1..=32).contains(&k));
        if k > self.left {
            // The leftover bits are dropped: the next word is fresh.
            self.word = self.rng.next_u64();
            self.left = 64;
        }
        let v = self.word & ((1u64 << k) - 1);
        self.word >>= k;
        self.left -= k;
        v
    }

    /// Uniform in `[0, n)`, `1 ≤ n ≤ 2^32`: Lemire's multiply-and-reject on 32 bits
    /// (`(x·n) >> 32` for a uniform `x < 2^32`, the low half below `2^32 mod n` redrawn).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        debug_assert!((1..=1 << 32).contains(&n));
        let threshold = (1u64 << 32) % n;
        loop {
            let m = self.bits(32) * n;
            if (m & 0xffff_ffff) >= threshold {
                return m >> 32;
            }
        }
    }

    /// `Bernoulli(num/den)` for `num ≤ den < 2^127`, `den ≥ 1`: `U < num/den` for a uniform
    /// `U ∈ [0, 1)` whose bits are drawn `k` at a time (`k ≤ 16`, `2^k·den < 2^128`). With
    /// `U ∈ [u, u + 1)·2^-k` the answer is known unless `num·2^k` lies strictly between `u·den`
    /// and `(u + 1)·den` (one `u` in `2^k`); then `U = (u + V)·2^-k` and the question becomes
    /// `V < (num·2^k - u·den)/den`, with fresh bits for `V`.
    #[inline]
    pub(super) fn bernoulli(&mut self, num: u128, den: u128) -> bool {
        debug_assert!((1..1 << 127).contains(&den) && num <= den);
        if num >= den {
            return true;
        }
        let k = (127 - (u128::BITS - den.leading_zeros())).clamp(1, 16);
        let mut num = num;
        loop {
            let below = self.bits(k) as u128 * den;
            let target = num << k;
            let less = below < target;
            if !less || below + den <= target {
                return less;
            }
            num = target - below;
        }
    }

    /// [`bernoulli`](Self::bernoulli) for `num ≤ den < 2^64`, in one `64×64 → 128` product.
    #[inline]
    fn bernoulli64(&mut self, num: u64, den: u64) -> bool {
        debug_assert!(den >= 1 && num <= den);
        if num >= den {
            return true;
        }
        let (mut num, den) = (num as u128, den as u128);
        loop {
            let below = self.bits(16) as u128 * den;
            let target = num << 16;
            let less = below < target;
            if !less || below + den <= target {
                return less;
            }
            num = target - below;
        }
    }

    /// `Bernoulli(exp(-num/den))` for `num ≤ den < 2^127` (CKS Algorithm 1, `γ ∈ [0, 1]`).
    fn bernoulli_exp_frac(&mut self, num: u128, den: u128) -> bool {
        if den <= u64::MAX as u128 {
            return self.bernoulli_exp_frac64(num as u64, den as u64);
        }
        self.alternating_series(|bits, k| {
            let k = k as u128;
            match den.checked_mul(k).filter(|&dk| dk < 1 << 127) {
                Some(dk) => bits.bernoulli(num, dk),
                None => bits.bernoulli(num, den) && bits.bernoulli(1, k),
            }
        })
    }

    /// [`bernoulli_exp_frac`](Self::bernoulli_exp_frac) for `num ≤ den < 2^64`.
    #[inline]
    fn bernoulli_exp_frac64(&mut self, num: u64, den: u64) -> bool {
        self.alternating_series(|bits, k| match den.checked_mul(k) {
            Some(dk) => bits.bernoulli64(num, dk),
            None => bits.bernoulli64(num, den) && bits.bernoulli64(1, k),
        })
    }

    /// `Bernoulli(exp(-r²/(2b²)))` for `r < b < 2^63` (CKS Algorithm 1 with `γ = r²/(2b²) < 1/2`,
    /// in `u64`): each `Bernoulli(γ/K)` is drawn as `Bernoulli(r/b) ∧ Bernoulli(r/(2b·K))`, two
    /// independent trials whose product has that probability, so no `u128` fraction is needed
    /// (`2b·K` that does not fit a `u64` splits off `Bernoulli(1/K)` in turn).
    #[inline]
    fn bernoulli_exp_square(&mut self, r: u64, b: u64) -> bool {
        debug_assert!(r < b && b < 1 << 63);
        let two_b = 2 * b;
        self.alternating_series(|bits, k| {
            bits.bernoulli64(r, b)
                && match two_b.checked_mul(k) {
                    Some(d) => bits.bernoulli64(r, d),
                    None => bits.bernoulli64(r, two_b) && bits.bernoulli64(1, k),
                }
        })
    }

    /// CKS Algorithm 1's loop, the one home of the alternating series behind every
    /// `Bernoulli(exp(-γ))` here (`γ ∈ [0, 1]`): `K ← 1`; while `trial(K)` succeeds, `K ← K + 1`;
    /// true when the final `K` is odd. `trial(K)` must be an independent `Bernoulli(γ/K)`.
    #[inline]
    fn alternating_series(&mut self, mut trial: impl FnMut(&mut Self, u64) -> bool) -> bool {
        let mut k: u64 = 1;
        while trial(self, k) {
            k += 1;
        }
        k % 2 == 1
    }

    /// `Bernoulli(exp(-1))`.
    #[inline]
    fn bernoulli_exp1(&mut self) -> bool {
        self.bernoulli_exp_frac64(1, 1)
    }

    /// `Bernoulli(exp(-num/den))` for any `num` and `1 ≤ den < 2^127` (CKS Algorithm 1).
    pub(super) fn bernoulli_exp(&mut self, num: u128, den: u128) -> bool {
        if num < den {
            // The common case, without a (slow) u128 division.
            return self.bernoulli_exp_frac(num, den);
        }
        let mut whole = num / den;
        while whole > 0 {
            if !self.bernoulli_exp1() {
                return false;
            }
            whole -= 1;
        }
        self.bernoulli_exp_frac(num % den, den)
    }

    /// The discrete Laplace `P(x) ∝ exp(-|x|/t)` for an integer scale `t ≥ 1` (CKS Algorithm 2
    /// with `s = 1`), conditioned on `|x| < 2^63`.
    pub(super) fn discrete_laplace(&mut self, t: u64) -> i64 {
        loop {
            let u = self.below(t);
            if !self.bernoulli_exp_frac64(u, t) {
                continue;
            }
            let mut v: u64 = 0;
            while self.bernoulli_exp1() {
                v = v.saturating_add(1);
            }
            let Some(x) = v
                .checked_mul(t)
                .and_then(|vt| vt.checked_add(u))
                .filter(|&x| x <= i64::MAX as u64)
            else {
                continue;
            };
            let negative = self.bit();
            if negative && x == 0 {
                continue;
            }
            let x = x as i64;
            return if negative { -x } else { x };
        }
    }
}

/// The discrete Gaussian `N_Z(0, σ²)`, `P(z) ∝ exp(-z²/(2σ²))` on the integers, with the
/// rational scale `σ = a/D` (see the module's exactness note).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DiscreteGaussian {
    /// `σ = a/D`.
    a: u64,
    /// A power of two.
    d: u64,
    /// `⌊σ⌋ + 1`: the Laplace proposal's scale.
    t: u64,
    /// `a²`.
    a2: u128,
    /// `t·D²`.
    td2: u128,
    /// `B = a·t·D < 2^63`.
    b: u128,
}

impl DiscreteGaussian {
    /// The discrete Gaussian of scale `σ = ⌈s·D⌉/D ≥ s` with the largest power of two `D` for
    /// which `a·t·D < 2^63`; `None` unless `1 ≤ s` and `s` is small enough (`D = 1` fits:
    /// `s ≤ 3.03·10⁹`).
    pub(super) fn new(s: f64) -> Option<Self> {
        if !(s.is_finite() && s >= 1.0) {
            return None;
        }
        (0..=62).rev().find_map(|e| {
            let d = 1u64 << e;
            // s·2^e is exact; its ceiling too, and it fits a u64 below 2^63.
            let sd = (s * d as f64).ceil();
            if sd >= 2f64.powi(63) {
                return None;
            }
            let a = sd as u64;
            let t = a / d + 1;
            let b = (a as u128)
                .checked_mul(t as u128)?
                .checked_mul(d as u128)
                .filter(|&b| b < 1 << 63)?;
            Some(Self {
                a,
                d,
                t,
                a2: (a as u128) * (a as u128),
                td2: (t as u128) * (d as u128) * (d as u128),
                b,
            })
        })
    }

    /// `σ = a/D` as `(a, D)`.
    #[cfg(test)]
    pub(super) fn scale(&self) -> (u64, u64) {
        (self.a, self.d)
    }

    /// One draw (CKS Algorithm 3).
    pub(super) fn sample<R: Rng + ?Sized>(&self, bits: &mut Bits<'_, R>) -> i64 {
        loop {
            let y = bits.discrete_laplace(self.t);
            // |Y| < 2^63 and t·D² ≤ B < 2^63: the product fits; a² < 2^126.
            let n = (y.unsigned_abs() as u128 * self.td2).abs_diff(self.a2);
            // q ≤ |Y|·D/a ≤ |Y| < 2^63 (a ≥ D since σ ≥ 1), r < B < 2^63.
            let (q, r) = if n < self.b {
                // The exponent is below 1/2: the common case, without a u128 division.
                (0, n)
            } else {
                (n / self.b, n % self.b)
            };
            // r < B < 2^63 (`DiscreteGaussian::new`).
            if bits.bernoulli_exp_square(r as u64, self.b as u64)
                && bits.bernoulli_exp(q * r, self.b)
                && bits.bernoulli_exp(q * q, 2)
            {
                return y;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    /// Frequency of `f` over `n` draws, and whether it is within 5 binomial standard deviations
    /// of `p`.
    fn frequency(n: usize, p: f64, mut f: impl FnMut(&mut Bits<'_, ChaCha20Rng>) -> bool) {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let mut bits = Bits::new(&mut rng);
        let hits = (0..n).filter(|_| f(&mut bits)).count() as f64;
        let tolerance = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-12;
        let got = hits / n as f64;
        assert!(
            (got - p).abs() <= tolerance,
            "frequency {got}, expected {p}"
        );
    }

    #[test]
    fn should_draw_bernoulli_of_a_fraction() {
        for (num, den) in [
            (0u128, 1u128),
            (1, 1),
            (1, 3),
            (2, 3),
            (5, 1 << 40),
            ((1 << 126) / 3, 1 << 126),
        ] {
            let p = num as f64 / den as f64;
            frequency(200_000, p, |b| b.bernoulli(num, den));
        }
    }

    #[test]
    fn should_draw_bernoulli_of_exp() {
        for (num, den) in [
            (0u128, 1u128),
            (1, 2),
            (1, 1),
            (7, 3),
            (5, 1),
            ((1 << 125) + 12345, 1 << 125),
        ] {
            let p = (-(num as f64) / den as f64).exp();
            frequency(200_000, p, |b| b.bernoulli_exp(num, den));
        }
    }

    #[test]
    fn should_draw_bernoulli_of_exp_of_a_half_square() {
        // `2b·K` overflows a u64 from K = 2 on for b ≥ 2^62: the split path.
        let big = (1u64 << 63) - 25;
        for (r, b) in [
            (0u64, 1u64),
            (1, 2),
            (2, 3),
            (999, 1000),
            (1 << 40, 3 << 40),
            (big - 1, big),
            (big / 3, big),
        ] {
            let x = r as f64 / b as f64;
            frequency(200_000, (-x * x / 2.0).exp(), |bits| {
                bits.bernoulli_exp_square(r, b)
            });
        }
    }

    #[test]
    fn should_draw_uniform_below() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let mut bits = Bits::new(&mut rng);
        let mut counts = [0usize; 7];
        for _ in 0..70_000 {
            counts[bits.below(7) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(bits.below(1), 0);
        assert!(bits.below(1 << 32) < 1 << 32);
    }

    #[test]
    fn should_round_the_scale_up_by_less_than_2_to_the_minus_29() {
        for s in [
            1.0,
            1.5,
            10.0,
            4505.6,
            1.1 * 1048576.0,
            1e8,
            3.0e9,
            3_037_000_499.0,
        ] {
            let (a, d) = DiscreteGaussian::new(s).unwrap().scale();
            let sigma = a as f64 / d as f64;
            assert!(a as u128 >= (s * d as f64) as u128, "σ = {a}/{d} < {s}");
            assert!(sigma < s * (1.0 + 2f64.powi(-29)), "σ = {a}/{d} for {s}");
        }
        for s in [0.0, 0.99, f64::NAN, f64::INFINITY, 3_037_000_500.0] {
            assert_eq!(DiscreteGaussian::new(s), None, "{s}");
        }
    }
}
