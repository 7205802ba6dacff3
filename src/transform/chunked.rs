//! [`chunked_vmap`]: [`vmap`](crate::vmap) over at most `chunk_size` examples at a time.

use crate::transform::axes::{AxesOptions, Mapped, axes_setters, map_inputs, normalize_axis};
use crate::transform::draws::{draw_seed, seeded};
use crate::transform::run::Cache;
use crate::transform::vmap::run_vmap;
use crate::tree::{Leaf, Lift, Tree, TreeDef, rows};
use crate::{Randomness, VmapError};

/// The transform's name in errors.
const NAME: &str = "chunked_vmap";

/// Vectorizes `f` like [`vmap`](crate::vmap), but over at most `chunk_size` examples at once:
/// powerpax's `chunked_vmap`.
///
/// ```text
/// B = size of the mapped axes
/// outs = []
/// for lo in (0..B).step_by(chunk_size):            # B / chunk_size full chunks, then the rest
///     outs.push(vmap(f)(inputs[lo : min(lo + chunk_size, B)]))
/// return concatenate(outs, along out_axes)
/// ```
///
/// The result equals `vmap(f)` for every chunk size; the memory of `f`'s intermediates is
/// bounded by one chunk (the chunks run one after the other). Chunks are contiguous and need
/// not divide `B`: the `B % chunk_size` remaining examples run in one final, smaller vmap;
/// `chunk_size >= B` is a single vmap. `f` is recorded once (the chunks share one per-example
/// signature, whatever their size), and the recording is kept for later calls. As with
/// [`vmap`](crate::vmap), [`in_axes`](ChunkedVmapped::in_axes) (default: axis 0 of every
/// tensor) picks the mapped axes, `None` passes an argument whole to every chunk, and
/// [`out_axes`](ChunkedVmapped::out_axes) (default 0) places the batch axis of each output.
/// Unlike powerpax's, which maps axis 0 of every argument, both are configurable.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::chunked_vmap;
/// use burn_vmap::vmap;
/// let device = Device::default();
///
/// let f = |v: Tensor<1>| v.clone() * v.sum();
/// let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// // Two examples at a time: a chunk of 2, then the remaining one.
/// let ys: Tensor<2> = chunked_vmap(f, 2).unwrap().call(xs.clone()).unwrap();
/// let expected: Tensor<2> = vmap(f).call(xs).unwrap();
/// assert_eq!(ys.into_data(), expected.into_data());
/// ```
///
/// # Errors
/// - [`VmapError::ChunkSizeNotPositive`] (from `chunked_vmap` itself): `chunk_size <= 0`;
/// - at the call, as [`vmap`](crate::vmap): [`VmapError::InconsistentBatchSizes`] (mapped axes
///   of different sizes), [`VmapError::AxisOutOfRange`] (e.g. a rank-0 argument mapped on axis
///   0), [`VmapError::NothingMapped`], [`VmapError::TreeMismatch`], [`VmapError::LeafMismatch`],
///   and the recording errors ([`VmapError::ForeignTensor`], [`VmapError::ValueRead`], ...).
pub fn chunked_vmap<F>(f: F, chunk_size: isize) -> Result<ChunkedVmapped<F>, VmapError> {
    if chunk_size <= 0 {
        return Err(VmapError::ChunkSizeNotPositive {
            transform: NAME,
            chunk_size,
        });
    }
    Ok(ChunkedVmapped {
        f,
        chunk_size: chunk_size as usize,
        axes: AxesOptions::default(),
        randomness: Randomness::Error,
        cache: Cache::default(),
    })
}

/// A function vectorized by [`chunked_vmap`].
#[derive(Debug, Clone)]
pub struct ChunkedVmapped<F> {
    f: F,
    chunk_size: usize,
    axes: AxesOptions,
    randomness: Randomness,
    cache: Cache,
}

impl<F> ChunkedVmapped<F> {
    axes_setters!();

    /// What random ops inside `f` do, as
    /// [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness) (default
    /// [`Randomness::Error`]; with `Different`, every example draws its own numbers).
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// The chunk size.
    ///
    /// ```
    /// use burn::tensor::Tensor;
    /// let f = |x: Tensor<1>| x;
    /// assert_eq!(burn_vmap::transform::chunked_vmap(f, 4).unwrap().chunk_size(), 4);
    /// ```
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Applies the chunked vectorized function to `inputs`; the result type follows from `f`'s,
    /// as [`Vmapped::call`](crate::transform::vmap::Vmapped::call).
    ///
    /// # Errors
    /// See [`chunked_vmap`].
    pub fn call<I, A, R>(&self, inputs: I) -> Result<R::Lifted, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree + Lift,
        R::Lifted: Tree,
    {
        self.call_as::<I, A, R, R::Lifted>(inputs)
    }

    /// As [`call`](ChunkedVmapped::call), with the result type `O` named by the caller, as
    /// [`Vmapped::call_as`](crate::transform::vmap::Vmapped::call_as).
    ///
    /// # Errors
    /// See [`chunked_vmap`].
    pub fn call_as<I, A, R, O>(&self, inputs: I) -> Result<O, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        O: Tree,
    {
        let (leaves, def) = inputs.flatten();
        let mapped = map_inputs(NAME, leaves, def, &self.axes.in_axes)?;
        let size = mapped.size;
        if size <= self.chunk_size {
            let (leaves, out_def) = self.run_chunk::<A, R>(mapped)?;
            return O::unflatten_named(&out_def, leaves, "out");
        }
        // `Randomness::Same` shares one draw across the batch: every chunk runs with the
        // generator seeded alike, so it draws what the first chunk drew (`transform::draws`).
        let same = match mapped.leaves.first() {
            Some(leaf) if self.randomness == Randomness::Same => {
                let device = leaf.device();
                Some((draw_seed(&device), device))
            }
            _ => None,
        };
        let mut chunks: Vec<Vec<Leaf>> = Vec::new();
        let mut out_def: Option<TreeDef> = None;
        for lo in (0..size).step_by(self.chunk_size) {
            let hi = (lo + self.chunk_size).min(size);
            let leaves = mapped
                .leaves
                .iter()
                .zip(&mapped.axes)
                .map(|(leaf, axis)| match axis {
                    Some(a) => leaf.clone().slice_axis(*a, rows(lo..hi)),
                    None => leaf.clone(),
                })
                .collect();
            let chunk = Mapped {
                leaves,
                def: mapped.def.clone(),
                axes: mapped.axes.clone(),
                size: hi - lo,
            };
            let run = || self.run_chunk::<A, R>(chunk);
            let (leaves, def) = match &same {
                Some((seed, device)) => seeded(device, Some(*seed), NAME, run).0,
                None => run(),
            }?;
            out_def.get_or_insert(def);
            chunks.push(leaves);
        }
        let out_def = out_def.expect("at least one chunk");
        let leaves = self.concatenate(chunks, &out_def)?;
        O::unflatten_named(&out_def, leaves, "out")
    }

    /// One vmap over a chunk, with the recording shared by every chunk.
    fn run_chunk<A: Tree, R: Tree>(&self, chunk: Mapped) -> Result<(Vec<Leaf>, TreeDef), VmapError>
    where
        F: Fn(A) -> R,
    {
        run_vmap::<A, R>(
            NAME,
            &self.f,
            &self.cache,
            chunk,
            &self.axes.out_axes,
            self.randomness,
        )
    }

    /// The chunks' outputs (one row of leaves per chunk) joined along each output's batch axis;
    /// an output of `out_axes` `None` is the same for every chunk (each chunk's vmap checked
    /// it), so the first chunk's is kept.
    fn concatenate(
        &self,
        chunks: Vec<Vec<Leaf>>,
        out_def: &TreeDef,
    ) -> Result<Vec<Leaf>, VmapError> {
        let out_axes = self
            .axes
            .out_axes
            .broadcast_to(out_def, "out_axes", "out")?;
        let paths = out_def.leaf_paths("out");
        let mut columns: Vec<Vec<Leaf>> = out_axes.iter().map(|_| Vec::new()).collect();
        for row in chunks {
            for (column, leaf) in columns.iter_mut().zip(row) {
                column.push(leaf);
            }
        }
        let mut result = Vec::with_capacity(columns.len());
        for ((column, axis), path) in columns.into_iter().zip(out_axes).zip(paths) {
            match axis {
                None => result.push(column.into_iter().next().expect("one output per chunk")),
                Some(a) => {
                    let shape = column[0].shape();
                    let a = normalize_axis("out_axes", a, shape.num_dims(), &path, &shape)?;
                    result.push(Leaf::cat(column, a));
                }
            }
        }
        Ok(result)
    }
}
