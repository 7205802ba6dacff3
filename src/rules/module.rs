//! Batching for module ops (conv, pool, interpolate, attention) whose first dim is the batch `N`:
//! the vmap batch dims fold into `N`, so a batched input with unbatched weights runs as one
//! large op (`[b.., N, ...] -> [b*...*N, ...]`), not a loop.

use burn_backend::backend::Backend;
use burn_backend::{Shape, TensorMetadata};

use super::helpers::{materialize, with_batch_sizes, Kind};
use crate::tensor::{BatchDims, VmapTensor};

/// `[b.., N, rest..] -> [b*..*N, rest..]`.
pub(crate) fn fold_n<B: Backend, K: Kind<B>>(t: K::P, bdims: &BatchDims) -> K::P {
    let shape = t.shape();
    let nb = bdims.len();
    let dims: Shape = core::iter::once(shape[..=nb].iter().product())
        .chain(shape[nb + 1..].iter().copied())
        .collect();
    K::reshape(t, dims)
}

/// `[b*..*N, rest..] -> [b.., N, rest..]`.
pub(crate) fn unfold_n<B: Backend, K: Kind<B>>(t: K::P, bdims: &BatchDims) -> K::P {
    let shape = t.shape();
    let n = shape[0] / bdims.num_examples().max(1);
    let mut logical = vec![n];
    logical.extend_from_slice(&shape[1..]);
    K::reshape(t, with_batch_sizes(bdims, &logical))
}

/// Materializes `t` over `bdims` and folds them into `N`; unbatched `bdims` leave `t` as is.
pub(crate) fn fold_to<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, bdims: &BatchDims) -> K::P {
    if bdims.is_empty() {
        return t.inner;
    }
    fold_n::<B, K>(materialize::<B, K>(t, bdims), bdims)
}

/// Runs `f` on operands whose batch dims are folded into `N` (materialized over their union);
/// returns the union batch dims with the folded operands. With no batched operand, `f` runs
/// on the inner tensors directly.
pub(crate) fn fold_all<B: Backend, K: Kind<B>, const N: usize>(
    xs: [VmapTensor<K::P>; N],
) -> (BatchDims, [K::P; N]) {
    let bdims = BatchDims::union(xs.iter().map(|x| &x.bdims));
    if bdims.is_empty() {
        return (bdims, xs.map(|x| x.inner));
    }
    let folded = xs.map(|x| fold_n::<B, K>(materialize::<B, K>(x, &bdims), &bdims));
    (bdims, folded)
}

/// Rewraps an output computed on folded operands.
pub(crate) fn unfold_out<B: Backend, K: Kind<B>>(out: K::P, bdims: &BatchDims) -> VmapTensor<K::P> {
    if bdims.is_empty() {
        return VmapTensor::unbatched(out);
    }
    VmapTensor { inner: unfold_n::<B, K>(out, bdims), bdims: bdims.clone() }
}
