//! Per-example gradients of a Burn MLP, the way a trainer adding per-example clipping would
//! use them: one batched backward pass gives every example's gradient.
//!
//! ```text
//! cargo run --release --example per_example_gradients
//! ```
//!
//! It builds an unmodified Burn 0.22 `Linear-ReLU-Linear` classifier (a plain
//! `#[derive(Module)]` struct on `Device::default()`), computes per-example gradients of a batch
//! of 256 synthetic examples with `per_example_grads` and with `micro_grad_module`, checks
//! that their mean equals Burn's own batch gradient, prints the per-example gradient norms,
//! clips them to norm 1 (as DP-SGD does), and times the per-example pass against Burn's batch
//! gradient and against the loop of Burn's backward one example at a time. The transforms
//! record the loss once per signature: the first call's recording cost and the steady-state
//! cost of a kept builder are reported apart.

use std::time::{Duration, Instant};

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use burn_vmap::accumulate::{Concat, Mean};
use burn_vmap::{
    ParamGrads, clip_by_global_norm, global_norm, micro_grad_module, per_example_grads,
};

#[derive(Module, Debug)]
struct Classifier {
    fc1: Linear,
    act: Relu,
    fc2: Linear,
}

impl Classifier {
    fn new(device: &Device) -> Self {
        let model = Self {
            fc1: LinearConfig::new(64, 128).init(device),
            act: Relu::new(),
            fc2: LinearConfig::new(128, 10).init(device),
        };
        // Burn initializes parameters lazily: draw them now, on the model's device.
        model.visit(&mut Touch);
        model
    }

    /// Mean cross-entropy of a batch `[n, 64]` (a single example is a batch of one).
    fn loss(&self, x: Tensor<2>, y: Tensor<1, Int>) -> Tensor<1> {
        let logits = self.fc2.forward(self.act.forward(self.fc1.forward(x)));
        let logp = burn::tensor::activation::log_softmax(logits, 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

struct Touch;

impl ModuleVisitor for Touch {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

fn values(data: TensorData) -> Vec<f32> {
    data.convert::<f32>()
        .try_into_vec::<f32>()
        .expect("float data")
}

/// Burn's gradient of parameter `id` (of rank `rank`), as flat values.
fn burn_grad(grads: &GradientsParams, id: ParamId, rank: usize) -> Vec<f32> {
    let data = match rank {
        1 => grads.get::<1>(id).map(|g| g.into_data()),
        2 => grads.get::<2>(id).map(|g| g.into_data()),
        r => panic!("rank {r}"),
    };
    values(data.expect("Burn gives every parameter a gradient"))
}

/// The largest elementwise difference between `ours` (one gradient per parameter, without a
/// batch axis) and Burn's gradients.
fn max_diff(ours: &ParamGrads, theirs: &GradientsParams) -> f32 {
    ours.iter()
        .map(|(_, id, g)| {
            let mine = values(g.to_data());
            let want = burn_grad(theirs, id, g.shape().num_dims());
            assert_eq!(mine.len(), want.len());
            mine.iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        })
        .fold(0f32, f32::max)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median time of `runs` calls of `f`.
fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

pub fn main() {
    let device = Device::default();
    device.seed(0);
    let model = Classifier::new(&device);
    let n = 256;
    let x = Tensor::<2>::random([n, 64], Distribution::Normal(0.0, 1.0), &device);
    let labels: Vec<i64> = (0..n as i64).map(|i| (i * 7) % 10).collect();
    let y = Tensor::<1, Int>::from_data(TensorData::new(labels, [n]), &device);

    // 1. `per_example_grads`: the loss of ONE example (a batch of one), vectorized over the
    //    batch. It records the loss at every call.
    let loss_one =
        |m: &Classifier, (xi, yi): (Tensor<1>, Tensor<1, Int>)| m.loss(xi.unsqueeze(), yi);
    let y_rows = y.clone().reshape([n, 1]);
    let start = Instant::now();
    let per_example = per_example_grads(&model, (x.clone(), y_rows.clone()), loss_one)
        .expect("per-example gradients");
    let norms = per_example.per_example_norms();
    let norms_vec = values(norms.clone().into_data());
    let t_per_example_grads = start.elapsed();

    // 2. `micro_grad_module` with the `Concat` accumulator: the same per-example gradients from
    //    a builder a training loop keeps (the loss, written for a batch, is recorded at the
    //    first call and cached by module and signature).
    let per_example_fn =
        micro_grad_module(|m: &Classifier, (x, y): (Tensor<2>, Tensor<1, Int>)| m.loss(x, y))
            .accumulator(Concat);
    let run_micro = || {
        let (g, aux) = per_example_fn
            .call(&model, (x.clone(), y.clone()))
            .expect("micro_grad_module");
        let _ = g.per_example_norms().into_data();
        (g, aux)
    };
    let start = Instant::now();
    let (concat, _) = run_micro();
    let t_micro_first = start.elapsed();
    let t_micro_steady = median_time(5, || {
        run_micro();
    });

    // 3. Burn's own batch gradient of the mean loss.
    let batch_grad = || {
        let trained = model.clone().train();
        let grads = trained.loss(x.clone(), y.clone()).backward();
        let grads = GradientsParams::from_grads(grads, &trained);
        let _ = grads.get::<2>(model.fc1.weight.id).map(|g| g.into_data());
        grads
    };
    let start = Instant::now();
    let batch = batch_grad();
    let t_batch_first = start.elapsed();
    let t_batch = median_time(5, || {
        batch_grad();
    });

    // 4. The loop: Burn's backward, one example at a time.
    let start = Instant::now();
    let trained = model.clone().train();
    for i in 0..n {
        let grads = trained
            .loss(x.clone().narrow(0, i, 1), y.clone().narrow(0, i, 1))
            .backward();
        let grads = GradientsParams::from_grads(grads, &trained);
        let _ = grads.get::<2>(model.fc1.weight.id).map(|g| g.into_data());
    }
    let t_loop = start.elapsed();

    // Checks: their mean is Burn's batch gradient; the two transforms agree.
    let mean_diff = max_diff(&per_example.clone().mean_batch(), &batch);
    let concat_diff = per_example
        .iter()
        .zip(concat.iter())
        .map(|((_, _, a), (_, _, b))| {
            values(a.to_data())
                .iter()
                .zip(values(b.to_data()))
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        })
        .fold(0f32, f32::max);

    println!("per-example gradients of a 64-128-10 MLP, batch of {n}");
    for (path, _, g) in per_example.iter() {
        println!("  {path:<12} {:?}", g.shape().to_vec());
    }
    println!("mean of per-example gradients vs batch gradient: max |diff| = {mean_diff:.2e}");
    println!("per_example_grads vs micro_grad_module (Concat): max |diff| = {concat_diff:.2e}");
    let (min, max) = norms_vec
        .iter()
        .fold((f32::INFINITY, 0.0f32), |(a, b), &v| (a.min(v), b.max(v)));
    let mean = norms_vec.iter().sum::<f32>() / n as f32;
    println!("per-example gradient norms: min {min:.3}, mean {mean:.3}, max {max:.3}");

    // Per-example clipping to norm C = 1 (the DP-SGD step before adding noise), by hand on the
    // stacked gradients ...
    let c = 1.0;
    let scale = norms.clone().clamp_min(c).recip().mul_scalar(c); // c / max(norm, c)
    let clipped: Tensor<3> =
        per_example.get::<3>("fc1.weight").unwrap() * scale.clone().reshape([n, 1, 1]);
    let clipped_norms = clipped
        .clone()
        .powi_scalar(2)
        .sum_dim(2)
        .sum_dim(1)
        .sqrt()
        .max()
        .into_scalar::<f32>();
    println!("after clipping to C = {c}: largest fc1.weight per-example norm = {clipped_norms:.3}");
    // ... and as DP-SGD's gradient: `transform_fn` clips every example's whole gradient, the
    // `Mean` accumulator averages them, without materializing the stacked gradients.
    let clipped_mean_fn =
        micro_grad_module(|m: &Classifier, (x, y): (Tensor<2>, Tensor<1, Int>)| m.loss(x, y))
            .accumulator(Mean)
            .transform_fn(move |g| clip_by_global_norm(g, c))
            .metrics_fn(|g| global_norm(&g));
    let run_clipped = || {
        let (g, aux) = clipped_mean_fn
            .call(&model, (x.clone(), y.clone()))
            .expect("clipped mean");
        let _ = g.get::<2>("fc1.weight").map(|w| w.into_data());
        (g, aux)
    };
    let start = Instant::now();
    let (clipped_mean, aux) = run_clipped();
    let t_clipped_first = start.elapsed();
    let t_clipped_steady = median_time(5, || {
        run_clipped();
    });
    let clipped_mean_norm = global_norm(&clipped_mean).into_scalar::<f32>();
    let w: Tensor<2> = clipped_mean.get("fc1.weight").unwrap();
    let by_hand = (clipped.sum_dim(0).squeeze_dim::<2>(0) / n as f32 - w)
        .abs()
        .max()
        .into_scalar::<f32>();
    let raw_vs_metrics = (aux.metrics.squeeze_dim::<1>(1) - norms)
        .abs()
        .max()
        .into_scalar::<f32>();
    println!(
        "mean of clipped gradients (transform_fn clip_by_global_norm, Mean): global norm {clipped_mean_norm:.3} <= {c}; \
         fc1.weight vs by hand: max |diff| = {by_hand:.2e}; metrics_fn norms vs per_example_norms: {raw_vs_metrics:.2e}"
    );
    println!(
        "time: per-example gradients {:.1} ms, batch gradient {:.1} ms",
        ms(t_micro_steady),
        ms(t_batch)
    );
    println!(
        "  per_example_grads (records at every call):           {:>8.1} ms",
        ms(t_per_example_grads)
    );
    println!(
        "  (micro_grad_module with Concat returns the stacked gradients; with a Mean of clipped"
    );
    println!("   gradients a dense layer's per-example weight gradient stays factored)");
    println!(
        "  micro_grad_module (Concat), first call (records):    {:>8.1} ms",
        ms(t_micro_first)
    );
    println!(
        "  micro_grad_module (Concat), steady state (median 5): {:>8.1} ms",
        ms(t_micro_steady)
    );
    println!(
        "  clipped mean (clip_by_global_norm, Mean), first call: {:>8.1} ms",
        ms(t_clipped_first)
    );
    println!(
        "  clipped mean, steady state (median of 5):            {:>8.1} ms",
        ms(t_clipped_steady)
    );
    println!(
        "  Burn's batch gradient, steady state (first {:.1} ms): {:>8.1} ms",
        ms(t_batch_first),
        ms(t_batch)
    );
    println!(
        "  Burn's backward looped over the {n} examples:        {:>8.1} ms ({:.1}x the Concat pass, {:.1}x the clipped mean)",
        ms(t_loop),
        t_loop.as_secs_f64() / t_micro_steady.as_secs_f64(),
        t_loop.as_secs_f64() / t_clipped_steady.as_secs_f64()
    );
    assert!(
        mean_diff < 1e-4,
        "per-example mean differs from the batch gradient"
    );
    assert!(concat_diff < 1e-5, "the two transforms differ");
    assert!(clipped_norms <= c as f32 + 1e-4 && clipped_mean_norm <= c as f32 + 1e-4);
    assert!(by_hand < 1e-5, "clipping by hand differs from transform_fn");
}
