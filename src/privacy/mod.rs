//! Differential privacy that holds: Poisson sampling, Gaussian noise from a cryptographically
//! secure generator, exact accountants, and a DP-SGD optimizer for Burn models.
//!
//! The mechanism every piece assumes, and that [`DpSgd`] runs, is DP-SGD with **Poisson
//! sampling**: at each step every one of the `N` training examples joins the batch
//! independently with probability `q` ([`PoissonSampler`], [`PoissonLoader`]); each example's
//! gradient is clipped to L2 norm `C`; Gaussian noise `N(0, (σC)²)` is added once to their SUM
//! ([`add_gaussian_noise`], from [`PrivacyRng`]); the noisy sum is divided by the EXPECTED batch
//! size `q·N`. Neighbouring datasets differ by adding or removing one example. For this
//! mechanism the [`accounting`] module (its own crate, `burn-vmap-accounting`) computes ε:
//! Rényi DP exactly at integer and fractional orders with the improved conversion, and privacy
//! loss distributions (the tighter ε); both are checked against 1202 reference cases from
//! dp-accounting 0.6.0 and Opacus 1.6.0.
//!
//! What breaks the guarantee, and what this module does about it:
//! - fixed-size shuffled batches: a different mechanism (one example's presence pushes another
//!   out, doubling the sensitivity); the loader samples by Poisson sampling;
//! - noise from a seeded or shared generator: anyone with the seed can subtract it; noise comes
//!   from ChaCha20 seeded by the operating system unless the caller asks for a seed
//!   ([`PrivacyRng::seeded`] says the guarantee does not hold);
//! - noise calibrated to the sum but added to the mean: `B` times too little; the noise goes on
//!   the sum, once per step, and an empty batch still takes a noise-only step;
//! - layers that mix examples (BatchNorm in training mode): refused with the layer's path.
//!
//! # A Burn training loop with DP-SGD
//! ```
//! use std::sync::Arc;
//! use burn::data::dataloader::batcher::Batcher;
//! use burn::data::dataset::InMemDataset;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::SgdConfig;
//! use burn::tensor::{Device, Tensor};
//! use burn_vmap::privacy::{DpSgd, DpSgdConfig, PoissonLoader};
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
//! let n = data.len();
//! let mut loader = PoissonLoader::new(Arc::new(InMemDataset::new(data)), Arc::new(Pairs), 0.1, device.clone())?;
//! let mut model: Linear = LinearConfig::new(2, 1).init(&device);
//! // The loss of one example, seen as a batch of one: plain Burn code.
//! let loss = |m: &Linear, (x, y): (Tensor<2>, Tensor<2>)| (m.forward(x) - y).powi_scalar(2).sum();
//!
//! // C = 1, σ = 1.1, q = 0.1 of N examples; δ = 1e-5 by default.
//! let mut dp = DpSgd::new(SgdConfig::new().init(), DpSgdConfig::new(1.0, 1.1, 0.1, n))?;
//! for _ in 0..20 {
//!     let step = loader.next_batch(); // Poisson: a random size, possibly empty (None)
//!     model = dp.step(0.1, model, loss, step.batch)?;
//! }
//! println!("{}", dp.statement()?); // ε by PLD, the sampling, the neighbouring relation
//! assert!(dp.epsilon_pld()? <= dp.epsilon()?);
//! # Ok::<(), burn_vmap::privacy::PrivacyError>(())
//! ```

mod clipped;
mod noise;
mod optimizer;
mod rng;
mod sampling;

pub use burn_vmap_accounting as accounting;
pub use noise::{NoiseKind, add_gaussian_noise, add_noise, sensitivity_inflation};
pub use optimizer::{DpSgd, DpSgdConfig, clip_per_layer};
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
