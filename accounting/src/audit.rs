//! One-run privacy auditing: an empirical **lower** bound on ε from a single training run
//! with canaries (Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run",
//! NeurIPS 2023, arXiv 2305.08846).
//!
//! An accountant proves an **upper** bound: the run is (ε, δ)-DP for the ε it reports, *if* the
//! code does what the analysis assumes. An audit measures from the outside how much a run
//! actually leaks, and can catch the cases where it does not (a missing clip, noise of the wrong
//! scale, examples seen more often than accounted for):
//!
//! ```text
//! for each of m canaries i:  included[i] = a fair coin          (draw_inclusion)
//! train once, on the data plus the canaries with included[i]
//! for each canary i:         scores[i] = how "seen" canary i looks (e.g. −loss, or in the
//!                                        white-box setting ⟨model update, canary gradient⟩)
//! guess "included" for the k₊ highest scores, "excluded" for the k₋ lowest, abstain on the rest
//! v = number of correct guesses among r = k₊ + k₋
//! ε_lb = the largest ε at which v or more correct guesses would have probability < β
//! ```
//!
//! **What the bound means.** If the mechanism (the whole run, as a function of which canaries
//! are included, neighbours differing in one canary) is (ε*, δ)-DP, then
//! `P[ε_lb > ε*] ≤ β`, the probability being over the inclusion coins and the run's own
//! randomness. So `ε_lb` is a lower bound on the true ε that holds with confidence `1 − β`: a
//! value above the accountant's ε (at the same δ) is evidence of a bug, wrong with probability at
//! most β. A value below it proves nothing: audits are not tight (one-run audits of DP-SGD that
//! only see the final model give far smaller values than the accountant), and `ε_lb = 0` is the
//! answer whenever the guesses are no better than chance.
//!
//! **The statistics.** The paper's theorems bound the number `W` of correct guesses:
//!
//! * δ = 0: if the mechanism is ε-DP, `W` is stochastically dominated by
//!   `Binomial(r, e^ε / (1 + e^ε))` — `r` rounds of randomized response, whatever the
//!   mechanism and the guesser. The p-value is `f(v) = P[Binomial(r, e^ε/(1 + e^ε)) ≥ v]`.
//! * δ > 0: the paper's main theorem for (ε, δ)-DP gives, for every v,
//!   `P[W ≥ v] ≤ f(v) + 2mδ · max_{1 ≤ i ≤ v} (f(v − i) − f(v)) / i`, evaluated as in the
//!   paper's appendix. The correction grows with the number of canaries m (not with r).
//!
//! [`GuessTally::p_value`] evaluates these bounds **exactly**: the binomial probabilities are
//! computed in log space with Loader's saddle-point formula (no normal approximation, full
//! relative accuracy at any r), the tail is summed term by term until a geometric bound on the
//! rest falls below 2⁻⁵⁷ of the sum, and that bound is *added* (so a p-value is never
//! under-estimated); the maximum over i is exact. ε is then found by bisection, keeping only ε
//! values whose p-value was checked to be below β (inflated by a relative 1e-9 for rounding).
//! Every reported ε therefore passed the test, which is all the guarantee needs. Say the
//! mechanism is (ε*, δ)-DP, and let v₀ be the smallest count of correct guesses at which the
//! audit reports some ε' > ε*: it checked `p_ε'(v₀) < β` there, the mechanism is also
//! (ε', δ)-DP, so `P[ε_lb > ε*] ≤ P[W ≥ v₀] ≤ p_ε'(v₀) < β` — with no assumption that the
//! p-value is monotone in ε or v. The bisection stops within a relative 1e-12 of the crossing;
//! where the δ > 0 p-value is not monotone in ε it may stop at a smaller crossing: the bound
//! can then only be low, never high.
//!
//! **Choosing k₊ and k₋.** They must not depend on the inclusion bits. Fix them in advance
//! ([`GuessCount::Fixed`]) or let the audit try several ([`GuessCount::BestOf`]): then each
//! candidate is tested at `β / n` and the largest bound is reported, which is valid at `1 − β`
//! by the union bound. Trying every (k₊, k₋) a posteriori without that correction — as
//! tempting as it is — over-states ε.
//!
//! **Designing an audit that can catch a bug.** No run can give more than
//! [`AuditConfig::max_epsilon`], the bound of r correct guesses out of r: about
//! `ln(r / ln(1/β))` at δ = 0 and, once `2mδ` is above β, no more than about `ln(rβ / (2mδ))`
//! (the run may reveal each canary with probability δ). To flag a run above a claimed ε, almost
//! all guesses must be right (at ε = 4.38, fewer than 1.2% wrong, before the confidence margin):
//! guess only on the most extreme scores, k far below m/2, with enough canaries that those are
//! far out. For the white-box Gaussian scores `bᵢ + σZᵢ` of one DP-SGD step at q = 1 (canary i
//! alone moves weight i), σ = 1 claims ε = 4.38 at δ = 1e-5; over 500 seeded runs
//! (`examples/audit_design.rs`) **m = 100 000 canaries, k₊ = k₋ = 3000, δ = 1e-5** (whose
//! [`max_epsilon`](AuditConfig::max_epsilon) is 5.31) flags σ = 0.5 in every run, σ = 0.55 in
//! 98%, σ = 0.6 in 4%, and σ = 1 never (largest bound 2.53); 1000 canaries with k = 400 flag
//! reliably only σ ≤ 0.2 (σ = 0.3 in 24%). Taking the best of several k costs ln n of room
//! under the cap: at these settings it does worse than the one k. More steps do not help: T
//! steps of σ at q = 1 are one step of σ/√T, for the accountant as for scores summed over the
//! steps.
//!
//! ```
//! use burn_vmap_accounting::audit::{audit, draw_inclusion, AuditConfig, Guesses};
//! use rand::SeedableRng;
//!
//! let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
//! let included = draw_inclusion(&mut rng, 1000);
//! // A mechanism that releases its input: the score is the inclusion bit itself.
//! let scores: Vec<f64> = included.iter().map(|&b| f64::from(u8::from(b))).collect();
//! let report = audit(&scores, &included, &AuditConfig::new(Guesses::symmetric(400)))?;
//! assert_eq!((report.correct, report.guesses.total()), (800, 800));
//! // 800 of 800 is impossible at ε < 5.58 (with probability 0.95): the mechanism is not DP.
//! assert!(report.epsilon_lower_bound > 5.58, "{report}");
//! # Ok::<(), burn_vmap_accounting::AccountingError>(())
//! ```

use rand::Rng;

use crate::error::{check_delta, check_epsilon, AccountingError, Result};
use crate::special::log_add_exp;

mod binomial;
mod config;
mod report;

use binomial::LogBinomial;
pub use config::{AuditConfig, GuessCount, Guesses};
pub use report::AuditReport;

/// A p-value is inflated by this much (in log units, a relative 1e-9) before it is compared
/// with β: far more than the rounding error of the log-space sums (~1e-14 relative), so that
/// rounding can never make a bound larger than the exact one.
const ROUNDING_SLACK: f64 = 1e-9;

/// The counts an audit's statistics need: m canaries, r guesses, v of them correct.
///
/// Use it directly when the guesses were made elsewhere; [`audit`] builds it from scores.
///
/// ```
/// use burn_vmap_accounting::audit::GuessTally;
///
/// // 100 of 100 guesses correct: P[Binomial(100, p) ≥ 100] = p¹⁰⁰ < 0.05 for ε < 3.49.
/// let tally = GuessTally::new(1000, 100, 100)?;
/// let eps = tally.epsilon_lower_bound(0.95, 0.0)?;
/// assert!((eps - 3.4929).abs() < 1e-4, "{eps}");
/// assert!(tally.p_value(eps, 0.0)? < 0.05);
/// // δ > 0 weakens the bound: the run may leak everything with probability δ per canary.
/// assert!(tally.epsilon_lower_bound(0.95, 1e-4)? < eps);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuessTally {
    canaries: usize,
    guesses: usize,
    correct: usize,
}

impl GuessTally {
    /// `correct` correct guesses among `guesses`, on `canaries` canaries.
    ///
    /// # Errors
    /// [`AccountingError::CountTooLarge`] if `guesses > canaries` or `correct > guesses`.
    ///
    /// ```
    /// use burn_vmap_accounting::{audit::GuessTally, AccountingError};
    ///
    /// assert_eq!(GuessTally::new(10, 4, 3)?.correct(), 3);
    /// assert!(matches!(
    ///     GuessTally::new(10, 12, 3),
    ///     Err(AccountingError::CountTooLarge { name: "guesses", limit: 10, actual: 12, .. })
    /// ));
    /// # Ok::<(), AccountingError>(())
    /// ```
    pub fn new(canaries: usize, guesses: usize, correct: usize) -> Result<Self> {
        check_at_most("guesses", "the number of canaries", guesses, canaries)?;
        check_at_most("correct", "the number of guesses", correct, guesses)?;
        Ok(Self {
            canaries,
            guesses,
            correct,
        })
    }

    /// m, the number of canaries.
    ///
    /// ```
    /// # use burn_vmap_accounting::audit::GuessTally;
    /// assert_eq!(GuessTally::new(10, 4, 3)?.canaries(), 10);
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn canaries(&self) -> usize {
        self.canaries
    }

    /// r, the number of guesses.
    ///
    /// ```
    /// # use burn_vmap_accounting::audit::GuessTally;
    /// assert_eq!(GuessTally::new(10, 4, 3)?.guesses(), 4);
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn guesses(&self) -> usize {
        self.guesses
    }

    /// v, the number of correct guesses.
    ///
    /// ```
    /// # use burn_vmap_accounting::audit::GuessTally;
    /// assert_eq!(GuessTally::new(10, 4, 3)?.correct(), 3);
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn correct(&self) -> usize {
        self.correct
    }

    /// An upper bound on the probability of `correct` or more correct guesses if the mechanism
    /// is (`epsilon`, `delta`)-DP (the paper's bound, see the [module docs](self)), at most 1.
    ///
    /// # Errors
    /// [`AccountingError::InvalidArgument`] if `epsilon` is negative or NaN (`+∞` gives 1), or
    /// `delta` is not in [0, 1).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::GuessTally;
    ///
    /// // ε = 0: every guess is a fair coin, P[Binomial(2, ½) ≥ 2] = ¼.
    /// assert!((GuessTally::new(2, 2, 2)?.p_value(0.0, 0.0)? - 0.25).abs() < 1e-15);
    /// // With δ: ¼ + 2mδ · max(P[X = 1] / 1, P[X ∈ {0, 1}] / 2) = ¼ + 4δ · ½.
    /// assert!((GuessTally::new(2, 2, 2)?.p_value(0.0, 0.01)? - 0.27).abs() < 1e-15);
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn p_value(&self, epsilon: f64, delta: f64) -> Result<f64> {
        let epsilon = check_epsilon(epsilon)?;
        let delta = check_delta(delta)?;
        Ok(self.ln_p_value(epsilon, delta).exp().min(1.0))
    }

    /// ε_lb: the largest ε (to a relative 1e-12, never above) at which the p-value of this
    /// tally is below `1 − confidence`, or 0 if there is none. If the mechanism is (ε*, δ)-DP,
    /// `ε_lb > ε*` has probability at most `1 − confidence`.
    ///
    /// # Errors
    /// [`AccountingError::InvalidArgument`] if `confidence` is not in (0, 1) or `delta` not in
    /// [0, 1).
    ///
    /// ```
    /// use burn_vmap_accounting::audit::GuessTally;
    ///
    /// // 90 of 100 correct at 95%: the one-sided Clopper–Pearson lower bound on the accuracy,
    /// // 0.8363, is e^ε / (1 + e^ε) at ε = 1.631.
    /// let eps = GuessTally::new(1000, 100, 90)?.epsilon_lower_bound(0.95, 0.0)?;
    /// let accuracy = 1.0 / (1.0 + (-eps).exp());
    /// assert!((accuracy - 0.8363).abs() < 1e-4, "{accuracy}");
    /// assert!((eps - 1.631).abs() < 1e-3, "{eps}");
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn epsilon_lower_bound(&self, confidence: f64, delta: f64) -> Result<f64> {
        let ln_beta = ln_beta(confidence)?;
        let delta = check_delta(delta)?;
        Ok(self.epsilon_lower_bound_ln(ln_beta, delta))
    }

    /// `ln` of the paper's bound on `P[W ≥ v]` (before the cap at 1).
    fn ln_p_value(&self, epsilon: f64, delta: f64) -> f64 {
        let v = self.correct as u64;
        if v == 0 {
            return 0.0;
        }
        let binomial = LogBinomial::randomized_response(self.guesses as u64, epsilon);
        let ln_tail = binomial.ln_upper_tail(v);
        if delta == 0.0 {
            return ln_tail;
        }
        let ln_weight = (2.0 * self.canaries as f64 * delta).ln();
        log_add_exp(ln_tail, ln_weight + binomial.ln_max_window_mean(v))
    }

    /// The bisection of [`Self::epsilon_lower_bound`], at significance `e^ln_beta`.
    fn epsilon_lower_bound_ln(&self, ln_beta: f64, delta: f64) -> f64 {
        let rejects = |epsilon: f64| self.ln_p_value(epsilon, delta) + ROUNDING_SLACK < ln_beta;
        if !rejects(0.0) {
            return 0.0;
        }
        // Invariant: `rejects(lo)` was checked; `rejects(hi)` is false. For v ≤ r the p-value
        // reaches 1 once e^-ε underflows against 1 (ε ≈ 40), so the doubling stops.
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        while rejects(hi) {
            lo = hi;
            hi *= 2.0;
            if hi > 4096.0 {
                return lo;
            }
        }
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if mid <= lo || mid >= hi || hi - lo <= 1e-12 * hi {
                break;
            }
            if rejects(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Audits one run: guesses "included" for the `k₊` highest `scores` and "excluded" for the
/// `k₋` lowest, counts the guesses that match `included`, and returns the ε lower bound at the
/// configured confidence and δ (the best over the candidates of [`GuessCount::BestOf`], each
/// tested at `β / n`).
///
/// A higher score must mean "looks included" (use −loss for a loss). Equal scores are ranked by
/// index, which does not depend on the inclusion bits.
///
/// # Errors
/// * [`AccountingError::LengthMismatch`] if `included` and `scores` differ in length;
/// * [`AccountingError::InvalidArgument`] for a non-finite score (`scores`), a confidence
///   outside (0, 1) or a δ outside [0, 1);
/// * [`AccountingError::CountTooLarge`] if a candidate makes more guesses than there are
///   canaries; [`AccountingError::InvalidCount`] if one makes no guess, or `BestOf` is empty.
///
/// ```
/// use burn_vmap_accounting::audit::{audit, AuditConfig, GuessCount, Guesses};
///
/// // 200 canaries whose scores separate the included ones, except near the middle.
/// let included: Vec<bool> = (0..200).map(|i| i % 2 == 0).collect();
/// let scores: Vec<f64> = (0..200)
///     .map(|i| if i % 2 == 0 { 1.0 + i as f64 } else { 150.0 - i as f64 })
///     .collect();
/// let candidates = GuessCount::BestOf(vec![Guesses::symmetric(20), Guesses::symmetric(50)]);
/// let report = audit(&scores, &included, &AuditConfig::new(candidates).with_delta(1e-5))?;
/// assert_eq!(report.candidates, 2);
/// assert!(report.epsilon_lower_bound > 2.0, "{report}");
/// println!("{report}");
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn audit(scores: &[f64], included: &[bool], config: &AuditConfig) -> Result<AuditReport> {
    check_scores(scores, included)?;
    let (ln_beta_each, delta, candidates) = config.checked(scores.len())?;
    let order = ranking(scores);
    let mut best: Option<(f64, usize, Guesses)> = None;
    for &g in candidates {
        let correct = correct_in_ranking(&order, included, g);
        let tally = GuessTally::new(scores.len(), g.total(), correct)?;
        let epsilon = tally.epsilon_lower_bound_ln(ln_beta_each, delta);
        if best.is_none_or(|(e, _, _)| epsilon > e) {
            best = Some((epsilon, correct, g));
        }
    }
    let (epsilon_lower_bound, correct, guesses) =
        best.expect("at least one candidate was checked above");
    Ok(AuditReport {
        epsilon_lower_bound,
        correct,
        guesses,
        canaries: scores.len(),
        confidence: config.confidence,
        delta,
        candidates: candidates.len(),
    })
}

/// The number of correct guesses when the `guesses.included` highest `scores` are guessed
/// "included" and the `guesses.excluded` lowest "excluded" (ties ranked by index).
///
/// # Errors
/// As [`audit`], for the lengths, the scores and the guess count.
///
/// ```
/// use burn_vmap_accounting::audit::{count_correct, Guesses};
///
/// let scores = [0.9, 0.2, 0.5, 0.1];
/// let included = [true, true, false, false];
/// // Highest: 0.9 (included, right); lowest two: 0.1 (excluded, right), 0.2 (included, wrong).
/// assert_eq!(count_correct(&scores, &included, Guesses::new(1, 2))?, 2);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn count_correct(scores: &[f64], included: &[bool], guesses: Guesses) -> Result<usize> {
    check_scores(scores, included)?;
    check_guesses(guesses, scores.len())?;
    Ok(correct_in_ranking(&ranking(scores), included, guesses))
}

/// Draws the secret inclusion bits of `canaries` canaries: each is included independently with
/// probability ½ (one bit of `rng` per canary).
///
/// The audit is only valid if the mechanism cannot predict the bits: draw them from a
/// generator seeded from the operating system's entropy for a real audit (a fixed seed, as
/// below, is for tests), and keep them away from everything but the data loader.
///
/// ```
/// use burn_vmap_accounting::audit::draw_inclusion;
/// use rand::SeedableRng;
///
/// let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
/// let included = draw_inclusion(&mut rng, 1000);
/// assert_eq!(included.len(), 1000);
/// let count = included.iter().filter(|&&b| b).count();
/// assert!((400..600).contains(&count), "{count}");
/// ```
pub fn draw_inclusion<R: Rng + ?Sized>(rng: &mut R, canaries: usize) -> Vec<bool> {
    let mut bits = Vec::with_capacity(canaries);
    while bits.len() < canaries {
        let word = rng.next_u64();
        let take = (canaries - bits.len()).min(64);
        bits.extend((0..take).map(|j| (word >> j) & 1 == 1));
    }
    bits
}

/// `P[Binomial(trials, success_probability) ≥ at_least]`, exactly (log-space terms from
/// Loader's saddle-point formula, summed until a geometric bound on the rest is below 2⁻⁵⁷ of
/// the sum, that bound included: the result is never below the exact tail beyond rounding).
///
/// # Errors
/// [`AccountingError::InvalidArgument`] if `success_probability` is not in [0, 1].
///
/// ```
/// use burn_vmap_accounting::audit::binomial_tail;
///
/// // P[Binomial(4, ½) ≥ 3] = (4 + 1) / 16.
/// assert!((binomial_tail(4, 0.5, 3)? - 5.0 / 16.0).abs() < 1e-15);
/// assert_eq!(binomial_tail(4, 0.5, 0)?, 1.0);
/// assert_eq!(binomial_tail(4, 0.5, 5)?, 0.0);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn binomial_tail(trials: u64, success_probability: f64, at_least: u64) -> Result<f64> {
    let p = crate::error::check_range(
        "success_probability",
        "a probability in [0, 1]",
        success_probability,
        0.0,
        1.0,
    )?;
    Ok(LogBinomial::new(trials, p, 1.0 - p)
        .ln_upper_tail(at_least)
        .exp()
        .min(1.0))
}

/// `ln β` for `β = 1 − confidence`, with `confidence ∈ (0, 1)` checked.
fn ln_beta(confidence: f64) -> Result<f64> {
    if confidence.is_finite() && confidence > 0.0 && confidence < 1.0 {
        Ok((-confidence).ln_1p())
    } else {
        Err(AccountingError::InvalidArgument {
            name: "confidence",
            expected: "a number in (0, 1), e.g. 0.95",
            actual: confidence,
        })
    }
}

/// Scores finite, one inclusion bit per score.
fn check_scores(scores: &[f64], included: &[bool]) -> Result<()> {
    if included.len() != scores.len() {
        return Err(AccountingError::LengthMismatch {
            name: "included",
            other: "scores",
            expected: scores.len(),
            actual: included.len(),
        });
    }
    if let Some(&bad) = scores.iter().find(|s| !s.is_finite()) {
        return Err(AccountingError::InvalidArgument {
            name: "scores",
            expected: "finite numbers",
            actual: bad,
        });
    }
    Ok(())
}

/// At least one guess, at most one per canary.
fn check_guesses(guesses: Guesses, canaries: usize) -> Result<()> {
    if guesses.total() == 0 {
        return Err(AccountingError::InvalidCount {
            name: "guesses",
            expected: "at least one guess",
            actual: 0,
        });
    }
    check_at_most(
        "guesses",
        "the number of canaries",
        guesses.total(),
        canaries,
    )
}

fn check_at_most(name: &'static str, what: &'static str, value: usize, limit: usize) -> Result<()> {
    if value <= limit {
        Ok(())
    } else {
        Err(AccountingError::CountTooLarge {
            name,
            what,
            limit: limit as u64,
            actual: value as u64,
        })
    }
}

/// Canary indices by increasing score, ties by index.
fn ranking(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_unstable_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    order
}

/// Correct guesses for a ranking from [`ranking`]; `guesses.total() ≤ order.len()`.
fn correct_in_ranking(order: &[usize], included: &[bool], guesses: Guesses) -> usize {
    let lowest = order[..guesses.excluded]
        .iter()
        .filter(|&&i| !included[i])
        .count();
    let highest = order[order.len() - guesses.included..]
        .iter()
        .filter(|&&i| included[i])
        .count();
    lowest + highest
}
