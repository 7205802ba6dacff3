//! # burn-vmap
//!
//! JAX-style vectorizing maps and per-example gradients for [Burn](https://burn.dev).
//!
//! - [`Vmap<B>`]: a backend decorator (like `Autodiff<B>`) whose tensors carry batch dimensions;
//!   every op applies a batching rule, so code written for one example runs on a batch.
//! - [`vmap`]: map a function over a batch axis, with `in_axes` / `out_axes` and nesting.
//! - Per-example gradients: stack `Autodiff` on top, `Autodiff<Vmap<B>>`, and call
//!   `backward()` inside [`vmap`]: parameters that are not batched receive batched (per-example)
//!   gradients, computed in one batched backward pass.
//! - [`Tree`]: pytrees of tensors (tuples, arrays, `Vec`, `Option`, maps, [`Static`]).
//!
//! ```
//! use burn::tensor::Tensor;
//! use burn_vmap::{vmap, TestBackend, Vmap};
//! type B = Vmap<TestBackend>;
//! let device = Default::default();
//!
//! // Written for one vector: v * sum(v).
//! let f = |v: Tensor<B, 1>| v.clone() * v.sum();
//! let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
//! let ys: Tensor<B, 2> = vmap(f).call(xs).unwrap();
//! assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![3.0, 6.0, 21.0, 28.0]);
//! ```
#![deny(missing_docs)]

// `#[derive(Tree)]` expands to `::burn_vmap::...` paths; this makes them resolve here too.
extern crate self as burn_vmap;

pub mod accumulate;
mod backend;
mod batching;
mod compat;
mod error;
mod level;
mod ops;
mod physical;
pub(crate) mod rules;
mod tensor;
pub mod transform;
pub mod tree;

pub use accumulate::{
    Acc, AccContext, AccKind, Accumulator, Concat, Custom, Mean, RowOp, RunningMean, Sum,
};
pub use backend::Vmap;
pub use batching::BatchOps;
pub use error::VmapError;
pub use level::{Level, Randomness};
pub use rules::fallback::{is_strict, set_strict, with_strict};
pub use tensor::{BatchDim, BatchDims, VmapTensor};
pub use transform::auto::{auto_vmap, AutoVmapped, Ranks};
pub use transform::chunked::{chunked_vmap, ChunkedVmapped};
pub use transform::custom::{custom_vmap, sequential_vmap, CustomVmap, SequentialVmap};
pub use transform::grad::{per_example_grads, ParamGrads};
pub use transform::micro::{
    clip_by_global_norm, global_norm, micro_grad, micro_grad_module, micro_vmap, scale_tree,
    ArgGrads, ArgNums, ChunkedVmapFn, GradFn, GradSource, Identity, LossOutput, MicroAux,
    MicroGrad, MicroVmap, ModuleGrads, NoMetrics, PlainVmap, TreeFn, VmapFn,
};
pub use transform::scan::{
    checkpoint_chunked_scan, scan, sliced_scan, CheckpointChunkedScan, Scan, SlicedScan,
};
pub use transform::vmap::{vmap, Vmapped};
pub use transform::Axes;
pub use tree::{DynTree, Leaf, Spec, Static, Tree, TreeDef};

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
