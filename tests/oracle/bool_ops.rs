//! Oracle cases for `BoolTensorOps`.

use burn::tensor::{Bool, Tensor};

use crate::harness::{Gen, bo};
use crate::kinds::kind_cases;
use crate::run::{OpCase, case};

pub fn cases() -> Vec<OpCase> {
    let mut v = kind_cases!("bool", b, Bool, Gen::B, true);
    // Flex 0.22.1's `bool_gather` and `bool_select` return a bool primitive whose dtype says
    // `U8`: the loop itself cannot read them back as bools (`gaps::known_gap_flex_bool_gather_dtype`).
    v.retain(|c| !FLEX_BOOL_DTYPE_GAP.contains(&c.name));
    v.extend(vec![
        case(
            "bool_zeros_ones",
            1..=3,
            |p| vec![bo(&p.shape())],
            |_p, a| {
                vec![
                    ranked!(a[0], b, |m| m
                        .clone()
                        .bool_and(Tensor::<_, Bool>::ones(m.dims(), &m.device()))),
                    ranked!(a[0], b, |m| m
                        .clone()
                        .bool_or(Tensor::<_, Bool>::zeros(m.dims(), &m.device()))),
                    ranked!(a[0], b, |m| Tensor::<_, Bool>::zeros(m.dims(), &m.device())
                        .bool_or(m)),
                ]
            },
        ),
        unary!("bool_into_int", Gen::B, b, |m| m.int()),
        unary!("bool_into_float", Gen::B, b, |m| m.float()),
        unary!("bool_not", Gen::B, b, |m| m.bool_not()),
        unary!("bool_equal_elem", Gen::B, b, |m| m.equal_elem(true)),
        binary!("bool_and", Gen::B, Gen::B, b, |x, y| x.bool_and(y)),
        binary!("bool_or", Gen::B, Gen::B, b, |x, y| x.bool_or(y)),
        binary!("bool_equal", Gen::B, Gen::B, b, |x, y| x.equal(y)),
    ]);
    v
}

/// Cases the Flex backend cannot run unbatched (see `gaps::known_gap_flex_bool_gather_dtype`).
const FLEX_BOOL_DTYPE_GAP: &[&str] = &["bool_gather", "bool_select"];
