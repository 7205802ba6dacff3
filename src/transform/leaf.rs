//! Batching and unbatching type-erased leaves.

use burn_backend::TensorPrimitive;

use crate::batching::BatchOps;
use crate::level::Level;
use crate::tensor::BatchDims;
use crate::tree::Leaf;

pub(crate) fn batch_leaf<B: BatchOps>(leaf: Leaf<B>, axis: usize, level: Level) -> Leaf<B> {
    match leaf {
        // A quantized input is dequantized: its scales are shared by the whole batch.
        Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(B::float_batch(
            t.tensor(),
            axis,
            level,
        ))),
        Leaf::Int(t) => Leaf::Int(B::int_batch(t, axis, level)),
        Leaf::Bool(t) => Leaf::Bool(B::bool_batch(t, axis, level)),
    }
}

pub(crate) fn unbatch_leaf<B: BatchOps>(
    leaf: Leaf<B>,
    level: Level,
    size: usize,
    axis: usize,
) -> Leaf<B> {
    match leaf {
        Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(B::float_unbatch(
            t.tensor(),
            level,
            size,
            axis,
        ))),
        Leaf::Int(t) => Leaf::Int(B::int_unbatch(t, level, size, axis)),
        Leaf::Bool(t) => Leaf::Bool(B::bool_unbatch(t, level, size, axis)),
    }
}

pub(crate) fn leaf_batch_dims<B: BatchOps>(leaf: &Leaf<B>) -> BatchDims {
    match leaf {
        Leaf::Float(TensorPrimitive::Float(t)) => B::float_batch_dims(t),
        Leaf::Float(TensorPrimitive::QFloat(_)) => BatchDims::none(),
        Leaf::Int(t) => B::int_batch_dims(t),
        Leaf::Bool(t) => B::bool_batch_dims(t),
    }
}
