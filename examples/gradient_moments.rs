//! Per-example gradient statistics while training, after Roulet & Agarwala, "Per-example
//! gradients: a new frontier for understanding and improving optimizers" (arXiv 2510.00236).
//!
//! ```text
//! cargo run --release --example gradient_moments
//! cargo run --release --example gradient_moments -- --epochs 20 --lr 0.003 --out DIR
//! ```
//!
//! Without `--lr`, each optimizer runs at the learning rates 0.003, 0.01 and 0.03 and is shown
//! at the one with the lowest final training loss: the three updates have different scales
//! (E[g²] ≥ E[g]² shrinks Adam-MSQ's steps; |E[sign g]| is small where examples disagree).
//!
//! Every step, ONE `micro_grad_module` pass over the batch gives, per parameter, the
//! per-example moments E[g], E[g²] and E[sign g] (a `transform_fn` `g -> (g, g², sign g)` with
//! the `Mean` accumulator, as optax's `micro_grad(transform_fn=lambda g: (g, g**2))`) and, per
//! example, the gradient norm of every layer (a `metrics_fn` on the raw gradient). From them:
//! the variance Var = E[g²] − E[g]² and the per-layer signal-to-noise ratio
//! SNR = ‖E[g]‖² / ΣVar (how much of a single example's gradient is signal).
//!
//! The model is an unmodified Burn 0.22 module; the loss is written for a batch (a single
//! example is a batch of one) and recorded once, by the builder that the training loop keeps
//! ([`MomentsFn`]): every step feeds the current parameters to the same recording.
//!
//! It trains the same MLP on UCI digits (shipped in `data/`) with three optimizers fed by those
//! moments:
//! - **Adam**: the second-moment estimate is fed E[g]², the squared mean gradient (standard);
//! - **Adam-MSQ** (the paper's MicroAdamMSQ): fed E[g²], the per-example mean square, so the
//!   preconditioner sees the mean AND the variance of the gradient distribution;
//! - **Sign-mean**: momentum on E[sign g], the per-example signs averaged (signSGD with the sign
//!   placed before averaging; its expected step is governed by the per-example SNR).
//!
//! Writes `snr.svg`, `norms.svg` and `loss.svg` to `target/gradient_moments/` (or `--out DIR`)
//! and prints a table.

#[path = "common/mod.rs"]
pub mod common;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::optim::{ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Int, Tensor};
use burn_vmap::accumulate::Mean;
use burn_vmap::tree::{TensorMapper, TensorVisitor};
use burn_vmap::{ParamGrads, Tree, VmapError, global_norm, micro_grad_module};
use plotters::prelude::*;

use common::{Mlp, SplitMix64, epoch_batches, flat_params, progress, to_vec};

// -------------------------------------------------------------------------------------------------
// The moments: one micro_grad_module pass
// -------------------------------------------------------------------------------------------------

/// Per-example gradient statistics of one batch.
#[derive(Debug, Clone)]
pub struct Moments {
    /// E[g]: the mean per-example gradient (= the batch gradient of the mean loss).
    pub mean: ParamGrads,
    /// E[g²]: the per-example mean square, elementwise.
    pub mean_sq: ParamGrads,
    /// E[sign g]: the per-example signs averaged, in `[-1, 1]`.
    pub mean_sign: ParamGrads,
    /// Per-example gradient norms `[B]`: one tensor per layer (in [`Moments::layers`] order),
    /// then the global norm over all parameters.
    pub norms: Vec<Tensor<1>>,
    /// The layer names (parameter paths without `.weight` / `.bias`).
    pub layers: Vec<String>,
    /// The mean loss of the batch.
    pub loss: f64,
}

/// The layer of a parameter path: `layers.0.weight` -> `layers.0`.
fn layer_of(path: &str) -> &str {
    path.rsplit_once('.').map_or(path, |(layer, _)| layer)
}

/// The layers of `paths`, in order, each with the indices of its parameters.
fn layer_groups(paths: &[String]) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let layer = layer_of(p);
        match groups.iter_mut().find(|(l, _)| l == layer) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((layer.to_string(), vec![i])),
        }
    }
    groups
}

/// `g ↦ g²`, elementwise, on every parameter's gradient.
struct Square;

impl TensorMapper for Square {
    fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<D>) -> Tensor<D> {
        t.clone() * t
    }
}

/// `g ↦ sign g`, elementwise.
struct Sign;

impl TensorMapper for Sign {
    fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<D>) -> Tensor<D> {
        t.sign()
    }
}

/// Every parameter's `Σ g²`, a one-element tensor each, in order.
struct SumSquares(Vec<Tensor<1>>);

impl TensorVisitor for SumSquares {
    fn visit_float<const D: usize>(&mut self, _path: &str, t: &Tensor<D>) {
        // `g * g` summed: of a dense layer's factored per-example weight gradient, the engine
        // takes the sum from the factors.
        self.0.push((t.clone() * t.clone()).sum());
    }
}

/// One example's gradient norm per layer, then over all parameters (the `metrics_fn`).
fn layer_norms(g: ParamGrads) -> Vec<Tensor<1>> {
    let mut squares = SumSquares(Vec::with_capacity(g.len()));
    g.visit_tensors(&mut squares)
        .expect("parameters of rank at most 8");
    let paths: Vec<String> = g.paths().map(str::to_string).collect();
    let mut out: Vec<Tensor<1>> = layer_groups(&paths)
        .into_iter()
        .map(|(_, idx)| {
            idx.iter()
                .map(|&i| squares.0[i].clone())
                .reduce(|a, b| a + b)
                .expect("a layer has a parameter")
                .sqrt()
        })
        .collect();
    out.push(global_norm(&g));
    out
}

/// The moments of a batch, as a function that a training loop keeps: it holds the
/// `micro_grad_module` builder, whose cache keeps the recordings (the loss once per module and
/// batch shape; `transform_fn` and `metrics_fn` once per gradient signature), so every step
/// after the first only runs them.
pub struct MomentsFn {
    call: Box<MomentsCall>,
}

/// What [`MomentsFn`] holds: the moments of a batch `(x, y)` at a model.
type MomentsCall = dyn Fn(&Mlp, Tensor<2>, Tensor<1, Int>) -> Result<Moments, VmapError>;

impl Default for MomentsFn {
    fn default() -> Self {
        Self::new()
    }
}

impl MomentsFn {
    /// The builder: `micro_grad_module` of the mean cross-entropy, the `Mean` accumulator over
    /// `(g, g², sign g)`, the per-layer norms as metrics.
    pub fn new() -> Self {
        let grad = micro_grad_module(|m: &Mlp, (x, y): (Tensor<2>, Tensor<1, Int>)| m.loss(x, y))
            .accumulator(Mean)
            // Written for ONE example's gradient g; run vectorized, then averaged over the batch.
            .transform_fn(|g: ParamGrads| {
                let sq = g.clone().map_tensors(&mut Square).expect("rank <= 8");
                let sign = g.clone().map_tensors(&mut Sign).expect("rank <= 8");
                (g, sq, sign)
            })
            // On the raw per-example gradient: its norm per layer and in total.
            .metrics_fn(layer_norms);
        let call = move |model: &Mlp, x: Tensor<2>, y: Tensor<1, Int>| {
            let ((mean, mean_sq, mean_sign), aux) = grad.call(model, (x, y))?;
            let paths: Vec<String> = mean.paths().map(str::to_string).collect();
            let layers = layer_groups(&paths).into_iter().map(|(l, _)| l).collect();
            let norms = aux
                .metrics
                .into_iter()
                .map(|t| t.squeeze_dim::<1>(1))
                .collect();
            let loss = aux.values.mean().into_scalar::<f32>() as f64;
            Ok(Moments {
                mean,
                mean_sq,
                mean_sign,
                norms,
                layers,
                loss,
            })
        };
        Self {
            call: Box::new(call),
        }
    }

    /// E[g], E[g²], E[sign g] and the per-example norms of the batch `(x, y)` at `model`'s
    /// current parameters, from ONE vectorized per-example pass.
    ///
    /// # Errors
    /// As `micro_grad_module`.
    pub fn call(&self, model: &Mlp, x: Tensor<2>, y: Tensor<1, Int>) -> Result<Moments, VmapError> {
        (self.call)(model, x, y)
    }
}

/// [`MomentsFn::call`] with a fresh builder (it records; a loop keeps a [`MomentsFn`]).
///
/// # Errors
/// As `micro_grad_module`.
pub fn moments(model: &Mlp, x: Tensor<2>, y: Tensor<1, Int>) -> Result<Moments, VmapError> {
    MomentsFn::new().call(model, x, y)
}

/// Statistics of one layer.
#[derive(Debug, Clone)]
pub struct LayerStats {
    /// The layer name.
    pub name: String,
    /// ‖E[g]‖²: the signal.
    pub signal: f64,
    /// Σ (E[g²] − E[g]²): the per-example noise (clamped at 0 elementwise against rounding).
    pub noise: f64,
    /// signal / noise.
    pub snr: f64,
    /// The mean of |E[sign g]|: 1 when every example agrees on every sign.
    pub sign_agreement: f64,
}

/// Per-layer signal, noise, SNR and sign agreement.
pub fn layer_stats(m: &Moments) -> Vec<LayerStats> {
    let read = |g: &ParamGrads| -> Vec<Vec<f32>> {
        flat_params(g).into_iter().map(|(_, t)| to_vec(t)).collect()
    };
    let (mean, sq, sign) = (read(&m.mean), read(&m.mean_sq), read(&m.mean_sign));
    let paths: Vec<String> = m.mean.paths().map(str::to_string).collect();
    layer_groups(&paths)
        .into_iter()
        .map(|(name, idx)| {
            let (mut signal, mut noise, mut agree, mut count) = (0.0, 0.0, 0.0, 0usize);
            for i in idx {
                for ((&mu, &q), &s) in mean[i].iter().zip(&sq[i]).zip(&sign[i]) {
                    let mu = mu as f64;
                    signal += mu * mu;
                    noise += (q as f64 - mu * mu).max(0.0);
                    agree += (s as f64).abs();
                }
                count += sign[i].len();
            }
            LayerStats {
                name,
                signal,
                noise,
                snr: signal / noise.max(f64::MIN_POSITIVE),
                sign_agreement: agree / count.max(1) as f64,
            }
        })
        .collect()
}

// -------------------------------------------------------------------------------------------------
// Three optimizers over the moments
// -------------------------------------------------------------------------------------------------

/// Which update [`MomentOptimizer`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Adam: second moment fed E[g]².
    Adam,
    /// Adam whose second moment is fed the per-example mean square E[g²] (MicroAdamMSQ).
    AdamMsq,
    /// Momentum on E[sign g].
    SignMean,
}

impl Method {
    /// A one-word name.
    pub fn short(self) -> &'static str {
        match self {
            Method::Adam => "Adam",
            Method::AdamMsq => "Adam-MSQ",
            Method::SignMean => "Sign-mean",
        }
    }

    /// A descriptive name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Adam => "Adam",
            Method::AdamMsq => "Adam-MSQ (E[g²])",
            Method::SignMean => "Sign-mean (E[sign g])",
        }
    }
}

/// Replaces every gradient by the next direction, reshaped to the gradient's shape.
struct Directions(std::vec::IntoIter<Tensor<1>>);

impl TensorMapper for Directions {
    fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<D>) -> Tensor<D> {
        let u = self.0.next().expect("one direction per parameter");
        u.reshape(t.dims())
    }
}

/// Adam and its per-example variants, written over the moments. It computes an update
/// direction `u`; `w ← w − lr·u` is applied by Burn's plain SGD (see [`MomentOptimizer::step`]),
/// so Burn's optimizer machinery updates the module.
#[derive(Debug, Clone)]
pub struct MomentOptimizer {
    /// The update.
    pub method: Method,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the square root of the second moment.
    pub eps: f64,
    t: i32,
    m: Vec<Tensor<1>>,
    v: Vec<Tensor<1>>,
}

impl MomentOptimizer {
    /// β1 = 0.9, β2 = 0.999, ε = 1e-8.
    pub fn new(method: Method) -> Self {
        Self {
            method,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            t: 0,
            m: Vec::new(),
            v: Vec::new(),
        }
    }

    /// The update direction `u` of this step (the optimizer then moves `w ← w − lr·u`).
    pub fn direction(&mut self, s: &Moments) -> ParamGrads {
        self.t += 1;
        let (b1, b2) = (self.beta1, self.beta2);
        let c1 = 1.0 - b1.powi(self.t);
        let c2 = 1.0 - b2.powi(self.t);
        let mean = flat_params(&s.mean);
        let (first, second): (Vec<Tensor<1>>, Vec<Tensor<1>>) = match self.method {
            Method::Adam => mean
                .iter()
                .map(|(_, g)| (g.clone(), g.clone() * g.clone()))
                .unzip(),
            Method::AdamMsq => mean
                .iter()
                .map(|(_, g)| g.clone())
                .zip(flat_params(&s.mean_sq).into_iter().map(|(_, g2)| g2))
                .unzip(),
            Method::SignMean => flat_params(&s.mean_sign)
                .into_iter()
                .map(|(_, sg)| (sg.clone(), sg.zeros_like()))
                .unzip(),
        };
        if self.m.is_empty() {
            self.m = first.iter().map(|g| g.zeros_like()).collect();
            self.v = first.iter().map(|g| g.zeros_like()).collect();
        }
        let mut dirs = Vec::with_capacity(first.len());
        for (i, (g1, g2)) in first.into_iter().zip(second).enumerate() {
            self.m[i] = self.m[i].clone() * b1 + g1 * (1.0 - b1);
            let m_hat = self.m[i].clone() / c1;
            let u = match self.method {
                Method::SignMean => m_hat,
                Method::Adam | Method::AdamMsq => {
                    self.v[i] = self.v[i].clone() * b2 + g2 * (1.0 - b2);
                    let v_hat = self.v[i].clone() / c2;
                    m_hat / (v_hat.sqrt() + self.eps)
                }
            };
            dirs.push(u);
        }
        s.mean
            .clone()
            .map_tensors(&mut Directions(dirs.into_iter()))
            .expect("rank <= 8")
    }

    /// One step: `w ← w − lr·u` for every parameter, through Burn's plain SGD `sgd`.
    ///
    /// Burn's optimizers step a model in training mode (its parameters on the autodiff
    /// device), and `train()` cannot be applied twice; the transforms take a model in either
    /// mode. So the model is put in training mode for the step and handed back in evaluation
    /// mode: the same parameters (ids kept, so the recording is reused), no autodiff graph. The
    /// MLP has no training-mode layer (dropout), so nothing else changes.
    pub fn step(&mut self, sgd: &mut ModuleOptimizer, lr: f64, model: Mlp, s: &Moments) -> Mlp {
        let u = self.direction(s);
        sgd.step(lr, model.train(), u.into_gradients_params())
            .valid()
    }
}

/// Burn's SGD without momentum or weight decay: `w ← w − lr·grad`.
pub fn plain_sgd() -> ModuleOptimizer {
    SgdConfig::new().init()
}

// -------------------------------------------------------------------------------------------------
// The experiment
// -------------------------------------------------------------------------------------------------

/// What one optimizer's run recorded.
struct History {
    method: Method,
    loss: Vec<f64>,
    /// Per step, per layer SNR.
    snr: Vec<Vec<f64>>,
    sign_agreement: Vec<Vec<f64>>,
    /// Per-example global norms over the first and the last epoch.
    first_norms: Vec<f32>,
    last_norms: Vec<f32>,
    /// Median per-example norm per layer, last step.
    last_layer_norms: Vec<f64>,
    test_accuracy: f64,
    test_loss: f64,
    lr: f64,
}

impl History {
    /// The mean training loss over the last 20 steps (NaN-safe: a diverged run is infinite).
    fn final_loss(&self) -> f64 {
        let tail = &self.loss[self.loss.len().saturating_sub(20)..];
        let l = tail.iter().sum::<f64>() / tail.len().max(1) as f64;
        if l.is_finite() { l } else { f64::INFINITY }
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("gradient_moments: {e}");
        std::process::exit(1);
    }
}

/// `gradient_moments/` in Cargo's target directory: `$CARGO_TARGET_DIR`, else the one this
/// binary was built in (`<target>/release/examples/gradient_moments`), else `target/` beside
/// the package.
fn default_out_dir() -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("gradient_moments");
    }
    let built_in = std::env::current_exe().ok().and_then(|exe| {
        let examples = exe.parent()?;
        let target = examples.parent()?.parent()?;
        (examples.file_name()? == "examples").then(|| target.join("gradient_moments"))
    });
    built_in
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/gradient_moments"))
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    run_with(&args)
}

/// The example with the command line `args` (`--epochs`, `--batch-size`, `--lr`, `--seed`,
/// `--out`).
///
/// # Errors
/// A flag that does not parse, a missing data file, a failed transform or plot.
pub fn run_with(args: &[String]) -> Result<(), Box<dyn Error>> {
    let args = args.to_vec();
    let epochs: usize = common::flag(&args, "--epochs")?.unwrap_or(10);
    let batch_size: usize = common::flag(&args, "--batch-size")?.unwrap_or(64);
    let lrs: Vec<f64> = match common::flag::<f64>(&args, "--lr")? {
        Some(lr) => vec![lr],
        None => vec![3e-3, 1e-2, 3e-2],
    };
    let seed: u64 = common::flag(&args, "--seed")?.unwrap_or(7);
    let out: PathBuf = common::flag(&args, "--out")?.unwrap_or_else(default_out_dir);

    let mut rng = SplitMix64(seed);
    let (train, test) = common::load_digits()?.split(360, &mut rng);
    let device = Device::default();
    device.seed(seed);
    let sizes = [train.dim, 64, 64, 10];
    let init = Mlp::new(&sizes, &device);
    // One builder for every run: the loss is recorded once (the runs' models are clones of
    // `init`, with the same parameter ids), then every step only runs the recording.
    let moments = MomentsFn::new();
    println!(
        "UCI digits: {} training, {} test images; MLP {:?}; batch {batch_size}, {epochs} epochs, learning rates {lrs:?}",
        train.len(),
        test.len(),
        sizes
    );

    // Each optimizer at each learning rate of the grid, on the same batches; the one with the
    // lowest final training loss represents it (no peeking at the test set).
    let start = Instant::now();
    let mut runs: Vec<(History, Vec<String>)> = Vec::new();
    let mut sweep: Vec<(Method, f64, f64, f64)> = Vec::new();
    for method in [Method::Adam, Method::AdamMsq, Method::SignMean] {
        let mut best: Option<(History, Vec<String>)> = None;
        for &lr in &lrs {
            let (h, layers) = train_run(
                method,
                lr,
                &init,
                &moments,
                &train,
                &test,
                epochs,
                batch_size,
                &mut rng.clone(),
            )?;
            sweep.push((method, lr, h.final_loss(), h.test_accuracy));
            if best
                .as_ref()
                .is_none_or(|(b, _)| h.final_loss() < b.final_loss() || !b.final_loss().is_finite())
            {
                best = Some((h, layers));
            }
        }
        runs.push(best.expect("at least one learning rate"));
    }
    let elapsed = start.elapsed();

    // The table.
    let (adam, layers) = &runs[0];
    let steps = adam.loss.len();
    println!("\nPer-layer statistics along the Adam run (SNR = ‖E[g]‖² / Σ Var[g], per example):");
    println!(
        "{:<10} {:>11} {:>11} {:>11} {:>13} {:>15}",
        "layer", "SNR first", "SNR middle", "SNR last", "mean|E[sgn]|", "median ‖g_i‖"
    );
    for (l, name) in layers.iter().enumerate() {
        println!(
            "{:<10} {:>11.4} {:>11.4} {:>11.4} {:>13.3} {:>15.4}",
            name,
            adam.snr[0][l],
            adam.snr[steps / 2][l],
            adam.snr[steps - 1][l],
            adam.sign_agreement[steps - 1][l],
            adam.last_layer_norms[l]
        );
    }
    if lrs.len() > 1 {
        println!("\nLearning-rate grid (final train loss = mean of the last 20 steps):");
        println!(
            "{:<12} {:>8} {:>17} {:>14}",
            "optimizer", "lr", "final train loss", "test accuracy"
        );
        for (m, lr, loss, acc) in &sweep {
            println!(
                "{:<12} {:>8} {:>17.4} {:>13.1}%",
                m.short(),
                lr,
                loss,
                100.0 * acc
            );
        }
    }
    println!(
        "\nEach optimizer at its best learning rate (lowest final train loss):\n{:<24} {:>8} {:>16} {:>12} {:>14}",
        "optimizer", "lr", "final train loss", "test loss", "test accuracy"
    );
    for (h, _) in &runs {
        println!(
            "{:<24} {:>8} {:>16.4} {:>12.4} {:>13.1}%",
            h.method.name(),
            h.lr,
            h.final_loss(),
            h.test_loss,
            100.0 * h.test_accuracy
        );
    }
    println!(
        "({} training runs in {:.1} s)",
        sweep.len(),
        elapsed.as_secs_f64()
    );

    std::fs::create_dir_all(&out)?;
    let snr_series: Vec<(String, Vec<f64>)> = layers
        .iter()
        .enumerate()
        .map(|(l, name)| (name.clone(), adam.snr.iter().map(|s| s[l]).collect()))
        .collect();
    plot_lines(
        &out.join("snr.svg"),
        "Per-layer signal-to-noise ‖E[g]‖² / ΣVar (Adam; mean over 5-step windows)",
        "SNR",
        &snr_series,
        5,
    )?;
    let loss_series: Vec<(String, Vec<f64>)> = runs
        .iter()
        .map(|(h, _)| (format!("{} (lr {})", h.method.name(), h.lr), h.loss.clone()))
        .collect();
    plot_lines(
        &out.join("loss.svg"),
        "Training loss (mean over 10-step windows)",
        "loss",
        &loss_series,
        10,
    )?;
    plot_histogram(
        &out.join("norms.svg"),
        "Per-example gradient norms ‖g_i‖ (Adam)",
        &[
            ("first epoch".to_string(), adam.first_norms.clone()),
            (format!("epoch {epochs}"), adam.last_norms.clone()),
        ],
        30,
    )?;
    println!("plots: {}/{{snr,loss,norms}}.svg", out.display());
    Ok(())
}

/// Trains a copy of `init` with `method` at `lr` and records the statistics of every step.
#[allow(clippy::too_many_arguments)]
fn train_run(
    method: Method,
    lr: f64,
    init: &Mlp,
    moments: &MomentsFn,
    train: &common::Dataset,
    test: &common::Dataset,
    epochs: usize,
    batch_size: usize,
    rng: &mut SplitMix64,
) -> Result<(History, Vec<String>), Box<dyn Error>> {
    let device = Device::default();
    let mut model = init.clone();
    let mut opt = MomentOptimizer::new(method);
    let mut sgd = plain_sgd();
    let steps = epochs * (train.len() / batch_size);
    let bar = progress(steps, &format!("{} {lr}", method.short()));
    let mut h = History {
        method,
        lr,
        loss: Vec::with_capacity(steps),
        snr: Vec::with_capacity(steps),
        sign_agreement: Vec::with_capacity(steps),
        first_norms: Vec::new(),
        last_norms: Vec::new(),
        last_layer_norms: Vec::new(),
        test_accuracy: 0.0,
        test_loss: 0.0,
    };
    let mut layers = Vec::new();
    for epoch in 0..epochs {
        for idx in epoch_batches(train.len(), batch_size, rng) {
            let (x, y) = train.batch(&idx, &device);
            let s = moments.call(&model, x, y)?;
            let stats = layer_stats(&s);
            h.loss.push(s.loss);
            h.snr.push(stats.iter().map(|l| l.snr).collect());
            h.sign_agreement
                .push(stats.iter().map(|l| l.sign_agreement).collect());
            let global = to_vec(s.norms.last().expect("global norm").clone());
            if epoch == 0 {
                h.first_norms.extend(&global);
            }
            if epoch + 1 == epochs {
                h.last_norms.extend(&global);
            }
            h.last_layer_norms = s.norms[..s.layers.len()]
                .iter()
                .map(|t| median(&to_vec(t.clone())))
                .collect();
            layers = s.layers.clone();
            model = opt.step(&mut sgd, lr, model, &s);
            bar.inc(1);
            bar.set_message(format!("loss {:.3}", s.loss));
        }
    }
    bar.finish_and_clear();
    let (xt, yt) = test.all(&device);
    h.test_accuracy = model.accuracy(xt.clone(), yt.clone());
    h.test_loss = model.loss(xt, yt).into_scalar::<f32>() as f64;
    Ok((h, layers))
}

fn median(v: &[f32]) -> f64 {
    let mut v: Vec<f32> = v.to_vec();
    v.sort_by(f32::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0) as f64
}

// -------------------------------------------------------------------------------------------------
// Plots
// -------------------------------------------------------------------------------------------------

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Line plot with a log y axis of `series` over steps, each averaged over windows of `window`.
fn plot_lines(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[(String, Vec<f64>)],
    window: usize,
) -> Result<(), Box<dyn Error>> {
    let smoothed: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, ys)| {
            let pts = ys
                .chunks(window.max(1))
                .enumerate()
                .map(|(i, c)| {
                    let x = (i * window.max(1)) as f64 + (c.len() as f64 - 1.0) / 2.0;
                    (x, c.iter().sum::<f64>() / c.len() as f64)
                })
                .filter(|(_, y)| y.is_finite() && *y > 0.0)
                .collect();
            (name.clone(), pts)
        })
        .collect();
    let all = smoothed.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y));
    let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let (lo, hi) = if lo.is_finite() {
        (lo * 0.8, hi * 1.25)
    } else {
        (1e-3, 1.0)
    };
    let steps = series.iter().map(|(_, v)| v.len()).max().unwrap_or(1) as f64;

    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..steps, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_label)
        .draw()?;
    for (i, (name, pts)) in smoothed.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Overlaid histograms of `samples` in `bins` bins of equal width on a log10 scale (the norms
/// span orders of magnitude).
fn plot_histogram(
    path: &Path,
    title: &str,
    samples: &[(String, Vec<f32>)],
    bins: usize,
) -> Result<(), Box<dyn Error>> {
    let logs: Vec<Vec<f64>> = samples
        .iter()
        .map(|(_, v)| {
            v.iter()
                .filter(|x| **x > 0.0 && x.is_finite())
                .map(|&x| (x as f64).log10())
                .collect()
        })
        .collect();
    let (lo, hi) = logs
        .iter()
        .flatten()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let (lo, hi) = if lo.is_finite() {
        (lo, hi.max(lo + 1e-6))
    } else {
        (0.0, 1.0)
    };
    let width = (hi - lo) / bins as f64;
    let counts: Vec<Vec<u32>> = logs
        .iter()
        .map(|v| {
            let mut c = vec![0u32; bins];
            for &x in v {
                c[(((x - lo) / width) as usize).min(bins - 1)] += 1;
            }
            c
        })
        .collect();
    let top = counts.iter().flatten().copied().max().unwrap_or(1);

    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((0u32..bins as u32).into_segmented(), 0u32..top + 1)?;
    chart
        .configure_mesh()
        .x_desc("per-example gradient norm (log scale)")
        .y_desc("examples")
        .x_label_formatter(&|v| match v {
            SegmentValue::Exact(b) | SegmentValue::CenterOf(b) => {
                format!("{:.1e}", 10f64.powf(lo + *b as f64 * width))
            }
            SegmentValue::Last => String::new(),
        })
        .draw()?;
    for (i, ((name, _), c)) in samples.iter().zip(&counts).enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(
                Histogram::vertical(&chart)
                    .style(color.mix(0.5).filled())
                    .margin(1)
                    .data(c.iter().enumerate().map(|(b, &n)| (b as u32, n))),
            )?
            .label(name.clone())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.mix(0.5).filled())
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
