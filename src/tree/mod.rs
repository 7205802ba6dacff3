//! Pytrees of Burn tensors: the [`Tree`] trait.
//!
//! A tree flattens into a list of type-erased [`Leaf`]s (tensor primitives of any rank and kind)
//! plus a [`TreeDef`] that records its structure, and rebuilds from leaves — possibly into a
//! *different* type of the same structure, such as the same struct with tensors of one rank
//! less (what a function under `vmap` sees). The leaf order is defined: fields in declaration
//! order, tuple and sequence elements by position, map entries by key order.

pub mod accumulate;
mod dynamic;
mod impls;
mod spec;

use core::fmt;
use std::any::Any;
use std::sync::Arc;

use burn_backend::backend::Backend;
use burn_backend::{Shape, TensorMetadata, TensorPrimitive};

use crate::VmapError;

pub use accumulate::{
    Acc, AccContext, AccKind, Accumulator, Concat, Custom, Mean, RunningMean, Sum,
};
pub use dynamic::DynTree;
pub use spec::Spec;

/// One leaf of a flattened tree: a tensor primitive of any rank.
#[derive(Debug, Clone)]
pub enum Leaf<B: Backend> {
    /// A float tensor (possibly quantized).
    Float(TensorPrimitive<B>),
    /// An int tensor.
    Int(B::IntTensorPrimitive),
    /// A bool tensor.
    Bool(B::BoolTensorPrimitive),
}

impl<B: Backend> Leaf<B> {
    /// `"float"`, `"int"` or `"bool"`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Leaf::Float(_) => "float",
            Leaf::Int(_) => "int",
            Leaf::Bool(_) => "bool",
        }
    }

    /// The (logical) shape.
    pub fn shape(&self) -> Shape {
        match self {
            Leaf::Float(t) => t.shape(),
            Leaf::Int(t) => t.shape(),
            Leaf::Bool(t) => t.shape(),
        }
    }

    /// Maps the primitive, keeping the kind.
    pub fn map(
        self,
        float: impl FnOnce(TensorPrimitive<B>) -> TensorPrimitive<B>,
        int: impl FnOnce(B::IntTensorPrimitive) -> B::IntTensorPrimitive,
        bool_: impl FnOnce(B::BoolTensorPrimitive) -> B::BoolTensorPrimitive,
    ) -> Self {
        match self {
            Leaf::Float(t) => Leaf::Float(float(t)),
            Leaf::Int(t) => Leaf::Int(int(t)),
            Leaf::Bool(t) => Leaf::Bool(bool_(t)),
        }
    }
}

/// A key in a tree path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Position in a tuple, array, `Vec`.
    Index(usize),
    /// A struct field or a map key.
    Field(String),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Index(i) => write!(f, "[{i}]"),
            Key::Field(k) => write!(f, ".{k}"),
        }
    }
}

/// The structure of a flattened tree.
#[derive(Clone)]
pub enum TreeDef {
    /// A tensor.
    Leaf,
    /// A node with keyed children (tuple, struct, sequence, map, `Some`).
    Node {
        /// What kind of node (for messages and matching).
        kind: NodeKind,
        /// Keys of the children, in leaf order.
        keys: Vec<Key>,
        /// The children.
        children: Vec<TreeDef>,
    },
    /// A leaf-less static value ([`Static`](crate::Static)), carried through untouched.
    Static(Arc<dyn Any + Send + Sync>),
}

/// Kinds of tree nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A tuple or the unit `()`.
    Tuple,
    /// A struct (with its type name).
    Struct(&'static str),
    /// An array or a `Vec`.
    Seq,
    /// A `BTreeMap<String, _>`.
    Map,
    /// `Option::Some` (one child) or `None` (no child).
    Option,
}

impl fmt::Debug for TreeDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeDef::Leaf => write!(f, "*"),
            TreeDef::Static(_) => write!(f, "Static"),
            TreeDef::Node {
                kind,
                keys,
                children,
            } => {
                write!(f, "{kind:?}(")?;
                for (i, (k, c)) in keys.iter().zip(children).enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{k}: {c:?}")?;
                }
                write!(f, ")")
            }
        }
    }
}

impl TreeDef {
    /// Number of leaves.
    pub fn num_leaves(&self) -> usize {
        match self {
            TreeDef::Leaf => 1,
            TreeDef::Static(_) => 0,
            TreeDef::Node { children, .. } => children.iter().map(|c| c.num_leaves()).sum(),
        }
    }

    /// Path of every leaf, in leaf order, rooted at `root` (e.g. `args[0].weight`).
    pub fn leaf_paths(&self, root: &str) -> Vec<String> {
        fn go(def: &TreeDef, path: &mut String, out: &mut Vec<String>) {
            match def {
                TreeDef::Leaf => out.push(path.clone()),
                TreeDef::Static(_) => {}
                TreeDef::Node { keys, children, .. } => {
                    for (k, c) in keys.iter().zip(children) {
                        let len = path.len();
                        path.push_str(&k.to_string());
                        go(c, path, out);
                        path.truncate(len);
                    }
                }
            }
        }
        let mut out = Vec::new();
        go(self, &mut root.to_string(), &mut out);
        out
    }

    /// Whether two trees have the same structure (statics compare as equal).
    pub fn same_structure(&self, other: &TreeDef) -> bool {
        match (self, other) {
            (TreeDef::Leaf, TreeDef::Leaf) | (TreeDef::Static(_), TreeDef::Static(_)) => true,
            (
                TreeDef::Node {
                    kind: k1,
                    keys: a,
                    children: c1,
                },
                TreeDef::Node {
                    kind: k2,
                    keys: b,
                    children: c2,
                },
            ) => k1 == k2 && a == b && c1.iter().zip(c2).all(|(x, y)| x.same_structure(y)),
            _ => false,
        }
    }
}

/// A cursor over leaves, with the path of the current position for error messages.
pub struct Leaves<B: Backend> {
    iter: std::vec::IntoIter<Leaf<B>>,
    path: Vec<Key>,
    root: String,
}

impl<B: Backend> Leaves<B> {
    /// Starts a cursor named `root` (the first segment of every path in errors).
    pub fn new(leaves: Vec<Leaf<B>>, root: impl Into<String>) -> Self {
        Self {
            iter: leaves.into_iter(),
            path: Vec::new(),
            root: root.into(),
        }
    }

    /// The next leaf, or an error naming the current path.
    pub fn next_leaf(&mut self) -> Result<Leaf<B>, VmapError> {
        self.iter.next().ok_or_else(|| VmapError::LeafCount {
            path: self.path(),
            expected: 1,
            got: 0,
        })
    }

    /// Runs `f` one key deeper.
    pub fn with_key<T>(&mut self, key: Key, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(key);
        let out = f(self);
        self.path.pop();
        out
    }

    /// The current path, e.g. `args[1].weight`.
    pub fn path(&self) -> String {
        let mut s = self.root.clone();
        for k in &self.path {
            s.push_str(&k.to_string());
        }
        s
    }

    /// Leaves not consumed yet.
    pub fn remaining(&self) -> usize {
        self.iter.len()
    }
}

/// A pytree of Burn tensors on backend `B`.
///
/// Implemented for `Tensor<B, D, K>` (float, int and bool, any rank), tuples up to 8, arrays,
/// `Vec`, `Option`, `Box`, `BTreeMap<String, _>`, `()` and [`Static`](crate::Static).
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{Tree, TestBackend};
///
/// let device = Default::default();
/// let pair = (Tensor::<TestBackend, 1>::ones([3], &device), Tensor::<TestBackend, 2>::zeros([2, 2], &device));
/// let (leaves, def) = pair.flatten();
/// assert_eq!(leaves.len(), 2);
/// assert_eq!(def.leaf_paths("x"), vec!["x[0]", "x[1]"]);
/// let back: (Tensor<TestBackend, 1>, Tensor<TestBackend, 2>) = Tree::unflatten(&def, leaves).unwrap();
/// assert_eq!(back.1.dims(), [2, 2]);
/// ```
pub trait Tree<B: Backend>: Sized {
    /// Pushes the leaves in leaf order and returns the structure.
    fn flatten_into(self, leaves: &mut Vec<Leaf<B>>) -> TreeDef;

    /// Rebuilds from the structure `def`, taking leaves from the cursor.
    ///
    /// # Errors
    /// If the structure, a leaf's kind or a leaf's rank does not fit `Self`.
    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError>;

    /// Flattens into leaves and structure.
    fn flatten(self) -> (Vec<Leaf<B>>, TreeDef) {
        let mut leaves = Vec::new();
        let def = self.flatten_into(&mut leaves);
        (leaves, def)
    }

    /// Rebuilds from leaves, checking every leaf is used.
    ///
    /// # Errors
    /// If the leaves do not fit `Self` with the structure `def`.
    fn unflatten(def: &TreeDef, leaves: Vec<Leaf<B>>) -> Result<Self, VmapError> {
        Self::unflatten_named(def, leaves, "tree")
    }

    /// As [`unflatten`](Tree::unflatten), naming the root `root` in errors.
    ///
    /// # Errors
    /// If the leaves do not fit `Self` with the structure `def`.
    fn unflatten_named(def: &TreeDef, leaves: Vec<Leaf<B>>, root: &str) -> Result<Self, VmapError> {
        let total = leaves.len();
        let mut cursor = Leaves::new(leaves, root);
        let out = Self::unflatten_from(def, &mut cursor)?;
        if cursor.remaining() > 0 {
            return Err(VmapError::LeafCount {
                path: root.to_string(),
                expected: total - cursor.remaining(),
                got: total,
            });
        }
        Ok(out)
    }

    /// Number of leaves.
    fn num_leaves(self) -> usize {
        self.flatten().0.len()
    }
}

/// A leaf-less value that trees carry through untouched (powerpax's `Static`): configuration,
/// flags, sizes. Compared and hashed by value.
///
/// ```
/// use burn_vmap::{Static, Tree, TestBackend};
/// let (leaves, def) = Tree::<TestBackend>::flatten(Static("relu"));
/// assert!(leaves.is_empty());
/// let back: Static<&str> = Tree::<TestBackend>::unflatten(&def, leaves).unwrap();
/// assert_eq!(back, Static("relu"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Static<T>(pub T);

impl<T> Static<T> {
    /// The wrapped value.
    pub fn into_inner(self) -> T {
        self.0
    }
}
