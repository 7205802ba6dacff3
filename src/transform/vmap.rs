//! [`vmap`]: map a function over a batch axis.

use crate::VmapError;
use crate::level::Randomness;
use crate::transform::axes::{AxesOptions, Mapped, axes_setters, map_inputs, normalize_axis};
use crate::transform::run::{Batched, Cache, any_autodiff, common_device, example_sigs, record_on};
use crate::tree::{Leaf, Lift, Tree, TreeDef};

/// Vectorizes `f` over a batch axis: JAX's `jax.vmap`.
///
/// The returned [`Vmapped`] is configured with [`in_axes`](Vmapped::in_axes) and
/// [`out_axes`](Vmapped::out_axes) (both default to axis 0 of every tensor) and applied with
/// [`call`](Vmapped::call). Semantically,
///
/// ```text
/// vmap(f)(xs) == stack([f(x) for x in unstack(xs, in_axes)], out_axes)
/// ```
///
/// but it runs as one batched computation: `f` is recorded **once**, for one example, on Burn's
/// capture device, and the recording runs on the whole batch with a batching rule per operation
/// (the [`Vmap`](crate::Vmap) engine), on the backend of the arguments' device (Flex, wgpu,
/// CUDA). The function sees each mapped argument without its mapped axis (one rank less);
/// unmapped arguments are passed whole. The recording is cached per argument signature (shapes
/// of one example and dtypes, never the batch size), so later calls run it directly.
///
/// `f` is an ordinary Burn function of its arguments. What a recording implies:
/// - `f` reads tensors only through its arguments: a tensor it closes over lives on another
///   device than the recording, and is an error ([`VmapError::ForeignTensor`]) naming the fix
///   (pass it as an argument with `in_axes` `None`);
/// - `f`'s control flow cannot depend on tensor values (reading one is
///   [`VmapError::ValueRead`]), as under `jax.jit`;
/// - a number `f` closes over is read when `f` is recorded: one that changes later (behind a
///   `Mutex` or an atomic) is not seen by this `Vmapped`; pass it as a tensor argument.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::vmap;
/// let device = Device::default();
///
/// // One example: a vector times a matrix.
/// let f = |(v, m): (Tensor<1>, Tensor<2>)| v.unsqueeze::<2>().matmul(m).squeeze::<1>();
/// let vs = Tensor::<2>::from_floats([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], &device);
/// let m = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
///
/// // Map over the rows of `vs`, share `m`.
/// let out: Tensor<2> = vmap(f).in_axes([Some(0), None]).call((vs, m)).unwrap();
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
/// - [`VmapError::ForeignTensor`], [`VmapError::ValueRead`], [`VmapError::FunctionPanicked`]:
///   `f` cannot be recorded;
/// - [`VmapError::Device`]: arguments on different devices, or on a backend burn-vmap does not
///   run on.
pub fn vmap<F>(f: F) -> Vmapped<F> {
    Vmapped {
        f,
        axes: AxesOptions::default(),
        randomness: Randomness::Error,
        cache: Cache::default(),
    }
}

/// A function vectorized by [`vmap`].
#[derive(Debug, Clone)]
pub struct Vmapped<F> {
    f: F,
    axes: AxesOptions,
    randomness: Randomness,
    cache: Cache,
}

impl<F> Vmapped<F> {
    axes_setters!();

    /// Chooses what random ops inside `f` do (torch.func's `randomness`): see [`Randomness`].
    /// The default, [`Randomness::Error`], makes [`call`](Self::call) return
    /// [`VmapError::Randomness`] when `f` draws random numbers (`Tensor::random`,
    /// `random_like`, and `burn::nn::Dropout` on an autodiff device).
    ///
    /// ```
    /// use burn::tensor::{Device, Distribution, Tensor};
    /// use burn_vmap::{vmap, Randomness};
    /// let xs = Tensor::<2>::zeros([8, 100], &Device::default());
    /// let ys: Tensor<2> = vmap(|x: Tensor<1>| x.random_like(Distribution::Default))
    ///     .randomness(Randomness::Different)
    ///     .call(xs)
    ///     .unwrap();
    /// assert_eq!(ys.dims(), [8, 100]);
    /// ```
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// Applies the vectorized function to `inputs`; the result is `f`'s output with one more
    /// axis on every tensor ([`Lift`]: `Tensor<D>` becomes `Tensor<D + 1>`), so it needs no
    /// annotation.
    ///
    /// `I` is the batched argument tree, `A` what `f` takes (mapped axes removed), `R` what `f`
    /// returns. For a result that is not `R` lifted (an `out_axes` of `None`, or a struct
    /// without a [`Lift`] type), name it with [`call_as`](Vmapped::call_as).
    ///
    /// # Errors
    /// See [`vmap`].
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

    /// As [`call`](Vmapped::call), with the result type `O` named by the caller (`let out: O =
    /// vmap(f).call_as(xs)?`): the batch axes inserted at `out_axes`, none for an `out_axes` of
    /// `None`. Checked when the call runs.
    ///
    /// # Errors
    /// See [`vmap`].
    pub fn call_as<I, A, R, O>(&self, inputs: I) -> Result<O, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        O: Tree,
    {
        let (leaves, def) = inputs.flatten();
        let mapped = map_inputs("vmap", leaves, def, &self.axes.in_axes)?;
        let (leaves, out_def) = self.run_mapped::<A, R>(mapped)?;
        O::unflatten_named(&out_def, leaves, "out")
    }

    /// Runs checked arguments: records `f` (or takes the cached recording) and runs it batched.
    pub(crate) fn run_mapped<A: Tree, R: Tree>(
        &self,
        mapped: Mapped,
    ) -> Result<(Vec<Leaf>, TreeDef), VmapError>
    where
        F: Fn(A) -> R,
    {
        run_vmap::<A, R>(
            "vmap",
            &self.f,
            &self.cache,
            mapped,
            &self.axes.out_axes,
            self.randomness,
        )
    }
}

/// Records (or takes from `cache`) `f` for one example of `mapped` and runs it batched, with
/// outputs at `out_axes`: the body shared by `vmap` and the transforms built on it.
pub(crate) fn run_vmap<A: Tree, R: Tree>(
    transform: &'static str,
    f: &impl Fn(A) -> R,
    cache: &Cache,
    mapped: Mapped,
    out_axes: &crate::transform::Axes,
    randomness: Randomness,
) -> Result<(Vec<Leaf>, TreeDef), VmapError> {
    let Mapped {
        leaves,
        def,
        axes,
        size,
    } = mapped;
    let device = common_device(transform, &leaves)?;
    let sigs = example_sigs(&leaves, &axes);
    let autodiff = any_autodiff(&leaves);
    let recorded = cache.get_or_record(&def, &sigs, autodiff, || {
        record_on::<A, R>(transform, f, &def, &sigs, autodiff, &device)
    })?;
    let out_def = recorded.out_def.clone();
    let given = out_axes.broadcast_to(&out_def, "out_axes", "out")?;
    let out_paths = out_def.leaf_paths("out");
    let mut resolved = Vec::with_capacity(given.len());
    for ((axis, sig), path) in given
        .iter()
        .zip(recorded.program.output_sigs())
        .zip(&out_paths)
    {
        resolved.push(match axis {
            Some(a) => {
                let rank = sig.shape.num_dims() + 1;
                Some(normalize_axis(
                    "out_axes",
                    *a,
                    rank,
                    path,
                    sig.shape.as_slice(),
                )?)
            }
            None => None,
        });
    }
    let leaves = Batched {
        transform,
        program: &recorded.program,
        leaves,
        axes,
        size,
        out_axes: resolved,
        out_paths,
        randomness,
    }
    .run_on(&device)?;
    Ok((leaves, out_def))
}
