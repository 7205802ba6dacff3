//! The privacy-loss-distribution (PLD) accountant of the Poisson-subsampled Gaussian mechanism.
//!
//! Same semantics as dp-accounting's `PLDAccountant` (Google, 0.6.0):
//! `from_gaussian_mechanism(σ, sampling_prob = q, pessimistic_estimate = True,
//! value_discretization_interval = Δ, log_mass_truncation_bound = −50, use_connect_dots = True)`,
//! `self_compose(T, tail_mass_truncation = 1e-15)` by FFT, pairwise composition of different
//! steps with tail truncation 1e-15, and `get_epsilon_for_delta` as the maximum over the add and
//! remove directions. Background: Koskela, Jälkö & Honkela 2020 (PLD + FFT accounting);
//! Doroshenko et al. 2022, arXiv 2207.04380 (connect-the-dots); dp-accounting's
//! "Privacy Loss Distributions" notes (Chernoff-bounded self-convolution).
//!
//! The accountant is lazy: [`PldAccountant::compose`] records `(event, count)`, grouping equal
//! events; the discretisation and FFTs run on the first ε/δ query and are cached until the
//! next `compose`.

mod fft;
mod mechanism;
mod pmf;

use std::sync::{Arc, OnceLock};

use crate::error::{check_delta, check_epsilon, check_range, Result};
use crate::event::push_group;
use crate::event::{check_count, Accountant, PoissonGaussian};
use crate::statement::{AccountantDescription, PrivacyStatement, StepGroup};
use mechanism::{Direction, SubsampledGaussianLoss};
use pmf::DensePmf;

/// Default discretization interval Δ of the privacy loss (dp-accounting's default).
pub const DEFAULT_DISCRETIZATION: f64 = 1e-4;
/// Default limit on the grid points of one distribution (`2²⁶`: ~0.5 GiB per vector; the
/// largest grid case, q = 0.256, σ = 0.5, 10 000 steps at Δ = 1e-4, needs ~3.5·10⁷).
pub const DEFAULT_MAX_POINTS: usize = 1 << 26;
const LOG_MASS_TRUNCATION_BOUND: f64 = -50.0;
const TAIL_MASS_TRUNCATION: f64 = 1e-15;

/// Which side the discretisation errs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Estimate {
    /// Upper bound on δ(ε) (and so on ε): connect-the-dots, truncated mass counted at `+∞`. The
    /// only kind that is a privacy guarantee.
    #[default]
    Pessimistic,
    /// Lower bound on δ(ε): privacy buckets rounded down, truncated mass dropped. For
    /// diagnostics (how tight the pessimistic estimate is), never a guarantee.
    Optimistic,
}

/// Both directions' composed distributions (`add = None`: same as `remove`, the `q = 1` case).
#[derive(Debug)]
struct Composed {
    remove: DensePmf,
    add: Option<DensePmf>,
}

/// Privacy-loss-distribution accountant for DP-SGD (Poisson-subsampled Gaussian steps,
/// add/remove-one neighbouring). Tighter than RDP, at the cost of FFTs over a grid of
/// `range/Δ` points.
///
/// ```
/// use burn_vmap_accounting::{PldAccountant, PoissonGaussian};
///
/// let mut acc = PldAccountant::with_discretization(1e-3)?;
/// acc.compose(PoissonGaussian::new(0.01, 4.0)?, 10_000)?;
/// let eps = acc.epsilon(1e-5)?; // dp-accounting at Δ = 1e-4: 0.9470; coarser Δ, larger ε
/// assert!(eps >= 0.947 && eps < 0.97, "{eps}");
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PldAccountant {
    discretization: f64,
    max_points: usize,
    estimate: Estimate,
    /// Distinct private events (q > 0, σ > 0) with their counts, in first-seen order.
    groups: Vec<(PoissonGaussian, u64)>,
    non_private: bool,
    steps: u64,
    history: Vec<StepGroup>,
    cache: OnceLock<Result<Arc<Composed>>>,
}

impl Default for PldAccountant {
    fn default() -> Self {
        Self::new()
    }
}

impl PldAccountant {
    /// An empty accountant with Δ = [`DEFAULT_DISCRETIZATION`].
    pub fn new() -> Self {
        Self {
            discretization: DEFAULT_DISCRETIZATION,
            max_points: DEFAULT_MAX_POINTS,
            estimate: Estimate::Pessimistic,
            groups: Vec::new(),
            non_private: false,
            steps: 0,
            history: Vec::new(),
            cache: OnceLock::new(),
        }
    }

    /// An empty accountant with discretization interval `Δ > 0` (finite). Smaller is tighter
    /// and costs memory and time in proportion to `1/Δ`.
    pub fn with_discretization(discretization: f64) -> Result<Self> {
        check_range(
            "discretization",
            "a finite number > 0",
            discretization,
            f64::MIN_POSITIVE,
            f64::MAX,
        )?;
        Ok(Self {
            discretization,
            ..Self::new()
        })
    }

    /// Sets the limit on grid points per distribution (default [`DEFAULT_MAX_POINTS`]); a
    /// query that would exceed it fails with [`crate::AccountingError::PldTooLarge`] instead of
    /// allocating.
    pub fn with_max_points(mut self, max_points: usize) -> Self {
        self.max_points = max_points.max(2);
        self.cache = OnceLock::new();
        self
    }

    /// Chooses the pessimistic (default, a guarantee) or optimistic (diagnostic) estimate.
    pub fn with_estimate(mut self, estimate: Estimate) -> Self {
        self.estimate = estimate;
        self.cache = OnceLock::new();
        self
    }

    /// The discretization interval Δ.
    pub fn discretization(&self) -> f64 {
        self.discretization
    }

    /// Total number of steps composed.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Records `count ≥ 1` steps of `event` (cheap: the work happens at the next query).
    pub fn compose(&mut self, event: PoissonGaussian, count: u64) -> Result<()> {
        event.validate()?;
        let count = check_count(count)?;
        if event.is_non_private() {
            self.non_private = true;
        } else if !event.is_trivial() {
            match self.groups.iter_mut().find(|(e, _)| *e == event) {
                Some((_, c)) => *c = c.saturating_add(count),
                None => self.groups.push((event, count)),
            }
            self.cache = OnceLock::new();
        }
        self.steps = self.steps.saturating_add(count);
        push_group(&mut self.history, event, count);
        Ok(())
    }

    fn pessimistic(&self) -> bool {
        self.estimate == Estimate::Pessimistic
    }

    /// The PMF of `count` steps of `event` in one direction.
    fn event_pmf(&self, event: PoissonGaussian, dir: Direction, count: u64) -> Result<DensePmf> {
        let loss = SubsampledGaussianLoss::new(event.sampling_rate, event.noise_multiplier, dir);
        let single = match self.estimate {
            Estimate::Pessimistic => mechanism::connect_dots_pmf(
                &loss,
                self.discretization,
                LOG_MASS_TRUNCATION_BOUND,
                self.max_points,
            )?,
            Estimate::Optimistic => mechanism::optimistic_pmf(
                &loss,
                self.discretization,
                LOG_MASS_TRUNCATION_BOUND,
                self.max_points,
            )?,
        };
        single.self_compose(
            count,
            TAIL_MASS_TRUNCATION,
            self.pessimistic(),
            self.max_points,
            self.discretization,
        )
    }

    fn compute(&self) -> Result<Arc<Composed>> {
        let mut acc: Option<Composed> = None;
        let pess = self.pessimistic();
        let (tail, max, d) = (TAIL_MASS_TRUNCATION, self.max_points, self.discretization);
        for &(event, count) in &self.groups {
            // The two directions are independent: on a multi-core machine, run them in parallel.
            let (remove, add) = if event.sampling_rate == 1.0 {
                (self.event_pmf(event, Direction::Remove, count)?, None)
            } else if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
                std::thread::scope(|s| {
                    let add = s.spawn(|| self.event_pmf(event, Direction::Add, count));
                    let remove = self.event_pmf(event, Direction::Remove, count);
                    let add = add.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                    Ok::<_, crate::AccountingError>((remove?, Some(add?)))
                })?
            } else {
                (
                    self.event_pmf(event, Direction::Remove, count)?,
                    Some(self.event_pmf(event, Direction::Add, count)?),
                )
            };
            acc = match acc {
                // The first event composed with the identity: dp-accounting truncates the tails.
                None => Composed {
                    remove: remove.truncate_tails(tail, pess),
                    add: add.map(|a| a.truncate_tails(tail, pess)),
                },
                Some(prev) => {
                    let new_add = match (&prev.add, &add) {
                        (None, None) => None,
                        (prev_add, ev_add) => {
                            let a = prev_add.as_ref().unwrap_or(&prev.remove);
                            let b = ev_add.as_ref().unwrap_or(&remove);
                            Some(a.compose(b, tail, pess, max, d)?)
                        }
                    };
                    Composed {
                        remove: prev.remove.compose(&remove, tail, pess, max, d)?,
                        add: new_add,
                    }
                }
            }
            .into();
        }
        Ok(Arc::new(acc.unwrap_or(Composed {
            remove: DensePmf::identity(),
            add: None,
        })))
    }

    fn composed(&self) -> Result<Arc<Composed>> {
        self.cache.get_or_init(|| self.compute()).clone()
    }

    /// The smallest ε (≥ 0) certified at `δ ∈ [0, 1)`: the maximum over the add and remove
    /// directions of the discretised PLD's ε.
    pub fn epsilon(&self, delta: f64) -> Result<f64> {
        let delta = check_delta(delta)?;
        if self.non_private {
            return Ok(f64::INFINITY);
        }
        let c = self.composed()?;
        let d = self.discretization;
        let eps = c.remove.epsilon_for_delta(d, delta);
        Ok(match &c.add {
            Some(add) => eps.max(add.epsilon_for_delta(d, delta)),
            None => eps,
        })
    }

    /// The δ certified at `ε ≥ 0` (maximum over the two directions).
    pub fn delta(&self, epsilon: f64) -> Result<f64> {
        let epsilon = check_epsilon(epsilon)?;
        if self.non_private {
            return Ok(1.0);
        }
        let c = self.composed()?;
        let d = self.discretization;
        let delta = c.remove.delta_for_epsilon(d, epsilon);
        Ok(match &c.add {
            Some(add) => delta.max(add.delta_for_epsilon(d, epsilon)),
            None => delta,
        })
    }

    /// What was accounted, and the (ε, δ) it gives.
    pub fn statement(&self, delta: f64) -> Result<PrivacyStatement> {
        Ok(PrivacyStatement {
            epsilon: self.epsilon(delta)?,
            delta,
            steps: self.steps,
            groups: self.history.clone(),
            clipping_norm: None,
            accountant: AccountantDescription::Pld {
                discretization: self.discretization,
                pessimistic: self.pessimistic(),
            },
        })
    }
}

impl Accountant for PldAccountant {
    fn compose(&mut self, event: PoissonGaussian, count: u64) -> Result<()> {
        PldAccountant::compose(self, event, count)
    }
    fn epsilon(&self, delta: f64) -> Result<f64> {
        PldAccountant::epsilon(self, delta)
    }
    fn delta(&self, epsilon: f64) -> Result<f64> {
        PldAccountant::delta(self, epsilon)
    }
    fn statement(&self, delta: f64) -> Result<PrivacyStatement> {
        PldAccountant::statement(self, delta)
    }
    fn steps(&self) -> u64 {
        self.steps
    }
}
