//! Per-example gradients of a Burn MLP, the way a trainer adding per-example clipping would
//! use them: one batched backward pass gives every example's gradient.
//!
//! ```text
//! cargo run --release --example per_example_gradients
//! ```
//!
//! It builds a `Linear-ReLU-Linear` classifier on `Autodiff<Vmap<B>>` (B = the backend chosen
//! by the cargo feature), computes per-example gradients of a batch of 256 synthetic examples,
//! checks that their mean equals the ordinary batch gradient, prints the per-example gradient
//! norms, clips them to norm 1 (as DP-SGD does), and times the per-example pass against the
//! batch gradient.

use std::time::Instant;

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn_vmap::testing::TestBackend;
use burn_vmap::{ParamGrads, Vmap, per_example_grads};

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

#[derive(Module, Debug)]
struct Classifier<B: Backend> {
    fc1: Linear<B>,
    act: Relu,
    fc2: Linear<B>,
}

impl<B: Backend> Classifier<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(64, 128).init(device),
            act: Relu::new(),
            fc2: LinearConfig::new(128, 10).init(device),
        }
    }

    /// Mean cross-entropy of a batch `[n, 64]` (a single example is a batch of one).
    fn loss(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = self.fc2.forward(self.act.forward(self.fc1.forward(x)));
        let logp = burn::tensor::activation::log_softmax(logits, 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

fn main() {
    let device = Default::default();
    let model = Classifier::<AD>::new(&device);
    let n = 256;
    let x = Tensor::<AD, 2>::random([n, 64], Distribution::Normal(0.0, 1.0), &device);
    let labels: Vec<i64> = (0..n as i64).map(|i| (i * 7) % 10).collect();
    let y = Tensor::<AD, 1, Int>::from_ints(labels.as_slice(), &device);

    // Per-example gradients: the loss of ONE example, vectorized over the batch.
    let loss_one = |m: &Classifier<AD>, (xi, yi): (Tensor<AD, 1>, Tensor<AD, 0, Int>)| {
        m.loss(xi.unsqueeze(), yi.reshape([1]))
    };
    let start = Instant::now();
    let per_example =
        per_example_grads(&model, (x.clone(), y.clone()), loss_one).expect("per-example gradients");
    let norms = per_example.per_example_norms();
    let norms_vec = norms.clone().into_data().to_vec::<f32>().unwrap();
    let t_per_example = start.elapsed();

    // The ordinary batch gradient of the mean loss.
    let start = Instant::now();
    let mut grads = model.loss(x, y).backward();
    let batch = ParamGrads::from_module(&mut grads, &model);
    let w_batch: Tensor<V, 2> = batch.get("fc1.weight").unwrap();
    let _ = w_batch.clone().into_data();
    let t_batch = start.elapsed();

    let w_mean: Tensor<V, 2> = per_example.clone().mean_batch().get("fc1.weight").unwrap();
    let max_diff = (w_mean - w_batch).abs().max().into_scalar();

    println!("per-example gradients of a 64-128-10 MLP, batch of {n}");
    for path in per_example.paths() {
        let dims = match path.ends_with("weight") {
            true => per_example.get::<3>(path).unwrap().dims().to_vec(),
            false => per_example.get::<2>(path).unwrap().dims().to_vec(),
        };
        println!("  {path:<12} {dims:?}");
    }
    println!("mean of per-example gradients vs batch gradient: max |diff| = {max_diff:.2e}");
    let (min, max) = norms_vec
        .iter()
        .fold((f32::INFINITY, 0.0f32), |(a, b), &v| (a.min(v), b.max(v)));
    let mean = norms_vec.iter().sum::<f32>() / n as f32;
    println!("per-example gradient norms: min {min:.3}, mean {mean:.3}, max {max:.3}");

    // Per-example clipping to norm C = 1 (the DP-SGD step before adding noise).
    let c = 1.0;
    let scale = norms.clamp_min(c).recip().mul_scalar(c); // c / max(norm, c)
    let clipped: Tensor<V, 3> =
        per_example.get::<3>("fc1.weight").unwrap() * scale.clone().reshape([n, 1, 1]);
    let clipped_norms = clipped
        .powi_scalar(2)
        .sum_dim(2)
        .sum_dim(1)
        .sqrt()
        .max()
        .into_scalar();
    println!("after clipping to C = {c}: largest fc1.weight per-example norm = {clipped_norms:.3}");
    println!(
        "time: per-example gradients {:.1} ms, batch gradient {:.1} ms",
        t_per_example.as_secs_f64() * 1e3,
        t_batch.as_secs_f64() * 1e3
    );
    assert!(
        max_diff < 1e-4,
        "per-example mean differs from the batch gradient"
    );
}
