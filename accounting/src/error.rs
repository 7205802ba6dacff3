//! The error type of the privacy accountants.

/// Why an accounting request was refused.
///
/// Every variant names what was wrong, what was expected and what was given, so that the
/// message can be shown to a user as is. No function of this module panics on bad input: it
/// returns one of these instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AccountingError {
    /// A real-valued argument is outside its domain (NaN, infinite, negative, out of range).
    #[error("invalid argument `{name}`: expected {expected}, got {actual}")]
    InvalidArgument {
        /// The argument's name, e.g. `sampling_rate`.
        name: &'static str,
        /// The domain it must lie in, e.g. `a number in [0, 1]`.
        expected: &'static str,
        /// The value that was given.
        actual: f64,
    },
    /// An integer argument (a count of steps) is outside its domain.
    #[error("invalid argument `{name}`: expected {expected}, got {actual}")]
    InvalidCount {
        /// The argument's name, e.g. `count`.
        name: &'static str,
        /// The domain it must lie in.
        expected: &'static str,
        /// The value that was given.
        actual: u64,
    },
    /// Two arguments that pair up element by element (scores and inclusion bits) have
    /// different lengths.
    #[error(
        "invalid argument `{name}`: expected {expected} elements (one per element of \
         `{other}`), got {actual}"
    )]
    LengthMismatch {
        /// The argument's name, e.g. `included`.
        name: &'static str,
        /// The argument whose length it must match, e.g. `scores`.
        other: &'static str,
        /// The length it must have.
        expected: usize,
        /// Its length.
        actual: usize,
    },
    /// A count is larger than the size it is drawn from (more guesses than canaries, more
    /// correct guesses than guesses).
    #[error("invalid argument `{name}`: expected at most {limit} ({what}), got {actual}")]
    CountTooLarge {
        /// The argument's name, e.g. `guesses`.
        name: &'static str,
        /// What the limit is, e.g. `the number of canaries`.
        what: &'static str,
        /// The largest allowed value.
        limit: u64,
        /// The value that was given.
        actual: u64,
    },
    /// An RDP accountant was given no orders to evaluate.
    #[error("invalid argument `orders`: expected at least one Rényi order, got an empty list")]
    EmptyOrders,
    /// Noise calibration could not reach the target: even the largest noise multiplier that was
    /// tried gives an ε above the target (e.g. a target ε of 0 with δ = 0).
    #[error(
        "calibration target unreachable: ε = {target_epsilon} at δ = {delta} needs more noise than \
         σ = {largest_noise_multiplier} (which gives ε = {epsilon_at_largest})"
    )]
    TargetUnreachable {
        /// The requested ε.
        target_epsilon: f64,
        /// The requested δ.
        delta: f64,
        /// The largest noise multiplier tried.
        largest_noise_multiplier: f64,
        /// The ε it gives.
        epsilon_at_largest: f64,
    },
    /// A privacy loss distribution would need more grid points than the accountant's limit.
    #[error(
        "privacy loss distribution too large: {what} needs {required} grid points, the limit is \
         {limit}; use a coarser discretization interval than {discretization} (or raise the limit)"
    )]
    PldTooLarge {
        /// Which step needed the memory (`discretising one step`, `composing`).
        what: &'static str,
        /// Grid points needed.
        required: u64,
        /// The accountant's limit ([`crate::PldAccountant::with_max_points`]).
        limit: u64,
        /// The discretization interval in use.
        discretization: f64,
    },
}

/// Shorthand for results of this module.
pub type Result<T, E = AccountingError> = std::result::Result<T, E>;

/// Checks that `value` is finite and in `[lo, hi]`.
pub(crate) fn check_range(
    name: &'static str,
    expected: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
) -> Result<f64> {
    if value.is_finite() && value >= lo && value <= hi {
        Ok(value)
    } else {
        Err(AccountingError::InvalidArgument {
            name,
            expected,
            actual: value,
        })
    }
}

/// Checks `δ ∈ [0, 1)`.
pub(crate) fn check_delta(delta: f64) -> Result<f64> {
    if delta.is_finite() && (0.0..1.0).contains(&delta) {
        Ok(delta)
    } else {
        Err(AccountingError::InvalidArgument {
            name: "delta",
            expected: "a number in [0, 1)",
            actual: delta,
        })
    }
}

/// Checks `ε ≥ 0` (`+∞` allowed: the δ at ε = ∞ is the mass of infinite privacy loss).
pub(crate) fn check_epsilon(epsilon: f64) -> Result<f64> {
    if epsilon >= 0.0 {
        Ok(epsilon)
    } else {
        Err(AccountingError::InvalidArgument {
            name: "epsilon",
            expected: "a non-negative number (or +inf)",
            actual: epsilon,
        })
    }
}
