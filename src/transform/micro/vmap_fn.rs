//! The vectorizer a microbatched transform runs on each microbatch ([`VmapFn`]) and the ones
//! this crate provides.

use super::Axes;
use crate::VmapError;
use crate::level::Randomness;
use crate::transform::transform_call;
use crate::transform::vmap::vmap;

/// The vectorizer a microbatched transform runs on each microbatch (optax's `vmap_fn`).
///
/// [`PlainVmap`] is [`vmap`]; implement this trait to plug in another (a chunked vmap, a vmap
/// with a randomness mode, your own). It must behave like `vmap(f).in_axes(in_axes)` with
/// every output batched on axis 0.
pub trait VmapFn {
    transform_call! {
        vectorized;
        /// Vectorizes `f` over `inputs` with `in_axes`, outputs batched on axis 0.
        ///
        /// # Errors
        /// As [`vmap`].
        fn apply<F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError>;
    }
}

/// [`vmap`] as a [`VmapFn`]: the default vectorizer.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::micro::PlainVmap;
/// use burn_vmap::{micro_vmap, Vmap};
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Default::default());
/// let ys: Tensor<B, 2> = micro_vmap(|x: Tensor<B, 1>| x.clone() * x).vmap_fn(PlainVmap).call(xs).unwrap();
/// assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![1.0, 4.0, 9.0, 16.0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlainVmap;

impl VmapFn for PlainVmap {
    transform_call! {
        vectorized;
        fn apply<F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError> {
            vmap(|a: A| f(a)).in_axes(in_axes.clone()).call_as(inputs)
        }
    }
}

/// A plain [`vmap`] with a randomness mode, as a [`VmapFn`]: `micro_vmap(f)
/// .vmap_fn(Randomness::Different)` gives every example its own random draws (dropout).
///
/// ```
/// use burn::tensor::{Distribution, Tensor};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{micro_vmap, Randomness, Vmap};
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::zeros([4, 3], &Default::default());
/// let noisy: Tensor<B, 2> = micro_vmap(|x: Tensor<B, 1>| x.clone() + x.random_like(Distribution::Default))
///     .microbatch_size(2)
///     .vmap_fn(Randomness::Different)
///     .call(xs)
///     .unwrap();
/// assert_eq!(noisy.dims(), [4, 3]);
/// ```
impl VmapFn for Randomness {
    transform_call! {
        vectorized;
        fn apply<F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError> {
            vmap(|a: A| f(a))
                .in_axes(in_axes.clone())
                .randomness(*self)
                .call_as(inputs)
        }
    }
}

/// powerpax's [`chunked_vmap`](crate::transform::chunked_vmap) as a [`VmapFn`]: each microbatch is itself
/// run at most `chunk_size` examples at a time.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::Sum;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::micro::ChunkedVmapFn;
/// use burn_vmap::{micro_vmap, Vmap};
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::ones([8, 3], &Default::default());
/// let total: Tensor<B, 1> = micro_vmap(|x: Tensor<B, 1>| x * 2.0)
///     .microbatch_size(4)
///     .accumulator(Sum)
///     .vmap_fn(ChunkedVmapFn::new(3).unwrap())
///     .call(xs)
///     .unwrap();
/// assert_eq!(total.into_data().to_vec::<f32>().unwrap(), vec![16.0; 3]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedVmapFn {
    chunk_size: isize,
}

impl ChunkedVmapFn {
    /// At most `chunk_size` examples at once.
    ///
    /// # Errors
    /// [`VmapError::ChunkSizeNotPositive`] when `chunk_size <= 0`.
    pub fn new(chunk_size: isize) -> Result<Self, VmapError> {
        crate::transform::chunked_vmap((), chunk_size)?;
        Ok(Self { chunk_size })
    }
}

impl VmapFn for ChunkedVmapFn {
    transform_call! {
        vectorized;
        fn apply<F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError> {
            crate::transform::chunked_vmap(|a: A| f(a), self.chunk_size)?
                .in_axes(in_axes.clone())
                .call_as(inputs)
        }
    }
}
