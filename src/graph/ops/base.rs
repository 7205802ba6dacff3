//! `BaseOperationIr`: the shape, indexing and comparison ops every kind has.

use burn_backend::backend::Backend;
use burn_backend::tensor::IndexingUpdateOp;
use burn_ir::BaseOperationIr as Base;

use super::super::env::Env;
use super::*;
use crate::VmapError;

pub(super) fn base_float<B: Backend>(e: &mut Env<B>, op: &Base) -> Result<(), VmapError> {
    match op {
        Base::Reshape(d) => un!(e, d: f -> put_f, |x| B::float_reshape(x, d.out.shape.clone())),
        Base::SwapDims(d) => un!(e, d: f -> put_f, |x| B::float_swap_dims(x, d.dim1, d.dim2)),
        Base::Permute(d) => un!(e, d: f -> put_f, |x| B::float_permute(x, &d.axes)),
        Base::Flip(d) => un!(e, d: f -> put_f, |x| B::float_flip(x, &d.axes)),
        Base::Expand(d) => un!(e, d: f -> put_f, |x| B::float_expand(x, d.out.shape.clone())),
        Base::Unfold(d) => un!(e, d: f -> put_f, |x| B::float_unfold(x, d.dim, d.size, d.step)),
        Base::Slice(d) => {
            let x = e.f(&d.tensor);
            e.put_f(&d.out, B::float_slice(x, &d.ranges))
        }
        Base::SliceAssign(d) => {
            let (x, v) = (e.f(&d.tensor), e.f(&d.value));
            e.put_f(&d.out, B::float_slice_assign(x, &d.ranges, v))
        }
        Base::Gather(d) => {
            let (x, i) = (e.f(&d.tensor), e.i(&d.indices));
            e.put_f(&d.out, B::float_gather(d.dim, x, i))
        }
        Base::Scatter(d) => {
            let (x, i, v) = (e.f(&d.tensor), e.i(&d.indices), e.f(&d.value));
            e.put_f(&d.out, B::float_scatter(d.dim, x, i, v, d.update))
        }
        Base::ScatterNd(d) => {
            let (x, i, v) = (e.f(&d.data), e.i(&d.indices), e.f(&d.values));
            e.put_f(&d.out, B::float_scatter_nd(x, i, v, d.reduction))
        }
        Base::GatherNd(d) => {
            let (x, i) = (e.f(&d.data), e.i(&d.indices));
            e.put_f(&d.out, B::float_gather_nd(x, i))
        }
        Base::Select(d) => {
            let (x, i) = (e.f(&d.tensor), e.i(&d.indices));
            e.put_f(&d.out, B::float_select(x, d.dim, i))
        }
        Base::SelectAssign(d) => {
            let (x, i, v) = (e.f(&d.tensor), e.i(&d.indices), e.f(&d.value));
            e.put_f(&d.out, B::float_select_assign(x, d.dim, i, v, d.update))
        }
        Base::MaskWhere(d) => {
            let (x, m, v) = (e.f(&d.tensor), e.b(&d.mask), e.f(&d.value));
            e.put_f(&d.out, B::float_mask_where(x, m, v))
        }
        Base::MaskFill(d) => {
            let (x, m) = (e.f(&d.tensor), e.b(&d.mask));
            e.put_f(&d.out, B::float_mask_fill(x, m, d.value.into()))
        }
        Base::Equal(d) => cmp!(e, d: f, B::float_equal),
        Base::EqualElem(d) => cmp_sc!(e, d: f, B::float_equal_elem),
        Base::NotEqual(d) => cmp!(e, d: f, B::float_not_equal),
        Base::NotEqualElem(d) => cmp_sc!(e, d: f, B::float_not_equal_elem),
        Base::RepeatDim(d) => {
            let x = e.f(&d.tensor);
            e.put_f(&d.out, B::float_repeat_dim(x, d.dim, d.times))
        }
        Base::Cat(d) => {
            let xs = d.tensors.iter().map(|t| e.f(t)).collect();
            e.put_f(&d.out, B::float_cat(xs, d.dim))
        }
        Base::Cast(d) => un!(e, d: f -> put_f, |x| B::float_cast(x, d.out.dtype.into())),
        Base::Empty(d) => {
            let t = B::float_empty(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_f(&d.out, t)
        }
        Base::Ones(d) => {
            let t = B::float_ones(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_f(&d.out, t)
        }
        Base::Zeros(d) => {
            let t = B::float_zeros(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_f(&d.out, t)
        }
        Base::All(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: f -> put_b, |x| B::float_all(x, dtype))
        }
        Base::Any(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: f -> put_b, |x| B::float_any(x, dtype))
        }
        Base::AllDim(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: f -> put_b, |x| B::float_all_dim(x, d.axis, dtype))
        }
        Base::AnyDim(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: f -> put_b, |x| B::float_any_dim(x, d.axis, dtype))
        }
    }
    Ok(())
}

pub(super) fn base_int<B: Backend>(e: &mut Env<B>, op: &Base) -> Result<(), VmapError> {
    match op {
        Base::Reshape(d) => un!(e, d: i -> put_i, |x| B::int_reshape(x, d.out.shape.clone())),
        Base::SwapDims(d) => un!(e, d: i -> put_i, |x| B::int_swap_dims(x, d.dim1, d.dim2)),
        Base::Permute(d) => un!(e, d: i -> put_i, |x| B::int_permute(x, &d.axes)),
        Base::Flip(d) => un!(e, d: i -> put_i, |x| B::int_flip(x, &d.axes)),
        Base::Expand(d) => un!(e, d: i -> put_i, |x| B::int_expand(x, d.out.shape.clone())),
        Base::Unfold(d) => un!(e, d: i -> put_i, |x| B::int_unfold(x, d.dim, d.size, d.step)),
        Base::Slice(d) => {
            let x = e.i(&d.tensor);
            e.put_i(&d.out, B::int_slice(x, &d.ranges))
        }
        Base::SliceAssign(d) => {
            let (x, v) = (e.i(&d.tensor), e.i(&d.value));
            e.put_i(&d.out, B::int_slice_assign(x, &d.ranges, v))
        }
        Base::Gather(d) => {
            let (x, i) = (e.i(&d.tensor), e.i(&d.indices));
            e.put_i(&d.out, B::int_gather(d.dim, x, i))
        }
        Base::Scatter(d) => {
            let (x, i, v) = (e.i(&d.tensor), e.i(&d.indices), e.i(&d.value));
            e.put_i(&d.out, B::int_scatter(d.dim, x, i, v, d.update))
        }
        Base::ScatterNd(d) => {
            let (x, i, v) = (e.i(&d.data), e.i(&d.indices), e.i(&d.values));
            e.put_i(&d.out, B::int_scatter_nd(x, i, v, d.reduction))
        }
        Base::GatherNd(d) => {
            let (x, i) = (e.i(&d.data), e.i(&d.indices));
            e.put_i(&d.out, B::int_gather_nd(x, i))
        }
        Base::Select(d) => {
            let (x, i) = (e.i(&d.tensor), e.i(&d.indices));
            e.put_i(&d.out, B::int_select(x, d.dim, i))
        }
        Base::SelectAssign(d) => {
            let (x, i, v) = (e.i(&d.tensor), e.i(&d.indices), e.i(&d.value));
            e.put_i(&d.out, B::int_select_assign(x, d.dim, i, v, d.update))
        }
        Base::MaskWhere(d) => {
            let (x, m, v) = (e.i(&d.tensor), e.b(&d.mask), e.i(&d.value));
            e.put_i(&d.out, B::int_mask_where(x, m, v))
        }
        Base::MaskFill(d) => {
            let (x, m) = (e.i(&d.tensor), e.b(&d.mask));
            e.put_i(&d.out, B::int_mask_fill(x, m, d.value.into()))
        }
        Base::Equal(d) => cmp!(e, d: i, B::int_equal),
        Base::EqualElem(d) => cmp_sc!(e, d: i, B::int_equal_elem),
        Base::NotEqual(d) => cmp!(e, d: i, B::int_not_equal),
        Base::NotEqualElem(d) => cmp_sc!(e, d: i, B::int_not_equal_elem),
        Base::RepeatDim(d) => {
            let x = e.i(&d.tensor);
            e.put_i(&d.out, B::int_repeat_dim(x, d.dim, d.times))
        }
        Base::Cat(d) => {
            let xs = d.tensors.iter().map(|t| e.i(t)).collect();
            e.put_i(&d.out, B::int_cat(xs, d.dim))
        }
        Base::Cast(d) => un!(e, d: i -> put_i, |x| B::int_cast(x, d.out.dtype.into())),
        Base::Empty(d) => {
            let t = B::int_empty(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_i(&d.out, t)
        }
        Base::Ones(d) => {
            let t = B::int_ones(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_i(&d.out, t)
        }
        Base::Zeros(d) => {
            let t = B::int_zeros(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_i(&d.out, t)
        }
        Base::All(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: i -> put_b, |x| B::int_all(x, dtype))
        }
        Base::Any(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: i -> put_b, |x| B::int_any(x, dtype))
        }
        Base::AllDim(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: i -> put_b, |x| B::int_all_dim(x, d.axis, dtype))
        }
        Base::AnyDim(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: i -> put_b, |x| B::int_any_dim(x, d.axis, dtype))
        }
    }
    Ok(())
}

pub(super) fn base_bool<B: Backend>(e: &mut Env<B>, op: &Base) -> Result<(), VmapError> {
    match op {
        Base::Reshape(d) => un!(e, d: b -> put_b, |x| B::bool_reshape(x, d.out.shape.clone())),
        Base::SwapDims(d) => un!(e, d: b -> put_b, |x| B::bool_swap_dims(x, d.dim1, d.dim2)),
        Base::Permute(d) => un!(e, d: b -> put_b, |x| B::bool_permute(x, &d.axes)),
        Base::Flip(d) => un!(e, d: b -> put_b, |x| B::bool_flip(x, &d.axes)),
        Base::Expand(d) => un!(e, d: b -> put_b, |x| B::bool_expand(x, d.out.shape.clone())),
        Base::Unfold(d) => un!(e, d: b -> put_b, |x| B::bool_unfold(x, d.dim, d.size, d.step)),
        Base::Slice(d) => {
            let x = e.b(&d.tensor);
            e.put_b(&d.out, B::bool_slice(x, &d.ranges))
        }
        Base::SliceAssign(d) => {
            let (x, v) = (e.b(&d.tensor), e.b(&d.value));
            e.put_b(&d.out, B::bool_slice_assign(x, &d.ranges, v))
        }
        Base::Gather(d) => {
            let (x, i) = (e.b(&d.tensor), e.i(&d.indices));
            e.put_b(&d.out, B::bool_gather(d.dim, x, i))
        }
        Base::Scatter(d) if d.update == IndexingUpdateOp::Add => {
            let (x, i, v) = (e.b(&d.tensor), e.i(&d.indices), e.b(&d.value));
            e.put_b(&d.out, B::bool_scatter_or(d.dim, x, i, v))
        }
        Base::Select(d) => {
            let (x, i) = (e.b(&d.tensor), e.i(&d.indices));
            e.put_b(&d.out, B::bool_select(x, d.dim, i))
        }
        Base::SelectAssign(d) if d.update == IndexingUpdateOp::Add => {
            let (x, i, v) = (e.b(&d.tensor), e.i(&d.indices), e.b(&d.value));
            e.put_b(&d.out, B::bool_select_or(x, d.dim, i, v))
        }
        Base::MaskWhere(d) => {
            let (x, m, v) = (e.b(&d.tensor), e.b(&d.mask), e.b(&d.value));
            e.put_b(&d.out, B::bool_mask_where(x, m, v))
        }
        Base::MaskFill(d) => {
            let (x, m) = (e.b(&d.tensor), e.b(&d.mask));
            e.put_b(&d.out, B::bool_mask_fill(x, m, d.value.into()))
        }
        Base::Equal(d) => bin!(e, d: b -> put_b, B::bool_equal),
        Base::EqualElem(d) => sc!(e, d: b -> put_b, B::bool_equal_elem),
        Base::NotEqual(d) => bin!(e, d: b -> put_b, B::bool_not_equal),
        Base::NotEqualElem(d) => sc!(e, d: b -> put_b, B::bool_not_equal_elem),
        Base::RepeatDim(d) => {
            let x = e.b(&d.tensor);
            e.put_b(&d.out, B::bool_repeat_dim(x, d.dim, d.times))
        }
        Base::Cat(d) => {
            let xs = d.tensors.iter().map(|t| e.b(t)).collect();
            e.put_b(&d.out, B::bool_cat(xs, d.dim))
        }
        Base::Empty(d) => {
            let t = B::bool_empty(d.out.shape.clone(), &e.device, e.bool_out(d.out.dtype));
            e.put_b(&d.out, t)
        }
        Base::Ones(d) => {
            let t = B::bool_ones(d.out.shape.clone(), &e.device, e.bool_out(d.out.dtype));
            e.put_b(&d.out, t)
        }
        Base::Zeros(d) => {
            let t = B::bool_zeros(d.out.shape.clone(), &e.device, e.bool_out(d.out.dtype));
            e.put_b(&d.out, t)
        }
        Base::All(d) => un!(e, d: b -> put_b, B::bool_all),
        Base::Any(d) => un!(e, d: b -> put_b, B::bool_any),
        Base::AllDim(d) => un!(e, d: b -> put_b, |x| B::bool_all_dim(x, d.axis)),
        Base::AnyDim(d) => un!(e, d: b -> put_b, |x| B::bool_any_dim(x, d.axis)),
        Base::Cast(_)
        | Base::Scatter(_)
        | Base::SelectAssign(_)
        | Base::ScatterNd(_)
        | Base::GatherNd(_) => unsupported(
            &format!("bool {op:?}"),
            "Burn records no such bool operation; this graph did not come from Burn 0.22.1",
        )?,
    }
    Ok(())
}
