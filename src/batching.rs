//! Moving a tensor in and out of a vmap level: the primitive moves that `vmap` is built on.
//!
//! [`BatchOps`] is the op trait of those moves. `Vmap<B>` implements it in `ops/batch.rs`
//! (with the rules of `rules/batch.rs`); `Autodiff` stacked on such a backend implements it
//! here, as differentiable ops.

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn_backend::backend::Backend;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{Shape, TensorMetadata};

use crate::level::Level;
use crate::tensor::BatchDims;

/// The declarations of one kind's level moves in [`BatchOps`].
macro_rules! level_methods {
    ($prim:ident, $a_kind:literal; $batch:ident, $unbatch:ident, $dims:ident) => {
        #[doc = concat!("Batches logical `axis` of ", $a_kind, " tensor at `level`.")]
        fn $batch(tensor: $prim<Self>, axis: usize, level: Level) -> $prim<Self>;
        #[doc = concat!("Unbatches `level` of ", $a_kind, " tensor into logical `axis`.")]
        fn $unbatch(tensor: $prim<Self>, level: Level, size: usize, axis: usize) -> $prim<Self>;
        #[doc = concat!("Batch dims of ", $a_kind, " tensor.")]
        fn $dims(tensor: &$prim<Self>) -> BatchDims;
    };
}

/// The level moves of a kind that carries no gradient, on `Autodiff<B>`: forwarded to `B`.
macro_rules! forward_level_ops {
    ($prim:ident; $batch:ident, $unbatch:ident, $dims:ident) => {
        fn $batch(tensor: $prim<Self>, axis: usize, level: Level) -> $prim<Self> {
            B::$batch(tensor, axis, level)
        }
        fn $unbatch(tensor: $prim<Self>, level: Level, size: usize, axis: usize) -> $prim<Self> {
            B::$unbatch(tensor, level, size, axis)
        }
        fn $dims(tensor: &$prim<Self>) -> BatchDims {
            B::$dims(tensor)
        }
    };
}

/// A backend whose tensors can be batched at a vmap level: [`Vmap<B>`](crate::Vmap) and `Autodiff<B>` over
/// such a backend. The transforms of this crate work on any `BatchOps` backend.
///
/// ```
/// use burn_backend::{ops::FloatTensorOps, TensorData, TensorMetadata};
/// use burn_flex::Flex;
/// use burn_vmap::level::Level;
/// use burn_vmap::{BatchOps, Vmap};
/// type V = Vmap<Flex>;
/// let xs = V::float_from_data(TensorData::from([[1.0f32, 2.0], [3.0, 4.0]]), &Default::default());
/// let level = Level::fresh();
/// let x = V::float_batch(xs, 0, level); // each example sees a vector of 2
/// assert_eq!(x.shape().as_slice(), &[2]);
/// assert_eq!(V::float_batch_dims(&x).size_at(level), Some(2));
/// let ys = V::float_unbatch(V::float_mul_scalar(x, 10.0.into()), level, 2, 0);
/// assert_eq!(ys.shape().as_slice(), &[2, 2]);
/// ```
///
/// All axes are logical. `*_batch(t, axis, level)` turns logical axis `axis` of `t` into a batch
/// dim at `level` (the function under vmap no longer sees it); `*_unbatch(t, level, size, axis)`
/// turns the batch dim at `level` back into logical axis `axis`, broadcasting to `size` when `t`
/// is not batched at `level`.
pub trait BatchOps: Backend {
    level_methods!(FloatTensor, "a float"; float_batch, float_unbatch, float_batch_dims);
    level_methods!(IntTensor, "an int"; int_batch, int_unbatch, int_batch_dims);
    level_methods!(BoolTensor, "a bool"; bool_batch, bool_unbatch, bool_batch_dims);

    /// The float tensor with its physical value computed: a factored per-example weight gradient
    /// (see [`VmapTensor`](crate::tensor::VmapTensor)'s "Factored products") is multiplied out. For APIs that promise
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

/// `out` as the result of the custom differentiable op `op` on `parents`, with backward state
/// `state` (recorded only when a parent is tracked): the level moves here, and the nodes of
/// `checkpoint_chunked_scan`.
pub(crate) fn record<B, C, Op, const N: usize>(
    op: Op,
    parents: [&FloatTensor<Autodiff<B, C>>; N],
    state: Op::State,
    out: FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>>
where
    B: Backend,
    C: CheckpointStrategy,
    Op: Backward<B, N>,
{
    match op
        .prepare::<C>(parents.map(|t| t.node()))
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(state, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

impl<B: BatchOps, C: CheckpointStrategy> BatchOps for Autodiff<B, C> {
    fn float_shared(tensor: FloatTensor<Self>, level: Level) -> FloatTensor<Self> {
        let out = tensor.primitive().clone();
        record::<B, C, _, 1>(SharedBackward, [&tensor], level, out)
    }
    fn float_batch(tensor: FloatTensor<Self>, axis: usize, level: Level) -> FloatTensor<Self> {
        let size = tensor.primitive().shape()[axis];
        let out = B::float_batch(tensor.primitive().clone(), axis, level);
        record::<B, C, _, 1>(BatchBackward, [&tensor], (level, size, axis), out)
    }
    fn float_unbatch(
        tensor: FloatTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> FloatTensor<Self> {
        let out = B::float_unbatch(tensor.primitive().clone(), level, size, axis);
        record::<B, C, _, 1>(UnbatchBackward, [&tensor], (level, axis), out)
    }
    fn float_batch_dims(tensor: &FloatTensor<Self>) -> BatchDims {
        B::float_batch_dims(tensor.primitive())
    }
    forward_level_ops!(IntTensor; int_batch, int_unbatch, int_batch_dims);
    forward_level_ops!(BoolTensor; bool_batch, bool_unbatch, bool_batch_dims);
}
