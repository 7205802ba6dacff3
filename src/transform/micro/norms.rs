//! Tree norms: the global L2 norm of a tree, scaling, and optax's per-example clipping.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::backend::Backend;
use burn_backend::TensorMetadata;

use crate::tree::{Leaf, Tree};

/// The global L2 norm of every float leaf of a tree, as a one-element tensor:
/// `sqrt(sum over leaves and elements of x²)`. Under `vmap` (in a `transform_fn`), the
/// per-example norm.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::global_norm;
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
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::micro::scale_tree;
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
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::clip_by_global_norm;
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
