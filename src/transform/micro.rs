//! [`micro_vmap`] and [`micro_grad`]: vmap and per-example gradients in microbatches, with
//! accumulators (optax's `optax.microbatching`).

use std::cell::RefCell;
use std::marker::PhantomData;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::backend::ops::FloatTensorOps;
use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use burn::module::AutodiffModule;

use crate::batching::BatchOps;
use crate::transform::axes::{map_inputs, Axes, Mapped};
use crate::transform::grad::ParamGrads;
use crate::transform::vmap::vmap;
use crate::tree::accumulate::{accumulator_spec, from_flat, to_flat, AccContext, Flat, RowOp};
use crate::tree::{rows, Acc, Concat, DynTree, Key, Leaf, NodeKind, Spec, Sum, Tree, TreeDef};
use crate::VmapError;

// -------------------------------------------------------------------------------------------------
// Pluggable vectorizer
// -------------------------------------------------------------------------------------------------

/// The vectorizer a microbatched transform runs on each microbatch (optax's `vmap_fn`).
///
/// [`PlainVmap`] is [`vmap`]; implement this trait to plug in another (a chunked vmap, a vmap
/// with a randomness mode, your own). It must behave like `vmap(f).in_axes(in_axes)` with
/// every output batched on axis 0.
pub trait VmapFn {
    /// Vectorizes `f` over `inputs` with `in_axes`, outputs batched on axis 0.
    ///
    /// # Errors
    /// As [`vmap`].
    fn apply<BI, BO, I, A, R, O, F>(
        &self,
        f: &F,
        in_axes: &Axes,
        inputs: I,
    ) -> Result<O, VmapError>
    where
        BI: BatchOps,
        BO: BatchOps,
        F: Fn(A) -> R,
        I: Tree<BI>,
        A: Tree<BI>,
        R: Tree<BO>,
        O: Tree<BO>;
}

/// [`vmap`] as a [`VmapFn`]: the default vectorizer.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{micro_vmap, PlainVmap, TestBackend, Vmap};
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Default::default());
/// let ys: Tensor<B, 2> = micro_vmap(|x: Tensor<B, 1>| x.clone() * x).vmap_fn(PlainVmap).call(xs).unwrap();
/// assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![1.0, 4.0, 9.0, 16.0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlainVmap;

impl VmapFn for PlainVmap {
    fn apply<BI, BO, I, A, R, O, F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError>
    where
        BI: BatchOps,
        BO: BatchOps,
        F: Fn(A) -> R,
        I: Tree<BI>,
        A: Tree<BI>,
        R: Tree<BO>,
        O: Tree<BO>,
    {
        vmap(|a: A| f(a)).in_axes(in_axes.clone()).call(inputs)
    }
}

/// A plain [`vmap`] with a randomness mode, as a [`VmapFn`]: `micro_vmap(f)
/// .vmap_fn(Randomness::Different)` gives every example its own random draws (dropout).
///
/// ```
/// use burn::tensor::{Distribution, Tensor};
/// use burn_vmap::{micro_vmap, Randomness, TestBackend, Vmap};
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::zeros([4, 3], &Default::default());
/// let noisy: Tensor<B, 2> = micro_vmap(|x: Tensor<B, 1>| x.clone() + x.random_like(Distribution::Default))
///     .microbatch_size(2)
///     .vmap_fn(Randomness::Different)
///     .call(xs)
///     .unwrap();
/// assert_eq!(noisy.dims(), [4, 3]);
/// ```
impl VmapFn for crate::Randomness {
    fn apply<BI, BO, I, A, R, O, F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError>
    where
        BI: BatchOps,
        BO: BatchOps,
        F: Fn(A) -> R,
        I: Tree<BI>,
        A: Tree<BI>,
        R: Tree<BO>,
        O: Tree<BO>,
    {
        vmap(|a: A| f(a))
            .in_axes(in_axes.clone())
            .randomness(*self)
            .call(inputs)
    }
}

/// powerpax's [`chunked_vmap`](crate::chunked_vmap) as a [`VmapFn`]: each microbatch is itself
/// run at most `chunk_size` examples at a time.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{micro_vmap, ChunkedVmapFn, Sum, TestBackend, Vmap};
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
        crate::chunked_vmap((), chunk_size)?;
        Ok(Self { chunk_size })
    }
}

impl VmapFn for ChunkedVmapFn {
    fn apply<BI, BO, I, A, R, O, F>(&self, f: &F, in_axes: &Axes, inputs: I) -> Result<O, VmapError>
    where
        BI: BatchOps,
        BO: BatchOps,
        F: Fn(A) -> R,
        I: Tree<BI>,
        A: Tree<BI>,
        R: Tree<BO>,
        O: Tree<BO>,
    {
        crate::chunked_vmap(|a: A| f(a), self.chunk_size)?
            .in_axes(in_axes.clone())
            .call(inputs)
    }
}

// -------------------------------------------------------------------------------------------------
// Microbatch bookkeeping
// -------------------------------------------------------------------------------------------------

/// Rows `k, k+n, ..., k+(m-1)n` of axis `axis` (optax's strided microbatches).
fn microbatch<B: Backend>(leaf: Leaf<B>, axis: usize, k: usize, n: usize, m: usize) -> Leaf<B> {
    if n == 1 {
        return leaf;
    }
    // Rows k, k + n, ..., k + (m - 1) n: one strided slice, no copy of the whole batch.
    let rows = Slice::new(k as isize, Some((k + (m - 1) * n + 1) as isize), n as isize);
    leaf.slice_axis(axis, rows)
}

/// No rows of axis `axis` (to learn the output structure when no microbatch runs).
fn no_rows<B: Backend>(leaf: Leaf<B>, axis: usize) -> Leaf<B> {
    leaf.slice_axis(axis, rows(0..0))
}

/// The microbatched loop shared by [`micro_vmap`] and [`micro_grad`]: runs `f` with `vmap_fn`
/// on each microbatch and folds the outputs with the accumulator spec `acc`.
#[allow(clippy::too_many_arguments)]
fn run_microbatched<BI, BO, A, R, F, V>(
    f: &F,
    vmap_fn: &V,
    in_axes: &Axes,
    prepared: Mapped<BI>,
    microbatch_size: Option<usize>,
    num_real: Option<usize>,
    acc: &Spec<Acc<BO>>,
) -> Result<DynTree<BO>, VmapError>
where
    BI: BatchOps,
    BO: BatchOps,
    F: Fn(A) -> R,
    A: Tree<BI>,
    R: Tree<BO>,
    V: VmapFn,
{
    let b = prepared.size;
    let Some(m) = microbatch_size else {
        // One vmap over the whole batch, then each accumulator's within-batch reduction.
        let out: DynTree<BO> = vmap_fn.apply(
            f,
            in_axes,
            DynTree {
                leaves: prepared.leaves,
                def: prepared.def,
            },
        )?;
        let accs = acc.broadcast_to(&out.def, "accumulator", "out")?;
        let leaves = out
            .leaves
            .into_iter()
            .zip(&accs)
            .map(|(leaf, a)| {
                if a.row_op() == RowOp::Identity && a.keeps_batch_axis() {
                    // Concat of one vmap: the vmap's output itself.
                    return leaf;
                }
                let (value, example, was_bool) = a.aggregate_leaf(leaf);
                from_flat(value, &example, a.keeps_batch_axis(), was_bool)
            })
            .collect();
        return Ok(DynTree {
            leaves,
            def: out.def,
        });
    };
    if m == 0 || !b.is_multiple_of(m) {
        return Err(VmapError::NonDividingMicrobatchSize {
            batch_size: b,
            microbatch_size: m,
        });
    }
    let n = b / m;
    let runs = num_real.unwrap_or(n);
    if runs > n {
        return Err(VmapError::NumRealMicrobatchesOutOfRange {
            num_real_microbatches: runs,
            num_microbatches: n,
        });
    }
    let ctx = AccContext {
        batch_size: b,
        microbatch_size: m,
        num_microbatches: n,
    };
    let select = |sel: &dyn Fn(Leaf<BI>, usize) -> Leaf<BI>| DynTree {
        leaves: prepared
            .leaves
            .iter()
            .zip(&prepared.axes)
            .map(|(leaf, axis)| match axis {
                Some(a) => sel(leaf.clone(), *a),
                None => leaf.clone(),
            })
            .collect(),
        def: prepared.def.clone(),
    };

    let mut def: Option<TreeDef> = None;
    let mut accs: Vec<Acc<BO>> = Vec::new();
    let mut examples: Vec<(Vec<usize>, bool)> = Vec::new();
    let mut carries: Vec<Carry<BO>> = Vec::new();
    for k in 0..runs {
        let out: DynTree<BO> =
            vmap_fn.apply(f, in_axes, select(&|leaf, a| microbatch(leaf, a, k, n, m)))?;
        if def.is_none() {
            accs = acc.broadcast_to(&out.def, "accumulator", "out")?;
            def = Some(out.def.clone());
        }
        for (i, leaf) in out.leaves.into_iter().enumerate() {
            if accs[i].is_builtin_concat() {
                // Concat keeps the microbatches as they are and orders them once at the end.
                if k == 0 {
                    examples.push((leaf.shape()[1..].to_vec(), false));
                    carries.push(Carry::Parts(vec![leaf]));
                } else if let Carry::Parts(parts) = &mut carries[i] {
                    parts.push(leaf);
                }
                continue;
            }
            let (value, example, was_bool) = accs[i].aggregate_leaf(leaf);
            if k == 0 {
                examples.push((example, was_bool));
                let carry = accs[i].init(&value, &ctx);
                carries.push(Carry::Flat(Some(accs[i].update(carry, value, k, &ctx))));
            } else if let Carry::Flat(slot) = &mut carries[i] {
                let carry = slot.take().expect("set at k = 0");
                *slot = Some(accs[i].update(carry, value, k, &ctx));
            }
        }
    }
    // The output structure and a zero-row template of every leaf, when no microbatch runs.
    let mut templates: Vec<Option<Leaf<BO>>> = vec![None; carries.len()];
    if def.is_none() {
        // No microbatch runs: learn the output structure from a vmap over zero rows, and
        // start every accumulator from a microbatch of zeros' shape.
        let out: DynTree<BO> = vmap_fn.apply(f, in_axes, select(&|leaf, a| no_rows(leaf, a)))?;
        accs = acc.broadcast_to(&out.def, "accumulator", "out")?;
        for (i, leaf) in out.leaves.into_iter().enumerate() {
            if accs[i].is_builtin_concat() {
                examples.push((leaf.shape()[1..].to_vec(), false));
                carries.push(Carry::Parts(Vec::new()));
                templates.push(Some(leaf));
                continue;
            }
            let (flat, example, was_bool) = to_flat(leaf);
            let zeros = flat.zeros_rows(m);
            let value = accs[i].aggregate(zeros);
            examples.push((example, was_bool));
            carries.push(Carry::Flat(Some(accs[i].init(&value, &ctx))));
            templates.push(None);
        }
        def = Some(out.def);
    }
    let def = def.expect("set above");
    let paths = def.leaf_paths("out");
    let mut leaves = Vec::with_capacity(carries.len());
    for ((((carry, a), (example, was_bool)), path), template) in carries
        .into_iter()
        .zip(&accs)
        .zip(&examples)
        .zip(&paths)
        .zip(templates)
    {
        let carry = match carry {
            Carry::Parts(parts) => {
                leaves.push(concat_parts(parts, template, n, m));
                continue;
            }
            Carry::Flat(c) => c.expect("one carry per leaf"),
        };
        let result = a.finalize(carry, &ctx);
        let want = if a.keeps_batch_axis() { b } else { 1 };
        if result.rows() != want {
            return Err(VmapError::AccumulatorRows {
                path: path.clone(),
                accumulator: a.name(),
                expected: want,
                got: result.rows(),
            });
        }
        leaves.push(from_flat(result, example, a.keeps_batch_axis(), *was_bool));
    }
    Ok(DynTree { leaves, def })
}

/// An accumulator's state across microbatches.
enum Carry<B: Backend> {
    /// The accumulator's own carry (a `[rows, elements]` matrix).
    Flat(Option<Flat<B>>),
    /// [`Concat`]: the microbatch outputs `[m, ...]` so far, at their own rank and kind.
    Parts(Vec<Leaf<B>>),
}

/// [`Concat`]'s result from the outputs of the microbatches that ran: zeros for those that did
/// not, then row `k + j·n` = row `j` of microbatch `k` (the original order). One `cat` and one
/// `select`, whatever the number of microbatches.
fn concat_parts<B: Backend>(
    mut parts: Vec<Leaf<B>>,
    template: Option<Leaf<B>>,
    n: usize,
    m: usize,
) -> Leaf<B> {
    let template = match (parts.first(), template) {
        (Some(first), _) => first.clone(),
        (None, Some(t)) => t,
        (None, None) => unreachable!("a template exists when no microbatch ran"),
    };
    if n * m == 0 {
        // An empty batch: the zero-row output.
        return no_rows(template, 0);
    }
    if parts.len() < n {
        let mut dims = template.shape().to_vec();
        dims[0] = (n - parts.len()) * m;
        parts.push(template.zeros_like(Shape::from(dims)));
    }
    let stacked = Leaf::cat(parts, 0);
    if n == 1 || m == 1 {
        return stacked;
    }
    // stacked row k·m + j holds example j of microbatch k, which belongs at row j·n + k.
    let perm: Vec<i32> = (0..n * m).map(|r| ((r % n) * m + r / n) as i32).collect();
    let idx = Tensor::<B, 1, burn::tensor::Int>::from_ints(perm.as_slice(), &stacked.device())
        .into_primitive();
    stacked.select(0, idx)
}

// -------------------------------------------------------------------------------------------------
// micro_vmap
// -------------------------------------------------------------------------------------------------

/// A [`vmap`] that runs in microbatches and accumulates: optax's
/// `optax.microbatching.micro_vmap`.
///
/// ```text
/// n = B / microbatch_size
/// for k in 0..num_real_microbatches (default n):
///     rows  = [k, k+n, k+2n, ...]                    # strided microbatches, as optax
///     value = accumulator.aggregate(vmap(f)(args[rows]))
///     carry = accumulator.update(carry or init(value), value, k)
/// return accumulator.finalize(carry)
/// # no microbatch_size: accumulator.aggregate(vmap(f)(args)); num_real_microbatches is ignored
/// ```
///
/// The accumulator (default [`Concat`]: the same result as [`vmap`]) is a tree prefix of the
/// output: see [`accumulate`](crate::tree::accumulate). [`Concat`] restores the original order
/// and leaves zeros in rows not run; [`Mean`](crate::Mean) divides by the TOTAL number of
/// microbatches even when fewer run; [`RunningMean`](crate::RunningMean) averages the ones run.
/// Peak memory is that of one microbatch (plus the accumulators' carries).
///
/// # Example
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{micro_vmap, Mean, TestBackend, Vmap};
/// type B = Vmap<TestBackend>;
/// // Eight examples of one feature each.
/// let xs = Tensor::<B, 1>::from_floats([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &Default::default())
///     .reshape([8, 1]);
/// let square = |x: Tensor<B, 1>| x.clone() * x;
///
/// let all: Tensor<B, 2> = micro_vmap(square).microbatch_size(2).call(xs.clone()).unwrap();
/// assert_eq!(all.into_data().to_vec::<f32>().unwrap(), vec![0., 1., 4., 9., 16., 25., 36., 49.]);
///
/// // Two of the four microbatches (rows {0,4} and {1,5}); Mean divides by all four.
/// let mean: Tensor<B, 1> = micro_vmap(square)
///     .microbatch_size(2)
///     .accumulator(Mean)
///     .num_real_microbatches(Some(2))
///     .call(xs)
///     .unwrap();
/// assert_eq!(mean.into_data().to_vec::<f32>().unwrap(), vec![(0.0 + 16.0 + 1.0 + 25.0) / 2.0 / 4.0]);
/// ```
///
/// # Errors
/// As [`vmap`], plus [`VmapError::NonDividingMicrobatchSize`],
/// [`VmapError::NumRealMicrobatchesOutOfRange`], [`VmapError::UnsupportedOutAxes`] (from
/// [`MicroVmap::out_axes`]), [`VmapError::TreeMismatch`] for an accumulator tree that does not
/// fit the output, and [`VmapError::AccumulatorRows`] for a custom accumulator returning the
/// wrong number of rows.
pub fn micro_vmap<F>(f: F) -> MicroVmap<F> {
    MicroVmap {
        f,
        in_axes: Spec::Leaf(Some(0)),
        microbatch_size: None,
        accumulator: Concat,
        num_real_microbatches: None,
        vmap_fn: PlainVmap,
    }
}

/// A function vectorized by [`micro_vmap`].
#[derive(Debug, Clone)]
pub struct MicroVmap<F, S = Concat, V = PlainVmap> {
    f: F,
    in_axes: Axes,
    microbatch_size: Option<usize>,
    accumulator: S,
    num_real_microbatches: Option<usize>,
    vmap_fn: V,
}

impl<F, S, V> MicroVmap<F, S, V> {
    /// The batch axis of every argument (a tree prefix; `None` = passed whole). Default `0`.
    pub fn in_axes(mut self, axes: impl Into<Axes>) -> Self {
        self.in_axes = axes.into();
        self
    }

    /// Only `0` is supported, as in optax.
    ///
    /// # Errors
    /// [`VmapError::UnsupportedOutAxes`] for anything else, when the transform is built.
    pub fn out_axes(self, axes: impl Into<Axes>) -> Result<Self, VmapError> {
        let axes = axes.into();
        match axes {
            Spec::Leaf(Some(0)) => Ok(self),
            other => Err(VmapError::UnsupportedOutAxes {
                out_axes: format!("{other:?}"),
            }),
        }
    }

    /// Examples per microbatch (`None`: one vmap over the whole batch). Must divide the batch.
    pub fn microbatch_size(mut self, size: impl Into<Option<usize>>) -> Self {
        self.microbatch_size = size.into();
        self
    }

    /// Runs only the first `n` microbatches (ignored without a microbatch size). See also
    /// [`call_with`](MicroVmap::call_with), which changes it per call.
    pub fn num_real_microbatches(mut self, n: Option<usize>) -> Self {
        self.num_real_microbatches = n;
        self
    }

    /// The accumulator tree: a prefix of the output tree whose leaves are accumulators.
    pub fn accumulator<S2>(self, accumulator: S2) -> MicroVmap<F, S2, V> {
        MicroVmap {
            f: self.f,
            in_axes: self.in_axes,
            microbatch_size: self.microbatch_size,
            accumulator,
            num_real_microbatches: self.num_real_microbatches,
            vmap_fn: self.vmap_fn,
        }
    }

    /// The vectorizer run on each microbatch (default [`PlainVmap`]).
    pub fn vmap_fn<V2: VmapFn>(self, vmap_fn: V2) -> MicroVmap<F, S, V2> {
        MicroVmap {
            f: self.f,
            in_axes: self.in_axes,
            microbatch_size: self.microbatch_size,
            accumulator: self.accumulator,
            num_real_microbatches: self.num_real_microbatches,
            vmap_fn,
        }
    }

    /// Applies the transform. Types as [`Vmapped::call`](crate::Vmapped::call); an output
    /// leaf accumulated by [`Concat`] gains the batch axis, a reduced one keeps `f`'s shape.
    ///
    /// # Errors
    /// See [`micro_vmap`].
    pub fn call<BI, BO, I, A, R, O>(&self, inputs: I) -> Result<O, VmapError>
    where
        BI: BatchOps,
        BO: BatchOps,
        F: Fn(A) -> R,
        I: Tree<BI>,
        A: Tree<BI>,
        R: Tree<BO>,
        O: Tree<BO>,
        S: Tree<BO> + Clone,
        V: VmapFn,
    {
        self.call_with(inputs, self.num_real_microbatches)
    }

    /// As [`call`](MicroVmap::call), with `num_real_microbatches` for this call only.
    ///
    /// # Errors
    /// See [`micro_vmap`].
    pub fn call_with<BI, BO, I, A, R, O>(
        &self,
        inputs: I,
        num_real_microbatches: Option<usize>,
    ) -> Result<O, VmapError>
    where
        BI: BatchOps,
        BO: BatchOps,
        F: Fn(A) -> R,
        I: Tree<BI>,
        A: Tree<BI>,
        R: Tree<BO>,
        O: Tree<BO>,
        S: Tree<BO> + Clone,
        V: VmapFn,
    {
        let acc = accumulator_spec::<BO>(&self.accumulator.clone().flatten().1)?;
        let prepared = map_inputs(inputs, &self.in_axes)?;
        let out = run_microbatched(
            &self.f,
            &self.vmap_fn,
            &self.in_axes,
            prepared,
            self.microbatch_size,
            num_real_microbatches,
            &acc,
        )?;
        out.into_tree("out")
    }
}

// -------------------------------------------------------------------------------------------------
// micro_grad
// -------------------------------------------------------------------------------------------------

/// What a loss function returns: a loss tensor with one element, or `(loss, aux)` where `aux` is
/// any [`Tree`] (optax's `has_aux`).
pub trait LossOutput<B: Backend> {
    /// The auxiliary tree (`()` without aux).
    type Aux: Tree<B>;
    /// Splits into the loss primitive and the aux.
    fn split(self) -> (TensorPrimitive<B>, Self::Aux);
}

impl<B: Backend, const D: usize> LossOutput<B> for Tensor<B, D> {
    type Aux = ();
    fn split(self) -> (TensorPrimitive<B>, ()) {
        (self.into_primitive(), ())
    }
}

impl<B: Backend, const D: usize, X: Tree<B>> LossOutput<B> for (Tensor<B, D>, X) {
    type Aux = X;
    fn split(self) -> (TensorPrimitive<B>, X) {
        (self.0.into_primitive(), self.1)
    }
}

/// A function of one example's gradient tree: `transform_fn` or `metrics_fn` of
/// [`micro_grad`]. Built from closures by [`MicroGrad::transform_fn`] and
/// [`MicroGrad::metrics_fn`].
pub trait GradFn<B: Backend> {
    /// Applies the function to a gradient tree given as leaves.
    ///
    /// # Errors
    /// If the gradient tree does not fit the function's argument type.
    fn apply(&self, grads: DynTree<B>) -> Result<DynTree<B>, VmapError>;
}

/// The identity `transform_fn` (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl<B: Backend> GradFn<B> for Identity {
    fn apply(&self, grads: DynTree<B>) -> Result<DynTree<B>, VmapError> {
        Ok(grads)
    }
}

/// No `metrics_fn` (the default): `aux.metrics` is `()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl<B: Backend> GradFn<B> for NoMetrics {
    fn apply(&self, _: DynTree<B>) -> Result<DynTree<B>, VmapError> {
        Ok(DynTree::new(()))
    }
}

/// A closure `Fn(G) -> O` as a [`GradFn`].
pub struct TreeFn<Fc, G, O>(Fc, PhantomData<fn(G) -> O>);

impl<B: Backend, Fc: Fn(G) -> O, G: Tree<B>, O: Tree<B>> GradFn<B> for TreeFn<Fc, G, O> {
    fn apply(&self, grads: DynTree<B>) -> Result<DynTree<B>, VmapError> {
        let g: G = grads.into_tree("grads")?;
        Ok(DynTree::new((self.0)(g)))
    }
}

/// Where [`micro_grad`] takes gradients from: the differentiated arguments ([`ArgGrads`]) or
/// the parameters of a Burn module ([`ModuleGrads`], from [`micro_grad_module`]).
pub trait GradSource<AB: AutodiffBackend> {
    /// One example's gradient tree, from the backward pass `grads`; `tracked` are the
    /// differentiated argument leaves and `def` their tree.
    fn extract(
        &self,
        grads: &mut AB::Gradients,
        tracked: Vec<Leaf<AB>>,
        def: &TreeDef,
    ) -> DynTree<AB::InnerBackend>;
}

/// Gradients with respect to the arguments named by `argnums` (the default source).
#[derive(Debug, Clone, Copy, Default)]
pub struct ArgGrads;

impl<AB: AutodiffBackend> GradSource<AB> for ArgGrads {
    fn extract(
        &self,
        grads: &mut AB::Gradients,
        tracked: Vec<Leaf<AB>>,
        def: &TreeDef,
    ) -> DynTree<AB::InnerBackend> {
        let leaves = tracked
            .into_iter()
            .map(|leaf| {
                let Leaf::Float(t) = leaf else {
                    unreachable!("differentiated leaves are checked to be float")
                };
                let t = t.tensor();
                let g = AB::grad_remove(&t, grads).unwrap_or_else(|| {
                    Inner::<AB>::float_zeros(t.shape(), &AB::float_device(&t), t.dtype().into())
                });
                Leaf::Float(TensorPrimitive::Float(g))
            })
            .collect();
        DynTree {
            leaves,
            def: def.clone(),
        }
    }
}

/// Gradients of a Burn module's parameters, as [`ParamGrads`] (see [`micro_grad_module`]).
#[derive(Debug)]
pub struct ModuleGrads<'a, M>(&'a M);

impl<AB: AutodiffBackend, M: AutodiffModule<AB>> GradSource<AB> for ModuleGrads<'_, M> {
    fn extract(
        &self,
        grads: &mut AB::Gradients,
        _: Vec<Leaf<AB>>,
        _: &TreeDef,
    ) -> DynTree<AB::InnerBackend> {
        DynTree::new(ParamGrads::<AB::InnerBackend>::from_module::<AB, M>(
            grads, self.0,
        ))
    }
}

/// The per-example outputs of [`micro_grad`], stacked on a leading batch axis (optax's `Aux`).
/// Rows of microbatches that were not run are zero.
#[derive(Debug, Clone)]
pub struct MicroAux<B: Backend, M, X> {
    /// The loss of every example: `[B]`.
    pub values: Tensor<B, 1>,
    /// `metrics_fn` of every example's raw gradient, stacked (`()` without `metrics_fn`).
    pub metrics: M,
    /// The function's aux of every example, stacked (`()` without aux).
    pub aux: X,
}

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
/// per-example (transformed) gradients, not their mean; use [`Mean`](crate::Mean) for the
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
/// [`micro_grad_module`].
///
/// # Example: optax's documentation example
/// ```
/// use burn::backend::Autodiff;
/// use burn::tensor::{Int, Tensor};
/// use burn_vmap::{micro_grad, Mean, TestBackend, Vmap};
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
///     .call::<_, _, _, _, (Tensor<I, 1>, Tensor<I, 1>), Tensor<I, 2>, ()>((params, features, targets))
///     .unwrap();
/// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![-3.0]);
/// assert_eq!(g2.into_data().to_vec::<f32>().unwrap(), vec![14.0]);
/// assert_eq!(aux.values.into_data().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 8.0, 18.0]);
/// assert_eq!(aux.metrics.into_data().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
/// ```
///
/// # Errors
/// Those of [`micro_vmap`], plus [`VmapError::ArgumentIndex`] for an `argnums` or
/// `batch_argnums` entry past the last argument, [`VmapError::NotDifferentiable`] for a
/// differentiated int or bool tensor and [`VmapError::LossNotScalar`].
pub fn micro_grad<F>(f: F) -> MicroGrad<F> {
    MicroGrad {
        f,
        source: ArgGrads,
        argnums: vec![0],
        single_argnum: true,
        batch_argnums: Some(vec![1]),
        keep_batch_dim: true,
        microbatch_size: None,
        accumulator: Sum,
        transform_fn: Identity,
        metrics_fn: NoMetrics,
        num_real_microbatches: None,
        vmap_fn: PlainVmap,
    }
}

/// [`micro_grad`] for a Burn `Module`: per-example gradients of the module's parameters, as
/// [`ParamGrads`] (convert the accumulated result with
/// [`into_gradients_params`](ParamGrads::into_gradients_params) for `optimizer.step`).
///
/// `f(model, args)` computes the loss; `args` is a tuple whose entries are all batched on
/// axis 0 unless [`batch_argnums`](MicroGrad::batch_argnums) says otherwise. Everything
/// else is as [`micro_grad`]: `keep_batch_dim` (default `true`: `f` sees a batch of one, so an
/// existing batched forward pass works unchanged), microbatching, accumulator (default
/// **[`Sum`]**), `transform_fn` and `metrics_fn` over the per-example [`ParamGrads`]. Build the
/// model on `Autodiff<Vmap<B>>` (it trains normally there: nothing is batched outside).
///
/// # Example: per-example clipping (DP-SGD's gradient)
/// ```
/// use burn::backend::Autodiff;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_vmap::{clip_by_global_norm, global_norm, micro_grad_module, Mean, MicroAux, ParamGrads, TestBackend, Vmap};
/// type I = Vmap<TestBackend>;
/// type AD = Autodiff<I>;
/// let device = Default::default();
/// let model: Linear<AD> = LinearConfig::new(3, 1).init(&device);
/// let x = Tensor::<AD, 2>::ones([8, 3], &device);
/// let y = Tensor::<AD, 2>::zeros([8, 1], &device);
///
/// let (grads, aux): (ParamGrads<I>, MicroAux<I, Tensor<I, 2>, ()>) =
///     micro_grad_module(&model, |m: &Linear<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 2>)| {
///         (m.forward(x) - y).powi_scalar(2).mean()
///     })
///     .microbatch_size(4)
///     .accumulator(Mean)
///     .transform_fn(|g: ParamGrads<I>| clip_by_global_norm(g, 1.0))
///     .metrics_fn(|g: ParamGrads<I>| global_norm(&g))
///     .call((x, y))
///     .unwrap();
/// assert_eq!(aux.metrics.dims(), [8, 1]); // the raw per-example norms
/// assert!(global_norm(&grads).into_scalar() <= 1.0 + 1e-6); // a mean of clipped gradients
/// let for_optimizer = grads.into_gradients_params();
/// ```
pub fn micro_grad_module<'a, AB, M, A, Out, F>(
    model: &'a M,
    f: F,
) -> MicroGrad<impl Fn(A) -> Out + 'a, Sum, Identity, NoMetrics, PlainVmap, ModuleGrads<'a, M>>
where
    M: burn::module::Module<AB>,
    AB: AutodiffBackend,
    F: Fn(&M, A) -> Out + 'a,
{
    crate::transform::grad::init_params(model);
    MicroGrad {
        f: move |a| f(model, a),
        source: ModuleGrads(model),
        argnums: vec![],
        single_argnum: false,
        batch_argnums: None,
        keep_batch_dim: true,
        microbatch_size: None,
        accumulator: Sum,
        transform_fn: Identity,
        metrics_fn: NoMetrics,
        num_real_microbatches: None,
        vmap_fn: PlainVmap,
    }
}

/// A function transformed by [`micro_grad`] (or [`micro_grad_module`]).
#[derive(Debug, Clone)]
pub struct MicroGrad<F, S = Sum, T = Identity, M = NoMetrics, V = PlainVmap, Src = ArgGrads> {
    f: F,
    source: Src,
    argnums: Vec<usize>,
    single_argnum: bool,
    /// `None`: every argument (the module variant's default).
    batch_argnums: Option<Vec<usize>>,
    keep_batch_dim: bool,
    microbatch_size: Option<usize>,
    accumulator: S,
    transform_fn: T,
    metrics_fn: M,
    num_real_microbatches: Option<usize>,
    vmap_fn: V,
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

impl<F, S, T, M, V, Src> MicroGrad<F, S, T, M, V, Src> {
    /// The differentiated arguments: an index such as `0` (the gradient has that argument's
    /// structure) or a list such as `[0, 1]` (a tuple of gradients, one per entry; `[0]` gives
    /// a 1-tuple), as optax. Default `0`.
    pub fn argnums(mut self, argnums: impl ArgNums) -> Self {
        let (p, single) = argnums.positions();
        self.argnums = p;
        self.single_argnum = single;
        self
    }

    /// The arguments carrying the batch on axis 0 (default `1`). The others are passed whole
    /// to every example, wherever they stand.
    pub fn batch_argnums(mut self, batch_argnums: impl ArgNums) -> Self {
        self.batch_argnums = Some(batch_argnums.positions().0);
        self
    }

    /// Whether `f` sees each example with a leading batch dim of size 1 (default `true`, as
    /// optax), or the bare example.
    pub fn keep_batch_dim(mut self, keep: bool) -> Self {
        self.keep_batch_dim = keep;
        self
    }

    /// Examples per microbatch (`None`: one batched pass). Must divide the batch.
    pub fn microbatch_size(mut self, size: impl Into<Option<usize>>) -> Self {
        self.microbatch_size = size.into();
        self
    }

    /// Runs only the first `n` microbatches (ignored without a microbatch size).
    pub fn num_real_microbatches(mut self, n: Option<usize>) -> Self {
        self.num_real_microbatches = n;
        self
    }

    /// The accumulator tree for the transformed gradients (default [`Sum`]).
    pub fn accumulator<S2>(self, accumulator: S2) -> MicroGrad<F, S2, T, M, V, Src> {
        MicroGrad {
            f: self.f,
            source: self.source,
            argnums: self.argnums,
            single_argnum: self.single_argnum,
            batch_argnums: self.batch_argnums,
            keep_batch_dim: self.keep_batch_dim,
            microbatch_size: self.microbatch_size,
            accumulator,
            transform_fn: self.transform_fn,
            metrics_fn: self.metrics_fn,
            num_real_microbatches: self.num_real_microbatches,
            vmap_fn: self.vmap_fn,
        }
    }

    /// Applied to every example's gradient tree before accumulating (e.g. clipping).
    pub fn transform_fn<G, O, Fc: Fn(G) -> O>(
        self,
        transform_fn: Fc,
    ) -> MicroGrad<F, S, TreeFn<Fc, G, O>, M, V, Src> {
        MicroGrad {
            f: self.f,
            source: self.source,
            argnums: self.argnums,
            single_argnum: self.single_argnum,
            batch_argnums: self.batch_argnums,
            keep_batch_dim: self.keep_batch_dim,
            microbatch_size: self.microbatch_size,
            accumulator: self.accumulator,
            transform_fn: TreeFn(transform_fn, PhantomData),
            metrics_fn: self.metrics_fn,
            num_real_microbatches: self.num_real_microbatches,
            vmap_fn: self.vmap_fn,
        }
    }

    /// Computed on every example's RAW gradient tree and returned stacked in
    /// [`MicroAux::metrics`] (e.g. the per-example gradient norm).
    pub fn metrics_fn<G, O, Fc: Fn(G) -> O>(
        self,
        metrics_fn: Fc,
    ) -> MicroGrad<F, S, T, TreeFn<Fc, G, O>, V, Src> {
        MicroGrad {
            f: self.f,
            source: self.source,
            argnums: self.argnums,
            single_argnum: self.single_argnum,
            batch_argnums: self.batch_argnums,
            keep_batch_dim: self.keep_batch_dim,
            microbatch_size: self.microbatch_size,
            accumulator: self.accumulator,
            transform_fn: self.transform_fn,
            metrics_fn: TreeFn(metrics_fn, PhantomData),
            num_real_microbatches: self.num_real_microbatches,
            vmap_fn: self.vmap_fn,
        }
    }

    /// The vectorizer run on each microbatch (default [`PlainVmap`]).
    pub fn vmap_fn<V2: VmapFn>(self, vmap_fn: V2) -> MicroGrad<F, S, T, M, V2, Src> {
        MicroGrad {
            f: self.f,
            source: self.source,
            argnums: self.argnums,
            single_argnum: self.single_argnum,
            batch_argnums: self.batch_argnums,
            keep_batch_dim: self.keep_batch_dim,
            microbatch_size: self.microbatch_size,
            accumulator: self.accumulator,
            transform_fn: self.transform_fn,
            metrics_fn: self.metrics_fn,
            num_real_microbatches: self.num_real_microbatches,
            vmap_fn,
        }
    }

    /// Applies the transform to the argument tuple `args` (on the autodiff backend `AB`).
    ///
    /// Type parameters: `AB` the autodiff backend, `I` the argument tuple, `A` what `f` takes,
    /// `Out` what `f` returns ([`LossOutput`]), `G` the accumulated gradients, `MO` the stacked
    /// metrics, `XO` the stacked aux. Usually only the last three need naming.
    ///
    /// # Errors
    /// See [`micro_grad`].
    #[allow(clippy::type_complexity)]
    pub fn call<AB, I, A, Out, G, MO, XO>(
        &self,
        args: I,
    ) -> Result<(G, MicroAux<AB::InnerBackend, MO, XO>), VmapError>
    where
        AB: AutodiffBackend + BatchOps,
        AB::InnerBackend: BatchOps,
        F: Fn(A) -> Out,
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
        Src: GradSource<AB>,
    {
        self.call_with(args, self.num_real_microbatches)
    }

    /// As [`call`](MicroGrad::call), with `num_real_microbatches` for this call only.
    ///
    /// # Errors
    /// See [`micro_grad`].
    #[allow(clippy::type_complexity)]
    pub fn call_with<AB, I, A, Out, G, MO, XO>(
        &self,
        args: I,
        num_real_microbatches: Option<usize>,
    ) -> Result<(G, MicroAux<AB::InnerBackend, MO, XO>), VmapError>
    where
        AB: AutodiffBackend + BatchOps,
        AB::InnerBackend: BatchOps,
        F: Fn(A) -> Out,
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
        Src: GradSource<AB>,
    {
        let (leaves, def) = args.flatten();
        let TreeDef::Node { children, .. } = &def else {
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
        // keep_batch_dim: every example keeps a leading dim of size 1. Added to each example
        // inside the vectorized step (a pending reshape of a batched tensor there), not to the
        // whole input up front (a copy of it on backends whose reshape copies).
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
        let grad_spec =
            accumulator_spec::<AB::InnerBackend>(&self.accumulator.clone().flatten().1)?;
        let concat = Spec::Leaf(Acc::new(Concat));
        let acc = Spec::Seq(vec![grad_spec, concat.clone(), concat.clone(), concat]);

        let failure: RefCell<Option<VmapError>> = RefCell::new(None);
        let step = |args: DynTree<AB>| -> DynTree<AB::InnerBackend> {
            let args = DynTree {
                leaves: args
                    .leaves
                    .into_iter()
                    .zip(&unit_dim)
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
            };
            match self.example_step::<AB, A, Out>(args, &differentiated, &order, &grad_def) {
                Ok(t) => t,
                Err(e) => {
                    failure.borrow_mut().get_or_insert(e);
                    DynTree::tuple(vec![])
                }
            }
        };
        let prepared = map_inputs(DynTree { leaves, def }, &in_axes)?;
        let result = run_microbatched(
            &step,
            &self.vmap_fn,
            &in_axes,
            prepared,
            self.microbatch_size,
            num_real_microbatches,
            &acc,
        );
        if let Some(e) = failure.into_inner() {
            return Err(e);
        }
        let mut parts = result?.children().into_iter();
        let (Some(grads), Some(values), Some(metrics), Some(aux)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            unreachable!("the step returns four parts")
        };
        let values = match values.leaves.into_iter().next() {
            Some(Leaf::Float(v)) => {
                let v = Tensor::<AB::InnerBackend, 2>::from_primitive(v);
                let b = v.dims()[0];
                v.reshape([b])
            }
            _ => unreachable!("the step returns one float value"),
        };
        Ok((
            grads.into_tree("grads")?,
            MicroAux {
                values,
                metrics: metrics.into_tree("metrics")?,
                aux: aux.into_tree("aux")?,
            },
        ))
    }

    /// One example (vectorized): value, gradient, transform, metrics, aux.
    fn example_step<AB, A, Out>(
        &self,
        args: DynTree<AB>,
        differentiated: &[bool],
        order: &[usize],
        grad_def: &TreeDef,
    ) -> Result<DynTree<AB::InnerBackend>, VmapError>
    where
        AB: AutodiffBackend,
        F: Fn(A) -> Out,
        A: Tree<AB>,
        Out: LossOutput<AB>,
        T: GradFn<AB::InnerBackend>,
        M: GradFn<AB::InnerBackend>,
        Src: GradSource<AB>,
    {
        let DynTree { leaves, def } = args;
        let leaves: Vec<Leaf<AB>> = leaves
            .into_iter()
            .zip(differentiated)
            .map(|(leaf, &d)| match leaf {
                // Detached: the gradient is taken at this example's view of the argument.
                Leaf::Float(t) if d => Leaf::Float(TensorPrimitive::Float(
                    AB::float_set_require_grad(AB::float_detach(t.tensor()), true),
                )),
                other => other,
            })
            .collect();
        let tracked: Vec<Leaf<AB>> = order.iter().map(|&i| leaves[i].clone()).collect();
        let a = A::unflatten_named(&def, leaves, "args")?;
        let (loss, aux) = (self.f)(a).split();
        let loss = loss.tensor();
        let shape = loss.shape();
        if shape.num_elements() != 1 {
            return Err(VmapError::LossNotScalar {
                shape: shape.to_vec(),
            });
        }
        let mut grads = AB::backward(loss.clone());
        let g = self.source.extract(&mut grads, tracked, grad_def);
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

type Inner<AB> = <AB as AutodiffBackend>::InnerBackend;

// -------------------------------------------------------------------------------------------------
// Tree norms
// -------------------------------------------------------------------------------------------------

/// The global L2 norm of every float leaf of a tree, as a one-element tensor:
/// `sqrt(sum over leaves and elements of x²)`. Under `vmap` (in a `transform_fn`), the
/// per-example norm.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{global_norm, TestBackend};
/// let d = Default::default();
/// let t = (Tensor::<TestBackend, 1>::from_floats([3.0], &d), Tensor::<TestBackend, 2>::from_floats([[4.0]], &d));
/// assert_eq!(global_norm(&t).into_scalar(), 5.0);
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn global_norm<B: Backend, T: Tree<B> + Clone>(tree: &T) -> Tensor<B, 1> {
    let (leaves, _) = tree.clone().flatten();
    leaves
        .into_iter()
        .filter_map(|leaf| match leaf {
            Leaf::Float(t) => {
                // Sum of squares at the leaf's own rank (no flattening copy).
                let t = t.tensor();
                let sq = B::float_sum(B::float_mul(t.clone(), t));
                Some(Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(sq)))
            }
            _ => None,
        })
        .reduce(|a, b| a + b)
        .expect("global_norm: the tree has no float leaf")
        .sqrt()
}

/// Scales every float leaf of `tree` by the one-element tensor `factor`.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{scale_tree, TestBackend};
/// let d = Default::default();
/// let t = scale_tree(Tensor::<TestBackend, 1>::from_floats([1.0, 2.0], &d), Tensor::from_floats([3.0], &d));
/// assert_eq!(t.into_data().to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
/// ```
pub fn scale_tree<B: Backend, T: Tree<B>>(tree: T, factor: Tensor<B, 1>) -> T {
    let (leaves, def) = tree.flatten();
    let factor = factor.into_primitive().tensor();
    let leaves = leaves
        .into_iter()
        .map(|leaf| match leaf {
            Leaf::Float(t) => {
                let t = t.tensor();
                let rank = t.shape().num_dims();
                let f = B::float_reshape(factor.clone(), vec![1; rank].into());
                Leaf::Float(TensorPrimitive::Float(B::float_mul(t, f)))
            }
            other => other,
        })
        .collect();
    T::unflatten(&def, leaves).expect("the same tree rebuilds")
}

/// optax's per-example clipping: scales `tree` by `max_norm / max(norm, max_norm)`, so its
/// global L2 norm is at most `max_norm` (unchanged when already within). Written for one
/// example; in a `transform_fn` it clips every example independently.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{clip_by_global_norm, TestBackend};
/// let d = Default::default();
/// let g = Tensor::<TestBackend, 1>::from_floats([3.0, 4.0], &d);
/// let c = clip_by_global_norm(g, 1.0);
/// assert_eq!(c.into_data().to_vec::<f32>().unwrap(), vec![0.6, 0.8]);
/// ```
pub fn clip_by_global_norm<B: Backend, T: Tree<B> + Clone>(tree: T, max_norm: f64) -> T {
    let norm = global_norm(&tree);
    let factor = norm.clamp_min(max_norm).recip() * max_norm;
    scale_tree(tree, factor)
}
