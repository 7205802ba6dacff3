//! Oracle cases for `FloatTensorOps`.

use burn::tensor::{Distribution, FloatDType, Tensor};

use crate::harness::{Gen, T, fl, op};
use crate::kinds::{kind_cases, with};
use crate::run::{OpCase, case};

/// A float dtype other than the default `F32` (Flex computes `F64`).
fn other_float() -> FloatDType {
    FloatDType::F64
}

const POS: Gen = Gen::F(0.1, 3.0);
const NZ: Gen = Gen::FNonZero(0.5, 2.0);
const UNIT: Gen = Gen::F(-0.95, 0.95);
const ALL: Gen = Gen::F(-2.0, 2.0);

pub fn cases() -> Vec<OpCase> {
    let mut v = kind_cases!("float", f, burn::tensor::Float, Gen::F(-2.0, 2.0), 2.5f32);
    v.extend(vec![
        // --- creation, transfer, casts ---------------------------------------------------
        case(
            "float_random",
            0..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| {
                let r = ranked!(a[0], f, |x| x.random_like(Distribution::Default));
                vec![
                    ranked!(a[0], f, r, f, |x, r| x + r.mul_scalar(0.0)),
                    ranked!(r, f, |r| r.greater_equal_elem(0.0)),
                ]
            },
        ),
        case(
            "float_zeros_ones_full",
            1..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| {
                vec![ranked!(a[0], f, |x| {
                    let d = x.device();
                    x.clone() * Tensor::<_>::ones(x.dims(), &d) + Tensor::<_>::zeros(x.dims(), &d)
                        - Tensor::<_>::full(x.dims(), 0.25, &d)
                        + x.zeros_like()
                        + x.ones_like()
                })]
            },
        ),
        unary!("float_into_int", Gen::F(-5.0, 5.0), f, |x| x.int()),
        unary!("float_cast", ALL, f, |x| x
            .cast(other_float())
            .exp()
            .cast(FloatDType::F32)),
        case(
            "float_cast_other_dtype_out",
            0..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| vec![ranked!(a[0], f, |x| x.cast(other_float()).mul_scalar(3.0))],
        ),
        // --- elementwise binary ------------------------------------------------------------
        binary!("float_add", ALL, ALL, f, |x, y| x + y),
        binary!("float_sub", ALL, ALL, f, |x, y| x - y),
        binary!("float_mul", ALL, ALL, f, |x, y| x * y),
        binary!("float_div", ALL, NZ, f, |x, y| x / y),
        binary_eq!("float_remainder", Gen::F(-5.0, 5.0), NZ, f, |x, y| x
            .remainder(y)),
        binary!("float_powf", POS, ALL, f, |x, y| x.powf(y)),
        binary!("float_atan2", ALL, ALL, f, |x, y| x.atan2(y)),
        // --- scalar --------------------------------------------------------------------------
        unary!("float_add_scalar", ALL, f, |x| x.add_scalar(1.5)),
        unary!("float_sub_scalar", ALL, f, |x| x.sub_scalar(0.5)),
        unary!("float_mul_scalar", ALL, f, |x| x.mul_scalar(-2.0)),
        unary!("float_div_scalar", ALL, f, |x| x.div_scalar(4.0)),
        unary!("float_remainder_scalar", Gen::F(-5.0, 5.0), f, |x| x
            .remainder_scalar(0.7)),
        unary!("float_powf_scalar", POS, f, |x| x.powf_scalar(2.5)),
        // --- unary -----------------------------------------------------------------------------
        unary!("float_recip", NZ, f, |x| x.recip()),
        unary!("float_exp", ALL, f, |x| x.exp()),
        unary!("float_log", POS, f, |x| x.log()),
        unary!("float_log1p", POS, f, |x| x.log1p()),
        unary!("float_sqrt", POS, f, |x| x.sqrt()),
        unary!("float_abs", ALL, f, |x| x.abs()),
        unary!("float_cos", ALL, f, |x| x.cos()),
        unary!("float_sin", ALL, f, |x| x.sin()),
        unary!("float_tan", Gen::F(-1.2, 1.2), f, |x| x.tan()),
        unary!("float_cosh", ALL, f, |x| x.cosh()),
        unary!("float_sinh", ALL, f, |x| x.sinh()),
        unary!("float_tanh", ALL, f, |x| x.tanh()),
        unary!("float_acos", UNIT, f, |x| x.acos()),
        unary!("float_acosh", Gen::F(1.0, 3.0), f, |x| x.acosh()),
        unary!("float_asin", UNIT, f, |x| x.asin()),
        unary!("float_asinh", ALL, f, |x| x.asinh()),
        unary!("float_atan", ALL, f, |x| x.atan()),
        unary!("float_atanh", UNIT, f, |x| x.atanh()),
        unary!("float_round", Gen::F(-3.0, 3.0), f, |x| x.round()),
        unary!("float_floor", Gen::F(-3.0, 3.0), f, |x| x.floor()),
        unary!("float_ceil", Gen::F(-3.0, 3.0), f, |x| x.ceil()),
        unary!("float_trunc", Gen::F(-3.0, 3.0), f, |x| x.trunc()),
        unary!("float_erf", ALL, f, |x| x.erf()),
        // --- comparisons -----------------------------------------------------------------------
        binary!("float_equal", Gen::FGrid, Gen::FGrid, f, |x, y| x.equal(y)),
        binary!("float_greater", Gen::FGrid, Gen::FGrid, f, |x, y| x
            .greater(y)),
        binary!("float_greater_equal", Gen::FGrid, Gen::FGrid, f, |x, y| x
            .greater_equal(y)),
        binary!("float_lower", Gen::FGrid, Gen::FGrid, f, |x, y| x.lower(y)),
        binary!("float_lower_equal", Gen::FGrid, Gen::FGrid, f, |x, y| x
            .lower_equal(y)),
        unary!("float_equal_elem", Gen::FGrid, f, |x| x.equal_elem(0.5)),
        unary!("float_greater_elem", Gen::FGrid, f, |x| x.greater_elem(0.0)),
        unary!("float_greater_equal_elem", Gen::FGrid, f, |x| x
            .greater_equal_elem(0.0)),
        unary!("float_lower_elem", Gen::FGrid, f, |x| x.lower_elem(0.5)),
        unary!("float_lower_equal_elem", Gen::FGrid, f, |x| x
            .lower_equal_elem(-0.5)),
        // --- linear algebra --------------------------------------------------------------------
        case(
            "float_matmul",
            2..=2,
            |p| vec![fl(&[p.d[0], p.d[1]]), fl(&[p.d[1], p.d[2]])],
            |_p, a| vec![T::from(a[0].f::<2>().matmul(a[1].f::<2>()))],
        ),
        case(
            "float_matmul_r3_broadcast",
            3..=3,
            |p| {
                // Leading dims: equal, or one side 1 (the unbatched-weight fold path when rhs is 1).
                let (la, lb) = match p.pick(5, 3) {
                    0 => (p.d[3], p.d[3]),
                    1 => (p.d[3], 1),
                    _ => (1, p.d[3]),
                };
                vec![fl(&[la, p.d[0], p.d[1]]), fl(&[lb, p.d[1], p.d[2]])]
            },
            |_p, a| vec![T::from(a[0].f::<3>().matmul(a[1].f::<3>()))],
        ),
        case(
            "float_matmul_r4",
            2..=2,
            |p| {
                vec![
                    fl(&[p.d[3], 1, p.d[0], p.d[1]]),
                    fl(&[1, 2, p.d[1], p.d[2]]),
                ]
            },
            |_p, a| vec![T::from(a[0].f::<4>().matmul(a[1].f::<4>()))],
        ),
        case(
            "float_cross",
            1..=3,
            |p| {
                let d = p.dim(1);
                let s = with(&p.shape(), d, 3);
                vec![fl(&s), fl(&s)]
            },
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, a[1], f, |x, y| x.cross(y, d))]
            },
        ),
        // --- reductions and scans --------------------------------------------------------------
        unary!("float_sum", ALL, f, |x| x.sum()),
        case(
            "float_sum_dim",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.sum_dim(d))]
            },
        ),
        case(
            "float_mean_dim",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.mean_dim(d))]
            },
        ),
        case(
            "float_cumsum",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cumsum(d))]
            },
        ),
        case(
            "float_cumprod",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cumprod(d))]
            },
        ),
        case(
            "float_cummin",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cummin(d))]
            },
        ),
        case(
            "float_cummax",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cummax(d))]
            },
        ),
        case(
            "float_argmax",
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.argmax(d))]
            },
        ),
        case(
            "float_argmin",
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.argmin(d))]
            },
        ),
        // `Tensor::argtopk` asserts `k < size`: the dim gets size >= 2.
        case(
            "float_argtopk",
            1..=3,
            |p| {
                let d = p.dim(1);
                vec![op(&with(&p.shape(), d, p.d[d].max(2)), Gen::FDistinct)]
            },
            |p, a| {
                let d = p.dim(1);
                let k = 1 + p.pick(2, p.d[d].max(2) - 1);
                vec![ranked!(a[0], f, |x| x.argtopk(k, d))]
            },
        ),
    ]);
    v
}
