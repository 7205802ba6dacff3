//! Pytrees of Burn tensors: the [`Tree`] trait.
//!
//! A tree flattens into a list of type-erased [`Leaf`]s (tensor primitives of any rank and kind)
//! plus a [`TreeDef`] that records its structure, and rebuilds from leaves — possibly into a
//! *different* type of the same structure, such as the same struct with tensors of one rank
//! less (what a function under `vmap` sees). The leaf order is defined: fields in declaration
//! order, tuple and sequence elements by position, map entries by key order.
//!
//! User structs become trees with `#[derive(Tree)]` (see [`Tree`] for a worked example). The
//! tensors of a tree are read and rewritten with visitors generic over rank and kind
//! ([`TensorVisitor`], [`TensorMapper`], [`TensorZipper`]), or leaf by leaf with
//! [`Tree::map_leaves`].

mod def;
mod dynamic;
mod impls;
mod leaf;
mod lift;
mod spec;
mod visit;

use burn_backend::backend::Backend;

use crate::VmapError;

pub use def::{Key, NodeKind, TreeDef};
pub use dynamic::DynTree;
pub use impls::Static;
pub(crate) use leaf::rows;
pub use leaf::{Leaf, Leaves};
pub use lift::Lift;
pub use spec::Spec;
pub use visit::{MAX_RANK, TensorMapper, TensorVisitor, TensorZipper};

/// `#[derive(Tree)]`: see [`Tree`](trait@Tree) for its attributes and a worked example.
pub use burn_vmap_derive::Tree;

/// A pytree of Burn tensors on backend `B`.
///
/// Implemented for `Tensor<B, D, K>` (float, int and bool, any rank), tuples up to 8, arrays,
/// `Vec`, `Option`, `Box`, `BTreeMap<String, _>`, `()` and [`Static`], and
/// derived for structs with `#[derive(Tree)]`.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::Tree;
///
/// let device = Default::default();
/// let pair = (Tensor::<TestBackend, 1>::ones([3], &device), Tensor::<TestBackend, 2>::zeros([2, 2], &device));
/// let (leaves, def) = pair.flatten();
/// assert_eq!(leaves.len(), 2);
/// assert_eq!(def.leaf_paths("x"), vec!["x[0]", "x[1]"]);
/// let back: (Tensor<TestBackend, 1>, Tensor<TestBackend, 2>) = Tree::unflatten(&def, leaves).unwrap();
/// assert_eq!(back.1.dims(), [2, 2]);
/// ```
///
/// # Deriving `Tree`
///
/// `#[derive(Tree)]` (re-exported with the trait: `use burn_vmap::Tree` brings both) makes a
/// struct a tree whose leaves are its fields' leaves in declaration order, and whose paths are
/// its field names (`grads.layer1.weight`; tuple structs use `[0]`, `[1]`, ...).
///
/// - **Backend.** A type parameter bounded by `Backend` is the tree's backend
///   (`struct Mlp<B: Backend>` is a `Tree<B>`); `#[tree(backend = B)]` names it explicitly.
///   Without one, the struct is a tree on every backend its fields are trees on.
/// - **Generic leaves.** A field whose type mentions a type parameter gets a `Tree` bound, so
///   one struct can hold tensors in one place and accumulators (leaf-less trees) in another.
/// - **`#[tree(skip)]`**: the field is not part of the tree; rebuilt with `Default::default()`.
/// - **Rebuilding.** A derived struct rebuilds from any struct node with the same field names
///   (its type name is only reported in messages): the batched mirror of a struct (ranks one
///   higher) unflattens into the struct itself under [`vmap`](crate::vmap).
/// - **`#[tree(static)]`**: the field travels in the [`TreeDef`] as a static value, like
///   [`Static`]; it needs `Clone + PartialEq + Send + Sync + 'static` and is compared by value
///   where structures are compared.
///
/// # Example: per-example gradient clipping over a derived struct
///
/// The same generic struct describes one example's gradients (ranks 2 and 1) and a batch of
/// them (ranks 3 and 2). The clipping is written for one example: a visitor sums the squares of
/// every leaf (the global norm), a mapper scales every leaf; [`vmap`](crate::vmap) runs it on
/// the whole batch at once.
///
/// ```
/// use burn::tensor::{backend::Backend, Tensor};
/// use burn_vmap::tree::{TensorMapper, TensorVisitor};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{vmap, Tree, Vmap, VmapError};
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
/// type One<B> = Linear<Tensor<B, 2>, Tensor<B, 1>>;
/// type Batch<B> = Linear<Tensor<B, 3>, Tensor<B, 2>>;
///
/// /// Sum of the squares of every float leaf.
/// struct SumSquares<B: Backend>(Vec<Tensor<B, 1>>);
/// impl<B: Backend> TensorVisitor<B> for SumSquares<B> {
///     fn visit_float<const D: usize>(&mut self, _path: &str, t: &Tensor<B, D>) {
///         self.0.push(t.clone().powi_scalar(2).sum());
///     }
/// }
/// /// Multiplies every float leaf by a one-element tensor.
/// struct Scale<B: Backend>(Tensor<B, 1>);
/// impl<B: Backend> TensorMapper<B> for Scale<B> {
///     fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<B, D>) -> Tensor<B, D> {
///         t * self.0.clone().reshape([1; D])
///     }
/// }
///
/// /// Clips one example's gradients to a global norm of at most 1.
/// fn clip<B: Backend>(g: One<B>) -> One<B> {
///     let mut squares = SumSquares(Vec::new());
///     g.visit_tensors(&mut squares).expect("ranks <= 8");
///     let norm = Tensor::cat(squares.0, 0).sum().sqrt();
///     g.map_tensors(&mut Scale(norm.recip().clamp_max(1.0))).expect("ranks <= 8")
/// }
///
/// type B = Vmap<TestBackend>;
/// let device = Default::default();
/// // Two examples: the first has a global norm of 5, the second of 0.5.
/// let grads: Batch<B> = Linear {
///     weight: Tensor::from_floats([[[3.0, 0.0]], [[0.3, 0.0]]], &device),
///     bias: Tensor::from_floats([[4.0], [0.4]], &device),
///     name: "layer1".into(),
///     cache: Some(vec![1.0]),
/// };
/// assert_eq!(grads.leaf_paths("grads"), ["grads.weight", "grads.bias"]);
///
/// let clipped: Batch<B> = vmap(clip::<B>).call(grads.clone()).unwrap();
/// let w = clipped.weight.into_data().to_vec::<f32>().unwrap();
/// let b = clipped.bias.into_data().to_vec::<f32>().unwrap();
/// let close = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(x, y)| (x - y).abs() < 1e-5);
/// assert!(close(&w, &[0.6, 0.0, 0.3, 0.0]), "{w:?}"); // scaled by 1/5; unchanged
/// assert!(close(&b, &[0.8, 0.4]), "{b:?}");
/// assert_eq!((clipped.name.as_str(), clipped.cache), ("layer1", None));
///
/// // Rebuilding leaves into the wrong ranks names the path.
/// let (leaves, def) = grads.flatten();
/// let err = One::<B>::unflatten_named(&def, leaves, "args").unwrap_err();
/// assert!(matches!(&err, VmapError::LeafMismatch { path, .. } if path == "args.weight"), "{err}");
/// ```
///
/// # Example: one struct for outputs and for their accumulators
///
/// Accumulators are leaf-less trees, so a struct generic over its fields describes both a
/// function's outputs and how each field is accumulated:
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::{Concat, Sum};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{micro_vmap, Tree, Vmap};
///
/// #[derive(Tree, Clone)]
/// struct Stats<P, T> {
///     per_example: P,
///     total: T,
/// }
///
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], &Default::default());
/// let f = |x: Tensor<B, 1>| Stats { per_example: x.clone() * 2.0, total: x.sum() };
/// let out: Stats<Tensor<B, 2>, Tensor<B, 1>> = micro_vmap(f)
///     .microbatch_size(2)
///     .accumulator(Stats { per_example: Concat, total: Sum })
///     .call(xs)
///     .unwrap();
/// assert_eq!(out.per_example.dims(), [4, 2]);
/// assert_eq!(out.total.into_data().to_vec::<f32>().unwrap(), vec![36.0]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tree of tensors on backend `{B}`",
    label = "not a `Tree<{B}>`",
    note = "trees are tensors, tuples, arrays, `Vec`, `Option`, `Box`, `BTreeMap<String, _>`, \
            `Static<T>` and structs with `#[derive(Tree)]`; mark a struct field that is not a \
            tree `#[tree(static)]` (a value carried in the structure) or `#[tree(skip)]`"
)]
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

    /// Number of leaves, without consuming the tree (it is cloned; Burn tensors are
    /// reference-counted, so this copies no data).
    ///
    /// ```
    /// use burn::tensor::Tensor;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::{Static, Tree};
    /// let t = Tensor::<TestBackend, 1>::zeros([2], &Default::default());
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
    /// use burn::tensor::Tensor;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::Tree;
    /// let t = Tensor::<TestBackend, 1>::zeros([2], &Default::default());
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
    /// use burn::tensor::{backend::Backend, Tensor};
    /// use burn_vmap::tree::TensorMapper;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::Tree;
    ///
    /// struct Double;
    /// impl<B: Backend> TensorMapper<B> for Double {
    ///     fn map_float<const D: usize>(&mut self, _: &str, t: Tensor<B, D>) -> Tensor<B, D> {
    ///         t * 2.0
    ///     }
    /// }
    /// let t = Tensor::<TestBackend, 1>::from_floats([1.0, 2.0], &Default::default());
    /// let [a, b] = [t.clone(), t].map_tensors(&mut Double).unwrap();
    /// assert_eq!(b.into_data().to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    /// ```
    ///
    /// # Errors
    /// [`VmapError::UnsupportedRank`] for a leaf of rank above [`MAX_RANK`] (map such trees
    /// with [`map_leaves`](Tree::map_leaves)).
    fn map_tensors<M: TensorMapper<B>>(self, mapper: &mut M) -> Result<Self, VmapError> {
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
    /// use burn::tensor::{backend::Backend, Int, Tensor};
    /// use burn_vmap::tree::TensorVisitor;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::Tree;
    ///
    /// struct Ranks(Vec<(String, usize)>);
    /// impl<B: Backend> TensorVisitor<B> for Ranks {
    ///     fn visit_float<const D: usize>(&mut self, path: &str, _: &Tensor<B, D>) {
    ///         self.0.push((path.into(), D));
    ///     }
    ///     fn visit_int<const D: usize>(&mut self, path: &str, _: &Tensor<B, D, Int>) {
    ///         self.0.push((path.into(), D));
    ///     }
    /// }
    /// let device = Default::default();
    /// let tree = (Tensor::<TestBackend, 3>::zeros([1, 1, 1], &device), Tensor::<TestBackend, 1, Int>::zeros([2], &device));
    /// let mut ranks = Ranks(Vec::new());
    /// tree.visit_tensors(&mut ranks).unwrap();
    /// assert_eq!(ranks.0, [("[0]".to_string(), 3), ("[1]".to_string(), 1)]);
    /// ```
    ///
    /// # Errors
    /// [`VmapError::UnsupportedRank`] for a leaf of rank above [`MAX_RANK`]; then no leaf is
    /// visited.
    fn visit_tensors<V: TensorVisitor<B>>(&self, visitor: &mut V) -> Result<(), VmapError>
    where
        Self: Clone,
    {
        let (leaves, def) = self.clone().flatten();
        let paths = def.leaf_paths(ROOT);
        for (leaf, at) in leaves.iter().zip(&paths) {
            let rank = leaf.shape().num_dims();
            if rank > MAX_RANK {
                return Err(VmapError::UnsupportedRank {
                    path: at.clone(),
                    rank,
                    max: MAX_RANK,
                });
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
    /// use burn::tensor::{backend::Backend, Tensor};
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::tree::Leaf;
    /// use burn_vmap::Tree;
    /// type B = TestBackend;
    /// let t = Tensor::<B, 1>::from_floats([1.0, -2.0], &Default::default());
    /// let (neg,) = (t,).map_leaves(|_, leaf| leaf.map(
    ///     |f| Tensor::<B, 1>::from_primitive(f).neg().into_primitive(),
    ///     |i| i,
    ///     |b| b,
    /// )).unwrap();
    /// assert_eq!(neg.into_data().to_vec::<f32>().unwrap(), vec![-1.0, 2.0]);
    /// ```
    ///
    /// # Errors
    /// [`VmapError::LeafMismatch`] naming the path when a returned leaf's kind or rank does not
    /// fit `Self`.
    fn map_leaves(self, mut f: impl FnMut(&str, Leaf<B>) -> Leaf<B>) -> Result<Self, VmapError> {
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
    /// use burn::tensor::{backend::Backend, Tensor};
    /// use burn_vmap::tree::TensorZipper;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::Tree;
    ///
    /// /// `a + lr * b`, as an SGD step on a tree of parameters and a tree of gradients.
    /// struct Axpy(f32);
    /// impl<B: Backend> TensorZipper<B> for Axpy {
    ///     fn zip_float<const D: usize>(&mut self, _: &str, a: Tensor<B, D>, b: Tensor<B, D>) -> Tensor<B, D> {
    ///         a + b * self.0
    ///     }
    /// }
    /// let device = Default::default();
    /// let params = vec![Tensor::<TestBackend, 1>::from_floats([1.0, 1.0], &device)];
    /// let grads = vec![Tensor::<TestBackend, 1>::from_floats([2.0, 4.0], &device)];
    /// let stepped = params.clone().zip_map(grads, &mut Axpy(-0.5)).unwrap();
    /// assert_eq!(stepped[0].clone().into_data().to_vec::<f32>().unwrap(), vec![0.0, -1.0]);
    ///
    /// // Different structures are an error naming where they differ.
    /// let err = params.zip_map(Vec::<Tensor<TestBackend, 1>>::new(), &mut Axpy(1.0)).unwrap_err();
    /// assert!(err.to_string().contains("zip_map"), "{err}");
    /// ```
    ///
    /// # Errors
    /// - [`VmapError::TreeMismatch`] naming the first path where the structures differ, or
    ///   where the two tensors differ in kind or rank;
    /// - [`VmapError::UnsupportedRank`] for a leaf of rank above [`MAX_RANK`].
    fn zip_map<U: Tree<B>, Z: TensorZipper<B>>(
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
