//! Memory and time of the scans (`cargo bench --bench scan`).
//!
//! - `peak memory`: a counting global allocator measures the peak heap above the baseline
//!   during forward + backward of a 4,096-step scan under `Autodiff<_>`, plain `scan` vs
//!   `checkpoint_chunked_scan` (chunk 64 = sqrt(4096)), and during `vmap` vs `chunked_vmap`
//!   of a function with a large intermediate; each in a fresh process; the ratios are printed.
//! - `scan_4096` (criterion): the time of the same forward + backward, plain vs checkpointed
//!   (the price of the recomputation), in one group.

use std::time::Duration;

use burn::backend::Autodiff;
use burn::tensor::{Distribution, Tensor};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::{checkpoint_chunked_scan, chunked_vmap, scan};
use burn_vmap::{Vmap, vmap};
use criterion::{Criterion, criterion_group};

mod common;

#[global_allocator]
static ALLOC: common::Counting = common::Counting;

/// Peak heap bytes above the live bytes at the start, while `f` runs.
fn peak_of(f: impl FnOnce()) -> usize {
    common::peak_of(f).1
}

type AD = Autodiff<TestBackend>;
type V = Vmap<TestBackend>;

const STEPS: usize = 4096;
const DIM: usize = 256;

fn step(c: Tensor<AD, 1>, x: Tensor<AD, 1>) -> (Tensor<AD, 1>, Tensor<AD, 1>) {
    let c = (c.clone().sin() * x.clone().cos() + c * x * 0.5).tanh();
    let y = c.clone().powi_scalar(2).sum();
    (c, y)
}

fn inputs() -> (Tensor<AD, 1>, Tensor<AD, 2>) {
    let device = Default::default();
    let init =
        Tensor::<AD, 1>::random([DIM], Distribution::Normal(0.0, 1.0), &device).require_grad();
    let xs = Tensor::<AD, 2>::random([STEPS, DIM], Distribution::Normal(0.0, 1.0), &device);
    (init, xs)
}

/// Forward + backward of the 4,096-step scan; `chunk: None` = plain scan.
fn run(chunk: Option<isize>, init: Tensor<AD, 1>, xs: Tensor<AD, 2>) -> Tensor<TestBackend, 1> {
    let (c, ys): (Tensor<AD, 1>, Tensor<AD, 2>) = match chunk {
        None => scan(step, init.clone(), xs).call().unwrap(),
        Some(k) => checkpoint_chunked_scan(step, init.clone(), xs)
            .chunk_size(Some(k))
            .call()
            .unwrap(),
    };
    let g = (c.sum() + ys.sum()).backward();
    init.grad(&g).unwrap()
}

/// One memory measurement, in this (fresh) process: prints the peak in bytes.
fn measure(which: &str) {
    let peak = match which {
        "plain" | "checkpoint" => {
            let (init, xs) = inputs();
            let chunk = (which == "checkpoint").then_some(CHUNK);
            peak_of(|| {
                run(chunk, init.clone(), xs.clone());
            })
        }
        "vmap" | "chunked_vmap" => {
            let device = Default::default();
            let xs = Tensor::<V, 2>::random([BATCH, D], Distribution::Normal(0.0, 1.0), &device);
            let f = |x: Tensor<V, 1>| {
                let outer = x.clone().unsqueeze_dim::<2>(1) * x.clone().unsqueeze_dim::<2>(0);
                outer.tanh().sum_dim(1).squeeze_dim::<1>(1)
            };
            peak_of(|| {
                let _: Tensor<V, 2> = if which == "vmap" {
                    vmap(f).call(xs.clone()).unwrap()
                } else {
                    chunked_vmap(f, VCHUNK).unwrap().call(xs.clone()).unwrap()
                };
            })
        }
        other => panic!("unknown measurement {other}"),
    };
    println!("PEAK {peak}");
}

/// Runs `measure(which)` in a fresh process (burn-autodiff's graph bookkeeping is global: a
/// large graph built earlier in the process makes every later backward pass copy a larger
/// node table, see the `checkpoint_chunked_scan` docs).
fn peak_in_fresh_process(which: &str) -> f64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("BURN_VMAP_MEASURE", which)
        .output()
        .expect("run the bench binary");
    let text = String::from_utf8_lossy(&out.stdout);
    let bytes: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("PEAK "))
        .unwrap_or_else(|| panic!("no measurement for {which}: {text}"))
        .parse()
        .unwrap();
    bytes / 1048576.0
}

const CHUNK: isize = 64;
const BATCH: usize = 256;
const D: usize = 128;
const VCHUNK: isize = 16;

fn peak_memory() {
    let plain = peak_in_fresh_process("plain");
    let ckpt = peak_in_fresh_process("checkpoint");
    println!(
        "peak memory, {STEPS}-step scan (carry {DIM}), forward+backward under Autodiff: \
         plain scan {plain:.1} MiB, checkpoint_chunked_scan(chunk {CHUNK}) {ckpt:.1} MiB, \
         ratio {:.1}x",
        plain / ckpt
    );
    let full = peak_in_fresh_process("vmap");
    let chunked = peak_in_fresh_process("chunked_vmap");
    println!(
        "peak memory, B={BATCH} outer products of {D}: vmap {full:.2} MiB, \
         chunked_vmap(chunk {VCHUNK}) {chunked:.2} MiB, ratio {:.1}x \
         (one chunk's {D}x{D} intermediates: {:.2} MiB)",
        full / chunked,
        (VCHUNK as usize * D * D * 4) as f64 / 1048576.0
    );
}

fn bench_scan(c: &mut Criterion) {
    let (init, xs) = inputs();
    let mut group = c.benchmark_group("scan_4096");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("plain_scan", |b| {
        b.iter(|| run(None, init.clone(), xs.clone()))
    });
    group.bench_function("checkpoint_chunk_64", |b| {
        b.iter(|| run(Some(64), init.clone(), xs.clone()))
    });
    group.finish();
}

criterion_group!(benches, bench_scan);

fn main() {
    if let Ok(which) = std::env::var("BURN_VMAP_MEASURE") {
        measure(&which);
        return;
    }
    peak_memory();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
