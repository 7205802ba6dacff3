//! `FloatOperationIr`, `IntOperationIr`, `BoolOperationIr`, `ActivationOperationIr`: the ops of one kind.

use burn_backend::backend::Backend;
use burn_ir::{
    ActivationOperationIr as Act, BoolOperationIr as BoolOp, FloatOperationIr as FloatOp,
    IntOperationIr as IntOp,
};

use super::super::env::Env;
use super::*;
use crate::VmapError;

pub(super) fn float<B: Backend>(e: &mut Env<B>, op: &FloatOp) -> Result<(), VmapError> {
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
        FloatOp::IsNan(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: f -> put_b, |x| B::float_is_nan(x, dtype))
        }
        FloatOp::IsInf(d) => {
            let dtype = e.bool_out(d.out.dtype);
            un!(e, d: f -> put_b, |x| B::float_is_inf(x, dtype))
        }
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

pub(super) fn int<B: Backend>(e: &mut Env<B>, op: &IntOp) {
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

pub(super) fn bool_<B: Backend>(e: &mut Env<B>, op: &BoolOp) {
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

pub(super) fn activation<B: Backend>(e: &mut Env<B>, op: &Act) {
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
