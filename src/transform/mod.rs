//! The transforms, one module each; the transform functions are re-exported here
//! (`burn_vmap::transform::vmap`), their builders and helper types stay in their module.
//!
//! Every transform records the user's function once per argument signature on Burn's capture
//! device and runs the recording on the batching engine (`run.rs`); the module-level transforms
//! record a loss with a module's parameters as inputs (`module.rs`).
//!
//! | module | transforms |
//! |---|---|
//! | [`vmap`](mod@vmap) | [`vmap`](fn@vmap) (JAX's `jax.vmap`) and its builder [`Vmapped`](vmap::Vmapped) |
//! | [`auto`] | [`auto_vmap`]: broadcast over leading batch dims by base ranks |
//! | [`chunked`] | [`chunked_vmap`]: vmap over at most `chunk_size` examples at a time |
//! | [`custom`] | [`custom_vmap`] (a user batching rule) and [`sequential_vmap`] (the loop as the rule) |
//! | [`scan`](mod@scan) | [`scan`](fn@scan), [`sliced_scan`], [`checkpoint_chunked_scan`] |
//! | [`grad`] | [`per_example_grads`](grad::per_example_grads) and [`ParamGrads`](grad::ParamGrads) |
//! | [`micro`] | [`micro_vmap`](fn@micro_vmap), [`micro_grad`](fn@micro_grad), [`micro_grad_module`](fn@micro_grad_module) (optax's microbatching) and the clipping helpers |
//!
//! [`Axes`] is the type of `in_axes` / `out_axes`.

pub mod auto;
mod axes;
pub mod chunked;
pub mod custom;
pub(crate) mod draws;
pub mod grad;
pub mod micro;
pub(crate) mod module;
pub mod operations;
mod run;
pub mod scan;
pub mod vmap;

pub use auto::auto_vmap;
pub use axes::Axes;
pub use chunked::chunked_vmap;
pub use custom::{custom_vmap, sequential_vmap};
pub use micro::{micro_grad, micro_grad_module, micro_vmap};
pub use scan::{checkpoint_chunked_scan, scan, sliced_scan};
pub use vmap::vmap;
