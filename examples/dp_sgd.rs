//! DP-SGD (Abadi et al., 2016) on a Burn MLP: per-example clipping and Gaussian noise, next to
//! the same model trained without privacy.
//!
//! ```text
//! cargo run --release --example dp_sgd                      # UCI digits, shipped in data/
//! cargo run --release --example dp_sgd -- --mnist DIR       # MNIST IDX files in DIR
//! ```
//!
//! On the digits both runs take a few seconds. On MNIST (60,000 images, MLP 784-128-10, batch
//! 256 in microbatches of 64) one epoch of DP-SGD takes minutes on a 2-core CPU: raise
//! `--epochs` on a faster machine (or a GPU backend feature).
//!
//! Options: `--epochs N`, `--batch-size B`, `--lr LR`, `--clip C`, `--sigma S`,
//! `--microbatch M` (examples per vectorized pass; bounds memory), `--delta D`, `--seed S`.
//!
//! The model lives on `Autodiff<Vmap<B>>` and trains like any Burn model there. The private
//! step differs from the standard one only in how the gradient is computed: see
//! [`train_step`] and [`dp_train_step`].

#[path = "common/mod.rs"]
pub mod common;

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::module::Module;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn_vmap::testing::TestBackend;
use burn_vmap::{clip_by_global_norm, micro_grad_module, ParamGrads, Vmap, VmapError};

use common::{epoch_batches, progress, Dataset, Mlp, SplitMix64};

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;

/// DP-SGD's parameters.
#[derive(Debug, Clone, Copy)]
pub struct DpConfig {
    /// `C`: every example's gradient is clipped to this global L2 norm.
    pub clip: f64,
    /// `σ`: the noise multiplier; the noise on the summed gradient has std `σ·C`.
    pub sigma: f64,
    /// Examples per vectorized pass (`None`: the whole batch at once). Must divide the batch.
    pub microbatch: Option<usize>,
}

/// The standard Burn training step (the non-private baseline).
pub fn train_step<O: Optimizer<Mlp<AD>, AD>>(
    model: Mlp<AD>,
    optim: &mut O,
    lr: f64,
    x: Tensor<AD, 2>,
    y: Tensor<AD, 1, Int>,
) -> Mlp<AD> {
    let grads = model.loss(x, y).backward();
    let grads = GradientsParams::from_grads(grads, &model);
    optim.step(lr, model, grads)
}

/// The same step with DP-SGD: only the gradient changes.
///
/// # Errors
/// A microbatch size that does not divide the batch.
pub fn dp_train_step<O: Optimizer<Mlp<AD>, AD>>(
    model: Mlp<AD>,
    optim: &mut O,
    lr: f64,
    x: Tensor<AD, 2>,
    y: Tensor<AD, 1, Int>,
    dp: &DpConfig,
) -> Result<Mlp<AD>, VmapError> {
    let grads = dp_gradients(&model, x, y, dp)?;
    Ok(optim.step(lr, model, grads.into_gradients_params()))
}

/// DP-SGD's gradient of a batch: every example's gradient clipped to norm `C`, summed,
/// Gaussian noise of std `σ·C` added to the sum, divided by the batch size.
///
/// # Errors
/// A microbatch size that does not divide the batch.
pub fn dp_gradients(
    model: &Mlp<AD>,
    x: Tensor<AD, 2>,
    y: Tensor<AD, 1, Int>,
    dp: &DpConfig,
) -> Result<ParamGrads<I>, VmapError> {
    let batch_size = x.dims()[0];
    // Per-example gradients (one vectorized backward pass per microbatch), each clipped to
    // norm C, then SUMMED: `Sum` is micro_grad's default accumulator.
    let (clipped_sum, _) =
        micro_grad_module(|m: &Mlp<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 1, Int>)| m.loss(x, y))
            .microbatch_size(dp.microbatch)
            .transform_fn(|g| clip_by_global_norm(g, dp.clip))
            .call(model, (x, y))?;
    // Noise on the SUM, whose sensitivity to one example is C, THEN divide by the batch size.
    // (Adding σ·C noise to the MEAN, whose sensitivity is C / B, would add B times too little
    // noise: a known privacy bug.)
    Ok(clipped_sum.map_flat(|sum| {
        let noise = Tensor::random(
            sum.shape(),
            Distribution::Normal(0.0, dp.sigma * dp.clip),
            &sum.device(),
        );
        (sum + noise) / batch_size as f64
    }))
}

/// The privacy spent by `steps` DP-SGD steps that each sample a fraction `q` of the data with
/// noise multiplier `sigma`: `(ε, best Rényi order)` at `delta`, by the Rényi-DP accountant of
/// the sampled Gaussian mechanism (Mironov, Talwar & Zhang 2019, integer orders 2..=256) and
/// the classic RDP-to-(ε, δ) conversion `ε = steps·ε_α + ln(1/δ) / (α − 1)`.
///
/// The bound assumes Poisson sampling (each example joins a batch independently with
/// probability `q`); this example shuffles and cuts fixed-size batches, the common practical
/// substitute that libraries report the same ε for.
pub fn dp_epsilon(q: f64, sigma: f64, steps: usize, delta: f64) -> (f64, u32) {
    if sigma <= 0.0 {
        return (f64::INFINITY, 0);
    }
    let mut best = (f64::INFINITY, 0);
    for alpha in 2u32..=256 {
        // ln A_α = ln Σ_k C(α,k) (1−q)^(α−k) q^k exp((k² − k) / 2σ²)
        let a = alpha as f64;
        let mut terms = Vec::with_capacity(alpha as usize + 1);
        let mut ln_binom = 0.0f64;
        for k in 0..=alpha {
            if k > 0 {
                ln_binom += ((a - k as f64 + 1.0) / k as f64).ln();
            }
            let kf = k as f64;
            let ln_rest = if alpha - k == 0 {
                0.0
            } else {
                (a - kf) * (1.0 - q).ln()
            };
            let ln_q = if k == 0 { 0.0 } else { kf * q.ln() };
            terms.push(ln_binom + ln_rest + ln_q + (kf * kf - kf) / (2.0 * sigma * sigma));
        }
        let max = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let ln_a = max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln();
        let rdp = ln_a / (a - 1.0);
        let eps = steps as f64 * rdp + (1.0 / delta).ln() / (a - 1.0);
        if eps < best.0 {
            best = (eps, alpha);
        }
    }
    best
}

/// Settings of a run.
#[derive(Debug, Clone)]
struct Settings {
    epochs: usize,
    batch_size: usize,
    lr: f64,
    dp: DpConfig,
    delta: Option<f64>,
    seed: u64,
    hidden: usize,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("dp_sgd: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mnist: Option<PathBuf> = common::flag(&args, "--mnist")?;
    let seed: u64 = common::flag(&args, "--seed")?.unwrap_or(7);
    let mut rng = SplitMix64(seed);
    let (name, train, test) = match &mnist {
        Some(dir) => {
            let (train, test) = common::load_mnist(dir)?;
            ("MNIST", train, test)
        }
        None => {
            let digits = common::load_digits()?;
            let (train, test) = digits.split(360, &mut rng);
            ("UCI digits", train, test)
        }
    };
    let big = mnist.is_some();
    let s = Settings {
        epochs: common::flag(&args, "--epochs")?.unwrap_or(if big { 1 } else { 30 }),
        batch_size: common::flag(&args, "--batch-size")?.unwrap_or(if big { 256 } else { 64 }),
        lr: common::flag(&args, "--lr")?.unwrap_or(0.1),
        dp: DpConfig {
            clip: common::flag(&args, "--clip")?.unwrap_or(1.0),
            sigma: common::flag(&args, "--sigma")?.unwrap_or(1.0),
            microbatch: common::flag(&args, "--microbatch")?.or(big.then_some(64)),
        },
        delta: common::flag(&args, "--delta")?,
        seed,
        hidden: if big { 128 } else { 64 },
    };
    let delta = s.delta.unwrap_or(1.0 / (10.0 * train.len() as f64));
    println!(
        "{name}: {} training and {} test images of {} pixels; MLP {}-{}-10",
        train.len(),
        test.len(),
        train.dim,
        train.dim,
        s.hidden
    );
    println!(
        "{} epochs, batch {}, SGD (momentum 0.9) lr {}; DP: clip C = {}, noise σ = {}",
        s.epochs, s.batch_size, s.lr, s.dp.clip, s.dp.sigma
    );

    let device = Default::default();
    I::seed(&device, s.seed);
    let init = Mlp::<AD>::new(&[train.dim, s.hidden, 10], &device);

    let start = Instant::now();
    let baseline = fit(init.clone(), &train, &s, None, &mut rng.clone())?;
    let t_baseline = start.elapsed();
    let start = Instant::now();
    let private = fit(init, &train, &s, Some(&s.dp), &mut rng.clone())?;
    let t_private = start.elapsed();

    let (xt, yt) = test.all::<AD>(&device);
    let acc_baseline = baseline.accuracy(xt.clone(), yt.clone());
    let acc_private = private.accuracy(xt, yt);
    let steps = s.epochs * (train.len() / s.batch_size);
    let q = s.batch_size as f64 / train.len() as f64;
    let (eps, order) = dp_epsilon(q, s.dp.sigma, steps, delta);

    println!();
    println!("{:<24} {:>14} {:>10}", "", "test accuracy", "time");
    println!(
        "{:<24} {:>13.1}% {:>9.1}s",
        "non-private SGD",
        100.0 * acc_baseline,
        t_baseline.as_secs_f64()
    );
    println!(
        "{:<24} {:>13.1}% {:>9.1}s",
        "DP-SGD",
        100.0 * acc_private,
        t_private.as_secs_f64()
    );
    println!(
        "privacy: ({eps:.2}, {delta:.1e})-DP after {steps} steps at sampling rate {q:.3} \
         (RDP accountant, order {order})"
    );
    Ok(())
}

/// Trains `model` for `s.epochs`; with `dp`, every step is a DP-SGD step.
fn fit(
    mut model: Mlp<AD>,
    data: &Dataset,
    s: &Settings,
    dp: Option<&DpConfig>,
    rng: &mut SplitMix64,
) -> Result<Mlp<AD>, Box<dyn Error>> {
    let device = model.devices().remove(0);
    let mut optim = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init::<AD, Mlp<AD>>();
    let steps_per_epoch = data.len() / s.batch_size;
    let what = if dp.is_some() { "DP-SGD" } else { "baseline" };
    let bar = progress(s.epochs * steps_per_epoch, what);
    for epoch in 0..s.epochs {
        for idx in epoch_batches(data.len(), s.batch_size, rng) {
            let (x, y) = data.batch::<AD>(&idx, &device);
            model = match dp {
                None => train_step(model, &mut optim, s.lr, x, y),
                Some(dp) => dp_train_step(model, &mut optim, s.lr, x, y, dp)?,
            };
            bar.inc(1);
        }
        bar.set_message(format!("epoch {}", epoch + 1));
    }
    bar.finish_and_clear();
    Ok(model)
}
