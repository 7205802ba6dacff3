//! The adapter between burn-train and the DP mechanism: the only file of [`train`](super) that
//! names the mechanism and its parts ([`DpMechanism`], its loader
//! ([`DpLoader`](privacy::DpLoader)), its [`Sampled`] batches and its
//! [`StepReport`](privacy::StepReport)).
//!
//! Everything else in `train` sees [`Mechanism`]: it is built from a [`DpConfig`], a seed or
//! none, a dataset, a batcher and the per-example loss; it samples a [`Sample`] on a device
//! (from the mechanism's loader for that device); it turns a sample into the privatized
//! [`GradientsParams`] of one step and a [`StepReport`]; it answers ε and the statement, and it
//! saves and resumes from the mechanism's record. What users state and read back (the
//! neighbouring relation, the noise, the statement, the record) are the privacy module's public
//! types.

use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::module::{Module, ModuleDisplay};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};

use crate::privacy::{self, DpConfig, DpMechanism, DpRecord, DpStatement, PrivacyError, Sampled};
use crate::tree::Tree;

/// The per-example loss: `loss(model, example)`, the example a batch of one.
pub(super) type Loss<M, O> = Arc<dyn Fn(&M, O) -> Tensor<1> + Send + Sync>;

/// ε after a number of steps, at the run's δ.
type Accountant = Arc<dyn Fn(u64) -> Result<f64, PrivacyError> + Send + Sync>;

/// One step's Poisson sample, batched: the mechanism's [`Sampled`] batch, which its step takes
/// once, in sampling order.
pub(super) struct Sample<O>(Sampled<O>);

impl<O> Sample<O> {
    /// How many examples joined.
    pub(super) fn size(&self) -> usize {
        self.0.size()
    }

    /// The batched examples, `None` when no example joined (the step is then noise only).
    pub(super) fn batch(&self) -> Option<&O> {
        self.0.batch()
    }
}

/// What one step did, for the metrics. The counts are computed from the private batch and are
/// not covered by the guarantee.
#[derive(Debug, Clone)]
pub(super) struct StepReport {
    /// The step's number in the run (continuing after a resume).
    pub(super) step: u64,
    /// Examples in the sample.
    pub(super) sampled: usize,
    /// Finite examples whose gradient norm exceeded `C`.
    pub(super) clipped: usize,
    /// Examples whose gradient was not finite (they contributed zero).
    pub(super) non_finite: usize,
    /// ε after this step, at the run's δ.
    pub(super) epsilon: StepEpsilon,
}

/// ε after a step: known, or computed later (burn-train syncs a step's output on its metrics
/// thread, so an accountant's evaluation there does not hold up the next training step).
#[derive(Clone)]
pub(super) enum StepEpsilon {
    /// Computed already.
    Known(f64),
    /// ε after `steps` steps, computed when asked.
    After {
        /// Steps accounted, this one included.
        steps: u64,
        /// ε after a number of steps, at the run's δ.
        accountant: Accountant,
    },
}

impl StepEpsilon {
    /// The value, computing it if it is not known yet.
    pub(super) fn value(&self) -> Result<f64, PrivacyError> {
        match self {
            Self::Known(epsilon) => Ok(*epsilon),
            Self::After { steps, accountant } => accountant(*steps),
        }
    }
}

impl std::fmt::Debug for StepEpsilon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Known(epsilon) => write!(f, "{epsilon}"),
            Self::After { steps, .. } => write!(f, "ε after {steps} steps"),
        }
    }
}

/// A loader of the mechanism's batches, its dataset's item type erased.
trait Source<O>: Send {
    fn next_batch(&mut self) -> Result<Sampled<O>, PrivacyError>;
}

impl<I, O> Source<O> for privacy::DpLoader<I, O> {
    fn next_batch(&mut self) -> Result<Sampled<O>, PrivacyError> {
        privacy::DpLoader::next_batch(self)
    }
}

/// A dataset and a batcher, the dataset's item type erased: they make a mechanism's loaders.
trait Examples<O>: Send {
    /// A loader of `dp`'s batches on `device`.
    fn loader(&self, dp: &DpMechanism, device: &Device)
    -> Result<Box<dyn Source<O>>, PrivacyError>;
}

struct DatasetBatcher<I, O> {
    dataset: Arc<dyn Dataset<I>>,
    batcher: Arc<dyn Batcher<I, O>>,
}

impl<I: 'static, O: 'static> Examples<O> for DatasetBatcher<I, O> {
    fn loader(
        &self,
        dp: &DpMechanism,
        device: &Device,
    ) -> Result<Box<dyn Source<O>>, PrivacyError> {
        let loader = dp.loader(self.dataset.clone(), self.batcher.clone(), device.clone())?;
        Ok(Box::new(loader))
    }
}

/// ε by RDP after any number of steps of the mechanism of `config` (its neighbouring relation
/// included), for burn-train's metrics thread, without the training's lock.
fn rdp_accountant(config: DpConfig) -> Accountant {
    Arc::new(move |steps: u64| privacy::epsilon_rdp_after(&config, steps))
}

/// The DP mechanism behind a [`DpTraining`](super::DpTraining): one [`DpMechanism`] (sampling,
/// clipping, noise, accountant), its loaders, and the per-example loss.
pub(super) struct Mechanism<M, O> {
    /// Its step gives the privatized gradient; burn-train's `Learner` owns the optimizer and
    /// steps it with that gradient.
    dp: DpMechanism,
    /// The seed of a seeded run (not private; a resumed run is seeded too).
    seed: Option<u64>,
    examples: Box<dyn Examples<O>>,
    /// The mechanism's loaders, one for each device a batch was asked on (burn-train moves the
    /// training loader to the model's device). All of them draw the mechanism's batches, in
    /// one numbering.
    loaders: Vec<(Device, Box<dyn Source<O>>)>,
    loss: Loss<M, O>,
    /// ε by RDP after a number of steps: what the steps report.
    rdp: Accountant,
}

impl<M, O> Mechanism<M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    /// The mechanism of `config` over `dataset`, batching with `batcher`. A replace-one
    /// relation's stated `N` is checked against the dataset here.
    pub(super) fn new<I: 'static>(
        config: DpConfig,
        seed: Option<u64>,
        dataset: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        loss: Loss<M, O>,
    ) -> Result<Self, PrivacyError> {
        let dp = match seed {
            Some(seed) => DpMechanism::seeded(config, seed)?,
            None => DpMechanism::new(config)?,
        }
        .with_one_loss();
        let examples: Box<dyn Examples<O>> = Box::new(DatasetBatcher { dataset, batcher });
        let device = Device::default();
        let loader = examples.loader(&dp, &device)?;
        Ok(Self {
            rdp: rdp_accountant(dp.config().clone()),
            dp,
            seed,
            examples,
            loaders: vec![(device, loader)],
            loss,
        })
    }

    /// One step's Poisson sample, batched on `device` by the mechanism's loader for it.
    ///
    /// # Errors
    /// [`PrivacyError::Dataset`] when an example cannot be read.
    pub(super) fn sample(&mut self, device: &Device) -> Result<Sample<O>, PrivacyError> {
        let index = match self.loaders.iter().position(|(d, _)| d == device) {
            Some(index) => index,
            None => {
                let loader = self.examples.loader(&self.dp, device)?;
                self.loaders.push((device.clone(), loader));
                self.loaders.len() - 1
            }
        };
        Ok(Sample(self.loaders[index].1.next_batch()?))
    }

    /// The privatized gradient of `model` on `sample` (every example's gradient clipped, the
    /// sum noised, divided by the relation's public normaliser), the step accounted.
    ///
    /// # Errors
    /// The mechanism's: a batch out of order, a module it refuses, inputs that do not fit.
    pub(super) fn step(
        &mut self,
        model: &M,
        sample: Sample<O>,
    ) -> Result<(GradientsParams, StepReport), PrivacyError> {
        let loss = self.loss.clone();
        let (grads, report) =
            self.dp
                .noisy_gradient(model, move |m: &M, a: O| loss(m, a), sample.0)?;
        let report = StepReport {
            step: report.step,
            sampled: report.sampled,
            clipped: report.clipped,
            non_finite: report.non_finite,
            // By RDP, about a millisecond an evaluation, on the metrics thread; PLD (the
            // statement's) composes again from the start at every new step count, tens of
            // milliseconds after hundreds of steps.
            epsilon: StepEpsilon::After {
                steps: report.step,
                accountant: self.rdp.clone(),
            },
        };
        Ok((grads.into_gradients_params(), report))
    }

    /// ε so far at the configured δ by PLD: the statement's.
    pub(super) fn epsilon(&self) -> Result<f64, PrivacyError> {
        self.dp.epsilon()
    }

    /// ε so far at the configured δ by RDP (looser): what the steps report.
    pub(super) fn epsilon_rdp(&self) -> Result<f64, PrivacyError> {
        self.dp.epsilon_rdp()
    }

    /// The δ of the reported ε.
    pub(super) fn delta(&self) -> f64 {
        self.dp.config().delta
    }

    /// What the run guarantees so far and what it assumes.
    pub(super) fn statement(&self) -> Result<DpStatement, PrivacyError> {
        self.dp.statement()
    }

    /// The mechanism's state (settings, steps, whether it was ever seeded).
    pub(super) fn record(&self) -> DpRecord {
        self.dp.record()
    }

    /// Writes the mechanism's record to `path` (burnpack), creating its directory.
    ///
    /// # Errors
    /// [`PrivacyError::Record`] when it cannot be written.
    pub(super) fn save(&self, path: &Path) -> Result<(), PrivacyError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| PrivacyError::Record {
                message: format!("creating {}: {e}", parent.display()),
            })?;
        }
        self.dp.record().save(path)
    }

    /// Continues the run saved in the record at `path`: ε from its steps on, with fresh noise
    /// (from the operating system; from the seed mixed with the step count in a seeded run) and
    /// new loaders. Refused, with the reason, when the record cannot be read, when its settings
    /// differ from this mechanism's (the microbatch size aside: it changes no released value),
    /// or when this mechanism has taken steps of its own (they would drop out of ε).
    pub(super) fn resume(&mut self, path: &Path) -> Result<(), String> {
        if self.dp.steps() > 0 {
            return Err(format!(
                "this DpTraining has taken {} steps of its own, which resuming would drop from ε; resume with a new DpTraining",
                self.dp.steps()
            ));
        }
        let ours = self.dp.config();
        let record = DpRecord::load(path)
            .and_then(|r| r.with_microbatch_size(ours.microbatch_size))
            .map_err(|e| e.to_string())?;
        if record.config() != ours {
            return Err(format!(
                "its settings differ from this DpTraining's (saved {:?}, now {ours:?}): every step of a run is accounted with one setting; resume with the saved one",
                record.config()
            ));
        }
        let steps = record.steps();
        self.dp = match self.seed {
            // Not the first run's noise again: the seed moves on with the steps.
            Some(seed) => DpMechanism::from_record_seeded(
                record,
                seed ^ steps.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            None => DpMechanism::from_record(record),
        }
        .map_err(|e| e.to_string())?
        .with_one_loss();
        // The first run's loaders drew batches of the first mechanism, which this one refuses.
        self.loaders.clear();
        Ok(())
    }

    /// Steps accounted.
    pub(super) fn steps(&self) -> u64 {
        self.dp.steps()
    }

    /// Steps of one epoch, `⌈1 / q⌉`: each example joins once per epoch on average.
    pub(super) fn steps_per_epoch(&self) -> usize {
        (1.0 / self.dp.config().sampling_rate).ceil() as usize
    }
}
