//! `BoolTensorOps` for `Vmap<B>`.

use burn_backend::TensorMetadata;
use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::BoolTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor};
use burn_backend::{BoolDType, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};

use super::macros::*;
use crate::Vmap;
use crate::physical::{Bool, Int};
use crate::rules::{elementwise, fallback};
use crate::tensor::VmapTensor;

impl<B: Backend> BoolTensorOps<Self> for Vmap<B> {
    shared_ops!(bool);

    // Overridden (correctness): the output size depends on the values, so there is no batching
    // rule; batched inputs take the loop fallback (stackable when every example has the same
    // number of `true`s). The default would read the batched tensor back and panic.
    #[allow(clippy::manual_async_fn)] // The trait asks for `'static + Send`.
    fn bool_argwhere(
        tensor: BoolTensor<Self>,
        out_dtype: IntDType,
    ) -> impl core::future::Future<Output = IntTensor<Self>> + 'static + Send {
        async move {
            if !tensor.is_batched() {
                return VmapTensor::unbatched(B::bool_argwhere(tensor.inner(), out_dtype).await);
            }
            fallback::enter::<B>("bool_argwhere", &tensor.device());
            let bdims = tensor.bdims.clone();
            let mut outs = Vec::with_capacity(bdims.num_examples());
            for example in fallback::unbind::<B, Bool>(tensor, &bdims) {
                outs.push(B::bool_argwhere(example, out_dtype).await);
            }
            fallback::stack::<B, Int>("bool_argwhere", outs, &bdims)
        }
    }

    // --- casts -----------------------------------------------------------------------------
    fn bool_into_int(tensor: BoolTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        elementwise::unary(tensor, |t| B::bool_into_int(t, out_dtype))
    }

    fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::bool_into_float(t, out_dtype))
    }

    // --- logic -------------------------------------------------------------------------------
    unary_ops!(BoolTensor; bool_not);
    materializing_ops!(BoolTensor, Bool; bool_and, bool_or, bool_equal);

    fn bool_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self> {
        elementwise::unary(lhs, |t| B::bool_equal_elem(t, rhs))
    }
}
