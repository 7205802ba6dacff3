//! Discretised privacy loss distributions: a probability vector on the grid `{kΔ}` plus a
//! mass at `+∞`, their composition by FFT convolution, and the (ε, δ) they certify.

use crate::error::{AccountingError, Result};
use crate::pld::fft;

/// Probability mass function on losses `(lower + i)·Δ`, `i < probs.len()`, plus `inf_mass`
/// at `+∞` (Δ is held by the owner).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DensePmf {
    pub(crate) lower: i64,
    pub(crate) probs: Vec<f64>,
    pub(crate) inf_mass: f64,
}

fn too_large(
    what: &'static str,
    required: f64,
    max_points: usize,
    discretization: f64,
) -> AccountingError {
    AccountingError::PldTooLarge {
        what,
        required: if required.is_finite() && required < u64::MAX as f64 {
            required as u64
        } else {
            u64::MAX
        },
        limit: max_points as u64,
        discretization,
    }
}

impl DensePmf {
    pub(crate) fn new(lower: i64, probs: Vec<f64>, inf_mass: f64) -> Self {
        Self {
            lower,
            probs,
            inf_mass,
        }
    }

    /// The PLD of a mechanism that reveals nothing: all mass at loss 0.
    pub(crate) fn identity() -> Self {
        Self::new(0, vec![1.0], 0.0)
    }

    fn is_identity(&self) -> bool {
        self.lower == 0 && self.probs == [1.0] && self.inf_mass == 0.0
    }

    /// Drops up to `tail/2` of mass from each end: pessimistically the low end's mass moves to
    /// the first kept point and the high end's to `+∞`; optimistically the high end's mass
    /// moves to the last kept point and the low end's is dropped.
    pub(crate) fn truncate_tails(mut self, tail: f64, pessimistic: bool) -> Self {
        let n = self.probs.len();
        if tail == 0.0 || n == 0 {
            return self;
        }
        let half = tail / 2.0;
        let prefix = |it: &mut dyn Iterator<Item = &f64>| -> usize {
            let mut s = 0.0;
            for (i, &v) in it.enumerate() {
                s += v;
                if s > half {
                    return i;
                }
            }
            n
        };
        let left = prefix(&mut self.probs.iter()).min(n - 1);
        let right = (n - prefix(&mut self.probs.iter().rev()))
            .max(left + 1)
            .min(n);
        let left_mass: f64 = self.probs[..left].iter().sum();
        let right_mass: f64 = self.probs[right..].iter().sum();
        self.probs.truncate(right);
        self.probs.drain(..left);
        if pessimistic {
            self.probs[0] += left_mass;
            self.inf_mass += right_mass;
        } else {
            let last = self.probs.len() - 1;
            self.probs[last] += right_mass;
        }
        self.lower += left as i64;
        self
    }

    /// Composition with another PMF on the same grid: linear convolution, then tail truncation.
    pub(crate) fn compose(
        &self,
        other: &DensePmf,
        tail: f64,
        pessimistic: bool,
        max_points: usize,
        discretization: f64,
    ) -> Result<DensePmf> {
        if self.is_identity() || other.is_identity() {
            let base = if self.is_identity() { other } else { self };
            return Ok(base.clone().truncate_tails(tail, pessimistic));
        }
        let len = self.probs.len() + other.probs.len() - 1;
        if fft::next_fast_len(len) > max_points {
            return Err(too_large(
                "composing",
                len as f64,
                max_points,
                discretization,
            ));
        }
        let probs = fft::convolve(&self.probs, &other.probs);
        let inf_mass = if pessimistic {
            self.inf_mass + other.inf_mass - self.inf_mass * other.inf_mass
        } else {
            0.0
        };
        Ok(DensePmf::new(self.lower + other.lower, probs, inf_mass)
            .truncate_tails(tail, pessimistic))
    }

    /// `times`-fold self-composition by one FFT: the output window is cut to where the Chernoff
    /// bound leaves at most `tail` of mass outside (dp-accounting's `self_convolve`); that mass
    /// is counted at `+∞` when pessimistic.
    pub(crate) fn self_compose(
        &self,
        times: u64,
        tail: f64,
        pessimistic: bool,
        max_points: usize,
        discretization: f64,
    ) -> Result<DensePmf> {
        let n = self.probs.len();
        let t = times as f64;
        let (lo, hi) = chernoff_window(&self.probs, t, tail);
        let out_len = hi - lo + 1.0;
        let fft_len = out_len.max(n as f64);
        if fft_len > max_points as f64 {
            return Err(too_large("composing", fft_len, max_points, discretization));
        }
        let fast = fft::next_fast_len(fft_len as usize);
        if fast > max_points {
            return Err(too_large(
                "composing",
                fast as f64,
                max_points,
                discretization,
            ));
        }
        let mut probs = fft::self_convolve_circular(&self.probs, times, fast);
        let (lo, out_len) = (lo as i64, out_len as usize);
        // Window [lo, lo + out_len) of the circular result.
        probs.rotate_left(lo.rem_euclid(fast as i64) as usize);
        probs.truncate(out_len);
        let inf_mass = if pessimistic {
            tail - (t * (-self.inf_mass).ln_1p()).exp_m1()
        } else {
            0.0
        };
        let lower = self.lower.saturating_mul(times as i64).saturating_add(lo);
        Ok(DensePmf::new(lower, probs, inf_mass))
    }

    /// The smallest ε ≥ 0 whose hockey-stick divergence is at most `delta` (∞ when the mass at
    /// `+∞` exceeds δ). Scans losses downwards keeping `Σ p` and `Σ p·e^{−loss}` over the losses
    /// above ε: `δ(ε) = m_upper − e^ε·m_lower`.
    pub(crate) fn epsilon_for_delta(&self, discretization: f64, delta: f64) -> f64 {
        if self.inf_mass > delta {
            return f64::INFINITY;
        }
        let (mut upper, mut lower) = (self.inf_mass, 0.0f64);
        for (i, &p) in self.probs.iter().enumerate().rev() {
            let loss = (self.lower + i as i64) as f64 * discretization;
            if upper > delta && lower > 0.0 && ((upper - delta) / lower).ln() >= loss {
                break;
            }
            upper += p;
            let w = (-loss).exp() * p;
            if w.is_finite() {
                lower += w;
            } else if p > 0.0 {
                lower = f64::INFINITY;
            }
            if upper >= delta && lower == 0.0 {
                return loss.max(0.0);
            }
        }
        if upper <= lower + delta {
            return 0.0;
        }
        ((upper - delta) / lower).ln()
    }

    /// The hockey-stick divergence at `epsilon`: `m_∞ + Σ_{loss > ε} (1 − e^{ε−loss})·p`.
    pub(crate) fn delta_for_epsilon(&self, discretization: f64, epsilon: f64) -> f64 {
        if epsilon == f64::INFINITY {
            return self.inf_mass;
        }
        let mut delta = self.inf_mass;
        for (i, &p) in self.probs.iter().enumerate().rev() {
            let loss = (self.lower + i as i64) as f64 * discretization;
            if loss <= epsilon {
                break;
            }
            delta += -(epsilon - loss).exp_m1() * p;
        }
        delta.clamp(0.0, 1.0)
    }
}

/// Index window `[lo, hi]` (relative to `times·lower`) holding all but `tail` of the mass of
/// the `times`-fold convolution of `probs`, from the Chernoff bound at the orders `±j/len`,
/// `j = 1…20`.
fn chernoff_window(probs: &[f64], times: f64, tail: f64) -> (f64, f64) {
    let n = probs.len();
    let mut hi = (n - 1) as f64 * times;
    let mut lo = 0.0f64;
    if tail == 0.0 {
        return (lo, hi);
    }
    let log_2_over_tail = (2.0 / tail).ln();
    for j in (-20i32..=20).filter(|&j| j != 0) {
        let lambda = j as f64 / n as f64;
        // Σ pᵢ e^{iλ}; |iλ| ≤ 20 so no overflow. Powers by recurrence, re-anchored every 256.
        let step = lambda.exp();
        let mut mgf = 0.0;
        let mut w = 1.0;
        for (i, &p) in probs.iter().enumerate() {
            if i % 256 == 0 {
                w = (i as f64 * lambda).exp();
            }
            mgf += p.max(0.0) * w;
            w *= step;
        }
        let bound = (times * mgf.ln() + log_2_over_tail) / lambda;
        if !bound.is_finite() {
            continue;
        }
        if j > 0 {
            hi = hi.min(bound.ceil());
        } else {
            lo = lo.max(bound.floor());
        }
    }
    (lo, hi.max(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_certifies_zero() {
        let id = DensePmf::identity();
        assert_eq!(id.epsilon_for_delta(1e-4, 1e-5), 0.0);
        assert_eq!(id.delta_for_epsilon(1e-4, 0.0), 0.0);
    }

    #[test]
    fn randomized_response_epsilon() {
        // Losses ±1 with masses e/(1+e), 1/(1+e): pure ε = 1 (δ(ε) = 0 for ε ≥ 1).
        let e1 = 1f64.exp();
        let pmf = DensePmf::new(-1, vec![1.0 / (1.0 + e1), 0.0, e1 / (1.0 + e1)], 0.0);
        assert!((pmf.epsilon_for_delta(1.0, 0.0) - 1.0).abs() < 1e-12);
        assert!(pmf.delta_for_epsilon(1.0, 1.0).abs() < 1e-15);
        let d = pmf.delta_for_epsilon(1.0, 0.5);
        assert!((pmf.epsilon_for_delta(1.0, d) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn self_compose_matches_repeated_compose() {
        let p = DensePmf::new(-2, vec![0.1, 0.2, 0.3, 0.25, 0.15], 1e-6);
        let fast = p.self_compose(6, 0.0, true, 1 << 20, 0.1).unwrap();
        let mut slow = p.clone();
        for _ in 1..6 {
            slow = slow.compose(&p, 0.0, true, 1 << 20, 0.1).unwrap();
        }
        assert_eq!(fast.lower, slow.lower);
        for (a, b) in fast.probs.iter().zip(&slow.probs) {
            assert!((a - b).abs() < 1e-14);
        }
        assert!((fast.inf_mass - slow.inf_mass).abs() < 1e-18);
    }
}
