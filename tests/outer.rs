//! Lazy outer products (the per-example weight gradients of dense layers): every factored rule
//! of `rules::outer` against the same op on the materialized product, and the places where the
//! factored form must survive (it is what keeps DP-SGD's clipped sum and the gradients'
//! second moments from writing a `batch x d_in x d_out` tensor).

use burn::backend::Autodiff;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Int;
use burn::tensor::{Distribution, Tensor, Tolerance};
use burn_vmap::accumulate::{Concat, Sum};
use burn_vmap::testing::TestBackend;
use burn_vmap::{MicroAux, ParamGrads, Vmap, micro_grad_module, per_example_grads, vmap};
use proptest::prelude::*;

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

const B: usize = 5;
const D_IN: usize = 4;
const D_OUT: usize = 3;

fn layer() -> Linear<AD> {
    let layer: Linear<AD> = LinearConfig::new(D_IN, D_OUT).init(&Default::default());
    // Burn initializes parameters on first use; draw them before vmap.
    let _ = (layer.weight.val(), layer.bias.as_ref().map(|b| b.val()));
    layer
}

fn inputs() -> Tensor<AD, 2> {
    Tensor::random(
        [B, D_IN],
        Distribution::Normal(0.0, 1.0),
        &Default::default(),
    )
}

/// Per-example weight gradients `[B, D_IN, D_OUT]` of `sum(sin(layer(x)))`.
fn weight_grads(layer: &Linear<AD>, xs: Tensor<AD, 2>) -> Tensor<V, 3> {
    let grads: ParamGrads<V> = vmap(|x: Tensor<AD, 1>| {
        let mut g = layer.forward(x).sin().sum().backward();
        ParamGrads::from_module(&mut g, layer)
    })
    .call(xs)
    .unwrap();
    grads.get::<3>("weight").unwrap()
}

/// Weight gradients `[batch, D_IN, D_OUT]` of `sum(layer(x) * t)` for one shared input `x`
/// (in_axes None) and a per-example `t` (the rows of `ts`).
fn shared_input_weight_grads(ts: Tensor<AD, 2>) -> Tensor<V, 3> {
    let layer = layer();
    let x = Tensor::<AD, 1>::random([D_IN], Distribution::Default, &Default::default());
    let grads: ParamGrads<V> = vmap(|(x, t): (Tensor<AD, 1>, Tensor<AD, 1>)| {
        let mut g = (layer.forward(x) * t).sum().backward();
        ParamGrads::from_module(&mut g, &layer)
    })
    .in_axes([None, Some(0)])
    .call((x, ts))
    .unwrap();
    grads.get("weight").unwrap()
}

fn is_lazy<const D: usize>(t: &Tensor<V, D>) -> bool {
    t.clone().into_primitive().tensor().is_factored()
}

/// The same values, multiplied out (an op with no factored form reads the physical tensor).
fn dense<const D: usize>(t: &Tensor<V, D>) -> Tensor<V, D> {
    let d = t.clone().add_scalar(0.0);
    assert!(!is_lazy(&d));
    d
}

fn close<const D: usize>(got: Tensor<V, D>, want: Tensor<V, D>) {
    assert_eq!(got.dims(), want.dims());
    got.into_data()
        .assert_approx_eq::<f32>(&want.into_data(), Tolerance::rel_abs(1e-4, 1e-5));
}

#[test]
fn should_hold_one_row_weight_gradients_factored_with_the_loop_values() {
    let layer = layer();
    let xs = inputs();
    let g = weight_grads(&layer, xs.clone());
    assert!(is_lazy(&g));
    assert_eq!(g.dims(), [B, D_IN, D_OUT]);
    // Against single-example backward passes.
    for i in 0..B {
        let x = xs.clone().narrow(0, i, 1).squeeze_dim::<1>(0);
        let grads = layer.forward(x).sin().sum().backward();
        let want = layer.weight.grad(&grads).unwrap();
        close(g.clone().narrow(0, i, 1).squeeze_dim::<2>(0), want);
    }
}

#[test]
fn should_keep_products_and_per_example_scalings_factored() {
    let g = weight_grads(&layer(), inputs());
    let d = dense(&g);
    let c = Tensor::<V, 3>::random(
        [B, 1, 1],
        Distribution::Uniform(0.5, 2.0),
        &Default::default(),
    );
    let cases: Vec<(&str, Tensor<V, 3>, Tensor<V, 3>)> = vec![
        ("g * g", g.clone() * g.clone(), d.clone() * d.clone()),
        ("g * c", g.clone() * c.clone(), d.clone() * c.clone()),
        ("c * g", c.clone() * g.clone(), c.clone() * d.clone()),
        ("g / c", g.clone() / c.clone(), d.clone() / c.clone()),
        ("g * 2.5", g.clone() * 2.5, d.clone() * 2.5),
        ("g / 2.5", g.clone() / 2.5, d.clone() / 2.5),
        (
            "(g * c) * (g * c)",
            (g.clone() * c.clone()) * (g.clone() * c.clone()),
            (d.clone() * c.clone()) * (d.clone() * c.clone()),
        ),
    ];
    for (what, got, want) in cases {
        assert!(is_lazy(&got), "{what} should stay factored");
        close(got, want);
    }
    // Not factorable: a tensor varying along the matrix dims.
    let v = Tensor::<V, 3>::random([B, D_IN, 1], Distribution::Default, &Default::default());
    let got = g.clone() * v.clone();
    assert!(!is_lazy(&got));
    close(got, d * v);
}

#[test]
fn should_reduce_factored_along_every_dim() {
    let g = weight_grads(&layer(), inputs());
    let d = dense(&g);
    // Along a matrix dim one factor is reduced (the result, a row or a column per example, is
    // then smaller than its factors and multiplied out at once).
    for dim in [1, 2] {
        close(g.clone().sum_dim(dim), d.clone().sum_dim(dim));
        close(g.clone().mean_dim(dim), d.clone().mean_dim(dim));
    }
    // Along the examples: the sum of outer products as one matrix product.
    close(g.clone().sum_dim(0), d.clone().sum_dim(0));
    close(g.clone().mean_dim(0), d.clone().mean_dim(0));
    close(g.clone().sum().reshape([1]), d.clone().sum().reshape([1]));
    close(
        (g.clone() * g.clone()).sum_dim(0),
        (d.clone() * d.clone()).sum_dim(0),
    );
}

#[test]
fn should_clip_and_sum_factored_inside_vmap() {
    // DP-SGD: per-example norm, scale to norm <= C, sum over examples.
    let layer = layer();
    let xs = inputs();
    let c = 0.3;
    let clipped: ParamGrads<V> = vmap(|x: Tensor<AD, 1>| {
        let mut g = layer.forward(x).sin().sum().backward();
        let grads = ParamGrads::from_module(&mut g, &layer);
        let w: Tensor<V, 2> = grads.get("weight").unwrap();
        assert!(is_lazy(&w), "a per-example weight gradient inside vmap");
        burn_vmap::clip_by_global_norm(grads, c)
    })
    .call(xs.clone())
    .unwrap();
    let w: Tensor<V, 3> = clipped.get("weight").unwrap();
    assert!(is_lazy(&w), "clipping keeps it factored");
    let sum = w.sum_dim(0);
    // Reference: materialized per-example gradients, clipped and summed.
    let g = weight_grads(&layer, xs.clone());
    let grads: ParamGrads<V> = vmap(|x: Tensor<AD, 1>| {
        let mut g = layer.forward(x).sin().sum().backward();
        ParamGrads::from_module(&mut g, &layer)
    })
    .call(xs)
    .unwrap();
    let b: Tensor<V, 2> = grads.get("bias").unwrap();
    let d = dense(&g);
    let sq = (d.clone() * d.clone())
        .sum_dim(2)
        .sum_dim(1)
        .reshape([B, 1])
        + (b.clone() * b).sum_dim(1);
    let factor = sq.sqrt().clamp_min(c).recip() * c;
    close(sum, (d * factor.reshape([B, 1, 1])).sum_dim(0));
}

#[test]
fn should_match_materialized_gradients_in_micro_grad_module() {
    // Clipped sums through `micro_grad_module`, microbatched: the factored path against the
    // same sum over `per_example_grads` (materialized).
    let layer = layer();
    let xs = inputs();
    // optax's `keep_batch_dim`: the loss sees a batch of one, `[1, D_IN]`.
    let (sum, _): (ParamGrads<V>, MicroAux<V, (), ()>) =
        micro_grad_module(|m: &Linear<AD>, (x,): (Tensor<AD, 2>,)| m.forward(x).sin().sum())
            .microbatch_size(1)
            .accumulator(Sum)
            .transform_fn(|g: ParamGrads<V>| burn_vmap::clip_by_global_norm(g, 0.3))
            .call(&layer, (xs.clone(),))
            .unwrap();
    let loss = |m: &Linear<AD>, x: Tensor<AD, 1>| m.forward(x).sin().sum();
    let per_example = burn_vmap::per_example_grads(&layer, xs, loss).unwrap();
    let w: Tensor<V, 3> = per_example.get("weight").unwrap();
    assert!(!is_lazy(&w), "per_example_grads returns physical tensors");
    let b: Tensor<V, 2> = per_example.get("bias").unwrap();
    let norms = ((w.clone() * w.clone())
        .sum_dim(2)
        .sum_dim(1)
        .reshape([B, 1])
        + (b.clone() * b).sum_dim(1))
    .sqrt();
    let factor = norms.clamp_min(0.3).recip() * 0.3;
    let want = (w * factor.reshape([B, 1, 1]))
        .sum_dim(0)
        .squeeze_dim::<2>(0);
    close(sum.get::<2>("weight").unwrap(), want);
}

#[test]
fn should_materialize_once_for_other_ops_and_other_readers() {
    let g = weight_grads(&layer(), inputs());
    let d = dense(&g);
    let (first, second) = (g.clone().exp(), g.clone().abs());
    close(first, d.clone().exp());
    close(second, d.clone().abs());
    // The lazy tensor itself still reads the same.
    close(g, d);
}

#[test]
fn should_broadcast_an_unbatched_input() {
    // The input is shared (in_axes None), the output gradient is per example.
    let ts = Tensor::<AD, 2>::random([B, D_OUT], Distribution::Default, &Default::default());
    let g = shared_input_weight_grads(ts);
    assert!(is_lazy(&g));
    let d = dense(&g);
    close(g.clone().sum_dim(0), d.clone().sum_dim(0));
    close(g.clone() * g.clone(), d.clone() * d.clone());
    // The shared factor is expanded along the examples for `cat` and `select`.
    let cat = Tensor::cat(vec![g.clone(), g.clone()], 0);
    assert!(is_lazy(&cat));
    close(cat, Tensor::cat(vec![d.clone(), d.clone()], 0));
    let idx = Tensor::<V, 1, Int>::from_ints([1, 4, 1], &Default::default());
    let sel = g.select(0, idx.clone());
    assert!(is_lazy(&sel));
    close(sel, d.select(0, idx));
}

#[test]
fn should_unbatch_a_level_the_gradient_is_not_batched_at() {
    // An outer vmap over values the gradient does not depend on: the gradient is broadcast
    // along it when unbatched, and stays factored.
    let layer = layer();
    let xs = inputs();
    let scales = Tensor::<AD, 1>::from_floats([1.0, 2.0], &Default::default());
    let out: Tensor<V, 4> = vmap(|_s: Tensor<AD, 0>| weight_grads(&layer, xs.clone()))
        .call(scales)
        .unwrap();
    assert!(is_lazy(&out));
    let d = dense(&out);
    assert_eq!(d.dims(), [2, B, D_IN, D_OUT]);
    close(out.clone().sum_dim(0), d.clone().sum_dim(0));
    close(out.sum_dim(1), d.sum_dim(1));
}

#[test]
fn should_multiply_out_a_sequence_gradient_whose_factors_outweigh_it() {
    // A sequence per example: the weight gradient sums several outer products, here 2 rows of
    // 4 + 3 against a 4 x 3 product: multiplied out at once (`tests/factored.rs` has the
    // sequences kept factored).
    let layer = layer();
    let xs = Tensor::<AD, 3>::random([B, 2, D_IN], Distribution::Default, &Default::default());
    let grads: ParamGrads<V> = vmap(|x: Tensor<AD, 2>| {
        let mut g = layer.forward(x).sin().sum().backward();
        ParamGrads::from_module(&mut g, &layer)
    })
    .call(xs.clone())
    .unwrap();
    let g: Tensor<V, 3> = grads.get("weight").unwrap();
    assert!(!is_lazy(&g));
    for i in 0..B {
        let x = xs.clone().narrow(0, i, 1).squeeze_dim::<2>(0);
        let grads = layer.forward(x).sin().sum().backward();
        close(
            g.clone().narrow(0, i, 1).squeeze_dim::<2>(0),
            layer.weight.grad(&grads).unwrap(),
        );
    }
}

#[test]
fn should_broadcast_a_shared_input_against_an_empty_batch() {
    // Batch size 0 against the shared input's size-1 dim: the product has 0 examples.
    let g = shared_input_weight_grads(Tensor::<AD, 2>::zeros([0, D_OUT], &Default::default()));
    assert_eq!(g.dims(), [0, D_IN, D_OUT]);
    assert_eq!(dense(&g).dims(), [0, D_IN, D_OUT]);
    let total = g.sum_dim(0).into_data();
    assert_eq!(total.shape, vec![1, D_IN, D_OUT].into());
    assert!(total.iter::<f32>().all(|v| v == 0.0));
}

#[test]
fn should_cat_and_select_factored_along_leading_dims() {
    let g = weight_grads(&layer(), inputs());
    let d = dense(&g);
    let h = g.clone() * 2.0;
    let cat = Tensor::cat(vec![g.clone(), h.clone()], 0);
    assert!(is_lazy(&cat), "cat along the examples stays factored");
    close(cat, Tensor::cat(vec![d.clone(), d.clone() * 2.0], 0));
    let idx = Tensor::<V, 1, Int>::from_ints([4, 0, 2, 2], &Default::default());
    let sel = g.clone().select(0, idx.clone());
    assert!(is_lazy(&sel), "select along the examples stays factored");
    close(sel, d.clone().select(0, idx.clone()));
    // Along a matrix dim, and of a lazy and a dense tensor: the general rules.
    let cat = Tensor::cat(vec![g.clone(), h], 1);
    assert!(!is_lazy(&cat));
    close(cat, Tensor::cat(vec![d.clone(), d.clone() * 2.0], 1));
    close(
        Tensor::cat(vec![g.clone(), d.clone()], 0),
        Tensor::cat(vec![d.clone(), d.clone()], 0),
    );
    let sel = g.select(2, Tensor::from_ints([2, 0], &Default::default()));
    assert!(!is_lazy(&sel));
    close(
        sel,
        d.select(2, Tensor::from_ints([2, 0], &Default::default())),
    );
}

#[test]
fn should_concat_microbatches_factored() {
    // `Concat` of strided microbatches: one cat and one select, both on the factors.
    let layer = layer();
    let xs = Tensor::<AD, 2>::random([6, D_IN], Distribution::Default, &Default::default());
    let loss = |m: &Linear<AD>, x: Tensor<AD, 1>| m.forward(x).sin().sum();
    let want: Tensor<V, 3> = per_example_grads(&layer, xs.clone(), loss)
        .unwrap()
        .get("weight")
        .unwrap();
    for mb in [1, 2, 3, 6] {
        let (cat, _): (ParamGrads<V>, MicroAux<V, (), ()>) =
            micro_grad_module(|m: &Linear<AD>, (x,): (Tensor<AD, 2>,)| m.forward(x).sin().sum())
                .microbatch_size(mb)
                .accumulator(Concat)
                .call(&layer, (xs.clone(),))
                .unwrap();
        let w: Tensor<V, 3> = cat.get("weight").unwrap();
        assert!(is_lazy(&w), "microbatch {mb}: Concat stays factored");
        close(w, want.clone());
    }
}

/// One op applied to the lazy gradient and to its dense copy.
#[derive(Debug, Clone)]
enum Op {
    Square,
    PerExample,
    Scalar(f32),
    SumDim(usize),
    MeanDim(usize),
    DivScalar(f32),
    DivPerExample,
    /// `sum()` (to `[1]`), reshaped back to rank 3 to keep the chain going.
    SumAll,
    CatSelf,
    Select(Vec<i64>),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Square),
        Just(Op::PerExample),
        (-2.0f32..2.0).prop_map(Op::Scalar),
        (0usize..3).prop_map(Op::SumDim),
        (0usize..3).prop_map(Op::MeanDim),
        (0.5f32..2.0).prop_map(Op::DivScalar),
        Just(Op::DivPerExample),
        Just(Op::SumAll),
        Just(Op::CatSelf),
        prop::collection::vec(0i64..64, 0..6).prop_map(Op::Select),
    ]
}

fn apply(op: &Op, t: Tensor<V, 3>, c: &Tensor<V, 3>) -> Tensor<V, 3> {
    let device = Default::default();
    if matches!(op, Op::PerExample | Op::DivPerExample) && t.shape().num_elements() == 0 {
        // Nothing to scale, and Burn 0.21's cubecl backends panic broadcasting the factor's
        // size-1 dims against the size-0 ones of the unbatched reference (plain Burn, outside
        // any vmap: "Broadcast dims must be size 1").
        return t;
    }
    match op {
        Op::Square => t.clone() * t,
        Op::PerExample => {
            // A per-example factor broadcast along the matrix dims (examples may have been
            // summed away, leaving one).
            let rows = t.dims()[0];
            t * c.clone().slice(0..rows.min(c.dims()[0]))
        }
        Op::Scalar(s) => t * *s,
        Op::SumDim(d) => t.sum_dim(*d),
        Op::MeanDim(d) => {
            if t.dims()[*d] == 0 {
                return t; // the mean over nothing is NaN on both sides
            }
            t.mean_dim(*d)
        }
        Op::DivScalar(s) => t / *s,
        Op::DivPerExample => {
            let rows = t.dims()[0];
            t / c.clone().slice(0..rows.min(c.dims()[0]))
        }
        Op::SumAll => t.sum().reshape([1, 1, 1]),
        Op::CatSelf => Tensor::cat(vec![t.clone(), t * 2.0], 0),
        Op::Select(idx) => {
            let rows = t.dims()[0] as i64;
            let idx: Vec<i64> = idx.iter().map(|i| i % rows.max(1)).collect();
            if rows == 0 || idx.is_empty() {
                return t;
            }
            t.select(0, Tensor::<V, 1, Int>::from_ints(idx.as_slice(), &device))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random chains of the factored ops over random shapes (batch 0 included) read the same
    /// as the chain on the materialized gradient.
    #[test]
    fn should_match_the_dense_chain_over_random_shapes(
        b in 0usize..5,
        d_in in 1usize..5,
        d_out in 1usize..5,
        out_axis in 0usize..3,
        ops in prop::collection::vec(op_strategy(), 1..4),
    ) {
        let device = Default::default();
        let layer: Linear<AD> = LinearConfig::new(d_in, d_out).init(&device);
        let _ = (layer.weight.val(), layer.bias.as_ref().map(|b| b.val()));
        let xs = Tensor::<AD, 2>::random([b, d_in], Distribution::Normal(0.0, 1.0), &device);
        // The examples leave vmap at `out_axis`; the chain then runs on that layout.
        let mut g = weight_grads_at(&layer, xs.clone(), out_axis as isize);
        let mut d = match out_axis {
            0 => dense(&weight_grads(&layer, xs)),
            1 => dense(&weight_grads(&layer, xs)).permute([1, 0, 2]),
            _ => dense(&weight_grads(&layer, xs)).permute([1, 2, 0]),
        };
        // Enough per-example factors for any row count the chain reaches (cats double it).
        let c = Tensor::<V, 3>::random([8 * b.max(1), 1, 1], Distribution::Uniform(0.5, 2.0), &device);
        for op in &ops {
            if matches!(op, Op::PerExample | Op::DivPerExample) && g.dims()[0] > c.dims()[0] {
                continue;
            }
            g = apply(op, g, &c);
            d = apply(op, d, &c);
            prop_assert_eq!(g.dims(), d.dims(), "after {:?}", op);
        }
        close(g, d);
    }
}

/// Per-example weight gradients of `sum(sin(layer(x)))`, moved to `out_axes` `axis` by vmap.
fn weight_grads_at(layer: &Linear<AD>, xs: Tensor<AD, 2>, axis: isize) -> Tensor<V, 3> {
    vmap(|x: Tensor<AD, 1>| {
        let mut g = layer.forward(x).sin().sum().backward();
        ParamGrads::<V>::from_module(&mut g, layer)
            .get::<2>("weight")
            .unwrap()
    })
    .out_axes(axis)
    .call(xs)
    .unwrap()
}

#[test]
fn should_reduce_a_weight_gradient_moved_to_the_last_axis_like_its_dense_value() {
    // Issue 16: with out_axes -1, `(g * g).sum()` gave 135.5 for 26.5 and `sum_dim(2)` came
    // back unreduced.
    let layer = layer();
    let xs = inputs();
    let g = weight_grads_at(&layer, xs.clone(), -1);
    assert_eq!(g.dims(), [D_IN, D_OUT, B]);
    let d = weight_grads(&layer, xs).permute([1, 2, 0]);
    close(g.clone(), d.clone());
    close((g.clone() * g.clone()).sum(), (d.clone() * d.clone()).sum());
    close(g.clone().sum_dim(2), d.clone().sum_dim(2));
    close(g.clone().mean_dim(0), d.clone().mean_dim(0));
    close(g.sum(), d.sum());
}

#[test]
fn should_unbatch_a_weight_gradient_at_every_axis_like_its_dense_value() {
    let layer = layer();
    let xs = inputs();
    let d0 = weight_grads(&layer, xs.clone());
    for axis in [0isize, 1, 2, -1, -2, -3] {
        let g = weight_grads_at(&layer, xs.clone(), axis);
        let want = match axis.rem_euclid(3) {
            0 => d0.clone(),
            1 => d0.clone().permute([1, 0, 2]),
            _ => d0.clone().permute([1, 2, 0]),
        };
        close(g.clone(), want.clone());
        for dim in 0..3 {
            close(g.clone().sum_dim(dim), want.clone().sum_dim(dim));
            close(g.clone().mean_dim(dim), want.clone().mean_dim(dim));
        }
        close(
            (g.clone() * g.clone()).sum(),
            (want.clone() * want.clone()).sum(),
        );
        close(g.clone() / 3.0, want.clone() / 3.0);
    }
}

#[test]
fn should_take_the_mean_along_a_leading_dim_where_one_factor_varies() {
    // A shared input: `a` is constant along the examples, `g` varies.
    let ts = Tensor::<AD, 2>::random([B, D_OUT], Distribution::Default, &Default::default());
    let g = shared_input_weight_grads(ts);
    assert!(is_lazy(&g));
    let d = dense(&g);
    close(g.clone().mean_dim(0), d.clone().mean_dim(0));
    close(g.clone().sum_dim(0), d.clone().sum_dim(0));
    close((g.clone() / 2.0).sum(), (d / 2.0).sum());
}
