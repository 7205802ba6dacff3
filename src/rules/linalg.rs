//! Matrix products (JAX's `dot_general` batching rule).

use burn_backend::backend::Backend;
use burn_backend::{Shape, TensorMetadata};

use super::helpers::{align, Kind};
use crate::tensor::{BatchDims, VmapTensor};

/// `matmul(lhs, rhs)` over the last two logical dims, broadcasting the leading ones.
///
/// A batched `lhs` times an unbatched `rhs` whose leading logical dims are all 1 (a weight
/// matrix) folds every batch and leading dim into the rows: one large `[rows, k] x [k, n]`
/// product instead of many small ones. A contraction of size 1 (the outer products of
/// per-example weight gradients, `x^T g` for one example) is a broadcasting multiply `mul`,
/// which avoids one tiny GEMM call per example. Other mixes use the backend's broadcasting
/// batched matmul, with size-1 dims for missing levels.
pub(crate) fn matmul<B: Backend, K: Kind<B>>(
    lhs: VmapTensor<K::P>,
    rhs: VmapTensor<K::P>,
    f: impl FnOnce(K::P, K::P) -> K::P,
    mul: impl FnOnce(K::P, K::P) -> K::P,
) -> VmapTensor<K::P> {
    if lhs.bdims.is_empty() && rhs.bdims.is_empty() {
        return VmapTensor::unbatched(f(lhs.inner, rhs.inner));
    }
    let lshape = lhs.inner.shape();
    if lshape.num_dims() >= 2
        && lshape[lshape.num_dims() - 1] == 1
        && lhs.inner.rank() - lhs.bdims.len() >= 2
    {
        // [.., m, 1] x [.., 1, n] = [.., m, 1] * [.., 1, n] (broadcast).
        let bdims = BatchDims::union([&lhs.bdims, &rhs.bdims]);
        let l = align::<B, K>(lhs, &bdims);
        let r = align::<B, K>(rhs, &bdims);
        return VmapTensor {
            inner: mul(l, r),
            bdims,
        };
    }
    if rhs.bdims.is_empty() {
        let rshape = rhs.inner.shape();
        let rrank = rshape.num_dims();
        let lshape = lhs.inner.shape();
        let lrank = lshape.num_dims() - lhs.bdims.len();
        let rows: usize = lshape[..lshape.num_dims() - 1].iter().product();
        // `rows > 0`: a batch of size 0 (or an empty leading dim) takes the broadcasting path
        // below; the folded `[0, k] x [k, n]` product divides by zero in burn-ndarray's matmul
        // (found by the loop oracle, tests/oracle/misc.rs `batch_size_zero`).
        if rrank >= 2 && lrank >= 2 && rows > 0 && rshape[..rrank - 2].iter().all(|&d| d == 1) {
            let (k, n) = (rshape[rrank - 2], rshape[rrank - 1]);
            let l2 = K::reshape(lhs.inner, Shape::from(vec![rows, k]));
            let r2 = K::reshape(rhs.inner, Shape::from(vec![k, n]));
            let out = f(l2, r2);
            let mut out_dims = lshape.to_vec();
            *out_dims.last_mut().expect("rank >= 2") = n;
            return VmapTensor {
                inner: K::reshape(out, Shape::from(out_dims)),
                bdims: lhs.bdims,
            };
        }
    }
    let bdims = BatchDims::union([&lhs.bdims, &rhs.bdims]);
    let l = align::<B, K>(lhs, &bdims);
    let r = align::<B, K>(rhs, &bdims);
    VmapTensor {
        inner: f(l, r),
        bdims,
    }
}
