//! `BoolTensorOps` for `Vmap<B>`.

use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::BoolTensorOps;
use burn_backend::tensor::{Bool, BoolTensor, Device, FloatTensor, Int, IntTensor};
use burn_backend::{BoolDType, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};

use super::assert_unbatched;
use super::macros::*;
use crate::rules::{create, elementwise, fallback, indexing, reduce, view};
use crate::tensor::VmapTensor;
use crate::Vmap;

impl<B: Backend> BoolTensorOps<Self> for Vmap<B> {
    // --- creation and transfer: new tensors are unbatched -----------------------------------
    fn bool_empty(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        create::create(shape, |s| B::bool_empty(s, device, dtype))
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        create::create(shape, |s| B::bool_zeros(s, device, dtype))
    }

    fn bool_ones(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        create::create(shape, |s| B::bool_ones(s, device, dtype))
    }

    fn bool_from_data(data: TensorData, device: &Device<Self>) -> BoolTensor<Self> {
        create::from_data(data, |d| B::bool_from_data(d, device))
    }

    fn bool_into_data(
        tensor: BoolTensor<Self>,
    ) -> impl core::future::Future<Output = Result<TensorData, ExecutionError>> + Send {
        assert_unbatched(&tensor, "bool_into_data");
        create::into_data(tensor, B::bool_into_data)
    }

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
            fallback::enter("bool_argwhere");
            let bdims = tensor.bdims.clone();
            let mut outs = Vec::with_capacity(bdims.num_examples());
            for example in fallback::unbind::<B, Bool>(tensor, &bdims) {
                outs.push(B::bool_argwhere(example, out_dtype).await);
            }
            fallback::stack::<B, Int>("bool_argwhere", outs, &bdims)
        }
    }

    fn bool_device(tensor: &BoolTensor<Self>) -> Device<Self> {
        B::bool_device(tensor.stored())
    }

    fn bool_to_device(tensor: BoolTensor<Self>, device: &Device<Self>) -> BoolTensor<Self> {
        elementwise::unary(tensor, |t| B::bool_to_device(t, device))
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

    // --- views -------------------------------------------------------------------------------
    fn bool_reshape(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        view::reshape::<B, Bool>(tensor, shape)
    }

    fn bool_swap_dims(tensor: BoolTensor<Self>, dim1: usize, dim2: usize) -> BoolTensor<Self> {
        view::swap_dims::<B, Bool>(tensor, dim1, dim2, B::bool_swap_dims)
    }

    fn bool_permute(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        view::permute::<B, Bool>(tensor, axes)
    }

    fn bool_flip(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        view::flip(tensor, axes, B::bool_flip)
    }

    fn bool_expand(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        view::expand::<B, Bool>(tensor, shape)
    }

    fn bool_slice(tensor: BoolTensor<Self>, slices: &[Slice]) -> BoolTensor<Self> {
        view::slice::<B, Bool>(tensor, slices)
    }

    fn bool_unfold(
        tensor: BoolTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> BoolTensor<Self> {
        reduce::along_dim(tensor, dim, |t, d| B::bool_unfold(t, d, size, step))
    }

    // Overridden (speed): the default assigns every input into an empty tensor.
    fn bool_cat(tensors: Vec<BoolTensor<Self>>, dim: usize) -> BoolTensor<Self> {
        view::cat::<B, Bool>(tensors, dim, B::bool_cat)
    }

    // --- indexing ----------------------------------------------------------------------------
    fn bool_gather(
        dim: usize,
        tensor: BoolTensor<Self>,
        indices: IntTensor<Self>,
    ) -> BoolTensor<Self> {
        indexing::gather::<B, Bool>(dim, tensor, indices)
    }

    fn bool_scatter_or(
        dim: usize,
        tensor: BoolTensor<Self>,
        indices: IntTensor<Self>,
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        indexing::scatter::<B, Bool>(dim, tensor, indices, value, B::bool_scatter_or)
    }

    fn bool_select(
        tensor: BoolTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> BoolTensor<Self> {
        indexing::select::<B, Bool>(tensor, dim, indices)
    }

    fn bool_select_or(
        tensor: BoolTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        indexing::select_add::<B, Bool>(
            tensor,
            dim,
            indices,
            value,
            B::bool_select_or,
            B::bool_scatter_or,
        )
    }

    fn bool_slice_assign(
        tensor: BoolTensor<Self>,
        slices: &[Slice],
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        indexing::slice_assign::<B, Bool>(tensor, slices, value, B::bool_slice_assign)
    }

    fn bool_mask_where(
        tensor: BoolTensor<Self>,
        mask: BoolTensor<Self>,
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        indexing::mask_where::<B, Bool>(tensor, mask, value, B::bool_mask_where)
    }

    fn bool_mask_fill(
        tensor: BoolTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> BoolTensor<Self> {
        indexing::mask_fill::<B, Bool>(tensor, mask, |t, m| B::bool_mask_fill(t, m, value))
    }
}
