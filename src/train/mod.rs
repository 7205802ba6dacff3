//! DP-SGD through burn-train's [`Learner`](burn_train::Learner) (cargo feature `train`).
//!
//! ```text
//! dp = DpTraining::new(config, dataset, batcher, loss)   # one owner: a DpMechanism and the loss
//! learner = Learner::new(dp.model(model), optimizer, lr)
//! dp.training(dir, valid_loader)                         # SupervisedTraining, wired for DP
//!     .num_epochs(E)                                     # and any of burn-train's settings
//!     .launch(learner)
//!   every epoch: ⌈1/q⌉ times
//!     batch  = Poisson sample of the dataset (each example joins with probability q)
//!     grads  = (Σ clip_C(∇ loss(model, example)) + N(0, σ²C²)) / B                # accounted
//!              (B: the public expected batch size, or q·N when N is public)
//!     model  = optimizer.step(lr, model, grads)                                # the Learner's
//!     dashboard: ε so far, the clipped fraction, the non-finite examples
//!   then validation with your model's own `InferenceStep` and metrics
//!   with checkpointers: the mechanism's record beside the model's, for resuming
//! ```
//!
//! Your model stays as it is: [`DpTraining::model`] wraps it in a [`DpModel`], the Learner's
//! model, whose `TrainStep` is the DP step of the per-example `loss` you give (written for one
//! example seen as a batch of one, as for [`DpMechanism`](crate::privacy::DpMechanism)) and
//! whose `InferenceStep` is your model's. [`DpTraining::training`] returns burn-train's
//! `SupervisedTraining` with the three things DP needs already set: the training data loader
//! ([`DpLoader`]: the mechanism's Poisson-sampled batches, the only batches the step accepts),
//! the training strategy ([`DpStrategy`]: the loop, which refuses what would break the
//! guarantee and resumes the accountant) and the metrics of the training split
//! ([`EpsilonMetric`], [`ClippedFractionMetric`], [`NonFiniteMetric`]). The optimizer, the
//! learning rate schedule, the renderer, the metrics of the validation split, checkpointing and
//! early stopping are burn-train's, unchanged. The training split shows what the DP step
//! reports ([`DpStepOutput`]), not a loss: the step computes none beyond the per-example
//! gradients.
//!
//! The settings are the mechanism's [`DpConfig`], stated once: `C`, `σ`, `q` and the
//! neighbouring relation ([`Neighbouring`](crate::privacy::Neighbouring)): add or remove one
//! example, `N` private, the noisy sum divided by a public expected batch size you state (what
//! DP-SGD usually means), or replace one example, `N` public (checked against the dataset). Noise is hardened by default
//! ([`NoiseKind`](crate::privacy::NoiseKind)). [`DpTraining::new`] draws its randomness from
//! the operating system; [`DpTraining::seeded`] is reproducible and not private, for tests.
//!
//! **Resuming.** With burn-train's checkpointers (`with_default_checkpointers`), the strategy
//! saves the mechanism's record ([`DpRecord`]: its settings and the steps taken) after every
//! epoch, beside the model's and the optimizer's checkpoint:
//! `<directory>/checkpoint/dp-<epoch>.bpk` ([`record_path`]). `checkpoint(epoch)` on a new
//! [`DpTraining`] of the same settings continues ε from that record, with fresh noise; it is
//! refused ([`DpTrainError::Resume`]) without checkpointers, without a readable record, with
//! other settings, or on a `DpTraining` that has taken steps already. Checkpoints of the first
//! run after the resumed epoch are another release, outside the resumed run's ε: delete them
//! (or add their ε) before publishing.
//!
//! What the strategy refuses, with a [`DpTrainError`] in `LearningResult::error` (found by
//! [`DpTrainError::find`]) and no step taken:
//! - **gradient accumulation** (`grads_accumulation(k)`): it would sum `k` separately noised
//!   and accounted steps into one update, `k` times the noise for the same ε; bound memory with
//!   [`DpConfig::with_microbatch_size`](crate::privacy::DpConfig::with_microbatch_size) instead, which changes nothing in the mechanism;
//! - a resume it cannot account for (above);
//! - a `Learner` whose model another [`DpTraining`] made.
//!
//! Outside [`DpStrategy`] (another training strategy, several devices), the step itself refuses
//! a second step before the first one's gradient is applied (accumulation, or one step per
//! device) and a batch another owner sampled; `TrainStep::step` cannot return an error, so it
//! panics with the [`DpTrainError`]'s message there.
//!
//! The guarantee covers the training dataset given to [`DpTraining::new`] and the parameters
//! trained on it; the validation split, and what is chosen by looking at it, are outside it, and
//! so are the clipped and non-finite counts on the dashboard (and in the logs burn-train writes
//! to the training directory): they are computed from the private batches, for debugging.
//!
//! ```
//! use burn::data::dataloader::{DataLoaderBuilder, batcher::Batcher};
//! use burn::data::dataset::InMemDataset;
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::SgdConfig;
//! use burn::tensor::{Device, Tensor};
//! use burn_train::{InferenceStep, Learner, RegressionOutput, renderer::CliMetricsRenderer};
//! use burn_vmap::privacy::{DpConfig, Neighbouring};
//! use burn_vmap::train::DpTraining;
//!
//! #[derive(Module, Debug)]
//! struct Model { linear: Linear }
//!
//! // Validation is your model's own `InferenceStep`.
//! impl InferenceStep for Model {
//!     type Input = (Tensor<2>, Tensor<2>);
//!     type Output = RegressionOutput;
//!     fn step(&self, (x, y): (Tensor<2>, Tensor<2>)) -> RegressionOutput {
//!         let out = self.linear.forward(x);
//!         RegressionOutput::new((out.clone() - y.clone()).powi_scalar(2).mean(), out, y)
//!     }
//! }
//!
//! #[derive(Clone)]
//! struct Rows;
//! impl Batcher<[f32; 2], (Tensor<2>, Tensor<2>)> for Rows {
//!     fn batch(&self, items: Vec<[f32; 2]>, device: &Device) -> (Tensor<2>, Tensor<2>) {
//!         let col = |j: usize| {
//!             let v: Vec<f32> = items.iter().map(|r| r[j]).collect();
//!             Tensor::<1>::from_floats(v.as_slice(), device).unsqueeze_dim(1)
//!         };
//!         (col(0), col(1))
//!     }
//! }
//!
//! let device = Device::default();
//! let rows = |n: usize| (0..n).map(|i| [i as f32 / n as f32, 2.0 * i as f32 / n as f32]).collect();
//! let model = Model { linear: LinearConfig::new(1, 1).init(&device) };
//! let loss = |m: &Model, (x, y): (Tensor<2>, Tensor<2>)| (m.linear.forward(x) - y).powi_scalar(2).mean();
//!
//! // C = 1, σ = 1, q = 0.1 (10 steps an epoch); add/remove neighbours, the noisy sum divided by
//! // the public expected batch size 10; δ = 1e-5.
//! let relation = Neighbouring::AddRemove { expected_batch_size: 10.0 };
//! let config = DpConfig::new(1.0, 1.0, 0.1, relation);
//! let dp = DpTraining::new(config, InMemDataset::new(rows(100)), Rows, loss)?;
//! let valid = DataLoaderBuilder::new(Rows).batch_size(10).build(InMemDataset::new(rows(20)));
//! let learner = Learner::new(dp.model(model), SgdConfig::new().init(), 0.1);
//! let result = dp
//!     .training(std::env::temp_dir().join("burn-vmap-train-doc"), valid)
//!     .renderer(Box::new(CliMetricsRenderer::new()))
//!     .with_application_logger(None)
//!     .launch(learner);
//! assert!(result.error.is_none());
//! assert_eq!(dp.steps(), 10);
//! println!("{}", dp.statement()?);
//! let model: Model = result.model.into_inner();
//! # Ok::<(), burn_vmap::train::DpTrainError>(())
//! ```

mod mechanism;
mod metric;
mod model;
mod strategy;

pub use metric::{
    ClippedFractionInput, ClippedFractionMetric, DpStepOutput, EpsilonInput, EpsilonMetric,
    NonFiniteInput, NonFiniteMetric,
};
pub use model::{DpBatch, DpLoader, DpModel};
pub use strategy::DpStrategy;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use burn::data::dataloader::DataLoader;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::module::{Module, ModuleDisplay};
use burn::tensor::{Device, Tensor};
use burn_train::{InferenceStep, SupervisedTraining, TrainOutput, TrainingStrategy};

use crate::privacy::{DpConfig, DpRecord, DpStatement, PrivacyError};
use crate::tree::Tree;
use mechanism::{Mechanism, Sample};

/// Where [`DpStrategy`] saves the mechanism's record after `epoch` of a run training in
/// `directory` (the directory given to [`DpTraining::training`]): beside burn-train's default
/// checkpoints (`model-<epoch>.bpk`, `optim-<epoch>.bpk`, ...).
///
/// ```
/// let path = burn_vmap::train::record_path("runs/mnist", 3);
/// assert_eq!(path, std::path::Path::new("runs/mnist/checkpoint/dp-3.bpk"));
/// ```
pub fn record_path(directory: impl AsRef<Path>, epoch: usize) -> PathBuf {
    directory
        .as_ref()
        .join("checkpoint")
        .join(format!("dp-{epoch}.bpk"))
}

/// What DP training through burn-train refuses or fails with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DpTrainError {
    /// `SupervisedTraining::grads_accumulation(k)` was set.
    #[error(
        "dp-train: gradient accumulation ({accumulation} steps) would sum {accumulation} separately noised and accounted DP-SGD steps into one update ({accumulation} times the noise for the same ε); remove `grads_accumulation` and bound memory with `DpConfig::with_microbatch_size`"
    )]
    GradientAccumulation {
        /// The accumulation that was asked for.
        accumulation: usize,
    },
    /// `SupervisedTraining::checkpoint(epoch)` asked to resume, and the mechanism's state at
    /// that epoch cannot be continued.
    #[error(
        "dp-train: resuming from the checkpoint of epoch {epoch} with the mechanism's record {}: {reason}", path.display()
    )]
    Resume {
        /// The epoch to resume from.
        epoch: usize,
        /// Where the record was looked for.
        path: PathBuf,
        /// Why it cannot be continued.
        reason: String,
    },
    /// A step ran while the previous step's gradient was not applied yet.
    #[error(
        "dp-train: a DP step ran before the previous step's gradient was applied (gradient accumulation, or one step per device): each step is noised and accounted on its own; train with `DpTraining::training` on one device"
    )]
    UnappliedStep,
    /// A batch sampled by another [`DpTraining`].
    #[error(
        "dp-train: the batch was sampled by another DpTraining: train with the loader of the DpTraining that made the model (`DpTraining::training` wires both)"
    )]
    ForeignBatch,
    /// The `Learner`'s model was made by another [`DpTraining`] than the strategy's.
    #[error(
        "dp-train: the Learner's model was made by another DpTraining than the training strategy's: make both with one DpTraining (`dp.model(..)`, `dp.training(..)`)"
    )]
    ForeignModel,
    /// The model's parameters were loaded from a record (`Module::load_record`, as burn-train
    /// does when it resumes from a checkpoint) and the mechanism's record was not: its ε would
    /// restart at zero while the model holds the earlier steps.
    #[error(
        "dp-train: the model was loaded from a record (burn-train's checkpoint resume, or Module::load_record) but the mechanism's state was not: its ε would not count the steps the model was trained with. Resume with DpTraining::training (its strategy restores both), or load pre-trained weights into your model before `dp.model(..)`"
    )]
    RestoredWithoutRecord,
    /// The training loader was split across devices.
    #[error(
        "dp-train: the DP loader cannot be split across devices (one Poisson sample per step, noised once); train on one device with `DpTraining::training`"
    )]
    Sliced,
    /// The mechanism refused a setting or failed in a step.
    #[error(transparent)]
    Privacy(#[from] PrivacyError),
}

impl DpTrainError {
    /// The `DpTrainError` behind a burn-train error (the strategy stops a run with one inside a
    /// `TrainingError::Dataset`, burn-train's only variant that carries another error).
    ///
    /// ```
    /// # use burn::data::dataset::DatasetError;
    /// # use burn_train::TrainingError;
    /// # use burn_vmap::train::DpTrainError;
    /// let refusal = DpTrainError::GradientAccumulation { accumulation: 4 };
    /// let error = TrainingError::Dataset(DatasetError::new(refusal));
    /// assert!(matches!(
    ///     DpTrainError::find(&error),
    ///     Some(DpTrainError::GradientAccumulation { accumulation: 4 })
    /// ));
    /// ```
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a DpTrainError> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<DpTrainError>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }

    /// As burn-train's error, for `Interrupter::fail` and a data loader's items.
    fn into_dataset_error(self) -> burn::data::dataset::DatasetError {
        burn::data::dataset::DatasetError::new(self)
    }
}

/// Owners made so far: a batch carries its owner's number.
static OWNERS: AtomicU64 = AtomicU64::new(0);

struct Shared<M, O> {
    id: u64,
    state: Mutex<State<M, O>>,
}

struct State<M, O> {
    mechanism: Mechanism<M, O>,
    /// A step's gradient was returned and not applied yet.
    unapplied: bool,
    /// The model was loaded from a record and the mechanism was not resumed since.
    restored: bool,
}

/// The one owner of a DP training run's mechanism (a
/// [`DpMechanism`](crate::privacy::DpMechanism): Poisson sampling, clipping, noise, accountant)
/// and of its per-example loss, shared by the pieces it makes: the [`DpModel`] the `Learner`
/// trains, the [`DpLoader`] that samples its batches and the [`DpStrategy`] that runs the loop.
/// A clone is another handle on the same owner.
///
/// See the [module](self) for a training run.
pub struct DpTraining<M, O> {
    shared: Arc<Shared<M, O>>,
}

impl<M, O> Clone for DpTraining<M, O> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<M, O> std::fmt::Debug for DpTraining<M, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpTraining")
            .field("id", &self.shared.id)
            .finish_non_exhaustive()
    }
}

impl<M, O> DpTraining<M, O> {
    fn lock(&self) -> MutexGuard<'_, State<M, O>> {
        self.shared
            .state
            .lock()
            .expect("dp-train: the mechanism's lock was poisoned by a panic in an earlier step; start a new DpTraining")
    }

    /// The model's parameters were loaded from a record: no step runs until the mechanism is
    /// resumed from its own ([`resume`](Self::resume)).
    fn restored(&self) {
        self.lock().restored = true;
    }
}

impl<M, O> DpTraining<M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    /// The mechanism of `config` over the training `dataset`, batched by your `batcher`, for
    /// the per-example `loss`: `loss(model, example)` with the example a batch of one (every
    /// leaf keeps a leading dim of 1, so a batched forward pass works unchanged), as for
    /// [`DpMechanism::noisy_gradient`](crate::privacy::DpMechanism::noisy_gradient). The batch
    /// type `O` is any [`Tree`] (a tensor, a tuple, a `#[derive(Tree)]` struct). Sampling and
    /// noise draw from the operating system's randomness
    /// ([`DpMechanism::new`](crate::privacy::DpMechanism::new)).
    ///
    /// # Errors
    /// [`DpTrainError::Privacy`] naming a setting outside its domain, or a dataset whose length
    /// is not the `N` a replace-one relation states.
    pub fn new<I, D, B, F>(
        config: DpConfig,
        dataset: D,
        batcher: B,
        loss: F,
    ) -> Result<Self, DpTrainError>
    where
        I: 'static,
        D: Dataset<I> + 'static,
        B: Batcher<I, O> + 'static,
        F: Fn(&M, O) -> Tensor<1> + Send + Sync + 'static,
    {
        Self::build(config, None, dataset, batcher, loss)
    }

    /// As [`new`](Self::new), with sampling and noise from `seed`: reproducible, and the
    /// guarantee does **not** hold (anyone with the seed regenerates the noise); the statement
    /// says "NOT PRIVATE", and so does every run resumed from this one's records
    /// ([`DpMechanism::seeded`](crate::privacy::DpMechanism::seeded)). For tests.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn seeded<I, D, B, F>(
        config: DpConfig,
        seed: u64,
        dataset: D,
        batcher: B,
        loss: F,
    ) -> Result<Self, DpTrainError>
    where
        I: 'static,
        D: Dataset<I> + 'static,
        B: Batcher<I, O> + 'static,
        F: Fn(&M, O) -> Tensor<1> + Send + Sync + 'static,
    {
        Self::build(config, Some(seed), dataset, batcher, loss)
    }

    fn build<I, D, B, F>(
        config: DpConfig,
        seed: Option<u64>,
        dataset: D,
        batcher: B,
        loss: F,
    ) -> Result<Self, DpTrainError>
    where
        I: 'static,
        D: Dataset<I> + 'static,
        B: Batcher<I, O> + 'static,
        F: Fn(&M, O) -> Tensor<1> + Send + Sync + 'static,
    {
        let mechanism = Mechanism::new(
            config,
            seed,
            Arc::new(dataset),
            Arc::new(batcher),
            Arc::new(loss),
        )?;
        Ok(Self {
            shared: Arc::new(Shared {
                id: OWNERS.fetch_add(1, Ordering::Relaxed),
                state: Mutex::new(State {
                    mechanism,
                    unapplied: false,
                    restored: false,
                }),
            }),
        })
    }

    /// `model` as the `Learner`'s model: its parameters, its record and its `InferenceStep`,
    /// with this owner's DP step as its `TrainStep`.
    pub fn model(&self, model: M) -> DpModel<M, O> {
        DpModel::new(model, self.clone())
    }

    /// The training data loader: `⌈1/q⌉` of the mechanism's Poisson-sampled batches an epoch,
    /// on the default device until burn-train moves it (`DataLoader::to_device`).
    pub fn loader(&self) -> DpLoader<M, O> {
        DpLoader::new(self.clone(), Device::default())
    }

    /// The training strategy: the DP loop on the model's device, keeping the mechanism's
    /// records in `directory` (the run's directory: see [`record_path`]).
    pub fn strategy(&self, directory: impl AsRef<Path>) -> DpStrategy<M, O> {
        DpStrategy::new(self.clone(), directory.as_ref().to_path_buf())
    }

    /// burn-train's `SupervisedTraining` writing to `directory`, validating on `valid` with your
    /// model's `InferenceStep`, with this owner's [`loader`](Self::loader) for training, its
    /// [`strategy`](Self::strategy), and the [`EpsilonMetric`], [`ClippedFractionMetric`] and
    /// [`NonFiniteMetric`] on the training split. Set anything else burn-train offers on it
    /// (epochs, renderer, validation metrics with `metric_valid_numeric`, checkpointers, early
    /// stopping, `checkpoint(epoch)` to resume), then `launch` a `Learner` of
    /// [`model`](Self::model).
    pub fn training(
        &self,
        directory: impl AsRef<Path>,
        valid: Arc<dyn DataLoader<M::Input>>,
    ) -> SupervisedTraining<DpModel<M, O>>
    where
        M: InferenceStep + std::fmt::Display,
    {
        let strategy = Arc::new(self.strategy(directory.as_ref()));
        SupervisedTraining::new(directory, Arc::new(self.loader()), valid)
            .with_training_strategy(TrainingStrategy::Custom(strategy))
            .metric_train_numeric(EpsilonMetric::new())
            .metric_train_numeric(ClippedFractionMetric::new())
            .metric_train_numeric(NonFiniteMetric::new())
    }

    /// ε so far at the configured δ, by the tightest accountant that holds for the noise
    /// ([`DpMechanism::epsilon`](crate::privacy::DpMechanism::epsilon)): the
    /// [`statement`](Self::statement)'s.
    ///
    /// # Errors
    /// [`DpTrainError::Privacy`] from the accountant.
    pub fn epsilon(&self) -> Result<f64, DpTrainError> {
        Ok(self.lock().mechanism.epsilon()?)
    }

    /// ε so far at the configured δ, by Rényi DP (for plain noise looser than
    /// [`epsilon`](Self::epsilon); the same for hardened noise; quick): the [`EpsilonMetric`]'s
    /// value.
    ///
    /// # Errors
    /// [`DpTrainError::Privacy`] from the accountant.
    pub fn epsilon_rdp(&self) -> Result<f64, DpTrainError> {
        Ok(self.lock().mechanism.epsilon_rdp()?)
    }

    /// What the run guarantees so far and everything it assumes, for people: the mechanism, the
    /// neighbouring relation, the accountant (PLD) and (ε, δ); "NOT PRIVATE" for a seeded run.
    ///
    /// # Errors
    /// [`DpTrainError::Privacy`] from the accountant.
    pub fn statement(&self) -> Result<DpStatement, DpTrainError> {
        Ok(self.lock().mechanism.statement()?)
    }

    /// The mechanism's state (its settings and the steps taken), as [`DpStrategy`] saves it
    /// beside burn-train's checkpoints.
    pub fn record(&self) -> DpRecord {
        self.lock().mechanism.record()
    }

    /// Steps taken (each one accounted, those of a resumed run included).
    pub fn steps(&self) -> u64 {
        self.lock().mechanism.steps()
    }

    /// Steps of one epoch, `⌈1/q⌉`.
    pub fn steps_per_epoch(&self) -> usize {
        self.lock().mechanism.steps_per_epoch()
    }

    /// One step's batch, sampled by this owner on `device`.
    fn sample(&self, device: &Device) -> Result<DpBatch<O>, burn::data::dataset::DatasetError> {
        let sample = self
            .lock()
            .mechanism
            .sample(device)
            .map_err(|e| DpTrainError::Privacy(e).into_dataset_error())?;
        Ok(DpBatch::new(self.shared.id, sample))
    }

    /// The DP step of `model` on `batch`: the privatized gradient and what the step did.
    fn step(
        &self,
        model: &M,
        batch: DpBatch<O>,
    ) -> Result<TrainOutput<DpStepOutput>, DpTrainError> {
        let (owner, sample): (u64, Sample<O>) = batch.into_parts();
        if owner != self.shared.id {
            return Err(DpTrainError::ForeignBatch);
        }
        let mut state = self.lock();
        if state.restored {
            return Err(DpTrainError::RestoredWithoutRecord);
        }
        if state.unapplied {
            return Err(DpTrainError::UnappliedStep);
        }
        let (grads, report) = state.mechanism.step(model, sample)?;
        state.unapplied = true;
        let delta = state.mechanism.delta();
        Ok(TrainOutput {
            grads,
            item: DpStepOutput::new(report, delta),
        })
    }

    /// The last step's gradient was applied (or dropped): the next step may run.
    fn applied(&self) {
        self.lock().unapplied = false;
    }

    /// Continues the run saved at `epoch` in `directory` (see [`Mechanism::resume`]).
    fn resume(&self, directory: &Path, epoch: usize) -> Result<(), DpTrainError> {
        let path = record_path(directory, epoch);
        let mut state = self.lock();
        state
            .mechanism
            .resume(&path)
            .map_err(|reason| DpTrainError::Resume {
                epoch,
                path,
                reason,
            })?;
        state.restored = false;
        Ok(())
    }

    /// Saves the mechanism's record after `epoch` of a run in `directory`.
    fn save(&self, directory: &Path, epoch: usize) -> Result<(), DpTrainError> {
        Ok(self.lock().mechanism.save(&record_path(directory, epoch))?)
    }

    /// Whether `other` is a handle on this owner.
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}
