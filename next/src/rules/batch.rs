//! Moving a tensor in and out of a vmap level (the rules of [`BatchOps`](crate::BatchOps) for
//! `Vmap<B>`): a logical axis becomes a batch dim at its level's place, and back.

use burn_backend::backend::Backend;
use burn_backend::{Shape, TensorMetadata};

use crate::level::Level;
use crate::physical::{Kind, move_dim, with_batch_sizes};
use crate::tensor::{BatchDim, VmapTensor};

/// Logical `axis` of `t` becomes a batch dim at `level`.
pub(crate) fn batch<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    axis: usize,
    level: Level,
) -> VmapTensor<K::P> {
    let logical_rank = t.shape().num_dims();
    let (inner, mut bdims) = t.into_parts();
    let from = bdims.len() + axis;
    let size = inner.shape()[from];
    let pos = bdims.insert(BatchDim { level, size });
    let inner = move_dim::<B, K>(inner, from, pos);
    if logical_rank == 1 {
        // The last logical dim became a batch dim: rank 0 is held as `[batch sizes.., 1]`.
        let unit = with_batch_sizes(&bdims, &[]);
        return VmapTensor::new(K::reshape(inner, unit), bdims).with_scalar(true);
    }
    VmapTensor::new(inner, bdims)
}

/// The batch dim of `t` at `level` becomes logical `axis`, broadcast to `size` when `t` is not
/// batched at `level`.
pub(crate) fn unbatch<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    level: Level,
    size: usize,
    axis: usize,
) -> VmapTensor<K::P> {
    let scalar = t.is_scalar();
    let (inner, mut bdims) = t.into_parts();
    match bdims.remove(level) {
        Some((pos, _)) => {
            let to = bdims.len() + axis;
            let moved = move_dim::<B, K>(inner, pos, to);
            if scalar {
                // `[.., size, 1]`: the unit dim that held rank 0 goes.
                let mut dims = moved.shape().to_vec();
                dims.pop();
                return VmapTensor::new(K::reshape(moved, Shape::from(dims)), bdims);
            }
            VmapTensor::new(moved, bdims)
        }
        None => {
            // Not batched at this level: every example has the same value; broadcast it.
            let at = bdims.len() + axis;
            let mut dims = inner.shape().to_vec();
            if scalar {
                // Rank 0 (`[.., 1]`): its unit dim becomes the new axis.
                dims[at] = size;
                return VmapTensor::new(K::expand(inner, Shape::from(dims)), bdims);
            }
            dims.insert(at, 1);
            let inner = K::reshape(inner, Shape::from(dims.clone()));
            dims[at] = size;
            VmapTensor::new(K::expand(inner, Shape::from(dims)), bdims)
        }
    }
}
