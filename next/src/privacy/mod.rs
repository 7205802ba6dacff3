//! Differential privacy that holds: Poisson sampling, Gaussian noise from a cryptographically
//! secure generator, exact accountants, and a DP-SGD optimizer for Burn models.
//!
//! The mechanism every piece assumes, and that `DpSgd` runs, is DP-SGD with **Poisson
//! sampling**: at each step every one of the `N` training examples joins the batch
//! independently with probability `q` ([`PoissonSampler`], [`PoissonLoader`]); each example's
//! gradient is clipped to L2 norm `C`; Gaussian noise `N(0, (σC)²)` is added once to their SUM
//! ([`add_gaussian_noise`], from [`PrivacyRng`]); the noisy sum is divided by the EXPECTED batch
//! size `q·N`. Neighbouring datasets differ by adding or removing one example. For this
//! mechanism the [`accounting`] module (its own crate, `burn-vmap-accounting`) computes ε:
//! Rényi DP exactly at integer and fractional orders with the improved conversion, and privacy
//! loss distributions (the tighter ε); both are checked against 1202 reference cases from
//! dp-accounting 0.6.0 and Opacus 1.6.0.

mod noise;
mod rng;
mod sampling;

pub use burn_vmap_accounting as accounting;
pub use noise::add_gaussian_noise;
pub use rng::PrivacyRng;
pub use sampling::{PoissonBatch, PoissonLoader, PoissonSampler};

use crate::VmapError;

/// What the privacy module's calls can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PrivacyError {
    /// An argument outside its domain.
    #[error("privacy: {argument}: expected {expected}, got {got}")]
    Argument {
        /// The argument.
        argument: &'static str,
        /// Its domain.
        expected: &'static str,
        /// What was given.
        got: String,
    },
    /// The per-example gradient computation failed (a module that mixes examples, bad inputs).
    #[error(transparent)]
    Vmap(#[from] VmapError),
    /// The accountant refused (its message names the argument).
    #[error(transparent)]
    Accounting(#[from] accounting::AccountingError),
}
