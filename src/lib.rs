//! # burn-vmap
//!
//! JAX-style vectorizing maps, per-example gradients and differentially private training for
//! [Burn](https://burn.dev) 0.22, on users' unmodified models: no backend parameter, no rewrite.
//!
//! - [`vmap`]: map a function written for one example over a batch axis (`in_axes`,
//!   `out_axes`, nesting, trees of arguments and results).
//! - [`per_example_grads`], and optax's [`micro_grad`] / [`micro_vmap`] / [`micro_grad_module`]
//!   (microbatching, accumulators, `transform_fn`, `metrics_fn`): every example's gradient from
//!   one batched backward pass, a layer's weight gradient kept factored so per-example clipping
//!   costs about a standard step.
//! - [`Tree`] with `#[derive(Tree)]`: your structs as pytrees.
//! - [`privacy`]: Poisson sampling, noise from a CSPRNG, exact accountants, DP-SGD around any
//!   Burn optimizer.
//! - [`transform`]: `chunked_vmap`, `auto_vmap`, `custom_vmap`, `scan`, `sliced_scan`,
//!   `checkpoint_chunked_scan`.
//!
//! A transform records the user's function once per argument signature on Burn's capture
//! device and runs the recording on [`Vmap<B>`], a backend decorator whose tensors carry batch
//! dimensions, where `B` is the backend behind the arguments' device (Flex, wgpu, CUDA).
//!
//! ```
//! use burn::nn::{Linear, LinearConfig};
//! use burn::tensor::{Device, Tensor};
//! use burn_vmap::{per_example_grads, vmap};
//! let device = Device::default();
//!
//! // Written for one vector: v * sum(v).
//! let f = |v: Tensor<1>| v.clone() * v.sum();
//! let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
//! let ys: Tensor<2> = vmap(f).call(xs.clone()).unwrap();
//! assert_eq!(ys.into_data().try_to_vec::<f32>().unwrap(), vec![3.0, 6.0, 21.0, 28.0]);
//!
//! // Per-example gradients of an unmodified Burn module.
//! let model: Linear = LinearConfig::new(2, 1).init(&device);
//! let loss = |m: &Linear, x: Tensor<1>| m.forward(x).powi_scalar(2).sum();
//! let grads = per_example_grads(&model, xs, loss).unwrap();
//! assert_eq!(grads.get::<3>("weight").unwrap().dims(), [2, 2, 1]);
//! ```
//!
//! # Where things are
//!
//! | module | holds |
//! |---|---|
//! | [`transform`] | every transform and its builder, [`Axes`](transform::Axes) |
//! | [`accumulate`] | how microbatched transforms combine outputs: `Sum`, `Mean`, `RunningMean`, `Concat`, your own `Accumulator` |
//! | [`tree`] | the [`Tree`] trait and its parts: `Leaf`, `TreeDef`, `Spec`, `DynTree`, visitors |
//! | [`privacy`] | DP-SGD that holds: `DpMechanism` (sampling, clipping, noise, accounting, its record), `DpSgd`, the accountants |
//! | `train` (feature `train`) | DP-SGD through burn-train's `Learner`: `DpTraining` (a `DpMechanism` behind it), the ε, clipped and non-finite metrics, resuming from checkpoints |
//! | [`tensor`], [`level`] | the engine's `VmapTensor` and its batch dims, vmap levels and [`Randomness`] |
//! | [`strict`] | strict mode: whether an op without a batching rule may loop over the examples |
//! | [`prelude`] | the root names and every transform function |
//!
//! `ARCHITECTURE.md` in the repository maps the internals: how a call is recorded and run,
//! where an op's batching rule goes, where a backend workaround goes.
#![deny(missing_docs)]
// Without a backend feature the crate runs on capture devices only: the backend arms of
// `runtime` are compiled out, and what only they use is unused.
#![cfg_attr(
    not(any(feature = "flex", feature = "wgpu", feature = "cuda")),
    allow(unused)
)]

// `#[derive(Tree)]` expands to `::burn_vmap::...` paths; this makes them resolve here too.
extern crate self as burn_vmap;

// The batching engine: the `Vmap<B>` backend decorator and its rules.
mod backend;
mod batching;
mod compat;
pub mod level;
mod ops;
mod physical;
pub(crate) mod rules;
pub mod strict;
pub mod tensor;

// The front end: recording a user's function and running it on the engine.
mod error;
mod graph;
mod guard;
mod runtime;
mod value;

pub mod accumulate;
pub mod distributed;
pub mod prelude;
pub mod privacy;
#[cfg(feature = "train")]
pub mod train;
pub mod transform;
pub mod tree;

/// The README's code blocks, compiled and run as doctests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use backend::Vmap;
pub use batching::BatchOps;
pub use error::VmapError;
pub use level::Randomness;
pub use transform::grad::{ParamGrads, per_example_grads};
pub use transform::micro::{
    MicroAux, clip_by_global_norm, global_norm, micro_grad, micro_grad_module, micro_vmap,
};
pub use transform::vmap::vmap;
pub use tree::{Static, Tree};
