//! The structure of a flattened tree: [`TreeDef`], its [`Key`]s and [`NodeKind`]s, and the
//! static values it carries.

use core::fmt;
use std::any::Any;
use std::sync::Arc;

use crate::VmapError;

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
    /// A leaf-less static value ([`Static`](super::Static)), carried through untouched.
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
            TreeDef::Leaf => write!(f, "tensor"),
            TreeDef::Static(v) => match v.downcast_ref::<StaticCell>() {
                Some(cell) => write!(f, "Static<{}>", cell.type_name),
                None => write!(f, "Static"),
            },
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

    /// Path of leaf `i` (in leaf order), rooted at `root`: for error messages, which name one
    /// leaf; a caller that checks every leaf formats this only on failure.
    pub(crate) fn leaf_path(&self, root: &str, i: usize) -> String {
        self.leaf_paths(root).swap_remove(i)
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
                        push_key(path, k);
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

    /// Whether two trees have the same structure: the same nodes with the same keys, and static
    /// values that are equal ([`Static`](super::Static) values and `#[tree(static)]` fields compare by value;
    /// other statics, such as accumulators, compare as equal). Structs compare by their field
    /// names, not their type names, as derived structs rebuild (`BatchedLinear { weight, bias }`
    /// matches `Linear { weight, bias }`).
    pub fn same_structure(&self, other: &TreeDef) -> bool {
        first_difference(self, other, &mut Vec::new()).is_none()
    }

    /// Checks that `other` has the same structure as `self` (see
    /// [`same_structure`](TreeDef::same_structure)).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{Static, Tree};
    /// let device = Device::default();
    /// let t = || Tensor::<1>::zeros([2], &device);
    /// let (_, a) = (t(), Static(1)).flatten();
    /// let (_, b) = (t(), Static(2)).flatten();
    /// let err = a.check_same(&b, "zip_map", "tree").unwrap_err();
    /// assert!(err.to_string().contains("tree[1]"), "{err}");
    /// ```
    ///
    /// # Errors
    /// [`VmapError::TreeMismatch`] naming `what` and the first path (from `root`) where the two
    /// differ.
    pub fn check_same(&self, other: &TreeDef, what: &str, root: &str) -> Result<(), VmapError> {
        match self.difference(other, root) {
            None => Ok(()),
            Some((path, why)) => Err(VmapError::TreeMismatch {
                what: what.into(),
                path,
                why,
            }),
        }
    }

    /// The first place where `self` and `other` differ: `(path, why)`.
    fn difference(&self, other: &TreeDef, root: &str) -> Option<(String, String)> {
        let mut keys = Vec::new();
        let (a, b) = first_difference(self, other, &mut keys)?;
        let mut path = root.to_string();
        for k in keys {
            push_key(&mut path, k);
        }
        let why = match (a, b) {
            (TreeDef::Static(x), TreeDef::Static(y)) => {
                let name = |c: &Arc<dyn Any + Send + Sync>| {
                    c.downcast_ref::<StaticCell>().map_or("?", |c| c.type_name)
                };
                format!("static values differ ({} and {})", name(x), name(y))
            }
            (
                TreeDef::Node {
                    kind: k1, keys: a, ..
                },
                TreeDef::Node {
                    kind: k2, keys: b, ..
                },
            ) => {
                let show = |k: &NodeKind, keys: &[Key]| {
                    let keys: Vec<String> = keys.iter().map(Key::to_string).collect();
                    format!("{k:?} with keys [{}]", keys.join(", "))
                };
                format!("{} on one side, {} on the other", show(k1, a), show(k2, b))
            }
            (a, b) => format!("{a:?} on one side, {b:?} on the other"),
        };
        Some((path, why))
    }

    /// A static node holding `value`, compared by value in
    /// [`same_structure`](TreeDef::same_structure): what [`Static`](super::Static) and `#[tree(static)]` fields
    /// flatten to.
    ///
    /// ```
    /// use burn_vmap::tree::TreeDef;
    /// let def = TreeDef::static_value(String::from("relu"));
    /// assert_eq!(def.static_ref::<String>().map(String::as_str), Some("relu"));
    /// assert!(def.same_structure(&TreeDef::static_value(String::from("relu"))));
    /// assert!(!def.same_structure(&TreeDef::static_value(String::from("gelu"))));
    /// ```
    pub fn static_value<T: Clone + PartialEq + Send + Sync + 'static>(value: T) -> TreeDef {
        fn eq<T: PartialEq + 'static>(a: &StaticAny, b: &StaticAny) -> bool {
            match (a.downcast_ref::<T>(), b.downcast_ref::<T>()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            }
        }
        TreeDef::Static(Arc::new(StaticCell {
            value: Box::new(value),
            eq: eq::<T>,
            type_name: std::any::type_name::<T>(),
        }))
    }

    /// The value of a static node, if it is one holding a `T`.
    ///
    /// ```
    /// use burn_vmap::{Static, Tree};
    /// let (_, def) = Static(3_u8).flatten();
    /// assert_eq!(def.static_ref::<u8>(), Some(&3));
    /// assert_eq!(def.static_ref::<u16>(), None);
    /// ```
    pub fn static_ref<T: 'static>(&self) -> Option<&T> {
        match self {
            TreeDef::Static(v) => match v.downcast_ref::<StaticCell>() {
                Some(cell) => cell.value.downcast_ref::<T>(),
                None => v.downcast_ref::<T>(),
            },
            _ => None,
        }
    }
}

type StaticAny = dyn Any + Send + Sync;

/// What [`TreeDef::static_value`] stores: the value and how to compare it.
struct StaticCell {
    value: Box<StaticAny>,
    eq: fn(&StaticAny, &StaticAny) -> bool,
    type_name: &'static str,
}

impl StaticCell {
    fn same(&self, other: &StaticCell) -> bool {
        (self.eq)(&*self.value, &*other.value)
    }
}

/// The first pair of subtrees where `a` and `b` differ (see [`TreeDef::same_structure`]), with
/// the keys leading to it pushed on `path`; nothing is formatted (a cache lookup compares
/// structures on every call).
fn first_difference<'a>(
    a: &'a TreeDef,
    b: &'a TreeDef,
    path: &mut Vec<&'a Key>,
) -> Option<(&'a TreeDef, &'a TreeDef)> {
    match (a, b) {
        (TreeDef::Leaf, TreeDef::Leaf) => None,
        (TreeDef::Static(x), TreeDef::Static(y)) => {
            match (
                x.downcast_ref::<StaticCell>(),
                y.downcast_ref::<StaticCell>(),
            ) {
                (Some(x), Some(y)) if !x.same(y) => Some((a, b)),
                _ => None,
            }
        }
        (
            TreeDef::Node {
                kind: k1,
                keys: ka,
                children: c1,
            },
            TreeDef::Node {
                kind: k2,
                keys: kb,
                children: c2,
            },
        ) => {
            let same_kind =
                k1 == k2 || matches!((k1, k2), (NodeKind::Struct(_), NodeKind::Struct(_)));
            if !same_kind || ka != kb {
                return Some((a, b));
            }
            for ((k, x), y) in ka.iter().zip(c1).zip(c2) {
                path.push(k);
                if let Some(d) = first_difference(x, y, path) {
                    return Some(d);
                }
                path.pop();
            }
            None
        }
        _ => Some((a, b)),
    }
}

/// Appends `key` to a path as it prints (`[0]`, `.field`), without a temporary string.
pub(crate) fn push_key(path: &mut String, key: &Key) {
    use fmt::Write as _;
    // Writing to a `String` cannot fail.
    let _ = write!(path, "{key}");
}
