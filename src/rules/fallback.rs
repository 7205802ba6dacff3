//! The loop fallback (functorch's `BatchedFallback.cpp`): an op without a batching rule runs
//! once per example on unbatched slices, and the results are stacked.
//!
//! It is slow (one op per example) and therefore loud: the first use of each op prints a
//! warning naming it. In **strict mode** the fallback panics instead, so a test suite run in
//! strict mode proves that every op it touches has a real rule. Strict mode is on when the
//! environment variable `BURN_VMAP_STRICT` is `1` (or `true`), or after [`set_strict`]`(true)`;
//! [`with_strict`] overrides it on the current thread for the duration of a closure.
//!
//! Ops that use it (every other op has a real rule): `bool_argwhere` (and `argwhere`/`nonzero`
//! built on it), whose output size depends on the values, so it can only be batched when every
//! example has the same number of hits.

use core::cell::Cell;
use core::sync::atomic::{AtomicU8, Ordering};
use std::collections::BTreeSet;
use std::sync::Mutex;

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use super::helpers::materialize;
use crate::physical::{with_batch_sizes, Kind};
use crate::tensor::{BatchDims, VmapTensor};

/// 0: not decided yet (read the environment), 1: off, 2: on.
static STRICT: AtomicU8 = AtomicU8::new(0);
static WARNED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

thread_local! {
    static OVERRIDE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Turns strict mode on or off for the whole process (overrides `BURN_VMAP_STRICT`).
///
/// In strict mode an op without a batching rule panics inside vmap instead of running the loop
/// fallback (one op per example, with a one-time warning).
///
/// ```
/// burn_vmap::set_strict(true);
/// assert!(burn_vmap::is_strict());
/// burn_vmap::set_strict(false);
/// assert!(!burn_vmap::is_strict());
/// ```
pub fn set_strict(on: bool) {
    STRICT.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether strict mode is on for the current thread: a [`with_strict`] override, else
/// [`set_strict`], else the environment variable `BURN_VMAP_STRICT` (`1` or `true`).
///
/// ```
/// let outer = burn_vmap::is_strict();
/// burn_vmap::with_strict(true, || assert!(burn_vmap::is_strict()));
/// assert_eq!(burn_vmap::is_strict(), outer);
/// ```
pub fn is_strict() -> bool {
    if let Some(on) = OVERRIDE.with(Cell::get) {
        return on;
    }
    match STRICT.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var("BURN_VMAP_STRICT")
                .map(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "on"))
                .unwrap_or(false);
            // Only the first reader decides; a concurrent `set_strict` wins.
            let _ = STRICT.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            on
        }
    }
}

/// Runs `f` with strict mode set to `on` on the current thread (restored afterwards, also on
/// panic).
///
/// ```
/// let r = burn_vmap::with_strict(false, || burn_vmap::is_strict());
/// assert!(!r);
/// ```
pub fn with_strict<R>(on: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<bool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(on))));
    f()
}

/// Called by an op about to run the loop fallback: panics in strict mode, else warns once per
/// op.
#[track_caller]
pub(crate) fn enter(op: &'static str) {
    if is_strict() {
        panic!(
            "vmap: {op}: no batching rule for this op, and strict mode (BURN_VMAP_STRICT=1 or \
             burn_vmap::set_strict(true)) forbids the loop fallback; turn strict mode off to run \
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
