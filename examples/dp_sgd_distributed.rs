//! Data-parallel DP-SGD across the processes of an MPI job (`burn_vmap::distributed`): every
//! process holds the same MLP and a shard of the UCI digits; each samples its shard by Poisson
//! sampling at the same `q` (together: Poisson sampling of the whole training set), their
//! clipped gradient sums are summed, the noise is added once to the total (each process draws
//! it for its own slice of the coordinates) and the same update is applied everywhere; the
//! processes' models are compared by fingerprint at every step. Rank 0 prints the test
//! accuracy, ε and the privacy statement.
//!
//! ```text
//! mpirun -np 2 --oversubscribe cargo run --release --features mpi --example dp_sgd_distributed
//! mpirun -np 2 --oversubscribe target/release/examples/dp_sgd_distributed --checkpoint /tmp/ck
//! ```
//!
//! (As root, with `OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`.)
//!
//! Options: `--epochs N`, `--expected-batch B` (q·N over the whole training set), `--lr LR`,
//! `--clip C`, `--sigma S`, `--seed S` (rank 0's: the data split and the initial weights of
//! every rank), `--timeout
//! SECONDS` (of every collective), `--checkpoint DIR` with `--every K`: rank 0 saves the model,
//! the optimizer and the mechanism every K steps, and a run started with the same DIR resumes
//! from the last checkpoint (parameters and ε continue; the noise is fresh). When a process dies
//! `mpirun` stops the job; when one stalls, the others' step times out and they stop it.

#[path = "common/mod.rs"]
pub mod common;

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::data::dataset::DatasetError;
use burn::module::Module;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Tensor};
use burn_vmap::distributed::mpi::Mpi;
use burn_vmap::distributed::{Collective, DistributedDp, load_checkpoint};
use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring};

use common::{Batch, Mlp, Rows, SplitMix64};

/// This rank's shard: the indices of its examples in the training set.
struct Shard(Vec<usize>);

impl burn::data::dataset::Dataset<usize> for Shard {
    fn get(&self, index: usize) -> Result<usize, DatasetError> {
        assert!(
            index < self.0.len(),
            "index {index} out of {}",
            self.0.len()
        );
        Ok(self.0[index])
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The loss of one example, seen as a batch of one.
fn loss(model: &Mlp, (x, y): Batch) -> Tensor<1> {
    model.loss(x, y)
}

fn sgd() -> ModuleOptimizer {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init()
}

fn main() {
    let mpi = match Mpi::init() {
        Ok(mpi) => mpi,
        Err(e) => {
            eprintln!("dp_sgd_distributed: {e}");
            std::process::exit(1);
        }
    };
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = run_with(&mpi, &args) {
        eprintln!("dp_sgd_distributed: rank {}: {e}", mpi.rank());
        // A collective may be in flight (a stalled peer): stop every process of the job.
        mpi.abort(1);
    }
}

/// What a run printed on rank 0 (every rank computes it): the test accuracy, the steps taken and
/// ε.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The trained model's test accuracy, in `[0, 1]`.
    pub accuracy: f64,
    /// The DP steps taken, those before a resumed checkpoint included.
    pub steps: u64,
    /// ε of those steps at the run's δ.
    pub epsilon: f64,
}

/// The example on this process of the job `mpi`, with the command line `args` (the options
/// above).
///
/// # Errors
/// A flag that does not parse, an unreadable checkpoint, a refused setting, a failed or
/// timed-out collective.
pub fn run_with(mpi: &Mpi, args: &[String]) -> Result<Outcome, Box<dyn Error>> {
    let args = args.to_vec();
    let seed: u64 = common::flag(&args, "--seed")?.unwrap_or(7);
    let epochs: usize = common::flag(&args, "--epochs")?.unwrap_or(30);
    let expected_batch: usize = common::flag(&args, "--expected-batch")?.unwrap_or(64);
    let lr: f64 = common::flag(&args, "--lr")?.unwrap_or(0.1);
    let clip: f64 = common::flag(&args, "--clip")?.unwrap_or(1.0);
    let sigma: f64 = common::flag(&args, "--sigma")?.unwrap_or(1.0);
    let timeout = Duration::from_secs(common::flag(&args, "--timeout")?.unwrap_or(60));
    let checkpoint: Option<PathBuf> = common::flag(&args, "--checkpoint")?;
    let every: u64 = common::flag(&args, "--every")?.unwrap_or(50);
    let (rank, size) = (mpi.rank(), mpi.size());
    let lead = rank == 0;

    // The DP settings come from what is published of the data set (its size, the size of the
    // held-out split), never from the private training set itself: under add/remove
    // neighbours its size N is private.
    let q = common::DIGITS.sampling_rate(expected_batch);
    let steps = (epochs as f64 * (1.0 / q).ceil()) as u64;
    let delta = common::DIGITS.default_delta();
    let config = DpConfig::new(
        clip,
        sigma,
        q,
        Neighbouring::AddRemove {
            expected_batch_size: expected_batch as f64,
        },
    )
    .with_delta(delta);

    let device = Device::default();
    device.seed(seed);
    let model = Mlp::new(&[common::DIGITS.dim, 64, 10], &device);
    let (model, mut optimizer, mechanism) = match &checkpoint {
        None => (model, sgd(), DpMechanism::new(config)?),
        Some(dir) => {
            let ck = load_checkpoint(mpi, dir, model, sgd(), timeout)?;
            let mechanism = match ck.record {
                Some(record) => {
                    if lead {
                        println!(
                            "resumed from {} after {} steps",
                            dir.display(),
                            record.steps()
                        );
                    }
                    DpMechanism::from_record(record)?
                }
                None => DpMechanism::new(config)?,
            };
            (ck.model, ck.optimizer, mechanism)
        }
    };
    let mut dp = DistributedDp::new(mechanism, mpi, timeout)?;
    // The same split on every rank, from rank 0's seed (a rank started with another --seed
    // would split otherwise: an example in two shards, test images in training); rank r
    // trains on every size-th training example from r.
    let split_seed = dp.shared_seed(seed)?;
    let digits = common::load_digits()?;
    let (train, test) = digits.split(common::DIGITS_TEST, &mut SplitMix64(split_seed));
    let shard: Vec<usize> = (rank..train.len()).step_by(size).collect();
    if lead {
        println!(
            "UCI digits: {} training images in {size} shards, {} test images; MLP {}-64-10",
            train.len(),
            test.len(),
            train.dim
        );
        println!(
            "{steps} steps of DP-SGD (SGD, momentum 0.9, lr {lr}); Poisson sampling at q = {q:.4} \
             on every shard (expected batch {expected_batch} in all), C = {clip}, σ = {sigma}"
        );
    }
    let mut loader = dp.loader(
        Arc::new(Shard(shard)),
        Arc::new(Rows(Arc::new(train))),
        device.clone(),
    )?;
    // Every rank starts from rank 0's parameters.
    let mut model = dp.sync_module(model)?.train();

    let bar = common::progress(steps as usize, "DP-SGD");
    if !lead {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_position(dp.mechanism().steps());
    let start = Instant::now();
    while dp.mechanism().steps() < steps {
        let batch = loader.next_batch()?; // Poisson on this shard: a random size, maybe empty
        (model, _) = dp.step(&mut optimizer, lr, model, loss, batch)?;
        if let Some(dir) = &checkpoint
            && dp.mechanism().steps() % every == 0
        {
            dp.save_checkpoint(dir, &model, &optimizer)?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(dir) = &checkpoint {
        // The released model is the saved one: a later run resumes from it, ε included.
        dp.save_checkpoint(dir, &model, &optimizer)?;
    }

    let (xt, yt) = test.all(&device);
    let outcome = Outcome {
        accuracy: model.valid().accuracy(xt, yt),
        steps: dp.mechanism().steps(),
        epsilon: dp.epsilon()?,
    };
    if lead {
        println!(
            "\ntest accuracy {:.1}% after {:.1}s on {size} process{}",
            100.0 * outcome.accuracy,
            start.elapsed().as_secs_f64(),
            if size == 1 { "" } else { "es" }
        );
        println!(
            "privacy: ε = {:.3} (PLD) at δ = {delta:.1e}\n",
            outcome.epsilon
        );
        println!("{}", dp.statement()?);
    }
    Ok(outcome)
}
