//! Rényi DP of Poisson subsampling for *any* base mechanism (Zhu & Wang 2019), and its use for
//! the Poisson-subsampled discrete Gaussian.
//!
//! Zhu & Wang, "Poisson Subsampled Rényi Differential Privacy", ICML 2019 (PMLR 97), Theorem 5
//! (the general upper bound): if a mechanism `M` satisfies `(l, ε(l))`-RDP for every integer
//! `l ≥ 2` under add/remove-one neighbours, then `M` applied to a Poisson subsample at rate `q`
//! satisfies `(α, ε'(α))`-RDP at every integer `α ≥ 2`, with
//!
//! ```text
//! S_α = (1−q)^{α−1}(αq − q + 1) + C(α,2) q² (1−q)^{α−2} e^{ε(2)}
//!       + 3 Σ_{l=3}^{α} C(α,l) (1−q)^{α−l} q^l e^{(l−1)ε(l)}
//! ε'(α) = ln(S_α) / (α − 1).
//! ```
//!
//! The first term is the `l = 0` and `l = 1` terms of the binomial expansion of
//! `1 = Σ_l C(α,l)(1−q)^{α−l}q^l`, so
//!
//! ```text
//! S_α − 1 = Σ_{l=2}^{α} C(α,l) (1−q)^{α−l} q^l (c_l e^{(l−1)ε(l)} − 1),   c_2 = 1, c_{l≥3} = 3,
//! ```
//!
//! a sum of non-negative terms. As for the Gaussian (`log_a`), `ln(S_α − 1)` is summed in log
//! space and `ε' = ln(1 + e^{ln(S_α−1)})/(α−1)`, which keeps full relative precision when
//! `S_α` is within `1e-12` of 1. With `c_l = 1` for every `l` and `ε(l) = l/(2σ²)` the sum is
//! exactly Mironov, Talwar & Zhang's integer-order `A_α − 1` of the continuous Gaussian (the
//! unit tests check this).

use crate::error::{check_range, AccountingError, Result};
use crate::event::PoissonGaussian;
use crate::rdp::check_order;
use crate::rdp::log_a::{ln_int, log_expm1, SignedLogSum};
use crate::special::{log1p_exp, log_add_exp};

/// The largest order [`poisson_subsampled_rdp_bound`] evaluates (its sum has `order − 1` terms).
pub const MAX_SUBSAMPLED_ORDER: u64 = 1_000_000;

/// Zhu & Wang's factor on the terms `l ≥ 3`.
const ZW_FACTOR: f64 = 3.0;

/// Zhu & Wang's general upper bound on the Rényi DP of order `order` of a mechanism applied to
/// a Poisson subsample at rate `sampling_rate`, given the base mechanism's RDP curve
/// `base_rdp(l)` at integer orders `l` (Zhu & Wang, "Poisson Subsampled Rényi Differential
/// Privacy", ICML 2019, Theorem 5):
///
/// ```text
/// ε'(α) = 1/(α−1) · ln{ (1−q)^{α−1}(αq − q + 1) + C(α,2) q² (1−q)^{α−2} e^{ε(2)}
///                       + 3 Σ_{l=3}^{α} C(α,l) (1−q)^{α−l} q^l e^{(l−1)ε(l)} },
/// ```
///
/// with `ε(l) = base_rdp(l)`, for add/remove-one neighbouring datasets.
///
/// **Assumption on the base mechanism**: it satisfies `(l, base_rdp(l))`-RDP for every integer
/// `2 ≤ l ≤ order`, in both directions of the add/remove relation (e.g. the discrete Gaussian
/// with noise multiplier σ: `base_rdp(l) = l/(2σ²)`, Canonne, Kamath & Steinke 2020). Only
/// integer orders are covered by the theorem.
///
/// * `sampling_rate = 0` → 0 (the data is never touched; `base_rdp` is not called);
/// * `sampling_rate = 1` → the bound with only its `l = α` term: `ε(α) + ln 3/(α−1)` for
///   `α ≥ 3` and `ε(2)` for `α = 2` (`base_rdp` is called at `order` only). The theorem is
///   not tight there: the true value is `ε(α)`;
/// * any `base_rdp(l) = +∞` (`l ≤ order`) → `+∞`;
/// * otherwise `base_rdp` is called at `l = 2, …, order`, and the sum is evaluated in log
///   space as `ln(S_α − 1)` (a sum of non-negative terms), so the result keeps ~1e-13 relative
///   precision even when it is tiny (small q, large σ). It is never below the exact bound
///   beyond floating-point roundoff.
///
/// # Errors
///
/// `sampling_rate` outside `[0, 1]` (or NaN), `order` outside `[2, MAX_SUBSAMPLED_ORDER]`, or a
/// `base_rdp` value that is negative or NaN: [`AccountingError::InvalidArgument`] or
/// [`AccountingError::InvalidCount`] naming the argument.
///
/// ```
/// use burn_vmap_accounting::poisson_subsampled_rdp_bound;
///
/// // The discrete Gaussian with σ = 1.1, sampled at q = 0.01, at order 10.
/// let sigma: f64 = 1.1;
/// let eps = poisson_subsampled_rdp_bound(0.01, |l| l as f64 / (2.0 * sigma * sigma), 10)?;
/// assert!((eps / 0.00126376183785616752490138 - 1.0).abs() < 1e-12); // mpmath, 50 digits
/// // q = 1: only the l = α term, ε(α) + ln 3/(α−1).
/// let full = poisson_subsampled_rdp_bound(1.0, |l| l as f64 / 8.0, 3)?;
/// assert!((full - (3.0 / 8.0 + 3f64.ln() / 2.0)).abs() < 1e-15);
/// assert!(poisson_subsampled_rdp_bound(0.01, |l| l as f64, 1).is_err()); // `order` ≥ 2
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn poisson_subsampled_rdp_bound(
    sampling_rate: f64,
    base_rdp: impl Fn(u64) -> f64,
    order: u64,
) -> Result<f64> {
    let q = check_range(
        "sampling_rate",
        "a number in [0, 1]",
        sampling_rate,
        0.0,
        1.0,
    )?;
    if !(2..=MAX_SUBSAMPLED_ORDER).contains(&order) {
        return Err(AccountingError::InvalidCount {
            name: "order",
            expected: "an integer Rényi order in [2, 1000000]",
            actual: order,
        });
    }
    let checked = |l: u64| -> Result<f64> {
        let r = base_rdp(l);
        if r >= 0.0 {
            Ok(r)
        } else {
            Err(AccountingError::InvalidArgument {
                name: "base_rdp",
                expected: "non-negative RDP values (or +inf)",
                actual: r,
            })
        }
    };
    bound(q, order, ZW_FACTOR, checked)
}

/// [`poisson_subsampled_rdp_bound`] for checked `q` and `order`, with factor `high_factor ≥ 1`
/// on the terms `l ≥ 3` (3 in the theorem; 1 gives the Gaussian's exact formula).
pub(crate) fn bound(
    q: f64,
    order: u64,
    high_factor: f64,
    mut base_rdp: impl FnMut(u64) -> Result<f64>,
) -> Result<f64> {
    if q == 0.0 {
        return Ok(0.0);
    }
    let a = order as f64;
    let factor = |l: u64| if l >= 3 { high_factor } else { 1.0 };
    if q == 1.0 {
        // S_α = c_α e^{(α−1)ε(α)}: every other term has a factor (1 − q) = 0.
        let r = base_rdp(order)?;
        return Ok(r + factor(order).ln() / (a - 1.0));
    }
    Ok(log1p_exp(log_excess(q, order, high_factor, base_rdp)?) / (a - 1.0))
}

/// `ln(S_α − 1)` for `0 < q < 1` (`+∞` when a base RDP value is).
fn log_excess(
    q: f64,
    order: u64,
    high_factor: f64,
    mut base_rdp: impl FnMut(u64) -> Result<f64>,
) -> Result<f64> {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let a = order as f64;
    let mut sum = SignedLogSum::new();
    // ln C(α, 1) = ln α; advance to C(α, l) by the ratio (α − l + 1)/l.
    let mut log_c = ln_int(order);
    for l in 2..=order {
        let fl = l as f64;
        log_c += ln_int(order - l + 1) - ln_int(l);
        let x = (fl - 1.0) * base_rdp(l)?;
        if x == f64::INFINITY {
            return Ok(f64::INFINITY);
        }
        // ln(c·eˣ − 1) ≥ 0 for x ≥ 0: for c = 1 it is ln(expm1(x)); for c ≥ 2 it is
        // x + ln(c − e^{−x}), with c − e^{−x} ≥ 1 (no cancellation).
        let c = if l >= 3 { high_factor } else { 1.0 };
        let log_gap = if c == 1.0 {
            log_expm1(x)
        } else {
            x + (c - (-x).exp()).ln()
        };
        sum.add(log_c + fl * lq + (a - fl) * l1q + log_gap, true);
    }
    Ok(sum.ln_value().unwrap_or(f64::NEG_INFINITY))
}

/// RDP of one Poisson-subsampled **discrete** Gaussian step at order `alpha > 1`: the smaller
/// of Zhu & Wang's bound at `⌈α⌉` and the convexity bound at `α` (see
/// [`poisson_discrete_gaussian_rdp`]).
pub(crate) fn discrete_rdp_single(q: f64, sigma: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if alpha.is_infinite() || sigma == 0.0 {
        return f64::INFINITY;
    }
    let two_s2 = 2.0 * sigma * sigma;
    if q == 1.0 {
        return alpha / two_s2;
    }
    // ln(1 − q + q·e^{(α−1)ε(α)})/(α−1), ε(α) = α/(2σ²).
    let convex =
        log_add_exp((-q).ln_1p(), q.ln() + (alpha - 1.0) * (alpha / two_s2)) / (alpha - 1.0);
    let n = alpha.ceil();
    if n > MAX_SUBSAMPLED_ORDER as f64 {
        return convex;
    }
    let zw = bound(q, n as u64, ZW_FACTOR, |l| Ok(l as f64 / two_s2)).unwrap_or(f64::INFINITY);
    zw.min(convex)
}

/// The RDP of **one** step of the Poisson-subsampled *discrete* Gaussian mechanism at each of
/// `orders`: every example joins the batch with probability q, and discrete Gaussian noise
/// `N_ℤ(0, σ²)` (Canonne, Kamath & Steinke 2020, independent coordinates) is added to the sum,
/// σ being the noise multiplier relative to the sum's L2 sensitivity on the integer lattice
/// (with clipping norm C, after scaling and rounding: the rounded gradients' L2 norm bound).
///
/// Proven ingredients, no more:
///
/// * the base mechanism (`q = 1`) satisfies `(α, α/(2σ²))`-RDP for every `α ≥ 1` (CKS 2020);
/// * at integer `α ≥ 2`, Zhu & Wang's general bound ([`poisson_subsampled_rdp_bound`]) with
///   `ε(l) = l/(2σ²)`;
/// * at every `α`, the convexity bound `ln(1 − q + q·e^{(α−1)α/(2σ²)})/(α−1)` (joint convexity
///   of `e^{(α−1)D_α}` over the mixture of "example in" and "example out"); it gives `α/(2σ²)`,
///   the exact value, at `q = 1`, where Zhu & Wang's bound adds `ln 3/(α−1)`;
/// * RDP is non-decreasing in `α`, so a fractional `α` gets the bound of `⌈α⌉`.
///
/// Each order gets the smaller of the bounds that apply. `q = 0` → 0; `σ = 0` or `α = ∞` → ∞.
/// At integer orders the result is ≥ the continuous Gaussian's exact RDP
/// ([`crate::poisson_gaussian_rdp`]) and ≤ it + `ln 3/(α−1)`.
///
/// # Errors
///
/// An invalid `event` or an order `≤ 1` (or NaN): [`AccountingError::InvalidArgument`] naming
/// `sampling_rate`, `noise_multiplier` or `orders`.
///
/// ```
/// use burn_vmap_accounting::{poisson_discrete_gaussian_rdp, poisson_gaussian_rdp, PoissonGaussian};
///
/// let step = PoissonGaussian::new(0.01, 1.1)?;
/// let discrete = poisson_discrete_gaussian_rdp(step, &[2.0, 10.0, 10.5])?;
/// let continuous = poisson_gaussian_rdp(step, &[2.0, 10.0])?;
/// assert_eq!(discrete[0], continuous[0]); // order 2 has no factor 3
/// // Order 10: 1.2638e-3 against the Gaussian's 8.0758e-4 (the factor 3 on the terms l ≥ 3).
/// assert!((discrete[1] / continuous[1] - 1.5649).abs() < 1e-4);
/// assert!(discrete[1] <= continuous[1] + 3f64.ln() / 9.0);
/// assert!(discrete[2] >= discrete[1]); // order 10.5 gets the bound of order 11
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn poisson_discrete_gaussian_rdp(event: PoissonGaussian, orders: &[f64]) -> Result<Vec<f64>> {
    event.validate()?;
    for &a in orders {
        check_order(a)?;
    }
    Ok(orders
        .iter()
        .map(|&a| discrete_rdp_single(event.sampling_rate, event.noise_multiplier, a))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdp::log_a::log_a_minus_1_int;
    use proptest::prelude::*;

    fn rel(a: f64, b: f64) -> f64 {
        if a == b {
            0.0
        } else {
            ((a - b) / b).abs()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// With factor 1 on every term and ε(l) = l/(2σ²), the sum is Mironov's A_α − 1.
        #[test]
        fn should_equal_mironov_integer_formula_with_factor_one(
            q in prop_oneof![1e-9f64..1.0, (-9.0f64..0.0).prop_map(|e| 10f64.powf(e))],
            sigma in 0.3f64..=50.0,
            alpha in 2u64..200,
        ) {
            prop_assume!(q > 0.0 && q < 1.0);
            let two_s2 = 2.0 * sigma * sigma;
            let ours = bound(q, alpha, 1.0, |l| Ok(l as f64 / two_s2)).unwrap();
            let mironov = log1p_exp(log_a_minus_1_int(q, sigma, alpha)) / (alpha as f64 - 1.0);
            prop_assert!(rel(ours, mironov) < 1e-12, "q={q} σ={sigma} α={alpha}: {ours} vs {mironov}");
        }
    }

    #[test]
    fn should_keep_relative_precision_when_tiny() {
        // q = 1e-6, σ = 1e3, α = 2: ε' = ln(1 + q²·expm1(ε(2))), ε(2) = 2/(2σ²) = 1e-6, which
        // is 1.0000005000001667e-18 (the ln1p changes it by a relative 1e-18).
        let got = bound(1e-6, 2, ZW_FACTOR, |l| Ok(l as f64 / 2e6)).unwrap();
        let want = 1e-12 * 1e-6f64.exp_m1();
        assert!(rel(got, want) < 1e-14, "{got} vs {want}");
    }

    #[test]
    fn should_return_infinity_when_the_base_rdp_is_infinite() {
        let inf = |l: u64| if l == 5 { f64::INFINITY } else { 0.1 };
        assert_eq!(poisson_subsampled_rdp_bound(0.1, inf, 7), Ok(f64::INFINITY));
        // Orders below 5 never look at l = 5.
        let flat = poisson_subsampled_rdp_bound(0.1, |_| 0.1, 4);
        assert_eq!(poisson_subsampled_rdp_bound(0.1, inf, 4), flat);
        assert_eq!(poisson_subsampled_rdp_bound(0.0, inf, 7), Ok(0.0));
        assert_eq!(discrete_rdp_single(0.1, 0.0, 3.0), f64::INFINITY);
    }

    #[test]
    fn should_use_the_convexity_bound_only_near_q_one() {
        let (q, sigma) = (0.999, 1.0);
        let zw = poisson_subsampled_rdp_bound(q, |l| l as f64 / 2.0, 8).unwrap();
        let got = discrete_rdp_single(q, sigma, 8.0);
        assert!(got < zw && got < 4.0, "{got} {zw}");
        let zw = poisson_subsampled_rdp_bound(0.1, |l| l as f64 / 2.0, 8).unwrap();
        assert_eq!(discrete_rdp_single(0.1, sigma, 8.0), zw);
    }
}
