//! The transforms: [`vmap`] and per-example gradients.

pub mod auto;
mod axes;
pub mod chunked;
pub mod custom;
pub mod grad;
pub mod micro;
pub mod scan;
pub mod vmap;

pub use axes::Axes;
