//! [`vmap`]: map a function over a batch axis.

use crate::VmapError;
use crate::batching::BatchOps;
use crate::level::{Level, Randomness, VmapScope, is_finished};
use crate::transform::axes::{Axes, AxesOptions, Mapped, axes_setters, map_inputs, normalize_axis};
use crate::transform::transform_call;
use crate::tree::{Lift, Tree};

/// Vectorizes `f` over a batch axis: JAX's `jax.vmap`.
///
/// The returned [`Vmapped`] is configured with [`in_axes`](Vmapped::in_axes) and
/// [`out_axes`](Vmapped::out_axes) (both default to axis 0 for every tensor) and applied with
/// [`call`](Vmapped::call). Semantically,
///
/// ```text
/// vmap(f)(xs) == stack([f(x) for x in unstack(xs, in_axes)], out_axes)
/// ```
///
/// but it runs as one batched computation: `f` is called **once**, on tensors of the
/// [`Vmap`](crate::Vmap) backend (or `Autodiff<Vmap<_>>`) that carry the batch dimension
/// invisibly. The function sees each mapped argument without its mapped axis (one rank less);
/// unmapped arguments are passed whole. Because Rust types carry ranks, the argument and result
/// types of `f` and of the call differ by the mapped axes, and are checked when the call runs.
///
/// # Example
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{vmap, Vmap};
/// type B = Vmap<TestBackend>;
/// let device = Default::default();
///
/// // One example: a vector times a matrix.
/// let f = |(v, m): (Tensor<B, 1>, Tensor<B, 2>)| v.unsqueeze::<2>().matmul(m).squeeze::<1>();
/// let vs = Tensor::<B, 2>::from_floats([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], &device);
/// let m = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
///
/// // Map over the rows of `vs`, share `m`.
/// let out: Tensor<B, 2> = vmap(f).in_axes([Some(0), None]).call((vs, m)).unwrap();
/// assert_eq!(out.into_data().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 4.0, 6.0]);
/// ```
///
/// # Errors
/// - [`VmapError::InconsistentBatchSizes`]: mapped axes of different sizes;
/// - [`VmapError::AxisOutOfRange`]: an axis outside an argument's (or output's) rank;
/// - [`VmapError::NothingMapped`]: every `in_axes` entry is `None`;
/// - [`VmapError::TreeMismatch`], [`VmapError::LeafMismatch`]: axes that do not fit the
///   arguments, or argument/result types whose ranks do not match the mapped axes;
/// - [`VmapError::Randomness`]: `f` draws random numbers and no [`Randomness`] mode was chosen
///   (see [`Vmapped::randomness`]);
/// - [`VmapError::EscapedBatch`]: a result is batched at a vmap level that has already returned.
pub fn vmap<F>(f: F) -> Vmapped<F> {
    Vmapped {
        f,
        axes: AxesOptions::default(),
        randomness: Randomness::Error,
    }
}

/// A function vectorized by [`vmap`].
#[derive(Debug, Clone)]
pub struct Vmapped<F> {
    f: F,
    axes: AxesOptions,
    randomness: Randomness,
}

/// The batched arguments after validation: leaves moved into a fresh level.
pub(crate) struct Batched<B: BatchOps> {
    pub(crate) leaves: Vec<crate::tree::Leaf<B>>,
    pub(crate) def: crate::tree::TreeDef,
    pub(crate) level: Level,
    pub(crate) size: usize,
}

/// Flattens `inputs`, checks `in_axes` and the batch sizes, and batches every mapped leaf at a
/// fresh level.
pub(crate) fn batch_inputs<B: BatchOps, I: Tree<B>>(
    inputs: I,
    in_axes: &Axes,
) -> Result<Batched<B>, VmapError> {
    let Mapped {
        leaves,
        def,
        axes,
        size,
    } = map_inputs(inputs, in_axes)?;
    let level = Level::fresh();
    let leaves = leaves
        .into_iter()
        .zip(axes)
        .map(|(leaf, axis)| match (axis, leaf) {
            (Some(a), leaf) => leaf.batch(a, level),
            // Shared by every example: a gradient from outside the vmap sums over the batch.
            (None, leaf) => leaf.shared(level),
        })
        .collect();
    Ok(Batched {
        leaves,
        def,
        level,
        size,
    })
}

/// Unbatches every leaf of `out` from `level` into its `out_axes` position.
pub(crate) fn unbatch_outputs<B: BatchOps, R: Tree<B>, O: Tree<B>>(
    out: R,
    out_axes: &Axes,
    level: Level,
    size: usize,
) -> Result<O, VmapError> {
    let (leaves, def) = out.flatten();
    let axes = out_axes.broadcast_to(&def, "out_axes", "out")?;
    let paths = def.leaf_paths("out");
    let mut result = Vec::with_capacity(leaves.len());
    for ((leaf, axis), path) in leaves.into_iter().zip(axes).zip(paths) {
        if let Some(dead) = leaf
            .batch_dims()
            .as_slice()
            .iter()
            .find(|d| d.level != level && is_finished(d.level))
        {
            return Err(VmapError::EscapedBatch {
                path,
                level: dead.level.id(),
            });
        }
        match axis {
            Some(a) => {
                let shape = leaf.shape();
                let a = normalize_axis("out_axes", a, shape.num_dims() + 1, &path, &shape)?;
                result.push(leaf.unbatch(level, size, a));
            }
            None => {
                if leaf.batch_dims().position(level).is_some() {
                    return Err(VmapError::TreeMismatch {
                        what: "out_axes".into(),
                        path,
                        why: "the output varies across the batch but its out_axes entry is None"
                            .into(),
                    });
                }
                result.push(leaf);
            }
        }
    }
    O::unflatten_named(&def, result, "out")
}

impl<F> Vmapped<F> {
    axes_setters!();

    /// Chooses what random ops inside `f` do (torch.func's `randomness`): see [`Randomness`].
    /// The default, [`Randomness::Error`], makes [`call`](Self::call) return
    /// [`VmapError::Randomness`] when `f` draws random numbers (`Tensor::random`,
    /// `burn::nn::Dropout` in training mode, ...).
    ///
    /// ```
    /// use burn::tensor::{Distribution, Tensor};
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::{vmap, Randomness, Vmap};
    /// type B = Vmap<TestBackend>;
    /// let xs = Tensor::<B, 2>::zeros([8, 100], &Default::default());
    /// let ys: Tensor<B, 2> = vmap(|x: Tensor<B, 1>| x.random_like(Distribution::Default))
    ///     .randomness(Randomness::Different)
    ///     .call(xs)
    ///     .unwrap();
    /// assert_eq!(ys.dims(), [8, 100]);
    /// ```
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    transform_call! {
        lifted;
        /// Applies the vectorized function to `inputs`; the result is `f`'s output with one more
        /// axis on every tensor ([`Lift`]: `Tensor<B, D>` becomes `Tensor<B, D + 1>`), so it
        /// needs no annotation.
        ///
        /// `I` is the batched argument tree, `A` what `f` takes (mapped axes removed), `R` what
        /// `f` returns. For a result that is not `R` lifted (an `out_axes` of `None`, or a struct
        /// without a [`Lift`] type), name it with [`call_as`](Vmapped::call_as).
        ///
        /// # Errors
        /// See [`vmap`].
        [R: Lift<BO>]
        pub fn call(&self, inputs: I) -> Result<R::Lifted, VmapError> {
            self.call_as(inputs)
        }
    }

    transform_call! {
        vectorized;
        /// As [`call`](Vmapped::call), with the result type `O` named by the caller (`let out:
        /// O = vmap(f).call_as(xs)?`): the batch axes inserted at `out_axes`, none for an
        /// `out_axes` of `None`. Checked when the call runs.
        ///
        /// # Errors
        /// See [`vmap`].
        pub fn call_as(&self, inputs: I) -> Result<O, VmapError> {
            let batched = batch_inputs(inputs, &self.axes.in_axes)?;
            let args = A::unflatten_named(&batched.def, batched.leaves, "args")?;
            let scope = VmapScope::enter(batched.level, batched.size, self.randomness);
            let out = (self.f)(args);
            if let Some(refused) = scope.take_refused() {
                return Err(VmapError::Randomness {
                    transform: "vmap",
                    op: refused.op.into(),
                    size: refused.size,
                });
            }
            drop(scope);
            unbatch_outputs(out, &self.axes.out_axes, batched.level, batched.size)
        }
    }
}
