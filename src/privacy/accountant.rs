//! The mechanism's accounting: ε after a number of steps for its neighbouring relation and
//! its noise, and the number of steps a budget allows.
//!
//! Every step of [`DpMechanism`](super::DpMechanism) is the same Poisson-subsampled mechanism,
//! so the state is the step count. Which accountant holds depends on the noise the run draws:
//!
//! - [`NoiseKind::Hardened`](super::NoiseKind::Hardened), the exact discrete Gaussian on a
//!   grid: Rényi DP of the Poisson-subsampled discrete Gaussian
//!   ([`RdpAccountant::discrete_gaussian`]). One step satisfies `(α, α/(2σ²))`-RDP (Canonne,
//!   Kamath & Steinke 2020, for the integer shifts of the grid, the sensitivity `C + γ·√d`), and
//!   Zhu & Wang 2019's general bound covers its Poisson subsampling. The privacy-loss
//!   distribution of the continuous Gaussian is *not* proven for it, and is not used.
//! - [`NoiseKind::Plain`](super::NoiseKind::Plain): the continuous Gaussian's privacy-loss
//!   distribution (the tightest, [`PldAccountant`]), or its exact RDP on request.
//!
//! Under replace-one neighbours ε is derived by group privacy (below).

use super::PrivacyError;
use super::accounting::{PldAccountant, PoissonGaussian, PrivacyStatement, RdpAccountant};
use super::config::DpConfig;
use super::{Neighbouring, NoiseKind};

/// ε by RDP at the configuration's δ after `steps` steps of the mechanism of `config` (its
/// neighbouring relation and noise included): what
/// [`DpMechanism::epsilon_rdp`](super::DpMechanism::epsilon_rdp) answers after that many steps,
/// without a mechanism (burn-train's ε metric).
#[cfg(feature = "train")]
pub(crate) fn epsilon_rdp_after(config: &DpConfig, steps: u64) -> Result<f64, PrivacyError> {
    let mut accountant = Accountant::new(config)?;
    accountant.compose(steps)?;
    accountant.epsilon_rdp(config.delta)
}

/// The composition: the continuous Gaussian's PLD kept step by step (plain noise), or the steps
/// of the discrete Gaussian (hardened noise), whose RDP is composed at once when asked (one
/// multiplication per order: the same value whether the steps came one by one or together).
#[derive(Debug, Clone)]
enum Composed {
    Pld(PldAccountant),
    DiscreteRdp { steps: u64 },
}

/// ε of the steps so far, for the relation and the noise of a configuration.
#[derive(Debug, Clone)]
pub(super) struct Accountant {
    event: PoissonGaussian,
    replace_one: bool,
    /// Composed incrementally (its queries are cached until the next step).
    composed: Composed,
}

impl Accountant {
    pub(super) fn new(config: &DpConfig) -> Result<Self, PrivacyError> {
        Ok(Self {
            event: PoissonGaussian::new(config.sampling_rate, config.noise_multiplier)?,
            replace_one: matches!(config.neighbouring, Neighbouring::ReplaceOne { .. }),
            composed: Self::empty(config.noise),
        })
    }

    fn empty(noise: NoiseKind) -> Composed {
        match noise {
            NoiseKind::Hardened { .. } => Composed::DiscreteRdp { steps: 0 },
            NoiseKind::Plain => Composed::Pld(PldAccountant::new()),
        }
    }

    /// Steps accounted.
    pub(super) fn steps(&self) -> u64 {
        match &self.composed {
            Composed::Pld(pld) => pld.steps(),
            Composed::DiscreteRdp { steps } => *steps,
        }
    }

    /// Accounts `count` more steps.
    pub(super) fn compose(&mut self, count: u64) -> Result<(), PrivacyError> {
        if count > 0 {
            match &mut self.composed {
                Composed::Pld(pld) => pld.compose(self.event, count)?,
                Composed::DiscreteRdp { steps } => *steps += count,
            }
        }
        Ok(())
    }

    /// ε at `delta` after the steps so far, by the tightest accountant that holds for the noise
    /// (PLD for plain noise, the discrete Gaussian's RDP for hardened noise).
    pub(super) fn epsilon(&self, delta: f64) -> Result<f64, PrivacyError> {
        self.relation_epsilon(delta, |d| {
            Ok(match &self.composed {
                Composed::Pld(pld) => pld.epsilon(d)?,
                Composed::DiscreteRdp { .. } => self.rdp()?.epsilon(d)?,
            })
        })
    }

    /// ε at `delta` after the steps so far, by RDP (the continuous Gaussian's exact RDP for
    /// plain noise, looser than its PLD; the discrete Gaussian's for hardened noise, the same as
    /// [`epsilon`](Self::epsilon)).
    pub(super) fn epsilon_rdp(&self, delta: f64) -> Result<f64, PrivacyError> {
        let rdp = self.rdp()?;
        self.relation_epsilon(delta, |d| Ok(rdp.epsilon(d)?))
    }

    /// The statement of the add/remove accountant of [`epsilon`](Self::epsilon) (the relation
    /// and what it assumes are stated around it by [`DpStatement`](super::DpStatement)).
    pub(super) fn statement(&self, delta: f64) -> Result<PrivacyStatement, PrivacyError> {
        let mut statement = match &self.composed {
            Composed::Pld(pld) => pld.statement(delta)?,
            Composed::DiscreteRdp { .. } => self.rdp()?.statement(delta)?,
        };
        statement.epsilon = self.epsilon(delta)?;
        Ok(statement)
    }

    /// As [`statement`](Self::statement), by RDP.
    pub(super) fn statement_rdp(&self, delta: f64) -> Result<PrivacyStatement, PrivacyError> {
        let mut statement = self.rdp()?.statement(delta)?;
        statement.epsilon = self.epsilon_rdp(delta)?;
        Ok(statement)
    }

    /// The RDP accountant of the steps so far.
    fn rdp(&self) -> Result<RdpAccountant, PrivacyError> {
        let mut rdp = match self.composed {
            Composed::DiscreteRdp { .. } => RdpAccountant::discrete_gaussian(),
            Composed::Pld(_) => RdpAccountant::new(),
        };
        if self.steps() > 0 {
            rdp.compose(self.event, self.steps())?;
        }
        Ok(rdp)
    }

    /// The largest number of steps whose ε at `delta` stays within `epsilon` (by
    /// [`epsilon`](Self::epsilon); `u64::MAX`
    /// when no count exceeds it within 2⁴⁰ steps, as for a trivial mechanism).
    pub(super) fn max_steps(&self, epsilon: f64, delta: f64) -> Result<u64, PrivacyError> {
        let within = |steps: u64| -> Result<bool, PrivacyError> {
            let mut at = Self {
                composed: match &self.composed {
                    Composed::Pld(_) => Composed::Pld(PldAccountant::new()),
                    Composed::DiscreteRdp { .. } => Composed::DiscreteRdp { steps: 0 },
                },
                ..self.clone()
            };
            at.compose(steps)?;
            Ok(at.epsilon(delta)? <= epsilon)
        };
        if !within(1)? {
            return Ok(0);
        }
        // Doubling, then bisection: `lo` within the budget, `hi` over it.
        let mut lo = 1u64;
        let mut hi = 2u64;
        while within(hi)? {
            lo = hi;
            if hi >= 1 << 40 {
                return Ok(u64::MAX);
            }
            hi *= 2;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if within(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// ε of the relation at `delta` from the add/remove ε function `eps`. Replace-one by group
    /// privacy: a replacement is a removal and an addition, so an `(ε', δ')` add/remove
    /// guarantee gives `(2ε', (1 + e^ε') δ')` for replacement. The largest `δ'` with
    /// `(1 + e^ε(δ')) δ' ≤ δ` is found by bisection on `log δ'`, keeping the invariant that the
    /// lower end satisfies it, so the returned `2ε(δ')` holds whatever the shape of the curve.
    fn relation_epsilon(
        &self,
        delta: f64,
        eps: impl Fn(f64) -> Result<f64, PrivacyError>,
    ) -> Result<f64, PrivacyError> {
        if !self.replace_one {
            return eps(delta);
        }
        let cost = |d: f64| -> Result<(f64, f64), PrivacyError> {
            let e = eps(d)?;
            Ok((e, (1.0 + e.exp()) * d))
        };
        // The lower end: the largest of δ·10⁻³ … δ·10⁻¹² that satisfies the constraint (a
        // PLD's ε is infinite below its truncated tail mass, so the smallest is not the safest).
        let mut start = None;
        for k in 3..=12 {
            let d = delta * 10f64.powi(-k);
            let (e, c) = cost(d)?;
            if c <= delta {
                start = Some((d.ln(), e));
                break;
            }
        }
        let Some((mut lo, mut best)) = start else {
            return Ok(f64::INFINITY);
        };
        let mut hi = (delta / 2.0).ln();
        for _ in 0..40 {
            let mid = 0.5 * (lo + hi);
            let (e, c) = cost(mid.exp())?;
            if c <= delta {
                lo = mid;
                best = e;
            } else {
                hi = mid;
            }
        }
        Ok(2.0 * best)
    }
}
