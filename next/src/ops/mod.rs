//! Burn's op traits for [`Vmap`](crate::Vmap), one file per trait. Each method unwraps its
//! operands, calls the batching rule of its family (see [`crate::rules`]) and rewraps.
//!
//! Only the methods Burn requires are implemented, plus a few defaults that are overridden for
//! speed (each says why); Burn's other default methods decompose into these.

mod activation;
mod batch;
mod bool_tensor;
mod float_tensor;
mod int_tensor;
pub(crate) mod macros;
mod module;
mod qtensor;
mod transaction;

use crate::tensor::VmapTensor;

/// Panics for an op that reads data out of a batched tensor.
///
/// The message names the two ways out: return the tensor from the vmapped function (its
/// `out_axes` places the batch axis), or take the physical tensor with
/// [`BatchOps::float_unbatch`](crate::BatchOps::float_unbatch) (and its int/bool siblings).
/// A tensor batched at a level whose `vmap` has returned escaped through outside state; the
/// message says so (BatchNorm's running statistics in training mode are the usual culprit).
#[track_caller]
pub(crate) fn assert_unbatched<P>(t: &VmapTensor<P>, op: &str) {
    if !t.is_batched() {
        return;
    }
    if let Some(dead) = t
        .batch_dims()
        .as_slice()
        .iter()
        .find(|d| crate::level::is_finished(d.level))
    {
        panic!(
            "vmap: {op}: this tensor is batched at vmap level {} (size {}), whose vmap call has \
             already returned: a batched tensor escaped its vmap through state kept outside the \
             function (for example BatchNorm's running statistics updated in training mode inside \
             vmap; put BatchNorm in eval mode, use GroupNorm/LayerNorm/InstanceNorm, or return \
             the value from the vmapped function), or it is the gradient of a tensor the function \
             captured (not passed as an argument) from a backward pass run after vmap returned \
             (pass shared tensors as unmapped arguments, `in_axes` None, and their gradient is \
             summed over the batch; for a module's parameters take the gradients inside vmap: \
             `per_example_grads` then `ParamGrads::sum_batch`, or `micro_grad_module`)",
            dead.level.id(),
            dead.size
        );
    }
    panic!(
        "vmap: {op}: cannot read back a tensor batched at {} vmap level(s) from inside vmap \
         (its values differ per example, e.g. `to_data`, `into_scalar`, `one_hot`); return it \
         from the vmapped function instead (`out_axes` sets where its batch axis goes), or take \
         the physical `[batch.., ...]` tensor with `BatchOps::float_unbatch` / `int_unbatch` / \
         `bool_unbatch`",
        t.batch_dims().len()
    );
}
