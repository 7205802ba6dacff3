//! Per-example gradients of a small CNN vs the standard batch gradient, in the same run
//! (`cargo bench --bench cnn`); the ratio is printed at the end.
//!
//! The model: conv 3×3 1→16 on 28×28, relu, conv 3×3 16→32, relu, mean over the spatial dims,
//! linear 32→10, softmax cross-entropy; B = 256. For exactly this work JAX's `vmap(grad)` costs
//! 2.1× its standard gradient on the same class of 2-core CPU.

mod common;

use std::time::Duration;

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn_vmap::testing::TestBackend;
use burn_vmap::{ParamGrads, Vmap, per_example_grads};
use criterion::{BenchmarkId, Criterion, criterion_group};

use common::{Cnn, mean_ns};

type V = Vmap<TestBackend>;
type AB = Autodiff<V>;

const BATCH: usize = 256;

/// Touches every parameter so that the lazy initialization runs outside the timed loops.
fn init(model: Cnn<AB>) -> Cnn<AB> {
    let _ = model.conv1.weight.val();
    let _ = model.conv2.weight.val();
    let _ = model.fc.weight.val();
    model
}

fn cnn(c: &mut Criterion) {
    let device = Default::default();
    let model = init(Cnn::<AB>::new(&device));
    let x = Tensor::<AB, 4>::random([BATCH, 1, 28, 28], Distribution::Normal(0.0, 1.0), &device);
    let labels: Vec<i64> = (0..BATCH as i64).map(|i| i % 10).collect();
    let y = Tensor::<AB, 1, Int>::from_ints(labels.as_slice(), &device);
    let mut g = c.benchmark_group("cnn_grads");
    g.bench_with_input(BenchmarkId::new("batch_gradient", BATCH), &BATCH, |b, _| {
        b.iter(|| {
            let mut grads = model.loss(x.clone(), y.clone()).backward();
            let out = ParamGrads::from_module(&mut grads, &model);
            V::sync(&device).unwrap();
            out
        })
    });
    g.bench_with_input(BenchmarkId::new("per_example", BATCH), &BATCH, |b, _| {
        b.iter(|| {
            let out = per_example_grads(
                &model,
                (x.clone(), y.clone()),
                |m: &Cnn<AB>, (xi, yi): (Tensor<AB, 3>, Tensor<AB, 0, Int>)| {
                    m.loss(xi.unsqueeze(), yi.reshape([1]))
                },
            )
            .unwrap();
            V::sync(&device).unwrap();
            out
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = cnn
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let (a, b) = (
        format!("per_example/{BATCH}"),
        format!("batch_gradient/{BATCH}"),
    );
    if let (Some(x), Some(y)) = (mean_ns("cnn_grads", &a), mean_ns("cnn_grads", &b)) {
        println!(
            "\n== ratio (same run) ==\ncnn_grads: {a} / {b} = {:.2}x  ({:.2} ms / {:.2} ms; JAX: 2.1x, target <= 2x)",
            x / y,
            x / 1e6,
            y / 1e6
        );
    }
}
