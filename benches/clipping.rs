//! The clipped-sum gradient of DP-SGD and the per-example moments `(E[g], E[g²])` of unmodified
//! Burn 0.22 models, as ratios to Burn's own batch gradient on the same device, in one
//! criterion run (`cargo bench --bench clipping`), with the one-time recording cost reported
//! apart from the steady-state step, the per-example loop of Burn's own backward (what a Burn
//! 0.22 user does without this crate) beside them, and peak memory.
//!
//! Models (plain `#[derive(Module)]`; the per-example functions are the models' own batch losses,
//! which `micro_grad_module` calls on a batch of one):
//!
//! - `mlp_B64`: 784-512-512-10 (`common::Mlp`);
//! - `cnn_B64`: two 3x3 convolutions, mean pooling, a linear head (`common::Cnn`);
//! - `transformer_B{B}_T{T}_d{d}`: a Burn `TransformerEncoder` (2 layers, 4 heads, `d_ff = 4d`,
//!   no dropout) over token and position embeddings (vocabulary 1000), a `LayerNorm`, the mean
//!   over time and a `Linear` head to 10 classes, at (64, 16, 64), (32, 64, 128), (16, 128, 128);
//! - `lstm_B64_T32`: `Embedding` (1000 x 64), a Burn `Lstm` (64 -> 128), a `Linear` head on the
//!   last hidden state.
//!
//! Every work takes the same model, in training mode (on the autodiff device, as a training loop
//! and `DpMechanism` hold it). Each group holds `standard` (Burn's backward of the batch's mean
//! loss, `GradientsParams`),
//! `clipped_sum` (every example's gradient clipped to norm 1, summed: `micro_grad_module` with
//! `clip_by_global_norm` and `Sum`, its recording made before timing), `moments` (`Mean` of
//! `(g, g²)`), `loop` (Burn's backward of each example's loss, one after the other) and
//! `record_and_step` (a fresh builder: the recording, then one clipped step).
//!
//! The kernel launches of the clipped sum and of the standard step (`transform::operations`:
//! what an unfused cubecl backend launches, recorded on Burn's capture backend) are printed
//! beside the times.
//!
//! The headline ratio, clipped sum / standard, is also timed with the two steps in ABBA rounds of
//! blocks (`common::paired`: the median over the rounds, with its quartiles), which a drift of the
//! machine's speed between criterion's groups does not move.
//!
//! Environment: `BURN_VMAP_BENCH_QUICK=1` for a shorter run; `BURN_VMAP_BENCH_ONLY=lstm` (or any
//! part of a group's name) for some groups only; `BURN_VMAP_BENCH_SKIP_LOOP=1` without Burn's
//! per-example loop (on a GPU the LSTM's takes seconds an iteration).

mod common;

use std::time::Duration;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn_vmap::accumulate::{Mean, Sum};
use burn_vmap::transform::operations::{Operations, standard_step_operations};
use burn_vmap::tree::TensorMapper;
use burn_vmap::{ParamGrads, Tree, clip_by_global_norm, micro_grad_module};
use criterion::{Criterion, SamplingMode};

use common::alloc::peak_of;
use common::paired::paired_ratio;
use common::{Cnn, Mlp, Recurrent, Transformer, labels, mean_ns, tokens};

#[global_allocator]
static ALLOC: common::alloc::Counting = common::alloc::Counting;

/// `g²`, leafwise (user code, recorded as `transform_fn`).
struct Square;
impl TensorMapper for Square {
    fn map_float<const D: usize>(&mut self, _: &str, t: Tensor<D>) -> Tensor<D> {
        t.clone() * t
    }
}

fn square(g: ParamGrads) -> ParamGrads {
    g.map_tensors(&mut Square).expect("ranks <= 8")
}

/// What is measured in one group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    Standard,
    ClippedSum,
    Moments,
    Loop,
    RecordAndStep,
}

impl Work {
    const ALL: [Work; 5] = [
        Work::Standard,
        Work::ClippedSum,
        Work::Moments,
        Work::Loop,
        Work::RecordAndStep,
    ];

    fn name(self) -> &'static str {
        match self {
            Work::Standard => "standard",
            Work::ClippedSum => "clipped_sum",
            Work::Moments => "moments",
            Work::Loop => "loop",
            Work::RecordAndStep => "record_and_step",
        }
    }
}

/// One model at one size: runs a [`Work`] once and returns a count from its result.
struct Case {
    name: String,
    run: Box<dyn Fn(Work) -> usize>,
    /// The backend operations of the clipped sum and of the standard step (a recording).
    operations: (Operations, Operations),
}

/// A [`Case`] for `model` with batch `(x, y)` of `n` examples and loss `loss`.
fn case<M, X>(
    name: String,
    model: M,
    x: X,
    y: Tensor<1, Int>,
    n: usize,
    loss: fn(&M, X, Tensor<1, Int>) -> Tensor<1>,
    example: fn(&X, usize) -> X,
) -> Case
where
    M: Module + burn::module::ModuleDisplay + 'static,
    X: Tree + Clone + 'static,
{
    let trained = model.train();
    let clipped = micro_grad_module(move |m: &M, (x, y): (X, Tensor<1, Int>)| loss(m, x, y))
        .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0))
        .accumulator(Sum);
    let moments = micro_grad_module(move |m: &M, (x, y): (X, Tensor<1, Int>)| loss(m, x, y))
        .transform_fn(|g: ParamGrads| (g.clone(), square(g)))
        .accumulator(Mean);
    let operations = (
        clipped
            .operations(&trained, (x.clone(), y.clone()))
            .expect("the clipped sum records"),
        standard_step_operations(&trained, (x.clone(), y.clone()), move |m: &M, (x, y)| {
            loss(m, x, y)
        })
        .expect("the standard step records"),
    );
    let examples: Vec<(X, Tensor<1, Int>)> = (0..n)
        .map(|i| (example(&x, i), y.clone().narrow(0, i, 1)))
        .collect();
    Case {
        name,
        operations,
        run: Box::new(move |work| {
            let count = match work {
                Work::Standard => {
                    let l = loss(&trained, x.clone(), y.clone());
                    GradientsParams::from_grads(l.backward(), &trained).len()
                }
                Work::ClippedSum => {
                    let (g, _) = clipped.call(&trained, (x.clone(), y.clone())).unwrap();
                    g.len()
                }
                Work::Moments => {
                    let ((g, g2), _) = moments.call(&trained, (x.clone(), y.clone())).unwrap();
                    g.len() + g2.len()
                }
                Work::Loop => examples
                    .iter()
                    .map(|(xi, yi)| {
                        let l = loss(&trained, xi.clone(), yi.clone());
                        GradientsParams::from_grads(l.backward(), &trained).len()
                    })
                    .sum(),
                Work::RecordAndStep => {
                    let fresh =
                        micro_grad_module(move |m: &M, (x, y): (X, Tensor<1, Int>)| loss(m, x, y))
                            .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0))
                            .accumulator(Sum);
                    let (g, _) = fresh.call(&trained, (x.clone(), y.clone())).unwrap();
                    g.len()
                }
            };
            Device::default().sync().unwrap();
            count
        }),
    }
}

fn quick() -> bool {
    std::env::var("BURN_VMAP_BENCH_QUICK").is_ok_and(|v| v == "1")
}

fn skip_loop() -> bool {
    std::env::var("BURN_VMAP_BENCH_SKIP_LOOP").is_ok_and(|v| v == "1")
}

fn cases() -> Vec<Case> {
    let only = std::env::var("BURN_VMAP_BENCH_ONLY").unwrap_or_default();
    let device = Device::default();
    let mut out = Vec::new();
    let wanted = |name: &str| name.contains(&only);
    if wanted("mlp_B64") {
        let x = Tensor::<2>::random([64, 784], Distribution::Normal(0.0, 1.0), &device);
        out.push(case(
            "mlp_B64".into(),
            Mlp::new(&device),
            x,
            labels(64, &device),
            64,
            |m: &Mlp, x, y| m.loss(x, y),
            |x, i| x.clone().narrow(0, i, 1),
        ));
    }
    if wanted("cnn_B64") {
        let x = Tensor::<4>::random([64, 1, 28, 28], Distribution::Normal(0.0, 1.0), &device);
        out.push(case(
            "cnn_B64".into(),
            Cnn::new(&device),
            x,
            labels(64, &device),
            64,
            |m: &Cnn, x, y| m.loss(x, y),
            |x, i| x.clone().narrow(0, i, 1),
        ));
    }
    for (b, t, d) in [(64, 16, 64), (32, 64, 128), (16, 128, 128)] {
        let name = format!("transformer_B{b}_T{t}_d{d}");
        if wanted(&name) {
            out.push(case(
                name,
                Transformer::new(t, d, &device),
                tokens(b, t, &device),
                labels(b, &device),
                b,
                |m: &Transformer, x, y| m.loss(x, y),
                |x, i| x.clone().narrow(0, i, 1),
            ));
        }
    }
    if wanted("lstm_B64_T32") {
        out.push(case(
            "lstm_B64_T32".into(),
            Recurrent::new(&device),
            tokens(64, 32, &device),
            labels(64, &device),
            64,
            |m: &Recurrent, x, y| m.loss(x, y),
            |x, i| x.clone().narrow(0, i, 1),
        ));
    }
    out
}

fn main() {
    common::start_run();
    let cases = cases();
    // Record every builder before timing (the steady state), and read peak memory.
    let mut memory = Vec::new();
    for case in &cases {
        (case.run)(Work::ClippedSum);
        (case.run)(Work::Moments);
        let (_, standard) = peak_of(|| (case.run)(Work::Standard));
        let (_, clipped) = peak_of(|| (case.run)(Work::ClippedSum));
        memory.push((standard, clipped));
    }
    let (warm, time) = if quick() { (1, 2) } else { (2, 6) };
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(warm))
        .measurement_time(Duration::from_secs(time))
        .configure_from_args();
    for case in &cases {
        let mut g = c.benchmark_group(&case.name);
        g.sampling_mode(SamplingMode::Flat);
        for work in Work::ALL {
            if work == Work::Loop && skip_loop() {
                continue;
            }
            g.bench_function(work.name(), |b| b.iter(|| (case.run)(work)));
        }
        g.finish();
    }
    c.final_summary();

    // The headline: clipped sum against the standard step in ABBA rounds of blocks (criterion's
    // means, one after the other, drift with the machine; see `common::paired`).
    let budget = Duration::from_secs(if quick() { 4 } else { 15 });
    let paired: Vec<_> = cases
        .iter()
        .map(|case| {
            paired_ratio(
                budget,
                || {
                    (case.run)(Work::Standard);
                },
                || {
                    (case.run)(Work::ClippedSum);
                },
            )
        })
        .collect();

    println!(
        "\n== ratios to Burn's batch gradient (same run, {:?}) ==",
        Device::default()
    );
    println!("clipped sum / standard, in ABBA rounds of blocks (median [quartiles]):");
    for (case, ratio) in cases.iter().zip(&paired) {
        println!("- {}: **{ratio}**", case.name);
    }
    println!(
        "kernel launches on an unfused cubecl backend (recorded on Burn's capture backend, \
         strided copies included; `tests/operations.rs`), clipped sum / standard:"
    );
    for case in &cases {
        let (clipped, standard) = &case.operations;
        println!(
            "- {}: {} / {} = **{:.2}x** (every operation: {} / {})",
            case.name,
            clipped.launches(),
            standard.launches(),
            clipped.launches() as f64 / standard.launches() as f64,
            clipped.total(),
            standard.total()
        );
    }
    println!("criterion's means:");
    println!(
        "| model | standard | clipped sum | (g, g²) | Burn's per-example loop | recording (one-time) | peak memory: standard / clipped sum |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (case, (mem_s, mem_c)) in cases.iter().zip(memory) {
        let ns = |w: Work| mean_ns(&case.name, w.name());
        let (Some(s), Some(cs), Some(mo), Some(rs)) = (
            ns(Work::Standard),
            ns(Work::ClippedSum),
            ns(Work::Moments),
            ns(Work::RecordAndStep),
        ) else {
            continue;
        };
        let lp = ns(Work::Loop).map_or("–".into(), |lp| format!("{:.1}x", lp / s));
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        println!(
            "| {} | {:.2} ms | **{:.2}x** ({:.2} ms) | {:.2}x | {lp} | {:.1} ms | {:.1} / {:.1} MiB ({:.2}x) |",
            case.name,
            s / 1e6,
            cs / s,
            cs / 1e6,
            mo / s,
            (rs - cs).max(0.0) / 1e6,
            mib(mem_s),
            mib(mem_c),
            mem_c as f64 / mem_s.max(1) as f64
        );
    }
}
