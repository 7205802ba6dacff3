//! Interval arithmetic on natural numbers, for the law of `k`: brackets of
//! `E^{i²}·2^p`, `E = exp(-1/(2m²))`, their partial sums and total, and the exact inversion
//! of the CDF at a lazily drawn uniform.

use super::*;
use std::cmp::Ordering;

/// A natural number: little-endian 64-bit limbs, no high zero limb.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Nat(Vec<u64>);

impl Nat {
    pub(super) fn zero() -> Self {
        Nat(Vec::new())
    }

    pub(super) fn from_u64(v: u64) -> Self {
        let mut n = Nat(vec![v]);
        n.trim();
        n
    }

    #[cfg(test)]
    pub(super) fn from_u128(v: u128) -> Self {
        let mut n = Nat(vec![v as u64, (v >> 64) as u64]);
        n.trim();
        n
    }

    #[cfg(test)]
    pub(super) fn to_u128(&self) -> u128 {
        assert!(self.0.len() <= 2);
        self.0
            .iter()
            .rev()
            .fold(0u128, |acc, &l| (acc << 64) | l as u128)
    }

    /// The value, rounded (for tests).
    #[cfg(test)]
    pub(super) fn to_f64(&self) -> f64 {
        self.0
            .iter()
            .rev()
            .fold(0.0, |acc, &l| acc * 2f64.powi(64) + l as f64)
    }

    /// `2^e`.
    pub(super) fn pow2(e: u32) -> Self {
        let mut limbs = vec![0; (e / 64) as usize + 1];
        *limbs.last_mut().unwrap() = 1 << (e % 64);
        Nat(limbs)
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    pub(super) fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn add(&self, o: &Nat) -> Nat {
        let (long, short) = if self.0.len() >= o.0.len() {
            (self, o)
        } else {
            (o, self)
        };
        let mut out = Vec::with_capacity(long.0.len() + 1);
        let mut carry = false;
        for (i, &l) in long.0.iter().enumerate() {
            let (s, c1) = l.overflowing_add(short.0.get(i).copied().unwrap_or(0));
            let (s, c2) = s.overflowing_add(carry as u64);
            out.push(s);
            carry = c1 || c2;
        }
        if carry {
            out.push(1);
        }
        Nat(out)
    }

    /// `self - o`, `o ≤ self`.
    pub(super) fn sub(&self, o: &Nat) -> Nat {
        assert!(*o <= *self, "negative difference");
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = false;
        for (i, &l) in self.0.iter().enumerate() {
            let (d, b1) = l.overflowing_sub(o.0.get(i).copied().unwrap_or(0));
            let (d, b2) = d.overflowing_sub(borrow as u64);
            out.push(d);
            borrow = b1 || b2;
        }
        let mut n = Nat(out);
        n.trim();
        n
    }

    pub(super) fn mul(&self, o: &Nat) -> Nat {
        if self.is_zero() || o.is_zero() {
            return Nat::zero();
        }
        let mut out = vec![0u64; self.0.len() + o.0.len()];
        for (i, &x) in self.0.iter().enumerate() {
            let mut carry = 0u128;
            for (j, &y) in o.0.iter().enumerate() {
                // ≤ (2^64 - 1)² + 2·(2^64 - 1) = 2^128 - 1.
                let t = x as u128 * y as u128 + out[i + j] as u128 + carry;
                out[i + j] = t as u64;
                carry = t >> 64;
            }
            out[i + o.0.len()] = carry as u64;
        }
        let mut n = Nat(out);
        n.trim();
        n
    }

    pub(super) fn mul_small(&self, v: u64) -> Nat {
        self.mul(&Nat::from_u64(v))
    }

    /// `⌊self/v⌋`, `v ≥ 1`.
    pub(super) fn div_small(&self, v: u64) -> Nat {
        let mut out = vec![0u64; self.0.len()];
        let mut rem = 0u128;
        for i in (0..self.0.len()).rev() {
            let cur = (rem << 64) | self.0[i] as u128;
            out[i] = (cur / v as u128) as u64;
            rem = cur % v as u128;
        }
        let mut n = Nat(out);
        n.trim();
        n
    }

    pub(super) fn shl(&self, s: u32) -> Nat {
        if self.is_zero() {
            return Nat::zero();
        }
        let (limbs, bits) = ((s / 64) as usize, s % 64);
        let mut out = vec![0u64; limbs];
        let mut carry = 0u64;
        for &l in &self.0 {
            out.push((l << bits) | carry);
            carry = if bits == 0 { 0 } else { l >> (64 - bits) };
        }
        out.push(carry);
        let mut n = Nat(out);
        n.trim();
        n
    }

    /// `⌊self/2^s⌋`.
    pub(super) fn shr(&self, s: u32) -> Nat {
        let (limbs, bits) = ((s / 64) as usize, s % 64);
        if limbs >= self.0.len() {
            return Nat::zero();
        }
        let src = &self.0[limbs..];
        let mut out = Vec::with_capacity(src.len());
        for i in 0..src.len() {
            let high = if bits == 0 {
                0
            } else {
                src.get(i + 1).copied().unwrap_or(0) << (64 - bits)
            };
            out.push((src[i] >> bits) | high);
        }
        let mut n = Nat(out);
        n.trim();
        n
    }

    /// `⌈self/2^s⌉`.
    pub(super) fn shr_ceil(&self, s: u32) -> Nat {
        let floor = self.shr(s);
        if floor.shl(s) == *self {
            floor
        } else {
            floor.add(&Nat::from_u64(1))
        }
    }
}

impl Ord for Nat {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&o.0.len())
            .then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }
}

impl PartialOrd for Nat {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// `min(⌊x/y⌋, 2^64 - 1)`, `y ≥ 1`.
pub(super) fn quotient_u64(x: &Nat, y: &Nat) -> u64 {
    if y.shl(64) <= *x {
        return u64::MAX;
    }
    let mut q = 0u64;
    for bit in (0..64).rev() {
        let candidate = q | 1 << bit;
        if y.mul_small(candidate) <= *x {
            q = candidate;
        }
    }
    q
}

/// `[lower, upper]` bounds of a product of `2^p`-scaled numbers given bounds of both.
fn product(x: &[Nat; 2], y: &[Nat; 2], p: u32) -> [Nat; 2] {
    [x[0].mul(&y[0]).shr(p), x[1].mul(&y[1]).shr_ceil(p)]
}

/// Brackets, scaled by `2^p`, of `E^{k²}` and of the partial sums `C_k = Σ_{i≤k} E^{i²}`
/// (`cum`), and of the total `S = Σ_{i≥0} E^{i²}` (`s`), `E = exp(-1/(2m²))`, `m = 2^e`.
#[derive(Clone, Debug)]
pub(super) struct Curve {
    pub(super) e: u32,
    pub(super) p: u32,
    /// `E²`.
    e2: [Nat; 2],
    /// `E^{k²}` and `E^{2k+1}` for the next `k = cum.len()`.
    w: [Nat; 2],
    g: [Nat; 2],
    pub(super) cum: Vec<[Nat; 2]>,
    pub(super) s: [Nat; 2],
}

impl Curve {
    pub(super) fn new(e: u32, p: u32) -> Curve {
        // E·2^p from exp(-1/q) = Σ (-1/q)^n/n!, q = 2m² ≥ 2: the terms T_n = ⌊T_{n-1}/(q·n)⌋
        // (T_0 = 2^p) are below the exact τ_n by less than 2 (δ_n ≤ δ_{n-1}/(q·n) + 1 ≤
        // δ_{n-1}/2 + 1); with T_N the last non-zero one, the alternating tail is at most
        // τ_{N+1} < T_{N+1} + 2 = 2: the sum A is within 2N + 2 of E·2^p.
        let q = 2u64 << (2 * e);
        let mut term = Nat::pow2(p);
        let (mut even, mut odd) = (term.clone(), Nat::zero());
        let mut n = 0u64;
        loop {
            n += 1;
            term = term.div_small(q * n);
            if term.is_zero() {
                break;
            }
            if n % 2 == 1 {
                odd = odd.add(&term);
            } else {
                even = even.add(&term);
            }
        }
        let sum = even.sub(&odd);
        let err = Nat::from_u64(2 * n + 2);
        let exp = [sum.sub(&err), sum.add(&err)];
        let e2 = product(&exp, &exp, p);
        let one = Nat::pow2(p);
        let mut curve = Curve {
            e,
            p,
            e2,
            w: [one.clone(), one],
            g: exp,
            cum: Vec::new(),
            s: [Nat::zero(), Nat::zero()],
        };
        // S: the terms up to K, plus Σ_{k>K} E^{k²} ≤ ∫_K^∞ e^{-x²/(2m²)} dx ≤ (m²/K)·E^{K²}
        // (decreasing terms; x/K ≥ 1 under the integral), K ≥ 1.
        let m2 = 1u64 << (2 * e);
        let tail = loop {
            let k = curve.cum.len() as u64;
            let w_hi = curve.w[1].clone();
            curve.push();
            if k >= 1 {
                let tail = w_hi.mul_small(m2.div_ceil(k));
                if tail <= Nat::from_u64(1 << 10) {
                    break tail;
                }
            }
        };
        let last = curve.cum.last().unwrap();
        curve.s = [last[0].clone(), last[1].add(&tail)];
        curve
    }

    fn push(&mut self) {
        let next = match self.cum.last() {
            Some(c) => [c[0].add(&self.w[0]), c[1].add(&self.w[1])],
            None => self.w.clone(),
        };
        self.cum.push(next);
        // E^{(k+1)²} = E^{k²}·E^{2k+1}, E^{2k+3} = E^{2k+1}·E².
        self.w = product(&self.w, &self.g, self.p);
        self.g = product(&self.g, &self.e2, self.p);
    }

    /// `cum` up to `k`.
    pub(super) fn extend_to(&mut self, k: usize) {
        while self.cum.len() <= k {
            self.push();
        }
    }
}

/// The least `k` with `U < F_k = C_k/S`, for `U ∈ [π, π + 1)·2^-t` with `π = prefix` so
/// far; `more()` gives the next 64 bits of `U`. Brackets of `curve`'s precision are used
/// while `U` is known to more bits than they have, then recomputed at twice the precision.
pub(super) fn invert(
    curve: &Curve,
    mut prefix: Nat,
    mut t: u32,
    mut more: impl FnMut() -> u64,
) -> u64 {
    let mut curve = Cow::Borrowed(curve);
    let one = Nat::from_u64(1);
    let mut k = 0usize;
    loop {
        if k >= curve.cum.len() {
            curve.to_mut().extend_to(k);
        }
        let [c_lo, c_hi] = &curve.cum[k];
        // U ≥ π·2^-t ≥ C_hi/S_lo ≥ F_k.
        if prefix.mul(&curve.s[0]) >= c_hi.shl(t) {
            k += 1;
            continue;
        }
        // U < (π + 1)·2^-t ≤ C_lo/S_hi ≤ F_k.
        if prefix.add(&one).mul(&curve.s[1]) <= c_lo.shl(t) {
            return k as u64;
        }
        if t < curve.p {
            prefix = prefix.shl(64).add(&Nat::from_u64(more()));
            t += 64;
        } else {
            curve = Cow::Owned(Curve::new(curve.e, 2 * curve.p));
        }
    }
}
