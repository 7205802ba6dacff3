//! Differential privacy that holds: one owner of DP-SGD's mechanism ([`DpMechanism`]:
//! Poisson sampling, clipping, noise from a cryptographically secure generator, exact
//! accountants), a DP-SGD optimizer for Burn models ([`DpSgd`]), and its saved state
//! ([`DpRecord`]).
//!
//! The mechanism is DP-SGD with **Poisson sampling**: at each step every training example joins
//! the batch independently with probability `q` (the mechanism's [`DpLoader`]); each example's
//! gradient is clipped to L2 norm `C` (one whose gradient is NaN or infinite contributes zero);
//! Gaussian noise `N(0, (σC)²)` is added once to their SUM; the noisy sum is divided by a
//! public constant chosen by the [`Neighbouring`] relation (add/remove one example without
//! reading `N`, or replace one example with `N` public). For it the [`accounting`] module (its
//! own crate, `burn-vmap-accounting`) computes ε: privacy loss distributions and Rényi DP,
//! checked against 1202 reference cases from dp-accounting 0.6.0 and Opacus 1.6.0.
//!
//! What breaks the guarantee, and what this module does about it:
//! - fixed-size shuffled batches: a different mechanism; the loader samples by Poisson sampling
//!   at the mechanism's rate (given once, in [`DpConfig`]), and the step accepts only the
//!   batches its loader sampled ([`Sampled`]), each once, in order;
//! - noise from a seeded, cloned or shared generator: anyone with the seed can subtract it;
//!   noise comes from ChaCha20 seeded by the operating system, which cannot be cloned or
//!   re-seeded; a seeded run ([`DpMechanism::seeded`]) says "NOT PRIVATE" in its statement;
//! - an example with a NaN or infinite gradient: it contributes zero and is counted
//!   ([`StepReport::non_finite`]), never NaN in the model;
//! - noise calibrated to the sum but added to the mean: the noise goes on the sum, once per
//!   step, and an empty batch still takes a noise-only step over every trainable parameter;
//! - a resumed run restarting ε at zero: the record keeps the steps, a resume continues ε with
//!   fresh noise; a budget ([`DpMechanism::with_budget`]) stops before it is exceeded;
//! - layers that mix examples (BatchNorm in training mode): refused with the layer's path.
//!
//! [`DpStatement`] says what a run guarantees and everything it assumes.
//!
//! # A Burn training loop with DP-SGD
//! ```
//! use std::sync::Arc;
//! use burn::data::dataloader::batcher::Batcher;
//! use burn::data::dataset::InMemDataset;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::SgdConfig;
//! use burn::tensor::{Device, Tensor};
//! use burn_vmap::privacy::{DpConfig, DpMechanism, DpSgd, Neighbouring};
//!
//! #[derive(Clone)]
//! struct Pairs;
//! impl Batcher<[f32; 3], (Tensor<2>, Tensor<2>)> for Pairs {
//!     fn batch(&self, items: Vec<[f32; 3]>, device: &Device) -> (Tensor<2>, Tensor<2>) {
//!         let rows = |f: fn(&[f32; 3]) -> Vec<f32>| {
//!             let rows = items.iter().map(|r| Tensor::<1>::from_floats(f(r).as_slice(), device).unsqueeze());
//!             Tensor::cat(rows.collect(), 0)
//!         };
//!         (rows(|r| vec![r[0], r[1]]), rows(|r| vec![r[2]]))
//!     }
//! }
//!
//! let device = Device::default();
//! let data: Vec<[f32; 3]> = (0..200).map(|i| { let a = i as f32 / 200.0; [a, 1.0 - a, 2.0 * a] }).collect();
//! // C = 1, σ = 1.1, q = 0.1; add/remove neighbours, the sum divided by the public 20.
//! let config = DpConfig::new(1.0, 1.1, 0.1, Neighbouring::AddRemove { expected_batch_size: 20.0 });
//! let mechanism = DpMechanism::new(config)?;
//! let mut loader = mechanism.loader(Arc::new(InMemDataset::new(data)), Arc::new(Pairs), device.clone())?;
//! let mut dp = DpSgd::new(SgdConfig::new().init(), mechanism);
//! let mut model: Linear = LinearConfig::new(2, 1).init(&device);
//! // The loss of one example, seen as a batch of one: plain Burn code.
//! let loss = |m: &Linear, (x, y): (Tensor<2>, Tensor<2>)| (m.forward(x) - y).powi_scalar(2).sum();
//! for _ in 0..20 {
//!     let batch = loader.next_batch()?; // Poisson: a random size, possibly empty
//!     (model, _) = dp.step(0.1, model, loss, batch)?;
//! }
//! println!("{}", dp.mechanism().statement()?); // ε, and everything it assumes
//! assert!(dp.mechanism().epsilon()? <= dp.mechanism().epsilon_rdp()?);
//! # Ok::<(), burn_vmap::privacy::PrivacyError>(())
//! ```

mod accountant;
mod clipped;
mod config;
mod mechanism;
pub mod noise;
mod optimizer;
mod record;
mod rng;
mod sampling;
mod statement;

#[cfg(feature = "train")]
pub(crate) use accountant::epsilon_rdp_after;
pub use burn_vmap_accounting as accounting;
pub use clipped::clip_and_flag;
pub use config::{DpConfig, Neighbouring};
pub use mechanism::{DpMechanism, StepReport};
pub use noise::{NoiseKind, add_gaussian_noise, add_noise, sensitivity_inflation};
pub(crate) use optimizer::apply;
pub use optimizer::{DpSgd, clip_per_layer};
pub use record::DpRecord;
pub use rng::PrivacyRng;
pub use sampling::{DpLoader, PoissonSampler, Sampled};
pub use statement::DpStatement;

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
    /// The step was given a batch the mechanism did not sample next.
    #[error("privacy: the step's batch: expected {expected}, got {got}")]
    Batch {
        /// Which batch the mechanism takes.
        expected: String,
        /// What it was given.
        got: String,
    },
    /// The step would take ε above the budget; nothing was released or accounted.
    #[error(
        "privacy: budget (ε = {epsilon}, δ = {delta}) allows {max_steps} steps and {steps} were          taken: the next step would exceed it"
    )]
    Budget {
        /// The budget's ε.
        epsilon: f64,
        /// The budget's δ.
        delta: f64,
        /// Steps taken.
        steps: u64,
        /// Steps the budget allows.
        max_steps: u64,
    },
    /// The dataset failed to give an example the sampler drew.
    #[error("privacy: the dataset failed to give example {index}: {message}")]
    Dataset {
        /// The example's index.
        index: usize,
        /// The dataset's error.
        message: String,
    },
    /// A mechanism record could not be written or read.
    #[error("privacy: the mechanism's record: {message}")]
    Record {
        /// What went wrong.
        message: String,
    },
}
