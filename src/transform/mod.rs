//! The transforms: [`vmap`] and per-example gradients.

pub(crate) mod leaf;
pub mod vmap;
