//! Module ops (conv, pool) under vmap against the loop oracle.

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Distribution, Tensor, Tolerance};
use burn_vmap::{vmap, TestBackend, Vmap};

type V = Vmap<TestBackend>;

fn rand<const D: usize>(shape: [usize; D]) -> Tensor<V, D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default())
}

fn conv(x: Tensor<V, 4>, w: Tensor<V, 4>, b: Option<Tensor<V, 1>>, groups: usize) -> Tensor<V, 4> {
    conv2d(x, w, b, ConvOptions::new([1, 2], [1, 0], [1, 1], groups))
}

fn check_conv(xb: bool, wb: bool, bb: bool, groups: usize) {
    let e = 3;
    let (n, c, o) = (2, 4, 6);
    let x = if xb {
        rand([e, n, c, 5, 6])
    } else {
        rand([1, n, c, 5, 6])
    };
    let w = if wb {
        rand([e, o, c / groups, 3, 2])
    } else {
        rand([1, o, c / groups, 3, 2])
    };
    let b = if bb { rand([e, o]) } else { rand([1, o]) };
    let ax = |batched: bool| if batched { Some(0) } else { None };
    let axes = [ax(xb), ax(wb), ax(bb)];
    let f = |(x, w, b): (Tensor<V, 4>, Tensor<V, 4>, Tensor<V, 1>)| conv(x, w, Some(b), groups);
    // Unmapped operands are passed without the batch dim, so each mix has its own input type.
    macro_rules! arg {
        (true, $t:expr, $d:literal) => {
            $t.clone()
        };
        (false, $t:expr, $d:literal) => {
            $t.clone().squeeze_dim::<$d>(0)
        };
    }
    macro_rules! call {
        ($($x:tt $w:tt $b:tt),*) => {
            match (xb, wb, bb) {
                $(($x, $w, $b) => vmap(f).in_axes(axes).call((arg!($x, x, 4), arg!($w, w, 4), arg!($b, b, 1))).unwrap(),)*
            }
        };
    }
    let out: Tensor<V, 5> = call!(true true true, true true false, true false true, true false false,
        false true true, false true false, false false true, false false false);
    let pick = |t: &Tensor<V, 5>, batched: bool, i: usize| {
        t.clone()
            .narrow(0, if batched { i } else { 0 }, 1)
            .squeeze_dim::<4>(0)
    };
    let expected: Vec<Tensor<V, 4>> = (0..e)
        .map(|i| {
            let bi = b
                .clone()
                .narrow(0, if bb { i } else { 0 }, 1)
                .squeeze_dim::<1>(0);
            conv(pick(&x, xb, i), pick(&w, wb, i), Some(bi), groups)
        })
        .collect();
    let expected = Tensor::stack::<5>(expected, 0);
    out.into_data()
        .assert_approx_eq::<f32>(&expected.into_data(), Tolerance::default());
}

#[test]
fn should_batch_conv2d_for_every_operand_mix() {
    for groups in [1, 2] {
        for (xb, wb, bb) in [
            (true, false, false),
            (false, true, false),
            (true, true, false),
            (true, true, true),
            (false, false, true),
            (true, false, true),
            (false, true, true),
        ] {
            check_conv(xb, wb, bb, groups);
        }
    }
}
