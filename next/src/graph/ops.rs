//! The one match over Burn's [`OperationIr`]: each captured operation becomes the backend call
//! it was recorded from, on any backend `B` (the user's own, `Vmap<B>`, `Autodiff<Vmap<B>>`).
//!
//! This is the only file that names `OperationIr`'s variants, so following a Burn release that
//! changes the IR (0.23 adds `Fmod`, attention backward, 3-D pools and removes `Distributed`) is
//! a change to this file. An operation the interpreter does not run is a typed error
//! ([`VmapError::UnsupportedOp`]), never a panic.

use burn_backend::backend::Backend;
use burn_backend::ops::UnfoldOptions;
use burn_backend::tensor::IndexingUpdateOp;
use burn_ir::{
    ActivationOperationIr as Act, BaseOperationIr as Base, BoolOperationIr as BoolOp,
    FloatOperationIr as FloatOp, IntOperationIr as IntOp, ModuleOperationIr as Module,
    NumericOperationIr as Num, OperationIr,
};

use super::env::Env;
use crate::VmapError;

/// `x -> f(x)` for an op descriptor with `input` and `out`.
macro_rules! un {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let x = $env.$get(&$d.input);
        $env.$put(&$d.out, $f(x))
    }};
}

/// `(lhs, rhs) -> f(lhs, rhs)`.
macro_rules! bin {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        let r = $env.$get(&$d.rhs);
        $env.$put(&$d.out, $f(l, r))
    }};
}

/// `(lhs, scalar) -> f(lhs, scalar)`.
macro_rules! sc {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        $env.$put(&$d.out, $f(l, $d.rhs.into()))
    }};
}

/// A comparison: `(lhs, rhs, out dtype) -> bool`.
macro_rules! cmp {
    ($env:ident, $d:ident: $get:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        let r = $env.$get(&$d.rhs);
        $env.put_b(&$d.out, $f(l, r, $d.out.dtype.into()))
    }};
}

/// A comparison with a scalar: `(lhs, scalar, out dtype) -> bool`.
macro_rules! cmp_sc {
    ($env:ident, $d:ident: $get:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        $env.put_b(&$d.out, $f(l, $d.rhs.into(), $d.out.dtype.into()))
    }};
}

/// A reduction along `axis`: `(input, axis) -> out`.
macro_rules! dim {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let x = $env.$get(&$d.input);
        $env.$put(&$d.out, $f(x, $d.axis))
    }};
}

fn unsupported(op: &str, why: &'static str) -> Result<(), VmapError> {
    Err(VmapError::UnsupportedOp {
        op: op.to_string(),
        why,
    })
}

/// Runs one captured operation on backend `B`, reading its inputs from `env` and binding its
/// outputs there.
///
/// # Errors
/// [`VmapError::UnsupportedOp`] for an operation the interpreter does not run: quantization,
/// custom operations of backend extensions, distributed operations.
pub(crate) fn execute<B: Backend>(env: &mut Env<B>, op: &OperationIr) -> Result<(), VmapError> {
    match op {
        OperationIr::BaseFloat(op) => base_float(env, op)?,
        OperationIr::BaseInt(op) => base_int(env, op)?,
        OperationIr::BaseBool(op) => base_bool(env, op)?,
        OperationIr::NumericFloat(_, op) => numeric_float(env, op),
        OperationIr::NumericInt(_, op) => numeric_int(env, op)?,
        OperationIr::Float(_, op) => float(env, op)?,
        OperationIr::Int(op) => int(env, op),
        OperationIr::Bool(op) => bool_(env, op),
        OperationIr::Module(op) => module(env, op)?,
        OperationIr::Activation(op) => activation(env, op),
        // Inputs and constants are bound before the run; Drop only manages handle lifetimes
        // (the environment frees each tensor after its last read).
        OperationIr::Init(_) | OperationIr::Drop(_) => {}
        // `custom_vmap` and `sequential_vmap` calls (a backend extension's op is an error there).
        OperationIr::Custom(op) => super::custom::execute(env, op)?,
        OperationIr::Distributed(_) => unsupported(
            "a distributed all-reduce",
            "collectives cannot run per example",
        )?,
    }
    Ok(())
}

fn base_float<B: Backend>(e: &mut Env<B>, op: &Base) -> Result<(), VmapError> {
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
        Base::All(d) => un!(e, d: f -> put_b, |x| B::float_all(x, d.out.dtype.into())),
        Base::Any(d) => un!(e, d: f -> put_b, |x| B::float_any(x, d.out.dtype.into())),
        Base::AllDim(d) => {
            un!(e, d: f -> put_b, |x| B::float_all_dim(x, d.axis, d.out.dtype.into()))
        }
        Base::AnyDim(d) => {
            un!(e, d: f -> put_b, |x| B::float_any_dim(x, d.axis, d.out.dtype.into()))
        }
    }
    Ok(())
}

fn base_int<B: Backend>(e: &mut Env<B>, op: &Base) -> Result<(), VmapError> {
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
        Base::All(d) => un!(e, d: i -> put_b, |x| B::int_all(x, d.out.dtype.into())),
        Base::Any(d) => un!(e, d: i -> put_b, |x| B::int_any(x, d.out.dtype.into())),
        Base::AllDim(d) => un!(e, d: i -> put_b, |x| B::int_all_dim(x, d.axis, d.out.dtype.into())),
        Base::AnyDim(d) => un!(e, d: i -> put_b, |x| B::int_any_dim(x, d.axis, d.out.dtype.into())),
    }
    Ok(())
}

fn base_bool<B: Backend>(e: &mut Env<B>, op: &Base) -> Result<(), VmapError> {
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
            let t = B::bool_empty(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_b(&d.out, t)
        }
        Base::Ones(d) => {
            let t = B::bool_ones(d.out.shape.clone(), &e.device, d.out.dtype.into());
            e.put_b(&d.out, t)
        }
        Base::Zeros(d) => {
            let t = B::bool_zeros(d.out.shape.clone(), &e.device, d.out.dtype.into());
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

fn numeric_float<B: Backend>(e: &mut Env<B>, op: &Num) {
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

fn numeric_int<B: Backend>(e: &mut Env<B>, op: &Num) -> Result<(), VmapError> {
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

fn float<B: Backend>(e: &mut Env<B>, op: &FloatOp) -> Result<(), VmapError> {
    match op {
        FloatOp::Exp(d) => un!(e, d: f -> put_f, B::float_exp),
        FloatOp::Log(d) => un!(e, d: f -> put_f, B::float_log),
        FloatOp::Log1p(d) => un!(e, d: f -> put_f, B::float_log1p),
        FloatOp::Erf(d) => un!(e, d: f -> put_f, B::float_erf),
        FloatOp::PowfScalar(d) => sc!(e, d: f -> put_f, B::float_powf_scalar),
        FloatOp::Powf(d) => bin!(e, d: f -> put_f, B::float_powf),
        FloatOp::Sqrt(d) => un!(e, d: f -> put_f, B::float_sqrt),
        FloatOp::Cos(d) => un!(e, d: f -> put_f, B::float_cos),
        FloatOp::Cosh(d) => un!(e, d: f -> put_f, B::float_cosh),
        FloatOp::Sin(d) => un!(e, d: f -> put_f, B::float_sin),
        FloatOp::Sinh(d) => un!(e, d: f -> put_f, B::float_sinh),
        FloatOp::Tan(d) => un!(e, d: f -> put_f, B::float_tan),
        FloatOp::Tanh(d) => un!(e, d: f -> put_f, B::float_tanh),
        FloatOp::ArcCos(d) => un!(e, d: f -> put_f, B::float_acos),
        FloatOp::ArcCosh(d) => un!(e, d: f -> put_f, B::float_acosh),
        FloatOp::ArcSin(d) => un!(e, d: f -> put_f, B::float_asin),
        FloatOp::ArcSinh(d) => un!(e, d: f -> put_f, B::float_asinh),
        FloatOp::ArcTan(d) => un!(e, d: f -> put_f, B::float_atan),
        FloatOp::ArcTanh(d) => un!(e, d: f -> put_f, B::float_atanh),
        FloatOp::ArcTan2(d) => bin!(e, d: f -> put_f, B::float_atan2),
        FloatOp::Hypot(d) => bin!(e, d: f -> put_f, B::float_hypot),
        FloatOp::Round(d) => un!(e, d: f -> put_f, B::float_round),
        FloatOp::Floor(d) => un!(e, d: f -> put_f, B::float_floor),
        FloatOp::Ceil(d) => un!(e, d: f -> put_f, B::float_ceil),
        FloatOp::Trunc(d) => un!(e, d: f -> put_f, B::float_trunc),
        FloatOp::Recip(d) => un!(e, d: f -> put_f, B::float_recip),
        FloatOp::IntoInt(d) => un!(e, d: f -> put_i, |x| B::float_into_int(x, d.out.dtype.into())),
        FloatOp::IsNan(d) => un!(e, d: f -> put_b, |x| B::float_is_nan(x, d.out.dtype.into())),
        FloatOp::IsInf(d) => un!(e, d: f -> put_b, |x| B::float_is_inf(x, d.out.dtype.into())),
        FloatOp::Matmul(d) => bin!(e, d: f -> put_f, B::float_matmul),
        FloatOp::Cross(d) => bin!(e, d: f -> put_f, |l, r| B::float_cross(l, r, d.dim)),
        FloatOp::Random(d) => {
            let shape = d.out.shape.clone();
            let t = B::float_random(shape, d.distribution, &e.device, d.out.dtype.into());
            e.put_f(&d.out, t)
        }
        FloatOp::GridSample2d(d) => {
            let (x, grid) = (e.f(&d.tensor), e.f(&d.grid));
            e.put_f(
                &d.out,
                B::float_grid_sample_2d(x, grid, d.options.clone().into()),
            )
        }
        FloatOp::Quantize(_) | FloatOp::Dequantize(_) => unsupported(
            "quantize/dequantize",
            "quantized tensors are not supported by burn-vmap; run the model in float",
        )?,
    }
    Ok(())
}

fn int<B: Backend>(e: &mut Env<B>, op: &IntOp) {
    match op {
        IntOp::IntoFloat(d) => un!(e, d: i -> put_f, |x| B::int_into_float(x, d.out.dtype.into())),
        IntOp::Matmul(d) => bin!(e, d: i -> put_i, B::int_matmul),
        IntOp::BitwiseAnd(d) => bin!(e, d: i -> put_i, B::bitwise_and),
        IntOp::BitwiseAndScalar(d) => sc!(e, d: i -> put_i, B::bitwise_and_scalar),
        IntOp::BitwiseOr(d) => bin!(e, d: i -> put_i, B::bitwise_or),
        IntOp::BitwiseOrScalar(d) => sc!(e, d: i -> put_i, B::bitwise_or_scalar),
        IntOp::BitwiseXor(d) => bin!(e, d: i -> put_i, B::bitwise_xor),
        IntOp::BitwiseXorScalar(d) => sc!(e, d: i -> put_i, B::bitwise_xor_scalar),
        IntOp::BitwiseNot(d) => un!(e, d: i -> put_i, B::bitwise_not),
        IntOp::BitwiseLeftShift(d) => bin!(e, d: i -> put_i, B::bitwise_left_shift),
        IntOp::BitwiseLeftShiftScalar(d) => sc!(e, d: i -> put_i, B::bitwise_left_shift_scalar),
        IntOp::BitwiseRightShift(d) => bin!(e, d: i -> put_i, B::bitwise_right_shift),
        IntOp::BitwiseRightShiftScalar(d) => sc!(e, d: i -> put_i, B::bitwise_right_shift_scalar),
    }
}

fn bool_<B: Backend>(e: &mut Env<B>, op: &BoolOp) {
    match op {
        BoolOp::IntoFloat(d) => {
            un!(e, d: b -> put_f, |x| B::bool_into_float(x, d.out.dtype.into()))
        }
        BoolOp::IntoInt(d) => un!(e, d: b -> put_i, |x| B::bool_into_int(x, d.out.dtype.into())),
        BoolOp::Not(d) => un!(e, d: b -> put_b, B::bool_not),
        BoolOp::And(d) => bin!(e, d: b -> put_b, B::bool_and),
        BoolOp::Or(d) => bin!(e, d: b -> put_b, B::bool_or),
        BoolOp::Xor(d) => bin!(e, d: b -> put_b, B::bool_xor),
    }
}

fn activation<B: Backend>(e: &mut Env<B>, op: &Act) {
    match op {
        Act::Relu(d) => un!(e, d: f -> put_f, B::relu),
        Act::ReluBackward(d) => bin!(e, d: f -> put_f, B::relu_backward),
        Act::LeakyRelu(d) => sc!(e, d: f -> put_f, B::leaky_relu),
        Act::PRelu(d) => bin!(e, d: f -> put_f, B::prelu),
        Act::Gelu(d) => un!(e, d: f -> put_f, B::gelu),
        Act::GeluBackward(d) => bin!(e, d: f -> put_f, B::gelu_backward),
        Act::Sigmoid(d) => un!(e, d: f -> put_f, B::sigmoid),
        Act::SigmoidBackward(d) => bin!(e, d: f -> put_f, B::sigmoid_backward),
        Act::HardSigmoid(d) => {
            let x = e.f(&d.tensor);
            e.put_f(&d.out, B::hard_sigmoid(x, d.alpha.into(), d.beta.into()))
        }
        Act::LogSigmoid(d) => un!(e, d: f -> put_f, B::log_sigmoid),
        Act::LogSigmoidBackward(d) => bin!(e, d: f -> put_f, B::log_sigmoid_backward),
        Act::Softmax(d) => dim!(e, d: f -> put_f, B::softmax),
        Act::LogSoftmax(d) => dim!(e, d: f -> put_f, B::log_softmax),
        Act::Softmin(d) => dim!(e, d: f -> put_f, B::softmin),
    }
}

/// `Some(read)` of an optional operand.
macro_rules! opt {
    ($env:ident, $t:expr) => {
        $t.as_ref().map(|t| $env.f(t))
    };
}

fn module<B: Backend>(e: &mut Env<B>, op: &Module) -> Result<(), VmapError> {
    match op {
        Module::Embedding(d) => {
            let (w, i) = (e.f(&d.weights), e.i(&d.indices));
            e.put_f(&d.out, B::embedding(w, i))
        }
        Module::EmbeddingBackward(d) => {
            let (w, g, i) = (e.f(&d.weights), e.f(&d.out_grad), e.i(&d.indices));
            e.put_f(&d.out, B::embedding_backward(w, g, i))
        }
        Module::Linear(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::linear(x, w, b))
        }
        Module::LinearXBackward(d) => {
            let (w, g) = (e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(&d.out, B::linear_x_backward(w, g))
        }
        Module::LinearWeightBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.output_grad));
            e.put_f(&d.out, B::linear_weight_backward(x, g))
        }
        Module::LinearBiasBackward(d) => {
            let g = e.f(&d.output_grad);
            e.put_f(&d.out, B::linear_bias_backward(g))
        }
        Module::Conv1d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::conv1d(x, w, b, d.options.clone().into()))
        }
        Module::Conv1dXBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv1d_x_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv1dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv1d_weight_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv1dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv1d_bias_backward(x, b, g))
        }
        Module::Conv2d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::conv2d(x, w, b, d.options.clone().into()))
        }
        Module::Conv2dXBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv2d_x_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv2dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv2d_weight_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv2dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv2d_bias_backward(x, b, g))
        }
        Module::Conv3d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::conv3d(x, w, b, d.options.clone().into()))
        }
        Module::Conv3dXBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv3d_x_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv3dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv3d_weight_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv3dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv3d_bias_backward(x, b, g))
        }
        Module::DeformableConv2d(d) => {
            let (x, off, w) = (e.f(&d.x), e.f(&d.offset), e.f(&d.weight));
            let (m, b) = (opt!(e, d.mask), opt!(e, d.bias));
            let t = B::deform_conv2d(x, off, w, m, b, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::DeformableConv2dBackward(d) => {
            let (x, off, w) = (e.f(&d.x), e.f(&d.offset), e.f(&d.weight));
            let (m, b, g) = (opt!(e, d.mask), opt!(e, d.bias), e.f(&d.out_grad));
            let out = B::deform_conv2d_backward(x, off, w, m, b, g, d.options.clone().into());
            e.put_f(&d.input_grad, out.x_grad);
            e.put_f(&d.offset_grad, out.offset_grad);
            e.put_f(&d.weight_grad, out.weight_grad);
            if let (Some(g), Some(t)) = (out.mask_grad, d.mask_grad.as_ref()) {
                e.put_f(t, g)
            }
            if let (Some(g), Some(t)) = (out.bias_grad, d.bias_grad.as_ref()) {
                e.put_f(t, g)
            }
        }
        Module::ConvTranspose1d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(
                &d.out,
                B::conv_transpose1d(x, w, b, d.options.clone().into()),
            )
        }
        Module::ConvTranspose2d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(
                &d.out,
                B::conv_transpose2d(x, w, b, d.options.clone().into()),
            )
        }
        Module::ConvTranspose3d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(
                &d.out,
                B::conv_transpose3d(x, w, b, d.options.clone().into()),
            )
        }
        Module::ConvTranspose1dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            let t = B::conv_transpose1d_weight_backward(x, w, g, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::ConvTranspose1dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv_transpose1d_bias_backward(x, b, g))
        }
        Module::ConvTranspose2dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            let t = B::conv_transpose2d_weight_backward(x, w, g, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::ConvTranspose2dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv_transpose2d_bias_backward(x, b, g))
        }
        Module::ConvTranspose3dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            let t = B::conv_transpose3d_weight_backward(x, w, g, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::ConvTranspose3dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv_transpose3d_bias_backward(x, b, g))
        }
        Module::AvgPool1d(d) => {
            let x = e.f(&d.x);
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool1d(x, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AvgPool2d(d) => {
            let x = e.f(&d.x);
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool2d(x, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AvgPool1dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool1d_backward(x, g, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AvgPool2dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool2d_backward(x, g, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AdaptiveAvgPool1d(d) => {
            let x = e.f(&d.x);
            e.put_f(&d.out, B::adaptive_avg_pool1d(x, d.output_size))
        }
        Module::AdaptiveAvgPool2d(d) => {
            let x = e.f(&d.x);
            e.put_f(&d.out, B::adaptive_avg_pool2d(x, d.output_size))
        }
        Module::AdaptiveAvgPool3d(d) => {
            let x = e.f(&d.x);
            e.put_f(&d.out, B::adaptive_avg_pool3d(x, d.output_size))
        }
        Module::AdaptiveAvgPool1dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            e.put_f(&d.out, B::adaptive_avg_pool1d_backward(x, g))
        }
        Module::AdaptiveAvgPool2dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            e.put_f(&d.out, B::adaptive_avg_pool2d_backward(x, g))
        }
        Module::AdaptiveAvgPool3dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            e.put_f(&d.out, B::adaptive_avg_pool3d_backward(x, g))
        }
        Module::MaxPool1d(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            e.put_f(&d.out, B::max_pool1d(x, k, s, p, dil, d.ceil_mode))
        }
        Module::MaxPool2d(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            e.put_f(&d.out, B::max_pool2d(x, k, s, p, dil, d.ceil_mode))
        }
        Module::MaxPool1dWithIndices(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let dtype = d.out_indices.dtype.into();
            let out = B::max_pool1d_with_indices(x, k, s, p, dil, d.ceil_mode, dtype);
            e.put_f(&d.out, out.output);
            e.put_i(&d.out_indices, out.indices)
        }
        Module::MaxPool2dWithIndices(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let dtype = d.out_indices.dtype.into();
            let out = B::max_pool2d_with_indices(x, k, s, p, dil, d.ceil_mode, dtype);
            e.put_f(&d.out, out.output);
            e.put_i(&d.out_indices, out.indices)
        }
        Module::MaxPool1dWithIndicesBackward(d) => {
            let (x, g, i) = (e.f(&d.x), e.f(&d.grad), e.i(&d.indices));
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let out = B::max_pool1d_with_indices_backward(x, k, s, p, dil, d.ceil_mode, g, i);
            e.put_f(&d.out, out.x_grad)
        }
        Module::MaxPool2dWithIndicesBackward(d) => {
            let (x, g, i) = (e.f(&d.x), e.f(&d.grad), e.i(&d.indices));
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let out = B::max_pool2d_with_indices_backward(x, k, s, p, dil, d.ceil_mode, g, i);
            e.put_f(&d.out, out.x_grad)
        }
        Module::Interpolate(d) => {
            let x = e.f(&d.x);
            e.put_f(
                &d.out,
                B::interpolate(x, d.output_size, d.options.clone().into()),
            )
        }
        Module::InterpolateBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            let t = B::interpolate_backward(x, g, d.output_size, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::Attention(d) => {
            let (q, k, v) = (e.f(&d.query), e.f(&d.key), e.f(&d.value));
            let mask = d.mask.as_ref().map(|m| e.b(m));
            let bias = opt!(e, d.attn_bias);
            let t = B::attention(q, k, v, mask, bias, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::LayerNorm(d) => {
            let (x, gamma, beta) = (e.f(&d.input), e.f(&d.gamma), opt!(e, d.beta));
            e.put_f(&d.out, B::layer_norm(x, gamma, beta, d.epsilon.elem()))
        }
        Module::BatchNorm(d) => {
            let (x, gamma, beta) = (e.f(&d.x), e.f(&d.gamma), e.f(&d.beta));
            let (mean, var) = (e.f(&d.mean), e.f(&d.variance));
            e.put_f(
                &d.out,
                B::batch_norm(x, gamma, beta, mean, var, d.epsilon.elem()),
            )
        }
        Module::Unfold4d(d) => {
            let o = &d.options;
            let options = UnfoldOptions::new(o.stride, o.padding, o.dilation);
            let x = e.f(&d.x);
            e.put_f(&d.out, B::unfold4d(x, d.kernel_size, options))
        }
        Module::CtcLoss(d) => {
            let (lp, t) = (e.f(&d.log_probs), e.i(&d.targets));
            let (il, tl) = (e.i(&d.input_lengths), e.i(&d.target_lengths));
            e.put_f(&d.out, B::ctc_loss(lp, t, il, tl, d.blank))
        }
        Module::CtcLossBackward(d) => {
            let (lp, t) = (e.f(&d.log_probs), e.i(&d.targets));
            let (il, tl, g) = (
                e.i(&d.input_lengths),
                e.i(&d.target_lengths),
                e.f(&d.grad_loss),
            );
            e.put_f(&d.out, B::ctc_loss_backward(lp, t, il, tl, g, d.blank))
        }
    }
    Ok(())
}
