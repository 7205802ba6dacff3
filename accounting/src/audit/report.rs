//! [`AuditReport`]: what a one-run audit found, and its rendering for people.

use std::fmt;

use super::Guesses;

/// The result of [`audit`](super::audit); `Display` renders it for people.
///
/// ```
/// use burn_vmap_accounting::audit::{audit, AuditConfig, Guesses};
///
/// let included = [true, false, true, false];
/// let scores = [0.9, 0.1, 0.8, 0.3];
/// let report = audit(&scores, &included, &AuditConfig::new(Guesses::symmetric(2)))?;
/// assert_eq!((report.correct, report.canaries), (4, 4));
/// // Four correct guesses out of four happen with probability 1/16 by chance: not enough at 95%.
/// assert_eq!(report.epsilon_lower_bound, 0.0);
/// assert!(report.to_string().starts_with("ε ≥ 0 (δ = 0) with 95% confidence: 4 of 4"));
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AuditReport {
    /// ε_lb: with probability at least `confidence`, the mechanism is not (ε, δ)-DP for any
    /// ε < ε_lb. 0 when the guesses are no better than chance allows.
    pub epsilon_lower_bound: f64,
    /// Correct guesses v (of the chosen candidate).
    pub correct: usize,
    /// The guess counts that gave the bound (the best candidate of
    /// [`GuessCount::BestOf`](super::GuessCount::BestOf)).
    pub guesses: Guesses,
    /// The number of canaries m.
    pub canaries: usize,
    /// The confidence `1 − β` of the bound (over all candidates).
    pub confidence: f64,
    /// The δ of the bound.
    pub delta: f64,
    /// How many guess counts were tried (the union bound's n; 1 for
    /// [`GuessCount::Fixed`](super::GuessCount::Fixed)).
    pub candidates: usize,
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let delta = if self.delta == 0.0 {
            "0".to_string()
        } else {
            format!("{:e}", self.delta)
        };
        write!(
            f,
            "ε ≥ {} (δ = {delta}) with {}% confidence: {} of {} guesses correct ({} highest \
             scores guessed included, {} lowest excluded) among {} canaries",
            trimmed(self.epsilon_lower_bound, 4),
            trimmed(100.0 * self.confidence, 4),
            self.correct,
            self.guesses.total(),
            self.guesses.included,
            self.guesses.excluded,
            self.canaries,
        )?;
        if self.candidates > 1 {
            write!(
                f,
                ", the best of {} guess counts (union bound)",
                self.candidates
            )?;
        }
        write!(
            f,
            "; one-run audit (Steinke, Nasr & Jagielski 2023), a lower bound on ε"
        )
    }
}

/// `x` with at most `decimals` decimals, trailing zeros removed.
fn trimmed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}
