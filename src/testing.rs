//! What the crate's tests, examples and benches run on: [`TestBackend`], the inner backend
//! selected by the cargo feature (`ndarray`, the default, `wgpu` or `cuda`).
//!
//! ```
//! use burn::tensor::Tensor;
//! use burn_vmap::testing::TestBackend;
//! use burn_vmap::{vmap, Vmap};
//! type B = Vmap<TestBackend>;
//! let xs = Tensor::<B, 2>::ones([2, 3], &Default::default());
//! let sums: Tensor<B, 2> = vmap(|x: Tensor<B, 1>| x.sum()).call(xs).unwrap();
//! assert_eq!(sums.dims(), [2, 1]);
//! ```

/// The inner backend selected by the crate's cargo feature, for tests, examples and benches:
/// `ndarray` (default), `wgpu` or `cuda`.
#[cfg(feature = "cuda")]
pub type TestBackend = burn::backend::Cuda;
/// The inner backend selected by the crate's cargo feature, for tests, examples and benches:
/// `ndarray` (default), `wgpu` or `cuda`.
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type TestBackend = burn::backend::Wgpu;
/// The inner backend selected by the crate's cargo feature, for tests, examples and benches:
/// `ndarray` (default), `wgpu` or `cuda`.
#[cfg(all(feature = "ndarray", not(feature = "wgpu"), not(feature = "cuda")))]
pub type TestBackend = burn::backend::NdArray;
