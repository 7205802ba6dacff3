//! `BatchOps` for `Vmap<B>`: moving tensors in and out of vmap levels (rules in
//! `rules/batch.rs`; a lazy outer product leaves a level factored, `rules/outer.rs`).

use burn_backend::backend::Backend;
use burn_backend::tensor::{Bool, BoolTensor, Float, FloatTensor, Int, IntTensor};

use crate::batching::BatchOps;
use crate::level::Level;
use crate::rules;
use crate::tensor::BatchDims;
use crate::Vmap;

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
        rules::outer::unbatch::<B>(tensor, level, size, axis)
            .unwrap_or_else(|t| rules::batch::unbatch::<B, Float>(t, level, size, axis))
    }
    fn float_batch_dims(tensor: &FloatTensor<Self>) -> BatchDims {
        tensor.bdims.clone()
    }
    fn float_materialize(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        tensor.map(|t| t)
    }
    fn int_batch(tensor: IntTensor<Self>, axis: usize, level: Level) -> IntTensor<Self> {
        rules::batch::batch::<B, Int>(tensor, axis, level)
    }
    fn int_unbatch(
        tensor: IntTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> IntTensor<Self> {
        rules::batch::unbatch::<B, Int>(tensor, level, size, axis)
    }
    fn int_batch_dims(tensor: &IntTensor<Self>) -> BatchDims {
        tensor.bdims.clone()
    }
    fn bool_batch(tensor: BoolTensor<Self>, axis: usize, level: Level) -> BoolTensor<Self> {
        rules::batch::batch::<B, Bool>(tensor, axis, level)
    }
    fn bool_unbatch(
        tensor: BoolTensor<Self>,
        level: Level,
        size: usize,
        axis: usize,
    ) -> BoolTensor<Self> {
        rules::batch::unbatch::<B, Bool>(tensor, level, size, axis)
    }
    fn bool_batch_dims(tensor: &BoolTensor<Self>) -> BatchDims {
        tensor.bdims.clone()
    }
}
