//! Oracle cases for `BoolTensorOps`.

use burn::tensor::{Bool, Tensor};

use crate::float_ops::kind_cases;
use crate::harness::{Gen, OpCase, V, bo, case};

pub fn cases() -> Vec<OpCase> {
    let mut v = kind_cases!("bool", b, Bool, Gen::B, true,
        scatter: "bool_scatter_or", select_add: "bool_select_or");
    v.extend(vec![
        case(
            "bool_zeros_ones",
            &["bool_zeros", "bool_ones", "bool_and", "bool_or"],
            1..=3,
            |p| vec![bo(&p.shape())],
            |_p, a| {
                vec![
                    ranked!(a[0], b, |m| m
                        .clone()
                        .bool_and(Tensor::<V, _, Bool>::ones(m.dims(), &m.device()))),
                    ranked!(a[0], b, |m| m
                        .clone()
                        .bool_or(Tensor::<V, _, Bool>::zeros(m.dims(), &m.device()))),
                    ranked!(a[0], b, |m| Tensor::<V, _, Bool>::zeros(
                        m.dims(),
                        &m.device()
                    )
                    .bool_or(m)),
                ]
            },
        ),
        unary!("bool_into_int", ["bool_into_int"], Gen::B, b, |m| m.int()),
        unary!("bool_into_float", ["bool_into_float"], Gen::B, b, |m| m
            .float()),
        unary!("bool_not", ["bool_not"], Gen::B, b, |m| m.bool_not()),
        unary!("bool_equal_elem", ["bool_equal_elem"], Gen::B, b, |m| m
            .equal_elem(true)),
        binary!("bool_and", ["bool_and"], Gen::B, Gen::B, b, |x, y| x
            .bool_and(y)),
        binary!("bool_or", ["bool_or"], Gen::B, Gen::B, b, |x, y| x
            .bool_or(y)),
        binary!("bool_equal", ["bool_equal"], Gen::B, Gen::B, b, |x, y| x
            .equal(y)),
    ]);
    v
}
