//! Views and shape ops: reshape, permute, swap_dims, flip, expand, slice, pad, cat.

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use super::constant;
use super::helpers::{batch_axes, batch_slices};
use crate::physical::{Kind, with_batch_sizes};
use crate::tensor::VmapTensor;

/// `reshape` of the logical dims. Unbatched: the backend's reshape (skipped when the shape does
/// not change). Batched: recorded as a pending reshape of the physical tensor (see
/// [`VmapTensor`]'s "Pending reshapes"), run when a rule reads the tensor; rules that fold
/// leading dims into rows read the data as it is, with no copy (except where
/// [`compat::reshapes_at_once`](crate::compat::reshapes_at_once)). A rank-0 result is held as
/// `[batch sizes.., 1]`, so no backend is asked for a rank-0 tensor.
pub(crate) fn reshape<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    shape: Shape,
) -> VmapTensor<K::P> {
    let t = match constant::at_shape(t, &shape) {
        Ok(folded) => return folded,
        Err(t) => t,
    };
    let scalar = shape.num_dims() == 0;
    let phys = with_batch_sizes(&t.bdims, &shape);
    // The same elements: the same value (`Origin`), unless a factored product is multiplied out.
    let origin = (!t.is_factored()).then(|| t.origin());
    let keep = |out: VmapTensor<K::P>| match origin {
        Some(origin) => out.with_origin(origin),
        None => out,
    };
    if t.bdims.is_empty() {
        let current = t.physical_shape();
        let (inner, bdims) = t.into_parts();
        // Already that shape: some backends copy on every reshape (see `compat`).
        let inner = if current == phys {
            inner
        } else {
            K::reshape(inner, phys)
        };
        return keep(VmapTensor::new(inner, bdims).with_scalar(scalar));
    }
    let (data, _, bdims) = t.into_stored();
    if crate::compat::reshapes_at_once::<B>(&data.device()) {
        return keep(VmapTensor::new(K::reshape(data, phys), bdims).with_scalar(scalar));
    }
    keep(VmapTensor::reshaped(data, bdims, phys, K::reshape).with_scalar(scalar))
}

pub(crate) fn permute<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    axes: &[usize],
) -> VmapTensor<K::P> {
    if axes.is_empty() {
        // Rank 0: nothing to permute (its physical unit dim is not a logical dim).
        return t;
    }
    if t.bdims.is_empty() {
        return t.map(|inner| K::permute(inner, axes));
    }
    let axes = batch_axes(&t.bdims, axes);
    t.map(|inner| K::permute(inner, &axes))
}

pub(crate) fn swap_dims<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    dim1: usize,
    dim2: usize,
    f: impl FnOnce(K::P, usize, usize) -> K::P,
) -> VmapTensor<K::P> {
    let nb = t.bdims.len();
    t.map(|inner| f(inner, dim1 + nb, dim2 + nb))
}

pub(crate) fn flip<P: Clone>(
    t: VmapTensor<P>,
    axes: &[usize],
    f: impl FnOnce(P, &[usize]) -> P,
) -> VmapTensor<P> {
    if t.bdims.is_empty() {
        return t.map(|inner| f(inner, axes));
    }
    let nb = t.bdims.len();
    let axes: Vec<usize> = axes.iter().map(|a| a + nb).collect();
    t.map(|inner| f(inner, &axes))
}

/// `expand` to a logical shape that may add leading dims: the new dims go after the batch dims.
/// A rank-0 tensor (held as `[.., 1]`) expands like a `[1]` tensor.
pub(crate) fn expand<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    shape: Shape,
) -> VmapTensor<K::P> {
    if shape.num_dims() == 0 {
        // Only a rank-0 tensor expands to rank 0: nothing to do.
        return t;
    }
    let t = match constant::at_shape(t, &shape) {
        Ok(folded) => return folded,
        Err(t) => t,
    };
    if t.bdims.is_empty() {
        return t.map(|inner| K::expand(inner, shape)).with_scalar(false);
    }
    let nb = t.bdims.len();
    let phys = t.physical_shape();
    let logical_rank = phys.num_dims() - nb;
    let target_rank = shape.num_dims();
    let (mut inner, bdims) = t.into_parts();
    if target_rank > logical_rank {
        let padded: Shape = bdims
            .sizes()
            .chain(core::iter::repeat_n(1, target_rank - logical_rank))
            .chain(phys[nb..].iter().copied())
            .collect();
        inner = K::reshape(inner, padded);
    }
    let target = with_batch_sizes(&bdims, &shape);
    VmapTensor::new(K::expand(inner, target), bdims)
}

pub(crate) fn slice<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    slices: &[Slice],
) -> VmapTensor<K::P> {
    if t.bdims.is_empty() {
        return t.map(|inner| K::slice(inner, slices));
    }
    let slices = batch_slices(&t.bdims, slices);
    t.map(|inner| K::slice(inner, &slices))
}

/// `pad(tensor, padding)` (one `(before, after)` pair per logical dim, any mode): the batch dims
/// get `(0, 0)`, one inner pad. Padding never mixes examples (a reflection stays inside its
/// example's dims).
pub(crate) fn pad<P: Clone>(
    t: VmapTensor<P>,
    padding: &[(usize, usize)],
    f: impl FnOnce(P, &[(usize, usize)]) -> P,
) -> VmapTensor<P> {
    if t.bdims.is_empty() {
        return t.map(|inner| f(inner, padding));
    }
    let full: Vec<(usize, usize)> = t
        .bdims
        .sizes()
        .map(|_| (0, 0))
        .chain(padding.iter().copied())
        .collect();
    t.map(|inner| f(inner, &full))
}

/// `cat(tensors, dim)`: batch dims are materialized over their union, then one inner `cat`; of
/// one tensor, that tensor (no copy).
pub(crate) fn cat<B: Backend, K: Kind<B>>(
    mut tensors: Vec<VmapTensor<K::P>>,
    dim: usize,
    f: impl FnOnce(Vec<K::P>, usize) -> K::P,
) -> VmapTensor<K::P> {
    if tensors.len() == 1 {
        return tensors.pop().expect("one tensor");
    }
    let bdims = crate::tensor::BatchDims::union(tensors.iter().map(|t| &t.bdims));
    if bdims.is_empty() {
        return VmapTensor::unbatched(f(tensors.into_iter().map(|t| t.inner()).collect(), dim));
    }
    let inners = tensors
        .into_iter()
        .map(|t| super::helpers::materialize::<B, K>(t, &bdims))
        .collect();
    let nb = bdims.len();
    VmapTensor::new(f(inners, dim + nb), bdims)
}
