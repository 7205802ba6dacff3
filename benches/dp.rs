//! The DP-SGD optimizer's step (`burn_vmap::privacy::DpSgd`: per-example clipping, noise from
//! the CSPRNG on the sum, the division, the inner SGD step and the accountant) against the
//! standard Burn step (Burn's own backward of the batch loss and the same SGD step) on the same
//! device, for the MLP and CNN bench models at expected batch 256 (`cargo bench --bench dp`).
//! The ratios, read from this run, are printed at the end.
//!
//! The batch is fixed at 256 examples (the expected size; Poisson sampling varies it around
//! that, which changes the work, not the ratio).

mod common;

use std::time::Duration;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn_vmap::privacy::{DpSgd, DpSgdConfig};
use criterion::{Criterion, criterion_group};

use common::{Cnn, Mlp, mean_ns};

const BATCH: usize = 256;

fn labels(device: &Device) -> Tensor<1, Int> {
    Tensor::<1>::random([BATCH], Distribution::Uniform(0.0, 10.0), device).int()
}

fn config() -> DpSgdConfig {
    // q·N = 256: the expected batch; C = 1, σ = 1.1.
    DpSgdConfig::new(1.0, 1.1, BATCH as f64 / 60_000.0, 60_000)
}

/// One standard step of `model` (in training mode): Burn's backward of the batch loss, then
/// the optimizer's step.
fn standard<M: Module>(model: M, optim: &mut ModuleOptimizer, loss: Tensor<1>) -> M {
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    optim.step(0.01, model, grads)
}

fn dp(c: &mut Criterion) {
    let mut group = c.benchmark_group("dp_step");
    group.sample_size(10);
    let device = Device::default();
    let y = labels(&device);

    // MLP 784-512-512-10.
    let x = Tensor::<2>::random([BATCH, 784], Distribution::Default, &device);
    let init = Mlp::new(&device);
    let mut model = init.clone().train();
    let mut optim = SgdConfig::new().init();
    group.bench_function("mlp/standard", |b| {
        b.iter(|| {
            let loss = model.loss(x.clone(), y.clone());
            model = standard(model.clone(), &mut optim, loss);
        })
    });
    let mut model = init.train();
    let mut dp = DpSgd::new(SgdConfig::new().init(), config()).unwrap();
    let loss = |m: &Mlp, (x, y): (Tensor<2>, Tensor<1, Int>)| m.loss(x, y);
    group.bench_function("mlp/dp_sgd", |b| {
        b.iter(|| {
            model = dp
                .step(0.01, model.clone(), loss, Some((x.clone(), y.clone())))
                .unwrap();
        })
    });

    // CNN: conv 3x3 1->16, conv 3x3 16->32, mean pool, linear 32->10, on 28x28.
    let x = Tensor::<4>::random([BATCH, 1, 28, 28], Distribution::Default, &device);
    let init = Cnn::new(&device);
    let mut model = init.clone().train();
    let mut optim = SgdConfig::new().init();
    group.bench_function("cnn/standard", |b| {
        b.iter(|| {
            let loss = model.loss(x.clone(), y.clone());
            model = standard(model.clone(), &mut optim, loss);
        })
    });
    let mut model = init.train();
    let mut dp = DpSgd::new(SgdConfig::new().init(), config()).unwrap();
    let loss = |m: &Cnn, (x, y): (Tensor<4>, Tensor<1, Int>)| m.loss(x, y);
    group.bench_function("cnn/dp_sgd", |b| {
        b.iter(|| {
            model = dp
                .step(0.01, model.clone(), loss, Some((x.clone(), y.clone())))
                .unwrap();
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = dp
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    println!("\n== ratio (same run), expected batch {BATCH} ==");
    // (A filtered run, `cargo bench --bench dp -- mlp`, prints the models it ran.)
    for model in ["mlp", "cnn"] {
        if let (Some(d), Some(s)) = (
            // Criterion stores `a/b` function ids as `a_b`.
            mean_ns("dp_step", &format!("{model}_dp_sgd")),
            mean_ns("dp_step", &format!("{model}_standard")),
        ) {
            println!(
                "{model}: DpSgd step / standard step = {:.2}x  ({:.2} ms / {:.2} ms)",
                d / s,
                d / 1e6,
                s / 1e6
            );
        }
    }
}
