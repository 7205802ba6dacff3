//! `FloatTensorOps` for `Vmap<B>`.

use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::{BoolTensor, Device, Float, FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{Distribution, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};

use super::assert_unbatched;
use super::macros::*;
use crate::rules::{create, elementwise, indexing, linalg, outer, reduce, view};
use crate::tensor::VmapTensor;
use crate::Vmap;

impl<B: Backend> FloatTensorOps<Self> for Vmap<B> {
    // --- creation and transfer: new tensors are unbatched -----------------------------------
    fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self> {
        create::from_data(data, |d| B::float_from_data(d, device))
    }

    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        // Inside vmap the draw gets a batch dim at every level in `Randomness::Different` mode.
        crate::rules::random::random("float_random", shape, |s| {
            B::float_random(s, distribution, device, dtype)
        })
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        create::create(shape, |s| B::float_empty(s, device, dtype))
    }

    // Overridden (speed): the default builds zeros through `float_from_data` on the host.
    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        create::create(shape, |s| B::float_zeros(s, device, dtype))
    }

    // Overridden (speed): as `float_zeros`.
    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        create::create(shape, |s| B::float_ones(s, device, dtype))
    }

    // Overridden (speed): as `float_zeros`.
    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        create::create(shape, |s| B::float_full(s, fill_value, device, dtype))
    }

    fn float_into_data(
        tensor: FloatTensor<Self>,
    ) -> impl core::future::Future<Output = Result<TensorData, ExecutionError>> + Send {
        assert_unbatched(&tensor, "float_into_data");
        create::into_data(tensor, B::float_into_data)
    }

    fn float_device(tensor: &FloatTensor<Self>) -> Device<Self> {
        B::float_device(tensor.stored())
    }

    fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::float_to_device(t, device))
    }

    // --- casts -----------------------------------------------------------------------------
    fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        elementwise::unary(tensor, |t| B::float_into_int(t, out_dtype))
    }

    fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::float_cast(t, dtype))
    }

    // --- elementwise -----------------------------------------------------------------------
    broadcasting_ops!(FloatTensor, Float; float_add, float_sub);

    // `float_mul` and `float_div` keep lazy outer products factored where they can (see
    // `rules::outer`); otherwise the broadcasting rule.
    fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        outer::mul::<B>(lhs, rhs)
            .unwrap_or_else(|(l, r)| elementwise::binary::<B, Float, Float, _>(l, r, B::float_mul))
    }

    fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        outer::div::<B>(lhs, rhs)
            .unwrap_or_else(|(l, r)| elementwise::binary::<B, Float, Float, _>(l, r, B::float_div))
    }

    fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        outer::scalar::<B>(lhs, rhs, false)
            .unwrap_or_else(|t| elementwise::unary(t, |t| B::float_mul_scalar(t, rhs)))
    }

    fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        outer::scalar::<B>(lhs, rhs, true)
            .unwrap_or_else(|t| elementwise::unary(t, |t| B::float_div_scalar(t, rhs)))
    }
    materializing_ops!(FloatTensor, Float; float_remainder, float_powf, float_atan2);
    scalar_ops!(FloatTensor;
        float_add_scalar, float_sub_scalar, float_remainder_scalar, float_powf_scalar_impl);
    unary_ops!(FloatTensor;
        float_recip, float_exp, float_log, float_log1p, float_sqrt, float_abs, float_cos,
        float_sin, float_tan, float_cosh, float_sinh, float_tanh, float_acos, float_acosh,
        float_asin, float_asinh, float_atan, float_atanh, float_round, float_floor, float_ceil,
        float_trunc, float_erf);

    // Overridden (speed): the default is `mul_scalar(-1)`, one more kernel for nothing.
    fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        elementwise::unary(tensor, B::float_neg)
    }

    comparison_ops!(FloatTensor, Float;
        float_equal, float_greater, float_greater_equal, float_lower, float_lower_equal);
    comparison_scalar_ops!(FloatTensor;
        float_equal_elem, float_greater_elem, float_greater_equal_elem, float_lower_elem,
        float_lower_equal_elem);

    // --- linear algebra ----------------------------------------------------------------------
    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        linalg::matmul::<B, Float>(lhs, rhs, B::float_matmul, B::float_mul)
    }

    fn float_cross(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        dim: usize,
    ) -> FloatTensor<Self> {
        elementwise::binary_materialized::<B, Float, Float, _>(lhs, rhs, |l, r, nb| {
            B::float_cross(l, r, dim + nb)
        })
    }

    // --- views -------------------------------------------------------------------------------
    fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self> {
        view::swap_dims::<B, Float>(tensor, dim1, dim2, B::float_swap_dims)
    }

    fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        view::permute::<B, Float>(tensor, axes)
    }

    fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        view::flip(tensor, axes, B::float_flip)
    }

    fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        view::reshape::<B, Float>(tensor, shape)
    }

    fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        view::expand::<B, Float>(tensor, shape)
    }

    fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self> {
        view::slice::<B, Float>(tensor, slices)
    }

    fn float_unfold(
        tensor: FloatTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> FloatTensor<Self> {
        reduce::along_dim(tensor, dim, |t, d| B::float_unfold(t, d, size, step))
    }

    // Overridden (speed): the default assigns every input into an empty tensor.
    fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> {
        outer::cat::<B>(tensors, dim)
            .unwrap_or_else(|ts| view::cat::<B, Float>(ts, dim, B::float_cat))
    }

    // --- indexing ----------------------------------------------------------------------------
    fn float_gather(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        indexing::gather::<B, Float>(dim, tensor, indices)
    }

    fn float_scatter_add(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        indexing::scatter::<B, Float>(dim, tensor, indices, value, B::float_scatter_add)
    }

    fn float_scatter_nd(
        data: FloatTensor<Self>,
        indices: IntTensor<Self>,
        values: FloatTensor<Self>,
        reduction: IndexingUpdateOp,
    ) -> FloatTensor<Self> {
        indexing::scatter_nd::<B, Float>(data, indices, values, |d, i, v| {
            B::float_scatter_nd(d, i, v, reduction)
        })
    }

    fn float_gather_nd(data: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        indexing::gather_nd::<B, Float>(data, indices, B::float_gather_nd)
    }

    fn float_select(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        outer::select::<B>(tensor, dim, indices)
            .unwrap_or_else(|(t, i)| indexing::select::<B, Float>(t, dim, i))
    }

    fn float_select_add(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        indexing::select_add::<B, Float>(
            tensor,
            dim,
            indices,
            value,
            B::float_select_add,
            B::float_scatter_add,
        )
    }

    fn float_slice_assign(
        tensor: FloatTensor<Self>,
        slices: &[Slice],
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        indexing::slice_assign::<B, Float>(tensor, slices, value, B::float_slice_assign)
    }

    fn float_mask_where(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        indexing::mask_where::<B, Float>(tensor, mask, value, B::float_mask_where)
    }

    fn float_mask_fill(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> FloatTensor<Self> {
        indexing::mask_fill::<B, Float>(tensor, mask, |t, m| B::float_mask_fill(t, m, value))
    }

    // --- reductions and scans ----------------------------------------------------------------
    fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        outer::sum::<B>(tensor)
            .unwrap_or_else(|t| reduce::all::<B, Float>(t, B::float_sum, B::float_sum_dim, 0.0))
    }

    fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        outer::sum_dim::<B>(tensor, dim, false)
            .unwrap_or_else(|t| reduce::reduce_dim_or::<B, Float>(t, dim, B::float_sum_dim, 0.0))
    }

    fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        outer::sum_dim::<B>(tensor, dim, true).unwrap_or_else(|t| {
            reduce::reduce_dim_or::<B, Float>(t, dim, B::float_mean_dim, f64::NAN)
        })
    }

    dim_ops!(FloatTensor, Float; float_cumsum, float_cumprod, float_cummin, float_cummax);

    fn float_argmax(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, |t, d| B::float_argmax(t, d, out_dtype))
    }

    fn float_argmin(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, |t, d| B::float_argmin(t, d, out_dtype))
    }

    fn float_argtopk(
        tensor: FloatTensor<Self>,
        dim: usize,
        k: usize,
        out_dtype: IntDType,
    ) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, |t, d| B::float_argtopk(t, d, k, out_dtype))
    }

    // Fix (found by the loop oracle, tests/oracle/derived.rs `float_sort`, `float_argsort`,
    // `float_sort_with_indices`, `float_topk`): Burn's default sort reads the data back to the
    // host, which panics on a batched tensor inside vmap. Sorting works lane by lane along one
    // logical dim, so it batches like the other `*_dim` ops; `float_topk` builds on it.
    fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, |t, d| B::float_sort(t, d, descending))
    }

    fn float_sort_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        descending: bool,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        let (inner, bdims) = tensor.into_parts();
        let inner = crate::compat::kernel_layout::<B, Float>(inner);
        let (values, indices) =
            B::float_sort_with_indices(inner, dim + bdims.len(), descending, indices_dtype);
        (
            VmapTensor::new(values, bdims.clone()),
            VmapTensor::new(indices, bdims),
        )
    }

    fn float_argsort(
        tensor: FloatTensor<Self>,
        dim: usize,
        descending: bool,
        out_dtype: IntDType,
    ) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, |t, d| {
            B::float_argsort(t, d, descending, out_dtype)
        })
    }
}
