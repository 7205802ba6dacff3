//! DP noise per million coordinates: the hardened sampler (the exact discrete Gaussian on the
//! grid `2^-20`, `burn_vmap::privacy::NoiseKind::Hardened`, on every core and on one thread)
//! against the plain `f32` sampler (`NoiseKind::Plain`), both through `add_noise` on the
//! gradients of a 1000x1000 `Linear` (1 001 000 coordinates) with `std = σ·C = 1.1`, read back
//! from the device as the hardened noise does (`cargo bench --bench noise`). Each iteration
//! noises a fresh copy of the gradients (made outside the timing), as a DP step noises its fresh
//! clipped sum: a clone would share its buffers, which the noise must copy before it writes.
//! The ratios, read from this run, are printed at the end.
//!
//! For scale: the DP-SGD step of the 784-512-512-10 MLP (670 000 parameters, `--bench dp`)
//! draws 0.67 of this noise.

mod common;

use std::time::Duration;

use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_vmap::privacy::{NoiseKind, PrivacyRng, add_noise};
use burn_vmap::tree::Leaf;
use burn_vmap::{ParamGrads, per_example_grads};
use criterion::{BatchSize, Criterion, SamplingMode};

use common::mean_ns;

const SIDE: usize = 1000;
const STD: f64 = 1.1;

/// The gradient sum of a `SIDE`x`SIDE` `Linear` over one example: `SIDE² + SIDE` coordinates.
fn grads(device: &Device) -> ParamGrads {
    let model: Linear = LinearConfig::new(SIDE, SIDE).init(device);
    let xs = Tensor::<2>::ones([1, SIDE], device);
    per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
        .unwrap()
        .sum_batch()
}

/// `grads` with buffers of their own, as a DP step's fresh clipped sum has (a clone shares its
/// buffers, which the noise must then copy before it writes).
fn fresh(grads: &ParamGrads) -> ParamGrads {
    grads.clone().map(|_, g| {
        let (data, device) = (g.to_data(), g.device());
        match data.shape().len() {
            1 => Leaf::new(Tensor::<1>::from_data(data, &device)),
            _ => Leaf::new(Tensor::<2>::from_data(data, &device)),
        }
    })
}

/// Noise on `grads`, waited for (its values read back).
fn noisy(grads: ParamGrads, kind: NoiseKind, rng: &mut PrivacyRng) {
    let out = add_noise(grads, STD, kind, rng).unwrap();
    let w: Tensor<2> = out.get("weight").unwrap();
    std::hint::black_box(w.into_data());
}

fn main() {
    common::start_run();
    let device = Device::default();
    let g = grads(&device);
    let coords = (SIDE * SIDE + SIDE) as f64;
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut group = c.benchmark_group("noise");
    group.sampling_mode(SamplingMode::Flat);
    let mut rng = PrivacyRng::from_entropy();
    group.bench_function("plain", |b| {
        b.iter_batched(
            || fresh(&g),
            |g| noisy(g, NoiseKind::Plain, &mut rng),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("hardened", |b| {
        b.iter_batched(
            || fresh(&g),
            |g| noisy(g, NoiseKind::default(), &mut rng),
            BatchSize::LargeInput,
        )
    });
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    group.bench_function("hardened_1_thread", |b| {
        b.iter_batched(
            || fresh(&g),
            |g| one.install(|| noisy(g, NoiseKind::default(), &mut rng)),
            BatchSize::LargeInput,
        )
    });
    group.finish();
    c.final_summary();

    let threads = rayon::current_num_threads();
    println!("\n== per million coordinates (same run, {threads} threads) ==");
    let per_million = |id| mean_ns("noise", id).map(|ns| ns / coords * 1e6 / 1e6);
    if let Some(plain) = per_million("plain") {
        println!("plain: {plain:.2} ms");
        for id in ["hardened", "hardened_1_thread"] {
            if let Some(h) = per_million(id) {
                println!("{id}: {h:.2} ms = {:.1}x plain", h / plain);
            }
        }
    }
}
