//! Tree norms: the global L2 norm of a tree, scaling, and optax's per-example clipping.
//!
//! These are ordinary Burn code over a tree's float leaves. Used in a `transform_fn` or
//! `metrics_fn` they are recorded for one example and run on the batched per-example
//! gradients; there each leaf's squared norm is `sum(g * g)` (the elementwise square of a
//! factored weight gradient, whose sum the engine takes from the factors) and the scaling
//! multiplies by a per-example factor (which scales one factor), so clipping never builds a
//! dense layer's `batch × d_in × d_out` gradient.

use burn::tensor::{Bool, Tensor};
use burn_backend::TensorMetadata;
use burn_backend::ops::{BoolTensorOps, FloatTensorOps};
use burn_dispatch::{Dispatch, DispatchTensor};

use crate::tree::{Leaf, Tree};

/// The squares of `t` summed: a one-element tensor.
fn sum_squares(t: DispatchTensor) -> Tensor<1> {
    let sum = Dispatch::float_sum(Dispatch::float_mul(t.clone(), t));
    let sum = Dispatch::float_reshape(sum, [1].into());
    Tensor::from_dispatch(sum)
}

/// `t` times the one-element `factor`, broadcast over every element.
fn scale(t: DispatchTensor, factor: &Tensor<1>) -> DispatchTensor {
    let rank = t.shape().num_dims();
    let f = Dispatch::float_reshape(factor.clone().into_dispatch(), vec![1; rank].into());
    Dispatch::float_mul(t, f)
}

/// The global L2 norm of every float leaf of a tree, as a one-element tensor:
/// `sqrt(sum over leaves and elements of x²)`. In a `transform_fn` or `metrics_fn`, the
/// per-example norm.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::global_norm;
/// let d = Device::default();
/// let t = (Tensor::<1>::from_floats([3.0], &d), Tensor::<2>::from_floats([[4.0]], &d));
/// assert_eq!(global_norm(&t).into_data().to_vec::<f32>().unwrap(), vec![5.0]);
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn global_norm<T: Tree + Clone>(tree: &T) -> Tensor<1> {
    squared_global_norm(tree).sqrt()
}

/// The sum over every float leaf and element of `x²`.
fn squared_global_norm<T: Tree + Clone>(tree: &T) -> Tensor<1> {
    let (leaves, _) = tree.clone().flatten();
    let squares: Vec<Tensor<1>> = leaves
        .into_iter()
        .filter(|leaf| leaf.kind_name() == "float")
        .map(|leaf| sum_squares(leaf.into_dispatch()))
        .collect();
    assert!(
        !squares.is_empty(),
        "global_norm: the tree has no float leaf"
    );
    sum_all(squares)
}

/// The sum of one-element tensors, added one by one: `n - 1` kernels on a GPU, where a
/// concatenation and a sum take `n + 1` (burn-cubecl 0.22.1 concatenates with a `slice_assign`
/// an input), and an elementwise chain that Burn's fusion can make one.
fn sum_all(parts: Vec<Tensor<1>>) -> Tensor<1> {
    parts
        .into_iter()
        .reduce(|a, b| a + b)
        .expect("at least one part")
}

/// Scales every float leaf of `tree` by the one-element tensor `factor`.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::micro::scale_tree;
/// let d = Device::default();
/// let t = scale_tree(Tensor::<1>::from_floats([1.0, 2.0], &d), Tensor::from_floats([3.0], &d));
/// assert_eq!(t.into_data().to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
/// ```
pub fn scale_tree<T: Tree>(tree: T, factor: Tensor<1>) -> T {
    let (leaves, def) = tree.flatten();
    let leaves = leaves
        .into_iter()
        .map(|leaf| match leaf.kind_name() {
            "float" => Leaf(scale(leaf.into_dispatch(), &factor)),
            _ => leaf,
        })
        .collect();
    T::unflatten(&def, leaves).expect("the same tree rebuilds")
}

/// optax's per-example clipping: scales `tree` by `max_norm / max(norm, max_norm)`, so its
/// global L2 norm is at most `max_norm` (unchanged when already within). Written for one
/// example; in a `transform_fn` it clips every example independently.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::clip_by_global_norm;
/// let g = Tensor::<1>::from_floats([3.0, 4.0], &Device::default());
/// let c = clip_by_global_norm(g, 1.0).into_data().to_vec::<f32>().unwrap();
/// assert!((c[0] - 0.6).abs() < 1e-6 && (c[1] - 0.8).abs() < 1e-6, "{c:?}");
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn clip_by_global_norm<T: Tree + Clone>(tree: T, max_norm: f64) -> T {
    let factor = if max_norm > 0.0 {
        // `max_norm / max(√s, max_norm)` as `max(s, max_norm²)^(-1/2) · max_norm`: two kernels
        // on a GPU where a square root, a clamp and a reciprocal take three (the product by a
        // `max_norm` of 1 takes none).
        squared_global_norm(&tree)
            .clamp_min(max_norm * max_norm)
            .powf_scalar(-0.5)
            * max_norm
    } else {
        global_norm(&tree).clamp_min(max_norm).recip() * max_norm
    };
    scale_tree(tree, factor)
}

/// [`clip_by_global_norm`] that also zeroes a tree holding a NaN or an infinity, so one bad
/// example cannot make a clipped sum non-finite: the tree is scaled as `clip_by_global_norm`
/// scales it when its global norm is finite, and replaced by zeros when it is not (a NaN or an
/// infinity anywhere in it, or squares that overflow `f32`). Pair it with [`non_finite`] as
/// `metrics_fn` to count the zeroed examples.
///
/// **The default, [`clip_by_global_norm`], keeps optax's semantics**: a non-finite gradient
/// stays non-finite, and so does every sum it enters (a loud failure rather than a silently
/// dropped example). Choose this one when the training loop should go on without the bad
/// examples, and watch the count. Zeroing the values of a dense layer's per-example weight
/// gradient multiplies out its factored form (a `B × d_in × d_out` tensor per layer, where
/// `clip_by_global_norm` never builds it).
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::micro::clip_by_global_norm_finite;
/// let d = Device::default();
/// let g = Tensor::<1>::from_floats([3.0, 4.0], &d);
/// let c = clip_by_global_norm_finite(g, 1.0).into_data().to_vec::<f32>().unwrap();
/// assert!((c[0] - 0.6).abs() < 1e-6 && (c[1] - 0.8).abs() < 1e-6, "{c:?}");
/// let bad = Tensor::<1>::from_floats([f32::NAN, 4.0], &d);
/// let c = clip_by_global_norm_finite(bad, 1.0);
/// assert_eq!(c.into_data().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn clip_by_global_norm_finite<T: Tree + Clone>(tree: T, max_norm: f64) -> T {
    let norm = global_norm(&tree);
    let bad = not_finite(norm.clone());
    let factor = (norm.clamp_min(max_norm).recip() * max_norm).mask_fill(bad.clone(), 0.0);
    let (leaves, def) = scale_tree(tree, factor).flatten();
    let bad = bad.into_dispatch();
    let leaves = leaves
        .into_iter()
        .map(|leaf| {
            if leaf.kind_name() != "float" {
                return leaf;
            }
            // NaN · 0 is NaN: the values themselves are replaced.
            let t = leaf.into_dispatch();
            let shape = t.shape();
            let mask = Dispatch::bool_reshape(bad.clone(), vec![1; shape.num_dims()].into());
            let mask = Dispatch::bool_expand(mask, shape);
            Leaf(Dispatch::float_mask_fill(t, mask, 0.0.into()))
        })
        .collect();
    T::unflatten(&def, leaves).expect("the same tree rebuilds")
}

/// `[1.0]` when `tree` holds a NaN or an infinity (its global norm is not finite), else
/// `[0.0]`. As a `metrics_fn`, the sum of `MicroAux::metrics` counts the examples that
/// [`clip_by_global_norm_finite`] zeroed.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::micro::non_finite;
/// let d = Device::default();
/// let flag = |v: [f32; 2]| non_finite(&Tensor::<1>::from_floats(v, &d)).into_data().to_vec::<f32>().unwrap();
/// assert_eq!(flag([1.0, f32::INFINITY]), vec![1.0]);
/// assert_eq!(flag([1.0, 2.0]), vec![0.0]);
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn non_finite<T: Tree + Clone>(tree: &T) -> Tensor<1> {
    not_finite(global_norm(tree)).float()
}

/// Where `t` is NaN or infinite.
fn not_finite(t: Tensor<1>) -> Tensor<1, Bool> {
    t.clone().is_nan().bool_or(t.is_inf())
}
