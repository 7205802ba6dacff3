//! Accumulators type-erased ([`Acc`]), accumulator trees read as a [`Spec`] of them, and the
//! `[rows, elements]` view of a leaf they work on ([`Flat`]).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use burn::tensor::{Bool, Int, Tensor};

use super::{AccContext, Accumulator, Concat, Custom, Mean, RowOp, RunningMean, Sum, WideSum};
use crate::VmapError;
use crate::tree::{Key, Leaf, Leaves, Spec, Tree, TreeDef};

// -------------------------------------------------------------------------------------------------
// The [rows, elements] view of a leaf
// -------------------------------------------------------------------------------------------------

/// A leaf seen as a `[rows, elements]` matrix (bool leaves as 0/1 ints).
pub(crate) enum Flat {
    Float(Tensor<2>),
    Int(Tensor<2, Int>),
}

impl Flat {
    /// The number of rows.
    pub(crate) fn rows(&self) -> usize {
        match self {
            Flat::Float(t) => t.dims()[0],
            Flat::Int(t) => t.dims()[0],
        }
    }

    fn promote(self) -> Self {
        match self {
            Flat::Int(t) => Flat::Float(t.float()),
            f => f,
        }
    }

    /// A leaf `[rows, ...]` as a matrix: `(matrix, one example's shape, whether it was bool)`.
    pub(crate) fn of_leaf(leaf: Leaf) -> (Self, Vec<usize>, bool) {
        let shape = leaf.shape().to_vec();
        let rows = shape[0];
        let e: usize = shape[1..].iter().product();
        let example = shape[1..].to_vec();
        let was_bool = leaf.kind_name() == "bool";
        let leaf = leaf.reshape([rows, e].into());
        let flat = match leaf.kind_name() {
            "float" => Flat::Float(leaf.into_tensor().expect("a float leaf")),
            "int" => Flat::Int(leaf.into_tensor().expect("an int leaf")),
            _ => Flat::Int(leaf.into_tensor::<2, Bool>().expect("a bool leaf").int()),
        };
        (flat, example, was_bool)
    }

    /// The result leaf: `[rows, example...]` when the accumulator keeps the batch axis (bool
    /// again when it was), else `[example...]` (one row).
    pub(crate) fn into_leaf(self, example: &[usize], keeps_batch: bool, was_bool: bool) -> Leaf {
        let rows = self.rows();
        let mut shape = example.to_vec();
        if keeps_batch {
            shape.insert(0, rows);
        }
        let leaf = match self {
            Flat::Float(t) => Leaf::new(t),
            Flat::Int(t) if was_bool && keeps_batch => Leaf::new(t.bool()),
            Flat::Int(t) => Leaf::new(t),
        };
        leaf.reshape(shape.into())
    }
}

// -------------------------------------------------------------------------------------------------
// Type erasure
// -------------------------------------------------------------------------------------------------

/// The object-safe face of an [`Accumulator`].
trait Erased: Send + Sync {
    fn name(&self) -> String;
    fn keeps_batch_axis(&self) -> bool;
    fn row_op(&self) -> RowOp;
    fn is_builtin_concat(&self) -> bool;
    fn aggregate(&self, rows: Flat) -> Flat;
    fn init(&self, value: &Flat, ctx: &AccContext) -> Flat;
    fn update(&self, carry: Flat, value: Flat, index: usize, ctx: &AccContext) -> Flat;
    fn finalize(&self, carry: Flat, ctx: &AccContext) -> Flat;
}

struct Wrap<A>(A);

impl<A: Accumulator> Erased for Wrap<A> {
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
    fn aggregate(&self, rows: Flat) -> Flat {
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
    fn init(&self, value: &Flat, ctx: &AccContext) -> Flat {
        match value {
            Flat::Float(t) => Flat::Float(self.0.init(t, ctx)),
            Flat::Int(t) => Flat::Int(self.0.init(t, ctx)),
        }
    }
    fn update(&self, carry: Flat, value: Flat, index: usize, ctx: &AccContext) -> Flat {
        match (carry, value) {
            (Flat::Float(c), Flat::Float(v)) => Flat::Float(self.0.update(c, v, index, ctx)),
            (Flat::Int(c), Flat::Int(v)) => Flat::Int(self.0.update(c, v, index, ctx)),
            (Flat::Float(c), Flat::Int(v)) => Flat::Float(self.0.update(c, v.float(), index, ctx)),
            (Flat::Int(c), Flat::Float(v)) => Flat::Float(self.0.update(c.float(), v, index, ctx)),
        }
    }
    fn finalize(&self, carry: Flat, ctx: &AccContext) -> Flat {
        match carry {
            Flat::Float(t) => Flat::Float(self.0.finalize(t, ctx)),
            Flat::Int(t) => Flat::Int(self.0.finalize(t, ctx)),
        }
    }
}

/// A type-erased accumulator: the leaf of an accumulator [`Spec`].
///
/// ```
/// use burn_vmap::accumulate::{Acc, Concat, Sum};
/// use burn_vmap::tree::Spec;
/// // For an output `(per_example, total)`: concat the first, sum the second.
/// let spec: Spec<Acc> = Spec::Seq(vec![Spec::Leaf(Acc::new(Concat)), Spec::Leaf(Acc::new(Sum))]);
/// assert_eq!(format!("{:?}", spec), "Seq([Leaf(Acc(concat)), Leaf(Acc(sum))])");
/// ```
#[derive(Clone)]
pub struct Acc(Arc<dyn Erased>);

impl fmt::Debug for Acc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Acc({})", self.0.name())
    }
}

impl Acc {
    /// Erases an accumulator.
    ///
    /// ```
    /// use burn_vmap::accumulate::{Acc, Mean};
    /// assert_eq!(Acc::new(Mean).name(), "mean");
    /// ```
    pub fn new(acc: impl Accumulator) -> Self {
        Acc(Arc::new(Wrap(acc)))
    }

    /// The accumulator's name.
    ///
    /// ```
    /// use burn_vmap::accumulate::{Acc, Sum};
    /// assert_eq!(Acc::new(Sum).name(), "sum");
    /// ```
    pub fn name(&self) -> String {
        self.0.name()
    }

    /// Whether the result keeps the batch axis.
    ///
    /// ```
    /// use burn_vmap::accumulate::{Acc, Concat, Sum};
    /// assert!(Acc::new(Concat).keeps_batch_axis());
    /// assert!(!Acc::new(Sum).keeps_batch_axis());
    /// ```
    pub fn keeps_batch_axis(&self) -> bool {
        self.0.keeps_batch_axis()
    }

    /// The common within-microbatch reduction this accumulator performs, if any.
    pub(crate) fn row_op(&self) -> RowOp {
        self.0.row_op()
    }

    /// Whether this is the built-in [`Concat`] (whose microbatch outputs are kept and ordered
    /// once at the end rather than copied into a flat carry).
    pub(crate) fn is_builtin_concat(&self) -> bool {
        self.0.is_builtin_concat()
    }

    pub(crate) fn aggregate(&self, rows: Flat) -> Flat {
        self.0.aggregate(rows)
    }
    pub(crate) fn init(&self, value: &Flat, ctx: &AccContext) -> Flat {
        self.0.init(value, ctx)
    }
    pub(crate) fn update(&self, carry: Flat, value: Flat, k: usize, ctx: &AccContext) -> Flat {
        self.0.update(carry, value, k, ctx)
    }
    pub(crate) fn finalize(&self, carry: Flat, ctx: &AccContext) -> Flat {
        self.0.finalize(carry, ctx)
    }
}

// -------------------------------------------------------------------------------------------------
// Accumulators as leaf-less trees
// -------------------------------------------------------------------------------------------------

/// What an accumulator leaf stores in a [`TreeDef::Static`]: the erased accumulator and the
/// original value (to rebuild the typed tree).
struct AccStatic {
    acc: Acc,
    value: Arc<dyn Any + Send + Sync>,
}

fn acc_flatten<A: Accumulator + Clone>(a: A) -> TreeDef {
    TreeDef::Static(Arc::new(AccStatic {
        acc: Acc::new(a.clone()),
        value: Arc::new(a),
    }))
}

fn acc_unflatten<A: Clone + 'static>(
    def: &TreeDef,
    leaves: &Leaves,
    what: &str,
) -> Result<A, VmapError> {
    if let TreeDef::Static(s) = def
        && let Some(v) = s
            .downcast_ref::<AccStatic>()
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

/// `Tree` for a built-in accumulator: a static node holding it.
macro_rules! acc_tree {
    ($($t:ident),*) => {$(
        impl Tree for $t {
            fn flatten_into(self, _: &mut Vec<Leaf>) -> TreeDef {
                acc_flatten(self)
            }
            fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
                acc_unflatten::<$t>(def, leaves, stringify!($t))
            }
        }
    )*};
}
acc_tree!(Sum, WideSum, Mean, RunningMean, Concat);

impl<A: Accumulator + Clone> Tree for Custom<A> {
    fn flatten_into(self, _: &mut Vec<Leaf>) -> TreeDef {
        acc_flatten(self.0)
    }
    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        acc_unflatten::<A>(def, leaves, std::any::type_name::<A>()).map(Custom)
    }
}

impl Tree for Acc {
    fn flatten_into(self, _: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::Static(Arc::new(AccStatic {
            value: Arc::new(self.clone()),
            acc: self,
        }))
    }
    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        acc_unflatten::<Acc>(def, leaves, "Acc")
    }
}

/// Reads an accumulator tree's structure back as a [`Spec`] of accumulators.
///
/// # Errors
/// [`VmapError::TreeMismatch`] (`what` = `accumulator`) where the tree holds a tensor.
pub(crate) fn accumulator_spec(def: &TreeDef) -> Result<Spec<Acc>, VmapError> {
    fn go(def: &TreeDef, path: &mut String) -> Result<Spec<Acc>, VmapError> {
        match def {
            TreeDef::Static(s) => match s.downcast_ref::<AccStatic>() {
                Some(a) => Ok(Spec::Leaf(a.acc.clone())),
                // A non-accumulator static (a config field) matches the output's static.
                None => Ok(Spec::Seq(Vec::new())),
            },
            TreeDef::Leaf => Err(VmapError::TreeMismatch {
                what: "accumulator".into(),
                path: path.clone(),
                why: "a tensor stands where an accumulator (Sum, WideSum, Mean, RunningMean, Concat, \
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
