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
//! | [`grad`] | [`per_example_grads`](grad::per_example_grads) and [`ParamGrads`](grad::ParamGrads) |
//!
//! [`Axes`] is the type of `in_axes` / `out_axes`.

mod axes;
pub mod grad;
mod module;
mod run;
pub mod vmap;

pub use axes::Axes;
pub use vmap::vmap;
