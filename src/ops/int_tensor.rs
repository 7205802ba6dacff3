//! `IntTensorOps` for `Vmap<B>`: batched ints work as values and as indices.

use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::IntTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor};
use burn_backend::{FloatDType, IntDType, Shape, Slice, TensorData};

use super::macros::*;
use crate::Vmap;
use crate::physical::Int;
use crate::rules::{elementwise, linalg, reduce};

impl<B: Backend> IntTensorOps<Self> for Vmap<B> {
    shared_ops!(int);

    // --- creation: new tensors are unbatched --------------------------------------------------

    // --- casts -----------------------------------------------------------------------------
    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::int_into_float(t, out_dtype))
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

    // Overridden (exactness): the defaults go through `float_powf`, the inner backend's own
    // kernels stay in integers. They differ where the float path is wrong: cubecl 0.22.1's
    // `powf(0, 0)` is 0, so the default gave `0^0 = 0` where the loop (cubecl's `int_powi`)
    // gives 1.
    materializing_ops!(IntTensor, Int; int_powi);
    scalar_ops!(IntTensor; int_powi_scalar_impl);
    unary_ops!(IntTensor; int_abs, bitwise_not);

    // Overridden (speed): as the float clamps (`ops::float_tensor`), one inner clamp instead of
    // a comparison and a masked fill.
    scalar_ops!(IntTensor; int_clamp_min, int_clamp_max);
    fn int_clamp(
        tensor: IntTensor<Self>,
        min: burn_backend::Scalar,
        max: burn_backend::Scalar,
    ) -> IntTensor<Self> {
        elementwise::unary(tensor, |t| B::int_clamp(t, min, max))
    }

    // Overridden (speed): the default is `int_powi_scalar(2)`; the inner backend's own kernel.
    unary_ops!(IntTensor; int_square);

    comparison_ops!(IntTensor, Int;
        int_equal, int_greater, int_greater_equal, int_lower, int_lower_equal);
    comparison_scalar_ops!(IntTensor;
        int_equal_elem, int_greater_elem, int_greater_equal_elem, int_lower_elem,
        int_lower_equal_elem);

    fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        unbatched!(lhs, rhs => B::int_matmul(lhs, rhs));
        linalg::matmul::<B, Int>(lhs, rhs, B::int_matmul, B::int_mul)
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

    // Overridden (speed): the default sorts the whole dim; the inner backend's own arg-top-k.
    fn int_argtopk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        reduce::topk::<B, Int, Int>(tensor, dim, |t, d| B::int_argtopk(t, d, k))
    }

    // Overridden (speed): as `float_topk`.
    fn int_topk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        reduce::topk::<B, Int, Int>(tensor, dim, |t, d| B::int_topk(t, d, k))
    }

    // Overridden (speed): as `float_topk`.
    fn int_topk_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        k: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        reduce::topk_pair::<B, Int>(tensor, dim, |t, d| B::int_topk_with_indices(t, d, k))
    }

    // Fix (found by the loop oracle, tests/oracle/derived.rs `int_sort`, on Burn 0.21): as
    // `float_sort`, Burn's default reads the data back to the host, which panics on a batched
    // tensor.
    fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Int, _>(tensor, dim, |t, d| B::int_sort(t, d, descending))
    }

    fn int_sort_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        descending: bool,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        reduce::reduce_dim_pair::<B, Int, _, _>(tensor, dim, |t, d| {
            B::int_sort_with_indices(t, d, descending)
        })
    }

    fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        reduce::reduce_dim::<B, Int, _>(tensor, dim, |t, d| B::int_argsort(t, d, descending))
    }
}
