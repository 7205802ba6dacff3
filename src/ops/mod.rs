//! Burn's op traits for [`Vmap`](crate::Vmap), one file per trait. Each method unwraps its
//! operands, calls the batching rule of its family (see [`crate::rules`]) and rewraps.
//!
//! Only the methods Burn requires are implemented, plus a few defaults that are overridden for
//! speed (each says why); Burn's other default methods decompose into these.

mod activation;
mod bool_tensor;
mod float_tensor;
mod int_tensor;
pub(crate) mod macros;
mod module;
mod qtensor;
mod transaction;

use crate::tensor::VmapTensor;

/// Panics for an op that reads data out of a batched tensor.
#[track_caller]
pub(crate) fn assert_unbatched<P>(t: &VmapTensor<P>, op: &str) {
    if t.is_batched() {
        panic!(
            "vmap: {op}: cannot read back a tensor batched at {} vmap level(s) from inside vmap \
             (its values differ per example); return it from the vmapped function instead, or \
             use `burn_vmap::physical` to get the physical `[batch.., ...]` tensor",
            t.batch_dims().len()
        );
    }
}
