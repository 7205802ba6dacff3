//! # burn-vmap (Burn 0.22)
//!
//! JAX-style vectorizing maps, per-example gradients and differentially private training for
//! [Burn](https://burn.dev) 0.22, on users' unmodified models.
//!
//! This crate is grown beside the Burn 0.21 crate and replaces it once it passes everything the
//! 0.21 crate passes (issue 25).
#![warn(missing_docs)]

// `#[derive(Tree)]` expands to `::burn_vmap::...` paths; this makes them resolve here too.
extern crate self as burn_vmap;

// The batching engine: the `Vmap<B>` backend decorator and its rules (ported from the 0.21
// crate; `ARCHITECTURE.md` maps it).
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
pub mod prelude;
pub mod privacy;
pub mod transform;
pub mod tree;

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
