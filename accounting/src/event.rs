//! The mechanism being accounted: one step of DP-SGD, and the trait both accountants implement.

use crate::error::{check_range, AccountingError, Result};
use crate::statement::{PrivacyStatement, StepGroup};

/// One step of DP-SGD: the Poisson-subsampled Gaussian mechanism.
///
/// Each example joins the step's batch independently with probability `sampling_rate` (q);
/// per-example gradients are clipped to L2 norm C and Gaussian noise `N(0, (σC)²)` is added to
/// their *sum*, σ = `noise_multiplier`. Neighbouring datasets differ by adding or removing one
/// example. Since the clipping norm scales sensitivity and noise alike, the privacy of a step
/// depends on `(q, σ)` only.
///
/// `q = 0` is a step that touches no data (no privacy cost); `σ = 0` is a non-private step
/// (ε = ∞ as soon as `q > 0`).
///
/// ```
/// use burn_vmap_accounting::PoissonGaussian;
///
/// let step = PoissonGaussian::new(256.0 / 60_000.0, 1.1)?;
/// assert_eq!(step.noise_multiplier, 1.1);
/// assert!(PoissonGaussian::new(1.5, 1.0).is_err()); // q must lie in [0, 1]
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoissonGaussian {
    /// Poisson sampling rate q ∈ [0, 1].
    pub sampling_rate: f64,
    /// Noise multiplier σ ≥ 0 (noise standard deviation over the clipping norm).
    pub noise_multiplier: f64,
}

impl PoissonGaussian {
    /// A step with sampling rate `q ∈ [0, 1]` and noise multiplier `σ ≥ 0` (both finite).
    pub fn new(sampling_rate: f64, noise_multiplier: f64) -> Result<Self> {
        let event = Self {
            sampling_rate,
            noise_multiplier,
        };
        event.validate()?;
        Ok(event)
    }

    /// Checks the fields (they are public, so an event may be built without [`Self::new`]).
    pub fn validate(&self) -> Result<()> {
        check_range(
            "sampling_rate",
            "a number in [0, 1]",
            self.sampling_rate,
            0.0,
            1.0,
        )?;
        check_range(
            "noise_multiplier",
            "a finite number >= 0",
            self.noise_multiplier,
            0.0,
            f64::MAX,
        )?;
        Ok(())
    }

    /// Whether the step cannot leak anything (`q = 0`).
    pub fn is_trivial(&self) -> bool {
        self.sampling_rate == 0.0
    }

    /// Whether the step is non-private (`q > 0` and `σ = 0`).
    pub fn is_non_private(&self) -> bool {
        self.sampling_rate > 0.0 && self.noise_multiplier == 0.0
    }
}

/// Checks a composition count (at least one step, like dp-accounting's `compose(event, count)`).
pub(crate) fn check_count(count: u64) -> Result<u64> {
    if count == 0 {
        Err(AccountingError::InvalidCount {
            name: "count",
            expected: "a positive number of steps",
            actual: 0,
        })
    } else {
        Ok(count)
    }
}

/// Adds `count` steps of `event` to the group with the same parameters (composition is
/// commutative), or starts a new group.
pub(crate) fn push_group(groups: &mut Vec<StepGroup>, event: PoissonGaussian, count: u64) {
    match groups.iter_mut().find(|g| {
        g.sampling_rate == event.sampling_rate && g.noise_multiplier == event.noise_multiplier
    }) {
        Some(g) => g.steps = g.steps.saturating_add(count),
        None => groups.push(StepGroup {
            sampling_rate: event.sampling_rate,
            noise_multiplier: event.noise_multiplier,
            steps: count,
        }),
    }
}

/// What a DP-SGD optimiser needs from an accountant, so that it can hold either kind
/// ([`crate::RdpAccountant`] or [`crate::PldAccountant`]), e.g. as `Box<dyn Accountant>`.
///
/// ```
/// use burn_vmap_accounting::{Accountant, PldAccountant, PoissonGaussian, RdpAccountant};
///
/// let step = PoissonGaussian::new(0.01, 1.1)?;
/// let mut accountants: Vec<Box<dyn Accountant>> =
///     vec![Box::new(RdpAccountant::new()), Box::new(PldAccountant::with_discretization(1e-3)?)];
/// for acc in &mut accountants {
///     acc.compose(step, 100)?;
///     let eps = acc.epsilon(1e-5)?;
///     assert!(eps > 0.3 && eps < 1.0, "{eps}");
/// }
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub trait Accountant: Send + Sync {
    /// Records `count ≥ 1` repetitions of `event` (one call per training step is fine).
    fn compose(&mut self, event: PoissonGaussian, count: u64) -> Result<()>;
    /// The smallest ε this accountant can certify at `δ ∈ [0, 1)` for everything composed so far.
    fn epsilon(&self, delta: f64) -> Result<f64>;
    /// The δ this accountant certifies at `ε ≥ 0` for everything composed so far.
    fn delta(&self, epsilon: f64) -> Result<f64>;
    /// A human-readable account of what was composed and the resulting (ε, δ).
    fn statement(&self, delta: f64) -> Result<PrivacyStatement>;
    /// Total number of steps composed so far.
    fn steps(&self) -> u64;
}
