//! [`DpSgd`]: DP-SGD around any Burn optimizer.

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::TensorMetadata;

use super::accounting::{PldAccountant, PoissonGaussian, PrivacyStatement, RdpAccountant};
use super::{PrivacyError, PrivacyRng, add_gaussian_noise};
use crate::transform::grad::{ParamGrads, prepare_module};
use crate::tree::Tree;
use crate::{BatchOps, clip_by_global_norm, micro_grad_module};

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

/// DP-SGD around any Burn [`Optimizer`]: each [`step`](Self::step) clips every example's
/// gradient to `C` (through [`micro_grad_module`]: one vectorized backward pass per
/// microbatch), sums, adds Gaussian noise `N(0, (σC)²)` once to the sum from a CSPRNG, divides
/// by the expected batch size `q·N`, steps the inner optimizer, and advances its accountants
/// (RDP and PLD, for Poisson sampling at rate `q` and add/remove-one neighbours). Feed it
/// Poisson-sampled batches ([`PoissonLoader`](super::PoissonLoader)); an empty batch (`None`)
/// takes a noise-only step. See the [module](super) for a training loop.
///
/// It refuses a module with a layer that mixes the examples of a batch (BatchNorm in training
/// mode) before the first step, naming its path and the fix (GroupNorm / LayerNorm).
pub struct DpSgd<O> {
    inner: O,
    config: DpSgdConfig,
    rng: PrivacyRng,
    /// Steps taken: every step is the same mechanism, so the RDP accountant is built from this
    /// count when queried (one exact RDP evaluation, not one per step).
    steps: u64,
    pld: PldAccountant,
    /// The share of the noise's standard deviation this optimizer draws: 1 alone, `1/√n` as one
    /// of `n` data-parallel peers.
    noise_fraction: f64,
}

impl<O> DpSgd<O> {
    /// DP-SGD around `inner`, with noise from a generator seeded by the operating system.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] naming a setting outside its domain.
    pub fn new(inner: O, config: DpSgdConfig) -> Result<Self, PrivacyError> {
        Self::with_rng(inner, config, PrivacyRng::from_entropy())
    }

    /// As [`new`](Self::new) with a given generator ([`PrivacyRng::seeded`]: reproducible, and
    /// the guarantee does not hold).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_rng(inner: O, config: DpSgdConfig, rng: PrivacyRng) -> Result<Self, PrivacyError> {
        config.validate()?;
        Ok(Self {
            inner,
            config,
            rng,
            steps: 0,
            pld: PldAccountant::new(),
            noise_fraction: 1.0,
        })
    }

    /// The settings.
    pub fn config(&self) -> &DpSgdConfig {
        &self.config
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// Steps taken (each one accounted).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// One DP-SGD step of `model` with learning rate `lr` on a Poisson-sampled `batch` (`None`
    /// when no example joined), `loss_fn(model, batch)` being the loss of a batch (it sees one
    /// example as a batch of one). Returns the updated model.
    ///
    /// # Errors
    /// [`PrivacyError::Vmap`] when the per-example gradients fail (a module with BatchNorm,
    /// inputs that do not fit), [`PrivacyError::Accounting`].
    pub fn step<AB, M, A, F>(
        &mut self,
        lr: f64,
        model: M,
        loss_fn: F,
        batch: Option<A>,
    ) -> Result<M, PrivacyError>
    where
        AB: AutodiffBackend + BatchOps,
        AB::InnerBackend: BatchOps,
        M: AutodiffModule<AB>,
        O: Optimizer<M, AB>,
        A: Tree<AB>,
        F: Fn(&M, A) -> Tensor<AB, 1>,
    {
        let grads = self.noisy_gradient(&model, loss_fn, batch)?;
        Ok(self.inner.step(lr, model, grads.into_gradients_params()))
    }

    /// The privatized gradient of one step, without stepping the optimizer: the clipped sum
    /// plus noise, divided by `q·N`. The step is accounted. For custom training loops (and the
    /// data-parallel one).
    ///
    /// # Errors
    /// As [`step`](Self::step).
    pub fn noisy_gradient<AB, M, A, F>(
        &mut self,
        model: &M,
        loss_fn: F,
        batch: Option<A>,
    ) -> Result<ParamGrads<AB::InnerBackend>, PrivacyError>
    where
        AB: AutodiffBackend + BatchOps,
        AB::InnerBackend: BatchOps,
        M: AutodiffModule<AB>,
        A: Tree<AB>,
        F: Fn(&M, A) -> Tensor<AB, 1>,
    {
        prepare_module(model, "DpSgd::step")?;
        let Some(batch) = batch else {
            return self.privatize(ParamGrads::zeros_like(model));
        };
        let (c, per_layer) = (self.config.clip_norm, self.config.per_layer);
        let clip = move |g: ParamGrads<AB::InnerBackend>| {
            if per_layer {
                clip_per_layer(g, c)
            } else {
                clip_by_global_norm(g, c)
            }
        };
        // Any batch size: the rows a microbatch size divides run microbatched, the ragged rest
        // as one more vectorized pass; the sum is the same.
        let (leaves, def) = batch.flatten();
        let size = leaves
            .first()
            .and_then(|l| l.shape().to_vec().first().copied())
            .unwrap_or(0);
        let split = match self.config.microbatch_size {
            Some(m) if m < size => size - size % m,
            _ => 0,
        };
        let part = |rows: std::ops::Range<usize>| -> Result<A, PrivacyError> {
            let leaves = leaves
                .iter()
                .map(|l| l.clone().slice_axis(0, crate::tree::rows(rows.clone())))
                .collect();
            Ok(A::unflatten(&def, leaves)?)
        };
        let mut sum: Option<ParamGrads<AB::InnerBackend>> = None;
        if split > 0 {
            let (s, _) = micro_grad_module(&loss_fn)
                .microbatch_size(self.config.microbatch_size)
                .transform_fn(clip)
                .call(model, part(0..split)?)?;
            sum = Some(s);
        }
        if split < size || size == 0 {
            let (s, _) = micro_grad_module(&loss_fn)
                .transform_fn(clip)
                .call(model, part(split..size)?)?;
            sum = Some(match sum {
                Some(a) => a.sum_with(s),
                None => s,
            });
        }
        self.privatize(sum.expect("a part ran"))
    }

    /// Noise on the clipped sum (this peer's share of it in a data-parallel step), the step
    /// accounted, the division by `q·N`.
    fn privatize<B: Backend>(&mut self, sum: ParamGrads<B>) -> Result<ParamGrads<B>, PrivacyError> {
        let std = self.config.noise_multiplier * self.config.clip_norm * self.noise_fraction;
        let noisy = add_gaussian_noise(sum, std, &mut self.rng)?;
        self.account()?;
        let expected = self.config.expected_batch_size();
        Ok(noisy.map_flat(|t| t / expected))
    }

    /// Records one step of the mechanism in both accountants.
    fn account(&mut self) -> Result<(), PrivacyError> {
        let event = PoissonGaussian::new(self.config.sampling_rate, self.config.noise_multiplier)?;
        self.pld.compose(event, 1)?;
        self.steps += 1;
        Ok(())
    }

    /// Runs `f` with this peer drawing `fraction` of the noise's standard deviation (a
    /// data-parallel step's share).
    #[cfg(feature = "collective")]
    pub(crate) fn with_noise_fraction<T>(
        &mut self,
        fraction: f64,
        f: impl FnOnce(&mut Self) -> T,
    ) -> T {
        self.noise_fraction = fraction;
        let out = f(self);
        self.noise_fraction = 1.0;
        out
    }

    /// The wrapped optimizer, mutably.
    #[cfg(feature = "collective")]
    pub(crate) fn inner_mut(&mut self) -> &mut O {
        &mut self.inner
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

/// Per-layer clipping: every parameter tensor of one example's gradient scaled to L2 norm at most
/// `max_norm / √P` (`P` tensors), so the whole gradient's norm is at most `max_norm`, the
/// sensitivity DP-SGD's noise is calibrated to. Written for one example, as
/// [`clip_by_global_norm`].
///
/// ```
/// use burn::backend::Autodiff;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_vmap::privacy::clip_per_layer;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{global_norm, ParamGrads, Vmap};
/// type I = Vmap<TestBackend>;
/// type AD = Autodiff<I>;
/// let device = Default::default();
/// let model: Linear<AD> = LinearConfig::new(3, 2).init(&device);
/// let loss = model.forward(Tensor::<AD, 2>::ones([1, 3], &device) * 100.0).sum();
/// let g = clip_per_layer(ParamGrads::<I>::from_module(&mut loss.backward(), &model), 1.0);
/// assert!(global_norm(&g).into_scalar() <= 1.0 + 1e-5);
/// ```
pub fn clip_per_layer<B: Backend>(grads: ParamGrads<B>, max_norm: f64) -> ParamGrads<B> {
    let per_tensor = max_norm / (grads.len().max(1) as f64).sqrt();
    grads.map(|_, g| {
        let t = g.tensor();
        let rank = t.shape().num_dims();
        let sq = B::float_sum(B::float_mul(t.clone(), t.clone()));
        let norm = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(sq)).sqrt();
        let factor = norm.clamp_min(per_tensor).recip() * per_tensor;
        let factor = B::float_reshape(factor.into_primitive().tensor(), vec![1; rank].into());
        TensorPrimitive::Float(B::float_mul(t, factor))
    })
}
