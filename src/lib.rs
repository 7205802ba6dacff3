//! # burn-vmap
//!
//! JAX-style vectorizing maps and per-example gradients for [Burn](https://burn.dev).
//!
//! - [`Vmap<B>`]: a backend decorator (like `Autodiff<B>`) whose tensors carry batch dimensions;
//!   every op applies a batching rule, so code written for one example runs on a batch.
//! - [`vmap`]: map a function over a batch axis, with `in_axes` / `out_axes` and nesting.
//! - Per-example gradients: stack `Autodiff` on top, `Autodiff<Vmap<B>>`, and call
//!   `backward()` inside [`vmap`]: parameters that are not batched receive batched (per-example)
//!   gradients, computed in one batched backward pass ([`per_example_grads`]); optax's
//!   microbatched [`micro_vmap`] and [`micro_grad`] (with [`micro_grad_module`] for a Burn
//!   module), and its per-example clipping ([`clip_by_global_norm`]).
//! - [`Tree`]: pytrees of tensors (tuples, arrays, `Vec`, `Option`, maps, [`Static`], and your
//!   structs with `#[derive(Tree)]`).
//!
//! ```
//! use burn::tensor::Tensor;
//! use burn_vmap::testing::TestBackend;
//! use burn_vmap::{vmap, Vmap};
//! type B = Vmap<TestBackend>;
//! let device = Default::default();
//!
//! // Written for one vector: v * sum(v).
//! let f = |v: Tensor<B, 1>| v.clone() * v.sum();
//! let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
//! let ys: Tensor<B, 2> = vmap(f).call(xs).unwrap();
//! assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![3.0, 6.0, 21.0, 28.0]);
//! ```
//!
//! # Where things are
//!
//! The crate root holds what a Burn user types first; everything else lives in a module named
//! after what it is:
//!
//! | module | holds |
//! |---|---|
//! | [`transform`] | every transform: [`vmap`](fn@transform::vmap), [`chunked_vmap`](transform::chunked_vmap), [`auto_vmap`](transform::auto_vmap), [`custom_vmap`](transform::custom_vmap) / [`sequential_vmap`](transform::sequential_vmap), [`scan`](transform::scan()), [`sliced_scan`](transform::sliced_scan), [`checkpoint_chunked_scan`](transform::checkpoint_chunked_scan), [`micro`](transform::micro) (micro_vmap, micro_grad, their vectorizers and gradient functions), [`grad`](transform::grad) (per-example gradients of a module), [`Axes`](transform::Axes) |
//! | [`accumulate`] | how microbatched transforms combine outputs: [`Sum`](accumulate::Sum), [`Mean`](accumulate::Mean), [`RunningMean`](accumulate::RunningMean), [`Concat`](accumulate::Concat), your own [`Accumulator`](accumulate::Accumulator) |
//! | [`tree`] | the [`Tree`] trait and its parts: [`Leaf`](tree::Leaf), [`TreeDef`](tree::TreeDef), [`Spec`](tree::Spec) (tree prefixes such as `in_axes`), [`DynTree`](tree::DynTree), visitors |
//! | [`tensor`] | [`VmapTensor`](tensor::VmapTensor), the primitive of `Vmap<B>`, and its [`BatchDims`](tensor::BatchDims) |
//! | [`level`] | vmap [`Level`](level::Level)s and [`Randomness`] |
//! | [`strict`] | strict mode: whether an op without a batching rule may loop over the examples |
//! | [`privacy`] | DP-SGD that holds: [`PoissonLoader`](privacy::PoissonLoader), [`DpSgd`](privacy::DpSgd), noise from [`PrivacyRng`](privacy::PrivacyRng), the accountants ([`accounting`](privacy::accounting)) |
//! | `parallel` | (feature `collective`) data-parallel peers on Burn's collective |
//! | [`testing`] | [`TestBackend`](testing::TestBackend), the inner backend the cargo feature selects |
//! | [`prelude`] | the root names and every transform function, for `use burn_vmap::prelude::*` |
//!
//! `ARCHITECTURE.md` in the repository maps the internals: where a level lives, where an op's
//! batching rule goes, where a backend workaround goes.
#![deny(missing_docs)]

// `#[derive(Tree)]` expands to `::burn_vmap::...` paths; this makes them resolve here too.
extern crate self as burn_vmap;

pub mod accumulate;
mod backend;
mod batching;
mod compat;
mod error;
pub mod level;
mod ops;
#[cfg(feature = "collective")]
pub mod parallel;
mod physical;
pub mod prelude;
pub mod privacy;
pub(crate) mod rules;
pub mod strict;
pub mod tensor;
pub mod testing;
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
