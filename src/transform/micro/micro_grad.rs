//! [`micro_grad`] and [`micro_grad_module`]: per-example value-and-grad in microbatches.

use std::cell::RefCell;
use std::marker::PhantomData;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::backend::Backend;
use burn_backend::backend::ops::FloatTensorOps;
use burn_backend::{Shape, TensorMetadata};

use super::grad_fn::{
    ArgGrads, GradFn, GradSource, Identity, LossOutput, MicroAux, MicroGradResult, MicroGradTypes,
    NoMetrics, TreeFn,
};
use super::run::{Microbatching, microbatching_setters, run_microbatched};
use super::{Axes, Inner, PlainVmap, VmapFn};
use crate::VmapError;
use crate::accumulate::{Acc, Concat, Sum, accumulator_spec};
use crate::transform::axes::map_inputs;
use crate::transform::transform_call;
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
/// per-example (transformed) gradients, not their mean; use [`Mean`](crate::accumulate::Mean) for the
/// gradient of a mean loss.
///
/// It runs as one batched computation per microbatch (vmap of grad on `Autodiff<Vmap<B>>`,
/// the Goodfellow approach), never as a loop of size-1 backward passes. The function takes
/// the argument tuple on an autodiff backend `AB` (`Autodiff<Vmap<B>>`) and returns a loss
/// with one element, or `(loss, aux)`; gradients, `transform_fn` and `metrics_fn` live on
/// `AB::InnerBackend`.
///
/// `transform_fn` and `metrics_fn` are written for ONE example's gradient tree: the gradient
/// of the differentiated argument (one argnum), or a tuple of them (several). They run
/// vectorized. With `keep_batch_dim` (the default, as optax) `f` sees each batched argument
/// with a leading batch dim of size 1; without, the bare example. For a Burn `Module`, see
/// [`micro_grad_module`](crate::micro_grad_module).
///
/// # Example: optax's documentation example
/// ```
/// use burn::backend::Autodiff;
/// use burn::tensor::{Int, Tensor};
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{micro_grad, Vmap};
/// type I = Vmap<TestBackend>;
/// type AB = Autodiff<I>;
/// let device = Default::default();
///
/// let loss = |(p, x, y): (Tensor<AB, 1>, Tensor<AB, 2>, Tensor<AB, 1, Int>)| {
///     let diff = x.matmul(p.unsqueeze_dim(1)).squeeze_dim::<1>(1) - y.float();
///     (diff.clone() * diff).mean() * 0.5
/// };
/// let params = Tensor::<AB, 1>::zeros([1], &device);
/// let features = Tensor::<AB, 2>::ones([4, 1], &device);
/// let targets = Tensor::<AB, 1, Int>::from_ints([0, 2, 4, 6], &device);
///
/// let ((g, g2), aux) = micro_grad(loss)
///     .argnums(0)
///     .batch_argnums([1, 2])
///     .accumulator(Mean)
///     .transform_fn(|g: Tensor<I, 1>| (g.clone(), g.clone() * g))
///     .metrics_fn(|g: Tensor<I, 1>| (g.clone() * g).sum().sqrt())
///     .call((params, features, targets))
///     .unwrap();
/// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![-3.0]);
/// assert_eq!(g2.into_data().to_vec::<f32>().unwrap(), vec![14.0]);
/// assert_eq!(aux.values.into_data().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 8.0, 18.0]);
/// assert_eq!(aux.metrics.into_data().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
/// ```
///
/// # Errors
/// Those of [`micro_vmap`](super::micro_vmap), plus [`VmapError::ArgumentIndex`] for an `argnums` or
/// `batch_argnums` entry past the last argument, [`VmapError::NotDifferentiable`] for a
/// differentiated int or bool tensor and [`VmapError::LossNotScalar`].
pub fn micro_grad<F>(f: F) -> MicroGrad<F> {
    let opts = GradOptions {
        argnums: vec![0],
        single_argnum: true,
        batch_argnums: Some(vec![1]),
        keep_batch_dim: true,
        micro: Microbatching::default(),
    };
    MicroGrad::new(f, ArgGrads, opts)
}

/// A function transformed by [`micro_grad`] (or [`micro_grad_module`](crate::micro_grad_module)).
#[derive(Debug, Clone)]
pub struct MicroGrad<F, S = Sum, T = Identity, M = NoMetrics, V = PlainVmap, Src = ArgGrads> {
    pub(super) f: F,
    source: Src,
    pub(super) opts: GradOptions,
    accumulator: S,
    transform_fn: T,
    metrics_fn: M,
    vmap_fn: V,
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

impl<F, Src> MicroGrad<F, Sum, Identity, NoMetrics, PlainVmap, Src> {
    /// The builder with the default accumulator, functions and vectorizer.
    pub(super) fn new(f: F, source: Src, opts: GradOptions) -> Self {
        MicroGrad {
            f,
            source,
            opts,
            accumulator: Sum,
            transform_fn: Identity,
            metrics_fn: NoMetrics,
            vmap_fn: PlainVmap,
        }
    }
}

impl<F, S, T, M, V, Src> MicroGrad<F, S, T, M, V, Src> {
    /// The differentiated arguments: an index such as `0` (the gradient has that argument's
    /// structure) or a list such as `[0, 1]` (a tuple of gradients, one per entry; `[0]` gives
    /// a 1-tuple), as optax. Default `0`.
    pub fn argnums(mut self, argnums: impl ArgNums) -> Self {
        let (p, single) = argnums.positions();
        self.opts.argnums = p;
        self.opts.single_argnum = single;
        self
    }

    /// The arguments carrying the batch on axis 0 (default `1`). The others are passed whole
    /// to every example, wherever they stand.
    pub fn batch_argnums(mut self, batch_argnums: impl ArgNums) -> Self {
        self.opts.batch_argnums = Some(batch_argnums.positions().0);
        self
    }

    /// Whether `f` sees each example with a leading batch dim of size 1 (default `true`, as
    /// optax), or the bare example.
    pub fn keep_batch_dim(mut self, keep: bool) -> Self {
        self.opts.keep_batch_dim = keep;
        self
    }

    microbatching_setters!(opts.micro);

    /// The accumulator tree for the transformed gradients (default [`Sum`]).
    pub fn accumulator<S2>(self, accumulator: S2) -> MicroGrad<F, S2, T, M, V, Src> {
        self.map_parts(|_, t, m, v| (accumulator, t, m, v))
    }

    /// Applied to every example's gradient tree before accumulating (e.g. clipping).
    pub fn transform_fn<G, O, Fc: Fn(G) -> O>(
        self,
        transform_fn: Fc,
    ) -> MicroGrad<F, S, TreeFn<Fc, G, O>, M, V, Src> {
        self.map_parts(|s, _, m, v| {
            (
                s,
                TreeFn(transform_fn, "transform_fn(g)", PhantomData),
                m,
                v,
            )
        })
    }

    /// Computed on every example's RAW gradient tree and returned stacked in
    /// [`MicroAux::metrics`] (e.g. the per-example gradient norm).
    pub fn metrics_fn<G, O, Fc: Fn(G) -> O>(
        self,
        metrics_fn: Fc,
    ) -> MicroGrad<F, S, T, TreeFn<Fc, G, O>, V, Src> {
        self.map_parts(|s, t, _, v| (s, t, TreeFn(metrics_fn, "metrics_fn(g)", PhantomData), v))
    }

    /// What random ops inside `f` do, as [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness):
    /// the vectorizer becomes a plain vmap with that mode (`Randomness::Different` gives every
    /// example its own draws, as dropout needs).
    pub fn randomness(
        self,
        randomness: crate::Randomness,
    ) -> MicroGrad<F, S, T, M, crate::Randomness, Src> {
        self.vmap_fn(randomness)
    }

    /// The vectorizer run on each microbatch (default [`PlainVmap`]).
    pub fn vmap_fn<V2: VmapFn>(self, vmap_fn: V2) -> MicroGrad<F, S, T, M, V2, Src> {
        self.map_parts(|s, t, m, _| (s, t, m, vmap_fn))
    }

    /// The same transform with the typed parts (accumulator, `transform_fn`, `metrics_fn`,
    /// vectorizer) replaced by what `parts` makes of them: the one place the type-changing
    /// setters rebuild the builder.
    fn map_parts<S2, T2, M2, V2>(
        self,
        parts: impl FnOnce(S, T, M, V) -> (S2, T2, M2, V2),
    ) -> MicroGrad<F, S2, T2, M2, V2, Src> {
        let (accumulator, transform_fn, metrics_fn, vmap_fn) = parts(
            self.accumulator,
            self.transform_fn,
            self.metrics_fn,
            self.vmap_fn,
        );
        MicroGrad {
            f: self.f,
            source: self.source,
            opts: self.opts,
            accumulator,
            transform_fn,
            metrics_fn,
            vmap_fn,
        }
    }

    /// The transform on the argument tuple `args` (on the autodiff backend `AB`), with the loss
    /// function `f` and the gradient source `source`: what every call runs.
    #[allow(clippy::type_complexity)]
    pub(super) fn run<AB, I, A, Out, G, MO, XO, Fx, Sx>(
        &self,
        f: &Fx,
        source: &Sx,
        args: I,
        num_real_microbatches: Option<usize>,
        transform: &'static str,
    ) -> Result<(G, MicroAux<AB::InnerBackend, MO, XO>), VmapError>
    where
        AB: AutodiffBackend + crate::BatchOps,
        AB::InnerBackend: crate::BatchOps,
        Fx: Fn(A) -> Out,
        Sx: GradSource<AB>,
        I: Tree<AB>,
        A: Tree<AB>,
        Out: LossOutput<AB>,
        G: Tree<AB::InnerBackend>,
        MO: Tree<AB::InnerBackend>,
        XO: Tree<AB::InnerBackend>,
        S: Tree<AB::InnerBackend> + Clone,
        T: GradFn<AB::InnerBackend>,
        M: GradFn<AB::InnerBackend>,
        V: VmapFn,
    {
        let (leaves, def) = args.flatten();
        let plan = self.opts.plan(&leaves, &def)?;
        let grad_spec =
            accumulator_spec::<AB::InnerBackend>(&self.accumulator.clone().flatten().1)?;
        let concat = Spec::Leaf(Acc::new(Concat));
        let acc = Spec::Seq(vec![grad_spec, concat.clone(), concat.clone(), concat]);

        let failure: RefCell<Option<VmapError>> = RefCell::new(None);
        let step = |args: DynTree<AB>| -> DynTree<AB::InnerBackend> {
            let args = plan.with_unit_dims(args);
            match self.example_step::<AB, A, Out, Fx, Sx>(f, source, args, &plan) {
                Ok(t) => t,
                Err(e) => {
                    failure.borrow_mut().get_or_insert(e);
                    DynTree::tuple(vec![])
                }
            }
        };
        let mapped = map_inputs(DynTree { leaves, def }, &plan.in_axes)?;
        let micro = Microbatching {
            num_real_microbatches,
            ..self.opts.micro
        };
        let result = run_microbatched(&step, &self.vmap_fn, &plan.in_axes, mapped, micro, &acc);
        if let Some(e) = failure.into_inner() {
            return Err(e.in_transform(transform));
        }
        unpack(result.map_err(|e| e.in_transform(transform))?)
    }

    /// One example (vectorized): value, gradient, transform, metrics, aux.
    fn example_step<AB, A, Out, Fx, Sx>(
        &self,
        f: &Fx,
        source: &Sx,
        args: DynTree<AB>,
        plan: &ArgPlan,
    ) -> Result<DynTree<AB::InnerBackend>, VmapError>
    where
        AB: AutodiffBackend,
        Fx: Fn(A) -> Out,
        A: Tree<AB>,
        Out: LossOutput<AB>,
        T: GradFn<AB::InnerBackend>,
        M: GradFn<AB::InnerBackend>,
        Sx: GradSource<AB>,
    {
        let DynTree { leaves, def } = args;
        let leaves: Vec<Leaf<AB>> = leaves
            .into_iter()
            .zip(&plan.differentiated)
            .map(|(leaf, &d)| match leaf {
                // Detached: the gradient is taken at this example's view of the argument.
                Leaf::Float(t) if d => Leaf::Float(TensorPrimitive::Float(
                    AB::float_set_require_grad(AB::float_detach(t.tensor()), true),
                )),
                other => other,
            })
            .collect();
        let tracked: Vec<Leaf<AB>> = plan.order.iter().map(|&i| leaves[i].clone()).collect();
        let a = A::unflatten_named(&def, leaves, "args")?;
        let (loss, aux) = f(a).split();
        let loss = loss.tensor();
        let shape = loss.shape();
        if shape.num_elements() != 1 {
            return Err(VmapError::LossNotScalar {
                shape: shape.to_vec(),
            });
        }
        let mut grads = AB::backward(loss.clone());
        let tracked = DynTree {
            leaves: tracked,
            def: plan.grad_def.clone(),
        };
        let g = source.extract(&mut grads, tracked);
        drop(grads);
        let metrics = self.metrics_fn.apply(g.clone())?;
        let transformed = self.transform_fn.apply(g)?;
        let value = AB::inner(loss);
        let value = Inner::<AB>::float_reshape(value, [1].into());
        let value = DynTree {
            leaves: vec![Leaf::Float(TensorPrimitive::Float(value))],
            def: TreeDef::Leaf,
        };
        let (aux_leaves, aux_def) = aux.flatten();
        let aux = DynTree {
            leaves: aux_leaves
                .into_iter()
                .map(|leaf| match leaf {
                    Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(AB::inner(t.tensor()))),
                    Leaf::Int(t) => Leaf::Int(AB::int_inner(t)),
                    Leaf::Bool(t) => Leaf::Bool(AB::bool_inner(t)),
                })
                .collect(),
            def: aux_def,
        };
        Ok(DynTree::tuple(vec![transformed, value, metrics, aux]))
    }
}

impl<F, S, T, M, V> MicroGrad<F, S, T, M, V, ArgGrads> {
    transform_call! {
        micro_grad;
        /// Applies the transform to the argument tuple `args` (on the autodiff backend `AB`).
        ///
        /// The result type follows from the builder's ([`MicroGradTypes`]): the accumulated
        /// gradients (their type is what `transform_fn` returns, or the raw gradient's type
        /// without one; [`Concat`] adds the batch axis) and [`MicroAux`] with the stacked loss
        /// values, metrics and aux. The raw gradient's type `G` comes from the typed closure of
        /// `transform_fn` or `metrics_fn`; with neither, name the result with
        /// [`call_as`](MicroGrad::call_as).
        ///
        /// # Errors
        /// See [`micro_grad`].
        #[allow(clippy::type_complexity)]
        [(S, T, M): MicroGradTypes<AB::InnerBackend, G, Out::Aux>]
        pub fn call(
            &self,
            args: I,
        ) -> Result<MicroGradResult<AB::InnerBackend, (S, T, M), G, Out::Aux>, VmapError> {
            self.run(&self.f, &ArgGrads, args, self.opts.micro.num_real_microbatches, "micro_grad")
        }
    }

    transform_call! {
        micro_grad;
        /// As [`call`](MicroGrad::call), with `num_real_microbatches` for this call only.
        ///
        /// # Errors
        /// See [`micro_grad`].
        #[allow(clippy::type_complexity)]
        [(S, T, M): MicroGradTypes<AB::InnerBackend, G, Out::Aux>]
        pub fn call_with(
            &self,
            args: I,
            num_real_microbatches: Option<usize>,
        ) -> Result<MicroGradResult<AB::InnerBackend, (S, T, M), G, Out::Aux>, VmapError> {
            self.run(&self.f, &ArgGrads, args, num_real_microbatches, "micro_grad")
        }
    }

    transform_call! {
        micro_grad;
        /// As [`call`](MicroGrad::call), with the result named by the caller: `let (grads, aux):
        /// (G, MicroAux<I, MO, XO>) = micro_grad(f).call_as(args)?`, for results whose types
        /// do not follow from the builder's (no typed `transform_fn` or `metrics_fn`, an
        /// accumulator [`Spec`], an aux struct without [`Lift`](crate::tree::Lift)).
        ///
        /// # Errors
        /// See [`micro_grad`].
        #[allow(clippy::type_complexity)]
        [G: Tree<AB::InnerBackend>, MO: Tree<AB::InnerBackend>, XO: Tree<AB::InnerBackend>]
        pub fn call_as<MO, XO>(
            &self,
            args: I,
        ) -> Result<(G, MicroAux<AB::InnerBackend, MO, XO>), VmapError> {
            self.run(&self.f, &ArgGrads, args, self.opts.micro.num_real_microbatches, "micro_grad")
        }
    }
}

/// How [`micro_grad`]'s arguments enter one example's step.
struct ArgPlan {
    /// Per leaf: whether it is differentiated (an `argnums` argument).
    differentiated: Vec<bool>,
    /// The differentiated leaves, in the order of the gradient tree.
    order: Vec<usize>,
    /// The structure of one example's gradient.
    grad_def: TreeDef,
    /// Per leaf: whether the step gives it a leading unit dim (`keep_batch_dim`).
    unit_dim: Vec<bool>,
    /// Axis 0 for the batched arguments, `None` for the others.
    in_axes: Axes,
}

impl GradOptions {
    /// Checks the argument indices against the argument tuple (`leaves`, `def`) and plans how
    /// every leaf enters the step.
    fn plan<B: Backend>(&self, leaves: &[Leaf<B>], def: &TreeDef) -> Result<ArgPlan, VmapError> {
        let TreeDef::Node { children, .. } = def else {
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
        let paths = def.leaf_paths("args");
        let mut differentiated = vec![false; leaves.len()];
        for &a in &self.argnums {
            for i in ranges[a].clone() {
                if !matches!(leaves[i], Leaf::Float(_)) {
                    return Err(VmapError::NotDifferentiable {
                        path: paths[i].clone(),
                        kind: leaves[i].kind_name(),
                    });
                }
                differentiated[i] = true;
            }
        }
        let grad_def = if self.argnums.is_empty() {
            TreeDef::Node {
                kind: NodeKind::Tuple,
                keys: vec![],
                children: vec![],
            }
        } else if self.single_argnum {
            children[self.argnums[0]].clone()
        } else {
            TreeDef::Node {
                kind: NodeKind::Tuple,
                keys: (0..self.argnums.len()).map(Key::Index).collect(),
                children: self.argnums.iter().map(|&a| children[a].clone()).collect(),
            }
        };
        let order: Vec<usize> = self
            .argnums
            .iter()
            .flat_map(|&a| ranges[a].clone())
            .collect();
        let batched: Vec<bool> = (0..n_args).map(|a| batch_argnums.contains(&a)).collect();
        // keep_batch_dim (see `ArgPlan::with_unit_dims`).
        let unit_dim: Vec<bool> = (0..leaves.len())
            .map(|i| {
                let arg = ranges.iter().position(|r| r.contains(&i)).unwrap_or(0);
                self.keep_batch_dim && batched[arg] && leaves[i].shape().num_dims() > 0
            })
            .collect();
        let in_axes = Spec::Seq(
            batched
                .iter()
                .map(|&b| Spec::Leaf(b.then_some(0)))
                .collect(),
        );
        Ok(ArgPlan {
            differentiated,
            order,
            grad_def,
            unit_dim,
            in_axes,
        })
    }
}

impl ArgPlan {
    /// `keep_batch_dim`: every example keeps a leading dim of size 1. Added to each example
    /// inside the vectorized step (a pending reshape of a batched tensor there), not to the
    /// whole input up front (a copy of it on backends whose reshape copies).
    fn with_unit_dims<B: Backend>(&self, args: DynTree<B>) -> DynTree<B> {
        DynTree {
            leaves: args
                .leaves
                .into_iter()
                .zip(&self.unit_dim)
                .map(|(leaf, &unit)| {
                    if !unit {
                        return leaf;
                    }
                    let mut dims = leaf.shape().to_vec();
                    dims.insert(0, 1);
                    leaf.reshape(Shape::from(dims))
                })
                .collect(),
            def: args.def,
        }
    }
}

/// The accumulated gradients and the stacked per-example parts, from the four parts every
/// step returns.
#[allow(clippy::type_complexity)]
fn unpack<B: Backend, G: Tree<B>, MO: Tree<B>, XO: Tree<B>>(
    result: DynTree<B>,
) -> Result<(G, MicroAux<B, MO, XO>), VmapError> {
    let mut parts = result.children().into_iter();
    let (Some(grads), Some(values), Some(metrics), Some(aux)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        unreachable!("the step returns four parts")
    };
    let values = match values.leaves.into_iter().next() {
        Some(Leaf::Float(v)) => {
            let v = Tensor::<B, 2>::from_primitive(v);
            let b = v.dims()[0];
            v.reshape([b])
        }
        _ => unreachable!("the step returns one float value"),
    };
    Ok((
        grads.into_tree("grads")?,
        MicroAux {
            values,
            metrics: metrics.into_tree("aux.metrics")?,
            aux: aux.into_tree("aux.aux")?,
        },
    ))
}
