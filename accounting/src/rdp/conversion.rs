//! Conversion of a Rényi-DP curve into (ε, δ)-DP.

use crate::error::{check_delta, check_epsilon, AccountingError, Result};

/// An ε together with the Rényi order that achieves it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpsilonAt {
    /// The smallest ε over the orders (never negative).
    pub epsilon: f64,
    /// The order achieving it (the first one on ties); `None` when no order is involved
    /// (δ = 0).
    pub order: Option<f64>,
}

/// A δ together with the Rényi order that achieves it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaAt {
    /// The smallest δ over the orders, in `[0, 1]`.
    pub delta: f64,
    /// The order achieving it (the first one on ties).
    pub order: Option<f64>,
}

fn check_curve(orders: &[f64], rdp: &[f64]) -> Result<()> {
    if orders.is_empty() {
        return Err(AccountingError::EmptyOrders);
    }
    if rdp.len() != orders.len() {
        return Err(AccountingError::InvalidCount {
            name: "rdp",
            expected: "one RDP value per order",
            actual: rdp.len() as u64,
        });
    }
    for &a in orders {
        crate::rdp::check_order(a)?;
    }
    for &r in rdp {
        if r.is_nan() || r < 0.0 {
            return Err(AccountingError::InvalidArgument {
                name: "rdp",
                expected: "non-negative RDP values (or +inf)",
                actual: r,
            });
        }
    }
    Ok(())
}

/// ε at `δ` from an RDP curve, minimised over the orders.
///
/// Per order α with RDP `r` (as dp-accounting's `compute_epsilon`):
/// * if `δ² + e^{−r} − 1 > 0` the KL/Pinsker bound `δ ≥ √(1 − e^{−r})` already gives ε = 0;
/// * otherwise `ε_α = r + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)` — Balle et al. 2020 (arXiv
///   2002.12321) Thm 21 = Canonne, Kamath & Steinke 2020 (arXiv 2004.00010) Prop. 12, valid for
///   every α > 1 (dp-accounting only uses it for α > 1.01; our default orders include 1.01…1.09,
///   and it is evaluated stably there);
/// * α = ∞ gives `ε_α = r`.
///
/// The result is `max(0, min_α ε_α)`; `δ = 0` gives 0 if every `r = 0` and ∞ otherwise.
///
/// ```
/// use burn_vmap_accounting::rdp_to_epsilon;
///
/// // Gaussian mechanism, σ = 1: RDP α/2 at every order.
/// let orders = [2.0, 4.0, 8.0, 16.0];
/// let rdp: Vec<f64> = orders.iter().map(|a| a / 2.0).collect();
/// let at = rdp_to_epsilon(&orders, &rdp, 1e-5)?;
/// assert_eq!(at.order, Some(4.0));
/// assert!((at.epsilon - 5.08786).abs() < 1e-5);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn rdp_to_epsilon(orders: &[f64], rdp: &[f64], delta: f64) -> Result<EpsilonAt> {
    check_curve(orders, rdp)?;
    let delta = check_delta(delta)?;
    if delta == 0.0 {
        let epsilon = if rdp.iter().all(|&r| r == 0.0) {
            0.0
        } else {
            f64::INFINITY
        };
        return Ok(EpsilonAt {
            epsilon,
            order: None,
        });
    }
    let (ln_delta, delta_sq) = (delta.ln(), delta * delta);
    let mut best = EpsilonAt {
        epsilon: f64::INFINITY,
        order: None,
    };
    for (&a, &r) in orders.iter().zip(rdp) {
        let eps = if r == f64::INFINITY {
            f64::INFINITY
        } else if delta_sq + (-r).exp_m1() > 0.0 {
            0.0
        } else if a == f64::INFINITY {
            r
        } else {
            r + (-1.0 / a).ln_1p() - (ln_delta + a.ln()) / (a - 1.0)
        };
        if best.order.is_none() || eps < best.epsilon {
            best = EpsilonAt {
                epsilon: eps,
                order: Some(a),
            };
        }
    }
    best.epsilon = best.epsilon.max(0.0);
    Ok(best)
}

/// δ at `ε` from an RDP curve, minimised over the orders (dp-accounting's `compute_delta`):
/// per order `min(√(1 − e^{−r}), exp((α−1)(r − ε + ln(1 − 1/α)) − ln α))`, capped at 1.
///
/// ```
/// use burn_vmap_accounting::{rdp_to_delta, rdp_to_epsilon};
///
/// let orders = [2.0, 4.0, 8.0, 16.0];
/// let rdp: Vec<f64> = orders.iter().map(|a| a / 2.0).collect();
/// let eps = rdp_to_epsilon(&orders, &rdp, 1e-5)?.epsilon;
/// let back = rdp_to_delta(&orders, &rdp, eps)?.delta;
/// assert!((back / 1e-5 - 1.0).abs() < 1e-9);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn rdp_to_delta(orders: &[f64], rdp: &[f64], epsilon: f64) -> Result<DeltaAt> {
    check_curve(orders, rdp)?;
    let epsilon = check_epsilon(epsilon)?;
    let mut best_log = f64::INFINITY;
    let mut order = None;
    for (&a, &r) in orders.iter().zip(rdp) {
        let mut log_delta = if r == 0.0 {
            f64::NEG_INFINITY
        } else if r == f64::INFINITY {
            0.0
        } else {
            0.5 * crate::special::log1m_exp(-r)
        };
        let bound = if epsilon == f64::INFINITY {
            if r == f64::INFINITY {
                0.0
            } else {
                f64::NEG_INFINITY
            }
        } else if a == f64::INFINITY {
            if r < epsilon {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else {
            (a - 1.0) * (r - epsilon + (-1.0 / a).ln_1p()) - a.ln()
        };
        if bound < log_delta {
            log_delta = bound;
        }
        if order.is_none() || log_delta < best_log {
            best_log = log_delta;
            order = Some(a);
        }
    }
    Ok(DeltaAt {
        delta: best_log.exp().min(1.0),
        order,
    })
}
