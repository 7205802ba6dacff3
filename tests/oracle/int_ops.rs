//! Oracle cases for `IntTensorOps`.

use burn::tensor::{Distribution, Int, IntDType, Tensor};

use crate::harness::{Gen, T, it, op};
use crate::kinds::{kind_cases, with};
use crate::run::{OpCase, case};

const ALL: Gen = Gen::I(-4, 4);
const NZ: Gen = Gen::INonZero(1, 4);
const SHIFT: Gen = Gen::I(0, 3);

fn int_random_like<const D: usize>(x: &Tensor<D, Int>) -> Tensor<D, Int> {
    Tensor::random(x.dims(), Distribution::Uniform(0.0, 5.0), &x.device())
}

pub fn cases() -> Vec<OpCase> {
    let mut v = kind_cases!("int", i, Int, Gen::I(-4, 4), 7i64);
    v.extend(vec![
        // --- creation, casts -------------------------------------------------------------------
        case(
            "int_random",
            0..=3,
            |p| vec![it(&p.shape())],
            |_p, a| {
                let r = ranked!(a[0], i, |x| int_random_like(&x));
                vec![
                    ranked!(a[0], i, r, i, |x, r| x + r.mul_scalar(0)),
                    ranked!(r, i, |r| r.greater_equal_elem(0)),
                ]
            },
        ),
        case(
            "int_zeros_ones_full",
            1..=3,
            |p| vec![it(&p.shape())],
            |_p, a| {
                vec![ranked!(a[0], i, |x| {
                    let d = x.device();
                    x.clone() * Tensor::<_, Int>::ones(x.dims(), &d)
                        + Tensor::<_, Int>::zeros(x.dims(), &d)
                        - Tensor::<_, Int>::full(x.dims(), 3, &d)
                        + x.zeros_like()
                })]
            },
        ),
        unary!("int_into_float", ALL, i, |x| x.float()),
        unary!("int_cast", ALL, i, |x| x.cast(IntDType::I32).mul_scalar(3)),
        // --- arithmetic ----------------------------------------------------------------------
        binary!("int_add", ALL, ALL, i, |x, y| x + y),
        binary!("int_sub", ALL, ALL, i, |x, y| x - y),
        binary!("int_mul", ALL, ALL, i, |x, y| x * y),
        binary!("int_div", ALL, NZ, i, |x, y| x / y),
        binary_eq!("int_remainder", Gen::I(-9, 9), NZ, i, |x, y| x.remainder(y)),
        unary!("int_add_scalar", ALL, i, |x| x.add_scalar(3)),
        unary!("int_sub_scalar", ALL, i, |x| x.sub_scalar(2)),
        unary!("int_mul_scalar", ALL, i, |x| x.mul_scalar(-2)),
        unary!("int_div_scalar", Gen::I(-9, 9), i, |x| x.div_scalar(2)),
        unary!("int_remainder_scalar", Gen::I(-9, 9), i, |x| x
            .remainder_scalar(3)),
        unary!("int_abs", ALL, i, |x| x.abs()),
        // --- comparisons ---------------------------------------------------------------------
        binary!("int_equal", Gen::I(-1, 1), Gen::I(-1, 1), i, |x, y| x
            .equal(y)),
        binary!("int_greater", Gen::I(-1, 1), Gen::I(-1, 1), i, |x, y| x
            .greater(y)),
        binary!(
            "int_greater_equal",
            Gen::I(-1, 1),
            Gen::I(-1, 1),
            i,
            |x, y| x.greater_equal(y)
        ),
        binary!("int_lower", Gen::I(-1, 1), Gen::I(-1, 1), i, |x, y| x
            .lower(y)),
        binary!(
            "int_lower_equal",
            Gen::I(-1, 1),
            Gen::I(-1, 1),
            i,
            |x, y| x.lower_equal(y)
        ),
        unary!("int_equal_elem", Gen::I(-1, 1), i, |x| x.equal_elem(0)),
        unary!("int_greater_elem", Gen::I(-1, 1), i, |x| x.greater_elem(0)),
        unary!("int_greater_equal_elem", Gen::I(-1, 1), i, |x| x
            .greater_equal_elem(0)),
        unary!("int_lower_elem", Gen::I(-1, 1), i, |x| x.lower_elem(1)),
        unary!("int_lower_equal_elem", Gen::I(-1, 1), i, |x| x
            .lower_equal_elem(-1)),
        // --- bitwise -------------------------------------------------------------------------
        binary!("bitwise_and", ALL, ALL, i, |x, y| x.bitwise_and(y)),
        binary!("bitwise_or", ALL, ALL, i, |x, y| x.bitwise_or(y)),
        binary!("bitwise_xor", ALL, ALL, i, |x, y| x.bitwise_xor(y)),
        binary!("bitwise_left_shift", ALL, SHIFT, i, |x, y| x
            .bitwise_left_shift(y)),
        binary!("bitwise_right_shift", ALL, SHIFT, i, |x, y| x
            .bitwise_right_shift(y)),
        unary!("bitwise_not", ALL, i, |x| x.bitwise_not()),
        unary!("bitwise_and_scalar", ALL, i, |x| x.bitwise_and_scalar(6)),
        unary!("bitwise_or_scalar", ALL, i, |x| x.bitwise_or_scalar(1)),
        unary!("bitwise_xor_scalar", ALL, i, |x| x.bitwise_xor_scalar(5)),
        unary!("bitwise_left_shift_scalar", ALL, i, |x| x
            .bitwise_left_shift_scalar(2)),
        unary!("bitwise_right_shift_scalar", ALL, i, |x| x
            .bitwise_right_shift_scalar(1)),
        // --- linear algebra ------------------------------------------------------------------
        case(
            "int_matmul",
            2..=2,
            |p| vec![it(&[p.d[0], p.d[1]]), it(&[p.d[1], p.d[2]])],
            |_p, a| vec![T::from(a[0].i::<2>().matmul(a[1].i::<2>()))],
        ),
        case(
            "int_matmul_r3_broadcast",
            3..=3,
            |p| {
                let (la, lb) = match p.pick(5, 3) {
                    0 => (p.d[3], p.d[3]),
                    1 => (p.d[3], 1),
                    _ => (1, p.d[3]),
                };
                vec![it(&[la, p.d[0], p.d[1]]), it(&[lb, p.d[1], p.d[2]])]
            },
            |_p, a| vec![T::from(a[0].i::<3>().matmul(a[1].i::<3>()))],
        ),
        // --- reductions and scans ------------------------------------------------------------
        unary!("int_sum", ALL, i, |x| x.sum()),
        case(
            "int_prod",
            0..=2,
            |p| vec![op(&p.shape(), Gen::I(-2, 2))],
            |_p, a| vec![ranked!(a[0], i, |x| x.prod())],
        ),
        case(
            "int_sum_dim",
            1..=3,
            |p| vec![it(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.sum_dim(d))]
            },
        ),
        case(
            "int_prod_dim",
            1..=3,
            |p| vec![op(&p.shape(), Gen::I(-2, 2))],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.prod_dim(d))]
            },
        ),
        case(
            "int_mean_dim",
            1..=3,
            |p| vec![op(&p.shape(), Gen::I(-9, 9))],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.mean_dim(d))]
            },
        ),
        case(
            "int_cumsum",
            1..=3,
            |p| vec![it(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.cumsum(d))]
            },
        ),
        case(
            "int_cumprod",
            1..=3,
            |p| vec![op(&p.shape(), Gen::I(-2, 2))],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.cumprod(d))]
            },
        ),
        case(
            "int_cummin",
            1..=3,
            |p| vec![it(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.cummin(d))]
            },
        ),
        case(
            "int_cummax",
            1..=3,
            |p| vec![it(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.cummax(d))]
            },
        ),
        case(
            "int_argmax",
            1..=3,
            |p| vec![op(&p.shape(), Gen::IDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.argmax(d))]
            },
        ),
        case(
            "int_argmin",
            1..=3,
            |p| vec![op(&p.shape(), Gen::IDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], i, |x| x.argmin(d))]
            },
        ),
        // `Tensor::argtopk` asserts `k < size`: the dim gets size >= 2.
        case(
            "int_argtopk",
            1..=3,
            |p| {
                let d = p.dim(1);
                vec![op(&with(&p.shape(), d, p.d[d].max(2)), Gen::IDistinct)]
            },
            |p, a| {
                let d = p.dim(1);
                let k = 1 + p.pick(2, p.d[d].max(2) - 1);
                vec![ranked!(a[0], i, |x| x.argtopk(k, d))]
            },
        ),
    ]);
    // Ties: the first index, batched or not.
    {
        v.push(case(
            "int_argmax_ties",
            1..=3,
            |p| vec![op(&p.shape(), Gen::I(0, 1))],
            |p, a| {
                let d = p.dim(1);
                vec![
                    ranked!(a[0], i, |x| x.clone().argmax(d)),
                    ranked!(a[0], i, |x| x.argmin(d)),
                ]
            },
        ));
    }
    v
}
