//! Tree norms: the global L2 norm of a tree, scaling, and optax's per-example clipping.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::TensorMetadata;
use burn_backend::backend::Backend;

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

/// [`clip_by_global_norm`] that also zeroes a tree holding a NaN or an infinity, so one bad
/// example cannot make a clipped sum non-finite: the tree is scaled as
/// `clip_by_global_norm` scales it when its global norm is finite, and replaced by zeros when
/// it is not (a NaN or an infinity anywhere in it, or squares that overflow `f32`). Pair it with
/// [`non_finite`] as `metrics_fn` to count the zeroed examples.
///
/// **The default, [`clip_by_global_norm`], keeps optax's semantics**: a non-finite gradient
/// stays non-finite, and so does every sum it enters (a loud failure rather than a silently
/// dropped example). Choose this one when the training loop should go on without the bad
/// examples, and watch the count. Zeroing the values of a dense layer's per-example weight
/// gradient multiplies out its factored form (a `B × d_in × d_out` tensor per layer, where
/// `clip_by_global_norm` never builds it).
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::micro::clip_by_global_norm_finite;
/// let d = Default::default();
/// let g = Tensor::<TestBackend, 1>::from_floats([3.0, 4.0], &d);
/// let c = clip_by_global_norm_finite(g, 1.0);
/// assert_eq!(c.into_data().to_vec::<f32>().unwrap(), vec![0.6, 0.8]);
/// let bad = Tensor::<TestBackend, 1>::from_floats([f32::NAN, 4.0], &d);
/// let c = clip_by_global_norm_finite(bad, 1.0);
/// assert_eq!(c.into_data().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
/// ```
pub fn clip_by_global_norm_finite<B: Backend, T: Tree<B> + Clone>(tree: T, max_norm: f64) -> T {
    let norm = global_norm(&tree);
    let bad = not_finite(norm.clone());
    let factor = (norm.clamp_min(max_norm).recip() * max_norm).mask_fill(bad.clone(), 0.0);
    let (leaves, def) = scale_tree(tree, factor).flatten();
    let bad = bad.into_primitive();
    let leaves = leaves
        .into_iter()
        .map(|leaf| match leaf {
            Leaf::Float(t) => {
                // NaN · 0 is NaN: the values themselves are replaced.
                let t = t.tensor();
                let shape = t.shape();
                let mask = B::bool_reshape(bad.clone(), vec![1; shape.num_dims()].into());
                let mask = B::bool_expand(mask, shape);
                Leaf::Float(TensorPrimitive::Float(B::float_mask_fill(
                    t,
                    mask,
                    0.0.into(),
                )))
            }
            other => other,
        })
        .collect();
    T::unflatten(&def, leaves).expect("the same tree rebuilds")
}

/// `[1.0]` when `tree` holds a NaN or an infinity (its global norm is not finite), else
/// `[0.0]`. As a `metrics_fn`, the sum of `MicroAux::metrics` counts the examples that
/// [`clip_by_global_norm_finite`] zeroed.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::micro::non_finite;
/// let d = Default::default();
/// assert_eq!(non_finite(&Tensor::<TestBackend, 1>::from_floats([1.0, f32::INFINITY], &d)).into_scalar(), 1.0);
/// assert_eq!(non_finite(&Tensor::<TestBackend, 1>::from_floats([1.0, 2.0], &d)).into_scalar(), 0.0);
/// ```
pub fn non_finite<B: Backend, T: Tree<B> + Clone>(tree: &T) -> Tensor<B, 1> {
    not_finite(global_norm(tree)).float()
}

/// Where `t` is NaN or infinite.
fn not_finite<B: Backend>(t: Tensor<B, 1>) -> Tensor<B, 1, burn::tensor::Bool> {
    t.clone().is_nan().bool_or(t.is_inf())
}
