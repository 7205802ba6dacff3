//! Unary and binary elementwise ops (JAX's `defvectorized` / `defbroadcasting`).
//!
//! The binary rules run after the ops' no-batched-operand fast path (`unbatched!` in
//! `ops/macros.rs`): at least one operand is batched.

use burn_backend::backend::Backend;

use super::helpers::{align, materialize};
use crate::physical::Kind;
use crate::tensor::{BatchDims, VmapTensor};

/// An op that maps each element (or acts on logical dims only): batch dims pass through.
#[inline]
pub(crate) fn unary<P: Clone, Q>(t: VmapTensor<P>, f: impl FnOnce(P) -> Q) -> VmapTensor<Q> {
    t.map(f)
}

/// A binary elementwise op whose backend broadcasts size-1 dims (add, mul, comparisons, ...):
/// an operand missing a level gets a size-1 dim there, nothing is copied.
#[inline]
pub(crate) fn binary<B: Backend, K1: Kind<B>, K2: Kind<B>, Q>(
    lhs: VmapTensor<K1::P>,
    rhs: VmapTensor<K2::P>,
    f: impl FnOnce(K1::P, K2::P) -> Q,
) -> VmapTensor<Q> {
    // Both operands have the logical rank of the result (rank 0 held as `[.., 1]`).
    let scalar = lhs.is_scalar();
    let bdims = BatchDims::union([&lhs.bdims, &rhs.bdims]);
    let l = align::<B, K1>(lhs, &bdims);
    let r = align::<B, K2>(rhs, &bdims);
    VmapTensor::new(f(l, r), bdims).with_scalar(scalar)
}

/// A binary elementwise op whose backends may not broadcast (remainder, cross, ...): missing
/// batch dims are materialized with `expand`.
pub(crate) fn binary_materialized<B: Backend, K1: Kind<B>, K2: Kind<B>, Q>(
    lhs: VmapTensor<K1::P>,
    rhs: VmapTensor<K2::P>,
    f: impl FnOnce(K1::P, K2::P, usize) -> Q,
) -> VmapTensor<Q> {
    let scalar = lhs.is_scalar();
    let bdims = BatchDims::union([&lhs.bdims, &rhs.bdims]);
    let l = materialize::<B, K1>(lhs, &bdims);
    let r = materialize::<B, K2>(rhs, &bdims);
    let nb = bdims.len();
    VmapTensor::new(f(l, r, nb), bdims).with_scalar(scalar)
}
