//! `NumericOperationIr`: arithmetic, reductions, comparisons, sorts of floats and ints.

use burn_backend::backend::Backend;
use burn_ir::NumericOperationIr as Num;

use super::super::env::Env;
use super::*;
use crate::VmapError;

pub(super) fn numeric_float<B: Backend>(e: &mut Env<B>, op: &Num) {
    match op {
        Num::Add(d) => bin!(e, d: f -> put_f, B::float_add),
        Num::AddScalar(d) => sc!(e, d: f -> put_f, B::float_add_scalar),
        Num::Sub(d) => bin!(e, d: f -> put_f, B::float_sub),
        Num::SubScalar(d) => sc!(e, d: f -> put_f, B::float_sub_scalar),
        Num::Div(d) => bin!(e, d: f -> put_f, B::float_div),
        Num::DivScalar(d) => sc!(e, d: f -> put_f, B::float_div_scalar),
        Num::Rem(d) => bin!(e, d: f -> put_f, B::float_remainder),
        Num::RemScalar(d) => sc!(e, d: f -> put_f, B::float_remainder_scalar),
        Num::Mul(d) => bin!(e, d: f -> put_f, B::float_mul),
        Num::MulScalar(d) => sc!(e, d: f -> put_f, B::float_mul_scalar),
        Num::Abs(d) => un!(e, d: f -> put_f, B::float_abs),
        Num::Full(d) => {
            let shape = d.out.shape.clone();
            let t = B::float_full(shape, d.value.into(), &e.device, d.out.dtype.into());
            e.put_f(&d.out, t)
        }
        Num::MeanDim(d) => dim!(e, d: f -> put_f, B::float_mean_dim),
        Num::Mean(d) => un!(e, d: f -> put_f, B::float_mean),
        Num::Sum(d) => un!(e, d: f -> put_f, B::float_sum),
        Num::SumDim(d) => dim!(e, d: f -> put_f, B::float_sum_dim),
        Num::SumDims(d) => un!(e, d: f -> put_f, |x| B::float_sum_dims(x, &d.axes)),
        Num::Prod(d) => un!(e, d: f -> put_f, B::float_prod),
        Num::ProdDim(d) => dim!(e, d: f -> put_f, B::float_prod_dim),
        Num::Greater(d) => cmp!(e, d: f, B::float_greater),
        Num::GreaterElem(d) => cmp_sc!(e, d: f, B::float_greater_elem),
        Num::GreaterEqual(d) => cmp!(e, d: f, B::float_greater_equal),
        Num::GreaterEqualElem(d) => cmp_sc!(e, d: f, B::float_greater_equal_elem),
        Num::Lower(d) => cmp!(e, d: f, B::float_lower),
        Num::LowerElem(d) => cmp_sc!(e, d: f, B::float_lower_elem),
        Num::LowerEqual(d) => cmp!(e, d: f, B::float_lower_equal),
        Num::LowerEqualElem(d) => cmp_sc!(e, d: f, B::float_lower_equal_elem),
        Num::ArgMax(d) => un!(e, d: f -> put_i, |x| B::float_argmax(x, d.axis, d.out.dtype.into())),
        Num::ArgMin(d) => un!(e, d: f -> put_i, |x| B::float_argmin(x, d.axis, d.out.dtype.into())),
        // The IR stores `k` in `accumulator_len`.
        Num::ArgTopK(d) => un!(e, d: f -> put_i, |x| {
            B::float_argtopk(x, d.axis, d.accumulator_len, d.out.dtype.into())
        }),
        Num::TopK(d) => un!(e, d: f -> put_f, |x| B::float_topk(x, d.axis, d.accumulator_len)),
        Num::TopKWithIndices(d) => {
            let x = e.f(&d.tensor);
            let (v, i) = B::float_topk_with_indices(x, d.dim, d.k, d.out_indices.dtype.into());
            e.put_f(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::Max(d) => un!(e, d: f -> put_f, B::float_max),
        Num::Min(d) => un!(e, d: f -> put_f, B::float_min),
        Num::MaxDim(d) => dim!(e, d: f -> put_f, B::float_max_dim),
        Num::MinDim(d) => dim!(e, d: f -> put_f, B::float_min_dim),
        Num::MaxDimWithIndices(d) => {
            let x = e.f(&d.tensor);
            let (v, i) = B::float_max_dim_with_indices(x, d.dim, d.out_indices.dtype.into());
            e.put_f(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::MinDimWithIndices(d) => {
            let x = e.f(&d.tensor);
            let (v, i) = B::float_min_dim_with_indices(x, d.dim, d.out_indices.dtype.into());
            e.put_f(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::MaxAbs(d) => un!(e, d: f -> put_f, B::float_max_abs),
        Num::MaxAbsDim(d) => dim!(e, d: f -> put_f, B::float_max_abs_dim),
        Num::Clamp(d) => {
            let x = e.f(&d.tensor);
            e.put_f(&d.out, B::float_clamp(x, d.min.into(), d.max.into()))
        }
        Num::ClampMin(d) => sc!(e, d: f -> put_f, B::float_clamp_min),
        Num::ClampMax(d) => sc!(e, d: f -> put_f, B::float_clamp_max),
        Num::Powi(d) => {
            let (l, r) = (e.f(&d.lhs), e.i(&d.rhs));
            e.put_f(&d.out, B::float_powi(l, r))
        }
        Num::PowiScalar(d) => sc!(e, d: f -> put_f, B::float_powi_scalar),
        Num::CumSum(d) => dim!(e, d: f -> put_f, B::float_cumsum),
        Num::CumProd(d) => dim!(e, d: f -> put_f, B::float_cumprod),
        Num::CumMin(d) => dim!(e, d: f -> put_f, B::float_cummin),
        Num::CumMax(d) => dim!(e, d: f -> put_f, B::float_cummax),
        Num::Neg(d) => un!(e, d: f -> put_f, B::float_neg),
        Num::Sign(d) => un!(e, d: f -> put_f, B::float_sign),
        Num::Sort(d) => un!(e, d: f -> put_f, |x| B::float_sort(x, d.dim, d.descending)),
        Num::SortWithIndices(d) => {
            let x = e.f(&d.input);
            let dtype = d.out_indices.dtype.into();
            let (v, i) = B::float_sort_with_indices(x, d.dim, d.descending, dtype);
            e.put_f(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::ArgSort(d) => un!(e, d: f -> put_i, |x| {
            B::float_argsort(x, d.dim, d.descending, d.out.dtype.into())
        }),
        Num::Pad(d) => un!(e, d: f -> put_f, |x| B::float_pad(x, &d.padding, d.mode.into())),
        // Recorded as `Float(Random)` for floats; `IntRandom` is the int variant.
        Num::IntRandom(d) => {
            let t = B::int_random(
                d.out.shape.clone(),
                d.distribution,
                &e.device,
                d.out.dtype.into(),
            );
            e.put_i(&d.out, t)
        }
    }
}

pub(super) fn numeric_int<B: Backend>(e: &mut Env<B>, op: &Num) -> Result<(), VmapError> {
    match op {
        Num::Add(d) => bin!(e, d: i -> put_i, B::int_add),
        Num::AddScalar(d) => sc!(e, d: i -> put_i, B::int_add_scalar),
        Num::Sub(d) => bin!(e, d: i -> put_i, B::int_sub),
        Num::SubScalar(d) => sc!(e, d: i -> put_i, B::int_sub_scalar),
        Num::Div(d) => bin!(e, d: i -> put_i, B::int_div),
        Num::DivScalar(d) => sc!(e, d: i -> put_i, B::int_div_scalar),
        Num::Rem(d) => bin!(e, d: i -> put_i, B::int_remainder),
        Num::RemScalar(d) => sc!(e, d: i -> put_i, B::int_remainder_scalar),
        Num::Mul(d) => bin!(e, d: i -> put_i, B::int_mul),
        Num::MulScalar(d) => sc!(e, d: i -> put_i, B::int_mul_scalar),
        Num::Abs(d) => un!(e, d: i -> put_i, B::int_abs),
        Num::Full(d) => {
            let shape = d.out.shape.clone();
            let t = B::int_full(shape, d.value.into(), &e.device, d.out.dtype.into());
            e.put_i(&d.out, t)
        }
        Num::MeanDim(d) => dim!(e, d: i -> put_i, B::int_mean_dim),
        Num::Mean(d) => un!(e, d: i -> put_i, B::int_mean),
        Num::Sum(d) => un!(e, d: i -> put_i, B::int_sum),
        Num::SumDim(d) => dim!(e, d: i -> put_i, B::int_sum_dim),
        Num::SumDims(d) => {
            let x = e.i(&d.input);
            let t = d.axes.iter().fold(x, |t, &axis| B::int_sum_dim(t, axis));
            e.put_i(&d.out, t)
        }
        Num::Prod(d) => un!(e, d: i -> put_i, B::int_prod),
        Num::ProdDim(d) => dim!(e, d: i -> put_i, B::int_prod_dim),
        Num::Greater(d) => cmp!(e, d: i, B::int_greater),
        Num::GreaterElem(d) => cmp_sc!(e, d: i, B::int_greater_elem),
        Num::GreaterEqual(d) => cmp!(e, d: i, B::int_greater_equal),
        Num::GreaterEqualElem(d) => cmp_sc!(e, d: i, B::int_greater_equal_elem),
        Num::Lower(d) => cmp!(e, d: i, B::int_lower),
        Num::LowerElem(d) => cmp_sc!(e, d: i, B::int_lower_elem),
        Num::LowerEqual(d) => cmp!(e, d: i, B::int_lower_equal),
        Num::LowerEqualElem(d) => cmp_sc!(e, d: i, B::int_lower_equal_elem),
        Num::ArgMax(d) => dim!(e, d: i -> put_i, B::int_argmax),
        Num::ArgMin(d) => dim!(e, d: i -> put_i, B::int_argmin),
        Num::ArgTopK(d) => un!(e, d: i -> put_i, |x| B::int_argtopk(x, d.axis, d.accumulator_len)),
        Num::TopK(d) => un!(e, d: i -> put_i, |x| B::int_topk(x, d.axis, d.accumulator_len)),
        Num::TopKWithIndices(d) => {
            let x = e.i(&d.tensor);
            let (v, i) = B::int_topk_with_indices(x, d.dim, d.k);
            e.put_i(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::Max(d) => un!(e, d: i -> put_i, B::int_max),
        Num::Min(d) => un!(e, d: i -> put_i, B::int_min),
        Num::MaxDim(d) => dim!(e, d: i -> put_i, B::int_max_dim),
        Num::MinDim(d) => dim!(e, d: i -> put_i, B::int_min_dim),
        Num::MaxDimWithIndices(d) => {
            let x = e.i(&d.tensor);
            let (v, i) = B::int_max_dim_with_indices(x, d.dim);
            e.put_i(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::MinDimWithIndices(d) => {
            let x = e.i(&d.tensor);
            let (v, i) = B::int_min_dim_with_indices(x, d.dim);
            e.put_i(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::MaxAbs(d) => un!(e, d: i -> put_i, B::int_max_abs),
        Num::MaxAbsDim(d) => dim!(e, d: i -> put_i, B::int_max_abs_dim),
        Num::Clamp(d) => {
            let x = e.i(&d.tensor);
            e.put_i(&d.out, B::int_clamp(x, d.min.into(), d.max.into()))
        }
        Num::ClampMin(d) => sc!(e, d: i -> put_i, B::int_clamp_min),
        Num::ClampMax(d) => sc!(e, d: i -> put_i, B::int_clamp_max),
        Num::IntRandom(d) => {
            let t = B::int_random(
                d.out.shape.clone(),
                d.distribution,
                &e.device,
                d.out.dtype.into(),
            );
            e.put_i(&d.out, t)
        }
        Num::Powi(d) => bin!(e, d: i -> put_i, B::int_powi),
        Num::PowiScalar(d) => sc!(e, d: i -> put_i, B::int_powi_scalar),
        Num::CumSum(d) => dim!(e, d: i -> put_i, B::int_cumsum),
        Num::CumProd(d) => dim!(e, d: i -> put_i, B::int_cumprod),
        Num::CumMin(d) => dim!(e, d: i -> put_i, B::int_cummin),
        Num::CumMax(d) => dim!(e, d: i -> put_i, B::int_cummax),
        Num::Neg(d) => un!(e, d: i -> put_i, B::int_neg),
        Num::Sign(d) => un!(e, d: i -> put_i, B::int_sign),
        Num::Sort(d) => un!(e, d: i -> put_i, |x| B::int_sort(x, d.dim, d.descending)),
        Num::SortWithIndices(d) => {
            let x = e.i(&d.input);
            let (v, i) = B::int_sort_with_indices(x, d.dim, d.descending);
            e.put_i(&d.out, v);
            e.put_i(&d.out_indices, i)
        }
        Num::ArgSort(d) => un!(e, d: i -> put_i, |x| B::int_argsort(x, d.dim, d.descending)),
        Num::Pad(d) => un!(e, d: i -> put_i, |x| B::int_pad(x, &d.padding, d.mode.into())),
    }
    Ok(())
}
