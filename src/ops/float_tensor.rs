//! `FloatTensorOps` for `Vmap<B>`.

use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor};
use burn_backend::{FloatDType, IntDType, Scalar, Shape, Slice, TensorData, TensorMetadata};

use super::macros::*;
use crate::Vmap;
use crate::physical::{Float, Int};
use crate::rules::constant::{self, Product};
use crate::rules::{create, elementwise, factored, indexing, linalg, module, reduce, view};

impl<B: Backend> FloatTensorOps<Self> for Vmap<B> {
    shared_ops!(float);

    // --- creation: new tensors are unbatched --------------------------------------------------

    // Overridden (speed): the defaults build constants on the host. A constant is made when an
    // op reads it, at the batch shape when a batched scatter writes into it (`create::fill`).
    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        create::fill(
            shape,
            fill_value,
            |s| B::float_empty(s, device, dtype),
            |s, value, like| B::float_full(s, value, &like.device(), like.dtype().into()),
        )
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        Self::float_full(shape, Scalar::Float(0.0), device, dtype)
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        Self::float_full(shape, Scalar::Float(1.0), device, dtype)
    }

    // --- casts -----------------------------------------------------------------------------
    // A factored product stays factored (its factors cast: `rules::factored::cast`); otherwise
    // the unary rule.
    fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        factored::cast::<B>(tensor, dtype)
            .unwrap_or_else(|t| elementwise::unary(t, |t| B::float_cast(t, dtype)))
    }

    fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        elementwise::unary(tensor, |t| B::float_into_int(t, out_dtype))
    }

    // --- elementwise -----------------------------------------------------------------------
    broadcasting_ops!(FloatTensor, Float; float_sub);

    // Overridden (speed): the default composes eight elementwise ops; the inner backend's own
    // kernel (or its default) runs once. It broadcasts like the other binary ops.
    broadcasting_ops!(FloatTensor, Float; float_hypot);

    // `float_add`, `float_mul` and `float_div` keep factored products factored where they can
    // (see `rules::factored`); otherwise the broadcasting rule.
    fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        factored::add::<B>(lhs, rhs).unwrap_or_else(|(lhs, rhs)| {
            unbatched!(lhs, rhs => B::float_add(lhs, rhs));
            elementwise::binary::<B, Float, Float, _>(lhs, rhs, B::float_add)
        })
    }

    // A product with a constant folds (`rules::constant`): a constant, or `x` times a scalar.
    fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        let device = lhs.device();
        let views = || crate::compat::scales_broadcast_views::<B>(&device);
        let (lhs, rhs) = match constant::mul(lhs, rhs, views) {
            Product::Constant(c) => return c,
            Product::Scaled { x, shape, by } => {
                let x = if x.shape() == shape {
                    x
                } else {
                    Self::float_expand(x, shape)
                };
                return Self::float_mul_scalar(x, by);
            }
            Product::Neither(lhs, rhs) => (lhs, rhs),
        };
        factored::mul::<B>(lhs, rhs).unwrap_or_else(|(lhs, rhs)| {
            unbatched!(lhs, rhs => B::float_mul(lhs, rhs));
            elementwise::binary::<B, Float, Float, _>(lhs, rhs, B::float_mul)
        })
    }

    fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        factored::div::<B>(lhs, rhs).unwrap_or_else(|(lhs, rhs)| {
            unbatched!(lhs, rhs => B::float_div(lhs, rhs));
            elementwise::binary::<B, Float, Float, _>(lhs, rhs, B::float_div)
        })
    }

    // Overridden (launches): a product or quotient by 1 (a mean over one element, its backward,
    // a clipping bound of 1) is the operand itself, exactly (IEEE `x * 1 == x`, NaN and -0
    // included): no kernel.
    fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        if is_one(rhs) {
            return lhs;
        }
        let lhs = match constant::mul_scalar(lhs, rhs) {
            Ok(folded) => return folded,
            Err(lhs) => lhs,
        };
        factored::scalar::<B>(lhs, rhs, false)
            .unwrap_or_else(|t| elementwise::unary(t, |t| B::float_mul_scalar(t, rhs)))
    }

    fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        if is_one(rhs) {
            return lhs;
        }
        factored::scalar::<B>(lhs, rhs, true)
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

    // Overridden (speed): the defaults compare, then fill through the mask (two batched ops
    // and a device-settings lookup, 8 µs on a `[64]` tensor on Flex); the inner backend's own
    // clamp runs once.
    scalar_ops!(FloatTensor; float_clamp_min, float_clamp_max);
    fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::float_clamp(t, min, max))
    }

    // Overridden (speed): the default is `mul_scalar(-1)`, one more kernel for nothing. A
    // constant's negation is a constant (`rules::constant`).
    fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        constant::neg(tensor).unwrap_or_else(|t| elementwise::unary(t, B::float_neg))
    }

    comparison_ops!(FloatTensor, Float;
        float_equal, float_greater, float_greater_equal, float_lower, float_lower_equal);
    comparison_scalar_ops!(FloatTensor;
        float_equal_elem, float_greater_elem, float_greater_equal_elem, float_lower_elem,
        float_lower_equal_elem);

    // --- linear algebra ----------------------------------------------------------------------
    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        unbatched!(lhs, rhs => B::float_matmul(lhs, rhs));
        linalg::matmul::<B, Float>(lhs, rhs, B::float_matmul, B::float_mul)
    }

    // A rule of its own: the default composes other ops and samples bilinearly only (nearest
    // was `unimplemented!` under vmap while the inner backend has it). The batch dims of the
    // input and of the grid fold into their shared `N`.
    fn float_grid_sample_2d(
        tensor: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        options: burn_backend::ops::GridSampleOptions,
    ) -> FloatTensor<Self> {
        let (fold, [x, g]) = module::fold_all::<B, Float, 2>([tensor, grid]);
        fold.unfold::<B, Float>(B::float_grid_sample_2d(x, g, options))
    }

    fn float_cross(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        dim: usize,
    ) -> FloatTensor<Self> {
        unbatched!(lhs, rhs => B::float_cross(lhs, rhs, dim));
        elementwise::binary_materialized::<B, Float, Float, _>(lhs, rhs, |l, r, nb| {
            B::float_cross(l, r, dim + nb)
        })
    }

    // Overridden (speed): the default assigns every input into an empty tensor.
    fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> {
        factored::cat::<B>(tensors, dim)
            .unwrap_or_else(|ts| view::cat::<B, Float>(ts, dim, B::float_cat))
    }

    fn float_select(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        factored::select::<B>(tensor, dim, indices)
            .unwrap_or_else(|(t, i)| indexing::select::<B, Float>(t, dim, i))
    }

    // --- reductions and scans ----------------------------------------------------------------
    fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        factored::sum::<B>(tensor)
            .unwrap_or_else(|t| reduce::all::<B, Float>(t, B::float_sum, B::float_sum_dim, 0.0))
    }

    fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        factored::sum_dim::<B>(tensor, dim, false)
            .unwrap_or_else(|t| reduce::reduce_dim_or::<B, Float>(t, dim, B::float_sum_dim, 0.0))
    }

    // Overridden (speed): the default sums one dim at a time; one inner `float_sum_dims`, unless
    // the tensor is a factored product, whose sums over single dims keep it factored.
    fn float_sum_dims(tensor: FloatTensor<Self>, dims: &[usize]) -> FloatTensor<Self> {
        if tensor.is_factored() || dims.is_empty() {
            return dims
                .iter()
                .fold(tensor, |t, &dim| Self::float_sum_dim(t, dim));
        }
        reduce::sum_dims::<B>(tensor, dims)
    }

    fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        factored::sum_dim::<B>(tensor, dim, true).unwrap_or_else(|t| {
            reduce::reduce_dim_or::<B, Float>(t, dim, B::float_mean_dim, f64::NAN)
        })
    }

    // Fix (found by the loop oracle, tests/engine/reduce.rs): Burn's default products are
    // `exp(sum(log x))`, NaN for a negative factor; the inner backend's own products (Flex has
    // them), and 1 over no element as `float_sum`'s 0.
    fn float_prod(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        reduce::all::<B, Float>(tensor, B::float_prod, B::float_prod_dim, 1.0)
    }

    fn float_prod_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        reduce::reduce_dim_or::<B, Float>(tensor, dim, B::float_prod_dim, 1.0)
    }

    dim_ops!(FloatTensor, Float; float_cumsum, float_cumprod, float_cummin, float_cummax);

    arg_ops!(FloatTensor, Float; float_argmax, float_argmin);

    // Overridden (launches): the defaults are an arg-max and a gather, two kernels; the inner
    // backend's own, one where it has one.
    fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, B::float_max_dim)
    }

    fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, B::float_min_dim)
    }

    fn float_max_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reduce::reduce_dim_pair::<B, Float, _, _>(tensor, dim, |t, d| {
            B::float_max_dim_with_indices(t, d, indices_dtype)
        })
    }

    fn float_min_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reduce::reduce_dim_pair::<B, Float, _, _>(tensor, dim, |t, d| {
            B::float_min_dim_with_indices(t, d, indices_dtype)
        })
    }

    // Overridden (speed): the default sorts the whole dim; the inner backend's own arg-top-k.
    fn float_argtopk(
        tensor: FloatTensor<Self>,
        dim: usize,
        k: usize,
        out_dtype: IntDType,
    ) -> IntTensor<Self> {
        reduce::topk::<B, Float, Int>(tensor, dim, |t, d| B::float_argtopk(t, d, k, out_dtype))
    }

    // Overridden (speed): the default sorts the whole dim (through `float_argsort`) and keeps
    // `k`; the inner backend's own top-k runs once for the whole batch.
    fn float_topk(tensor: FloatTensor<Self>, dim: usize, k: usize) -> FloatTensor<Self> {
        reduce::topk::<B, Float, Float>(tensor, dim, |t, d| B::float_topk(t, d, k))
    }

    // Overridden (speed): as `float_topk`.
    fn float_topk_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        k: usize,
        out_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reduce::topk_pair::<B, Float>(tensor, dim, |t, d| {
            B::float_topk_with_indices(t, d, k, out_dtype)
        })
    }

    // Fix (found by the loop oracle, tests/oracle/derived.rs `float_sort`, `float_argsort`,
    // `float_sort_with_indices`, `float_topk`, on Burn 0.21): Burn's default sort reads the data
    // back to the host, which panics on a batched tensor inside vmap (and cannot run on the
    // capture backend). Sorting works lane by lane along one logical dim, so it batches like the
    // other `*_dim` ops, on the inner backend's sort.
    fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self> {
        reduce::reduce_dim::<B, Float, _>(tensor, dim, |t, d| B::float_sort(t, d, descending))
    }

    fn float_sort_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        descending: bool,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reduce::reduce_dim_pair::<B, Float, _, _>(tensor, dim, |t, d| {
            B::float_sort_with_indices(t, d, descending, indices_dtype)
        })
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

/// Whether `s` is the number 1 (a product by it is the identity).
fn is_one(s: Scalar) -> bool {
    match s {
        Scalar::Float(v) => v == 1.0,
        Scalar::Int(v) => v == 1,
        Scalar::UInt(v) => v == 1,
        Scalar::Bool(_) => false,
    }
}
