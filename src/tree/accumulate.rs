//! Accumulators: how [`micro_vmap`](crate::micro_vmap) and [`micro_grad`](crate::micro_grad)
//! combine per-example outputs (optax's `optax.microbatching.Accumulator`).
//!
//! An accumulator is four functions, applied leafwise over a tree prefix of the outputs:
//!
//! ```text
//! carry = None
//! for k in 0..num_real_microbatches:          # microbatch k holds rows k, k+n, k+2n, ...
//!     value = aggregate(vmap(f)(microbatch k)) # reduce the m rows of one microbatch
//!     if carry is None: carry = init(value)
//!     carry = update(carry, value, k)
//! result = finalize(carry)
//! # without a microbatch size: result = aggregate(vmap(f)(whole batch))
//! ```
//!
//! The built-ins are [`Sum`], [`Mean`], [`RunningMean`] and [`Concat`]. Write your own by
//! implementing [`Accumulator`] and wrapping it in [`Custom`] (or [`Acc::new`]) where an
//! accumulator tree is expected.
//!
//! # Accumulator trees
//! The accumulator given to a transform is a **prefix** of the output tree: one accumulator for
//! everything, or the output's own struct (deriving [`Tree`]) holding accumulators where the
//! output holds tensors, or a tuple, or a [`Spec`]. Accumulators are leaf-less trees, so the
//! same generic struct describes both:
//!
//! ```
//! use burn::tensor::Tensor;
//! use burn_vmap::{micro_vmap, Concat, Sum, Mean, TestBackend, Vmap};
//! type B = Vmap<TestBackend>;
//! let device = Default::default();
//!
//! // Per example: (2v, sum(v)). Keep every 2v, sum the sums.
//! let f = |v: Tensor<B, 1>| (v.clone() * 2.0, v.sum());
//! let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], &device);
//! let (doubled, total): (Tensor<B, 2>, Tensor<B, 1>) = micro_vmap(f)
//!     .microbatch_size(2)
//!     .accumulator((Concat, Sum))
//!     .call(xs)
//!     .unwrap();
//! assert_eq!(doubled.dims(), [4, 2]);
//! assert_eq!(total.into_data().to_vec::<f32>().unwrap(), vec![36.0]);
//! ```

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use burn::tensor::{Element, Int, Tensor, TensorPrimitive};
use burn_backend::backend::Backend;
use burn_backend::tensor::Ordered;

use super::{Key, Leaf, Leaves, NodeKind, Spec, Tree, TreeDef};
use crate::VmapError;

/// Where an accumulator runs: the sizes of the microbatching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccContext {
    /// `B`: examples in the whole batch.
    pub batch_size: usize,
    /// `m`: examples per microbatch.
    pub microbatch_size: usize,
    /// `n = B / m`: microbatches in the batch (run or not).
    pub num_microbatches: usize,
}

/// Tensor kinds an accumulator handles: float and int ([`Ordered`] numeric kinds).
pub trait AccKind<B: Backend>: Ordered<B, Elem: Element> {}
impl<B: Backend, K: Ordered<B, Elem: Element>> AccKind<B> for K {}

/// How per-example outputs are combined across a batch (optax's `Accumulator`).
///
/// Every output leaf is seen as a matrix of `[rows, elements]`: an example's tensor of any
/// shape is flattened into one row. `aggregate` reduces the `m` rows of one microbatch,
/// `init` builds the carry from the first aggregated value, `update` folds microbatch `index`
/// into the carry, and `finalize` turns the carry into the result, which has one row (a
/// reduction, reshaped to the example's shape) or, when [`keeps_batch_axis`] is true, `B` rows
/// (reshaped to `[B, example shape...]`). The same methods serve float and int leaves (`K`);
/// bool leaves are accumulated as ints (0/1).
///
/// [`keeps_batch_axis`]: Accumulator::keeps_batch_axis
///
/// # Example: a running maximum
/// ```
/// use burn::tensor::{backend::Backend, Tensor};
/// use burn_vmap::{micro_vmap, AccContext, AccKind, Accumulator, Custom, TestBackend, Vmap};
///
/// #[derive(Clone)]
/// struct Max;
/// impl Accumulator for Max {
///     fn name(&self) -> String { "max".into() }
///     fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
///         rows.max_dim(0)
///     }
///     fn init<B: Backend, K: AccKind<B>>(&self, value: &Tensor<B, 2, K>, _: &AccContext) -> Tensor<B, 2, K> {
///         Tensor::full(value.shape(), f32::NEG_INFINITY, &value.device())
///     }
///     fn update<B: Backend, K: AccKind<B>>(
///         &self, carry: Tensor<B, 2, K>, value: Tensor<B, 2, K>, _index: usize, _: &AccContext,
///     ) -> Tensor<B, 2, K> {
///         carry.max_pair(value)
///     }
/// }
///
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::from_floats([[3.0], [-1.0], [7.0], [2.0]], &Default::default());
/// let m: Tensor<B, 1> = micro_vmap(|x: Tensor<B, 1>| x * 2.0)
///     .microbatch_size(2)
///     .accumulator(Custom(Max))
///     .call(xs)
///     .unwrap();
/// assert_eq!(m.into_data().to_vec::<f32>().unwrap(), vec![14.0]);
/// ```
pub trait Accumulator: Send + Sync + 'static {
    /// A short name for messages (`"sum"`, `"concat"`, ...).
    fn name(&self) -> String;

    /// Whether the result keeps the batch axis (`[B, ...]`, like [`Concat`]); otherwise it is
    /// one reduced example.
    fn keeps_batch_axis(&self) -> bool {
        false
    }

    /// Whether int outputs are converted to float before accumulating (like [`Mean`]).
    fn promotes_int(&self) -> bool {
        false
    }

    /// What [`aggregate`](Accumulator::aggregate) does, when it is one of the common row
    /// reductions: the library then reduces a leaf at its own rank instead of flattening it
    /// first (a copy on backends whose reshape copies). Keep the default, [`RowOp::Other`],
    /// unless `aggregate` is exactly that operation.
    fn row_op(&self) -> RowOp {
        RowOp::Other
    }

    /// Reduces the rows of one microbatch (`[m, elements]`): one row, or `m` rows when the
    /// accumulator keeps the batch axis.
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K>;

    /// The initial carry, given the first aggregated value (for its shape, kind and device).
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K>;

    /// Folds the aggregated value of microbatch `index` into the carry.
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        index: usize,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K>;

    /// The result from the final carry (the carry itself by default).
    fn finalize<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let _ = ctx;
        carry
    }
}

/// The common within-microbatch reductions (see [`Accumulator::row_op`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    /// The rows unchanged.
    Identity,
    /// The sum of the rows.
    Sum,
    /// The mean of the rows.
    Mean,
    /// Anything else: the library calls `aggregate` on the flattened rows.
    Other,
}

/// Sums over the batch (optax's `SUM`; `micro_grad`'s default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum;

/// Averages over the batch (optax's `MEAN`). With microbatching, the sum of the microbatch means
/// is divided by the TOTAL number of microbatches, even when fewer are run
/// (`num_real_microbatches`). Int outputs are averaged as floats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mean;

/// Averages the microbatches that actually run (optax's `RUNNING_MEAN`): the running mean
/// `c_{k+1} = c_k·k/(k+1) + o_k/(k+1)`; zero when none runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunningMean;

/// Keeps every example (optax's `CONCAT`; `micro_vmap`'s default): the result is `[B, ...]` in
/// the original order; rows of microbatches that were not run are zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Concat;

impl Accumulator for Sum {
    fn name(&self) -> String {
        "sum".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Sum
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows.sum_dim(0)
    }
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        value.zeros_like()
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        _: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        carry + value
    }
}

impl Accumulator for Mean {
    fn name(&self) -> String {
        "mean".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Mean
    }
    fn promotes_int(&self) -> bool {
        true
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows.mean_dim(0)
    }
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        value.zeros_like()
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        _: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        carry + value
    }
    fn finalize<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        carry.div_scalar(ctx.num_microbatches.max(1) as f64)
    }
}

impl Accumulator for RunningMean {
    fn name(&self) -> String {
        "running_mean".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Mean
    }
    fn promotes_int(&self) -> bool {
        true
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows.mean_dim(0)
    }
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        value.zeros_like()
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        index: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        let k = index as f64;
        carry.mul_scalar(k / (k + 1.0)) + value.div_scalar(k + 1.0)
    }
}

impl Accumulator for Concat {
    fn name(&self) -> String {
        "concat".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Identity
    }
    fn keeps_batch_axis(&self) -> bool {
        true
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows
    }
    /// The carry is `[n, m·elements]`: row `k` holds microbatch `k`.
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let [m, e] = value.dims();
        Tensor::zeros([ctx.num_microbatches, m * e], &value.device())
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        index: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        let [m, e] = value.dims();
        carry.slice_assign([index..index + 1, 0..m * e], value.reshape([1, m * e]))
    }
    /// Row `k + j·n` of the result is row `j` of microbatch `k`: the original order.
    fn finalize<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let (n, m) = (ctx.num_microbatches, ctx.microbatch_size);
        let e = carry.dims()[1].checked_div(m).unwrap_or(0);
        if n * m * e == 0 {
            // (Burn's `reshape` reads a 0 as "keep this dim".)
            return Tensor::zeros([n * m, e], &carry.device());
        }
        carry.reshape([n, m, e]).swap_dims(0, 1).reshape([n * m, e])
    }
}

/// A user-defined [`Accumulator`] as a leaf of an accumulator tree.
///
/// Built-in accumulators are accumulator trees themselves; a type of yours becomes one through
/// this wrapper (Rust's coherence rules forbid a blanket impl). See [`Accumulator`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Custom<A>(pub A);

// -------------------------------------------------------------------------------------------------
// Type erasure
// -------------------------------------------------------------------------------------------------

/// A leaf seen as a `[rows, elements]` matrix.
pub(crate) enum Flat<B: Backend> {
    Float(Tensor<B, 2>),
    Int(Tensor<B, 2, Int>),
}

impl<B: Backend> Flat<B> {
    pub(crate) fn rows(&self) -> usize {
        match self {
            Flat::Float(t) => t.dims()[0],
            Flat::Int(t) => t.dims()[0],
        }
    }

    /// Zeros of `rows` rows with this matrix's width, kind and device.
    pub(crate) fn zeros_rows(&self, rows: usize) -> Self {
        match self {
            Flat::Float(t) => Flat::Float(Tensor::zeros([rows, t.dims()[1]], &t.device())),
            Flat::Int(t) => Flat::Int(Tensor::zeros([rows, t.dims()[1]], &t.device())),
        }
    }

    fn promote(self) -> Self {
        match self {
            Flat::Int(t) => Flat::Float(t.float()),
            f => f,
        }
    }
}

/// The object-safe face of an [`Accumulator`], for one backend.
trait Erased<B: Backend>: Send + Sync {
    fn name(&self) -> String;
    fn keeps_batch_axis(&self) -> bool;
    fn row_op(&self) -> RowOp;
    fn is_builtin_concat(&self) -> bool;
    fn aggregate(&self, rows: Flat<B>) -> Flat<B>;
    fn init(&self, value: &Flat<B>, ctx: &AccContext) -> Flat<B>;
    fn update(&self, carry: Flat<B>, value: Flat<B>, index: usize, ctx: &AccContext) -> Flat<B>;
    fn finalize(&self, carry: Flat<B>, ctx: &AccContext) -> Flat<B>;
}

struct Wrap<A>(A);

impl<B: Backend, A: Accumulator> Erased<B> for Wrap<A> {
    fn name(&self) -> String {
        self.0.name()
    }
    fn keeps_batch_axis(&self) -> bool {
        self.0.keeps_batch_axis()
    }
    fn row_op(&self) -> RowOp {
        self.0.row_op()
    }
    fn is_builtin_concat(&self) -> bool {
        std::any::TypeId::of::<A>() == std::any::TypeId::of::<Concat>()
    }
    fn aggregate(&self, rows: Flat<B>) -> Flat<B> {
        let rows = if self.0.promotes_int() {
            rows.promote()
        } else {
            rows
        };
        match rows {
            Flat::Float(t) => Flat::Float(self.0.aggregate(t)),
            Flat::Int(t) => Flat::Int(self.0.aggregate(t)),
        }
    }
    fn init(&self, value: &Flat<B>, ctx: &AccContext) -> Flat<B> {
        match value {
            Flat::Float(t) => Flat::Float(self.0.init(t, ctx)),
            Flat::Int(t) => Flat::Int(self.0.init(t, ctx)),
        }
    }
    fn update(&self, carry: Flat<B>, value: Flat<B>, index: usize, ctx: &AccContext) -> Flat<B> {
        match (carry, value) {
            (Flat::Float(c), Flat::Float(v)) => Flat::Float(self.0.update(c, v, index, ctx)),
            (Flat::Int(c), Flat::Int(v)) => Flat::Int(self.0.update(c, v, index, ctx)),
            (Flat::Float(c), Flat::Int(v)) => Flat::Float(self.0.update(c, v.float(), index, ctx)),
            (Flat::Int(c), Flat::Float(v)) => Flat::Float(self.0.update(c.float(), v, index, ctx)),
        }
    }
    fn finalize(&self, carry: Flat<B>, ctx: &AccContext) -> Flat<B> {
        match carry {
            Flat::Float(t) => Flat::Float(self.0.finalize(t, ctx)),
            Flat::Int(t) => Flat::Int(self.0.finalize(t, ctx)),
        }
    }
}

/// A type-erased accumulator for backend `B`: the leaf of an accumulator [`Spec`].
///
/// ```
/// use burn_vmap::{Acc, Spec, Sum, Concat, TestBackend};
/// // For an output `(per_example, total)`: concat the first, sum the second.
/// let spec: Spec<Acc<TestBackend>> = Spec::Seq(vec![Spec::Leaf(Acc::new(Concat)), Spec::Leaf(Acc::new(Sum))]);
/// assert_eq!(format!("{:?}", spec), "Seq([Leaf(Acc(concat)), Leaf(Acc(sum))])");
/// ```
pub struct Acc<B: Backend>(Arc<dyn Erased<B>>);

impl<B: Backend> Clone for Acc<B> {
    fn clone(&self) -> Self {
        Acc(self.0.clone())
    }
}

impl<B: Backend> fmt::Debug for Acc<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Acc({})", self.0.name())
    }
}

impl<B: Backend> Acc<B> {
    /// Erases an accumulator.
    pub fn new(acc: impl Accumulator) -> Self {
        Acc(Arc::new(Wrap(acc)))
    }

    /// The accumulator's name.
    pub fn name(&self) -> String {
        self.0.name()
    }

    /// Whether the result keeps the batch axis.
    pub fn keeps_batch_axis(&self) -> bool {
        self.0.keeps_batch_axis()
    }

    pub(crate) fn aggregate(&self, rows: Flat<B>) -> Flat<B> {
        self.0.aggregate(rows)
    }

    /// `aggregate` of a leaf `[rows, ...]`: `(matrix, example shape, was bool)`. The common row
    /// reductions run at the leaf's own rank; only their small result is flattened.
    pub(crate) fn aggregate_leaf(&self, leaf: Leaf<B>) -> (Flat<B>, Vec<usize>, bool) {
        let shape = leaf.shape().to_vec();
        let example = shape[1..].to_vec();
        let e: usize = example.iter().product();
        let was_bool = matches!(leaf, Leaf::Bool(_));
        let reduce = |t: TensorPrimitive<B>, mean: bool| -> Flat<B> {
            let t = t.tensor();
            let r = if mean {
                B::float_mean_dim(t, 0)
            } else {
                B::float_sum_dim(t, 0)
            };
            Flat::Float(Tensor::from_primitive(TensorPrimitive::Float(
                B::float_reshape(r, [1, e].into()),
            )))
        };
        let rows = shape[0];
        // (Int and bool leaves, rarely large, take the general path.)
        match (self.row_op(), leaf) {
            (RowOp::Sum, Leaf::Float(t)) if rows > 0 => (reduce(t, false), example, was_bool),
            (RowOp::Mean, Leaf::Float(t)) if rows > 0 => (reduce(t, true), example, was_bool),
            (_, leaf) => {
                let (flat, example, was_bool) = to_flat(leaf);
                (self.aggregate(flat), example, was_bool)
            }
        }
    }

    /// Whether this is the built-in [`Concat`] (whose microbatch outputs are kept and ordered
    /// once at the end rather than copied into a flat carry).
    pub(crate) fn is_builtin_concat(&self) -> bool {
        self.0.is_builtin_concat()
    }

    /// The common within-microbatch reduction this accumulator performs, if any.
    pub(crate) fn row_op(&self) -> RowOp {
        self.0.row_op()
    }
    pub(crate) fn init(&self, value: &Flat<B>, ctx: &AccContext) -> Flat<B> {
        self.0.init(value, ctx)
    }
    pub(crate) fn update(
        &self,
        carry: Flat<B>,
        value: Flat<B>,
        k: usize,
        ctx: &AccContext,
    ) -> Flat<B> {
        self.0.update(carry, value, k, ctx)
    }
    pub(crate) fn finalize(&self, carry: Flat<B>, ctx: &AccContext) -> Flat<B> {
        self.0.finalize(carry, ctx)
    }
}

/// What an accumulator leaf stores in a [`TreeDef::Static`]: the erased accumulator and the
/// original value (to rebuild the typed tree).
struct AccStatic<B: Backend> {
    acc: Acc<B>,
    value: Arc<dyn Any + Send + Sync>,
}

fn acc_flatten<B: Backend, A: Accumulator + Clone>(a: A) -> TreeDef {
    TreeDef::Static(Arc::new(AccStatic::<B> {
        acc: Acc::new(a.clone()),
        value: Arc::new(a),
    }))
}

fn acc_unflatten<B: Backend, A: Clone + 'static>(
    def: &TreeDef,
    leaves: &Leaves<B>,
    what: &str,
) -> Result<A, VmapError> {
    if let TreeDef::Static(s) = def {
        if let Some(v) = s
            .downcast_ref::<AccStatic<B>>()
            .and_then(|s| s.value.downcast_ref::<A>())
        {
            return Ok(v.clone());
        }
    }
    Err(VmapError::TreeMismatch {
        what: "tree".into(),
        path: leaves.path(),
        why: format!("expected the accumulator {what}, found {def:?}"),
    })
}

macro_rules! acc_tree {
    ($($t:ident),*) => {$(
        impl<B: Backend> Tree<B> for $t {
            fn flatten_into(self, _: &mut Vec<Leaf<B>>) -> TreeDef {
                acc_flatten::<B, _>(self)
            }
            fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
                acc_unflatten::<B, $t>(def, leaves, stringify!($t))
            }
        }
    )*};
}
acc_tree!(Sum, Mean, RunningMean, Concat);

impl<B: Backend, A: Accumulator + Clone> Tree<B> for Custom<A> {
    fn flatten_into(self, _: &mut Vec<Leaf<B>>) -> TreeDef {
        acc_flatten::<B, _>(self.0)
    }
    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
        acc_unflatten::<B, A>(def, leaves, std::any::type_name::<A>()).map(Custom)
    }
}

impl<B: Backend> Tree<B> for Acc<B> {
    fn flatten_into(self, _: &mut Vec<Leaf<B>>) -> TreeDef {
        TreeDef::Static(Arc::new(AccStatic::<B> {
            value: Arc::new(self.clone()),
            acc: self,
        }))
    }
    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
        acc_unflatten::<B, Acc<B>>(def, leaves, "Acc")
    }
}

/// A [`Spec`] of trees is a tree: `Leaf` is its value, `Seq` a tuple, `Fields` a struct. This
/// lets a `Spec<Acc<B>>` serve as an accumulator tree.
impl<B: Backend, T: Tree<B>> Tree<B> for Spec<T> {
    fn flatten_into(self, leaves: &mut Vec<Leaf<B>>) -> TreeDef {
        match self {
            Spec::Leaf(t) => t.flatten_into(leaves),
            Spec::Seq(items) => TreeDef::Node {
                kind: NodeKind::Tuple,
                keys: (0..items.len()).map(Key::Index).collect(),
                children: items.into_iter().map(|s| s.flatten_into(leaves)).collect(),
            },
            Spec::Fields(fields) => {
                let (keys, children) = fields
                    .into_iter()
                    .map(|(k, s)| (Key::Field(k), s.flatten_into(leaves)))
                    .unzip();
                TreeDef::Node {
                    kind: NodeKind::Map,
                    keys,
                    children,
                }
            }
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
        match def {
            TreeDef::Node { keys, children, .. }
                if keys.iter().all(|k| matches!(k, Key::Field(_))) && !keys.is_empty() =>
            {
                let mut out = Vec::with_capacity(keys.len());
                for (k, c) in keys.iter().zip(children) {
                    let Key::Field(name) = k else { unreachable!() };
                    out.push((
                        name.clone(),
                        leaves.with_key(k.clone(), |l| Spec::unflatten_from(c, l))?,
                    ));
                }
                Ok(Spec::Fields(out))
            }
            TreeDef::Node { keys, children, .. } => Ok(Spec::Seq(
                keys.iter()
                    .zip(children)
                    .map(|(k, c)| leaves.with_key(k.clone(), |l| Spec::unflatten_from(c, l)))
                    .collect::<Result<_, _>>()?,
            )),
            _ => T::unflatten_from(def, leaves).map(Spec::Leaf),
        }
    }
}

/// Reads an accumulator tree's structure back as a [`Spec`] of accumulators.
pub(crate) fn accumulator_spec<B: Backend>(def: &TreeDef) -> Result<Spec<Acc<B>>, VmapError> {
    fn go<B: Backend>(def: &TreeDef, path: &mut String) -> Result<Spec<Acc<B>>, VmapError> {
        match def {
            TreeDef::Static(s) => match s.downcast_ref::<AccStatic<B>>() {
                Some(a) => Ok(Spec::Leaf(a.acc.clone())),
                // A non-accumulator static (a config field) matches the output's static.
                None => Ok(Spec::Seq(Vec::new())),
            },
            TreeDef::Leaf => Err(VmapError::TreeMismatch {
                what: "accumulator".into(),
                path: path.clone(),
                why: "a tensor stands where an accumulator (Sum, Mean, RunningMean, Concat, \
                      Custom(..)) or a tree of accumulators was expected"
                    .into(),
            }),
            TreeDef::Node { keys, children, .. } => {
                let named = !keys.is_empty() && keys.iter().all(|k| matches!(k, Key::Field(_)));
                let mut items = Vec::with_capacity(children.len());
                for (k, c) in keys.iter().zip(children) {
                    let len = path.len();
                    path.push_str(&k.to_string());
                    let s = go(c, path)?;
                    path.truncate(len);
                    items.push((k, s));
                }
                Ok(if named {
                    Spec::Fields(
                        items
                            .into_iter()
                            .map(|(k, s)| match k {
                                Key::Field(f) => (f.clone(), s),
                                Key::Index(i) => (i.to_string(), s),
                            })
                            .collect(),
                    )
                } else {
                    Spec::Seq(items.into_iter().map(|(_, s)| s).collect())
                })
            }
        }
    }
    go(def, &mut "accumulator".to_string())
}

// -------------------------------------------------------------------------------------------------
// Running an accumulator tree over leaves
// -------------------------------------------------------------------------------------------------

/// Flattens a leaf `[rows, ...]` into a `[rows, elements]` matrix.
pub(crate) fn to_flat<B: Backend>(leaf: Leaf<B>) -> (Flat<B>, Vec<usize>, bool) {
    let shape = leaf.shape().to_vec();
    let rows = shape[0];
    let e: usize = shape[1..].iter().product();
    let is_bool = matches!(leaf, Leaf::Bool(_));
    let flat = match leaf {
        Leaf::Float(t) => Flat::Float(Tensor::from_primitive(TensorPrimitive::Float(
            B::float_reshape(t.tensor(), [rows, e].into()),
        ))),
        Leaf::Int(t) => Flat::Int(Tensor::from_primitive(B::int_reshape(t, [rows, e].into()))),
        Leaf::Bool(t) => Flat::Int(
            Tensor::<B, 2, burn::tensor::Bool>::from_primitive(B::bool_reshape(
                t,
                [rows, e].into(),
            ))
            .int(),
        ),
    };
    (flat, shape[1..].to_vec(), is_bool)
}

/// The final leaf from a `[rows, elements]` result: `[B, example...]` when the accumulator keeps
/// the batch axis, else `[example...]`.
pub(crate) fn from_flat<B: Backend>(
    flat: Flat<B>,
    example: &[usize],
    keeps_batch: bool,
    was_bool: bool,
) -> Leaf<B> {
    let rows = flat.rows();
    let mut shape = example.to_vec();
    if keeps_batch {
        shape.insert(0, rows);
    }
    match flat {
        Flat::Float(t) => Leaf::Float(TensorPrimitive::Float(B::float_reshape(
            t.into_primitive().tensor(),
            shape.into(),
        ))),
        Flat::Int(t) if was_bool && keeps_batch => {
            Leaf::Bool(B::bool_reshape(t.bool().into_primitive(), shape.into()))
        }
        Flat::Int(t) => Leaf::Int(B::int_reshape(t.into_primitive(), shape.into())),
    }
}
