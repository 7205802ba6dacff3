//! DP-SGD through burn-train's `Learner` on the bundled digits: your model and your batcher,
//! a per-example loss, and `burn_vmap::train::DpTraining` wiring burn-train for DP (the
//! mechanism's Poisson batches, the DP step, the loop that refuses gradient accumulation and
//! resumes ε from the mechanism's record). ε, the clipped fraction and the non-finite examples
//! are metrics of the training split, on burn-train's dashboard; the validation split shows
//! your model's own loss and accuracy. The run ends printing the privacy statement.
//!
//! ```text
//! cargo run --release --example dp_learner --features tui   # the dashboard (in a terminal)
//! cargo run --release --example dp_learner                  # burn-train's CLI renderer, then
//!                                                           # its summary (ε per epoch)
//! ```
//!
//! Options: `--epochs N`, `--expected-batch B` (the public expected batch size; q = B/N with N
//! the training split's announced size), `--lr LR`, `--clip C`, `--sigma S`, `--delta D`,
//! `--seed S` (the data split and the initial weights; sampling and noise always come from the
//! operating system's entropy), `--dir DIR` (burn-train's logs and checkpoints; default: a
//! directory under the system's temporary directory, emptied first), `--resume EPOCH` (continue
//! the run checkpointed in `--dir` after that epoch: the model, the optimizer and ε).

#[path = "common/mod.rs"]
pub mod common;

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::module::Module;
use burn::optim::SgdConfig;
use burn::optim::momentum::MomentumConfig;
use burn::tensor::{Device, Int, Tensor};
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{ClassificationOutput, InferenceStep, Learner};
use burn_vmap::privacy::{DpConfig, Neighbouring};
use burn_vmap::train::DpTraining;

use common::{Batch, Indices, Mlp, Rows, SplitMix64};

/// Validation is the model's own: logits, loss and labels for burn-train's metrics.
impl InferenceStep for Mlp {
    type Input = Batch;
    type Output = ClassificationOutput;

    fn step(&self, (x, y): Batch) -> ClassificationOutput {
        let logits = self.forward(x);
        let logp = burn::tensor::activation::log_softmax(logits.clone(), 1);
        let loss = logp.gather(1, y.clone().unsqueeze_dim(1)).mean().neg();
        ClassificationOutput::new(loss, logits, y)
    }
}

/// The loss of one example (a batch of one): what DP-SGD clips.
pub fn loss(model: &Mlp, (x, y): (Tensor<2>, Tensor<1, Int>)) -> Tensor<1> {
    model.loss(x, y)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("dp_learner: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    run_with(&args).map(drop)
}

/// What a run printed: the validation accuracy, the DP steps taken and ε.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The trained model's validation accuracy, in `[0, 1]`.
    pub accuracy: f64,
    /// The DP steps taken, a resumed run's first run's included.
    pub steps: u64,
    /// ε of those steps at the run's δ.
    pub epsilon: f64,
}

/// The example with the command line `args` (the options above).
///
/// # Errors
/// A flag that does not parse, a resume without `--dir`, a refused setting, a training that
/// stopped on an error.
pub fn run_with(args: &[String]) -> Result<Outcome, Box<dyn Error>> {
    let args = args.to_vec();
    let seed: u64 = common::flag(&args, "--seed")?.unwrap_or(7);
    let mut rng = SplitMix64(seed);
    let (train, test) = common::load_digits()?.split(common::DIGITS_TEST, &mut rng);
    let n = train.len(); // the dataset of the loader (the mechanism never reads its size)
    // q and δ from the published size of the training split: N itself is private.
    let published = common::DIGITS;
    let epochs: usize = common::flag(&args, "--epochs")?.unwrap_or(30);
    let expected_batch: usize = common::flag(&args, "--expected-batch")?.unwrap_or(64);
    let lr: f64 = common::flag(&args, "--lr")?.unwrap_or(0.1);
    let clip: f64 = common::flag(&args, "--clip")?.unwrap_or(1.0);
    let sigma: f64 = common::flag(&args, "--sigma")?.unwrap_or(1.0);
    let delta: f64 = common::flag(&args, "--delta")?.unwrap_or(published.default_delta());
    let resume: Option<usize> = common::flag(&args, "--resume")?;
    let dir: PathBuf = match common::flag::<PathBuf>(&args, "--dir")? {
        Some(dir) => dir,
        None if resume.is_some() => return Err("--resume needs the --dir of the first run".into()),
        None => {
            // burn-train's summary reads every epoch logged there: start clean.
            let dir = std::env::temp_dir().join("burn-vmap-dp-learner");
            let _ = std::fs::remove_dir_all(&dir);
            dir
        }
    };
    let q = published.sampling_rate(expected_batch);

    println!(
        "UCI digits: {n} training and {} validation images; MLP {}-64-10; {epochs} epochs of \
         {} steps; Poisson sampling at q = {q:.4}, C = {clip}, σ = {sigma}, δ = {delta:.1e}",
        test.len(),
        train.dim,
        (1.0 / q).ceil()
    );

    let device = Device::default();
    device.seed(seed);
    let model = Mlp::new(&[train.dim, 64, 10], &device);
    let (train, test) = (Arc::new(train), Arc::new(test));
    let valid: Arc<dyn DataLoader<Batch>> = DataLoaderBuilder::new(Rows(test.clone()))
        .batch_size(128)
        .build(Indices(test.len()));

    // The DP part: one owner of sampling, clipping, noise and accounting. Add/remove neighbours:
    // the noisy sum is divided by the public expected batch size, never by the private N.
    let relation = Neighbouring::AddRemove {
        expected_batch_size: expected_batch as f64,
    };
    let config = DpConfig::new(clip, sigma, q, relation).with_delta(delta);
    let dp = DpTraining::new(config, Indices(n), Rows(train), loss)?;
    let optim = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init();
    let learner = Learner::new(dp.model(model), optim, lr);
    // Checkpoints every epoch: the model, the optimizer, and the mechanism's record beside them.
    let training = dp
        .training(&dir, valid)
        .metric_valid_numeric(AccuracyMetric::new())
        .metric_valid_numeric(LossMetric::new())
        .with_default_checkpointers()
        .num_epochs(epochs)
        .summary();
    let training = match resume {
        Some(epoch) => training.checkpoint(epoch),
        None => training,
    };
    let result = training.launch(learner);
    // Leaving the dashboard prints burn-train's summary (ε at the end of every epoch).
    drop(result.renderer);
    if let Some(error) = result.error {
        return Err(format!("training stopped: {error}").into());
    }

    let model = result.model.into_inner();
    let (x, y) = test.all(&device);
    let outcome = Outcome {
        accuracy: model.valid().accuracy(x, y),
        steps: dp.steps(),
        epsilon: dp.epsilon()?,
    };
    println!(
        "\nvalidation accuracy {:.1}% after {} DP steps",
        100.0 * outcome.accuracy,
        outcome.steps
    );
    println!("{}", dp.statement()?);
    Ok(outcome)
}
