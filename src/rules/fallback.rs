//! The loop fallback (functorch's `BatchedFallback.cpp`): an op without a batching rule runs
//! once per example on unbatched slices, and the results are stacked.
//!
//! It is slow (one op per example) and therefore loud: the first use of each op prints a
//! warning naming it. In **strict mode** ([`crate::strict`]) the fallback panics instead, so a
//! test suite run in strict mode proves that every op it touches has a real rule.
//!
//! Ops that use it (every other op has a real rule): `bool_argwhere` (and `argwhere`/`nonzero`
//! built on it) and `float_mask_select` / `int_mask_select` / `bool_mask_select`, whose output
//! size depends on the values, so they can only be batched when every example has the same
//! number of hits. They are also the only ops of the engine that read tensor values (each
//! example's inner op reads its own), so on a backend that cannot (Burn's capture backend: see
//! `crate::compat`) they panic before running.

use core::future::Future;
use std::collections::BTreeSet;
use std::sync::Mutex;

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use super::helpers::materialize;
use crate::physical::{Bool, Kind, with_batch_sizes};
use crate::tensor::{BatchDims, VmapTensor};

static WARNED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// Called by an op about to run the loop fallback on `device`: panics in strict mode or on a
/// backend that cannot read values, else warns once per op.
#[track_caller]
pub(crate) fn enter<B: Backend>(op: &'static str, device: &B::Device) {
    if !crate::compat::reads_values::<B>(device) {
        panic!(
            "vmap: {op}: the result's size depends on each example's values, which the loop \
             fallback reads, and this backend ({}) records ops without running them; call the op \
             outside vmap, or make the result size fixed (a mask with `mask_where` / \
             `mask_fill`)",
            B::name(device)
        );
    }
    if crate::strict::is_strict() {
        panic!(
            "vmap: {op}: no batching rule for this op, and strict mode (BURN_VMAP_STRICT=1 or \
             burn_vmap::strict::set_strict(true)) forbids the loop fallback; turn strict mode off to run \
             it once per example"
        );
    }
    let first = WARNED.lock().map(|mut w| w.insert(op)).unwrap_or(false);
    if first {
        eprintln!(
            "burn-vmap: warning: no batching rule for `{op}`; running it once per example and \
             stacking the results (slow loop fallback). Set BURN_VMAP_STRICT=1 to make this an \
             error."
        );
    }
}

/// Splits `t`, materialized over `bdims`, into its `bdims.num_examples()` unbatched examples
/// (row-major over the batch dims).
pub(crate) fn unbind<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, bdims: &BatchDims) -> Vec<K::P> {
    let inner = materialize::<B, K>(t, bdims);
    let shape = inner.shape();
    let logical: Vec<usize> = shape[bdims.len()..].to_vec();
    let e = bdims.num_examples();
    let flat: Shape = core::iter::once(e).chain(logical.iter().copied()).collect();
    let flat = K::reshape(inner, flat);
    (0..e)
        .map(|i| {
            let mut slices = vec![Slice::new(i as isize, Some(i as isize + 1), 1)];
            slices.extend(logical.iter().map(|_| Slice::new(0, None, 1)));
            K::reshape(
                K::slice(flat.clone(), &slices),
                Shape::from(logical.clone()),
            )
        })
        .collect()
}

/// Stacks per-example results (row-major over `bdims`) into one tensor batched at `bdims`.
///
/// # Panics
/// If the results differ in shape (a value-dependent output size), or there are none.
pub(crate) fn stack<B: Backend, K: Kind<B>>(
    op: &str,
    outs: Vec<K::P>,
    bdims: &BatchDims,
) -> VmapTensor<K::P> {
    let Some(first) = outs.first() else {
        panic!(
            "vmap: {op}: the loop fallback cannot infer the output shape of an empty batch; \
             call the op outside vmap"
        )
    };
    let shape = first.shape();
    if let Some(other) = outs.iter().map(|o| o.shape()).find(|s| *s != shape) {
        panic!(
            "vmap: {op}: the result's shape depends on the values ({:?} for the first example, \
             {:?} for another), so the examples cannot be stacked into one batched tensor; call \
             the op outside vmap, or make the result size fixed (pad, or use a mask)",
            shape.as_slice(),
            other.as_slice()
        );
    }
    let one: Shape = core::iter::once(1).chain(shape.iter().copied()).collect();
    let outs: Vec<K::P> = outs
        .into_iter()
        .map(|o| K::reshape(o, one.clone()))
        .collect();
    let stacked = K::cat(outs, 0);
    VmapTensor::new(
        K::reshape(stacked, with_batch_sizes(bdims, &shape)),
        bdims.clone(),
    )
}

/// `mask_select(tensor, mask)` (`float_`, `int_` or `bool_`): the inner op on unbatched
/// operands; otherwise the loop fallback over the examples of both (materialized over their
/// batch dims), each selecting its own elements, stacked (see [`stack`]).
#[allow(clippy::manual_async_fn)] // The op traits ask for `'static + Send`.
pub(crate) fn mask_select<B, K, F, Fut>(
    op: &'static str,
    tensor: VmapTensor<K::P>,
    mask: VmapTensor<B::BoolTensorPrimitive>,
    select: F,
) -> impl Future<Output = VmapTensor<K::P>> + 'static + Send
where
    B: Backend,
    K: Kind<B>,
    F: Fn(K::P, B::BoolTensorPrimitive) -> Fut + Send + 'static,
    Fut: Future<Output = K::P> + Send + 'static,
{
    async move {
        let bdims = BatchDims::union([&tensor.bdims, &mask.bdims]);
        if bdims.is_empty() {
            return VmapTensor::unbatched(select(tensor.inner(), mask.inner()).await);
        }
        enter::<B>(op, &tensor.device());
        let examples = unbind::<B, K>(tensor, &bdims);
        let masks = unbind::<B, Bool>(mask, &bdims);
        let mut outs = Vec::with_capacity(examples.len());
        for (t, m) in examples.into_iter().zip(masks) {
            outs.push(select(t, m).await);
        }
        stack::<B, K>(op, outs, &bdims)
    }
}
