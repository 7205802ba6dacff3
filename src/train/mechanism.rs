//! The adapter between burn-train and the DP mechanism: the only file of [`train`](super) that
//! names the mechanism's types (today [`DpSgd`] and [`PoissonSampler`]).
//!
//! Everything else in `train` sees [`Mechanism`]: it is built from a [`DpTrainingConfig`], a
//! dataset, a batcher and the per-example loss; it samples a [`Sample`] (Poisson sampling over
//! the dataset, batched on a device) and turns a sample into the privatized [`GradientsParams`]
//! of one step and a [`StepReport`]; it answers ε and the privacy statement. Switching to
//! another mechanism type (one owner of sampler, clipping, noise and accountant whose batch type
//! only its own loader makes, and whose step reports what it clipped) replaces the bodies of
//! these functions, [`Sample`]'s fields and [`REPORTS_CLIPPING`]; nothing outside this file.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, DatasetError};
use burn::module::Module;
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, Tensor};

use super::DpTrainingConfig;
use crate::privacy::accounting::{PoissonGaussian, PrivacyStatement, RdpAccountant};
use crate::privacy::{DpSgd, DpSgdConfig, PoissonSampler, PrivacyError, PrivacyRng};
use crate::tree::Tree;

/// Whether [`StepReport::clipped`] is measured. [`DpSgd`] clips inside its vectorized pass and
/// does not say how many examples it clipped; measuring it here would take a second per-example
/// pass (about the cost of the step again). A mechanism whose step reports it sets this to
/// `true`, and [`DpTraining::training`](super::DpTraining::training) then puts the clipped
/// fraction on the dashboard.
pub(super) const REPORTS_CLIPPING: bool = false;

/// The per-example loss: `loss(model, example)`, the example a batch of one.
pub(super) type Loss<M, O> = Arc<dyn Fn(&M, O) -> Tensor<1> + Send + Sync>;

/// One step's Poisson sample, batched: what the mechanism's step accepts.
pub(super) struct Sample<O> {
    /// The batched examples, `None` when no example joined (the step is then noise only).
    pub(super) batch: Option<O>,
    /// How many examples joined.
    pub(super) size: usize,
}

/// What one step did, for the metrics.
#[derive(Debug, Clone)]
pub(super) struct StepReport {
    /// Examples in the sample.
    pub(super) sampled: usize,
    /// Examples whose gradient norm exceeded `C`, when the mechanism measures it.
    pub(super) clipped: Option<usize>,
    /// Examples whose gradient was not finite, when the mechanism measures it.
    pub(super) nonfinite: Option<usize>,
    /// ε after this step, at the run's δ.
    pub(super) epsilon: StepEpsilon,
}

/// ε after a step: known, or computed later (burn-train syncs a step's output on its metrics
/// thread, so an accountant's evaluation there does not hold up the next training step).
#[derive(Clone)]
pub(super) enum StepEpsilon {
    /// Computed by the mechanism's step.
    Known(f64),
    /// ε after `steps` steps, computed when asked.
    After {
        /// Steps accounted, this one included.
        steps: u64,
        /// ε after a number of steps, at the run's δ.
        accountant: Arc<dyn Fn(u64) -> Result<f64, PrivacyError> + Send + Sync>,
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

/// A dataset and a batcher, the dataset's item type erased.
trait Examples<O>: Send {
    /// The examples `indices`, batched on `device` (`None` for no index).
    fn batch(&self, indices: Vec<usize>, device: &Device) -> Result<Option<O>, DatasetError>;
}

struct DatasetBatcher<I, O> {
    dataset: Arc<dyn Dataset<I>>,
    batcher: Arc<dyn Batcher<I, O>>,
}

impl<I, O> Examples<O> for DatasetBatcher<I, O> {
    fn batch(&self, indices: Vec<usize>, device: &Device) -> Result<Option<O>, DatasetError> {
        if indices.is_empty() {
            return Ok(None);
        }
        // A failed read stops the run: dropping the example silently would hide it.
        let items = indices
            .into_iter()
            .map(|i| self.dataset.get(i))
            .collect::<Result<Vec<I>, _>>()?;
        Ok(Some(self.batcher.batch(items, device)))
    }
}

/// The DP mechanism behind a [`DpTraining`](super::DpTraining): sampler, clipping, noise,
/// accountant, and the per-example loss.
pub(super) struct Mechanism<M, O> {
    /// Clipping, noise and the accountants. Its own optimizer is never stepped: burn-train's
    /// `Learner` owns the optimizer and steps it with the gradient [`Mechanism::step`] returns.
    dp: DpSgd,
    sampler: PoissonSampler,
    examples: Box<dyn Examples<O>>,
    loss: Loss<M, O>,
    delta: f64,
    /// ε after a number of steps by RDP, as [`DpSgd::epsilon`] computes it.
    rdp: Arc<dyn Fn(u64) -> Result<f64, PrivacyError> + Send + Sync>,
}

impl<M, O> Mechanism<M, O>
where
    M: Module + 'static,
    O: Tree + Send + 'static,
{
    /// The mechanism of `config` over `dataset` (its length is `N`), batching with `batcher`.
    /// The sampling rate is read once, from `config`, for the sampler and the accountant alike.
    pub(super) fn new<I: 'static>(
        config: &DpTrainingConfig,
        dataset: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        loss: Loss<M, O>,
    ) -> Result<Self, PrivacyError> {
        let n = dataset.len();
        let dp_config = DpSgdConfig::new(
            config.clip_norm,
            config.noise_multiplier,
            config.sampling_rate,
            n,
        )
        .with_delta(config.delta)
        .with_microbatch_size(config.microbatch_size)
        .with_per_layer_clipping(config.per_layer);
        let (sampling_rng, noise_rng) = match config.seed {
            // Two streams from one seed; reproducible and not private.
            Some(seed) => (
                PrivacyRng::seeded(seed),
                PrivacyRng::seeded(seed ^ 0x9E37_79B9_7F4A_7C15),
            ),
            None => (PrivacyRng::from_entropy(), PrivacyRng::from_entropy()),
        };
        let dp = DpSgd::with_rng(SgdConfig::new().init(), dp_config, noise_rng)?;
        let sampler = PoissonSampler::with_rng(n, config.sampling_rate, sampling_rng)?;
        let (q, sigma, delta) = (config.sampling_rate, config.noise_multiplier, config.delta);
        let rdp = Arc::new(move |steps: u64| -> Result<f64, PrivacyError> {
            let mut rdp = RdpAccountant::new();
            if steps > 0 {
                rdp.compose(PoissonGaussian::new(q, sigma)?, steps)?;
            }
            Ok(rdp.epsilon(delta)?)
        });
        Ok(Self {
            dp,
            sampler,
            examples: Box::new(DatasetBatcher { dataset, batcher }),
            loss,
            delta,
            rdp,
        })
    }

    /// One step's Poisson sample, batched on `device`.
    ///
    /// # Errors
    /// The dataset's, when an example cannot be read.
    pub(super) fn sample(&mut self, device: &Device) -> Result<Sample<O>, DatasetError> {
        let indices = self.sampler.sample();
        let size = indices.len();
        let batch = self.examples.batch(indices, device)?;
        Ok(Sample { batch, size })
    }

    /// The privatized gradient of `model` on `sample` (every example's gradient clipped, the
    /// sum noised, divided by the expected batch size), the step accounted.
    ///
    /// # Errors
    /// The mechanism's (a module it refuses, inputs that do not fit, the accountant).
    pub(super) fn step(
        &mut self,
        model: &M,
        sample: Sample<O>,
    ) -> Result<(GradientsParams, StepReport), PrivacyError> {
        let loss = self.loss.clone();
        let grads = self
            .dp
            .noisy_gradient(model, move |m: &M, a: O| loss(m, a), sample.batch)?;
        let report = StepReport {
            sampled: sample.size,
            clipped: None,
            nonfinite: None,
            // By RDP, about a millisecond an evaluation, on the metrics thread; PLD (the
            // statement's) takes tens of milliseconds after hundreds of steps.
            epsilon: StepEpsilon::After {
                steps: self.dp.steps(),
                accountant: self.rdp.clone(),
            },
        };
        Ok((grads.into_gradients_params(), report))
    }

    /// ε so far at [`delta`](Self::delta) by RDP: what the steps report.
    pub(super) fn epsilon(&self) -> Result<f64, PrivacyError> {
        self.dp.epsilon()
    }

    /// ε so far at [`delta`](Self::delta) by PLD (tighter): what the statement says.
    pub(super) fn epsilon_pld(&self) -> Result<f64, PrivacyError> {
        self.dp.epsilon_pld()
    }

    /// The δ of the reported ε.
    pub(super) fn delta(&self) -> f64 {
        self.delta
    }

    /// What the run guarantees so far, for people.
    pub(super) fn statement(&self) -> Result<PrivacyStatement, PrivacyError> {
        self.dp.statement()
    }

    /// Steps accounted.
    pub(super) fn steps(&self) -> u64 {
        self.dp.steps()
    }

    /// Steps of one epoch, `⌈1 / q⌉`: each example joins once per epoch on average.
    pub(super) fn steps_per_epoch(&self) -> usize {
        self.sampler.steps_per_epoch()
    }
}
