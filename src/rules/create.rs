//! New tensors and reading them back: a logical rank-0 tensor is created and read as `[1]`
//! (see [`VmapTensor`]'s physical layout), since some backends cannot allocate a rank-0 tensor
//! or reshape to one (see [`crate::compat`]).

use core::future::Future;

use burn_backend::backend::ExecutionError;
use burn_backend::{Scalar, Shape, TensorData, TensorMetadata};

use crate::tensor::{BatchDims, FillFn, VmapTensor};

/// A new unbatched tensor of logical shape `shape`, made by `make` at its physical shape.
pub(crate) fn create<P>(shape: Shape, make: impl FnOnce(Shape) -> P) -> VmapTensor<P> {
    let scalar = shape.num_dims() == 0;
    let physical = crate::physical::with_batch_sizes(&BatchDims::none(), &shape);
    VmapTensor::new(make(physical), BatchDims::none()).with_scalar(scalar)
}

/// A new unbatched constant of logical shape `shape`, `value` everywhere, made by `full` only
/// when an op reads it, and at the batch shape when a batched scatter writes into it (see
/// `VmapTensor`'s `Lazy::Fill`); `empty` makes the one-element tensor that carries its device
/// and dtype (an allocation, no kernel).
pub(crate) fn fill<P: TensorMetadata>(
    shape: Shape,
    value: Scalar,
    empty: impl FnOnce(Shape) -> P,
    full: FillFn<P>,
) -> VmapTensor<P> {
    let scalar = shape.num_dims() == 0;
    let physical = crate::physical::with_batch_sizes(&BatchDims::none(), &shape);
    VmapTensor::fill(empty(Shape::from(vec![1])), physical, value, full).with_scalar(scalar)
}

/// A new unbatched tensor holding `data`.
pub(crate) fn from_data<P>(data: TensorData, make: impl FnOnce(TensorData) -> P) -> VmapTensor<P> {
    let scalar = data.shape().num_dims() == 0;
    let data = if scalar {
        with_shape(data, Shape::from(vec![1]))
    } else {
        data
    };
    VmapTensor::new(make(data), BatchDims::none()).with_scalar(scalar)
}

/// `data` with another shape of as many elements (no copy).
fn with_shape(data: TensorData, shape: Shape) -> TensorData {
    let (bytes, _, dtype) = data.into_parts();
    TensorData::from_bytes(bytes, shape, dtype)
}

/// Reads an unbatched tensor back (the caller has checked that it is unbatched).
pub(crate) fn into_data<P: Clone, F>(
    t: VmapTensor<P>,
    read: impl FnOnce(P) -> F,
) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send
where
    F: Future<Output = Result<TensorData, ExecutionError>> + Send,
{
    let scalar = t.is_scalar();
    let pending = read(t.inner());
    async move {
        let data = pending.await?;
        if scalar {
            return Ok(with_shape(data, Shape::from(Vec::<usize>::new())));
        }
        Ok(data)
    }
}
