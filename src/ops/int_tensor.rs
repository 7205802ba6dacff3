//! `IntTensorOps` for `Vmap<B>`: batched ints work as values and as indices.

use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::IntTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IndexingUpdateOp, Int, IntTensor};
use burn_backend::{Distribution, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};

use super::assert_unbatched;
use super::macros::*;
use crate::rules::{create, elementwise, indexing, linalg, reduce, view};
use crate::tensor::VmapTensor;
use crate::Vmap;

impl<B: Backend> IntTensorOps<Self> for Vmap<B> {
    // --- creation and transfer: new tensors are unbatched -----------------------------------
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        create::create(shape, |s| B::int_empty(s, device, dtype))
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self> {
        create::from_data(data, |d| B::int_from_data(d, device))
    }

    fn int_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        // Inside vmap the draw gets a batch dim at every level in `Randomness::Different` mode.
        crate::rules::random::random("int_random", shape, |s| {
            B::int_random(s, distribution, device, dtype)
        })
    }

    // Overridden (speed): the default builds zeros through `int_from_data` on the host.
    fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        create::create(shape, |s| B::int_zeros(s, device, dtype))
    }

    // Overridden (speed): as `int_zeros`.
    fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        create::create(shape, |s| B::int_ones(s, device, dtype))
    }

    fn int_into_data(
        tensor: IntTensor<Self>,
    ) -> impl core::future::Future<Output = Result<TensorData, ExecutionError>> + Send {
        assert_unbatched(&tensor, "int_into_data");
        create::into_data(tensor, B::int_into_data)
    }

    fn int_device(tensor: &IntTensor<Self>) -> Device<Self> {
        B::int_device(tensor.stored())
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self> {
        elementwise::unary(tensor, |t| B::int_to_device(t, device))
    }

    // --- casts -----------------------------------------------------------------------------
    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::int_into_float(t, out_dtype))
    }

    fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self> {
        elementwise::unary(tensor, |t| B::int_cast(t, dtype))
    }

    // --- elementwise -----------------------------------------------------------------------
    broadcasting_ops!(IntTensor, Int; int_add, int_sub, int_mul, int_div);
    materializing_ops!(IntTensor, Int;
        int_remainder, bitwise_and, bitwise_or, bitwise_xor, bitwise_left_shift,
        bitwise_right_shift);
    scalar_ops!(IntTensor;
        int_add_scalar, int_sub_scalar, int_mul_scalar, int_div_scalar, int_remainder_scalar,
        bitwise_and_scalar, bitwise_or_scalar, bitwise_xor_scalar, bitwise_left_shift_scalar,
        bitwise_right_shift_scalar);
    unary_ops!(IntTensor; int_abs, bitwise_not);

    comparison_ops!(IntTensor, Int;
        int_equal, int_greater, int_greater_equal, int_lower, int_lower_equal);
    comparison_scalar_ops!(IntTensor;
        int_equal_elem, int_greater_elem, int_greater_equal_elem, int_lower_elem,
        int_lower_equal_elem);

    fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        linalg::matmul::<B, Int>(lhs, rhs, B::int_matmul, B::int_mul)
    }

    // --- views -------------------------------------------------------------------------------
    fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        view::reshape::<B, Int>(tensor, shape)
    }

    fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self> {
        view::swap_dims::<B, Int>(tensor, dim1, dim2, B::int_swap_dims)
    }

    fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        view::permute::<B, Int>(tensor, axes)
    }

    fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        view::flip(tensor, axes, B::int_flip)
    }

    fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        view::expand::<B, Int>(tensor, shape)
    }

    fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self> {
        view::slice::<B, Int>(tensor, slices)
    }

    fn int_unfold(
        tensor: IntTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> IntTensor<Self> {
        reduce::along_dim(tensor, dim, |t, d| B::int_unfold(t, d, size, step))
    }

    // Overridden (speed): the default assigns every input into an empty tensor.
    fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self> {
        view::cat::<B, Int>(tensors, dim, B::int_cat)
    }

    // --- indexing ----------------------------------------------------------------------------
    fn int_gather(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        indexing::gather::<B, Int>(dim, tensor, indices)
    }

    fn int_scatter_add(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        indexing::scatter::<B, Int>(dim, tensor, indices, value, B::int_scatter_add)
    }

    fn int_scatter_nd(
        data: IntTensor<Self>,
        indices: IntTensor<Self>,
        values: IntTensor<Self>,
        reduction: IndexingUpdateOp,
    ) -> IntTensor<Self> {
        indexing::scatter_nd::<B, Int>(data, indices, values, |d, i, v| {
            B::int_scatter_nd(d, i, v, reduction)
        })
    }

    fn int_gather_nd(data: IntTensor<Self>, indices: IntTensor<Self>) -> IntTensor<Self> {
        indexing::gather_nd::<B, Int>(data, indices, B::int_gather_nd)
    }

    fn int_select(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        indexing::select::<B, Int>(tensor, dim, indices)
    }

    fn int_select_add(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        indexing::select_add::<B, Int>(
            tensor,
            dim,
            indices,
            value,
            B::int_select_add,
            B::int_scatter_add,
        )
    }

    fn int_slice_assign(
        tensor: IntTensor<Self>,
        slices: &[Slice],
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        indexing::slice_assign::<B, Int>(tensor, slices, value, B::int_slice_assign)
    }

    fn int_mask_where(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        indexing::mask_where::<B, Int>(tensor, mask, value, B::int_mask_where)
    }

    fn int_mask_fill(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> IntTensor<Self> {
        indexing::mask_fill::<B, Int>(tensor, mask, |t, m| B::int_mask_fill(t, m, value))
    }

    // --- reductions and scans ----------------------------------------------------------------
    fn int_sum(tensor: IntTensor<Self>) -> IntTensor<Self> {
        reduce::all::<B, Int>(tensor, B::int_sum, B::int_sum_dim, 0.0)
    }

    fn int_prod(tensor: IntTensor<Self>) -> IntTensor<Self> {
        reduce::all::<B, Int>(tensor, B::int_prod, B::int_prod_dim, 1.0)
    }

    fn int_sum_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        reduce::reduce_dim_or::<B, Int>(tensor, dim, B::int_sum_dim, 0.0)
    }

    fn int_prod_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        reduce::reduce_dim_or::<B, Int>(tensor, dim, B::int_prod_dim, 1.0)
    }

    dim_ops!(IntTensor, Int;
        int_mean_dim, int_cumsum, int_cumprod, int_cummin, int_cummax, int_argmax, int_argmin);

    fn int_argtopk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Int, _>(tensor, dim, |t, d| B::int_argtopk(t, d, k))
    }

    // Fix (found by the loop oracle, tests/oracle/derived.rs `int_sort`): as `float_sort`,
    // Burn's default reads the data back to the host, which panics on a batched tensor.
    fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Int, _>(tensor, dim, |t, d| B::int_sort(t, d, descending))
    }

    fn int_sort_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        descending: bool,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        let (inner, bdims) = tensor.into_parts();
        let inner = crate::compat::kernel_layout::<B, Int>(inner);
        let (values, indices) = B::int_sort_with_indices(inner, dim + bdims.len(), descending);
        (
            VmapTensor::new(values, bdims.clone()),
            VmapTensor::new(indices, bdims),
        )
    }

    fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Int, _>(tensor, dim, |t, d| B::int_argsort(t, d, descending))
    }
}
