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

mod error;
mod graph;
mod guard;
mod runtime;
mod value;

pub mod tree;

pub use error::VmapError;
pub use tree::{Static, Tree};
