//! Reductions and scans (JAX's `defreducer`): the logical dim moves past the batch dims.

use burn_backend::backend::Backend;
use burn_backend::{Scalar, Shape, TensorMetadata};

use super::helpers::{physical_dim, reduce_unless_unit};
use crate::compat::{self, kernel_layout};
use crate::physical::{Float, Int, Kind};
use crate::tensor::VmapTensor;

/// An op along one logical dim (`sum_dim`, `argmax`, `cumsum`, `unfold`, ...).
#[inline]
pub(crate) fn along_dim<P: Clone, Q>(
    t: VmapTensor<P>,
    dim: usize,
    f: impl FnOnce(P, usize) -> Q,
) -> VmapTensor<Q> {
    let pdim = physical_dim(&t.bdims, dim);
    t.map(|inner| f(inner, pdim))
}

/// A reduction, scan or sort along one logical dim (`sum_dim`, `argmax`, `cumsum`, `sort`,
/// ...): as [`along_dim`], with the input laid out for the backend's kernels first (see
/// [`kernel_layout`]).
///
/// Unbatched inputs too: a program recorded with a `vmap` inside (nesting) holds the inner
/// level's physical ops, permuted views included, recorded on the capture backend where no
/// workaround applies; replayed on a cubecl backend with that operand unbatched at the outer
/// level, they reach this path (found by the loop oracle on wgpu: a `max_dim` over an operand
/// mapped on its last axis at two inner levels and not at the outer one took each row's last
/// element).
#[inline]
pub(crate) fn reduce_dim<B: Backend, K: Kind<B>, Q>(
    t: VmapTensor<K::P>,
    dim: usize,
    f: impl FnOnce(K::P, usize) -> Q,
) -> VmapTensor<Q> {
    let pdim = physical_dim(&t.bdims, dim);
    t.map(|inner| f(kernel_layout::<B, K>(inner), pdim))
}

/// A top-k along logical `dim` (`f(t, dim)`), as [`reduce_dim`], run along the last dim on the
/// backends that need it ([`compat::topk_dim`](crate::compat::topk_dim)); its result of kind `O`.
pub(crate) fn topk<B: Backend, K: Kind<B>, O: Kind<B>>(
    t: VmapTensor<K::P>,
    dim: usize,
    f: impl FnOnce(K::P, usize) -> O::P,
) -> VmapTensor<O::P> {
    reduce_dim::<B, K, _>(t, dim, |t, d| {
        let (t, used) = compat::topk_dim::<B, K>(t, d);
        compat::topk_back::<B, O>(f(t, used), d, used)
    })
}

/// [`topk`] with two results (`topk_with_indices`): values of kind `K`, indices.
pub(crate) fn topk_pair<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    dim: usize,
    f: impl FnOnce(K::P, usize) -> (K::P, <Int as Kind<B>>::P),
) -> (VmapTensor<K::P>, VmapTensor<<Int as Kind<B>>::P>)
where
    K::P: Clone,
{
    reduce_dim_pair::<B, K, _, _>(t, dim, |t, d| {
        let (t, used) = compat::topk_dim::<B, K>(t, d);
        let (values, indices) = f(t, used);
        (
            compat::topk_back::<B, K>(values, d, used),
            compat::topk_back::<B, Int>(indices, d, used),
        )
    })
}

/// An op along one logical dim with two results of the input's batch dims (`sort_with_indices`,
/// `topk_with_indices`), as [`reduce_dim`].
pub(crate) fn reduce_dim_pair<B: Backend, K: Kind<B>, Q: Clone, R: Clone>(
    t: VmapTensor<K::P>,
    dim: usize,
    f: impl FnOnce(K::P, usize) -> (Q, R),
) -> (VmapTensor<Q>, VmapTensor<R>) {
    let bdims = t.bdims.clone();
    let scalar = t.is_scalar();
    let (a, b) = reduce_dim::<B, K, _>(t, dim, f).inner();
    (
        VmapTensor::new(a, bdims.clone()).with_scalar(scalar),
        VmapTensor::new(b, bdims).with_scalar(scalar),
    )
}

/// `float_sum_dims(t, dims)`: one inner op over the dims moved past the batch dims; with an
/// empty dim among them, one dim at a time (a sum over no element is 0 on every backend: see
/// [`reduce_dim_or`]).
pub(crate) fn sum_dims<B: Backend>(
    t: VmapTensor<B::FloatTensorPrimitive>,
    dims: &[usize],
) -> VmapTensor<B::FloatTensorPrimitive> {
    let physical = t.physical_shape();
    let pdims: Vec<usize> = dims.iter().map(|&d| physical_dim(&t.bdims, d)).collect();
    if pdims.iter().any(|&d| physical[d] == 0) {
        return dims.iter().fold(t, |t, &d| {
            reduce_dim_or::<B, Float>(t, d, B::float_sum_dim, 0.0)
        });
    }
    t.map(|inner| B::float_sum_dims(kernel_layout::<B, Float>(inner), &pdims))
}

/// A reduction with a value over no element (a sum's 0, a product's 1, a float mean's NaN)
/// along one logical dim: an empty dim gives that value on every backend (some refuse to
/// reduce a zero-length axis: see [`crate::compat`]), a dim of one element gives the tensor
/// itself (the identity, without a launch), otherwise as [`reduce_dim`].
pub(crate) fn reduce_dim_or<B: Backend, K: Fill<B>>(
    t: VmapTensor<K::P>,
    dim: usize,
    f: impl FnOnce(K::P, usize) -> K::P,
    empty: f64,
) -> VmapTensor<K::P> {
    let pdim = physical_dim(&t.bdims, dim);
    let physical = t.physical_shape();
    // Over one element a sum, a product and a mean are that element, exactly: no kernel.
    if physical[pdim] == 1 {
        return t;
    }
    if physical[pdim] != 0 {
        return reduce_dim::<B, K, _>(t, dim, f);
    }
    let mut out = physical.to_vec();
    out[pdim] = 1;
    let (inner, bdims) = t.into_parts();
    VmapTensor::new(K::fill(Shape::from(out), empty, &inner), bdims)
}

/// Tensor kinds with a filled constructor, for reductions over no element.
pub(crate) trait Fill<B: Backend>: Kind<B> {
    /// A tensor of `shape` filled with `value`, with the dtype and device of `like`.
    fn fill(shape: Shape, value: f64, like: &Self::P) -> Self::P;
}

impl<B: Backend> Fill<B> for Float {
    fn fill(shape: Shape, value: f64, like: &Self::P) -> Self::P {
        B::float_full(
            shape,
            Scalar::Float(value),
            &like.device(),
            like.dtype().into(),
        )
    }
}

impl<B: Backend> Fill<B> for Int {
    fn fill(shape: Shape, value: f64, like: &Self::P) -> Self::P {
        B::int_full(
            shape,
            Scalar::Int(value as i64),
            &like.device(),
            like.dtype().into(),
        )
    }
}

/// A reduction over all logical elements (`sum`, `prod`), given as its `*_dim` op: each example
/// is flattened and reduced along one dim, giving the logical shape `[1]`. With no element per
/// example the result is `empty` (see [`reduce_dim_or`]).
pub(crate) fn all<B: Backend, K: Fill<B>>(
    t: VmapTensor<K::P>,
    full: impl FnOnce(K::P) -> K::P,
    along: impl Fn(K::P, usize) -> K::P,
    empty: f64,
) -> VmapTensor<K::P> {
    if t.shape().num_elements() == 0 {
        let out = crate::physical::with_batch_sizes(&t.bdims, &[1]);
        let (inner, bdims) = t.into_parts();
        return VmapTensor::new(K::fill(out, empty, &inner), bdims);
    }
    if t.bdims.is_empty() {
        // A rank-0 input (held as `[1]`) gives `[1]` like any other.
        return t
            .map(|inner| full(kernel_layout::<B, K>(inner)))
            .with_scalar(false);
    }
    let nb = t.bdims.len();
    let shape = t.physical_shape();
    let rank = shape.num_dims();
    let flat: Shape = t.bdims.sizes().chain([1]).collect();
    let (inner, bdims) = t.into_parts();
    let inner = kernel_layout::<B, K>(inner);
    // A batched rank-0 tensor is `[.., 1]` (one element per example): the one-dim case.
    let reduced = if rank == nb + 1 {
        along(inner, nb)
    } else {
        // One logical dim at a time from the last, then reshape the small result: no copy of
        // the full tensor (some backends copy on every reshape: see `compat`). Valid for every
        // reduction `all` serves (sum, mean, prod, max, min, any, all), each the identity over
        // a dim of size 1.
        let reduced = (nb..rank)
            .rev()
            .fold(inner, |t, d| reduce_unless_unit(t, d, &along));
        K::reshape(reduced, flat)
    };
    VmapTensor::new(reduced, bdims)
}
