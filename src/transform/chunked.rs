//! [`chunked_vmap`]: [`vmap`] over at most `chunk_size` examples at a time.

use crate::transform::axes::{AxesOptions, Mapped, axes_setters, map_inputs, normalize_axis};
use crate::transform::columns;
use crate::transform::transform_call;
use crate::transform::vmap::vmap;
use crate::tree::{Leaf, TreeDef, rows};
use crate::{Randomness, VmapError};

/// Vectorizes `f` like [`vmap`], but over at most `chunk_size` examples at once: powerpax's
/// `chunked_vmap`.
///
/// ```text
/// B = size of the mapped axes
/// outs = []
/// for lo in (0..B).step_by(chunk_size):            # B // chunk_size full chunks, then the rest
///     outs.push(vmap(f)(inputs[lo : min(lo + chunk_size, B)]))
/// return concatenate(outs, along out_axes)
/// ```
///
/// The result equals `vmap(f)` for every chunk size; peak memory of `f`'s intermediates is
/// bounded by one chunk (the chunks run one after the other). Chunks are contiguous and need
/// not divide `B`: the `B % chunk_size` remaining examples run in one final, smaller vmap;
/// `chunk_size >= B` is a single vmap. As with [`vmap`], [`in_axes`](ChunkedVmapped::in_axes)
/// (default: axis 0 of every tensor) picks the mapped axes, `None` passes an argument whole to
/// every chunk, and [`out_axes`](ChunkedVmapped::out_axes) (default 0) places the batch axis of
/// each output.
///
/// # Example
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::chunked_vmap;
/// use burn_vmap::{vmap, Vmap};
/// type B = Vmap<TestBackend>;
/// let device = Default::default();
///
/// let f = |v: Tensor<B, 1>| v.clone() * v.sum();
/// let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// // Two examples at a time: a chunk of 2, then the remaining one.
/// let ys: Tensor<B, 2> = chunked_vmap(f, 2).unwrap().call(xs.clone()).unwrap();
/// let expected: Tensor<B, 2> = vmap(f).call(xs).unwrap();
/// assert_eq!(ys.into_data(), expected.into_data());
/// ```
///
/// # Errors
/// - [`VmapError::ChunkSizeNotPositive`] (from `chunked_vmap` itself): `chunk_size <= 0`;
/// - at the call, as [`vmap`]: [`VmapError::InconsistentBatchSizes`] (mapped axes of different
///   sizes), [`VmapError::AxisOutOfRange`] (e.g. a rank-0 argument mapped on axis 0),
///   [`VmapError::NothingMapped`], [`VmapError::TreeMismatch`], [`VmapError::LeafMismatch`].
pub fn chunked_vmap<F>(f: F, chunk_size: isize) -> Result<ChunkedVmapped<F>, VmapError> {
    if chunk_size <= 0 {
        return Err(VmapError::ChunkSizeNotPositive {
            transform: "chunked_vmap",
            chunk_size,
        });
    }
    Ok(ChunkedVmapped {
        f,
        chunk_size: chunk_size as usize,
        axes: AxesOptions::default(),
        randomness: Randomness::Error,
    })
}

/// A function vectorized by [`chunked_vmap`].
#[derive(Debug, Clone)]
pub struct ChunkedVmapped<F> {
    f: F,
    chunk_size: usize,
    axes: AxesOptions,
    randomness: Randomness,
}

impl<F> ChunkedVmapped<F> {
    axes_setters!();

    /// What random ops inside `f` do, as [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness)
    /// (default [`Randomness::Error`]; with `Different`, every chunk draws its own numbers).
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// The chunk size.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    transform_call! {
        lifted;
        /// Applies the chunked vectorized function to `inputs`; the result type follows from
        /// `f`'s, as [`Vmapped::call`](crate::transform::vmap::Vmapped::call).
        ///
        /// # Errors
        /// See [`chunked_vmap`].
        [R: crate::tree::Lift<BO>]
        pub fn call(&self, inputs: I) -> Result<R::Lifted, VmapError> {
            self.call_as(inputs)
        }
    }

    transform_call! {
        vectorized;
        /// As [`call`](ChunkedVmapped::call), with the result type named by the caller, as
        /// [`Vmapped::call_as`](crate::transform::vmap::Vmapped::call_as).
        ///
        /// # Errors
        /// See [`chunked_vmap`].
        pub fn call_as(&self, inputs: I) -> Result<O, VmapError> {
            let Mapped {
                leaves,
                def,
                axes: mapped,
                size,
            } = map_inputs(inputs, &self.axes.in_axes)?;
            let vmapped = vmap(&self.f)
                .in_axes(self.axes.in_axes.clone())
                .out_axes(self.axes.out_axes.clone())
                .randomness(self.randomness);
            if size <= self.chunk_size {
                return vmapped
                    .call_as(I::unflatten_named(&def, leaves, "args")?)
                    .map_err(|e| e.in_transform("chunked_vmap"));
            }

            let mut outs: Vec<Vec<Leaf<BO>>> = Vec::new();
            let mut out_def: Option<TreeDef> = None;
            let mut lo = 0;
            while lo < size {
                let hi = (lo + self.chunk_size).min(size);
                let chunk: Vec<Leaf<BI>> = leaves
                    .iter()
                    .zip(&mapped)
                    .map(|(leaf, axis)| match axis {
                        Some(a) => leaf.clone().slice_axis(*a, rows(lo..hi)),
                        None => leaf.clone(),
                    })
                    .collect();
                let out: O = vmapped
                    .call_as(I::unflatten_named(&def, chunk, "args")?)
                    .map_err(|e| e.in_transform("chunked_vmap"))?;
                let (out_leaves, d) = out.flatten();
                out_def.get_or_insert(d);
                outs.push(out_leaves);
                lo = hi;
            }
            let out_def = out_def.expect("at least one chunk");
            let out_axes = self.axes.out_axes.broadcast_to(&out_def, "out_axes", "out")?;
            let columns = columns(outs, out_axes.len());
            let paths = out_def.leaf_paths("out");
            let mut result = Vec::with_capacity(columns.len());
            for ((col, axis), path) in columns.into_iter().zip(out_axes).zip(paths) {
                match axis {
                    // Validated by every chunk's vmap: the output is the same for all chunks.
                    None => result.push(col.into_iter().next().expect("one output per chunk")),
                    Some(a) => {
                        let shape = col[0].shape();
                        let a = normalize_axis("out_axes", a, shape.num_dims(), &path, &shape)?;
                        result.push(Leaf::cat(col, a));
                    }
                }
            }
            O::unflatten_named(&out_def, result, "out")
        }
    }
}
