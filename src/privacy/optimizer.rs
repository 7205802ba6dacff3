//! [`DpSgd`]: DP-SGD around any Burn optimizer.

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::tensor::Tensor;
use burn_backend::TensorMetadata;
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::Dispatch;

use super::accounting::{PldAccountant, PoissonGaussian, PrivacyStatement, RdpAccountant};
use super::clipped::{self, ClippedSums, Clipping};
use super::{PrivacyError, PrivacyRng, add_gaussian_noise};
use crate::transform::grad::ParamGrads;
use crate::tree::{Leaf, Tree};

/// The name errors of a step carry.
const NAME: &str = "DpSgd::step";

/// The settings of a [`DpSgd`] run.
#[derive(Debug, Clone, PartialEq)]
pub struct DpSgdConfig {
    /// `C`: every example's gradient is clipped to this L2 norm.
    pub clip_norm: f64,
    /// `σ`: the noise on the sum has standard deviation `σ · C`.
    pub noise_multiplier: f64,
    /// `q`: the Poisson sampling rate of the batches fed to [`DpSgd::step`].
    pub sampling_rate: f64,
    /// `N`: the number of training examples.
    pub dataset_size: usize,
    /// `δ` of the reported (ε, δ) (default `1e-5`; pick it below `1 / N`).
    pub delta: f64,
    /// Examples per vectorized backward pass (default: the whole batch at once). Bounds peak
    /// memory; any batch size works, the last microbatch may be smaller.
    pub microbatch_size: Option<usize>,
    /// Clip every parameter tensor to `C / √P` (`P` tensors) instead of the whole gradient to
    /// `C`: the same sensitivity, per-layer scaling (default `false`).
    pub per_layer: bool,
}

impl DpSgdConfig {
    /// `C`, `σ`, `q` and `N`; `δ = 1e-5`, no microbatching, global clipping.
    pub fn new(
        clip_norm: f64,
        noise_multiplier: f64,
        sampling_rate: f64,
        dataset_size: usize,
    ) -> Self {
        Self {
            clip_norm,
            noise_multiplier,
            sampling_rate,
            dataset_size,
            delta: 1e-5,
            microbatch_size: None,
            per_layer: false,
        }
    }

    /// With `δ`.
    pub fn with_delta(mut self, delta: f64) -> Self {
        self.delta = delta;
        self
    }

    /// With a microbatch size.
    pub fn with_microbatch_size(mut self, size: impl Into<Option<usize>>) -> Self {
        self.microbatch_size = size.into();
        self
    }

    /// With per-layer clipping.
    pub fn with_per_layer_clipping(mut self, per_layer: bool) -> Self {
        self.per_layer = per_layer;
        self
    }

    /// `q · N`, the batch size DP-SGD divides by.
    pub fn expected_batch_size(&self) -> f64 {
        self.sampling_rate * self.dataset_size as f64
    }

    fn validate(&self) -> Result<(), PrivacyError> {
        let check = |ok: bool, argument, expected, got: f64| {
            if ok {
                Ok(())
            } else {
                Err(PrivacyError::Argument {
                    argument,
                    expected,
                    got: got.to_string(),
                })
            }
        };
        let c = self.clip_norm;
        check(
            c.is_finite() && c > 0.0,
            "clip_norm",
            "a finite norm > 0",
            c,
        )?;
        let s = self.noise_multiplier;
        check(
            s.is_finite() && s >= 0.0,
            "noise_multiplier",
            "a finite σ >= 0",
            s,
        )?;
        let q = self.sampling_rate;
        check(
            (0.0..=1.0).contains(&q) && q > 0.0,
            "sampling_rate",
            "a rate in (0, 1]",
            q,
        )?;
        let n = self.dataset_size as f64;
        check(n > 0.0, "dataset_size", "at least one example", n)?;
        let d = self.delta;
        check((0.0..1.0).contains(&d), "delta", "a δ in [0, 1)", d)?;
        if let Some(m) = self.microbatch_size {
            check(m > 0, "microbatch_size", "at least 1", m as f64)?;
        }
        Ok(())
    }
}

/// DP-SGD around any Burn optimizer (a [`ModuleOptimizer`]: what `SgdConfig::init`,
/// `AdamConfig::init`, ... return, or any per-parameter `burn::optim::Optimizer` through
/// `into()`). Each [`step`](Self::step) clips every example's gradient to `C` (through
/// [`micro_grad_module`](crate::micro_grad_module) with the clipping recorded as its
/// `transform_fn`: one vectorized backward pass per microbatch, a dense layer's or a
/// convolution's per-example weight gradient clipped and summed in factored form), sums, adds
/// Gaussian noise `N(0, (σC)²)` once to the sum from a CSPRNG, divides by the expected batch size
/// `q·N`, steps the inner optimizer, and advances its accountants (RDP and PLD, for Poisson
/// sampling at rate `q` and add/remove-one neighbours). Feed it Poisson-sampled batches
/// ([`PoissonLoader`](super::PoissonLoader)); an empty batch (`None`) takes a noise-only step
/// (every trainable parameter moves by noise alone). See the [module](super) for a training
/// loop.
///
/// The loss function is recorded once per module and batch signature (the batch size is not
/// part of it) and the recording is kept across steps: `DpSgd` keeps the first loss function of
/// each type it is given, so pass the same function every step (a function of another type is
/// recorded anew).
///
/// It refuses a module with a layer that mixes the examples of a batch (BatchNorm in training
/// mode) before the first step, naming its path and the fix (GroupNorm / LayerNorm).
pub struct DpSgd {
    inner: ModuleOptimizer,
    config: DpSgdConfig,
    rng: PrivacyRng,
    /// Steps taken: every step is the same mechanism, so the RDP accountant is built from this
    /// count when queried (one exact RDP evaluation, not one per step).
    steps: u64,
    pld: PldAccountant,
    /// The `micro_grad_module` builders (and their recordings), kept across steps.
    sums: ClippedSums,
}

impl std::fmt::Debug for DpSgd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpSgd")
            .field("config", &self.config)
            .field("seeded", &self.rng.is_seeded())
            .field("steps", &self.steps)
            .field("sums", &self.sums)
            .finish_non_exhaustive()
    }
}

impl DpSgd {
    /// DP-SGD around `inner`, with noise from a generator seeded by the operating system.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] naming a setting outside its domain.
    pub fn new(
        inner: impl Into<ModuleOptimizer>,
        config: DpSgdConfig,
    ) -> Result<Self, PrivacyError> {
        Self::with_rng(inner, config, PrivacyRng::from_entropy())
    }

    /// As [`new`](Self::new) with a given generator ([`PrivacyRng::seeded`]: reproducible, and
    /// the guarantee does not hold).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_rng(
        inner: impl Into<ModuleOptimizer>,
        config: DpSgdConfig,
        rng: PrivacyRng,
    ) -> Result<Self, PrivacyError> {
        config.validate()?;
        Ok(Self {
            inner: inner.into(),
            config,
            rng,
            steps: 0,
            pld: PldAccountant::new(),
            sums: ClippedSums::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &DpSgdConfig {
        &self.config
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &ModuleOptimizer {
        &self.inner
    }

    /// Steps taken (each one accounted).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// One DP-SGD step of `model` with learning rate `lr` on a Poisson-sampled `batch` (`None`
    /// when no example joined), `loss_fn(model, example)` being the loss of one example, seen
    /// as a batch of one (every leaf of `batch` keeps a leading dim of 1: an existing batched
    /// forward pass works unchanged). `batch` is any [`Tree`] whose leaves have the batch as
    /// their leading axis (a tensor, a tuple `(x, y)`, a struct). Returns the updated model, as
    /// Burn's optimizers do, in training mode (`Module::train` is applied to a model whose
    /// parameters are not autodiff tensors yet, as Burn's optimizer step needs; evaluate with
    /// `model.valid()`).
    ///
    /// # Errors
    /// [`PrivacyError::Vmap`] when the per-example gradients fail (a module with BatchNorm,
    /// inputs that do not fit), [`PrivacyError::Accounting`]. A failed step is not accounted.
    pub fn step<M, A, F>(
        &mut self,
        lr: impl Into<ModuleLearningRate>,
        model: M,
        loss_fn: F,
        batch: Option<A>,
    ) -> Result<M, PrivacyError>
    where
        M: Module + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let grads = self.noisy_gradient(&model, loss_fn, batch)?;
        // Burn's optimizers step a model in training mode (autodiff parameters).
        let model = if clipped::is_autodiff(&model) {
            model
        } else {
            model.train()
        };
        Ok(self.inner.step(lr, model, grads.into_gradients_params()))
    }

    /// The privatized gradient of one step, without stepping the optimizer: the clipped sum
    /// plus noise, divided by `q·N`. The step is accounted. For custom training loops.
    ///
    /// # Errors
    /// As [`step`](Self::step).
    pub fn noisy_gradient<M, A, F>(
        &mut self,
        model: &M,
        loss_fn: F,
        batch: Option<A>,
    ) -> Result<ParamGrads, PrivacyError>
    where
        M: Module + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let sum = match batch {
            None => ParamGrads::zeros(NAME, model)?,
            Some(batch) => self.sums.sum(self.clipping(), model, loss_fn, batch)?,
        };
        self.privatize(sum)
    }

    /// How every example's gradient is clipped.
    fn clipping(&self) -> Clipping {
        Clipping {
            norm: self.config.clip_norm,
            per_layer: self.config.per_layer,
            microbatch_size: self.config.microbatch_size,
        }
    }

    /// Noise on the clipped sum, the step accounted, the division by `q·N`.
    fn privatize(&mut self, sum: ParamGrads) -> Result<ParamGrads, PrivacyError> {
        let std = self.config.noise_multiplier * self.config.clip_norm;
        let noisy = add_gaussian_noise(sum, std, &mut self.rng)?;
        self.account()?;
        let expected = self.config.expected_batch_size();
        Ok(noisy.map(|_, g| {
            Leaf(Dispatch::float_div_scalar(
                g.into_dispatch(),
                expected.into(),
            ))
        }))
    }

    /// Records one step of the mechanism in both accountants.
    fn account(&mut self) -> Result<(), PrivacyError> {
        let event = PoissonGaussian::new(self.config.sampling_rate, self.config.noise_multiplier)?;
        self.pld.compose(event, 1)?;
        self.steps += 1;
        Ok(())
    }

    /// The RDP accountant of the steps so far.
    fn rdp(&self) -> Result<RdpAccountant, PrivacyError> {
        let mut rdp = RdpAccountant::new();
        if self.steps > 0 {
            let event =
                PoissonGaussian::new(self.config.sampling_rate, self.config.noise_multiplier)?;
            rdp.compose(event, self.steps)?;
        }
        Ok(rdp)
    }

    /// ε so far at the configured δ, by RDP (exact orders, the improved conversion).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn epsilon(&self) -> Result<f64, PrivacyError> {
        Ok(self.rdp()?.epsilon(self.config.delta)?)
    }

    /// ε so far at the configured δ, by privacy loss distributions (tighter than RDP; the
    /// first call after new steps runs the FFT composition).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn epsilon_pld(&self) -> Result<f64, PrivacyError> {
        Ok(self.pld.epsilon(self.config.delta)?)
    }

    /// What the run guarantees so far, for people: the mechanism (Poisson sampling, noise,
    /// clipping norm), the neighbouring relation, the accountant (PLD) and (ε, δ).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn statement(&self) -> Result<PrivacyStatement, PrivacyError> {
        Ok(self
            .pld
            .statement(self.config.delta)?
            .with_clipping_norm(self.config.clip_norm))
    }

    /// As [`statement`](Self::statement), by RDP.
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn statement_rdp(&self) -> Result<PrivacyStatement, PrivacyError> {
        Ok(self
            .rdp()?
            .statement(self.config.delta)?
            .with_clipping_norm(self.config.clip_norm))
    }
}

/// Per-layer clipping: every float leaf of one example's gradient tree (every parameter tensor
/// of a [`ParamGrads`]) scaled to L2 norm at most `max_norm / √P` (`P` float leaves), so the
/// whole gradient's norm is at most `max_norm`, the sensitivity DP-SGD's noise is calibrated
/// to. Written for one example, as [`clip_by_global_norm`](crate::clip_by_global_norm); in a
/// `transform_fn` it clips every example independently (a factored weight gradient's norm is
/// taken from its factors and the scaling multiplies one factor).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::privacy::clip_per_layer;
/// use burn_vmap::{global_norm, micro_grad_module};
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let x = Tensor::<2>::ones([4, 3], &device) * 100.0;
/// let (g, _) = micro_grad_module(|m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum())
///     .transform_fn(|g| clip_per_layer(g, 1.0))
///     .call(&model, (x,))
///     .unwrap();
/// // Four examples, each clipped to norm 1: the sum's norm is at most 4.
/// assert!(global_norm(&g).into_scalar::<f32>() <= 4.0 + 1e-4);
/// let bias: Tensor<1> = g.get("bias").unwrap(); // each example's bias gradient: 1/√2 at most
/// assert!(bias.powi_scalar(2).sum().sqrt().into_scalar::<f32>() <= 4.0 / 2f32.sqrt() + 1e-4);
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn clip_per_layer<T: Tree>(grads: T, max_norm: f64) -> T {
    let (leaves, def) = grads.flatten();
    let count = leaves.iter().filter(|l| l.kind_name() == "float").count();
    assert!(count > 0, "clip_per_layer: the tree has no float leaf");
    let per_tensor = max_norm / (count as f64).sqrt();
    let leaves = leaves
        .into_iter()
        .map(|leaf| {
            if leaf.kind_name() != "float" {
                return leaf;
            }
            let t = leaf.into_dispatch();
            let rank = t.shape().num_dims();
            let sq = Dispatch::float_sum(Dispatch::float_mul(t.clone(), t.clone()));
            let norm = Tensor::<1>::from_dispatch(Dispatch::float_reshape(sq, [1].into())).sqrt();
            let factor = norm.clamp_min(per_tensor).recip() * per_tensor;
            let factor = Dispatch::float_reshape(factor.into_dispatch(), vec![1; rank].into());
            Leaf(Dispatch::float_mul(t, factor))
        })
        .collect();
    T::unflatten(&def, leaves).expect("the same tree rebuilds")
}
