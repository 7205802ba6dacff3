//! DP-SGD (Abadi et al., 2016) on a Burn MLP with `burn_vmap::privacy`: Poisson-sampled batches
//! from a `burn::data` dataset, per-example clipping, Gaussian noise from a CSPRNG, and the ε
//! that holds for exactly that (the default hardened noise, the discrete Gaussian, by its Rényi
//! DP); next to the same model trained without privacy (outside the guarantee).
//!
//! ```text
//! cargo run --release --example dp_sgd                          # UCI digits, in data/
//! cargo run --release --example dp_sgd -- --target-epsilon 2    # σ calibrated to ε = 2
//! cargo run --release --example dp_sgd -- --mnist DIR           # MNIST IDX files in DIR
//! ```
//!
//! Options: `--epochs N`, `--expected-batch B` (q·N), `--lr LR`, `--clip C`, `--sigma S` or
//! `--target-epsilon E` (calibrates σ for the whole run), `--microbatch M` (examples per
//! vectorized pass; bounds memory), `--delta D`, `--seed S` (the data split, the initial weights
//! and the baseline's shuffling; the DP noise and sampling always come from the operating
//! system's entropy).
//!
//! The DP step differs from the standard Burn step in about ten lines: see [`fit_private`].

#[path = "common/mod.rs"]
pub mod common;

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Tensor};
use burn_vmap::privacy::accounting::calibrate_noise_multiplier;
use burn_vmap::privacy::{DpConfig, DpMechanism, DpSgd, Neighbouring, NoiseKind};

use common::{Batch, Dataset, Indices, Mlp, Rows, SplitMix64, epoch_batches, progress};

/// The loss of a batch (one example is a batch of one).
pub fn loss(model: &Mlp, (x, y): Batch) -> Tensor<1> {
    model.loss(x, y)
}

/// The optimizer both runs use.
fn sgd() -> ModuleOptimizer {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init()
}

/// The standard Burn training loop: shuffled fixed-size batches, no privacy.
pub fn fit_baseline(
    model: Mlp,
    data: &Dataset,
    epochs: usize,
    batch_size: usize,
    lr: f64,
    rng: &mut SplitMix64,
) -> Mlp {
    let device = Device::default();
    let mut model = model.train();
    let mut optim = sgd();
    let bar = progress(epochs * data.len() / batch_size, "baseline");
    for _ in 0..epochs {
        for idx in epoch_batches(data.len(), batch_size, rng) {
            let (x, y) = data.batch(&idx, &device);
            let grads = GradientsParams::from_grads(model.loss(x, y).backward(), &model);
            model = optim.step(lr, model, grads);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    model
}

/// The same loop with DP-SGD: Poisson-sampled batches from the mechanism's loader, and the
/// step of the [`DpSgd`] wrapper around the same optimizer (clip, sum, noise, divide by the
/// public expected batch size, account).
///
/// # Errors
/// A refused model or setting (see `burn_vmap::privacy::PrivacyError`).
pub fn fit_private(
    model: Mlp,
    data: Arc<Dataset>,
    steps: usize,
    lr: f64,
    config: DpConfig,
) -> Result<(Mlp, DpSgd), Box<dyn Error>> {
    let n = data.len();
    let mut model = model.train();
    let mechanism = DpMechanism::new(config)?;
    let mut loader = mechanism.loader(
        Arc::new(Indices(n)),
        Arc::new(Rows(data)),
        Device::default(),
    )?;
    let mut dp = DpSgd::new(sgd(), mechanism);
    let bar = progress(steps, "DP-SGD");
    for _ in 0..steps {
        let batch = loader.next_batch()?; // Poisson: a random size, possibly empty
        (model, _) = dp.step(lr, model, loss, batch)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((model, dp))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("dp_sgd: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    run_with(&args).map(drop)
}

/// What a run printed: both models' test accuracies and the DP model's ε.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The test accuracy of the model trained without privacy, in `[0, 1]`.
    pub baseline_accuracy: f64,
    /// The test accuracy of the DP-SGD model, in `[0, 1]`.
    pub private_accuracy: f64,
    /// The DP-SGD model's ε at the run's δ.
    pub epsilon: f64,
}

/// The example with the command line `args` (the options above).
///
/// # Errors
/// A flag that does not parse or contradicts another, a missing data file, a refused model or
/// setting.
pub fn run_with(args: &[String]) -> Result<Outcome, Box<dyn Error>> {
    let args = args.to_vec();
    let mnist: Option<PathBuf> = common::flag(&args, "--mnist")?;
    let seed: u64 = common::flag(&args, "--seed")?.unwrap_or(7);
    let mut rng = SplitMix64(seed);
    let (published, train, test) = match &mnist {
        Some(dir) => {
            let (train, test) = common::load_mnist(dir)?;
            (common::MNIST, train, test)
        }
        None => {
            let digits = common::load_digits()?;
            let (train, test) = digits.split(common::DIGITS_TEST, &mut rng);
            (common::DIGITS, train, test)
        }
    };
    let name = published.name;
    let big = mnist.is_some();
    let n = published.train; // printed: the published size, as the settings use
    let epochs: usize = common::flag(&args, "--epochs")?.unwrap_or(if big { 1 } else { 30 });
    let expected_batch: usize =
        common::flag(&args, "--expected-batch")?.unwrap_or(if big { 256 } else { 64 });
    let lr: f64 = common::flag(&args, "--lr")?.unwrap_or(0.1);
    let clip: f64 = common::flag(&args, "--clip")?.unwrap_or(1.0);
    // q and δ from the published size of the training split: under add/remove neighbours the
    // size of the set actually held, `n`, is private.
    let delta: f64 = common::flag(&args, "--delta")?.unwrap_or(published.default_delta());
    let microbatch: Option<usize> = common::flag(&args, "--microbatch")?.or(big.then_some(64));
    let hidden = if big { 128 } else { 64 };

    let q = published.sampling_rate(expected_batch);
    let steps = epochs * (1.0 / q).ceil() as usize;
    let target: Option<f64> = common::flag(&args, "--target-epsilon")?;
    let sigma = match (target, common::flag::<f64>(&args, "--sigma")?) {
        (Some(_), Some(_)) => return Err("give --sigma or --target-epsilon, not both".into()),
        (Some(eps), None) => {
            // The accountant whose ε holds for the noise the run draws (hardened by default).
            let kind = NoiseKind::default().accountant();
            calibrate_noise_multiplier(eps, delta, q, steps as u64, kind, 1e-3)?
        }
        (None, sigma) => sigma.unwrap_or(1.0),
    };

    println!(
        "{name}: {n} training and {} test images of {} pixels; MLP {}-{hidden}-10",
        test.len(),
        train.dim,
        train.dim
    );
    println!(
        "{epochs} epochs = {steps} steps; SGD (momentum 0.9) lr {lr}; DP: Poisson sampling at \
         q = {q:.4} (expected batch {expected_batch}), clip C = {clip}, noise σ = {sigma:.3}{}",
        if target.is_some() {
            " (calibrated)"
        } else {
            ""
        }
    );

    let device = Device::default();
    device.seed(seed);
    let init = Mlp::new(&[train.dim, hidden, 10], &device);

    let start = Instant::now();
    let baseline = fit_baseline(init.clone(), &train, epochs, expected_batch, lr, &mut rng);
    let t_baseline = start.elapsed();
    // N is the published size of the training set: the public expected batch size is q·N.
    let public = Neighbouring::AddRemove {
        expected_batch_size: expected_batch as f64,
    };
    let config = DpConfig::new(clip, sigma, q, public)
        .with_delta(delta)
        .with_microbatch_size(microbatch);
    let start = Instant::now();
    let (private, dp) = fit_private(init, Arc::new(train), steps, lr, config)?;
    let t_private = start.elapsed();

    let (xt, yt) = test.all(&device);
    let (baseline, private) = (baseline.valid(), private.valid());
    let outcome = Outcome {
        baseline_accuracy: baseline.accuracy(xt.clone(), yt.clone()),
        private_accuracy: private.accuracy(xt, yt),
        epsilon: dp.mechanism().epsilon()?,
    };
    println!();
    println!("{:<44} {:>14} {:>8}", "", "test accuracy", "time");
    println!(
        "{:<44} {:>13.1}% {:>7.1}s",
        "non-private SGD (outside the guarantee)",
        100.0 * outcome.baseline_accuracy,
        t_baseline.as_secs_f64()
    );
    println!(
        "{:<44} {:>13.1}% {:>7.1}s",
        "DP-SGD",
        100.0 * outcome.private_accuracy,
        t_private.as_secs_f64()
    );
    println!();
    println!(
        "privacy of the DP-SGD model: ε = {:.3} at δ = {delta:.1e} (the Rényi DP of the \
         Poisson-subsampled discrete Gaussian: its hardened noise)",
        outcome.epsilon,
    );
    println!("{}", dp.mechanism().statement()?);
    Ok(outcome)
}
