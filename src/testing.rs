//! What the crate's tests, examples and benches run on: [`TestBackend`], the inner backend
//! selected by the cargo feature (`ndarray`, the default, `flex`, `wgpu` or `cuda`).
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
/// `cuda`, else `wgpu`, else `flex`, else `ndarray` (the default; a feature given on the
/// command line wins over it: `--features flex` selects Flex).
#[cfg(feature = "cuda")]
pub type TestBackend = burn::backend::Cuda;
/// The inner backend selected by the crate's cargo feature, for tests, examples and benches:
/// `cuda`, else `wgpu`, else `flex`, else `ndarray` (the default).
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type TestBackend = burn::backend::Wgpu;
/// The inner backend selected by the crate's cargo feature, for tests, examples and benches:
/// `cuda`, else `wgpu`, else `flex`, else `ndarray` (the default).
#[cfg(all(feature = "flex", not(feature = "wgpu"), not(feature = "cuda")))]
pub type TestBackend = burn::backend::Flex;
/// The inner backend selected by the crate's cargo feature, for tests, examples and benches:
/// `cuda`, else `wgpu`, else `flex`, else `ndarray` (the default).
#[cfg(all(
    feature = "ndarray",
    not(feature = "flex"),
    not(feature = "wgpu"),
    not(feature = "cuda")
))]
pub type TestBackend = burn::backend::NdArray;
