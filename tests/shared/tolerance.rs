//! How closely two f32 routes to one value agree on the test device (`Device::default()`): the
//! one home of the suites' allowance for TF32.
//!
//! Flex and wgpu multiply f32 in f32, and the suites compare the batched route with the
//! per-example loop at their own tolerances (1e-5 to 1e-4). Burn 0.22.1 on CUDA does not: its
//! matmuls and convolutions autotune among kernels that include TF32 tensor-core tiles
//! (cubek-matmul 0.3.1, `adjust_dtypes`: f32 operands rounded to a 10-bit mantissa), chosen
//! per problem shape, so two shapes of one product differ by about 1e-3 under Burn alone
//! (seen on an H200: Burn's own loop against the batched replay, 1e-4 to 2e-3 relative; a
//! batching bug is off by O(1)). On CUDA every tolerance is raised to at least [`TF32`].
#![allow(dead_code)]

use std::sync::OnceLock;

/// The least relative tolerance on a device whose f32 products may run on TF32.
pub const TF32: f64 = 5e-3;

/// Whether the test device's f32 matmuls may run on TF32 tensor cores (a CUDA device).
pub fn tf32() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| format!("{:?}", burn::tensor::Device::default()).contains("Cuda"))
}

/// `tol` on the test device: at least [`TF32`] where f32 products may run on TF32.
pub fn device_tol(tol: f32) -> f32 {
    if tf32() { tol.max(TF32 as f32) } else { tol }
}
