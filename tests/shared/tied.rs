//! A weight tied across two layers: one `Param` cloned into both fields (the same `ParamId`).
//! Shared by the tests that the per-example transforms (`models.rs`) and the DP step
//! (`privacy.rs`) refuse it.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;

/// `[rows, 3]` in and out: `b(a(x))`, `a` and `b` one layer.
#[derive(Module, Debug)]
pub struct Tied {
    pub a: Linear,
    pub b: Linear,
}

impl Tied {
    /// One `Linear(3, 3)` in both fields.
    pub fn new(device: &Device) -> Self {
        let a = LinearConfig::new(3, 3).init(device);
        Self { a: a.clone(), b: a }
    }
}
