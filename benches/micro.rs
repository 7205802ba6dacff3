//! Criterion benches of `micro_grad` (per-example gradients with microbatching), each read as a
//! ratio to the standard batch gradient of the same batch size, measured in the same run
//! (`cargo bench --bench micro`), plus a peak-memory table from a counting global allocator.
//!
//! The model is an MLP 784-512-512-10 with softmax cross-entropy, on the `TestBackend`
//! (ndarray by default). For each B in 64, 256, 1024 the group `micro_grad_B{B}` holds:
//!
//! - `batch_gradient`: the standard gradient of the mean loss on `Autodiff<TestBackend>` (the
//!   baseline of every ratio);
//! - `batch_gradient_vmap`: the same on `Autodiff<Vmap<TestBackend>>`, nothing batched;
//! - `vmap_grad`: `per_example_grads` (vmap of the gradient, no accumulator): the part of
//!   `per_example/none` before its accumulator;
//! - `per_example/{none,mb64}`: per-example gradients (`Concat`);
//! - `clip_mean/{none,mb64}`: a DP-SGD step's gradient, per-example clipping to a global L2
//!   norm then `Mean` (optax's `micro_grad` with `transform_fn = clip_by_global_norm`);
//! - `moments_mean/{none,mb64}`: the per-example moments `(E[g], E[g²])` (`Mean` of `(g, g²)`).
//!
//! Environment:
//! - `BURN_VMAP_BENCH_QUICK=1`: shorter warm-up and measurement (same sample count).
//! - `BURN_VMAP_BENCH_BATCHES=64,256`: only these batch sizes (default 64, 256, 1024).
//! - `BURN_VMAP_BENCH_MEMORY=0`: skip the peak-memory table; `=only`: print it and stop.
//! - `BURN_VMAP_BENCH_MEMORY_FULL=1`: also measure B = 4096 without microbatching (its
//!   per-example gradients alone are 11 GB; it needs about 4 times that).

mod common;

use std::time::{Duration, Instant};

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{Distribution, Int, Tensor, TensorPrimitive};
use burn_vmap::accumulate::{Concat, Mean};
use burn_vmap::testing::TestBackend;
use burn_vmap::{
    BatchOps, ParamGrads, Tree, Vmap, clip_by_global_norm, micro_grad_module, per_example_grads,
};
use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group};

#[global_allocator]
static ALLOC: common::Counting = common::Counting;

// -------------------------------------------------------------------------------------------------
// The model
// -------------------------------------------------------------------------------------------------

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;
type AB = Autodiff<TestBackend>;

use common::{MLP_SIZES as SIZES, Mlp, current, mean_ns, peak, reset_peak};
const MICROBATCH: usize = 64;
const CLIP_NORM: f64 = 1.0;

fn inputs<B: Backend>(batch: usize, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let x = Tensor::<B, 2>::random([batch, SIZES[0]], Distribution::Normal(0.0, 1.0), device);
    let labels: Vec<i64> = (0..batch as i64).map(|i| i % SIZES[3] as i64).collect();
    (x, Tensor::from_ints(labels.as_slice(), device))
}

fn sync<B: Backend>(device: &B::Device) {
    B::sync(device).unwrap();
}

/// The standard batch gradient of the mean loss.
fn batch_gradient<B: burn::tensor::backend::AutodiffBackend>(
    model: &Mlp<B>,
    x: &Tensor<B, 2>,
    y: &Tensor<B, 1, Int>,
) -> ParamGrads<B::InnerBackend> {
    let mut grads = model.loss(x.clone(), y.clone()).backward();
    let g = ParamGrads::from_module(&mut grads, model);
    sync::<B::InnerBackend>(&Default::default());
    g
}

/// What each `micro_grad` bench computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// Per-example gradients (`Concat`).
    PerExample,
    /// Per-example clipping, then `Mean` (DP-SGD's gradient).
    ClipMean,
    /// `Mean` of `(g, g²)`: the first two per-example gradient moments.
    MomentsMean,
}

impl Work {
    const ALL: [Work; 3] = [Work::PerExample, Work::ClipMean, Work::MomentsMean];

    fn name(self) -> &'static str {
        match self {
            Work::PerExample => "per_example",
            Work::ClipMean => "clip_mean",
            Work::MomentsMean => "moments_mean",
        }
    }
}

type Args = (Tensor<AD, 2>, Tensor<AD, 1, Int>);

fn loss_fn(m: &Mlp<AD>, (x, y): Args) -> Tensor<AD, 1> {
    // keep_batch_dim (the default): x is [1, 784] and y is [1], as in a batch of one.
    m.loss(x, y)
}

fn square(g: ParamGrads<I>) -> ParamGrads<I> {
    g.map(|_, t| {
        let t = t.tensor();
        TensorPrimitive::Float(I::float_mul(t.clone(), t))
    })
}

/// One `micro_grad` step. Returns the number of float elements of the result (so nothing is
/// optimized away).
fn micro_step(work: Work, model: &Mlp<AD>, args: &Args, microbatch: Option<usize>) -> usize {
    let args = (args.0.clone(), args.1.clone());
    let step = micro_grad_module(loss_fn).microbatch_size(microbatch);
    let n = match work {
        Work::PerExample => {
            let (g, _) = step.accumulator(Concat).call(model, args).unwrap();
            count(&g)
        }
        Work::ClipMean => {
            let (g, _) = step
                .accumulator(Mean)
                .transform_fn(|g| clip_by_global_norm(g, CLIP_NORM))
                .call(model, args)
                .unwrap();
            count(&g)
        }
        Work::MomentsMean => {
            let ((g, g2), _) = step
                .accumulator(Mean)
                .transform_fn(|g: ParamGrads<I>| (g.clone(), square(g)))
                .call(model, args)
                .unwrap();
            count(&g) + count(&g2)
        }
    };
    sync::<I>(&Default::default());
    n
}

fn count(g: &ParamGrads<I>) -> usize {
    // Dense layers' per-example weight gradients are lazy outer products until read: compute
    // every result, so that the work measured is the work a reader of the result pays for.
    let g = g
        .clone()
        .map(|_, t| TensorPrimitive::Float(I::float_materialize(t.tensor())));
    let (leaves, _) = g.flatten();
    leaves.iter().map(|l| l.shape().num_elements()).sum()
}

fn microbatch_name(microbatch: Option<usize>) -> String {
    match microbatch {
        Some(m) => format!("mb{m}"),
        None => "none".into(),
    }
}

// -------------------------------------------------------------------------------------------------
// Timing benches
// -------------------------------------------------------------------------------------------------

const BATCHES: [usize; 3] = [64, 256, 1024];

/// `BATCHES`, or the comma-separated list in `BURN_VMAP_BENCH_BATCHES`.
fn selected_batches() -> Vec<usize> {
    match std::env::var("BURN_VMAP_BENCH_BATCHES") {
        Ok(list) => list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect(),
        Err(_) => BATCHES.to_vec(),
    }
}

fn group_name(batch: usize) -> String {
    format!("micro_grad_B{batch}")
}

fn micro(c: &mut Criterion) {
    let device = Default::default();
    let plain = Mlp::<AB>::new(&device);
    let model = Mlp::<AD>::new(&device);
    for batch in selected_batches() {
        let mut g = c.benchmark_group(group_name(batch));
        // Every iteration is long (up to seconds): one iteration per sample.
        g.sampling_mode(SamplingMode::Flat);
        {
            let (x, y) = inputs::<AB>(batch, &device);
            g.bench_function("batch_gradient", |b| {
                b.iter(|| batch_gradient(&plain, &x, &y))
            });
        }
        let (x, y) = inputs::<AD>(batch, &device);
        g.bench_function("batch_gradient_vmap", |b| {
            b.iter(|| batch_gradient(&model, &x, &y))
        });
        // The vectorized gradient alone (`per_example_grads`, the same examples `[1, 784]`):
        // what `per_example/none` costs before its accumulator runs.
        {
            let xk = x.clone().unsqueeze_dim::<3>(1);
            let yk = y.clone().unsqueeze_dim::<2>(1);
            g.bench_function("vmap_grad", |b| {
                b.iter(|| {
                    let p = per_example_grads(
                        &model,
                        (xk.clone(), yk.clone()),
                        |m: &Mlp<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 1, Int>)| m.loss(x, y),
                    )
                    .unwrap();
                    sync::<I>(&device);
                    p
                })
            });
        }
        let args = (x, y);
        for work in Work::ALL {
            for microbatch in [None, Some(MICROBATCH)] {
                g.bench_with_input(
                    BenchmarkId::new(work.name(), microbatch_name(microbatch)),
                    &microbatch,
                    |b, &mb| b.iter(|| micro_step(work, &model, &args, mb)),
                );
            }
        }
        g.finish();
    }
}

/// JAX's figures on the same class of 2-core CPU (issue 6): `vmap(grad)` and optax's
/// `micro_grad` with clipping and `Mean` at microbatch 64, each over the batch gradient.
fn jax(work: Work, microbatch: Option<usize>, batch: usize) -> Option<f64> {
    let i = BATCHES.iter().position(|&b| b == batch)?;
    match (work, microbatch) {
        (Work::PerExample, None) => Some([29.0, 59.0, 116.0][i]),
        (Work::ClipMean, Some(64)) => Some([99.0, 179.0, 164.0][i]),
        _ => None,
    }
}

fn ratios() {
    println!(
        "\n== micro_grad: time / standard batch gradient (Autodiff<TestBackend>), same run; \
         allocator: {} ==",
        common::allocator_name()
    );
    println!("| bench | B | microbatch | ms | ratio | JAX ratio |");
    println!("|---|---|---|---|---|---|");
    for batch in selected_batches() {
        let group = group_name(batch);
        let Some(base) = mean_ns(&group, "batch_gradient") else {
            continue;
        };
        println!(
            "| batch_gradient | {batch} | - | {:.1} | 1.00x | 1x |",
            base / 1e6
        );
        if let Some(t) = mean_ns(&group, "batch_gradient_vmap") {
            println!(
                "| batch_gradient_vmap | {batch} | - | {:.1} | {:.2}x | - |",
                t / 1e6,
                t / base
            );
        }
        if let Some(t) = mean_ns(&group, "vmap_grad") {
            println!(
                "| vmap_grad (per_example_grads) | {batch} | - | {:.1} | {:.2}x | - |",
                t / 1e6,
                t / base
            );
        }
        for work in Work::ALL {
            for microbatch in [None, Some(MICROBATCH)] {
                let id = format!("{}/{}", work.name(), microbatch_name(microbatch));
                if let Some(t) = mean_ns(&group, &id) {
                    let theirs = jax(work, microbatch, batch)
                        .map(|r| format!("{r:.0}x"))
                        .unwrap_or_else(|| "-".into());
                    println!(
                        "| {} | {batch} | {} | {:.1} | {:.2}x | {theirs} |",
                        work.name(),
                        microbatch_name(microbatch),
                        t / 1e6,
                        t / base
                    );
                }
            }
        }
    }
}

// -------------------------------------------------------------------------------------------------
// Peak memory
// -------------------------------------------------------------------------------------------------

/// One measured step: bytes of the inputs, and the peak above what was held before the step
/// (model and inputs already resident).
struct Measured {
    inputs: usize,
    peak_above_inputs: usize,
    seconds: f64,
}

fn measure(model: &Mlp<AD>, batch: usize, microbatch: Option<usize>) -> Measured {
    let device = Default::default();
    let before_inputs = current();
    let args = inputs::<AD>(batch, &device);
    sync::<I>(&device);
    let inputs = current().saturating_sub(before_inputs);
    reset_peak();
    let start = current();
    let t = Instant::now();
    let n = micro_step(Work::ClipMean, model, &args, microbatch);
    let seconds = t.elapsed().as_secs_f64();
    assert!(n > 0);
    Measured {
        inputs,
        peak_above_inputs: peak().saturating_sub(start),
        seconds,
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn memory() {
    let device = Default::default();
    let model = Mlp::<AD>::new(&device);
    // Warm up thread pools and lazily allocated state outside the measured steps.
    let warm = inputs::<AD>(MICROBATCH, &device);
    micro_step(Work::ClipMean, &model, &warm, Some(MICROBATCH));
    drop(warm);

    let full = std::env::var("BURN_VMAP_BENCH_MEMORY_FULL").is_ok_and(|v| v == "1");
    let mut cases: Vec<(usize, Option<usize>)> = vec![
        (256, Some(MICROBATCH)),
        (4096, Some(MICROBATCH)),
        (256, None),
        (1024, None),
    ];
    if full {
        cases.push((4096, None));
    }
    println!(
        "\n== peak memory of ONE micro_grad step (clip_by_global_norm, Mean; MLP {SIZES:?}) =="
    );
    println!(
        "Peak bytes held through the global allocator during the step, ABOVE what was resident \
         before it (the model and the step's inputs x [B, 784] f32 and labels [B], which grow \
         with B)."
    );
    println!("| B | microbatch | inputs (MiB) | peak above inputs (MiB) | step (s) |");
    println!("|---|---|---|---|---|");
    let mut got = Vec::new();
    for (batch, microbatch) in cases {
        let m = measure(&model, batch, microbatch);
        println!(
            "| {batch} | {} | {:.1} | {:.1} | {:.2} |",
            microbatch_name(microbatch),
            mib(m.inputs),
            mib(m.peak_above_inputs),
            m.seconds
        );
        got.push((batch, microbatch, m.peak_above_inputs));
    }
    let find = |b: usize, mb: Option<usize>| {
        got.iter()
            .find(|(x, y, _)| *x == b && *y == mb)
            .map(|(_, _, p)| *p as f64)
    };
    if let (Some(small), Some(large)) = (find(256, Some(MICROBATCH)), find(4096, Some(MICROBATCH)))
    {
        let growth = large / small;
        println!(
            "microbatch {MICROBATCH}: B 256 -> 4096 peak growth {growth:.2}x (bound 1.2x: {})",
            if growth <= 1.2 { "ok" } else { "EXCEEDED" }
        );
    }
    if let (Some(small), Some(large)) = (find(256, None), find(1024, None)) {
        let per_example = (large - small) / (1024.0 - 256.0);
        println!(
            "no microbatching: B 256 -> 1024 peak growth {:.2}x, {:.2} MiB per example{}",
            large / small,
            per_example / (1024.0 * 1024.0),
            match find(4096, None) {
                Some(_) => String::new(),
                None => format!(
                    "; B = 4096 extrapolated: {:.0} MiB (not run; BURN_VMAP_BENCH_MEMORY_FULL=1 runs it)",
                    (small + per_example * (4096.0 - 256.0)) / (1024.0 * 1024.0)
                ),
            }
        );
    }
}

// -------------------------------------------------------------------------------------------------

fn config() -> Criterion {
    let quick = std::env::var("BURN_VMAP_BENCH_QUICK").is_ok_and(|v| v != "0");
    let (warm, measure) = if quick { (0.5, 1.0) } else { (1.0, 3.0) };
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs_f64(warm))
        .measurement_time(Duration::from_secs_f64(measure))
}

criterion_group! {
    name = benches;
    config = config();
    targets = micro
}

fn main() {
    let mem = std::env::var("BURN_VMAP_BENCH_MEMORY").unwrap_or_default();
    if mem != "0" {
        memory();
        if mem == "only" {
            return;
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}
