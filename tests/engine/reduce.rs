//! Reductions, scans, sorts and top-k along a dim, and whole-tensor reductions.

use burn_backend::IntDType;
use burn_backend::ops::{FloatTensorOps, IntTensorOps};
use burn_vmap::BatchOps;

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

#[test]
fn should_batch_max_and_min_with_their_indices() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        let a = lv.floats(at, &[4, 5], 21);
        for dim in 0..2 {
            check(
                &lv,
                [&a],
                |[a]| V::float_min_dim(a, dim),
                |[a]| F::float_min_dim(a, dim),
            );
            for (pick, what) in [(0, "values"), (1, "indices")] {
                let _ = what;
                check(
                    &lv,
                    [&a],
                    |[a]| match pick {
                        0 => V::float_max_dim_with_indices(a, dim, IntDType::I64).0,
                        _ => V::int_into_float(
                            V::float_max_dim_with_indices(a, dim, IntDType::I64).1,
                            burn_backend::FloatDType::F32,
                        ),
                    },
                    |[a]| match pick {
                        0 => F::float_max_dim_with_indices(a, dim, IntDType::I64).0,
                        _ => F::int_into_float(
                            F::float_max_dim_with_indices(a, dim, IntDType::I64).1,
                            burn_backend::FloatDType::F32,
                        ),
                    },
                );
                check(
                    &lv,
                    [&a],
                    |[a]| match pick {
                        0 => V::float_min_dim_with_indices(a, dim, IntDType::I32).0,
                        _ => V::int_into_float(
                            V::float_min_dim_with_indices(a, dim, IntDType::I32).1,
                            burn_backend::FloatDType::F32,
                        ),
                    },
                    |[a]| match pick {
                        0 => F::float_min_dim_with_indices(a, dim, IntDType::I32).0,
                        _ => F::int_into_float(
                            F::float_min_dim_with_indices(a, dim, IntDType::I32).1,
                            burn_backend::FloatDType::F32,
                        ),
                    },
                );
            }
        }
    }
}

/// The ops whose result is their operand (no kernel on the engine): a product or quotient by
/// 1, a sum, mean or product over a dim of one element.
#[test]
fn should_give_the_operand_where_an_op_is_the_identity() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        let a = lv.floats(at, &[4, 1, 5], 22);
        check(
            &lv,
            [&a],
            |[a]| V::float_mul_scalar(a, 1.0.into()),
            |[a]| F::float_mul_scalar(a, 1.0.into()),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_div_scalar(a, 1.into()),
            |[a]| F::float_div_scalar(a, 1.into()),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_sum_dim(a, 1),
            |[a]| F::float_sum_dim(a, 1),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_mean_dim(a, 1),
            |[a]| F::float_mean_dim(a, 1),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_prod_dim(a, 1),
            |[a]| F::float_prod_dim(a, 1),
        );
        let i = lv.ints(at, &[4, 1], -9, 9, 3);
        check(
            &lv,
            [&i],
            |[a]| V::int_sum_dim(a, 1),
            |[a]| F::int_sum_dim(a, 1),
        );
    }
}

/// A dense tensor times itself is held as the pair: summed, one inner product per example;
/// read any other way, the product.
fn check_dense_square(lv: &Levels, a: &Arg) {
    let square = |a: VT| V::float_mul(a.clone(), a);
    let held = square(a.vt(lv));
    assert!(held.is_factored(), "x * x is held as the pair");
    check(
        lv,
        [a],
        |[a]| V::float_sum(square(a)),
        |[a]| F::float_sum(F::float_mul(a.clone(), a)),
    );
    check(
        lv,
        [a],
        |[a]| V::float_exp(square(a)),
        |[a]| F::float_exp(F::float_mul(a.clone(), a)),
    );
    check(
        lv,
        [a],
        |[a]| V::float_sum_dim(square(a), 0),
        |[a]| F::float_sum_dim(F::float_mul(a.clone(), a), 0),
    );
    // Two tensors of equal values but different origins multiply out at once.
    let (x, y) = (a.vt(lv), a.vt(lv));
    assert!(!V::float_mul(x, y).is_factored());
}

#[test]
fn should_sum_a_dense_square_as_one_inner_product_per_example() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        check_dense_square(&lv, &lv.floats(at, &[4, 5], 23));
        check_dense_square(&lv, &lv.floats(at, &[7], 24));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    #[test]
    fn should_sum_dense_squares_of_any_shape_like_the_loop(
        dims in proptest::collection::vec(1usize..5, 1..4),
        sizes in proptest::collection::vec(1usize..4, 1..3),
        at_mask in 0usize..4,
        seed in 0u64..1000,
    ) {
        let lv = Levels::new(&sizes);
        let at: Vec<usize> = (0..sizes.len()).filter(|i| at_mask >> i & 1 == 1).collect();
        check_dense_square(&lv, &lv.floats(&at, &dims, seed));
    }
}

/// A dense tensor times a per-example factor (`s`: one element per example, at `g`'s levels)
/// is held as the pair: read, the product; unbatched at the inner level and summed over the
/// examples, `Σ_j s_j g_j` (one matrix product).
fn check_scaled_sum(lv: &Levels, g: &Arg, s: &Arg) {
    let held = V::float_mul(g.vt(lv), s.vt(lv));
    assert!(held.is_factored(), "g * s is held as the pair");
    check(
        lv,
        [g, s],
        |[g, s]| V::float_exp(V::float_mul(g, s)),
        |[g, s]| F::float_exp(F::float_mul(g, s)),
    );
    check(
        lv,
        [g, s],
        |[g, s]| V::float_mul(s, g),
        |[g, s]| F::float_mul(s, g),
    );
    let (inner, size) = *lv.levels.last().expect("a level");
    let unbatched = V::float_unbatch(held, inner, size, 0);
    assert!(unbatched.is_factored(), "the pair leaves a level as a pair");
    let out = V::float_sum_dim(unbatched, 0);
    check_result(lv, &out, |idx| {
        let mut idx = idx.to_vec();
        let terms: Vec<T> = (0..size)
            .map(|j| {
                *idx.last_mut().expect("a level") = j;
                F::float_mul(g.example(lv, &idx), s.example(lv, &idx))
            })
            .collect();
        let sum = terms
            .into_iter()
            .reduce(F::float_add)
            .expect("one example at least");
        let mut dims = vec![1];
        dims.extend_from_slice(&g.logical);
        F::float_reshape(sum, shape(&dims))
    });
}

#[test]
fn should_sum_a_scaled_dense_tensor_over_the_examples_as_one_product() {
    for sizes in [&[4][..], &[3, 2]] {
        let lv = Levels::new(sizes);
        let at: Vec<usize> = (0..sizes.len()).collect();
        let g = lv.floats(&at, &[4, 5], 31);
        check_scaled_sum(&lv, &g, &lv.floats(&at, &[1, 1], 32));
        let g = lv.floats(&at, &[6], 33);
        check_scaled_sum(&lv, &g, &lv.floats(&at, &[1], 34));
    }
    // A factor at other levels than the tensor's, or of more than one element: multiplied out.
    let lv = Levels::new(&[3, 2]);
    let g = lv.floats(&[0, 1], &[4, 5], 35);
    assert!(!V::float_mul(g.vt(&lv), lv.floats(&[0], &[1, 1], 36).vt(&lv)).is_factored());
    assert!(!V::float_mul(g.vt(&lv), lv.floats(&[0, 1], &[1, 5], 37).vt(&lv)).is_factored());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
    #[test]
    fn should_sum_scaled_dense_tensors_of_any_shape_like_the_loop(
        dims in proptest::collection::vec(1usize..5, 1..4),
        sizes in proptest::collection::vec(2usize..4, 1..3),
        seed in 0u64..1000,
    ) {
        let lv = Levels::new(&sizes);
        let at: Vec<usize> = (0..sizes.len()).collect();
        let g = lv.floats(&at, &dims, seed);
        let s = lv.floats(&at, &vec![1; dims.len()], seed + 1);
        if dims.iter().product::<usize>() > 1 {
            check_scaled_sum(&lv, &g, &s);
        }
    }
}
