//! Derived structs through the transforms: `vmap` over derived inputs and outputs (a tree
//! prefix of `in_axes` sharing a struct), the paths of derived fields in errors, and a derived
//! output accumulated with a derived accumulator spec.

mod common;

use burn::tensor::Tensor;
use burn_vmap::accumulate::{Concat, Mean, Sum};
use burn_vmap::transform::Axes;
use burn_vmap::tree::Spec;
use burn_vmap::{Tree, VmapError, micro_vmap, vmap};
use common::*;

/// `Linear` with one more leading axis on every tensor: what a batch of them looks like.
#[derive(Tree, Clone, Debug)]
struct BatchedLinear {
    weight: Tensor<3>,
    bias: Tensor<2>,
}

#[derive(Tree, Clone, Debug)]
struct BatchedMlp {
    layer1: BatchedLinear,
    layer2: BatchedLinear,
}

/// One example through a two-layer network, as plain Burn code over derived structs.
fn forward(m: Mlp, x: Tensor<1>) -> Stats<Tensor<1>, Tensor<1>> {
    let layer = |l: Linear, x: Tensor<1>| {
        l.weight.matmul(x.unsqueeze_dim::<2>(1)).squeeze_dim::<1>(1) + l.bias
    };
    let h = layer(m.layer1, x).tanh();
    let out = layer(m.layer2, h);
    Stats {
        per_example: out.clone(),
        total: out.sum(),
    }
}

fn row3(t: &Tensor<3>, i: usize) -> Tensor<2> {
    t.clone().narrow(0, i, 1).squeeze_dim::<2>(0)
}

fn row2(t: &Tensor<2>, i: usize) -> Tensor<1> {
    t.clone().narrow(0, i, 1).squeeze_dim::<1>(0)
}

fn example(params: &BatchedMlp, i: usize) -> Mlp {
    let one = |l: &BatchedLinear| Linear {
        weight: row3(&l.weight, i),
        bias: row2(&l.bias, i),
    };
    Mlp {
        layer1: one(&params.layer1),
        layer2: one(&params.layer2),
    }
}

#[test]
fn should_vmap_over_derived_inputs_and_outputs() {
    let n = 4;
    let params = BatchedMlp {
        layer1: BatchedLinear {
            weight: data([n, 3, 2], 0.0),
            bias: data([n, 3], 1.0),
        },
        layer2: BatchedLinear {
            weight: data([n, 1, 3], 2.0),
            bias: data([n, 1], 3.0),
        },
    };
    let xs = data([n, 2], 4.0);
    let out: Stats<Tensor<2>, Tensor<2>> = vmap(|(m, x): (Mlp, Tensor<1>)| forward(m, x))
        .call((params.clone(), xs.clone()))
        .unwrap();
    assert_eq!(out.per_example.dims(), [n, 1]);
    assert_eq!(out.total.dims(), [n, 1]);
    let (mut per, mut tot) = (Vec::new(), Vec::new());
    for i in 0..n {
        let s = forward(example(&params, i), row2(&xs, i));
        per.extend(floats(s.per_example));
        tot.extend(floats(s.total));
    }
    assert_close(&floats(out.per_example), &per);
    assert_close(&floats(out.total), &tot);

    // in_axes as a tree prefix: map the first layer and the inputs, share the second layer.
    let shared = linear(1, 3, 7.0);
    let out: Tensor<2> = vmap(|(l1, l2, x): (Linear, Linear, Tensor<1>)| {
        forward(
            Mlp {
                layer1: l1,
                layer2: l2,
            },
            x,
        )
        .per_example
    })
    .in_axes(Axes::Seq(vec![
        Spec::Leaf(Some(0)),
        Spec::Leaf(None),
        Spec::Leaf(Some(0)),
    ]))
    .call((params.layer1.clone(), shared.clone(), xs.clone()))
    .unwrap();
    let mut want = Vec::new();
    for i in 0..n {
        let m = Mlp {
            layer1: example(&params, i).layer1,
            layer2: shared.clone(),
        };
        want.extend(floats(forward(m, row2(&xs, i)).per_example));
    }
    assert_close(&floats(out), &want);
}

#[test]
fn should_report_derived_paths_in_vmap_errors() {
    let params = BatchedLinear {
        weight: data([4, 3, 2], 0.0),
        bias: data([5, 3], 1.0),
    };
    let err = vmap(|l: Linear| l.bias)
        .call_as::<_, _, _, Tensor<2>>(params)
        .unwrap_err();
    assert_eq!(
        err,
        VmapError::InconsistentBatchSizes {
            transform: "vmap",
            arguments: vec![("args.weight".into(), 4), ("args.bias".into(), 5)]
        }
    );
    // The function's view has the wrong ranks: it names the field.
    let params = BatchedLinear {
        weight: data([4, 3, 2], 0.0),
        bias: data([4, 3], 1.0),
    };
    let err = vmap(|l: BatchedLinear| l.bias)
        .call_as::<_, _, _, Tensor<3>>(params)
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, expected_rank: 3, got_rank: 2, .. } if path == "args.weight"),
        "{err}"
    );
}

#[test]
fn should_accumulate_a_derived_output_with_a_derived_accumulator_spec() {
    let xs = data([6, 3], 0.5);
    let f = |x: Tensor<1>| Stats {
        per_example: x.clone().exp(),
        total: x.sum(),
    };
    let out: Stats<Tensor<2>, Tensor<1>> = micro_vmap(f)
        .microbatch_size(2)
        .accumulator(Stats {
            per_example: Concat,
            total: Mean,
        })
        .call(xs.clone())
        .unwrap();
    assert_close(&floats(out.per_example), &floats(xs.clone().exp()));
    let rows = floats(xs);
    let mean = rows.iter().sum::<f32>() / 6.0;
    assert_close(&floats(out.total), &[mean]);

    // A spec whose fields are not the output's does not fit.
    #[derive(Tree, Clone)]
    struct Other<P, T> {
        per_example: P,
        sum: T,
    }
    let err = micro_vmap(f)
        .accumulator(Other {
            per_example: Concat,
            sum: Sum,
        })
        .call_as::<_, _, _, Stats<Tensor<2>, Tensor<1>>>(data([2, 3], 0.0))
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { why, .. } if why.contains("sum")),
        "{err}"
    );
}
