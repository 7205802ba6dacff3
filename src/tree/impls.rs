//! `Tree` for Burn tensors and standard containers.

use std::collections::BTreeMap;

use burn::tensor::Tensor;
use burn::tensor::kind::{Basic, TensorKind};

use super::{Key, Leaf, Leaves, NodeKind, Tree, TreeDef};
use crate::VmapError;

fn mismatch(path: String, want: &str, def: &TreeDef) -> VmapError {
    VmapError::TreeMismatch {
        what: "tree".into(),
        path,
        why: format!("expected {want}, found {def:?}"),
    }
}

/// A tensor of any rank and kind (float, int, bool) is a leaf.
impl<const D: usize, K: TensorKind + Basic> Tree for Tensor<D, K> {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::new(self));
        TreeDef::Leaf
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        if !matches!(def, TreeDef::Leaf) {
            return Err(mismatch(leaves.path(), "a tensor", def));
        }
        leaves.next_leaf()?.into_tensor_at(&leaves.path())
    }
}

/// Checks `def` is a node of `kind` with `n` children (any count when `n` is `None`).
fn node(
    def: &TreeDef,
    kind: NodeKind,
    n: Option<usize>,
    path: impl FnOnce() -> String,
) -> Result<(&[Key], &[TreeDef]), VmapError> {
    match def {
        TreeDef::Node {
            kind: k,
            keys,
            children,
        } if *k == kind && n.is_none_or(|n| n == children.len()) => Ok((keys, children)),
        _ => Err(mismatch(
            path(),
            &match n {
                Some(n) => format!("a {kind:?} node with {n} children"),
                None => format!("a {kind:?} node"),
            },
            def,
        )),
    }
}

impl Tree for () {
    fn flatten_into(self, _leaves: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::Node {
            kind: NodeKind::Tuple,
            keys: vec![],
            children: vec![],
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        node(def, NodeKind::Tuple, Some(0), || leaves.path())?;
        Ok(())
    }
}

macro_rules! tuple_tree {
    ($n:literal; $($t:ident $i:tt),+) => {
        impl<$($t: Tree),+> Tree for ($($t,)+) {
            fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
                let children = vec![$(self.$i.flatten_into(leaves)),+];
                TreeDef::Node { kind: NodeKind::Tuple, keys: (0..$n).map(Key::Index).collect(), children }
            }

            fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
                let (_, children) = node(def, NodeKind::Tuple, Some($n), || leaves.path())?;
                Ok(($(leaves.with_key(Key::Index($i), |l| $t::unflatten_from(&children[$i], l))?,)+))
            }
        }
    };
}

tuple_tree!(1; T0 0);
tuple_tree!(2; T0 0, T1 1);
tuple_tree!(3; T0 0, T1 1, T2 2);
tuple_tree!(4; T0 0, T1 1, T2 2, T3 3);
tuple_tree!(5; T0 0, T1 1, T2 2, T3 3, T4 4);
tuple_tree!(6; T0 0, T1 1, T2 2, T3 3, T4 4, T5 5);
tuple_tree!(7; T0 0, T1 1, T2 2, T3 3, T4 4, T5 5, T6 6);
tuple_tree!(8; T0 0, T1 1, T2 2, T3 3, T4 4, T5 5, T6 6, T7 7);

fn seq_def<T: Tree>(items: impl Iterator<Item = T>, leaves: &mut Vec<Leaf>) -> TreeDef {
    let children: Vec<TreeDef> = items.map(|x| x.flatten_into(leaves)).collect();
    TreeDef::Node {
        kind: NodeKind::Seq,
        keys: (0..children.len()).map(Key::Index).collect(),
        children,
    }
}

impl<T: Tree> Tree for Vec<T> {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        seq_def(self.into_iter(), leaves)
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        let (_, children) = node(def, NodeKind::Seq, None, || leaves.path())?;
        children
            .iter()
            .enumerate()
            .map(|(i, c)| leaves.with_key(Key::Index(i), |l| T::unflatten_from(c, l)))
            .collect()
    }
}

impl<T: Tree, const N: usize> Tree for [T; N] {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        seq_def(self.into_iter(), leaves)
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        let items = Vec::<T>::unflatten_from(def, leaves)?;
        let got = items.len();
        items.try_into().map_err(|_| VmapError::LeafCount {
            path: leaves.path(),
            expected: N,
            got,
        })
    }
}

impl<T: Tree> Tree for Option<T> {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        let children = match self {
            Some(x) => vec![x.flatten_into(leaves)],
            None => vec![],
        };
        TreeDef::Node {
            kind: NodeKind::Option,
            keys: (0..children.len()).map(Key::Index).collect(),
            children,
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        let (_, children) = node(def, NodeKind::Option, None, || leaves.path())?;
        match children {
            [] => Ok(None),
            [c] => Ok(Some(
                leaves.with_key(Key::Index(0), |l| T::unflatten_from(c, l))?,
            )),
            _ => Err(mismatch(leaves.path(), "an Option", def)),
        }
    }
}

impl<T: Tree> Tree for Box<T> {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        (*self).flatten_into(leaves)
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        T::unflatten_from(def, leaves).map(Box::new)
    }
}

impl<T: Tree> Tree for BTreeMap<String, T> {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        let mut keys = Vec::with_capacity(self.len());
        let mut children = Vec::with_capacity(self.len());
        for (k, v) in self {
            keys.push(Key::Field(k));
            children.push(v.flatten_into(leaves));
        }
        TreeDef::Node {
            kind: NodeKind::Map,
            keys,
            children,
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        let (keys, children) = node(def, NodeKind::Map, None, || leaves.path())?;
        let mut out = BTreeMap::new();
        for (k, c) in keys.iter().zip(children) {
            let Key::Field(name) = k else {
                return Err(mismatch(leaves.path(), "string map keys", def));
            };
            let v = leaves.with_key(k.clone(), |l| T::unflatten_from(c, l))?;
            out.insert(name.clone(), v);
        }
        Ok(out)
    }
}

impl<T: Clone + PartialEq + Send + Sync + 'static> Tree for Static<T> {
    fn flatten_into(self, _leaves: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::static_value(self.0)
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        match def {
            TreeDef::Static(_) => def.static_ref::<T>().cloned().map(Static).ok_or_else(|| {
                mismatch(
                    leaves.path(),
                    &format!("a Static<{}>", std::any::type_name::<T>()),
                    def,
                )
            }),
            _ => Err(mismatch(leaves.path(), "a Static value", def)),
        }
    }
}

/// A leaf-less value that trees carry through untouched (powerpax's `Static`): configuration,
/// flags, sizes. Compared and hashed by value.
///
/// ```
/// use burn_vmap::{Static, Tree};
/// let (leaves, def) = Static("relu").flatten();
/// assert!(leaves.is_empty());
/// let back: Static<&str> = Tree::unflatten(&def, leaves).unwrap();
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
