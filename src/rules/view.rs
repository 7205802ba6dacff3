//! Views and shape ops: reshape, permute, swap_dims, flip, expand, slice.

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use super::helpers::{batch_axes, batch_slices, with_batch_sizes, Kind};
use crate::tensor::VmapTensor;

pub(crate) fn reshape<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    shape: Shape,
) -> VmapTensor<K::P> {
    if t.bdims.is_empty() {
        // An unbatched rank-0 result (a scalar loss's gradient, a reduced accumulator): NdArray
        // cannot reshape to rank 0 (see `Kind::to_rank0`).
        let inner = if shape.num_dims() == 0 && t.inner.shape().num_dims() > 0 {
            K::to_rank0(t.inner)
        } else if t.inner.shape() == shape {
            // Already that shape: some backends (burn-ndarray 0.21) copy on every reshape.
            t.inner
        } else {
            K::reshape(t.inner, shape)
        };
        return VmapTensor {
            inner,
            bdims: t.bdims,
        };
    }
    let phys = with_batch_sizes(&t.bdims, &shape);
    if t.inner.shape() == phys {
        // Already that shape: some backends (burn-ndarray 0.21) copy on every reshape.
        return t;
    }
    VmapTensor {
        inner: K::reshape(t.inner, phys),
        bdims: t.bdims,
    }
}

pub(crate) fn permute<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    axes: &[usize],
) -> VmapTensor<K::P> {
    if t.bdims.is_empty() {
        return VmapTensor {
            inner: K::permute(t.inner, axes),
            bdims: t.bdims,
        };
    }
    let axes = batch_axes(&t.bdims, axes);
    VmapTensor {
        inner: K::permute(t.inner, &axes),
        bdims: t.bdims,
    }
}

pub(crate) fn swap_dims<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    dim1: usize,
    dim2: usize,
    f: impl FnOnce(K::P, usize, usize) -> K::P,
) -> VmapTensor<K::P> {
    let nb = t.bdims.len();
    VmapTensor {
        inner: f(t.inner, dim1 + nb, dim2 + nb),
        bdims: t.bdims,
    }
}

pub(crate) fn flip<P>(
    t: VmapTensor<P>,
    axes: &[usize],
    f: impl FnOnce(P, &[usize]) -> P,
) -> VmapTensor<P> {
    if t.bdims.is_empty() {
        return VmapTensor {
            inner: f(t.inner, axes),
            bdims: t.bdims,
        };
    }
    let nb = t.bdims.len();
    let axes: Vec<usize> = axes.iter().map(|a| a + nb).collect();
    VmapTensor {
        inner: f(t.inner, &axes),
        bdims: t.bdims,
    }
}

/// `expand` to a logical shape that may add leading dims: the new dims go after the batch dims.
pub(crate) fn expand<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    shape: Shape,
) -> VmapTensor<K::P> {
    if t.bdims.is_empty() {
        return VmapTensor {
            inner: K::expand(t.inner, shape),
            bdims: t.bdims,
        };
    }
    let nb = t.bdims.len();
    let phys = t.inner.shape();
    let logical_rank = phys.num_dims() - nb;
    let target_rank = shape.num_dims();
    let mut inner = t.inner;
    if target_rank > logical_rank {
        let padded: Shape = t
            .bdims
            .sizes()
            .chain(core::iter::repeat_n(1, target_rank - logical_rank))
            .chain(phys[nb..].iter().copied())
            .collect();
        inner = K::reshape(inner, padded);
    }
    let target = with_batch_sizes(&t.bdims, &shape);
    VmapTensor {
        inner: K::expand(inner, target),
        bdims: t.bdims,
    }
}

pub(crate) fn slice<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    slices: &[Slice],
) -> VmapTensor<K::P> {
    if t.bdims.is_empty() {
        return VmapTensor {
            inner: K::slice(t.inner, slices),
            bdims: t.bdims,
        };
    }
    let slices = batch_slices(&t.bdims, slices);
    VmapTensor {
        inner: K::slice(t.inner, &slices),
        bdims: t.bdims,
    }
}

/// `cat(tensors, dim)`: batch dims are materialized over their union, then one inner `cat`.
pub(crate) fn cat<B: Backend, K: Kind<B>>(
    tensors: Vec<VmapTensor<K::P>>,
    dim: usize,
    f: impl FnOnce(Vec<K::P>, usize) -> K::P,
) -> VmapTensor<K::P> {
    let bdims = crate::tensor::BatchDims::union(tensors.iter().map(|t| &t.bdims));
    if bdims.is_empty() {
        return VmapTensor::unbatched(f(tensors.into_iter().map(|t| t.inner).collect(), dim));
    }
    let inners = tensors
        .into_iter()
        .map(|t| super::helpers::materialize::<B, K>(t, &bdims))
        .collect();
    let nb = bdims.len();
    VmapTensor {
        inner: f(inners, dim + nb),
        bdims,
    }
}
