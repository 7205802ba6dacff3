//! Burn's op traits for [`Vmap`](crate::Vmap), one file per trait. Each method unwraps its
//! operands, calls the batching rule of its family (see [`crate::rules`]) and rewraps.
//!
//! Only the methods Burn requires are implemented, plus a few defaults that are overridden for
//! speed or correctness (each says why at its definition); Burn's other default methods
//! decompose into these. The overridden defaults of Burn 0.22.1:
//!
//! | trait | defaults overridden | why |
//! |---|---|---|
//! | `FloatTensorOps` | `float_zeros`, `float_ones`, `float_full` | speed: the defaults build them on the host |
//! | | `float_neg` | speed: one kernel, not `mul_scalar(-1)` |
//! | | `float_prod`, `float_prod_dim` | correctness: the defaults' `exp(sum(log x))` is NaN for a negative factor |
//! | | `float_cat` | speed (one inner `cat`, not assigns into an empty tensor); keeps factored products factored |
//! | | `float_sort`, `float_sort_with_indices`, `float_argsort` | correctness: the defaults read the values back (no batched read, no capture) |
//! | | `float_topk`, `float_topk_with_indices`, `float_argtopk` | speed: the inner top-k, not a sort of the whole dim |
//! | | `float_hypot`, `float_sum_dims`, `float_pad` | speed: one inner op, not the defaults' decompositions |
//! | | `float_gather_nd`, `float_scatter_nd` | the defaults are `unimplemented!`; the rules call the inner op |
//! | | `float_mask_select` | correctness: the default reads the batched mask back; the loop fallback |
//! | `IntTensorOps` | `int_zeros`, `int_ones`, `int_cat`, `int_sort`, `int_sort_with_indices`, `int_argsort`, `int_topk`, `int_topk_with_indices`, `int_argtopk`, `int_square`, `int_pad`, `int_gather_nd`, `int_scatter_nd`, `int_mask_select` | as their float siblings |
//! | | `int_powi`, `int_powi_scalar_impl` | exactness: the inner backend's integer kernels (the defaults go through `float_powf`, whose `0^0` is 0 on cubecl) |
//! | `BoolTensorOps` | `bool_cat` | speed, as `float_cat` |
//! | | `bool_argwhere`, `bool_mask_select` | correctness: the loop fallback (see `rules::fallback`) |
//! | `ModuleOps` | `linear`, `linear_x_backward`, `linear_weight_backward`, `linear_bias_backward` | speed: a batched input folded into rows, one inner op |
//! | | `conv1d_weight_backward`, `conv2d_weight_backward`, `embedding_backward` | per-example gradients held factored (`rules::factored`) |
//! | | `batch_norm`, `unfold4d`, `fold4d` | speed: the batch folded into `N`, one inner op |
//! | `ActivationOps` | `relu`, `gelu`, `sigmoid`, `log_sigmoid`, their backward ops, `leaky_relu`, `hard_sigmoid` | speed: the inner backend's kernels, as `Autodiff<B>` calls them |
//! | `QTensorOps` | `q_expand`, `q_select`, `q_slice` | exactness: the inner op on the quantized values |
//!
//! Left to their defaults on purpose (they decompose into ops with rules, and are right per
//! example): `batch_norm_train` and `batch_norm_train_backward` (each example's statistics are
//! its own batch's), `layer_norm`, `softmax`, `log_softmax`, `prelu`, the pool1d and conv1d /
//! transposed-convolution families, `embedding`, `ctc_loss`, the `*_max_dim_with_indices`
//! family, `float_repeat_dim`, `float_powi*`, the `DistributedOps` (see `ops/distributed.rs`)
//! and `TransactionOps` (reads go through `*_into_data`, which refuses batched tensors).

mod activation;
mod batch;
mod bool_tensor;
mod distributed;
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

/// An inner backend's primitive as an unbatched tensor of `Vmap<B>`: the inverse of
/// [`into_unbatched`]. A rank-0 tensor is held as `[1]` marked rank 0, as every logical rank-0
/// tensor of the engine is (see `VmapTensor`'s physical layout), so it combines with batched
/// scalars.
pub(crate) fn from_inner<P>(t: P, reshape: fn(P, burn_backend::Shape) -> P) -> VmapTensor<P>
where
    P: burn_backend::TensorMetadata,
{
    if t.shape().num_dims() == 0 {
        let one = reshape(t, burn_backend::Shape::from(vec![1]));
        return VmapTensor::from_physical_scalar(one, crate::tensor::BatchDims::none());
    }
    VmapTensor::unbatched(t)
}

/// An unbatched tensor of `Vmap<B>` as the inner backend's primitive: a lazy form computed, a
/// logical rank-0 tensor (held as `[1]`) reshaped to rank 0 with `reshape`.
///
/// # Panics
/// If the tensor is batched (see [`assert_unbatched`]).
#[track_caller]
pub(crate) fn into_unbatched<P>(t: VmapTensor<P>, reshape: fn(P, burn_backend::Shape) -> P) -> P
where
    P: burn_backend::TensorMetadata + Clone,
{
    assert_unbatched(&t, "leaving vmap");
    let scalar = t.is_scalar();
    let (inner, _) = t.into_parts();
    if scalar {
        reshape(inner, burn_backend::Shape::from(Vec::<usize>::new()))
    } else {
        inner
    }
}
