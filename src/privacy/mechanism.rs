//! [`DpMechanism`]: the one owner of DP-SGD's sampling, clipping, noise and accounting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::module::{Module, ModuleDisplay, ParamId};
use burn::tensor::{Device, Tensor, TensorData};
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::Dispatch;

use super::accountant::Accountant;
use super::clipped::{ClippedSums, Clipping};
use super::config::{DpConfig, check};
use super::noise::PendingNoise;
use super::record::DpRecord;
use super::sampling::{DpLoader, Issuer, Sampled};
use super::{DpStatement, Neighbouring, NoiseKind, PrivacyError, PrivacyRng};
use crate::transform::grad::ParamGrads;
use crate::tree::{Leaf, Tree};

/// The identity of the next mechanism made in this process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The name errors of a step carry.
const NAME: &str = "DpMechanism::step";

/// What one step did, for metrics. These counts are computed from the private batch and are
/// **not** covered by the guarantee (the statement says so): log them for debugging, do not
/// publish them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepReport {
    /// The step's number (1 for the first step of a run, continuing after a resume).
    pub step: u64,
    /// Examples in the batch.
    pub sampled: usize,
    /// Examples whose gradient was not finite (NaN or infinite): they contributed zero and
    /// still counted as sampled.
    pub non_finite: usize,
    /// Finite examples whose gradient norm exceeded `C` (scaled down to `C`).
    pub clipped: usize,
}

impl StepReport {
    /// The fraction of the batch's examples that were clipped (0 for an empty batch).
    pub fn clipped_fraction(&self) -> f64 {
        if self.sampled == 0 {
            0.0
        } else {
            self.clipped as f64 / self.sampled as f64
        }
    }
}

/// A step that failed after its batch was admitted, and whether it had read the batch then (a
/// failure that has read it depends on the data, and is accounted).
#[derive(Debug)]
pub(crate) struct Failure {
    /// Boxed: a failed step is rare, and a successful one returns through the same `Result`.
    pub(crate) error: Box<PrivacyError>,
    pub(crate) read: bool,
}

/// `batch` when every leaf holds one row per sampled example (leading dimension `size`): the
/// accountant counts one clipped contribution per example, and a batcher that emits several
/// rows per example (augmentations, crops, packed sequences) would have each clipped on its own,
/// the sensitivity `k·C` instead of `C`.
///
/// # Errors
/// [`PrivacyError::Batch`] naming the first leaf whose leading dimension is not `size`.
fn one_row_per_example<A: Tree>(batch: A, size: usize) -> Result<A, PrivacyError> {
    let (leaves, def) = batch.flatten();
    let rows = |leaf: &Leaf| leaf.shape().as_slice().first().copied();
    if let Some(i) = leaves.iter().position(|l| rows(l) != Some(size)) {
        let got = match rows(&leaves[i]) {
            Some(r) => format!("{r} rows"),
            None => "a rank-0 tensor".into(),
        };
        return Err(PrivacyError::Batch {
            expected: format!(
                "one row per sampled example in every leaf ({size} examples were sampled; \
                 for several rows per example, stack them on a second axis: [{size}, k, ..])"
            ),
            got: format!("{got} in `{}`", def.leaf_path("batch", i)),
        });
    }
    Ok(A::unflatten(&def, leaves)?)
}

/// A privacy budget: the steps it allows, computed once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Budget {
    pub(super) epsilon: f64,
    pub(super) delta: f64,
    pub(super) max_steps: u64,
}

/// DP-SGD's mechanism, owned in one place: Poisson sampling at rate `q`, clipping of every
/// example's gradient to `C` (an example whose gradient is not finite contributes zero),
/// Gaussian noise `N(0, (σC)²)` from a generator seeded by the operating system added once to
/// the sum, the division by a public constant ([`Neighbouring`]), and the accountant. Every
/// setting exists once ([`DpConfig`]); the loader it makes ([`loader`](Self::loader)) samples
/// at its rate, and its step accepts only the [`Sampled`] batches that loader drew, each once,
/// in order. Its state saves as a Burn record ([`record`](Self::record), [`DpRecord`]): a
/// resumed run continues ε where it stopped, with fresh noise. An optional budget
/// ([`with_budget`](Self::with_budget)) refuses the step that would exceed it.
///
/// [`DpSgd`](super::DpSgd) puts it in front of a Burn optimizer; use the mechanism directly
/// for a custom loop ([`noisy_gradient`](Self::noisy_gradient)).
///
/// ```
/// use std::sync::Arc;
/// use burn::data::dataloader::batcher::Batcher;
/// use burn::data::dataset::InMemDataset;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring};
///
/// #[derive(Clone)]
/// struct Rows;
/// impl Batcher<[f32; 2], Tensor<2>> for Rows {
///     fn batch(&self, items: Vec<[f32; 2]>, device: &Device) -> Tensor<2> {
///         let rows = items.iter().map(|r| Tensor::<1>::from_floats(*r, device).unsqueeze()).collect();
///         Tensor::cat(rows, 0)
///     }
/// }
///
/// let device = Device::default();
/// let data: Vec<[f32; 2]> = (0..100).map(|i| [i as f32 / 100.0, 1.0]).collect();
/// let config = DpConfig::new(1.0, 1.0, 0.1, Neighbouring::AddRemove { expected_batch_size: 10.0 });
/// let mut dp = DpMechanism::new(config)?.with_budget(3.0, 1e-5)?;
/// let mut loader = dp.loader(Arc::new(InMemDataset::new(data)), Arc::new(Rows), device.clone())?;
/// let model: Linear = LinearConfig::new(2, 1).init(&device);
/// let loss = |m: &Linear, x: Tensor<2>| m.forward(x).sum();
/// let batch = loader.next_batch()?;
/// let (gradient, report) = dp.noisy_gradient(&model, loss, batch)?;
/// assert_eq!(report.step, 1);
/// assert!(gradient.get::<2>("weight").is_some());
/// assert!(dp.epsilon()? > 0.0);
/// println!("{}", dp.statement()?);
/// # Ok::<(), burn_vmap::privacy::PrivacyError>(())
/// ```
pub struct DpMechanism {
    config: DpConfig,
    issuer: Arc<Issuer>,
    noise: PrivacyRng,
    /// Steps released so far (the next batch released must carry this number).
    accountant: Accountant,
    /// The number of the next batch the step takes (a failed step consumes its batch without
    /// releasing it).
    expected: u64,
    budget: Option<Budget>,
    /// A seeded generator was used at some point of the run (kept across resumes).
    seeded: bool,
    sums: ClippedSums,
}

impl std::fmt::Debug for DpMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpMechanism")
            .field("config", &self.config)
            .field("steps", &self.accountant.steps())
            .field("budget", &self.budget)
            .field("seeded", &self.seeded)
            .finish_non_exhaustive()
    }
}

impl DpMechanism {
    /// The mechanism of `config`, with its generator seeded from the operating system.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] naming a setting outside its domain.
    pub fn new(config: DpConfig) -> Result<Self, PrivacyError> {
        Self::build(config, PrivacyRng::from_entropy(), 0, false)
    }

    /// As [`new`](Self::new) with a fixed seed: reproducible, for tests and experiments, and
    /// **not private** (its statement says so, and so does every run resumed from its record).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn seeded(config: DpConfig, seed: u64) -> Result<Self, PrivacyError> {
        Self::build(config, PrivacyRng::seeded(seed), 0, true)
    }

    fn build(
        config: DpConfig,
        mut rng: PrivacyRng,
        steps: u64,
        seeded: bool,
    ) -> Result<Self, PrivacyError> {
        config.validate()?;
        let mut accountant = Accountant::new(&config)?;
        accountant.compose(steps)?;
        let seeded = seeded || rng.is_seeded();
        let issuer = Arc::new(Issuer {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            sampling_rate: config.sampling_rate,
            next: AtomicU64::new(steps),
            rng: Mutex::new(rng.derive()),
        });
        Ok(Self {
            config,
            issuer,
            noise: rng,
            accountant,
            expected: steps,
            budget: None,
            seeded,
            sums: ClippedSums::default(),
        })
    }

    /// With a privacy budget: the step that would take ε at `delta` above `epsilon` fails with
    /// [`PrivacyError::Budget`] before it runs (nothing is released or accounted). The number
    /// of steps the budget allows is computed here, once, by the accountant of
    /// [`epsilon`](Self::epsilon).
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] for `epsilon` not finite and positive or `delta` outside
    /// `(0, 1)`; [`PrivacyError::Budget`] when the steps already taken exceed it.
    pub fn with_budget(mut self, epsilon: f64, delta: f64) -> Result<Self, PrivacyError> {
        check(
            epsilon.is_finite() && epsilon > 0.0,
            "epsilon",
            "a finite budget ε > 0",
            epsilon,
        )?;
        check(delta > 0.0 && delta < 1.0, "delta", "a δ in (0, 1)", delta)?;
        let max_steps = self.accountant.max_steps(epsilon, delta)?;
        let budget = Budget {
            epsilon,
            delta,
            max_steps,
        };
        if self.accountant.steps() > max_steps {
            return Err(self.exhausted(budget));
        }
        self.budget = Some(budget);
        Ok(self)
    }

    fn exhausted(&self, budget: Budget) -> PrivacyError {
        PrivacyError::Budget {
            epsilon: budget.epsilon,
            delta: budget.delta,
            steps: self.accountant.steps(),
            max_steps: budget.max_steps,
        }
    }

    /// Keep the recordings of any loss type (see [`noisy_gradient`](Self::noisy_gradient)): for
    /// a caller that passes one loss at every step (the burn-train adapter).
    pub(crate) fn with_one_loss(mut self) -> Self {
        self.sums.one_loss();
        self
    }

    /// The settings.
    pub fn config(&self) -> &DpConfig {
        &self.config
    }

    /// Steps released (each one accounted).
    pub fn steps(&self) -> u64 {
        self.accountant.steps()
    }

    /// Steps the budget still allows (`None` without a budget).
    pub fn remaining_steps(&self) -> Option<u64> {
        self.budget
            .map(|b| b.max_steps.saturating_sub(self.accountant.steps()))
    }

    /// Whether a seeded generator was used at some point of the run (then it is not private).
    pub fn is_seeded(&self) -> bool {
        self.seeded
    }

    /// The loader of this mechanism's batches over `dataset`, batched by `batcher` onto
    /// `device`: Poisson sampling at the mechanism's rate, from a generator derived from the
    /// mechanism's.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] when the relation is replace-one and the dataset's size is
    /// not the public `N` the configuration states.
    pub fn loader<I, O>(
        &self,
        dataset: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        device: Device,
    ) -> Result<DpLoader<I, O>, PrivacyError> {
        let len = dataset.len();
        self.shard_loader(dataset, batcher, device, len)
    }

    /// As [`loader`](Self::loader) over one shard of a dataset of `total` examples (the union of
    /// the shards of a data-parallel job): the replace-one relation's public size is checked
    /// against `total`.
    ///
    /// # Errors
    /// As [`loader`](Self::loader).
    pub(crate) fn shard_loader<I, O>(
        &self,
        shard: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        device: Device,
        total: usize,
    ) -> Result<DpLoader<I, O>, PrivacyError> {
        if let Neighbouring::ReplaceOne { dataset_size } = self.config.neighbouring
            && total != dataset_size
        {
            return Err(PrivacyError::Argument {
                argument: "dataset",
                expected: "the public dataset_size of the replace-one relation",
                got: format!("{total} examples (stated: {dataset_size})"),
            });
        }
        DpLoader::new(shard, batcher, device, self.issuer.clone())
    }

    /// The privatized gradient of one step of `model` on a `batch` this mechanism's loader
    /// sampled: every example's gradient of `loss_fn(model, example)` (the example seen as a
    /// batch of one: every leaf keeps a leading dim of 1) clipped to `C`, summed, the noise
    /// added, divided by the configuration's normaliser; the step accounted. Every trainable
    /// parameter of `model` gets a gradient, on an empty batch too (noise alone).
    ///
    /// A loss that holds nothing (a `fn` item, a closure that captures nothing) is recorded
    /// once per module and batch signature (not the batch size) and kept across steps. One that
    /// captures values (`move |m, x| loss(m, x, t)`), or a function pointer, is **recorded at
    /// every step**: its type does not say what it holds. To keep its recording, pass what
    /// changes through the model (a field: its change records again) or the batch.
    ///
    /// # Errors
    /// - [`PrivacyError::Batch`]: the batch was sampled by another mechanism, or out of order
    ///   (a batch skipped or stepped twice), or it does not hold one row per sampled example
    ///   (a batcher that emits several rows per example: stack an example's rows on a second
    ///   axis instead, `[B, k, ..]`, so that the loss sees `[1, k, ..]`);
    /// - [`PrivacyError::Budget`]: the step would exceed the budget;
    /// - [`PrivacyError::Vmap`]: the per-example gradients failed (a module with BatchNorm in
    ///   training mode, inputs that do not fit the model);
    /// - [`PrivacyError::Argument`]: the noise cannot be drawn for this model (a grid too
    ///   coarse or too fine), or a value of the clipped sum cannot be rounded to the grid.
    ///
    /// A failed step releases nothing; its batch is consumed. It is **accounted** when it
    /// failed after reading the batch (the error depends on the data, and the caller sees it):
    /// every failure but a refused ticket or budget and a refusal of the model itself (BatchNorm
    /// in training mode, a noise grid that does not fit its size).
    pub fn noisy_gradient<M, A, F>(
        &mut self,
        model: &M,
        loss_fn: F,
        batch: Sampled<A>,
    ) -> Result<(ParamGrads, StepReport), PrivacyError>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let (batch, size) = self.admit(batch)?;
        // Checks of the model alone (public): a refusal here has not read the batch. The
        // noise's random part does not depend on the gradient: it is drawn (hardened noise, on
        // a thread of its own) while the clipped sum is computed.
        let dims = ParamGrads::trainable_dims(NAME, model)?;
        let device = model.devices().into_iter().next().unwrap_or_default();
        let noise = self.start_noise(dims, dims, true, &device)?;
        let released = self
            .sum(model, loss_fn, batch, size)
            .and_then(|(sum, report)| Ok((noise.add(sum, &mut self.noise)?, report)));
        // From the batch on, what the step returns depends on the data, an error too.
        self.account_released()?;
        let (noisy, report) = released?;
        // In the parameters' dtype for the optimizer (the sum was taken wider): post-processing.
        Ok((self.normalised(noisy).cast_like(NAME, model)?, report))
    }

    /// The first half of a step: the batch's ticket and the budget checked, the batch consumed,
    /// and the clipped sum of its examples' gradients, without noise (zeros over every trainable
    /// parameter for an empty batch); the report numbers the step that
    /// [`account_released`](Self::account_released) will account. A data-parallel step sums
    /// these over the processes, then each process noises its slice of the total
    /// ([`noise_part`](Self::noise_part)).
    ///
    /// # Errors
    /// As [`noisy_gradient`](Self::noisy_gradient), with whether the step read the batch before
    /// it failed ([`Failure::read`]); nothing is accounted.
    pub(crate) fn clipped_sum<M, A, F>(
        &mut self,
        model: &M,
        loss_fn: F,
        batch: Sampled<A>,
    ) -> Result<(ParamGrads, StepReport), Failure>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let unread = |error: PrivacyError| Failure {
            error: Box::new(error),
            read: false,
        };
        let (batch, size) = self.admit(batch).map_err(unread)?;
        ParamGrads::trainable_dims(NAME, model).map_err(|e| unread(e.into()))?;
        self.sum(model, loss_fn, batch, size)
            .map_err(|error| Failure {
                error: Box::new(error),
                read: true,
            })
    }

    /// A step's admission of `batch`: its ticket checked and consumed, the budget checked; the
    /// batch (`None` when empty) and its size.
    ///
    /// # Errors
    /// [`PrivacyError::Batch`], [`PrivacyError::Budget`] as in
    /// [`noisy_gradient`](Self::noisy_gradient).
    fn admit<A>(&mut self, batch: Sampled<A>) -> Result<(Option<A>, usize), PrivacyError> {
        let (batch, size, ticket) = batch.into_batch();
        if ticket.mechanism != self.issuer.id {
            return Err(PrivacyError::Batch {
                expected: "a batch sampled by this mechanism's loader".into(),
                got: "a batch of another mechanism".into(),
            });
        }
        if ticket.seq != self.expected {
            return Err(PrivacyError::Batch {
                expected: format!(
                    "batch {} (batches are stepped in sampling order)",
                    self.expected
                ),
                got: format!("batch {}", ticket.seq),
            });
        }
        self.expected += 1;
        if let Some(budget) = self.budget
            && self.accountant.steps() >= budget.max_steps
        {
            return Err(self.exhausted(budget));
        }
        Ok((batch, size))
    }

    /// The clipped sum of an admitted batch of `size` examples (zeros over every trainable
    /// parameter when `None`), and the step's report.
    ///
    /// # Errors
    /// [`PrivacyError::Vmap`] as in [`noisy_gradient`](Self::noisy_gradient).
    fn sum<M, A, F>(
        &mut self,
        model: &M,
        loss_fn: F,
        batch: Option<A>,
        size: usize,
    ) -> Result<(ParamGrads, StepReport), PrivacyError>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let clipping = Clipping {
            norm: self.config.clip_norm,
            per_layer: self.config.per_layer,
            microbatch_size: self.config.microbatch_size,
        };
        let (sum, non_finite, clipped) = match batch {
            None => (self.zeros(model)?, 0, 0),
            Some(batch) => {
                let batch = one_row_per_example(batch, size)?;
                let s = self.sums.sum(clipping, model, loss_fn, batch)?;
                (s.sum, s.non_finite, s.clipped)
            }
        };
        let report = StepReport {
            step: self.accountant.steps() + 1,
            sampled: size,
            non_finite,
            clipped,
        };
        Ok((sum, report))
    }

    /// The clipped sum of no example: zeros over every trainable parameter of `model`.
    ///
    /// # Errors
    /// [`PrivacyError::Vmap`] for a module that mixes examples (BatchNorm in training mode).
    pub(crate) fn zeros<M: Module>(&self, model: &M) -> Result<ParamGrads, PrivacyError> {
        Ok(ParamGrads::zeros(NAME, model)?)
    }

    /// The noise of a clipped sum of `dims` coordinates in all, for `count` of them (a process
    /// of a data-parallel step noises its part), started from the mechanism's generator: with
    /// `background`, hardened noise is drawn on a thread of its own from now on.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] when the noise cannot be drawn (a grid too coarse or too fine
    /// for the standard deviation).
    fn start_noise(
        &mut self,
        count: usize,
        dims: usize,
        background: bool,
        device: &Device,
    ) -> Result<PendingNoise, PrivacyError> {
        let kind = self.config.noise;
        let std = kind.calibrated_std(self.config.noise_multiplier, self.config.clip_norm, dims)?;
        PendingNoise::start(count, std, kind, &mut self.noise, background, device)
    }

    /// A noisy sum divided by the configuration's normaliser.
    fn normalised(&self, noisy: ParamGrads) -> ParamGrads {
        let normaliser = self.config.normaliser();
        noisy.map(|_, g| {
            Leaf(Dispatch::float_div_scalar(
                g.into_dispatch(),
                normaliser.into(),
            ))
        })
    }

    /// The noise of this process's part of a data-parallel step, `count` of the `dims`
    /// coordinates of the clipped sum of every process, started now (hardened noise is drawn on
    /// a thread of its own while the step computes its clipped sum and exchanges it), for
    /// [`noise_part`](Self::noise_part).
    ///
    /// # Errors
    /// As [`noisy_gradient`](Self::noisy_gradient)'s noise.
    pub(crate) fn start_part_noise(
        &mut self,
        count: usize,
        dims: usize,
        device: &Device,
    ) -> Result<PendingNoise, PrivacyError> {
        self.start_noise(count, dims, true, device)
    }

    /// A data-parallel step's release of this process's `part` of the clipped sum of every
    /// process, with its `noise` ([`start_part_noise`](Self::start_part_noise)): each process
    /// noises its own coordinates with its own generator, so every coordinate is noised exactly
    /// once, as [`noisy_gradient`](Self::noisy_gradient) would noise it, and the work is split
    /// across the processes. The values come back noised and divided by the normaliser; nothing
    /// is accounted (every process accounts the step once the parts are assembled:
    /// [`account_released`](Self::account_released)).
    ///
    /// # Errors
    /// As [`noisy_gradient`](Self::noisy_gradient)'s noise.
    pub(crate) fn noise_part(
        &mut self,
        noise: PendingNoise,
        part: &[f32],
        device: &Device,
    ) -> Result<Vec<f32>, PrivacyError> {
        if part.is_empty() {
            return Ok(Vec::new());
        }
        let values_len = part.len();
        let values = TensorData::new(part.to_vec(), [values_len]);
        let leaf = Leaf::new(Tensor::<1>::from_data(values, device));
        let part = ParamGrads::new(vec![("part".into(), ParamId::new(), leaf)]);
        let noisy = noise.add(part, &mut self.noise)?;
        let noised = self.normalised(noisy);
        let (_, _, leaf) = noised.iter().next().expect("one part");
        Ok(leaf
            .to_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32 values after convert"))
    }

    /// Accounts one step whose parts every process of a data-parallel job noised
    /// ([`noise_part`](Self::noise_part)): every process's accountant stays the one-process
    /// accountant's.
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub(crate) fn account_released(&mut self) -> Result<(), PrivacyError> {
        self.accountant.compose(1)?;
        Ok(())
    }

    /// Moves the noise generator and the loaders' generator to rank `rank`'s stream
    /// ([`PrivacyRng::use_stream`]): the ranks of a data-parallel job seeded alike still draw
    /// independent noise for their slices and independent Poisson samples for their shards.
    /// Loaders made before keep their generators.
    pub(crate) fn separate_rank(&mut self, rank: u64) {
        self.noise.use_stream(rank);
        self.issuer
            .rng
            .lock()
            .expect("the issuer's generator")
            .use_stream(rank);
    }

    /// Marks the run as seeded (a peer of a data-parallel job used a seeded generator).
    pub(crate) fn mark_seeded(&mut self) {
        self.seeded = true;
    }

    /// ε so far at the configured δ, by the tightest accountant that holds for the noise the
    /// run draws: for hardened noise (the default) the Rényi DP of the Poisson-subsampled
    /// discrete Gaussian (Canonne, Kamath & Steinke 2020 for one step, Zhu & Wang 2019's general
    /// bound for the sampling); for plain noise the continuous Gaussian's privacy loss
    /// distributions (the first query after new steps runs the FFT composition).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn epsilon(&self) -> Result<f64, PrivacyError> {
        self.accountant.epsilon(self.config.delta)
    }

    /// ε so far at the configured δ, by Rényi DP (the improved conversion): for plain noise the
    /// continuous Gaussian's exact RDP, looser than [`epsilon`](Self::epsilon); for hardened
    /// noise the same as [`epsilon`](Self::epsilon).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn epsilon_rdp(&self) -> Result<f64, PrivacyError> {
        self.accountant.epsilon_rdp(self.config.delta)
    }

    /// What the run guarantees so far and what it assumes ([`DpStatement`]), by the accountant
    /// of [`epsilon`](Self::epsilon).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn statement(&self) -> Result<DpStatement, PrivacyError> {
        self.statement_of(self.accountant.statement(self.config.delta)?)
    }

    /// As [`statement`](Self::statement), by RDP.
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn statement_rdp(&self) -> Result<DpStatement, PrivacyError> {
        self.statement_of(self.accountant.statement_rdp(self.config.delta)?)
    }

    fn statement_of(
        &self,
        accounted: super::accounting::PrivacyStatement,
    ) -> Result<DpStatement, PrivacyError> {
        Ok(DpStatement {
            accounted: accounted.with_clipping_norm(self.config.clip_norm),
            config: self.config.clone(),
            seeded: self.seeded,
            noise: match self.config.noise {
                NoiseKind::Hardened { granularity } => format!(
                    "hardened (the exact discrete Gaussian of Canonne, Kamath & Steinke on the \
                     grid {granularity:e}, calibrated to C plus the grid's rounding, γ·√d; \
                     accounted by the Rényi DP of the Poisson-subsampled discrete Gaussian)"
                ),
                NoiseKind::Plain => {
                    "plain f32 Gaussian (open to floating-point attacks, Mironov 2012)".into()
                }
            },
            processes: None,
            scattered: false,
        })
    }

    /// The mechanism's state as a Burn record (its settings, steps, budget, and whether it was
    /// ever seeded; never its generators): [`DpRecord::save`] writes it next to a model's and
    /// an optimizer's, [`from_record`](Self::from_record) resumes.
    pub fn record(&self) -> DpRecord {
        DpRecord {
            config: self.config.clone(),
            steps: self.accountant.steps(),
            budget: self.budget.map(|b| (b.epsilon, b.delta)),
            seeded: self.seeded,
        }
    }

    /// Resumes a run from its record, with a fresh generator from the operating system (the
    /// noise never replays the saved run's): ε continues from the saved steps, the budget
    /// holds, and the loaders of the saved run are not accepted (make new ones).
    ///
    /// # Errors
    /// As [`new`](Self::new) and [`with_budget`](Self::with_budget), for a record whose
    /// settings are out of their domain.
    pub fn from_record(record: DpRecord) -> Result<Self, PrivacyError> {
        Self::resume(record, PrivacyRng::from_entropy())
    }

    /// As [`from_record`](Self::from_record) with a fixed seed (tests): not private.
    ///
    /// # Errors
    /// As [`from_record`](Self::from_record).
    pub fn from_record_seeded(record: DpRecord, seed: u64) -> Result<Self, PrivacyError> {
        Self::resume(record, PrivacyRng::seeded(seed))
    }

    fn resume(record: DpRecord, rng: PrivacyRng) -> Result<Self, PrivacyError> {
        let mechanism = Self::build(record.config, rng, record.steps, record.seeded)?;
        match record.budget {
            Some((epsilon, delta)) => mechanism.with_budget(epsilon, delta),
            None => Ok(mechanism),
        }
    }
}
