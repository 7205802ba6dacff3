//! Accumulators type-erased for one backend ([`Acc`]), accumulator trees read as a [`Spec`] of
//! them, and the `[rows, elements]` view of a leaf they work on.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorPrimitive};
use burn_backend::backend::Backend;

use super::{AccContext, Accumulator, Concat, Custom, Mean, RowOp, RunningMean, Sum};
use crate::VmapError;
use crate::tree::{Key, Leaf, Leaves, Spec, Tree, TreeDef};

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
/// use burn_vmap::accumulate::{Acc, Sum, Concat};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::tree::Spec;
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
    if let TreeDef::Static(s) = def
        && let Some(v) = s
            .downcast_ref::<AccStatic<B>>()
            .and_then(|s| s.value.downcast_ref::<A>())
    {
        return Ok(v.clone());
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
