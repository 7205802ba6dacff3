//! [`DpConfig`]: the settings of the DP-SGD mechanism, and [`Neighbouring`], the relation its
//! guarantee is stated for.

use super::{NoiseKind, PrivacyError};

/// Which datasets the guarantee calls neighbours, and so what the mechanism may read.
///
/// - [`AddRemove`](Self::AddRemove): neighbours differ by one example added or removed, so the
///   number of examples `N` is itself private. The noisy sum is divided by a public constant,
///   the expected batch size you state, never by anything computed from the data (today's
///   `q · N` reads `N`).
/// - [`ReplaceOne`](Self::ReplaceOne): neighbours have the same `N` and differ in one example,
///   so `N` is public; the noisy sum is divided by `q · N`. Its ε is derived from the
///   add/remove accountant by group privacy (a replacement is a removal and an addition:
///   `(2ε, (1 + e^ε) δ')`), which is valid and conservative.
///
/// ```
/// use burn_vmap::privacy::Neighbouring;
/// assert_eq!(Neighbouring::AddRemove { expected_batch_size: 256.0 }.normaliser(0.01), 256.0);
/// assert_eq!(Neighbouring::ReplaceOne { dataset_size: 60_000 }.normaliser(0.01), 600.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Neighbouring {
    /// Add or remove one example; `N` is private.
    AddRemove {
        /// The public batch size the noisy sum is divided by (state it from what you would
        /// publish anyway: `q` times the dataset's announced size).
        expected_batch_size: f64,
    },
    /// Replace one example; `N` is public.
    ReplaceOne {
        /// `N`, public under this relation; the loader checks that the dataset has this size.
        dataset_size: usize,
    },
}

impl Neighbouring {
    /// What the noisy sum is divided by at sampling rate `q`.
    pub fn normaliser(&self, sampling_rate: f64) -> f64 {
        match *self {
            Self::AddRemove {
                expected_batch_size,
            } => expected_batch_size,
            Self::ReplaceOne { dataset_size } => sampling_rate * dataset_size as f64,
        }
    }

    /// The relation in words, for the statement.
    pub(super) fn describe(&self) -> String {
        match *self {
            Self::AddRemove {
                expected_batch_size,
            } => format!(
                "add or remove one example; N is private and never read (the noisy sum is \
                 divided by the public expected batch size {expected_batch_size})"
            ),
            Self::ReplaceOne { dataset_size } => format!(
                "replace one example; N = {dataset_size} is public (ε by group privacy from \
                 add/remove: conservative)"
            ),
        }
    }
}

/// The settings of the DP-SGD mechanism ([`DpMechanism`](super::DpMechanism)): each is given
/// once, here (the loader reads the sampling rate from the mechanism).
///
/// ```
/// use burn_vmap::privacy::{DpConfig, Neighbouring};
/// let config = DpConfig::new(1.0, 1.1, 0.01, Neighbouring::AddRemove { expected_batch_size: 600.0 })
///     .with_delta(1e-6)
///     .with_microbatch_size(64);
/// assert_eq!(config.normaliser(), 600.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpConfig {
    /// `C`: every example's gradient is clipped to this L2 norm.
    pub clip_norm: f64,
    /// `σ`: the noise on the sum has standard deviation `σ · C`.
    pub noise_multiplier: f64,
    /// `q`: every example joins a batch independently with this probability.
    pub sampling_rate: f64,
    /// The neighbouring relation, and what the noisy sum is divided by.
    pub neighbouring: Neighbouring,
    /// `δ` of the reported (ε, δ) (default `1e-5`; pick it well below `1 / N`).
    pub delta: f64,
    /// Examples per vectorized backward pass (default: the whole batch at once). Bounds peak
    /// memory; any batch size works, the last microbatch may be smaller.
    pub microbatch_size: Option<usize>,
    /// Clip every parameter tensor to `C / √P` (`P` tensors) instead of the whole gradient to
    /// `C`: the same sensitivity, per-layer scaling (default `false`).
    pub per_layer: bool,
    /// How the noise is drawn (default: hardened, the exact discrete Gaussian on a grid, its
    /// standard deviation calibrated to `C` plus the grid's sensitivity inflation).
    pub noise: NoiseKind,
}

impl DpConfig {
    /// `C`, `σ`, `q` and the neighbouring relation; `δ = 1e-5`, no microbatching, global
    /// clipping.
    pub fn new(
        clip_norm: f64,
        noise_multiplier: f64,
        sampling_rate: f64,
        neighbouring: Neighbouring,
    ) -> Self {
        Self {
            clip_norm,
            noise_multiplier,
            sampling_rate,
            neighbouring,
            delta: 1e-5,
            microbatch_size: None,
            per_layer: false,
            noise: NoiseKind::default(),
        }
    }

    /// With another noise construction ([`NoiseKind::Plain`]: textbook `f32` Gaussians, open
    /// to floating-point attacks; for comparisons).
    pub fn with_noise(mut self, noise: NoiseKind) -> Self {
        self.noise = noise;
        self
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

    /// What the noisy sum is divided by: the public expected batch size (add/remove) or `q · N`
    /// (replace-one).
    pub fn normaliser(&self) -> f64 {
        self.neighbouring.normaliser(self.sampling_rate)
    }

    /// `N` as far as it is public: stated (replace-one), or the expected batch size over `q`
    /// (add/remove), for comparing `δ` with `1 / N`.
    pub(super) fn public_size(&self) -> f64 {
        match self.neighbouring {
            Neighbouring::ReplaceOne { dataset_size } => dataset_size as f64,
            Neighbouring::AddRemove {
                expected_batch_size,
            } => expected_batch_size / self.sampling_rate,
        }
    }

    /// Every setting in its domain.
    pub(super) fn validate(&self) -> Result<(), PrivacyError> {
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
        check(q > 0.0 && q <= 1.0, "sampling_rate", "a rate in (0, 1]", q)?;
        match self.neighbouring {
            Neighbouring::AddRemove {
                expected_batch_size: b,
            } => check(
                b.is_finite() && b > 0.0,
                "expected_batch_size",
                "a finite public batch size > 0",
                b,
            )?,
            Neighbouring::ReplaceOne { dataset_size: n } => {
                check(n > 0, "dataset_size", "at least one example", n as f64)?
            }
        }
        let d = self.delta;
        check(d > 0.0 && d < 1.0, "delta", "a δ in (0, 1)", d)?;
        if let Some(m) = self.microbatch_size {
            check(m > 0, "microbatch_size", "at least 1", m as f64)?;
        }
        Ok(())
    }
}

/// `Ok` when `ok`, else the typed error naming `argument`.
pub(super) fn check(
    ok: bool,
    argument: &'static str,
    expected: &'static str,
    got: f64,
) -> Result<(), PrivacyError> {
    if ok {
        Ok(())
    } else {
        Err(PrivacyError::Argument {
            argument,
            expected,
            got: got.to_string(),
        })
    }
}
