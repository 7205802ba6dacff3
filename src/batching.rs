//! Moving a tensor in and out of a vmap level: the primitive moves that `vmap` is built on.
//!
//! [`BatchOps`] is the op trait of those moves. `Vmap<B>` implements it in `ops/batch.rs`
//! (with the rules of `rules/batch.rs`); `Autodiff` stacked on such a backend implements it
//! here, as differentiable ops.

use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{unary, Backward, Ops, OpsKind};
use burn_autodiff::Autodiff;
use burn_backend::backend::Backend;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{Shape, TensorMetadata};

use crate::level::Level;
use crate::tensor::BatchDims;

/// A backend whose tensors can be batched at a vmap level: [`Vmap<B>`](crate::Vmap) and `Autodiff<B>` over
/// such a backend. The transforms of this crate work on any `BatchOps` backend.
///
/// All axes are logical. `*_batch(t, axis, level)` turns logical axis `axis` of `t` into a batch
/// dim at `level` (the function under vmap no longer sees it); `*_unbatch(t, level, size, axis)`
/// turns the batch dim at `level` back into logical axis `axis`, broadcasting to `size` when `t`
/// is not batched at `level`.
pub trait BatchOps: Backend {
    /// Batches logical `axis` of a float tensor at `level`.
    fn float_batch(tensor: FloatTensor<Self>, axis: usize, level: Level) -> FloatTensor<Self>;
    /// Unbatches `level` of a float tensor into logical `axis`.
    fn float_unbatch(
        tensor: FloatTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> FloatTensor<Self>;
    /// Batch dims of a float tensor.
    fn float_batch_dims(tensor: &FloatTensor<Self>) -> BatchDims;
    /// Batches logical `axis` of an int tensor at `level`.
    fn int_batch(tensor: IntTensor<Self>, axis: usize, level: Level) -> IntTensor<Self>;
    /// Unbatches `level` of an int tensor into logical `axis`.
    fn int_unbatch(
        tensor: IntTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> IntTensor<Self>;
    /// Batch dims of an int tensor.
    fn int_batch_dims(tensor: &IntTensor<Self>) -> BatchDims;
    /// Batches logical `axis` of a bool tensor at `level`.
    fn bool_batch(tensor: BoolTensor<Self>, axis: usize, level: Level) -> BoolTensor<Self>;
    /// Unbatches `level` of a bool tensor into logical `axis`.
    fn bool_unbatch(
        tensor: BoolTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> BoolTensor<Self>;
    /// Batch dims of a bool tensor.
    fn bool_batch_dims(tensor: &BoolTensor<Self>) -> BatchDims;

    /// The float tensor with its physical value computed: a lazy per-example outer product
    /// (see [`VmapTensor`](crate::VmapTensor)'s "Lazy outer products") is multiplied out. For APIs that promise
    /// materialized tensors; every op reads the physical value anyway when it needs it.
    fn float_materialize(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        tensor
    }

    /// Marks a float tensor entering `level` unmapped (shared by every example). The value is
    /// unchanged; under `Autodiff`, a gradient that comes back batched at `level` (a backward
    /// pass run outside the vmap) is summed over it, as JAX does for unmapped arguments.
    fn float_shared(tensor: FloatTensor<Self>, level: Level) -> FloatTensor<Self> {
        let _ = level;
        tensor
    }
}

/// Backward of "batch": the gradient is unbatched back into the axis it came from.
#[derive(Debug)]
struct BatchBackward;

impl<B: BatchOps> Backward<B, 1> for BatchBackward {
    type State = (Level, usize, usize);

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (level, size, axis) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::float_unbatch(grad, level, size, axis)
        });
    }
}

/// Backward of "unbatch": the gradient is batched again at the same level.
#[derive(Debug)]
struct UnbatchBackward;

impl<B: BatchOps> Backward<B, 1> for UnbatchBackward {
    type State = (Level, usize);

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (level, axis) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::float_batch(grad, axis, level)
        });
    }
}

/// Backward of "shared": the gradient is summed over the level, if batched there.
#[derive(Debug)]
struct SharedBackward;

impl<B: BatchOps> Backward<B, 1> for SharedBackward {
    type State = Level;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let level = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            let Some(size) = B::float_batch_dims(&grad).size_at(level) else {
                return grad;
            };
            let per_example = B::float_unbatch(grad, level, size, 0);
            let dims = per_example.shape().to_vec();
            let summed = B::float_sum_dim(per_example, 0);
            B::float_reshape(summed, Shape::from(dims[1..].to_vec()))
        });
    }
}

impl<B: BatchOps, C: CheckpointStrategy> BatchOps for Autodiff<B, C> {
    fn float_shared(tensor: FloatTensor<Self>, level: Level) -> FloatTensor<Self> {
        let out = tensor.primitive.clone();
        match SharedBackward
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(level, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
    fn float_batch(tensor: FloatTensor<Self>, axis: usize, level: Level) -> FloatTensor<Self> {
        let size = tensor.primitive.shape()[axis];
        let out = B::float_batch(tensor.primitive.clone(), axis, level);
        match BatchBackward
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((level, size, axis), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
    fn float_unbatch(
        tensor: FloatTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> FloatTensor<Self> {
        let out = B::float_unbatch(tensor.primitive.clone(), level, size, axis);
        match UnbatchBackward
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((level, axis), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
    fn float_batch_dims(tensor: &FloatTensor<Self>) -> BatchDims {
        B::float_batch_dims(&tensor.primitive)
    }
    fn int_batch(tensor: IntTensor<Self>, axis: usize, level: Level) -> IntTensor<Self> {
        B::int_batch(tensor, axis, level)
    }
    fn int_unbatch(
        tensor: IntTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> IntTensor<Self> {
        B::int_unbatch(tensor, level, size, axis)
    }
    fn int_batch_dims(tensor: &IntTensor<Self>) -> BatchDims {
        B::int_batch_dims(tensor)
    }
    fn bool_batch(tensor: BoolTensor<Self>, axis: usize, level: Level) -> BoolTensor<Self> {
        B::bool_batch(tensor, axis, level)
    }
    fn bool_unbatch(
        tensor: BoolTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> BoolTensor<Self> {
        B::bool_unbatch(tensor, level, size, axis)
    }
    fn bool_batch_dims(tensor: &BoolTensor<Self>) -> BatchDims {
        B::bool_batch_dims(tensor)
    }
}
