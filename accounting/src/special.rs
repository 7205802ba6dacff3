//! Special functions used by the accountants: the standard normal CDF and its logarithm
//! (accurate far into the lower tail), its inverse, and numerically stable log-space helpers.
//!
//! `erfc` comes from [`libm`] (a port of musl's implementation, accurate to a few ulp in relative
//! terms down to its underflow at `x ≈ 27`); the far lower tail of `log Φ` uses the asymptotic
//! (Laplace continued-fraction) expansion of Mills' ratio, Abramowitz & Stegun 26.2.12.

use std::f64::consts::{FRAC_1_SQRT_2, LN_2, PI};

/// `½ ln(2π)`.
pub(crate) const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;

/// Standard normal CDF `Φ(x)`, with full relative accuracy in the lower tail.
pub(crate) fn ndtr(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    0.5 * libm::erfc(-x * FRAC_1_SQRT_2)
}

/// `ln Φ(x)`, accurate for every `x` (no underflow for very negative `x`, no cancellation for
/// large positive `x`).
pub(crate) fn log_ndtr(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return 0.0;
    }
    if x == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    if x > 0.0 {
        // Φ(x) = 1 − Φ(−x), with Φ(−x) accurate to a few ulp.
        return (-ndtr(-x)).ln_1p();
    }
    if x > -20.0 {
        return ndtr(x).ln();
    }
    // x ≤ −20: ln Φ(x) = −x²/2 − ln(−x) − ½ ln 2π + ln S(x), S the asymptotic Mills series.
    -0.5 * x * x - (-x).ln() - HALF_LN_2PI + log_mills_series(x)
}

/// `ln Φ(−y) + y²/2` for any real `y` (the log of `√(2π)`·Mills' ratio times `φ`-free factor):
/// stays O(ln y) for large `y` instead of cancelling two huge numbers.
pub(crate) fn log_ndtr_neg_scaled(y: f64) -> f64 {
    if y < 20.0 {
        log_ndtr(-y) + 0.5 * y * y
    } else {
        -y.ln() - HALF_LN_2PI + log_mills_series(-y)
    }
}

/// `ln(1 − 1/x² + 3/x⁴ − 15/x⁶ + …)` for `x ≤ −20` (terms decrease until `k ≈ x²/2 ≥ 200`).
fn log_mills_series(x: f64) -> f64 {
    let inv_x2 = 1.0 / (x * x);
    let mut sum = 1.0;
    let mut term = 1.0;
    for k in 1..60 {
        term *= -((2 * k - 1) as f64) * inv_x2;
        let next = sum + term;
        if next == sum {
            break;
        }
        sum = next;
    }
    sum.ln()
}

/// The `x` with `ln Φ(x) = log_p`, for `log_p < 0` (Newton's method on `ln Φ`, started from the
/// tail asymptote; quadratic convergence, relative accuracy ~1e-15).
pub(crate) fn log_ndtri(log_p: f64) -> f64 {
    if log_p >= 0.0 {
        return f64::INFINITY;
    }
    if log_p == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    // Initial guess: lower-tail asymptote when p is small, 0 otherwise.
    let mut x = if log_p < -2.0 {
        let t = (-2.0 * log_p).sqrt();
        -(t - ((t * t).ln() + (2.0 * PI).ln()) / (2.0 * t))
    } else {
        0.0
    };
    for _ in 0..100 {
        let lf = log_ndtr(x);
        // d/dx ln Φ(x) = φ(x) / Φ(x).
        let log_pdf = -0.5 * x * x - HALF_LN_2PI;
        let slope = (log_pdf - lf).exp();
        let step = (lf - log_p) / slope;
        x -= step;
        if step.abs() <= 1e-15 * x.abs().max(1.0) {
            break;
        }
    }
    x
}

/// `ln(eᵃ + eᵇ)`.
pub(crate) fn log_add_exp(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    if hi == f64::INFINITY {
        return f64::INFINITY;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// `ln(1 − eˣ)` for `x ≤ 0` (Mächler's two-branch evaluation).
pub(crate) fn log1m_exp(x: f64) -> f64 {
    if x > -LN_2 {
        (-x.exp_m1()).ln()
    } else {
        (-x.exp()).ln_1p()
    }
}

/// `ln(1 + eˣ)` (softplus) without overflow.
pub(crate) fn log1p_exp(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ndtr_matches_reference_values() {
        // Values from mpmath (50 digits), rounded to f64.
        let cases = [
            (0.0, -std::f64::consts::LN_2),
            (-1.0, -1.841_021_645_009_263_5),
            (-10.0, -53.231_285_150_512_47),
            (-19.5, -194.016_965_777_497_5),
            (-20.5, -214.066_728_963_263_8),
            (-40.0, -804.608_442_013_753_8),
            (-1000.0, -500_007.826_694_812_2),
            (7.0, -1.279_812_543_886_654e-12),
        ];
        for (x, want) in cases {
            let got = log_ndtr(x);
            assert!(
                ((got - want) / want).abs() < 2e-14,
                "log_ndtr({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn log_ndtri_inverts_log_ndtr() {
        for &lp in &[-1e-3, -0.5, -2.0, -50.0 - LN_2, -700.0, -5000.0] {
            let x = log_ndtri(lp);
            assert!(((log_ndtr(x) - lp) / lp).abs() < 1e-14, "{lp}: {x}");
        }
    }

    #[test]
    fn scaled_tail_is_continuous_at_the_switch() {
        let a = log_ndtr_neg_scaled(20.0 - 1e-12);
        let b = log_ndtr_neg_scaled(20.0 + 1e-12);
        assert!((a - b).abs() < 1e-12);
    }
}
