//! `BatchOps` for `Vmap<B>`: moving tensors in and out of vmap levels (rules in
//! `rules/batch.rs`; a factored product leaves a level factored, `rules/factored/`).

use burn_backend::backend::Backend;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};

use crate::Vmap;
use crate::batching::BatchOps;
use crate::level::Level;
use crate::physical::{Bool, Float, Int};
use crate::rules;
use crate::tensor::BatchDims;

/// The level moves of one kind by the rules of `rules/batch.rs`.
macro_rules! level_ops {
    ($prim:ident, $kind:ty; $batch:ident, $unbatch:ident, $dims:ident) => {
        fn $batch(tensor: $prim<Self>, axis: usize, level: Level) -> $prim<Self> {
            rules::batch::batch::<B, $kind>(tensor, axis, level)
        }
        fn $unbatch(tensor: $prim<Self>, level: Level, size: usize, axis: usize) -> $prim<Self> {
            rules::batch::unbatch::<B, $kind>(tensor, level, size, axis)
        }
        fn $dims(tensor: &$prim<Self>) -> BatchDims {
            tensor.bdims.clone()
        }
    };
}

impl<B: Backend> BatchOps for Vmap<B> {
    fn float_batch(tensor: FloatTensor<Self>, axis: usize, level: Level) -> FloatTensor<Self> {
        rules::batch::batch::<B, Float>(tensor, axis, level)
    }
    fn float_unbatch(
        tensor: FloatTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> FloatTensor<Self> {
        rules::factored::unbatch::<B>(tensor, level, size, axis)
            .unwrap_or_else(|t| rules::batch::unbatch::<B, Float>(t, level, size, axis))
    }
    fn float_batch_dims(tensor: &FloatTensor<Self>) -> BatchDims {
        tensor.bdims.clone()
    }
    fn float_materialize(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        tensor.map(|t| t)
    }
    level_ops!(IntTensor, Int; int_batch, int_unbatch, int_batch_dims);
    level_ops!(BoolTensor, Bool; bool_batch, bool_unbatch, bool_batch_dims);
}
