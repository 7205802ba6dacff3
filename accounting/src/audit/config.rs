//! What an audit tests: the guess counts ([`Guesses`], [`GuessCount`]) and the
//! [`AuditConfig`], with the largest ε an audit can certify ([`AuditConfig::max_epsilon`]).

use super::{check_guesses, ln_beta, GuessTally};
use crate::error::{check_delta, AccountingError, Result};

/// How many canaries are guessed "included" (the highest scores) and "excluded" (the lowest).
///
/// ```
/// use burn_vmap_accounting::audit::Guesses;
///
/// let g = Guesses::symmetric(100);
/// assert_eq!((g.included, g.excluded, g.total()), (100, 100, 200));
/// assert_eq!(Guesses::new(50, 0).total(), 50); // only "included" guesses
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guesses {
    /// k₊: the number of highest-scoring canaries guessed "included".
    pub included: usize,
    /// k₋: the number of lowest-scoring canaries guessed "excluded".
    pub excluded: usize,
}

impl Guesses {
    /// `included` guesses "included" (highest scores) and `excluded` guesses "excluded" (lowest).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::Guesses;
    /// assert_eq!(Guesses::new(30, 10).total(), 40);
    /// ```
    pub const fn new(included: usize, excluded: usize) -> Self {
        Self { included, excluded }
    }

    /// `k` guesses on each side (k₊ = k₋ = k), the paper's choice.
    ///
    /// ```
    /// use burn_vmap_accounting::audit::Guesses;
    /// assert_eq!(Guesses::symmetric(25), Guesses::new(25, 25));
    /// ```
    pub const fn symmetric(k: usize) -> Self {
        Self::new(k, k)
    }

    /// r = k₊ + k₋, the number of guesses (saturating).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::Guesses;
    /// assert_eq!(Guesses::symmetric(25).total(), 50);
    /// ```
    pub const fn total(&self) -> usize {
        self.included.saturating_add(self.excluded)
    }
}

/// Which guess counts the audit uses.
///
/// ```
/// use burn_vmap_accounting::audit::{GuessCount, Guesses};
///
/// let fixed: GuessCount = Guesses::symmetric(100).into();
/// assert_eq!(fixed.candidates(), &[Guesses::symmetric(100)]);
/// let best = GuessCount::BestOf([10, 100, 400].map(Guesses::symmetric).to_vec());
/// assert_eq!(best.candidates().len(), 3); // each tested at β / 3
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuessCount {
    /// One (k₊, k₋), fixed before the audit.
    Fixed(Guesses),
    /// Several (k₊, k₋), each tested at confidence `1 − β / n` (union bound over the n
    /// candidates); the largest bound is reported and holds at `1 − β`.
    BestOf(Vec<Guesses>),
}

impl GuessCount {
    /// The candidate guess counts (one for [`GuessCount::Fixed`]).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::{GuessCount, Guesses};
    /// assert_eq!(GuessCount::Fixed(Guesses::new(3, 4)).candidates(), &[Guesses::new(3, 4)]);
    /// ```
    pub fn candidates(&self) -> &[Guesses] {
        match self {
            Self::Fixed(g) => std::slice::from_ref(g),
            Self::BestOf(gs) => gs,
        }
    }
}

impl From<Guesses> for GuessCount {
    fn from(guesses: Guesses) -> Self {
        Self::Fixed(guesses)
    }
}

/// What [`audit`](super::audit) tests: the confidence `1 − β`, the δ of the null hypothesis
/// "the mechanism is (ε, δ)-DP", and the guess counts. Validated by [`audit`](super::audit)
/// (and [`AuditConfig::max_epsilon`]).
///
/// ```
/// use burn_vmap_accounting::audit::{AuditConfig, Guesses};
///
/// let config = AuditConfig::new(Guesses::symmetric(100)).with_delta(1e-5).with_confidence(0.99);
/// assert_eq!((config.confidence, config.delta), (0.99, 1e-5));
/// assert_eq!(AuditConfig::new(Guesses::symmetric(100)).confidence, 0.95); // the default
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AuditConfig {
    /// `1 − β`, in (0, 1); 0.95 by default.
    pub confidence: f64,
    /// The δ at which ε is bounded, in [0, 1); 0 (pure DP) by default. Use the δ of the
    /// accountant's claim to compare with it.
    pub delta: f64,
    /// The guess counts k₊, k₋ (fixed, or several with a union bound).
    pub guesses: GuessCount,
}

impl AuditConfig {
    /// Guess counts `guesses`, confidence 0.95, δ = 0.
    ///
    /// ```
    /// use burn_vmap_accounting::audit::{AuditConfig, Guesses};
    /// let config = AuditConfig::new(Guesses::new(200, 100));
    /// assert_eq!(config.delta, 0.0);
    /// ```
    pub fn new(guesses: impl Into<GuessCount>) -> Self {
        Self {
            confidence: 0.95,
            delta: 0.0,
            guesses: guesses.into(),
        }
    }

    /// Sets the confidence `1 − β` (checked by [`audit`](super::audit): in (0, 1)).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::{AuditConfig, Guesses};
    /// assert_eq!(AuditConfig::new(Guesses::symmetric(1)).with_confidence(0.9).confidence, 0.9);
    /// ```
    pub fn with_confidence(mut self, confidence: f64) -> Self {
        self.confidence = confidence;
        self
    }

    /// Sets δ (checked by [`audit`](super::audit): in [0, 1)).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::{AuditConfig, Guesses};
    /// assert_eq!(AuditConfig::new(Guesses::symmetric(1)).with_delta(1e-6).delta, 1e-6);
    /// ```
    pub fn with_delta(mut self, delta: f64) -> Self {
        self.delta = delta;
        self
    }

    /// The largest ε this audit can certify on `canaries` canaries: the bound it reports when
    /// every guess is correct (for [`GuessCount::BestOf`], the largest over the candidates,
    /// each at `β / n`), the same as [`audit`](super::audit) of scores that separate the
    /// canaries perfectly (with at least k₊ of them included and k₋ excluded).
    ///
    /// No run can give more, however much it leaks: if this is not above the ε the accountant
    /// claims, the audit cannot catch anything. It grows like `ln(r / ln(1/β))` with the
    /// number of guesses r at δ = 0; with δ > 0 the term `2mδ` caps it near
    /// `ln(r·β / (2mδ))` once `2mδ` is above β (see the [module docs](super)).
    ///
    /// # Errors
    /// As [`audit`](super::audit): [`AccountingError::InvalidArgument`] for a confidence outside
    /// (0, 1) or a δ outside [0, 1); [`AccountingError::CountTooLarge`] if a candidate makes
    /// more guesses than there are canaries; [`AccountingError::InvalidCount`] if one makes no
    /// guess, or `BestOf` is empty.
    ///
    /// ```
    /// use burn_vmap_accounting::audit::{AuditConfig, Guesses};
    /// use burn_vmap_accounting::{PldAccountant, PoissonGaussian};
    ///
    /// // What one DP-SGD step with σ = 1 at q = 1 claims at δ = 1e-5: ε = 4.38.
    /// let mut accountant = PldAccountant::new();
    /// accountant.compose(PoissonGaussian::new(1.0, 1.0)?, 1)?;
    /// let claimed = accountant.epsilon(1e-5)?;
    /// // 100 000 canaries, 3000 guesses each way: room above the claim, if all are right.
    /// let config = AuditConfig::new(Guesses::symmetric(3000)).with_delta(1e-5);
    /// let most = config.max_epsilon(100_000)?;
    /// assert!((most - 5.31).abs() < 0.01, "{most}");
    /// // Ten times the canaries, ten times 2mδ: even a run that reveals every canary could not
    /// // be shown to break the claim.
    /// assert!(config.max_epsilon(1_000_000)? < claimed);
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn max_epsilon(&self, canaries: usize) -> Result<f64> {
        let (ln_beta_each, delta, candidates) = self.checked(canaries)?;
        let mut most = 0.0f64;
        for g in candidates {
            let perfect = GuessTally::new(canaries, g.total(), g.total())?;
            most = most.max(perfect.epsilon_lower_bound_ln(ln_beta_each, delta));
        }
        Ok(most)
    }

    /// `(ln(β / n), δ, candidates)` for `canaries` canaries, everything checked.
    pub(super) fn checked(&self, canaries: usize) -> Result<(f64, f64, &[Guesses])> {
        let ln_beta = ln_beta(self.confidence)?;
        let delta = check_delta(self.delta)?;
        let candidates = self.guesses.candidates();
        if candidates.is_empty() {
            return Err(AccountingError::InvalidCount {
                name: "guesses",
                expected: "at least one candidate guess count",
                actual: 0,
            });
        }
        for g in candidates {
            check_guesses(*g, canaries)?;
        }
        Ok((ln_beta - (candidates.len() as f64).ln(), delta, candidates))
    }
}
