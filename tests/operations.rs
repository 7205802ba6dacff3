//! The kernel launches of a clipped step against Burn's standard step, for the four bench
//! models (`benches/common`), counted on Burn's capture backend taking the cubecl backends'
//! paths (`burn_vmap::transform::operations`): the CPU-measurable proxy for a step's cost on an
//! unfused cubecl backend (wgpu, CUDA), copies of strided reshapes included. `cargo bench
//! --bench clipping` prints the same figures.
//!
//! The counts are deterministic (a recording, not a timing). Each model's clipped sum is held
//! to the ratio it has today (a launch added to the clipped step fails here), below the target
//! of 1.3x (issue #45): MLP 1.24x (57 / 46), CNN 1.24x (63 / 51), transformers 1.22-1.27x,
//! LSTM 1.08x. A concatenation counts a launch an input, as burn-cubecl 0.22.1 runs it. The DP
//! mechanism's sum in `f64` is held to the `f32` sum's launches the same way.

#[path = "../benches/common/mod.rs"]
mod common;

use burn::module::{Module, ModuleDisplay};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn_vmap::accumulate::Sum;
use burn_vmap::transform::operations::{Operations, standard_step_operations};
use burn_vmap::{ParamGrads, Tree, clip_by_global_norm, micro_grad_module};
use common::{Cnn, Mlp, Recurrent, Transformer, labels, tokens};

/// The launches of the clipped sum and of the standard step of `model` on the batch `(x, y)`.
fn launches<M, X>(
    model: &M,
    x: X,
    y: Tensor<1, Int>,
    loss: fn(&M, X, Tensor<1, Int>) -> Tensor<1>,
) -> (Operations, Operations)
where
    M: Module + ModuleDisplay,
    X: Tree + Clone,
{
    let clipped = micro_grad_module(move |m: &M, (x, y): (X, Tensor<1, Int>)| loss(m, x, y))
        .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0))
        .accumulator(Sum);
    let ops = clipped
        .operations(model, (x.clone(), y.clone()))
        .expect("the clipped step records: it reads no value on the host");
    let standard = standard_step_operations(model, (x, y), move |m: &M, (x, y)| loss(m, x, y))
        .expect("the standard step records");
    (ops, standard)
}

/// Checks the ratio of launches against `ceiling` and prints both counts.
fn check(name: &str, (clipped, standard): (Operations, Operations), ceiling: f64) {
    let ratio = clipped.launches() as f64 / standard.launches() as f64;
    println!("{name}: {ratio:.3}x\n  clipped sum: {clipped}\n  standard:    {standard}");
    assert!(
        ratio <= ceiling,
        "{name}: the clipped sum launches {} kernels against the standard step's {} ({ratio:.2}x, \
         more than {ceiling}x)",
        clipped.launches(),
        standard.launches()
    );
}

#[test]
fn mlp_clipped_sum_launches() {
    let device = Device::default();
    let x = Tensor::<2>::random([64, 784], Distribution::Normal(0.0, 1.0), &device);
    let counts = launches(&Mlp::new(&device), x, labels(64, &device), Mlp::loss);
    check("mlp_B64", counts, 1.24);
}

#[test]
fn cnn_clipped_sum_launches() {
    let device = Device::default();
    let x = Tensor::<4>::random([64, 1, 28, 28], Distribution::Normal(0.0, 1.0), &device);
    let counts = launches(&Cnn::new(&device), x, labels(64, &device), Cnn::loss);
    check("cnn_B64", counts, 1.236);
}

#[test]
fn transformer_clipped_sum_launches() {
    let device = Device::default();
    for ((b, t, d), ceiling) in [
        ((64, 16, 64), 1.272),
        ((32, 64, 128), 1.239),
        ((16, 128, 128), 1.217),
    ] {
        let model = Transformer::new(t, d, &device);
        let counts = launches(
            &model,
            tokens(b, t, &device),
            labels(b, &device),
            Transformer::loss,
        );
        check(&format!("transformer_B{b}_T{t}_d{d}"), counts, ceiling);
    }
}

#[test]
fn lstm_clipped_sum_launches() {
    let device = Device::default();
    let model = Recurrent::new(&device);
    let counts = launches(
        &model,
        tokens(64, 32, &device),
        labels(64, &device),
        Recurrent::loss,
    );
    check("lstm_B64_T32", counts, 1.082);
}

/// The count itself, on a step small enough to list: a linear layer's summed output.
#[test]
fn should_count_every_operation_of_a_standard_step() {
    let device = Device::default();
    let model: Linear = LinearConfig::new(3, 2).init(&device);
    let x = Tensor::<2>::ones([4, 3], &device);
    let ops = standard_step_operations(&model, (x,), |m: &Linear, (x,): (Tensor<2>,)| {
        m.forward(x).sum()
    })
    .unwrap();
    println!("{ops}");
    let kinds: Vec<(&str, usize)> = ops.by_kind().collect();
    // Forward: the layer, the sum; backward: the seed, the sum's (ones, times the seed, shaped
    // back), the weight's and the bias's gradients. The input takes none.
    let expected = [
        ("linear", 1),
        ("linear_bias_backward", 1),
        ("linear_weight_backward", 1),
        ("mul", 1),
        ("ones", 2),
        ("reshape", 1),
        ("sum", 1),
    ];
    assert_eq!(kinds, expected, "{ops}");
    assert_eq!((ops.total(), ops.launches()), (8, 7));
}

/// Counting runs nothing on the model's device and leaves the builder's results as they were.
#[test]
fn should_leave_the_step_unchanged() {
    let device = Device::default();
    let model: Linear = LinearConfig::new(3, 2).init(&device);
    let x = Tensor::<2>::random([5, 3], Distribution::Normal(0.0, 1.0), &device);
    let clipped = micro_grad_module(|m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum())
        .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 0.5));
    let (before, _) = clipped.call(&model, (x.clone(),)).unwrap();
    let ops = clipped.operations(&model, (x.clone(),)).unwrap();
    assert!(ops.launches() > 0 && ops.launches() <= ops.total());
    let (after, _) = clipped.call(&model, (x,)).unwrap();
    for ((path, _, a), (_, _, b)) in before.iter().zip(after.iter()) {
        let (a, b) = (a.to_data(), b.to_data());
        assert_eq!(a, b, "{path}");
    }
}

/// A reshape is a view where the strides can express it and a copy (a launch) where they cannot,
/// as on burn-cubecl: flattening a transposed tensor copies; flattening a fresh one does not.
#[test]
fn should_count_a_reshape_of_a_transposed_tensor_as_a_copy() {
    let device = Device::default();
    let model: Linear = LinearConfig::new(3, 2).init(&device);
    let x = Tensor::<2>::ones([4, 3], &device);
    let transposed =
        standard_step_operations(&model, (x.clone(),), |m: &Linear, (x,): (Tensor<2>,)| {
            m.forward(x).swap_dims(0, 1).reshape([8]).sum()
        })
        .unwrap();
    assert_eq!(transposed.of("reshape_copy"), 1, "{transposed}");
    let fresh = standard_step_operations(&model, (x,), |m: &Linear, (x,): (Tensor<2>,)| {
        m.forward(x).reshape([8]).sum()
    })
    .unwrap();
    assert_eq!(fresh.of("reshape_copy"), 0, "{fresh}");
    assert_eq!(transposed.launches(), fresh.launches() + 1);
}

/// The DP mechanism's sum in `f64` (`WideSum`) runs the products of the `f32` sum, cast: every
/// weight's factors cast and one matrix product, every clipped bias its rows and clip factors
/// cast and one matrix product, never the rows multiplied out and reduced.
#[test]
fn should_sum_in_f64_with_the_products_of_the_f32_sum() {
    use burn_vmap::accumulate::WideSum;
    let device = Device::default();
    let x = Tensor::<2>::random([64, 784], Distribution::Normal(0.0, 1.0), &device);
    let (model, y) = (Mlp::new(&device), labels(64, &device));
    let loss = |m: &Mlp, (x, y): (Tensor<2>, Tensor<1, Int>)| m.loss(x, y);
    let clip = |g: ParamGrads| clip_by_global_norm(g, 1.0);
    let batch = (x, y);
    let narrow = micro_grad_module(loss).transform_fn(clip).accumulator(Sum);
    let narrow = narrow.operations(&model, batch.clone()).unwrap();
    let wide = micro_grad_module(loss)
        .transform_fn(clip)
        .accumulator(WideSum);
    let wide = wide.operations(&model, batch).unwrap();
    for kind in ["matmul", "sum_dim", "mul"] {
        assert_eq!(wide.of(kind), narrow.of(kind), "{kind}\n{wide}\n{narrow}");
    }
    // Each of the three weights' scaled inputs and output gradients, the latter also its bias's
    // rows (one value, cast once), and the clip factors of all three biases (cast once).
    assert_eq!(wide.of("cast"), narrow.of("cast") + 7, "{wide}\n{narrow}");
}

/// The launches of the DP mechanism's sum in `f64` (`WideSum`) against the `f32` clipped sum's,
/// both clipped by `clip_and_flag` as the mechanism clips: the casts to `f64` are the
/// difference, an equal value cast once (a bias's clip factors, the input of a layer's query,
/// key and value weights, the output gradients of a layer's weight and bias). Held to today's
/// ratios: MLP 1.113x (79 / 71), CNN 1.104x, transformer 1.101x (532 / 483), LSTM 1.014x (each
/// weight's time steps joined, then cast and summed in one product: `compat::joins_parts_to_cast`;
/// the f32 sum takes one product a step). Issue #44 asks a DP step on a GPU to cost at most
/// 1.15x the clipped sum, noise included.
#[test]
fn wide_sum_launches() {
    fn ratio<M, X>(name: &str, model: &M, batch: X, loss: fn(&M, X) -> Tensor<1>, ceiling: f64)
    where
        M: Module + ModuleDisplay,
        X: Tree + Clone,
    {
        use burn_vmap::accumulate::WideSum;
        use burn_vmap::privacy::clip_and_flag;
        let clip = |g: ParamGrads| clip_and_flag(g, 1.0);
        let step = move |m: &M, (x,): (X,)| loss(m, x);
        let narrow = micro_grad_module(step).transform_fn(clip).accumulator(Sum);
        let narrow = narrow.operations(model, (batch.clone(),)).unwrap();
        let wide = micro_grad_module(step)
            .transform_fn(clip)
            .accumulator(WideSum);
        let wide = wide.operations(model, (batch,)).unwrap();
        let r = wide.launches() as f64 / narrow.launches() as f64;
        println!("{name}: {r:.3}x\n  f64 sum: {wide}\n  f32 sum: {narrow}");
        assert!(
            r <= ceiling,
            "{name}: the f64 sum launches {} kernels against the f32 sum's {} ({r:.3}x, more \
             than {ceiling}x)",
            wide.launches(),
            narrow.launches()
        );
    }
    let device = Device::default();
    let y = labels(64, &device);
    let x = Tensor::<2>::random([64, 784], Distribution::Normal(0.0, 1.0), &device);
    ratio(
        "mlp_B64",
        &Mlp::new(&device),
        (x, y.clone()),
        |m, (x, y)| m.loss(x, y),
        1.113,
    );
    let x = Tensor::<4>::random([64, 1, 28, 28], Distribution::Normal(0.0, 1.0), &device);
    ratio(
        "cnn_B64",
        &Cnn::new(&device),
        (x, y.clone()),
        |m, (x, y)| m.loss(x, y),
        1.104,
    );
    let model = Transformer::new(16, 64, &device);
    let batch = (tokens(64, 16, &device), y.clone());
    ratio(
        "transformer_B64_T16_d64",
        &model,
        batch,
        |m, (x, y)| m.loss(x, y),
        1.102,
    );
    let batch = (tokens(64, 32, &device), y);
    ratio(
        "lstm_B64_T32",
        &Recurrent::new(&device),
        batch,
        |m, (x, y)| m.loss(x, y),
        1.014,
    );
}

/// A concatenation counts a launch an input: burn-cubecl 0.22.1 has no concatenation kernel, and
/// Burn's default writes each input into the output with a `slice_assign`.
#[test]
fn should_count_a_concatenation_as_a_launch_an_input() {
    let device = Device::default();
    let model: Linear = LinearConfig::new(3, 2).init(&device);
    let x = Tensor::<2>::ones([4, 3], &device);
    let ops = standard_step_operations(&model, (x,), |m: &Linear, (x,): (Tensor<2>,)| {
        let y = m.forward(x);
        Tensor::cat(vec![y.clone(), y.clone(), y], 0).sum()
    })
    .unwrap();
    assert_eq!(ops.of("cat"), 3, "{ops}");
}
