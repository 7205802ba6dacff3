//! The transforms: [`vmap`] and per-example gradients.

pub mod grad;
pub(crate) mod leaf;
pub mod vmap;
pub mod chunked;
pub mod scan;
