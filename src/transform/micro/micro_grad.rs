//! [`micro_grad`]: per-example value-and-grad in microbatches, and the builder
//! [`MicroGrad`] it shares with [`micro_grad_module`](super::micro_grad_module).

use std::marker::PhantomData;

use super::batches::Microbatching;
use super::grad_fn::{
    GradFn, Identity, LossAux, LossFn, MicroAux, MicroGradCall, MicroGradTypes, NoMetrics, TreeFn,
};
use super::grad_run::{Caches, GradRun, loss_tree, with_unit_dims};
use crate::VmapError;
use crate::accumulate::Sum;
use crate::transform::Axes;
use crate::transform::axes::map_inputs;
use crate::transform::run::{example_sigs, record};
use crate::tree::{DynTree, Key, Leaf, NodeKind, Spec, Tree, TreeDef};

/// Per-example value-and-grad with microbatching: optax's `optax.microbatching.micro_grad`.
///
/// ```text
/// for every example i:                        # batched args sliced at axis 0, the rest whole
///     (value_i, aux_i), g_i = value_and_grad(f, argnums)(example i's args)
///     t_i = transform_fn(g_i)                 # e.g. clip to a global L2 norm
///     metric_i = metrics_fn(g_i)              # of the RAW gradient
/// grads = accumulator over t_i                # microbatched as micro_vmap; default SUM
/// return grads, MicroAux { values: stack(value_i), metrics: stack(metric_i), aux: stack(aux_i) }
/// ```
///
/// **The default accumulator is [`Sum`], as in optax**: the result is the SUM of the
/// per-example (transformed) gradients, not their mean; use [`Mean`](crate::accumulate::Mean)
/// for the gradient of a mean loss.
///
/// `f` takes the argument tuple and returns a loss with one element, or `(loss, aux)`; it is
/// plain Burn code, recorded once for one example (as a training step runs, on an autodiff
/// device: a `Dropout` draws its mask per example). Each microbatch then runs as one batched
/// computation: one backward pass of the batched loss gives every example's gradient (vmap of
/// grad), and `transform_fn` and `metrics_fn` (written for ONE example's gradient tree: the
/// gradient of the differentiated argument, or a tuple of them for several argnums; recorded
/// once too) run on those gradients while they are still batched, so a dense layer's
/// per-example weight gradient is clipped and summed in factored form, never as a
/// `batch × d_in × d_out` tensor. With `keep_batch_dim` (the default, as optax) `f` sees each
/// batched argument with a leading batch dim of size 1; without, the bare example. For a Burn
/// module, see [`micro_grad_module`](crate::micro_grad_module).
///
/// # Example: optax's documentation example
/// ```
/// use burn::tensor::{Device, Int, Tensor};
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::micro_grad;
/// let device = Device::default();
///
/// let loss = |(p, x, y): (Tensor<1>, Tensor<2>, Tensor<1, Int>)| {
///     let diff = x.matmul(p.unsqueeze_dim(1)).squeeze_dim::<1>(1) - y.float();
///     (diff.clone() * diff).mean() * 0.5
/// };
/// let params = Tensor::<1>::zeros([1], &device);
/// let features = Tensor::<2>::ones([4, 1], &device);
/// let targets = Tensor::<1, Int>::from_ints([0, 2, 4, 6], &device);
///
/// let ((g, g2), aux) = micro_grad(loss)
///     .argnums(0)
///     .batch_argnums([1, 2])
///     .accumulator(Mean)
///     .transform_fn(|g: Tensor<1>| (g.clone(), g.clone() * g))
///     .metrics_fn(|g: Tensor<1>| (g.clone() * g).sum().sqrt())
///     .call((params, features, targets))
///     .unwrap();
/// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![-3.0]);
/// assert_eq!(g2.into_data().to_vec::<f32>().unwrap(), vec![14.0]);
/// assert_eq!(aux.values.into_data().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 8.0, 18.0]);
/// assert_eq!(aux.metrics.into_data().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
/// ```
///
/// # Errors
/// Those of [`micro_vmap`](crate::micro_vmap), plus [`VmapError::ArgumentIndex`] for an
/// `argnums` or `batch_argnums` entry past the last argument, [`VmapError::NotDifferentiable`]
/// for a differentiated int or bool tensor and [`VmapError::LossNotScalar`].
pub fn micro_grad<F>(f: F) -> MicroGrad<F> {
    MicroGrad::new(
        f,
        GradOptions {
            argnums: vec![0],
            single_argnum: true,
            batch_argnums: Some(vec![1]),
            keep_batch_dim: true,
            micro: Microbatching::default(),
        },
    )
}

/// Marks a [`MicroGrad`] built by [`micro_grad`]: gradients with respect to its arguments.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::transform::micro::{ArgGrads, MicroGrad};
/// let _: MicroGrad<_> = burn_vmap::micro_grad(|(w,): (Tensor<1>,)| w.sum());
/// let _ = ArgGrads;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ArgGrads;

/// Marks a [`MicroGrad`] built by [`micro_grad_module`](crate::micro_grad_module): gradients
/// of a module's parameters, and a call that takes the module.
///
/// ```
/// use burn_vmap::transform::micro::ModuleParams;
/// let _ = ModuleParams;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ModuleParams;

/// A function transformed by [`micro_grad`] (or [`micro_grad_module`](crate::micro_grad_module)):
/// `S` is the accumulator tree, `T` the `transform_fn`, `M` the `metrics_fn`, `Src` where the
/// gradients come from ([`ArgGrads`] or [`ModuleParams`]). One builder serves a whole training
/// loop: it holds the recordings of the loss, `transform_fn` and `metrics_fn`, one per
/// signature.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::micro_grad;
/// let device = Device::default();
/// let xs = Tensor::<2>::ones([4, 3], &device);
/// let step = micro_grad(|(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum())
///     .accumulator(Mean)
///     .transform_fn(|g: Tensor<1>| g);
/// let mut w = Tensor::<1>::zeros([3], &device);
/// for _ in 0..3 {
///     let (g, _) = step.call((w.clone(), xs.clone())).unwrap();
///     w = w - g * 0.1; // one recording for the three steps
/// }
/// assert_eq!(w.into_data().to_vec::<f32>().unwrap(), vec![-0.3; 3]);
/// ```
#[derive(Debug, Clone)]
pub struct MicroGrad<F, S = Sum, T = Identity, M = NoMetrics, Src = ArgGrads> {
    pub(super) f: F,
    pub(super) opts: GradOptions,
    pub(super) accumulator: S,
    pub(super) transform_fn: T,
    pub(super) metrics_fn: M,
    pub(super) caches: Caches,
    source: PhantomData<Src>,
}

/// The settings of [`MicroGrad`] that do not change its type.
#[derive(Debug, Clone)]
pub(super) struct GradOptions {
    pub(super) argnums: Vec<usize>,
    pub(super) single_argnum: bool,
    /// `None`: every argument (the module variant's default).
    pub(super) batch_argnums: Option<Vec<usize>>,
    pub(super) keep_batch_dim: bool,
    pub(super) micro: Microbatching,
}

/// Argument positions: one index (the gradient has that argument's structure) or several (a
/// tuple of gradients).
///
/// ```
/// use burn_vmap::transform::micro::ArgNums;
/// assert_eq!(0usize.positions(), (vec![0], true));
/// assert_eq!([0, 2].positions(), (vec![0, 2], false));
/// ```
pub trait ArgNums {
    /// The positions, and whether a single index was given.
    fn positions(self) -> (Vec<usize>, bool);
}
impl ArgNums for usize {
    fn positions(self) -> (Vec<usize>, bool) {
        (vec![self], true)
    }
}
impl<const N: usize> ArgNums for [usize; N] {
    fn positions(self) -> (Vec<usize>, bool) {
        (self.to_vec(), false)
    }
}
impl ArgNums for Vec<usize> {
    fn positions(self) -> (Vec<usize>, bool) {
        (self, false)
    }
}

impl<F, Src> MicroGrad<F, Sum, Identity, NoMetrics, Src> {
    /// The builder with the default accumulator and functions.
    pub(super) fn new(f: F, opts: GradOptions) -> Self {
        MicroGrad {
            f,
            opts,
            accumulator: Sum,
            transform_fn: Identity,
            metrics_fn: NoMetrics,
            caches: Caches::default(),
            source: PhantomData,
        }
    }
}

impl<F, S, T, M, Src> MicroGrad<F, S, T, M, Src> {
    /// The differentiated arguments: an index such as `0` (the gradient has that argument's
    /// structure) or a list such as `[0, 1]` (a tuple of gradients, one per entry; `[0]` gives
    /// a 1-tuple), as optax. Default `0`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, b) = (Tensor::<1>::ones([2], &device), Tensor::<1>::zeros([1], &device));
    /// let xs = Tensor::<2>::ones([3, 2], &device);
    /// let loss = |(w, b, x): (Tensor<1>, Tensor<1>, Tensor<2>)| (x.matmul(w.unsqueeze_dim(1)).sum() + b).sum();
    /// let (grads, _): ((Tensor<1>, Tensor<1>), _) = micro_grad(loss)
    ///     .argnums([0, 1])
    ///     .batch_argnums(2)
    ///     .metrics_fn(|(gw, _): (Tensor<1>, Tensor<1>)| gw.sum())
    ///     .call((w, b, xs))
    ///     .unwrap();
    /// assert_eq!(grads.0.into_data().to_vec::<f32>().unwrap(), vec![3.0, 3.0]); // summed
    /// assert_eq!(grads.1.into_data().to_vec::<f32>().unwrap(), vec![3.0]);
    /// ```
    pub fn argnums(mut self, argnums: impl ArgNums) -> Self {
        let (p, single) = argnums.positions();
        self.opts.argnums = p;
        self.opts.single_argnum = single;
        self
    }

    /// The arguments carrying the batch on axis 0 (default `1`; every argument for
    /// [`micro_grad_module`](crate::micro_grad_module)). The others are passed whole to every
    /// example, wherever they stand.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, scale, xs) = (Tensor::<1>::ones([2], &device), Tensor::<1>::from_floats([2.0], &device), Tensor::<2>::ones([4, 2], &device));
    /// // x (argument 2) is batched; scale (argument 1) is shared.
    /// let loss = |(w, s, x): (Tensor<1>, Tensor<1>, Tensor<2>)| (x.matmul(w.unsqueeze_dim(1)).sum() * s).sum();
    /// let g = micro_grad(loss)
    ///     .batch_argnums(2)
    ///     .transform_fn(|g: Tensor<1>| g)
    ///     .call((w, scale, xs))
    ///     .unwrap()
    ///     .0;
    /// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![8.0, 8.0]);
    /// ```
    pub fn batch_argnums(mut self, batch_argnums: impl ArgNums) -> Self {
        self.opts.batch_argnums = Some(batch_argnums.positions().0);
        self
    }

    /// Whether `f` sees each batched argument with a leading batch dim of size 1 (default
    /// `true`, as optax: a function written for a batch works unchanged), or the bare example.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// // x is [3] here (without keep_batch_dim), [1, 3] with it.
    /// let loss = |(w, x): (Tensor<1>, Tensor<1>)| (w * x).sum();
    /// let g = micro_grad(loss).keep_batch_dim(false).transform_fn(|g: Tensor<1>| g).call((w, xs)).unwrap().0;
    /// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![4.0; 3]);
    /// ```
    pub fn keep_batch_dim(mut self, keep: bool) -> Self {
        self.opts.keep_batch_dim = keep;
        self
    }

    /// Examples per microbatch (`None`, the default: one batched run over the whole batch).
    /// Must divide the batch.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// let g = micro_grad(loss).microbatch_size(2).transform_fn(|g: Tensor<1>| g).call((w, xs)).unwrap().0;
    /// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![4.0; 3]);
    /// ```
    pub fn microbatch_size(mut self, size: impl Into<Option<usize>>) -> Self {
        self.opts.micro.microbatch_size = size.into();
        self
    }

    /// Runs only the first `n` microbatches (ignored without a microbatch size): the rows of
    /// the others are zero in [`MicroAux`], and they add nothing to the gradients. See also
    /// `call_with`, which sets it per call.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// let (g, aux) = micro_grad(loss)
    ///     .microbatch_size(1)
    ///     .num_real_microbatches(Some(3))
    ///     .transform_fn(|g: Tensor<1>| g)
    ///     .call((w, xs))
    ///     .unwrap();
    /// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![3.0; 3]);
    /// assert_eq!(aux.values.into_data().to_vec::<f32>().unwrap(), vec![3.0, 3.0, 3.0, 0.0]);
    /// ```
    pub fn num_real_microbatches(mut self, n: Option<usize>) -> Self {
        self.opts.micro.num_real_microbatches = n;
        self
    }

    /// The accumulator tree for the transformed gradients (default [`Sum`]; see
    /// [`accumulate`](crate::accumulate)).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{accumulate::Concat, micro_grad};
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// let per_example = micro_grad(loss).accumulator(Concat).transform_fn(|g: Tensor<1>| g).call((w, xs)).unwrap().0;
    /// assert_eq!(per_example.dims(), [4, 3]);
    /// ```
    pub fn accumulator<S2>(self, accumulator: S2) -> MicroGrad<F, S2, T, M, Src> {
        MicroGrad {
            f: self.f,
            opts: self.opts,
            accumulator,
            transform_fn: self.transform_fn,
            metrics_fn: self.metrics_fn,
            caches: self.caches,
            source: PhantomData,
        }
    }

    /// Applied to every example's gradient tree before accumulating (e.g. clipping with
    /// [`clip_by_global_norm`](crate::clip_by_global_norm)); written for one example, recorded
    /// once, run on the batched gradients.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{clip_by_global_norm, micro_grad};
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([2], &device), Tensor::<2>::from_floats([[3.0, 4.0], [0.3, 0.4]], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// // Per-example gradients (3, 4) and (0.3, 0.4), clipped to norm 1: (0.6, 0.8) + (0.3, 0.4).
    /// let g = micro_grad(loss).transform_fn(|g: Tensor<1>| clip_by_global_norm(g, 1.0)).call((w, xs)).unwrap().0;
    /// let g = g.into_data().to_vec::<f32>().unwrap();
    /// assert!((g[0] - 0.9).abs() < 1e-6 && (g[1] - 1.2).abs() < 1e-6, "{g:?}");
    /// ```
    pub fn transform_fn<G, O, Fc: Fn(G) -> O>(
        self,
        transform_fn: Fc,
    ) -> MicroGrad<F, S, TreeFn<Fc, G, O>, M, Src> {
        MicroGrad {
            f: self.f,
            opts: self.opts,
            accumulator: self.accumulator,
            transform_fn: TreeFn::new(transform_fn),
            metrics_fn: self.metrics_fn,
            caches: self.caches.with_new_transform(),
            source: PhantomData,
        }
    }

    /// Computed on every example's RAW gradient tree and returned stacked in
    /// [`MicroAux::metrics`] (e.g. the per-example gradient norm).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{global_norm, micro_grad};
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([2], &device), Tensor::<2>::from_floats([[3.0, 4.0], [0.3, 0.4]], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// let (_, aux) = micro_grad(loss).metrics_fn(|g: Tensor<1>| global_norm(&g)).call((w, xs)).unwrap();
    /// let norms = aux.metrics.into_data().to_vec::<f32>().unwrap();
    /// assert!((norms[0] - 5.0).abs() < 1e-5 && (norms[1] - 0.5).abs() < 1e-6, "{norms:?}");
    /// ```
    pub fn metrics_fn<G, O, Fc: Fn(G) -> O>(
        self,
        metrics_fn: Fc,
    ) -> MicroGrad<F, S, T, TreeFn<Fc, G, O>, Src> {
        MicroGrad {
            f: self.f,
            opts: self.opts,
            accumulator: self.accumulator,
            transform_fn: self.transform_fn,
            metrics_fn: TreeFn::new(metrics_fn),
            caches: self.caches.with_new_metrics(),
            source: PhantomData,
        }
    }
}

impl<F, S, T, M> MicroGrad<F, S, T, M, ArgGrads> {
    /// Applies the transform to the argument tuple `args`.
    ///
    /// The result type follows from the builder's ([`MicroGradTypes`]): the accumulated
    /// gradients (their type is what `transform_fn` returns, or the raw gradient's type without
    /// one; [`Concat`](crate::accumulate::Concat) adds the batch axis) and [`MicroAux`] with the
    /// stacked loss values, metrics and aux. The raw gradient's type `G` comes from the typed
    /// closure of `transform_fn` or `metrics_fn`; with neither, name the result with
    /// [`call_as`](MicroGrad::call_as). `I` is the argument tuple, `A` what `f` takes (the
    /// same tuple with one example of each batched argument).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// // has_aux: the loss and a tree of per-example values.
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| {
    ///     let pred = x.matmul(w.unsqueeze_dim(1));
    ///     (pred.clone().sum(), pred)
    /// };
    /// let (g, aux) = micro_grad(loss).transform_fn(|g: Tensor<1>| g).call((w, xs)).unwrap();
    /// assert_eq!(g.dims(), [3]);
    /// assert_eq!(aux.aux.dims(), [4, 1, 1]); // each example's [1, 1] prediction
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad`].
    pub fn call<I, A, G>(&self, args: I) -> MicroGradCall<S, T, M, G, LossAux<F, A>>
    where
        F: LossFn<A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        (S, T, M): MicroGradTypes<G, LossAux<F, A>>,
    {
        self.run_args(args, self.opts.micro.num_real_microbatches)
    }

    /// As [`call`](MicroGrad::call), with `num_real_microbatches` for this call only.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad;
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// let grad = micro_grad(loss).microbatch_size(2).transform_fn(|g: Tensor<1>| g);
    /// let (half, _) = grad.call_with((w, xs), Some(1)).unwrap();
    /// assert_eq!(half.into_data().to_vec::<f32>().unwrap(), vec![2.0; 3]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad`].
    pub fn call_with<I, A, G>(
        &self,
        args: I,
        num_real_microbatches: Option<usize>,
    ) -> MicroGradCall<S, T, M, G, LossAux<F, A>>
    where
        F: LossFn<A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        (S, T, M): MicroGradTypes<G, LossAux<F, A>>,
    {
        self.run_args(args, num_real_microbatches)
    }

    /// As [`call`](MicroGrad::call), with the result named by the caller: `let (grads, aux):
    /// (G, MicroAux<MO, XO>) = micro_grad(f).call_as(args)?`, for results whose types do not
    /// follow from the builder's (no typed `transform_fn` or `metrics_fn`, an accumulator
    /// [`Spec`], an aux struct without [`Lift`](crate::tree::Lift)).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{micro_grad, MicroAux};
    /// let device = Device::default();
    /// let (w, xs) = (Tensor::<1>::ones([3], &device), Tensor::<2>::ones([4, 3], &device));
    /// let loss = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    /// let (g, _): (Tensor<1>, MicroAux) = micro_grad(loss).call_as((w, xs)).unwrap();
    /// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![4.0; 3]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad`].
    pub fn call_as<I, A, G, MO, XO>(&self, args: I) -> Result<(G, MicroAux<MO, XO>), VmapError>
    where
        F: LossFn<A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        G: Tree,
        MO: Tree,
        XO: Tree,
    {
        self.run_args(args, self.opts.micro.num_real_microbatches)
    }

    /// Records `f` at the arguments' per-example signature (or takes the cached recording) and
    /// runs the microbatched value-and-grad.
    fn run_args<I, A, G, MO, XO>(
        &self,
        args: I,
        num_real_microbatches: Option<usize>,
    ) -> Result<(G, MicroAux<MO, XO>), VmapError>
    where
        F: LossFn<A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        G: Tree,
        MO: Tree,
        XO: Tree,
    {
        const NAME: &str = "micro_grad";
        let (leaves, def) = args.flatten();
        let plan = self.opts.plan(&leaves, &def)?;
        let mapped = map_inputs(NAME, leaves, def, &plan.in_axes)?;
        let sigs = with_unit_dims(example_sigs(&mapped.leaves, &mapped.axes), &plan.unit);
        let loss = self
            .caches
            .loss
            .get_or_record(&mapped.def, &sigs, true, || {
                let f = |a: A| loss_tree(self.f.loss(a));
                record::<A, DynTree>(NAME, &f, &mapped.def, &sigs, true)
            })?;
        let grad_sigs = plan.tracked.iter().map(|&i| sigs[i].clone()).collect();
        self.run_grads(GradRun {
            transform: NAME,
            loss: &loss,
            params: Vec::new(),
            args: mapped,
            unit: plan.unit,
            tracked: plan.tracked,
            grad_def: plan.grad_def,
            grad_sigs,
            micro: Microbatching {
                num_real_microbatches,
                ..self.opts.micro
            },
        })
    }
}

/// How [`micro_grad`]'s arguments enter the recorded loss.
pub(super) struct ArgPlan {
    /// Axis 0 for the batched arguments, `None` for the others.
    pub(super) in_axes: Axes,
    /// Per leaf: whether the function sees it with a leading unit dim (`keep_batch_dim`).
    pub(super) unit: Vec<bool>,
    /// The differentiated leaves, in the order of the gradient tree.
    pub(super) tracked: Vec<usize>,
    /// The structure of one example's gradient.
    pub(super) grad_def: TreeDef,
}

impl GradOptions {
    /// Checks the argument indices against the argument tuple (`leaves`, `def`) and plans how
    /// every leaf enters the loss.
    ///
    /// # Errors
    /// [`VmapError::TreeMismatch`] when the arguments are not a tuple,
    /// [`VmapError::ArgumentIndex`], [`VmapError::NotDifferentiable`].
    pub(super) fn plan(&self, leaves: &[Leaf], def: &TreeDef) -> Result<ArgPlan, VmapError> {
        let TreeDef::Node {
            kind: NodeKind::Tuple,
            children,
            ..
        } = def
        else {
            return Err(VmapError::TreeMismatch {
                what: "args".into(),
                path: "args".into(),
                why: "micro_grad takes its arguments as a tuple, e.g. `(params, x, y)`".into(),
            });
        };
        let n_args = children.len();
        let batch_argnums = self
            .batch_argnums
            .clone()
            .unwrap_or_else(|| (0..n_args).collect());
        for (what, list) in [
            ("argnums", &self.argnums),
            ("batch_argnums", &batch_argnums),
        ] {
            if let Some(&bad) = list.iter().find(|&&i| i >= n_args) {
                return Err(VmapError::ArgumentIndex {
                    what: what.into(),
                    index: bad,
                    num_arguments: n_args,
                });
            }
        }
        // Leaf ranges of the top-level arguments.
        let mut ranges = Vec::with_capacity(n_args);
        let mut start = 0;
        for c in children {
            ranges.push(start..start + c.num_leaves());
            start += c.num_leaves();
        }
        for &a in &self.argnums {
            for i in ranges[a].clone() {
                if leaves[i].kind_name() != "float" {
                    return Err(VmapError::NotDifferentiable {
                        path: def.leaf_path("args", i),
                        kind: leaves[i].kind_name(),
                    });
                }
            }
        }
        let grad_def = if self.single_argnum && !self.argnums.is_empty() {
            children[self.argnums[0]].clone()
        } else {
            TreeDef::Node {
                kind: NodeKind::Tuple,
                keys: (0..self.argnums.len()).map(Key::Index).collect(),
                children: self.argnums.iter().map(|&a| children[a].clone()).collect(),
            }
        };
        let tracked = self
            .argnums
            .iter()
            .flat_map(|&a| ranges[a].clone())
            .collect();
        let batched: Vec<bool> = (0..n_args).map(|a| batch_argnums.contains(&a)).collect();
        let unit = (0..leaves.len())
            .map(|i| {
                let arg = ranges.iter().position(|r| r.contains(&i)).unwrap_or(0);
                self.keep_batch_dim && batched[arg]
            })
            .collect();
        let in_axes = Spec::Seq(
            batched
                .iter()
                .map(|&b| Spec::Leaf(b.then_some(0)))
                .collect(),
        );
        Ok(ArgPlan {
            in_axes,
            unit,
            tracked,
            grad_def,
        })
    }
}
