//! Linear algebra and module ops: matmul (folded rows, outer products, broadcasting), `linear`
//! and its backward ops, conv2d (batch folded into `N`, per-example kernels as groups), pools,
//! batch norm, unfold/fold.

use burn_backend::IntDType;
use burn_backend::ops::{ConvOptions, FloatTensorOps, ModuleOps, UnfoldOptions};

use crate::common::*;

#[test]
fn should_batch_matmul_over_every_mix() {
    let lv = Levels::new(&[3, 2]);
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        // [m, k] x [k, n]; leading dims broadcast; a contraction of one (outer products).
        for (ls, rs) in [
            (&[4usize, 3][..], &[3usize, 5][..]),
            (&[2, 4, 3], &[1, 3, 5]),
            (&[4, 1], &[1, 5]),
        ] {
            let a = lv.floats(l, ls, seed);
            let b = lv.floats(r, rs, seed + 1);
            check(
                &lv,
                [&a, &b],
                |[a, b]| V::float_matmul(a, b),
                |[a, b]| F::float_matmul(a, b),
            );
        }
    }
}

#[test]
fn should_batch_linear_and_its_backward_ops() {
    let lv = Levels::new(&[3, 2]);
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        let x = lv.floats(l, &[2, 4], seed);
        let w = lv.floats(r, &[4, 3], seed + 1);
        let b = lv.floats(r, &[3], seed + 2);
        check(
            &lv,
            [&x, &w, &b],
            |[x, w, b]| V::linear(x, w, Some(b)),
            |[x, w, b]| F::linear(x, w, Some(b)),
        );
        let g = lv.floats(r, &[2, 3], seed + 3);
        check(
            &lv,
            [&w, &g],
            |[w, g]| V::linear_x_backward(w, g),
            |[w, g]| F::linear_x_backward(w, g),
        );
        // The weight gradient: per example `xᵀ g` (held factored when worth it).
        check(
            &lv,
            [&x, &g],
            |[x, g]| V::linear_weight_backward(x, g),
            |[x, g]| F::linear_weight_backward(x, g),
        );
        check(
            &lv,
            [&g],
            |[g]| V::linear_bias_backward(g),
            |[g]| F::linear_bias_backward(g),
        );
    }
}

#[test]
fn should_batch_conv2d() {
    let lv = Levels::new(&[3, 2]);
    let options = ConvOptions::new_with_padding([1, 2], [(1, 0), (1, 1)], [1, 1], 1);
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        let x = lv.floats(l, &[2, 2, 5, 6], seed);
        let w = lv.floats(r, &[3, 2, 3, 2], seed + 1);
        let b = lv.floats(r, &[3], seed + 2);
        let o = options.clone();
        check(
            &lv,
            [&x, &w, &b],
            |[x, w, b]| V::conv2d(x, w, Some(b), o.clone()),
            |[x, w, b]| F::conv2d(x, w, Some(b), o.clone()),
        );
        // The weight gradient of every example (factored, or multiplied out per chunk).
        let g = lv.floats(l, &[2, 3, 4, 4], seed + 3);
        check(
            &lv,
            [&x, &w, &g],
            |[x, w, g]| V::conv2d_weight_backward(x, w, g, o.clone()),
            |[x, w, g]| F::conv2d_weight_backward(x, w, g, o.clone()),
        );
    }
    // Few output positions: the weight gradient of every example held factored (the output
    // gradients against the unfolded input patches), 1-d as a 2-d convolution of height 1.
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        let x = lv.floats(l, &[1, 2, 4, 3], seed);
        let w = lv.floats(&[], &[4, 2, 3, 3], seed + 1);
        let g = lv.floats(r, &[1, 4, 2, 1], seed + 2);
        let o = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
        let out = V::conv2d_weight_backward(x.vt(&lv), w.vt(&lv), g.vt(&lv), o.clone());
        assert!(out.is_factored());
        check_result(&lv, &out, |idx| {
            F::conv2d_weight_backward(
                x.example(&lv, idx),
                w.example(&lv, idx),
                g.example(&lv, idx),
                o.clone(),
            )
        });
        let x1 = lv.floats(l, &[2, 3, 5], seed + 3);
        let w1 = lv.floats(&[], &[4, 3, 3], seed + 4);
        let g1 = lv.floats(r, &[2, 4, 2], seed + 5);
        let o1 = ConvOptions::new([2], [0], [1], 1);
        check(
            &lv,
            [&x1, &w1, &g1],
            |[x, w, g]| V::conv1d_weight_backward(x, w, g, o1.clone()),
            |[x, w, g]| F::conv1d_weight_backward(x, w, g, o1.clone()),
        );
    }
    // Grouped, with dilation.
    let grouped = ConvOptions::new([1, 1], [1, 1], [2, 1], 2);
    let x = lv.floats(&[0, 1], &[1, 4, 5, 5], 1);
    let w = lv.floats(&[], &[2, 2, 2, 2], 2);
    let g = lv.floats(&[0], &[1, 2, 5, 6], 3);
    check(
        &lv,
        [&x, &w],
        |[x, w]| V::conv2d(x, w, None, grouped.clone()),
        |[x, w]| F::conv2d(x, w, None, grouped.clone()),
    );
    check(
        &lv,
        [&x, &w, &g],
        |[x, w, g]| V::conv2d_weight_backward(x, w, g, grouped.clone()),
        |[x, w, g]| F::conv2d_weight_backward(x, w, g, grouped.clone()),
    );
}

#[test]
fn should_batch_pools() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[0, 1]] {
        let x = lv.floats(at, &[2, 3, 6, 5], 4);
        check(
            &lv,
            [&x],
            |[x]| V::max_pool2d(x, [2, 2], [2, 1], [1, 0], [1, 1], false),
            |[x]| F::max_pool2d(x, [2, 2], [2, 1], [1, 0], [1, 1], false),
        );
        let with = |x: T| {
            F::max_pool2d_with_indices(x, [3, 2], [1, 2], [0, 0], [1, 1], true, IntDType::I64)
        };
        check(
            &lv,
            [&x],
            |[x]| {
                V::max_pool2d_with_indices(x, [3, 2], [1, 2], [0, 0], [1, 1], true, IntDType::I64)
                    .indices
            },
            |[x]| with(x).indices,
        );
        check(
            &lv,
            [&x],
            |[x]| V::avg_pool2d(x, [2, 3], [1, 1], [1, 1], false, false),
            |[x]| F::avg_pool2d(x, [2, 3], [1, 1], [1, 1], false, false),
        );
        check(
            &lv,
            [&x],
            |[x]| V::adaptive_avg_pool2d(x, [2, 2]),
            |[x]| F::adaptive_avg_pool2d(x, [2, 2]),
        );
        let x3 = lv.floats(at, &[1, 2, 4, 3, 5], 5);
        check(
            &lv,
            [&x3],
            |[x]| V::adaptive_avg_pool3d(x, [2, 1, 3]),
            |[x]| F::adaptive_avg_pool3d(x, [2, 1, 3]),
        );
        let opts = UnfoldOptions::new([1, 1], [0, 1], [1, 1]);
        check(
            &lv,
            [&x],
            |[x]| V::unfold4d(x, [2, 2], opts.clone()),
            |[x]| F::unfold4d(x, [2, 2], opts.clone()),
        );
        let cols = lv.floats(at, &[2, 12, 5 * 6], 6);
        check(
            &lv,
            [&cols],
            |[c]| V::fold4d(c, [6, 5], [2, 2], opts.clone()),
            |[c]| F::fold4d(c, [6, 5], [2, 2], opts.clone()),
        );
    }
}

#[test]
fn should_batch_batch_norm() {
    let lv = Levels::new(&[3]);
    for &(l, r) in MIXES2.iter().take(3) {
        let x = lv.floats(l, &[2, 3, 4], 1);
        let gamma = lv.floats(r, &[3], 2);
        let beta = lv.floats(&[], &[3], 3);
        let mean = lv.floats(&[], &[3], 4);
        let var = lv.arg(r, &[3], |s| {
            F::float_add_scalar(F::float_abs(floats(s, 5)), 0.5.into())
        });
        check(
            &lv,
            [&x, &gamma, &beta, &mean, &var],
            |[x, g, b, m, v]| V::batch_norm(x, g, b, m, v, 1e-5),
            |[x, g, b, m, v]| F::batch_norm(x, g, b, m, v, 1e-5),
        );
        // Training: each example normalized with its own statistics.
        check(
            &lv,
            [&x, &gamma, &beta],
            |[x, g, b]| V::batch_norm_train(x, g, b, 1e-5).output,
            |[x, g, b]| F::batch_norm_train(x, g, b, 1e-5).output,
        );
    }
}
