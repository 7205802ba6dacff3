//! Pytrees of Burn tensors: the [`Tree`] trait.
//!
//! A tree flattens into a list of type-erased [`Leaf`]s (user tensors of any rank and kind) plus
//! a [`TreeDef`] that records its structure, and rebuilds from leaves — possibly into a
//! *different* type of the same structure, such as the same struct with tensors of one rank
//! less (what a function under a vectorizing map sees). The leaf order is defined: fields in
//! declaration order, tuple and sequence elements by position, map entries by key order.
//!
//! Burn 0.22 tensors (`Tensor<D, K>`) carry no backend (they dispatch on their device at run
//! time), so neither does a tree: `Tree` has no type parameter.
//!
//! User structs become trees with `#[derive(Tree)]` (see [`Tree`] for a worked example). The
//! tensors of a tree are read and rewritten with visitors generic over rank and kind
//! ([`TensorVisitor`], [`TensorMapper`], [`TensorZipper`]), or leaf by leaf with
//! [`Tree::map_leaves`].
#![deny(missing_docs)]

mod def;
mod dynamic;
mod impls;
// The shape moves serve the transforms, which are not ported yet.
#[allow(dead_code)]
mod leaf;
mod lift;
mod spec;
mod visit;

use crate::VmapError;

pub use def::{Key, NodeKind, TreeDef};
pub use dynamic::DynTree;
pub use impls::Static;
#[allow(unused_imports)] // for the transforms, not ported yet
pub(crate) use leaf::rows;
pub use leaf::{Leaf, Leaves};
pub use lift::Lift;
pub use spec::Spec;
pub use visit::{MAX_RANK, TensorMapper, TensorVisitor, TensorZipper};

/// `#[derive(Tree)]`: a struct as a tree of its fields, in declaration order; see
/// [`Tree`](trait@Tree) for a worked example and the derive's own documentation (below, or
/// `burn_vmap_derive::Tree`) for its attributes.
///
/// ```
/// use burn::tensor::{Device, Int, Tensor};
/// use burn_vmap::Tree;
///
/// #[derive(Tree)]
/// struct Batch {
///     images: Tensor<3>,
///     labels: Tensor<1, Int>,
///     #[tree(static)]
///     split: String,
///     #[tree(skip)]
///     cache: Vec<u8>,
/// }
///
/// let device = Device::default();
/// let batch = Batch {
///     images: Tensor::zeros([2, 4, 4], &device),
///     labels: Tensor::from_ints([1, 0], &device),
///     split: "train".into(),
///     cache: vec![1, 2, 3],
/// };
/// let (leaves, def) = batch.flatten();
/// assert_eq!(def.leaf_paths("batch"), ["batch.images", "batch.labels"]);
/// let back: Batch = Tree::unflatten(&def, leaves).unwrap();
/// assert_eq!((back.split.as_str(), back.cache.len()), ("train", 0));
/// ```
pub use burn_vmap_derive::Tree;

/// A pytree of Burn tensors.
///
/// Implemented for `Tensor<D, K>` (float, int and bool, any rank), tuples up to 8, arrays,
/// `Vec`, `Option`, `Box`, `BTreeMap<String, _>`, `()`, [`Static`], [`DynTree`] and [`Spec`],
/// and derived for structs with `#[derive(Tree)]`.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::Tree;
///
/// let device = Device::default();
/// let pair = (Tensor::<1>::ones([3], &device), Tensor::<2>::zeros([2, 2], &device));
/// let (leaves, def) = pair.flatten();
/// assert_eq!(leaves.len(), 2);
/// assert_eq!(def.leaf_paths("x"), vec!["x[0]", "x[1]"]);
/// let back: (Tensor<1>, Tensor<2>) = Tree::unflatten(&def, leaves).unwrap();
/// assert_eq!(back.1.dims(), [2, 2]);
/// ```
///
/// # Deriving `Tree`
///
/// `#[derive(Tree)]` (re-exported with the trait: `use burn_vmap::Tree` brings both) makes a
/// struct a tree whose leaves are its fields' leaves in declaration order, and whose paths are
/// its field names (`grads.layer1.weight`; tuple structs use `[0]`, `[1]`, ...).
///
/// - **Generic leaves.** A field whose type mentions a type parameter gets a `Tree` bound, so
///   one struct can hold tensors in one place and leaf-less trees (accumulators, [`Static`]
///   values) in another. Such a struct whose tree fields are bare type parameters also gets
///   [`Lift`] (`Stats<P, T>` lifts to `Stats<P::Lifted, T::Lifted>`).
/// - **`#[tree(skip)]`**: the field is not part of the tree; rebuilt with `Default::default()`.
/// - **`#[tree(static)]`**: the field travels in the [`TreeDef`] as a static value, like
///   [`Static`]; it needs `Clone + PartialEq + Send + Sync + 'static` and is compared by value
///   where structures are compared.
/// - **Rebuilding.** A derived struct rebuilds from any struct node with the same field names
///   (its type name is only reported in messages): the batched mirror of a struct (ranks one
///   higher) unflattens into the struct itself.
/// - There is no backend attribute: Burn 0.22 tensors carry no backend, and
///   `#[tree(backend = B)]` is a compile error.
///
/// # Example: global-norm clipping over a derived struct
///
/// The same generic struct describes one example's gradients (ranks 2 and 1) and a batch of
/// them (ranks 3 and 2). A visitor sums the squares of every leaf (the global norm), a mapper
/// scales every leaf.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::tree::{TensorMapper, TensorVisitor};
/// use burn_vmap::{Tree, VmapError};
///
/// #[derive(Tree, Clone, Debug)]
/// struct Linear<W, V> {
///     weight: W,
///     bias: V,
///     #[tree(static)]
///     name: String, // carried in the structure, not a leaf
///     #[tree(skip)]
///     cache: Option<Vec<f32>>, // not part of the tree: Default::default() when rebuilt
/// }
/// type One = Linear<Tensor<2>, Tensor<1>>;
/// type Batch = Linear<Tensor<3>, Tensor<2>>;
///
/// /// Sum of the squares of every float leaf.
/// struct SumSquares(Vec<Tensor<1>>);
/// impl TensorVisitor for SumSquares {
///     fn visit_float<const D: usize>(&mut self, _path: &str, t: &Tensor<D>) {
///         self.0.push(t.clone().powi_scalar(2).sum());
///     }
/// }
/// /// Multiplies every float leaf by a one-element tensor.
/// struct Scale(Tensor<1>);
/// impl TensorMapper for Scale {
///     fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<D>) -> Tensor<D> {
///         t * self.0.clone().reshape([1; D])
///     }
/// }
///
/// /// Clips gradients to a global norm of at most 1.
/// fn clip(g: One) -> One {
///     let mut squares = SumSquares(Vec::new());
///     g.visit_tensors(&mut squares).expect("ranks <= 8");
///     let norm = Tensor::cat(squares.0, 0).sum().sqrt();
///     g.map_tensors(&mut Scale(norm.recip().clamp_max(1.0))).expect("ranks <= 8")
/// }
///
/// let device = Device::default();
/// let g: One = Linear {
///     weight: Tensor::from_floats([[3.0, 0.0]], &device),
///     bias: Tensor::from_floats([4.0], &device),
///     name: "layer1".into(),
///     cache: Some(vec![1.0]),
/// };
/// assert_eq!(g.leaf_paths("grads"), ["grads.weight", "grads.bias"]);
/// let clipped = clip(g); // a global norm of 5: scaled by 1/5
/// let w = clipped.weight.into_data().try_to_vec::<f32>().unwrap();
/// let b = clipped.bias.into_data().try_to_vec::<f32>().unwrap();
/// let close = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(x, y)| (x - y).abs() < 1e-5);
/// assert!(close(&w, &[0.6, 0.0]) && close(&b, &[0.8]), "{w:?} {b:?}");
/// assert_eq!((clipped.name.as_str(), clipped.cache), ("layer1", None));
///
/// // Rebuilding leaves into the wrong ranks names the path.
/// let batch: Batch = Linear {
///     weight: Tensor::zeros([2, 1, 2], &device),
///     bias: Tensor::zeros([2, 1], &device),
///     name: "layer1".into(),
///     cache: None,
/// };
/// let (leaves, def) = batch.flatten();
/// let err = One::unflatten_named(&def, leaves, "args").unwrap_err();
/// assert!(matches!(&err, VmapError::LeafMismatch { path, .. } if path == "args.weight"), "{err}");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tree of tensors",
    label = "not a `Tree`",
    note = "trees are tensors, tuples, arrays, `Vec`, `Option`, `Box`, `BTreeMap<String, _>`, \
            `Static<T>` and structs with `#[derive(Tree)]`; mark a struct field that is not a \
            tree `#[tree(static)]` (a value carried in the structure) or `#[tree(skip)]`"
)]
pub trait Tree: Sized {
    /// Pushes the leaves in leaf order and returns the structure.
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef;

    /// Rebuilds from the structure `def`, taking leaves from the cursor.
    ///
    /// # Errors
    /// If the structure, a leaf's kind or a leaf's rank does not fit `Self`.
    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError>;

    /// Flattens into leaves and structure.
    fn flatten(self) -> (Vec<Leaf>, TreeDef) {
        let mut leaves = Vec::new();
        let def = self.flatten_into(&mut leaves);
        (leaves, def)
    }

    /// Rebuilds from leaves, checking every leaf is used.
    ///
    /// # Errors
    /// If the leaves do not fit `Self` with the structure `def`.
    fn unflatten(def: &TreeDef, leaves: Vec<Leaf>) -> Result<Self, VmapError> {
        Self::unflatten_named(def, leaves, "tree")
    }

    /// As [`unflatten`](Tree::unflatten), naming the root `root` in errors.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{Tree, VmapError};
    /// let t = Tensor::<2>::zeros([2, 3], &Device::default());
    /// let (leaves, def) = vec![t].flatten();
    /// let err = Vec::<Tensor<1>>::unflatten_named(&def, leaves, "args").unwrap_err();
    /// assert!(matches!(&err, VmapError::LeafMismatch { path, .. } if path == "args[0]"), "{err}");
    /// ```
    ///
    /// # Errors
    /// If the leaves do not fit `Self` with the structure `def`.
    fn unflatten_named(def: &TreeDef, leaves: Vec<Leaf>, root: &str) -> Result<Self, VmapError> {
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

    /// Number of leaves, without consuming the tree (it is cloned; Burn tensors are
    /// reference-counted, so this copies no data).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{Static, Tree};
    /// let t = Tensor::<1>::zeros([2], &Device::default());
    /// let tree = (t.clone(), Static(1), vec![t.clone(), t]);
    /// assert_eq!(tree.leaf_count(), 3);
    /// ```
    fn leaf_count(&self) -> usize
    where
        Self: Clone,
    {
        self.clone().flatten().1.num_leaves()
    }

    /// The path of every leaf in leaf order, rooted at `root` (`grads.layer1.weight`,
    /// `args[0]`), as used in error messages.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::Tree;
    /// let t = Tensor::<1>::zeros([2], &Device::default());
    /// assert_eq!((t.clone(), Some(t)).leaf_paths("x"), ["x[0]", "x[1][0]"]);
    /// ```
    fn leaf_paths(&self, root: &str) -> Vec<String>
    where
        Self: Clone,
    {
        self.clone().flatten().1.leaf_paths(root)
    }

    /// Maps every tensor with a [`TensorMapper`], which sees each leaf with its static rank and
    /// kind and its path relative to the root (`layer1.weight`). The structure, and any static
    /// values, are kept.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::tree::TensorMapper;
    /// use burn_vmap::Tree;
    ///
    /// struct Double;
    /// impl TensorMapper for Double {
    ///     fn map_float<const D: usize>(&mut self, _: &str, t: Tensor<D>) -> Tensor<D> {
    ///         t * 2.0
    ///     }
    /// }
    /// let t = Tensor::<1>::from_floats([1.0, 2.0], &Device::default());
    /// let [_, b] = [t.clone(), t].map_tensors(&mut Double).unwrap();
    /// assert_eq!(b.into_data().try_to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    /// ```
    ///
    /// # Errors
    /// [`VmapError::UnsupportedRank`] for a leaf of rank above [`MAX_RANK`] (map such trees
    /// with [`map_leaves`](Tree::map_leaves)).
    fn map_tensors<M: TensorMapper>(self, mapper: &mut M) -> Result<Self, VmapError> {
        let (leaves, def) = self.flatten();
        let paths = def.leaf_paths(ROOT);
        let leaves = leaves
            .into_iter()
            .zip(&paths)
            .map(|(leaf, at)| visit::map_leaf(mapper, visit::relative(at, ROOT), at, leaf))
            .collect::<Result<Vec<_>, _>>()?;
        Self::unflatten_named(&def, leaves, ROOT)
    }

    /// Visits every tensor with a [`TensorVisitor`], in leaf order, with its path relative to
    /// the root. The tree is cloned (no data is copied: tensors are reference-counted).
    ///
    /// ```
    /// use burn::tensor::{Device, Int, Tensor};
    /// use burn_vmap::tree::TensorVisitor;
    /// use burn_vmap::Tree;
    ///
    /// struct Ranks(Vec<(String, usize)>);
    /// impl TensorVisitor for Ranks {
    ///     fn visit_float<const D: usize>(&mut self, path: &str, _: &Tensor<D>) {
    ///         self.0.push((path.into(), D));
    ///     }
    ///     fn visit_int<const D: usize>(&mut self, path: &str, _: &Tensor<D, Int>) {
    ///         self.0.push((path.into(), D));
    ///     }
    /// }
    /// let device = Device::default();
    /// let tree = (Tensor::<3>::zeros([1, 1, 1], &device), Tensor::<1, Int>::zeros([2], &device));
    /// let mut ranks = Ranks(Vec::new());
    /// tree.visit_tensors(&mut ranks).unwrap();
    /// assert_eq!(ranks.0, [("[0]".to_string(), 3), ("[1]".to_string(), 1)]);
    /// ```
    ///
    /// # Errors
    /// [`VmapError::UnsupportedRank`] for a leaf of rank above [`MAX_RANK`]; then no leaf is
    /// visited.
    fn visit_tensors<V: TensorVisitor>(&self, visitor: &mut V) -> Result<(), VmapError>
    where
        Self: Clone,
    {
        let (leaves, def) = self.clone().flatten();
        let paths = def.leaf_paths(ROOT);
        for (leaf, at) in leaves.iter().zip(&paths) {
            let rank = leaf.shape().num_dims();
            if rank > MAX_RANK {
                return Err(visit::unsupported(at, rank));
            }
        }
        for (leaf, at) in leaves.into_iter().zip(&paths) {
            visit::visit_leaf(visitor, visit::relative(at, ROOT), at, leaf)?;
        }
        Ok(())
    }

    /// Maps every type-erased leaf with `f(path, leaf)` (paths relative to the root), for any
    /// rank. `f` may change a leaf's shape; a change of kind or rank that `Self` cannot hold is
    /// an error.
    ///
    /// ```
    /// use burn::tensor::{Device, Float, Tensor};
    /// use burn_vmap::tree::Leaf;
    /// use burn_vmap::Tree;
    /// let t = Tensor::<1>::from_floats([1.0, -2.0], &Device::default());
    /// let (neg,) = (t,)
    ///     .map_leaves(|_, leaf| Leaf::new(leaf.into_tensor::<1, Float>().unwrap().neg()))
    ///     .unwrap();
    /// assert_eq!(neg.into_data().try_to_vec::<f32>().unwrap(), vec![-1.0, 2.0]);
    /// ```
    ///
    /// # Errors
    /// [`VmapError::LeafMismatch`] naming the path when a returned leaf's kind or rank does not
    /// fit `Self`.
    fn map_leaves(self, mut f: impl FnMut(&str, Leaf) -> Leaf) -> Result<Self, VmapError> {
        let (leaves, def) = self.flatten();
        let paths = def.leaf_paths(ROOT);
        let leaves = leaves
            .into_iter()
            .zip(&paths)
            .map(|(leaf, at)| f(visit::relative(at, ROOT), leaf))
            .collect();
        Self::unflatten_named(&def, leaves, ROOT)
    }

    /// Combines `self` with a tree `other` of the same structure, tensor by tensor, with a
    /// [`TensorZipper`] (JAX's `tree_map` over two trees). `other` may be of another type with
    /// the same structure; static values must be equal.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::tree::TensorZipper;
    /// use burn_vmap::Tree;
    ///
    /// /// `a + lr * b`, as an SGD step on a tree of parameters and a tree of gradients.
    /// struct Axpy(f32);
    /// impl TensorZipper for Axpy {
    ///     fn zip_float<const D: usize>(&mut self, _: &str, a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
    ///         a + b * self.0
    ///     }
    /// }
    /// let device = Device::default();
    /// let params = vec![Tensor::<1>::from_floats([1.0, 1.0], &device)];
    /// let grads = vec![Tensor::<1>::from_floats([2.0, 4.0], &device)];
    /// let stepped = params.clone().zip_map(grads, &mut Axpy(-0.5)).unwrap();
    /// assert_eq!(stepped[0].clone().into_data().try_to_vec::<f32>().unwrap(), vec![0.0, -1.0]);
    ///
    /// // Different structures are an error naming where they differ.
    /// let err = params.zip_map(Vec::<Tensor<1>>::new(), &mut Axpy(1.0)).unwrap_err();
    /// assert!(err.to_string().contains("zip_map"), "{err}");
    /// ```
    ///
    /// # Errors
    /// - [`VmapError::TreeMismatch`] naming the first path where the structures differ, or
    ///   where the two tensors differ in kind or rank;
    /// - [`VmapError::UnsupportedRank`] for a leaf of rank above [`MAX_RANK`].
    fn zip_map<U: Tree, Z: TensorZipper>(
        self,
        other: U,
        zipper: &mut Z,
    ) -> Result<Self, VmapError> {
        let (a, def) = self.flatten();
        let (b, other_def) = other.flatten();
        def.check_same(&other_def, "zip_map", ROOT)?;
        let paths = def.leaf_paths(ROOT);
        for ((x, y), at) in a.iter().zip(&b).zip(&paths) {
            let (rx, ry) = (x.shape().num_dims(), y.shape().num_dims());
            if rx != ry || x.kind_name() != y.kind_name() {
                return Err(VmapError::TreeMismatch {
                    what: "zip_map".into(),
                    path: at.clone(),
                    why: format!(
                        "a {} tensor of rank {rx} on the left, a {} tensor of rank {ry} on the right",
                        x.kind_name(),
                        y.kind_name()
                    ),
                });
            }
            if rx > MAX_RANK {
                return Err(visit::unsupported(at, rx));
            }
        }
        let leaves = a
            .into_iter()
            .zip(b)
            .zip(&paths)
            .map(|((x, y), at)| visit::zip_leaf(zipper, visit::relative(at, ROOT), at, x, y))
            .collect::<Result<Vec<_>, _>>()?;
        Self::unflatten_named(&def, leaves, ROOT)
    }
}

/// The root name of paths in errors from the tree methods.
const ROOT: &str = "tree";

#[doc(hidden)]
pub mod __private;
