//! The mechanism's accounting: ε after a number of steps for its neighbouring relation, and
//! the number of steps a budget allows.
//!
//! Every step of [`DpMechanism`](super::DpMechanism) is the same Poisson-subsampled Gaussian
//! mechanism, so the state is the step count; ε comes from privacy loss distributions (the
//! tightest accountant, [`PldAccountant`]), or from Rényi DP on request. Under replace-one
//! neighbours ε is derived by group privacy (below).

use super::Neighbouring;
use super::PrivacyError;
use super::accounting::{PldAccountant, PoissonGaussian, PrivacyStatement, RdpAccountant};
use super::config::DpConfig;

/// ε by RDP at the configuration's δ after `steps` steps of the mechanism of `config` (its
/// neighbouring relation included): what [`DpMechanism::epsilon_rdp`](super::DpMechanism::epsilon_rdp)
/// answers after that many steps, without a mechanism (burn-train's ε metric).
#[cfg(feature = "train")]
pub(crate) fn epsilon_rdp_after(config: &DpConfig, steps: u64) -> Result<f64, PrivacyError> {
    let mut accountant = Accountant::new(config)?;
    accountant.compose(steps)?;
    accountant.epsilon_rdp(config.delta)
}

/// ε of the steps so far, for the relation of a configuration.
#[derive(Debug, Clone)]
pub(super) struct Accountant {
    event: PoissonGaussian,
    replace_one: bool,
    /// Composed incrementally (its queries are cached until the next step).
    pld: PldAccountant,
}

impl Accountant {
    pub(super) fn new(config: &DpConfig) -> Result<Self, PrivacyError> {
        Ok(Self {
            event: PoissonGaussian::new(config.sampling_rate, config.noise_multiplier)?,
            replace_one: matches!(config.neighbouring, Neighbouring::ReplaceOne { .. }),
            pld: PldAccountant::new(),
        })
    }

    /// Steps accounted.
    pub(super) fn steps(&self) -> u64 {
        self.pld.steps()
    }

    /// Accounts `count` more steps.
    pub(super) fn compose(&mut self, count: u64) -> Result<(), PrivacyError> {
        if count > 0 {
            self.pld.compose(self.event, count)?;
        }
        Ok(())
    }

    /// ε at `delta` after the steps so far (PLD).
    pub(super) fn epsilon(&self, delta: f64) -> Result<f64, PrivacyError> {
        self.relation_epsilon(delta, |d| Ok(self.pld.epsilon(d)?))
    }

    /// ε at `delta` after the steps so far, by RDP (looser than PLD).
    pub(super) fn epsilon_rdp(&self, delta: f64) -> Result<f64, PrivacyError> {
        let rdp = self.rdp()?;
        self.relation_epsilon(delta, |d| Ok(rdp.epsilon(d)?))
    }

    /// The PLD statement of the add/remove accountant (the relation and what it assumes are
    /// stated around it by [`DpStatement`](super::DpStatement)).
    pub(super) fn statement(&self, delta: f64) -> Result<PrivacyStatement, PrivacyError> {
        let mut statement = self.pld.statement(delta)?;
        statement.epsilon = self.epsilon(delta)?;
        Ok(statement)
    }

    /// As [`statement`](Self::statement), by RDP.
    pub(super) fn statement_rdp(&self, delta: f64) -> Result<PrivacyStatement, PrivacyError> {
        let mut statement = self.rdp()?.statement(delta)?;
        statement.epsilon = self.epsilon_rdp(delta)?;
        Ok(statement)
    }

    fn rdp(&self) -> Result<RdpAccountant, PrivacyError> {
        let mut rdp = RdpAccountant::new();
        if self.steps() > 0 {
            rdp.compose(self.event, self.steps())?;
        }
        Ok(rdp)
    }

    /// The largest number of steps whose ε at `delta` stays within `epsilon` (PLD; `u64::MAX`
    /// when no count exceeds it within 2⁴⁰ steps, as for a trivial mechanism).
    pub(super) fn max_steps(&self, epsilon: f64, delta: f64) -> Result<u64, PrivacyError> {
        let within = |steps: u64| -> Result<bool, PrivacyError> {
            let mut at = Self {
                pld: PldAccountant::new(),
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
