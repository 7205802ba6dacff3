//! Float constants (`zeros`, `ones`, `full`) held unwritten until read, made at the batch shape
//! when a batched scatter writes into them, and folded through `neg`, `mul_scalar`, products and
//! views (`rules::constant`): each against the loop, and folded values bit for bit against the
//! ops they replace.

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{FloatDType, Scalar, TensorData};

use crate::common::*;

fn full_v(dims: &[usize], v: f64) -> VT {
    V::float_full(shape(dims), Scalar::Float(v), &dev(), FloatDType::F32)
}

fn full_f(dims: &[usize], v: f64) -> T {
    F::float_full(shape(dims), Scalar::Float(v), &dev(), FloatDType::F32)
}

/// An unbatched result's logical shape and values, bit for bit.
fn bits(t: VT) -> (Vec<usize>, Vec<u32>) {
    let dims = dims(&t);
    let (inner, _) = t.into_parts();
    (dims, read(inner).iter().map(|v| v.to_bits()).collect())
}

fn bits_f(t: T) -> (Vec<usize>, Vec<u32>) {
    (dims(&t), read(t).iter().map(|v| v.to_bits()).collect())
}

#[test]
fn should_scatter_into_a_constant_like_the_loop() {
    let lv = Levels::new(&[3, 2]);
    for (seed, (i_at, v_at)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        let idx = lv.ints(i_at, &[4, 3], 0, 5, seed);
        let val = lv.floats(v_at, &[4, 3], seed + 1);
        for fill in [0.0, 2.5] {
            // The constant is read again after the scatter: the scatter must not write into it.
            check(
                &lv,
                [&idx, &val],
                |[i, v]| {
                    let target = full_v(&[4, 5], fill);
                    let s = V::float_scatter(1, target.clone(), i, v, IndexingUpdateOp::Add);
                    V::float_add(s, target)
                },
                |[i, v]| {
                    let target = full_f(&[4, 5], fill);
                    let s = F::float_scatter(1, target.clone(), i, v, IndexingUpdateOp::Add);
                    F::float_add(s, target)
                },
            );
        }
        // Burn's backward of `gather`: zeros, the gradient scattered in.
        check(
            &lv,
            [&idx, &val],
            |[i, v]| {
                let z = V::float_zeros(shape(&[4, 5]), &dev(), FloatDType::F32);
                V::float_scatter(1, z, i, v, IndexingUpdateOp::Add)
            },
            |[i, v]| {
                let z = F::float_zeros(shape(&[4, 5]), &dev(), FloatDType::F32);
                F::float_scatter(1, z, i, v, IndexingUpdateOp::Add)
            },
        );
    }
}

#[test]
fn should_fold_constants_to_the_values_the_ops_give() {
    let c = |v| full_v(&[2, 3], v);
    let f = |v| full_f(&[2, 3], v);
    assert_eq!(bits(V::float_neg(c(0.1))), bits_f(F::float_neg(f(0.1))));
    assert_eq!(
        bits(V::float_neg(c(0.0))),
        bits_f(F::float_neg(f(0.0))),
        "-0"
    );
    for by in [3.0, 0.1, -1.0 / 3.0, 0.0, f64::INFINITY] {
        assert_eq!(
            bits(V::float_mul_scalar(c(0.1), Scalar::Float(by))),
            bits_f(F::float_mul_scalar(f(0.1), Scalar::Float(by))),
            "0.1 * {by}"
        );
    }
    // Two constants broadcast to their product's shape.
    assert_eq!(
        bits(V::float_mul(full_v(&[1, 3], 0.1), full_v(&[2, 1], 3.0))),
        bits_f(F::float_mul(full_f(&[1, 3], 0.1), full_f(&[2, 1], 3.0)))
    );
    assert_eq!(
        bits(V::float_expand(full_v(&[1, 3], 0.7), shape(&[4, 2, 3]))),
        bits_f(F::float_expand(full_f(&[1, 3], 0.7), shape(&[4, 2, 3])))
    );
    assert_eq!(
        bits(V::float_reshape(c(0.7), shape(&[3, 2]))),
        bits_f(F::float_reshape(f(0.7), shape(&[3, 2])))
    );
    // Rank 0: Burn's backward seed.
    let seed = V::float_ones(shape(&[]), &dev(), FloatDType::F32);
    assert_eq!(
        bits(V::float_neg(seed)),
        (vec![], vec![(-1.0f32).to_bits()])
    );
    // Read twice through clones: one value.
    let shared = c(1.5);
    assert_eq!(bits(shared.clone()), bits(shared));
    // Another dtype is not folded, and still right.
    let wide = V::float_full(shape(&[2]), Scalar::Float(0.1), &dev(), FloatDType::F64);
    let (inner, _) = V::float_mul_scalar(wide, Scalar::Float(3.0)).into_parts();
    assert_eq!(
        inner.into_data().try_into_vec::<f64>().unwrap(),
        vec![0.1 * 3.0; 2]
    );
}

/// `x * c` and `c * x` for a constant `c` of `c_dims` (broadcastable with `x`'s logical dims),
/// every value of `values`, against the loop.
fn check_scaled(lv: &Levels, x: &Arg, c_dims: &[usize], values: &[f64]) {
    for &v in values {
        check(
            lv,
            [x],
            |[x]| V::float_mul(x, full_v(c_dims, v)),
            |[x]| F::float_mul(x, full_f(c_dims, v)),
        );
        check(
            lv,
            [x],
            |[x]| V::float_exp(V::float_mul(full_v(c_dims, v), x)),
            |[x]| F::float_exp(F::float_mul(full_f(c_dims, v), x)),
        );
    }
}

#[test]
fn should_scale_by_a_constant_like_the_loop() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        for (x_dims, c_dims) in [
            (&[3, 4][..], &[3, 4][..]),
            (&[3, 1], &[1, 4]),
            (&[3, 4], &[1, 4]),
            (&[1], &[1]),
        ] {
            let x = lv.floats(at, x_dims, 7);
            check_scaled(&lv, &x, c_dims, &[1.0, 0.0, -2.5]);
        }
    }
    // NaN and infinities propagate as in the product: `inf * 0` is NaN, `NaN * 1` is NaN.
    let special = lv.arg(&[0], &[4], |shape| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = [f32::INFINITY, f32::NAN, -0.0, 2.0]
            .into_iter()
            .cycle()
            .take(n)
            .collect();
        T::from_data(TensorData::new(v, shape.to_vec()))
    });
    for v in [1.0, 0.0, -1.0] {
        let out = V::float_mul(special.vt(&lv), full_v(&[4], v));
        for idx in lv.indices() {
            let want = F::float_mul(special.example(&lv, &idx), full_f(&[4], v));
            let (_, got) = result_example(&out, &lv, &idx);
            let want = read(want);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "x * {v}: {got:?} against {want:?}"
                );
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    #[test]
    fn should_scale_by_a_constant_of_any_broadcast_shape_like_the_loop(
        dims in proptest::collection::vec(1usize..4, 1..4),
        x_ones in 0usize..8,
        c_ones in 0usize..8,
        sizes in proptest::collection::vec(1usize..4, 1..3),
        at_mask in 0usize..4,
        seed in 0u64..1000,
    ) {
        // Dims set to 1 in `x` or in `c` (not both need be): they broadcast.
        let unit = |mask: usize| -> Vec<usize> {
            dims.iter().enumerate().map(|(i, &d)| if mask >> i & 1 == 1 { 1 } else { d }).collect()
        };
        let (x_dims, c_dims) = (unit(x_ones), unit(c_ones & !x_ones));
        let lv = Levels::new(&sizes);
        let at: Vec<usize> = (0..sizes.len()).filter(|i| at_mask >> i & 1 == 1).collect();
        check_scaled(&lv, &lv.floats(&at, &x_dims, seed), &c_dims, &[1.0, 0.3]);
    }
}
