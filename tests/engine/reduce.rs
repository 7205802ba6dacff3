//! Reductions, scans, sorts and top-k along a dim, and whole-tensor reductions.

use burn_backend::IntDType;
use burn_backend::ops::{FloatTensorOps, IntTensorOps};

use crate::common::*;

#[test]
fn should_batch_reductions_along_a_dim() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        let a = lv.floats(at, &[4, 5], 3);
        for dim in 0..2 {
            check(
                &lv,
                [&a],
                |[a]| V::float_sum_dim(a, dim),
                |[a]| F::float_sum_dim(a, dim),
            );
            check(
                &lv,
                [&a],
                |[a]| V::float_mean_dim(a, dim),
                |[a]| F::float_mean_dim(a, dim),
            );
            check(
                &lv,
                [&a],
                |[a]| V::float_max_dim(a, dim),
                |[a]| F::float_max_dim(a, dim),
            );
            check(
                &lv,
                [&a],
                |[a]| V::float_prod_dim(a, dim),
                |[a]| F::float_prod_dim(a, dim),
            );
            check(
                &lv,
                [&a],
                |[a]| V::float_cumsum(a, dim),
                |[a]| F::float_cumsum(a, dim),
            );
            let i32_ = IntDType::I32;
            check(
                &lv,
                [&a],
                |[a]| V::float_argmax(a, dim, i32_),
                |[a]| F::float_argmax(a, dim, i32_),
            );
            check(
                &lv,
                [&a],
                |[a]| V::float_argmin(a, dim, i32_),
                |[a]| F::float_argmin(a, dim, i32_),
            );
        }
        check(&lv, [&a], |[a]| V::float_sum(a), |[a]| F::float_sum(a));
        check(&lv, [&a], |[a]| V::float_mean(a), |[a]| F::float_mean(a));
        check(&lv, [&a], |[a]| V::float_max(a), |[a]| F::float_max(a));
        check(
            &lv,
            [&a],
            |[a]| V::float_sum_dims(a, &[0, 1]),
            |[a]| F::float_sum_dims(a, &[0, 1]),
        );
        let i = lv.ints(at, &[4, 5], -9, 9, 4);
        check(
            &lv,
            [&i],
            |[a]| V::int_sum_dim(a, 1),
            |[a]| F::int_sum_dim(a, 1),
        );
        check(&lv, [&i], |[a]| V::int_sum(a), |[a]| F::int_sum(a));
        check(
            &lv,
            [&i],
            |[a]| V::int_max_dim(a, 0),
            |[a]| F::int_max_dim(a, 0),
        );
    }
}

#[test]
fn should_give_the_empty_value_of_a_reduction_over_an_empty_dim() {
    let lv = Levels::new(&[3]);
    let a = lv.floats(&[0], &[0, 2], 1);
    check(
        &lv,
        [&a],
        |[a]| V::float_sum_dim(a, 0),
        |[_]| floats(&[1, 2], 0).zeros(),
    );
    check(
        &lv,
        [&a],
        |[a]| V::float_sum(a),
        |[_]| floats(&[1], 0).zeros(),
    );
}

#[test]
fn should_batch_sorts_and_top_k() {
    let lv = Levels::new(&[2, 3]);
    for at in [&[0][..], &[0, 1]] {
        let a = lv.floats(at, &[3, 6], 8);
        check(
            &lv,
            [&a],
            |[a]| V::float_sort(a, 1, true),
            |[a]| F::float_sort(a, 1, true),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_argsort(a, 0, false, IntDType::I64),
            |[a]| F::float_argsort(a, 0, false, IntDType::I64),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_topk(a, 1, 2),
            |[a]| F::float_topk(a, 1, 2),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_topk_with_indices(a, 1, 3, IntDType::I32).0,
            |[a]| F::float_topk_with_indices(a, 1, 3, IntDType::I32).0,
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_topk_with_indices(a, 1, 3, IntDType::I32).1,
            |[a]| F::float_topk_with_indices(a, 1, 3, IntDType::I32).1,
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_sort_with_indices(a, 1, false, IntDType::I32).1,
            |[a]| F::float_sort_with_indices(a, 1, false, IntDType::I32).1,
        );
        let i = lv.ints(at, &[7], -50, 50, 2);
        check(
            &lv,
            [&i],
            |[a]| V::int_sort(a, 0, false),
            |[a]| F::int_sort(a, 0, false),
        );
        check(
            &lv,
            [&i],
            |[a]| V::int_topk(a, 0, 3),
            |[a]| F::int_topk(a, 0, 3),
        );
    }
}

trait Zeros {
    fn zeros(self) -> Self;
}

impl Zeros for T {
    fn zeros(self) -> Self {
        F::float_mul_scalar(self, 0.0.into())
    }
}
