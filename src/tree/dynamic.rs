//! [`DynTree`]: a tree whose structure is known only at run time.

use super::{Key, Leaf, Leaves, NodeKind, Tree, TreeDef};
use crate::VmapError;

/// A tree of any structure whose leaves have any rank: what a `custom_vmap` rule receives.
///
/// The ranks of a rule's inputs depend on which of them are batched (a batched input has one
/// more leading axis), so the rule gets them type-erased and picks the typed view that fits the
/// case it handles with [`get`](DynTree::get). A `DynTree` is itself a [`Tree`], so a rule may
/// also return one (built with [`DynTree::new`]) when the ranks of its outputs vary.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::tree::DynTree;
/// let device = Device::default();
/// let pair = (Tensor::<2>::ones([4, 3], &device), Tensor::<1>::ones([3], &device));
/// let args = DynTree::new(pair);
/// assert_eq!(args.leaves().len(), 2);
/// // The wrong ranks are an error naming the argument, not a panic.
/// assert!(args.clone().get::<(Tensor<1>, Tensor<1>)>().is_err());
/// let (u, v): (Tensor<2>, Tensor<1>) = args.get().unwrap();
/// assert_eq!((u.dims(), v.dims()), ([4, 3], [3]));
/// ```
#[derive(Debug, Clone)]
pub struct DynTree {
    pub(crate) leaves: Vec<Leaf>,
    pub(crate) def: TreeDef,
}

impl DynTree {
    /// Erases the types of a tree.
    pub fn new<T: Tree>(tree: T) -> Self {
        let (leaves, def) = tree.flatten();
        Self { leaves, def }
    }

    /// The tree as the typed `T` (same structure, leaves of the kinds and ranks of `T`).
    ///
    /// # Errors
    /// [`VmapError::LeafMismatch`] (and the other tree errors) naming the leaf, e.g. `args[1]`,
    /// whose kind or rank does not fit `T`.
    pub fn get<T: Tree>(self) -> Result<T, VmapError> {
        T::unflatten_named(&self.def, self.leaves, "args")
    }

    /// The leaves, in leaf order (logical shapes with [`Leaf::shape`]).
    pub fn leaves(&self) -> &[Leaf] {
        &self.leaves
    }

    /// The structure.
    pub fn def(&self) -> &TreeDef {
        &self.def
    }

    /// Leaves and structure.
    pub fn into_parts(self) -> (Vec<Leaf>, TreeDef) {
        (self.leaves, self.def)
    }
}

impl Tree for DynTree {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.extend(self.leaves);
        self.def
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        let leaves = (0..def.num_leaves())
            .map(|_| leaves.next_leaf())
            .collect::<Result<_, _>>()?;
        Ok(Self {
            leaves,
            def: def.clone(),
        })
    }
}

#[allow(dead_code)] // for the transforms, not ported yet
impl DynTree {
    /// As [`get`](DynTree::get), naming the root `root` in errors.
    pub(crate) fn into_tree<T: Tree>(self, root: &str) -> Result<T, VmapError> {
        T::unflatten_named(&self.def, self.leaves, root)
    }

    /// The children of the root node (the tree itself when it is not a node).
    pub(crate) fn children(self) -> Vec<DynTree> {
        let TreeDef::Node { children, .. } = self.def else {
            return vec![self];
        };
        let mut leaves = self.leaves.into_iter();
        children
            .into_iter()
            .map(|def| DynTree {
                leaves: leaves.by_ref().take(def.num_leaves()).collect(),
                def,
            })
            .collect()
    }

    /// A tuple of trees.
    pub(crate) fn tuple(items: Vec<DynTree>) -> Self {
        let keys = (0..items.len()).map(Key::Index).collect();
        let mut leaves = Vec::new();
        let mut children = Vec::with_capacity(items.len());
        for t in items {
            leaves.extend(t.leaves);
            children.push(t.def);
        }
        DynTree {
            leaves,
            def: TreeDef::Node {
                kind: NodeKind::Tuple,
                keys,
                children,
            },
        }
    }
}
