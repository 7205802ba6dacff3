//! Noise calibration: the smallest noise multiplier σ that meets an (ε, δ) budget.

use crate::error::{check_delta, check_range, AccountingError, Result};
use crate::event::{check_count, Accountant, PoissonGaussian};
use crate::{PldAccountant, RdpAccountant};

/// Which accountant (with default settings) [`calibrate_noise_multiplier`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountantKind {
    /// [`RdpAccountant::new`] (default orders).
    Rdp,
    /// [`PldAccountant::new`] (Δ = 1e-4).
    Pld,
    /// [`RdpAccountant::discrete_gaussian`]: the Poisson-subsampled discrete Gaussian (Zhu &
    /// Wang's bound, integer orders).
    RdpDiscreteGaussian,
}

/// The smallest noise multiplier σ (within `tolerance`) such that `steps` Poisson-subsampled
/// Gaussian steps at rate `sampling_rate` satisfy `(target_epsilon, delta)`-DP under the
/// accountant `kind`. The returned σ always meets the target (ε(σ) ≤ target_epsilon), and
/// `σ − tolerance` does not (up to the accountant's own monotonicity).
///
/// ```
/// use burn_vmap_accounting::{calibrate_noise_multiplier, AccountantKind, PoissonGaussian, RdpAccountant};
///
/// let sigma = calibrate_noise_multiplier(1.0, 1e-5, 0.01, 1000, AccountantKind::Rdp, 1e-6)?;
/// assert!((sigma - 1.5131).abs() < 1e-3, "{sigma}"); // dp-accounting: 1.51312
/// let mut acc = RdpAccountant::new();
/// acc.compose(PoissonGaussian::new(0.01, sigma)?, 1000)?;
/// assert!(acc.epsilon(1e-5)? <= 1.0);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn calibrate_noise_multiplier(
    target_epsilon: f64,
    delta: f64,
    sampling_rate: f64,
    steps: u64,
    kind: AccountantKind,
    tolerance: f64,
) -> Result<f64> {
    let calibration =
        NoiseCalibration::new(target_epsilon, delta, sampling_rate, steps)?.tolerance(tolerance)?;
    match kind {
        AccountantKind::Rdp => calibration.run(&RdpAccountant::new()),
        AccountantKind::Pld => calibration.run(&PldAccountant::new()),
        AccountantKind::RdpDiscreteGaussian => calibration.run(&RdpAccountant::discrete_gaussian()),
    }
}

/// A calibration request, for any accountant configuration (custom orders, another Δ) and an
/// optional explicit search bracket.
///
/// ```
/// use burn_vmap_accounting::{NoiseCalibration, PldAccountant};
///
/// let pld = PldAccountant::with_discretization(1e-3)?;
/// let sigma = NoiseCalibration::new(3.0, 1e-5, 0.01, 1000)?
///     .tolerance(1e-3)?
///     .bracket(0.5, 2.0)?
///     .run(&pld)?;
/// assert!(sigma > 0.7 && sigma < 1.0, "{sigma}");
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseCalibration {
    target_epsilon: f64,
    delta: f64,
    sampling_rate: f64,
    steps: u64,
    tolerance: f64,
    bracket: Option<(f64, f64)>,
}

impl NoiseCalibration {
    /// Target `(target_epsilon ≥ 0, δ ∈ [0, 1))` after `steps ≥ 1` steps at rate
    /// `sampling_rate ∈ [0, 1]`; tolerance 1e-6, bracket searched from σ = 1.
    pub fn new(target_epsilon: f64, delta: f64, sampling_rate: f64, steps: u64) -> Result<Self> {
        check_range(
            "target_epsilon",
            "a finite number >= 0",
            target_epsilon,
            0.0,
            f64::MAX,
        )?;
        check_delta(delta)?;
        check_range(
            "sampling_rate",
            "a number in [0, 1]",
            sampling_rate,
            0.0,
            1.0,
        )?;
        let steps = check_count(steps).map_err(|_| AccountingError::InvalidCount {
            name: "steps",
            expected: "a positive number of steps",
            actual: steps,
        })?;
        Ok(Self {
            target_epsilon,
            delta,
            sampling_rate,
            steps,
            tolerance: 1e-6,
            bracket: None,
        })
    }

    /// Absolute tolerance on σ (`> 0`, finite).
    pub fn tolerance(mut self, tolerance: f64) -> Result<Self> {
        self.tolerance = check_range(
            "tolerance",
            "a finite number > 0",
            tolerance,
            f64::MIN_POSITIVE,
            f64::MAX,
        )?;
        Ok(self)
    }

    /// Search σ in `[lower, upper]` (`0 ≤ lower < upper`) instead of bracketing from σ = 1.
    pub fn bracket(mut self, lower: f64, upper: f64) -> Result<Self> {
        check_range(
            "bracket lower",
            "a finite number >= 0",
            lower,
            0.0,
            f64::MAX,
        )?;
        check_range(
            "bracket upper",
            "a finite number > the lower end",
            upper,
            lower + f64::MIN_POSITIVE,
            f64::MAX,
        )?;
        self.bracket = Some((lower, upper));
        Ok(self)
    }

    /// Runs the search with copies of `template` (events already in it are kept, so a partly
    /// spent budget can be topped up).
    pub fn run<A: Accountant + Clone>(&self, template: &A) -> Result<f64> {
        let gap = |sigma: f64| -> Result<f64> {
            let mut acc = template.clone();
            acc.compose(PoissonGaussian::new(self.sampling_rate, sigma)?, self.steps)?;
            Ok(acc.epsilon(self.delta)? - self.target_epsilon)
        };
        let unreachable = |sigma: f64, g: f64| AccountingError::TargetUnreachable {
            target_epsilon: self.target_epsilon,
            delta: self.delta,
            largest_noise_multiplier: sigma,
            epsilon_at_largest: g + self.target_epsilon,
        };
        if self.sampling_rate == 0.0 {
            // σ does not matter: the steps touch no data.
            let g = gap(0.0)?;
            return if g <= 0.0 {
                Ok(0.0)
            } else {
                Err(unreachable(0.0, g))
            };
        }
        // Invariant: gap(lo) > 0 ≥ gap(hi).
        let (mut lo, mut g_lo, mut hi, mut g_hi);
        if let Some((a, b)) = self.bracket {
            g_hi = gap(b)?;
            if g_hi > 0.0 {
                return Err(unreachable(b, g_hi));
            }
            g_lo = gap(a)?;
            if g_lo <= 0.0 {
                return Ok(a);
            }
            (lo, hi) = (a, b);
        } else {
            let g1 = gap(1.0)?;
            if g1 <= 0.0 {
                (hi, g_hi) = (1.0, g1);
                (lo, g_lo) = (0.0, f64::INFINITY);
                let mut s = 0.5;
                while s >= f64::powi(2.0, -30) {
                    let g = gap(s)?;
                    if g > 0.0 {
                        (lo, g_lo) = (s, g);
                        break;
                    }
                    (hi, g_hi) = (s, g);
                    s /= 2.0;
                }
            } else {
                (lo, g_lo) = (1.0, g1);
                let mut s = 2.0;
                loop {
                    let g = gap(s)?;
                    if g <= 0.0 {
                        (hi, g_hi) = (s, g);
                        break;
                    }
                    if s >= f64::powi(2.0, 30) {
                        return Err(unreachable(s, g));
                    }
                    (lo, g_lo) = (s, g);
                    s *= 2.0;
                }
            }
        }
        let tol = self.tolerance;
        let mut last_width = f64::INFINITY;
        while hi - lo > tol {
            let width = hi - lo;
            // Regula falsi on the bracket, falling back to bisection when it stalls.
            let mut x = if g_lo.is_finite() && g_hi.is_finite() && width < 0.5 * last_width {
                hi - g_hi * (hi - lo) / (g_hi - g_lo)
            } else {
                0.5 * (lo + hi)
            };
            let margin = 0.25 * tol.min(width);
            x = x.clamp(lo + margin, hi - margin);
            last_width = width;
            let g = gap(x)?;
            if g > 0.0 {
                (lo, g_lo) = (x, g);
                // The root is likely just above x: try to close the bracket in one step.
                let probe = x + 0.9 * tol;
                if probe < hi && hi - lo > tol {
                    let gp = gap(probe)?;
                    if gp <= 0.0 {
                        (hi, g_hi) = (probe, gp);
                    } else {
                        (lo, g_lo) = (probe, gp);
                    }
                }
            } else {
                (hi, g_hi) = (x, g);
                let probe = x - 0.9 * tol;
                if probe > lo && hi - lo > tol {
                    let gp = gap(probe)?;
                    if gp > 0.0 {
                        (lo, g_lo) = (probe, gp);
                    } else {
                        (hi, g_hi) = (probe, gp);
                    }
                }
            }
        }
        Ok(hi)
    }
}
