//! The DP-SGD training step against the standard Burn step, and what its parts cost, as ratios
//! read from one criterion run (`cargo bench --bench dp`), printed at the end:
//!
//! - `dp_step`: the whole DP step (`burn_vmap::privacy::DpSgd`: Poisson sampling of the
//!   mechanism's loader, per-example clipping, noise from the CSPRNG on the sum, the division,
//!   the inner SGD step and the accountant) against the standard step (Burn's own backward of
//!   the batch loss and the same SGD step), for the MLP, the CNN and the transformer bench
//!   models at expected batch 64 (and the MLP at 1024, DP-SGD's usual size); beside it the same
//!   step with plain `f32` noise (`NoiseKind::Plain`), whose difference from the whole step is
//!   the hardened noise's cost;
//! - the floor under the DP step: its clipped sum alone, summed in `f64` as the mechanism sums
//!   it, against the standard step (paired only), and its kernel launches on an unfused cubecl
//!   backend against the `f32` clipped sum's (counted on Burn's capture backend);
//! - `clip`: the mechanism's finite-safe clipping (`clip_and_flag`, which also counts
//!   non-finite and clipped examples) against the plain `clip_by_global_norm`, each as the
//!   `transform_fn` of the clipped sum, on the MLP and the transformer.
//!
//! The ratios are printed twice: timed in ABBA rounds of blocks (`common::paired`, the headline: a
//! drift of the machine's speed between criterion's benchmarks does not move them), and from
//! criterion's means.
//!
//! The DP step samples every example of a 64-example dataset (`q = 1`, so that the batch, and
//! the work, is the same at every iteration as the standard step's); its batcher hands over the
//! batch tensors already made, as the standard step's loop does.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn_vmap::accumulate::WideSum;
use burn_vmap::privacy::{DpConfig, DpMechanism, DpSgd, Neighbouring, NoiseKind, clip_and_flag};
use burn_vmap::{ParamGrads, Tree, clip_by_global_norm, micro_grad_module};
use criterion::{Criterion, criterion_group};

use common::paired::paired_ratio;
use common::{Cnn, Mlp, Transformer, labels, mean_ns, tokens};

const BATCH: usize = 64;
/// The MLP's batch at DP-SGD's usual sizes.
const BIG_BATCH: usize = 1024;

/// The transformer's sequence length and width: (B, T, d) = (64, 16, 64).
const T: usize = 16;
const D: usize = 64;

/// One standard step of `model` (in training mode): Burn's backward of the batch loss, then
/// the optimizer's step.
fn standard<M: Module>(model: M, optim: &mut ModuleOptimizer, loss: Tensor<1>) -> M {
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    optim.step(0.01, model, grads)
}

/// A batcher that hands over one batch of this many examples, made beforehand (every example
/// is sampled).
#[derive(Clone)]
struct Ready<X: Clone>(X, usize);

impl<X: Clone + Send + Sync> Batcher<usize, X> for Ready<X> {
    fn batch(&self, items: Vec<usize>, _: &Device) -> X {
        assert_eq!(items.len(), self.1, "q = 1 samples every example");
        self.0.clone()
    }
}

/// Paired ratios measured in `pair`, printed at the end of the run.
static PAIRED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// How long each paired ratio is measured (`BURN_VMAP_BENCH_QUICK=1`: shorter).
fn budget() -> Duration {
    let quick = std::env::var("BURN_VMAP_BENCH_QUICK").is_ok_and(|v| v == "1");
    Duration::from_secs(if quick { 3 } else { 10 })
}

/// The DP step of `model` on `batch` (of `size` examples) against the standard step with
/// `loss` of the batch.
fn pair<M, X, L>(c: &mut Criterion, name: &str, init: M, (batch, size): (X, usize), loss: L)
where
    M: Module + burn::module::ModuleDisplay + 'static,
    X: Tree + Clone + Send + Sync + 'static,
    L: Fn(&M, X) -> Tensor<1> + Copy + Send + Sync + 'static,
{
    let mut group = c.benchmark_group("dp_step");
    group.sample_size(10);
    let mut model = init.clone().train();
    let mut optim = SgdConfig::new().init();
    let mut standard_step = || {
        let l = loss(&model, batch.clone());
        model = standard(model.clone(), &mut optim, l);
    };
    group.bench_function(format!("{name}/standard"), |b| b.iter(&mut standard_step));
    // C = 1, σ = 1.1, the public expected batch (the batch's size: q = 1).
    let config = DpConfig::new(
        1.0,
        1.1,
        1.0,
        Neighbouring::AddRemove {
            expected_batch_size: size as f64,
        },
    );
    // The default hardened noise, then plain `f32` noise: the difference is the noise's cost.
    for (id, noise) in [
        ("dp_sgd", NoiseKind::default()),
        ("dp_sgd_plain_noise", NoiseKind::Plain),
    ] {
        let mechanism = DpMechanism::new(config.clone().with_noise(noise)).expect("valid settings");
        let items: Vec<usize> = (0..size).collect();
        let mut loader = mechanism
            .loader(
                Arc::new(InMemDataset::new(items)),
                Arc::new(Ready(batch.clone(), size)),
                Device::default(),
            )
            .expect("a loader");
        let mut dp = DpSgd::new(SgdConfig::new().init(), mechanism);
        let mut model = init.clone().train();
        let mut dp_step = || {
            let sampled = loader.next_batch().expect("a batch");
            (model, _) = dp.step(0.01, model.clone(), loss, sampled).expect("a step");
        };
        group.bench_function(format!("{name}/{id}"), |b| b.iter(&mut dp_step));
        let ratio = paired_ratio(budget(), &mut standard_step, &mut dp_step);
        PAIRED
            .lock()
            .unwrap()
            .push(format!("{name}: {id} / standard step = **{ratio}**"));
    }
    group.finish();

    // The floor under the DP step: its clipped sum alone, summed in f64 as the mechanism sums
    // it (`WideSum`), with no noise and no optimizer step.
    let wide = micro_grad_module(move |m: &M, (x,): (X,)| loss(m, x))
        .accumulator(WideSum)
        .transform_fn(|g: ParamGrads| clip_and_flag(g, 1.0));
    let floor_model = init.clone();
    let mut wide_sum = || {
        wide.call(&floor_model, (batch.clone(),)).expect("a sum");
    };
    let ratio = paired_ratio(budget(), &mut standard_step, &mut wide_sum);
    PAIRED.lock().unwrap().push(format!(
        "{name}: clipped sum in f64 alone / standard step = **{ratio}**"
    ));
    // Its kernel launches on an unfused cubecl backend against the f32 clipped sum's (counted
    // on Burn's capture backend; `tests/operations.rs`): the casts to f64.
    let narrow = micro_grad_module(move |m: &M, (x,): (X,)| loss(m, x))
        .transform_fn(|g: ParamGrads| clip_and_flag(g, 1.0));
    let count = |ops: burn_vmap::transform::operations::Operations| ops.launches();
    let wide_launches = count(
        wide.operations(&floor_model, (batch.clone(),))
            .expect("records"),
    );
    let narrow_launches = count(
        narrow
            .operations(&floor_model, (batch.clone(),))
            .expect("records"),
    );
    PAIRED.lock().unwrap().push(format!(
        "{name}: launches, clipped sum in f64 / in f32 = {wide_launches} / {narrow_launches} = \
         **{:.3}x**",
        wide_launches as f64 / narrow_launches as f64
    ));

    let mut group = c.benchmark_group("clip");
    group.sample_size(10);
    let model = init;
    let plain = micro_grad_module(move |m: &M, (x,): (X,)| loss(m, x))
        .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0));
    let flagged = micro_grad_module(move |m: &M, (x,): (X,)| loss(m, x))
        .transform_fn(|g: ParamGrads| clip_and_flag(g, 1.0));
    let mut plain_clip = || {
        plain.call(&model, (batch.clone(),)).expect("a sum");
    };
    let mut safe_clip = || {
        flagged.call(&model, (batch.clone(),)).expect("a sum");
    };
    group.bench_function(format!("{name}/plain"), |b| b.iter(&mut plain_clip));
    group.bench_function(format!("{name}/finite_safe"), |b| b.iter(&mut safe_clip));
    group.finish();
    let ratio = paired_ratio(budget(), &mut plain_clip, &mut safe_clip);
    PAIRED.lock().unwrap().push(format!(
        "{name}: finite-safe clip / plain clip = **{ratio}**"
    ));
}

fn dp(c: &mut Criterion) {
    let device = Device::default();
    let y = labels(BATCH, &device);
    let only = std::env::var("BURN_VMAP_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| name.contains(&only);

    // MLP 784-512-512-10, at batch 64 and at DP-SGD's usual 1024.
    for size in [BATCH, BIG_BATCH] {
        let name = if size == BATCH {
            "mlp".to_string()
        } else {
            format!("mlp_B{size}")
        };
        if wanted(&name) {
            let x = Tensor::<2>::random([size, 784], Distribution::Default, &device);
            let y = labels(size, &device);
            let loss = |m: &Mlp, (x, y): (Tensor<2>, Tensor<1, Int>)| m.loss(x, y);
            pair(c, &name, Mlp::new(&device), ((x, y), size), loss);
        }
    }

    // CNN: conv 3x3 1->16, conv 3x3 16->32, mean pool, linear 32->10, on 28x28.
    if wanted("cnn") {
        let x = Tensor::<4>::random([BATCH, 1, 28, 28], Distribution::Default, &device);
        let loss = |m: &Cnn, (x, y): (Tensor<4>, Tensor<1, Int>)| m.loss(x, y);
        pair(c, "cnn", Cnn::new(&device), ((x, y.clone()), BATCH), loss);
    }

    // Transformer encoder, (B, T, d) = (64, 16, 64).
    if wanted("transformer") {
        let x = tokens(BATCH, T, &device);
        let loss = |m: &Transformer, (x, y): (Tensor<2, Int>, Tensor<1, Int>)| m.loss(x, y);
        pair(
            c,
            "transformer",
            Transformer::new(T, D, &device),
            ((x, y), BATCH),
            loss,
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = dp
}

fn main() {
    common::start_run();
    benches();
    Criterion::default().configure_from_args().final_summary();
    println!("\n== ratios (same run), batch {BATCH} (the MLP also {BIG_BATCH}) ==");
    println!("timed in ABBA rounds of blocks (median [quartiles]; see common::paired):");
    for line in PAIRED.lock().unwrap().iter() {
        println!("- {line}");
    }
    println!("criterion's means:");
    // A filtered run (`BURN_VMAP_BENCH_ONLY=mlp`, or `cargo bench --bench dp -- mlp`) prints the
    // models it ran: `mean_ns` reads this run's estimates only.
    for model in ["mlp", "mlp_B1024", "cnn", "transformer"] {
        // Criterion stores `a/b` function ids as `a_b`.
        let ratio = |group: &str, num: &str, den: &str| {
            let n = mean_ns(group, &format!("{model}_{num}"))?;
            let d = mean_ns(group, &format!("{model}_{den}"))?;
            Some((n / d, n / 1e6, d / 1e6))
        };
        if let Some((r, n, d)) = ratio("dp_step", "dp_sgd", "standard") {
            println!("{model}: DP step / standard step = {r:.2}x  ({n:.2} ms / {d:.2} ms)");
        }
        if let Some((r, n, d)) = ratio("dp_step", "dp_sgd_plain_noise", "standard") {
            println!(
                "{model}: DP step with plain noise / standard step = {r:.2}x  ({n:.2} ms / {d:.2} ms)"
            );
        }
        if let Some((r, n, d)) = ratio("clip", "finite_safe", "plain") {
            println!("{model}: finite-safe clip / plain clip = {r:.2}x  ({n:.2} ms / {d:.2} ms)");
        }
    }
}
