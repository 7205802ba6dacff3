//! Elementwise ops: binary with broadcasting (every batched/unbatched mix over two levels),
//! unary, scalar, comparisons, activations.

use burn_backend::ops::{ActivationOps, BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::{BoolDType, FloatDType, IntDType, Scalar};

use crate::common::*;

#[test]
fn should_batch_broadcasting_binary_ops_over_every_mix() {
    let lv = Levels::new(&[3, 2]);
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        // Logical [4, 1] op [1, 5] broadcasts to [4, 5]; [4, 5] op [4, 5] does not.
        for (ls, rs) in [(&[4usize, 1][..], &[1usize, 5][..]), (&[4, 5], &[4, 5])] {
            let a = lv.floats(l, ls, seed);
            let b = lv.floats(r, rs, seed + 100);
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::float_add(a, b),
                |[a, b]| F::float_add(a, b),
            );
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::float_sub(a, b),
                |[a, b]| F::float_sub(a, b),
            );
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::float_mul(a, b),
                |[a, b]| F::float_mul(a, b),
            );
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::float_div(a, b),
                |[a, b]| F::float_div(a, b),
            );
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::float_hypot(a, b),
                |[a, b]| F::float_hypot(a, b),
            );
            let out = BoolDType::Native;
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::bool_into_float(V::float_lower(a, b, out), FloatDType::F32),
                |[a, b]| F::bool_into_float(F::float_lower(a, b, out), FloatDType::F32),
            );
        }
    }
}

#[test]
fn should_batch_materializing_binary_ops() {
    let lv = Levels::new(&[2, 3]);
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let a = lv.floats(l, &[3, 4], seed as u64);
        let b = lv.floats(r, &[3, 4], seed as u64 + 7);
        check(
            &lv,
            [&a, &b],
            |[a, b]| V::float_atan2(a, b),
            |[a, b]| F::float_atan2(a, b),
        );
        check(
            &lv,
            [&a, &b],
            |[a, b]| V::float_cross(a, V::float_slice(b, &[(0..3).into(), (0..4).into()]), 0),
            |[a, b]| F::float_cross(a, F::float_slice(b, &[(0..3).into(), (0..4).into()]), 0),
        );
        let i = lv.ints(l, &[3, 4], -5, 5, seed as u64);
        let j = lv.ints(r, &[3, 1], 1, 4, seed as u64 + 1);
        check(
            &lv,
            [&i, &j],
            |[a, b]| V::int_add(a, b),
            |[a, b]| F::int_add(a, b),
        );
        check(
            &lv,
            [&i, &j],
            |[a, b]| V::int_mul(a, b),
            |[a, b]| F::int_mul(a, b),
        );
    }
}

#[test]
fn should_batch_unary_and_scalar_ops() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        let a = lv.floats(at, &[2, 3], 5);
        check(&lv, [&a], |[a]| V::float_exp(a), |[a]| F::float_exp(a));
        check(&lv, [&a], |[a]| V::float_tanh(a), |[a]| F::float_tanh(a));
        check(&lv, [&a], |[a]| V::float_neg(a), |[a]| F::float_neg(a));
        check(&lv, [&a], |[a]| V::sigmoid(a), |[a]| F::sigmoid(a));
        check(&lv, [&a], |[a]| V::relu(a), |[a]| F::relu(a));
        check(&lv, [&a], |[a]| V::gelu(a), |[a]| F::gelu(a));
        let s = Scalar::Float(1.5);
        check(
            &lv,
            [&a],
            |[a]| V::float_add_scalar(a, s),
            |[a]| F::float_add_scalar(a, s),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_mul_scalar(a, s),
            |[a]| F::float_mul_scalar(a, s),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_powf_scalar(V::float_abs(a), s),
            |[a]| F::float_powf_scalar(F::float_abs(a), s),
        );
        check(
            &lv,
            [&a],
            |[a]| {
                V::int_into_float(
                    V::float_into_int(V::float_mul_scalar(a, s), IntDType::I32),
                    FloatDType::F32,
                )
            },
            |[a]| {
                F::int_into_float(
                    F::float_into_int(F::float_mul_scalar(a, s), IntDType::I32),
                    FloatDType::F32,
                )
            },
        );
        let i = lv.ints(at, &[4], -3, 3, 9);
        check(&lv, [&i], |[a]| V::int_square(a), |[a]| F::int_square(a));
    }
}

#[test]
fn should_batch_activation_backward_ops() {
    let lv = Levels::new(&[3]);
    for &(l, r) in &MIXES2[..3] {
        let x = lv.floats(l, &[2, 3], 1);
        let g = lv.floats(r, &[2, 3], 2);
        check(
            &lv,
            [&x, &g],
            |[x, g]| V::relu_backward(x, g),
            |[x, g]| F::relu_backward(x, g),
        );
        check(
            &lv,
            [&x, &g],
            |[x, g]| V::sigmoid_backward(x, g),
            |[x, g]| F::sigmoid_backward(x, g),
        );
    }
}

#[test]
fn should_batch_a_softmax_chain() {
    // softmax(x) = exp(x - max) / sum(exp(x - max)), by hand and through the activation's
    // default.
    let lv = Levels::new(&[4, 2]);
    let by_hand_v = |x: VT| {
        let m = V::float_max_dim(x.clone(), 1);
        let e = V::float_exp(V::float_sub(x, m));
        V::float_div(e.clone(), V::float_sum_dim(e, 1))
    };
    let by_hand_f = |x: T| {
        let m = F::float_max_dim(x.clone(), 1);
        let e = F::float_exp(F::float_sub(x, m));
        F::float_div(e.clone(), F::float_sum_dim(e, 1))
    };
    for at in [&[0][..], &[1], &[0, 1]] {
        let x = lv.floats(at, &[3, 5], 11);
        check(&lv, [&x], |[x]| by_hand_v(x), |[x]| by_hand_f(x));
        check(&lv, [&x], |[x]| V::softmax(x, 1), |[x]| F::softmax(x, 1));
        check(
            &lv,
            [&x],
            |[x]| V::log_softmax(x, 0),
            |[x]| F::log_softmax(x, 0),
        );
    }
}
