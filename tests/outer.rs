//! Per-example weight gradients of dense layers, which the engine holds as lazy outer products
//! (one row per example: `x ⊗ g`) or multiplies out (a sequence per example), read back through
//! `per_example_grads`: their values, norms, batch sums and means against the loop, at every
//! batch size including 0, and at random shapes.

mod support;

use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Distribution, Tensor};
use burn_vmap::{ParamGrads, per_example_grads};
use proptest::prelude::*;
use support::{assert_close, check_grads, dev, example, values};

fn layer(d_in: usize, d_out: usize) -> Linear {
    LinearConfig::new(d_in, d_out).init(&dev())
}

fn leaf_values(grads: &ParamGrads, path: &str) -> Vec<f32> {
    let (_, _, g) = grads.iter().find(|(p, _, _)| *p == path).expect(path);
    g.to_data().convert::<f32>().try_to_vec().unwrap()
}

/// `sum(sin(layer(x)))` of one example (a row, or a sequence of rows).
fn loss<const D: usize>(m: &Linear, x: Tensor<D>) -> Tensor<1> {
    m.forward(x).sin().sum()
}

/// Per-example norms, sums and means of the gradients against the loop's.
fn check_reductions(grads: &ParamGrads, per: &[(Vec<f32>, Vec<f32>)]) {
    let b = per.len();
    let norms = values(grads.per_example_norms());
    let want: Vec<f32> = per
        .iter()
        .map(|(w, bias)| w.iter().chain(bias).map(|v| v * v).sum::<f32>().sqrt())
        .collect();
    assert_close(&norms, &want, "per-example norms");
    for (k, path) in ["weight", "bias"].into_iter().enumerate() {
        let pick = |p: &(Vec<f32>, Vec<f32>)| if k == 0 { p.0.clone() } else { p.1.clone() };
        let n = per.first().map_or(0, |p| pick(p).len());
        let sum: Vec<f32> = (0..n)
            .map(|j| per.iter().map(|p| pick(p)[j]).sum())
            .collect();
        assert_close(&leaf_values(&grads.clone().sum_batch(), path), &sum, "sum");
        let mean: Vec<f32> = sum.iter().map(|s| s / b as f32).collect();
        assert_close(
            &leaf_values(&grads.clone().mean_batch(), path),
            &mean,
            "mean",
        );
    }
}

/// The loop's gradients of every example: `(weight, bias)` flattened.
fn loop_grads<const DB: usize, const D: usize>(
    m: &Linear,
    xs: &Tensor<DB>,
) -> Vec<(Vec<f32>, Vec<f32>)> {
    (0..xs.dims()[0])
        .map(|i| {
            let g = support::loop_grads(m, example::<DB, D, _>(xs, i), loss::<D>);
            (
                support::burn_grad(&g, m.weight.id, 2).unwrap(),
                support::burn_grad(&g, m.bias.as_ref().unwrap().id, 1).unwrap(),
            )
        })
        .collect()
}

#[test]
fn should_give_one_row_weight_gradients_as_the_loop() {
    let m = layer(4, 3);
    let xs = Tensor::<2>::random([5, 4], Distribution::Normal(0.0, 1.0), &dev());
    let grads = check_grads(
        &m,
        xs.clone(),
        |i| example::<2, 1, _>(&xs, i),
        loss::<1>,
        "one row",
    );
    assert_eq!(grads.get::<3>("weight").unwrap().dims(), [5, 4, 3]);
    check_reductions(&grads, &loop_grads::<2, 1>(&m, &xs));
}

#[test]
fn should_give_sequence_weight_gradients_as_the_loop() {
    let m = layer(4, 3);
    let xs = Tensor::<3>::random([5, 2, 4], Distribution::Normal(0.0, 1.0), &dev());
    let grads = check_grads(
        &m,
        xs.clone(),
        |i| example::<3, 2, _>(&xs, i),
        loss::<2>,
        "sequence",
    );
    check_reductions(&grads, &loop_grads::<3, 2>(&m, &xs));
}

/// No example: gradients with a 0-sized batch axis, sums of zeros and means of NaN (0 / 0, as
/// optax's and `jnp.mean`'s).
#[test]
fn should_give_empty_gradients_for_an_empty_batch() {
    let m = layer(4, 3);
    let xs = Tensor::<2>::zeros([0, 4], &dev());
    let grads = per_example_grads(&m, xs, loss::<1>).unwrap();
    assert_eq!(grads.get::<3>("weight").unwrap().dims(), [0, 4, 3]);
    assert_eq!(grads.get::<2>("bias").unwrap().dims(), [0, 3]);
    assert_eq!(grads.per_example_norms().dims(), [0]);
    assert!(
        leaf_values(&grads.clone().sum_batch(), "weight")
            .iter()
            .all(|v| *v == 0.0)
    );
    assert!(
        leaf_values(&grads.mean_batch(), "bias")
            .iter()
            .all(|v| v.is_nan())
    );
}

/// Random shapes a run: fewer on the cubecl backends, where every new shape compiles its kernels
/// (on lavapipe in CI, 32 cases took 32 s; the Flex run covers the 32).
const SHAPE_CASES: u32 = if cfg!(any(feature = "wgpu", feature = "cuda")) {
    10
} else {
    32
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(SHAPE_CASES))]

    /// Random batch sizes (0 included), widths and sequence lengths (1: one row, a rank-1
    /// input; more: a sequence).
    #[test]
    fn should_match_the_loop_over_random_shapes(
        b in 0usize..5,
        d_in in 1usize..5,
        d_out in 1usize..5,
        seq in 1usize..4,
    ) {
        let m = layer(d_in, d_out);
        if seq == 1 {
            let xs = Tensor::<2>::random([b, d_in], Distribution::Normal(0.0, 1.0), &dev());
            let grads = per_example_grads(&m, xs.clone(), loss::<1>).unwrap();
            let per = loop_grads::<2, 1>(&m, &xs);
            prop_assert_eq!(grads.get::<3>("weight").unwrap().dims(), [b, d_in, d_out]);
            check_values(&grads, &per);
            if b > 0 {
                check_reductions(&grads, &per);
            }
        } else {
            let xs = Tensor::<3>::random([b, seq, d_in], Distribution::Normal(0.0, 1.0), &dev());
            let grads = per_example_grads(&m, xs.clone(), loss::<2>).unwrap();
            let per = loop_grads::<3, 2>(&m, &xs);
            check_values(&grads, &per);
            if b > 0 {
                check_reductions(&grads, &per);
            }
        }
    }
}

/// Every example's gradients against the loop's.
fn check_values(grads: &ParamGrads, per: &[(Vec<f32>, Vec<f32>)]) {
    let w: Vec<f32> = per.iter().flat_map(|p| p.0.clone()).collect();
    let b: Vec<f32> = per.iter().flat_map(|p| p.1.clone()).collect();
    assert_close(&leaf_values(grads, "weight"), &w, "weight");
    assert_close(&leaf_values(grads, "bias"), &b, "bias");
}
