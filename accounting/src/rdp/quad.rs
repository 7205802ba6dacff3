//! Numerical integration of `A_α − 1 = E[g(u)]` in log space: the fallback of the series
//! where it would converge slowly or cancel (see `log_a`), and the positive integrand
//! `g(u) = (1+u)^α − 1 − αu` it shares with the series' constant terms.

use crate::special::{log1m_exp, log_add_exp, HALF_LN_2PI};

/// `ln g(u)` for `u = q·(eᴸ − 1)` given directly (used for the constant `g(−q)`).
pub(crate) fn log_g_at(u: f64, alpha: f64) -> f64 {
    let lp = u.ln_1p();
    log_g(lp, u.abs().ln(), u > 0.0, alpha - 1.0)
}

/// `ln g(u)`, `g(u) = (1+u)^α − 1 − αu`, from `lp = ln(1+u)`, `ln|u|` and the sign of `u`,
/// `β = α − 1 > 0`. Uses `g = β·h₁(u) + (1+u)·h₂(β·lp)` with `h₁(u) = (1+u)ln(1+u) − u ≥ 0` and
/// `h₂(x) = eˣ − 1 − x ≥ 0`: a sum of two non-negative terms, so no cancellation, and
/// everything in log space (u may be `e^(10⁷)`).
pub(crate) fn log_g(lp: f64, log_abs_u: f64, u_positive: bool, beta: f64) -> f64 {
    if log_abs_u == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let log_h1 = if log_abs_u < 0.3f64.ln() {
        let u = if u_positive {
            log_abs_u.exp()
        } else {
            -log_abs_u.exp()
        };
        // h₁(u) = u²·Σ_{k≥2} (−u)^{k−2}/(k(k−1)).
        let mut s = 0.0;
        let mut p = 1.0;
        for k in 2..80 {
            let k = k as f64;
            let t = p / (k * (k - 1.0));
            s += t;
            if t.abs() < 1e-17 * s.abs() {
                break;
            }
            p *= -u;
        }
        2.0 * log_abs_u + s.ln()
    } else if log_abs_u < 30.0 {
        let u = if u_positive {
            log_abs_u.exp()
        } else {
            -log_abs_u.exp()
        };
        ((1.0 + u) * lp - u).ln()
    } else {
        // h₁ = u(lp − 1) + lp, u huge.
        log_abs_u + (lp - 1.0 + lp * (-log_abs_u).exp()).ln()
    };
    let x = beta * lp;
    let log_h2 = if x.abs() < 0.5 {
        // h₂(x) = x²·Σ_{k≥0} xᵏ/(k+2)!.
        let mut s = 0.0;
        let mut t = 0.5f64;
        for k in 0..40 {
            s += t;
            if t.abs() < 1e-17 * s {
                break;
            }
            t *= x / (k as f64 + 3.0);
        }
        2.0 * x.abs().ln() + s.ln()
    } else if x > 0.0 {
        x + log1m_exp(x.ln_1p() - x)
    } else {
        (x.exp_m1() - x).ln()
    };
    log_add_exp(beta.ln() + log_h1, lp + log_h2)
}

/// `ln g(u(t)) + ln φ(t)`: the integrand of `A_α − 1 = ∫ g(u(t)) φ(t) dt` over the standardised
/// noise `t = z/σ`, with `u(t) = q·(e^{L(t)} − 1)`, `L(t) = t/σ − 1/(2σ²)`.
pub(crate) fn log_integrand(t: f64, q: f64, sigma: f64, alpha: f64) -> f64 {
    let l = t / sigma - 0.5 / (sigma * sigma);
    let (lp, log_abs_u) = if l < 700.0 {
        // u representable: ln(1+u) straight from u keeps its relative precision when u is tiny
        // (large σ), where ln(1 − q + q·eᴸ) from logs would cancel.
        let u = q * l.exp_m1();
        (u.ln_1p(), u.abs().ln())
    } else {
        let (lq, l1q) = (q.ln(), (-q).ln_1p());
        (log_add_exp(l1q, lq + l), lq + l + log1m_exp(-l))
    };
    log_g(lp, log_abs_u, l > 0.0, alpha - 1.0) - 0.5 * t * t - HALF_LN_2PI
}

/// Gauss–Legendre nodes and weights on [−1, 1] (Newton on the Legendre recurrence).
fn gauss_legendre(n: usize) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let mut x = (std::f64::consts::PI * (k as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut dp = 0.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, x);
            for m in 2..=n {
                let m = m as f64;
                let p2 = ((2.0 * m - 1.0) * x * p1 - (m - 1.0) * p0) / m;
                p0 = p1;
                p1 = p2;
            }
            dp = n as f64 * (x * p1 - p0) / (x * x - 1.0);
            let dx = p1 / dp;
            x -= dx;
            if dx.abs() < 1e-16 {
                break;
            }
        }
        out.push((x, 2.0 / ((1.0 - x * x) * dp * dp)));
    }
    out
}

fn gl20() -> &'static [(f64, f64)] {
    static NODES: std::sync::OnceLock<Vec<(f64, f64)>> = std::sync::OnceLock::new();
    NODES.get_or_init(|| gauss_legendre(20))
}

/// `∫_c^d exp(ℓ(t) − m) dt` by 20-point Gauss–Legendre, refined by halving until two levels
/// agree to `abs_tol`.
fn panel(f: &dyn Fn(f64) -> f64, c: f64, d: f64, m: f64, abs_tol: f64, depth: u32) -> f64 {
    let rule = |a: f64, b: f64| -> f64 {
        let (mid, half) = (0.5 * (a + b), 0.5 * (b - a));
        gl20()
            .iter()
            .map(|&(x, w)| w * (f(mid + half * x) - m).exp())
            .sum::<f64>()
            * half
    };
    let whole = rule(c, d);
    let mid = 0.5 * (c + d);
    let halves = rule(c, mid) + rule(mid, d);
    if (whole - halves).abs() <= abs_tol || depth >= 8 {
        halves
    } else {
        panel(f, c, mid, m, abs_tol / 2.0, depth + 1)
            + panel(f, mid, d, m, abs_tol / 2.0, depth + 1)
    }
}

/// `ln(A_α − 1)` by numerical integration of `g(u(t))φ(t)` on unit panels covering
/// `[−40, max(α/σ, 1/(2σ)) + 40]`, split at the zero `t₀ = 1/(2σ)` of `g(u(t))`; panels whose
/// upper bound (`g ≤ g(−q)` left of `t₀`, `g ≤ (1+u)^α` right of it) is `e⁻⁶⁰` below the largest
/// value seen are skipped.
pub(crate) fn log_a_minus_1_quad(q: f64, sigma: f64, alpha: f64) -> f64 {
    let f = |t: f64| log_integrand(t, q, sigma, alpha);
    let t0 = 0.5 / sigma;
    let lo = -40.0f64;
    let hi = (alpha / sigma).max(t0) + 40.0;
    let mut cuts: Vec<f64> = Vec::new();
    let mut t = lo;
    while t < hi {
        if t < t0 && t + 1.0 > t0 {
            cuts.push(t);
            t = t0;
        }
        cuts.push(t);
        t += 1.0;
    }
    cuts.push(hi);
    cuts.dedup();
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let log_g_left = log_g_at(-q, alpha);
    let bound = |c: f64, d: f64| -> f64 {
        let min_sq = if c <= 0.0 && d >= 0.0 {
            0.0
        } else {
            c.abs().min(d.abs()).powi(2)
        };
        let log_g_max = if d <= t0 + 1e-12 {
            log_g_left
        } else {
            let l = d / sigma - 0.5 / (sigma * sigma);
            alpha * log_add_exp(l1q, lq + l)
        };
        log_g_max - 0.5 * min_sq - HALF_LN_2PI
    };
    let m = cuts
        .iter()
        .map(|&t| f(t))
        .chain(cuts.windows(2).map(|w| f(0.5 * (w[0] + w[1]))))
        .fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let mut total = 0.0;
    for w in cuts.windows(2) {
        if bound(w[0], w[1]) < m - 60.0 {
            continue;
        }
        total += panel(&f, w[0], w[1], m, 1e-14, 0);
    }
    m + total.ln()
}
