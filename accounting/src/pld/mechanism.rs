//! Privacy loss of one Poisson-subsampled Gaussian step, and its discretisations.
//!
//! For add/remove-one neighbouring the worst case is a one-dimensional pair of distributions
//! (Zhu, Dong & Wang 2022; Koskela et al. 2020), with `μ = N(0, σ²)`:
//!
//! * **remove**: upper `(1−q)·μ(x) + q·μ(x+1)`, lower `μ(x)`;
//! * **add**: upper `μ(x)`, lower `(1−q)·μ(x) + q·μ(x−1)`.
//!
//! The privacy loss `ln(upper/lower)` is decreasing in `x`; for `q = 1` both directions are the
//! plain Gaussian mechanism. The exact hockey-stick divergence of each pair is
//! `δ(ε) = P_upper(X ≤ x_ε) − e^ε·P_lower(X ≤ x_ε)`, `x_ε` the point where the loss equals ε.

use crate::error::{AccountingError, Result};
use crate::pld::pmf::DensePmf;
use crate::special::{log1m_exp, log_add_exp, log_ndtr, log_ndtri, ndtr};

/// Which of the two worst-case pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Remove,
    Add,
}

/// The privacy loss of one step in one direction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SubsampledGaussianLoss {
    q: f64,
    sigma: f64,
    dir: Direction,
    lq: f64,
    l1q: f64,
}

/// `math.isclose(a, b)` with the default relative tolerance 1e-9.
fn is_close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

impl SubsampledGaussianLoss {
    /// `0 < q ≤ 1`, `σ > 0`.
    pub(crate) fn new(q: f64, sigma: f64, dir: Direction) -> Self {
        Self {
            q,
            sigma,
            dir,
            lq: q.ln(),
            l1q: (-q).ln_1p(),
        }
    }

    /// Loss of the remove pair without subsampling at `x`: `(−½ − x)/σ²`.
    fn loss_wo_remove(&self, x: f64) -> f64 {
        (-0.5 - x) / (self.sigma * self.sigma)
    }

    fn loss_remove(&self, x: f64) -> f64 {
        let w = self.loss_wo_remove(x);
        if self.q == 1.0 {
            w
        } else {
            // ln(q·e^w + 1 − q)
            log_add_exp(self.lq + w, self.l1q)
        }
    }

    /// The privacy loss at `x`.
    pub(crate) fn loss(&self, x: f64) -> f64 {
        match self.dir {
            Direction::Remove => self.loss_remove(x),
            Direction::Add => -self.loss_remove(-x),
        }
    }

    /// The largest `x` whose loss is at least `eps` (inside the loss's range).
    fn inverse_loss(&self, eps: f64) -> f64 {
        let s2 = self.sigma * self.sigma;
        match self.dir {
            Direction::Remove => {
                if self.q == 1.0 {
                    return -0.5 - eps * s2;
                }
                if is_close(eps, self.l1q) {
                    return f64::INFINITY;
                }
                // loss without subsampling: ln((e^ε − (1−q))/q)
                let w = eps + log1m_exp(self.l1q - eps) - self.lq;
                -0.5 - w * s2
            }
            Direction::Add => {
                if self.q == 1.0 {
                    return 0.5 - eps * s2;
                }
                if is_close(eps, -self.l1q) {
                    return f64::NEG_INFINITY;
                }
                // loss without subsampling: −ln((e^{−ε} − (1−q))/q)
                let w = eps - log1m_exp(self.l1q + eps) + self.lq;
                0.5 - w * s2
            }
        }
    }

    /// `P_upper(X ≤ x)`.
    fn upper_cdf(&self, x: f64) -> f64 {
        let s = self.sigma;
        match self.dir {
            Direction::Remove if self.q == 1.0 => ndtr((x + 1.0) / s),
            Direction::Remove => (1.0 - self.q) * ndtr(x / s) + self.q * ndtr((x + 1.0) / s),
            Direction::Add => ndtr(x / s),
        }
    }

    /// `ln P_lower(X ≤ x)`.
    fn lower_log_cdf(&self, x: f64) -> f64 {
        let s = self.sigma;
        match self.dir {
            Direction::Remove => log_ndtr(x / s),
            Direction::Add if self.q == 1.0 => log_ndtr((x - 1.0) / s),
            Direction::Add => log_add_exp(
                self.l1q + log_ndtr(x / s),
                self.lq + log_ndtr((x - 1.0) / s),
            ),
        }
    }

    /// The exact hockey-stick divergence `δ(ε)` of this pair, in `[0, 1]`.
    pub(crate) fn delta_for_epsilon(&self, eps: f64) -> f64 {
        if self.q < 1.0 {
            match self.dir {
                Direction::Remove if eps <= self.l1q => return -eps.exp_m1(),
                Direction::Add if eps >= -self.l1q => return 0.0,
                _ => {}
            }
        }
        let x = self.inverse_loss(eps);
        let d = self.upper_cdf(x) - (eps + self.lower_log_cdf(x)).exp();
        d.clamp(0.0, 1.0)
    }

    /// `x` range outside which `P_upper` has at most `e^{log_mass_truncation_bound}` mass:
    /// `Φ(x/σ) = ½e^b` on each side, shifted by the sensitivity (dp-accounting's
    /// `privacy_loss_tail`).
    fn truncation(&self, log_mass_truncation_bound: f64) -> (f64, f64) {
        let lower = self.sigma * log_ndtri(log_mass_truncation_bound - std::f64::consts::LN_2);
        let upper = -lower;
        match self.dir {
            Direction::Add => (lower, upper + 1.0),
            Direction::Remove => (lower - 1.0, upper),
        }
    }
}

/// Grid indices `[⌊ε_lower/Δ⌋, ⌈ε_upper/Δ⌉]` of the losses over the truncated range, checked
/// against the size limit.
fn grid(
    loss: &SubsampledGaussianLoss,
    discretization: f64,
    log_mass_truncation_bound: f64,
    max_points: usize,
) -> Result<(i64, i64, f64, f64)> {
    let (lower_x, upper_x) = loss.truncation(log_mass_truncation_bound);
    let eps_upper = loss.loss(lower_x);
    let eps_lower = loss.loss(upper_x);
    let hi = (eps_upper / discretization).ceil();
    let lo = (eps_lower / discretization).floor();
    let required = hi - lo + 1.0;
    if !required.is_finite() || required > max_points as f64 || hi.abs() > 1e15 || lo.abs() > 1e15 {
        return Err(AccountingError::PldTooLarge {
            what: "discretising one step",
            required: if required.is_finite() {
                required as u64
            } else {
                u64::MAX
            },
            limit: max_points as u64,
            discretization,
        });
    }
    Ok((lo as i64, hi as i64, lower_x, upper_x))
}

/// Pessimistic connect-the-dots discretisation (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi
/// 2022, arXiv 2207.04380, Alg. 1, fixed-gap form): support `{kΔ}` over the truncated loss
/// range plus `+∞`, with masses chosen so that the discrete PLD's hockey-stick curve is the
/// piecewise-exponential interpolation of the exact one through the grid points — an upper
/// bound on the exact curve at every ε.
pub(crate) fn connect_dots_pmf(
    loss: &SubsampledGaussianLoss,
    discretization: f64,
    log_mass_truncation_bound: f64,
    max_points: usize,
) -> Result<DensePmf> {
    let (lo, hi, _, _) = grid(loss, discretization, log_mass_truncation_bound, max_points)?;
    let n = (hi - lo + 1) as usize;
    let mut deltas: Vec<f64> = (lo..=hi)
        .map(|k| loss.delta_for_epsilon(k as f64 * discretization))
        .collect();
    // δ(ε) is non-increasing; remove roundoff wiggles.
    for i in 1..n {
        if deltas[i] > deltas[i - 1] {
            deltas[i] = deltas[i - 1];
        }
    }
    if n == 1 {
        return Ok(DensePmf::new(lo, vec![1.0 - deltas[0]], deltas[0]));
    }
    let em1 = discretization.exp_m1();
    let e = discretization.exp();
    let diff: Vec<f64> = deltas.windows(2).map(|w| w[1] - w[0]).collect();
    let mut probs = vec![0.0; n];
    probs[0] = 1.0 - deltas[0] + diff[0] / em1;
    for i in 1..n - 1 {
        probs[i] = (diff[i] - diff[i - 1] * e) / em1;
    }
    probs[n - 1] = diff[n - 2] / (-discretization).exp_m1();
    for p in &mut probs {
        *p = p.max(0.0);
    }
    Ok(DensePmf::new(lo, probs, deltas[n - 1]))
}

/// Optimistic "privacy buckets" discretisation (Meiser & Mohammadi 2018): the mass of each
/// `x`-interval whose losses lie in `[kΔ, (k+1)Δ)` goes to `kΔ`, the upper tail's mass to the
/// (rounded-down) loss at the truncation point, the lower tail is dropped. Its hockey-stick
/// curve is a *lower* bound on the exact one — a diagnostic, not a guarantee.
pub(crate) fn optimistic_pmf(
    loss: &SubsampledGaussianLoss,
    discretization: f64,
    log_mass_truncation_bound: f64,
    max_points: usize,
) -> Result<DensePmf> {
    let (lo, _, lower_x, upper_x) =
        grid(loss, discretization, log_mass_truncation_bound, max_points)?;
    let top = (loss.loss(lower_x) / discretization).floor() as i64;
    let upper_x_loss = loss.loss(upper_x);
    let n = (top - lo + 1).max(1) as usize;
    let mut probs = vec![0.0; n];
    probs[n - 1] += loss.upper_cdf(lower_x);
    let (mut x, mut k) = (lower_x, top);
    let mut cdf_x = loss.upper_cdf(x);
    while x < upper_x && k >= lo {
        let next = if discretization * k as f64 <= upper_x_loss {
            upper_x
        } else {
            loss.inverse_loss(discretization * k as f64)
        };
        let cdf_next = loss.upper_cdf(next);
        probs[(k - lo) as usize] += (cdf_next - cdf_x).max(0.0);
        x = next;
        cdf_x = cdf_next;
        k -= 1;
    }
    Ok(DensePmf::new(lo, probs, 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaussian_hockey_stick_matches_closed_form() {
        // q = 1: δ(ε) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ).
        let sigma = 1.3;
        let loss = SubsampledGaussianLoss::new(1.0, sigma, Direction::Remove);
        for &eps in &[0.0, 0.5, 2.0, 5.0] {
            let want =
                ndtr(0.5 / sigma - eps * sigma) - eps.exp() * ndtr(-0.5 / sigma - eps * sigma);
            assert!((loss.delta_for_epsilon(eps) - want).abs() < 1e-15);
        }
    }

    #[test]
    fn loss_inverse_round_trip() {
        for dir in [Direction::Remove, Direction::Add] {
            let loss = SubsampledGaussianLoss::new(0.05, 0.9, dir);
            for &x in &[-3.0, -1.0, 0.0, 0.7, 2.5] {
                let eps = loss.loss(x);
                let back = loss.inverse_loss(eps);
                assert!(
                    (back - x).abs() < 1e-9,
                    "{dir:?} x={x} eps={eps} back={back}"
                );
            }
        }
    }
}
