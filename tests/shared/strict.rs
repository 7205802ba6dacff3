//! Strict mode and random inputs for the suites that check burn-nn against Burn's own loop
//! (`nn_layers.rs`, `nn_losses.rs`): with strict mode on, an op that fell back to a
//! per-example loop panics instead of passing slowly.

use burn::tensor::{Device, Distribution, Tensor};

/// The default device, with strict mode turned on for this thread.
pub fn dev() -> Device {
    burn_vmap::strict::set_strict(true);
    Device::default()
}

/// Standard normal values of `shape` on [`dev`].
pub fn normal<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &dev())
}
