//! Helpers shared by the integration tests: loading the reference vectors, and small
//! *independent* models of the reference libraries' documented deviations (so that a
//! difference from a reference value is accepted only when it is exactly the documented
//! conservativeness of that library).
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

/// The vectors' directory: `$BURN_VMAP_DP_VECTORS`, or the copy under `tests/dp-vectors`.
pub fn vectors_dir() -> PathBuf {
    std::env::var_os("BURN_VMAP_DP_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/dp-vectors"))
}

/// Every `*.json` file of the directory, parsed, sorted by name.
pub fn load_all() -> Vec<(String, Value)> {
    let dir = vectors_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect()
}

/// A float that may be written as `"inf"`, `"-inf"` or `"nan"`.
pub fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => match s.as_str() {
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            "nan" => f64::NAN,
            other => panic!("not a float: {other}"),
        },
        other => panic!("not a float: {other}"),
    }
}

/// An order list given inline or by name (`dp_accounting.DEFAULT_RDP_ORDERS`,
/// `opacus.DEFAULT_ALPHAS`).
pub fn orders(meta: &Value, v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().map(num).collect(),
        Value::String(s) => {
            let key = match s.as_str() {
                "dp_accounting.DEFAULT_RDP_ORDERS" => "dp_accounting_default_orders",
                "opacus.DEFAULT_ALPHAS" => "opacus_default_alphas",
                other => panic!("unknown order list {other}"),
            };
            meta[key].as_array().unwrap().iter().map(num).collect()
        }
        other => panic!("bad orders {other}"),
    }
}

/// `|a − b| ≤ atol + rtol·|b|`, with equal infinities equal.
pub fn close(a: f64, b: f64, rtol: f64, atol: f64) -> bool {
    if a == b {
        return true;
    }
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    (a - b).abs() <= atol + rtol * b.abs()
}

/// Relative difference `|a − b| / |b|` (0 for equal values).
pub fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / b.abs()
    }
}

// ---------------------------------------------------------------------------------------------
// Independent special functions (not the library's).

/// `ln Φ(x)` via `libm::erfc`, with the asymptotic series below −30.
pub fn log_ndtr(x: f64) -> f64 {
    if x > 0.0 {
        return (-0.5 * libm::erfc(x / std::f64::consts::SQRT_2)).ln_1p();
    }
    if x > -30.0 {
        return (0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)).ln();
    }
    let z = 1.0 / (x * x);
    // 1 − z + 3z² − 15z³ + 105z⁴ − 945z⁵
    let s = 1.0 - z * (1.0 - z * (3.0 - z * (15.0 - z * (105.0 - 945.0 * z))));
    -0.5 * x * x - (-x).ln() - 0.5 * (2.0 * std::f64::consts::PI).ln() + s.ln()
}

fn log_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

// ---------------------------------------------------------------------------------------------
// Model of dp-accounting 0.6.0's fractional-order RDP (README "Differences" 1 and 2): the
// two-series formula with every term added as its magnitude (`_log_comb` via log|Γ|), the
// stopping rule `both terms decreasing and max < total − 30`, and ∞ after 1000 terms.

/// dp-accounting's `_compute_log_a_frac` (unsigned, capped).
pub fn dp_accounting_log_a_frac(q: f64, sigma: f64, alpha: f64) -> f64 {
    let log_comb =
        |n: f64, k: f64| libm::lgamma(n + 1.0) - libm::lgamma(k + 1.0) - libm::lgamma(n - k + 1.0);
    let log_erfc = |x: f64| std::f64::consts::LN_2 + log_ndtr(-x * std::f64::consts::SQRT_2);
    let (mut log_a0, mut log_a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let log1mq = (-q).ln_1p();
    let (mut last_s0, mut last_s1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for i in 0..1000 {
        let i = i as f64;
        let log_coef = log_comb(alpha, i);
        let j = alpha - i;
        let log_t0 = log_coef + i * q.ln() + j * log1mq;
        let log_t1 = log_coef + j * q.ln() + i * log1mq;
        let log_e0 = 0.5f64.ln() + log_erfc((i - z0) / (std::f64::consts::SQRT_2 * sigma));
        let log_e1 = 0.5f64.ln() + log_erfc((z0 - j) / (std::f64::consts::SQRT_2 * sigma));
        let log_s0 = log_t0 + (i * i - i) / (2.0 * sigma * sigma) + log_e0;
        let log_s1 = log_t1 + (j * j - j) / (2.0 * sigma * sigma) + log_e1;
        log_a0 = log_add(log_a0, log_s0);
        log_a1 = log_add(log_a1, log_s1);
        let total = log_add(log_a0, log_a1);
        if log_s0 < last_s0 && log_s1 < last_s1 && log_s0.max(log_s1) < total - 30.0 {
            return total;
        }
        last_s0 = log_s0;
        last_s1 = log_s1;
    }
    f64::INFINITY
}

/// dp-accounting's per-step RDP curve: exact at integer orders (ours), the unsigned capped
/// series at fractional ones.
pub fn dp_accounting_rdp(q: f64, sigma: f64, orders: &[f64]) -> Vec<f64> {
    let exact = burn_vmap_accounting::poisson_gaussian_rdp(
        burn_vmap_accounting::PoissonGaussian::new(q, sigma).unwrap(),
        orders,
    )
    .unwrap();
    orders
        .iter()
        .zip(exact)
        .map(|(&a, r)| {
            if q == 0.0 || q == 1.0 || sigma == 0.0 || a.fract() == 0.0 {
                r
            } else {
                dp_accounting_log_a_frac(q, sigma, a) / (a - 1.0)
            }
        })
        .collect()
}

/// Opacus's `get_privacy_spent`: `ε_α = r − (ln δ + ln α)/(α−1) + ln((α−1)/α)`, minimised, with
/// no KL shortcut and no clamp at 0 (README "Differences" 4: 0.1029 for zero RDP).
pub fn opacus_epsilon(orders: &[f64], rdp: &[f64], delta: f64) -> f64 {
    orders
        .iter()
        .zip(rdp)
        .map(|(&a, &r)| r - (delta.ln() + a.ln()) / (a - 1.0) + ((a - 1.0) / a).ln())
        .filter(|e| !e.is_nan())
        .fold(f64::INFINITY, f64::min)
}

/// The exact ε of the Gaussian mechanism with noise multiplier `sigma` (Balle & Wang 2018):
/// the root of `Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) = δ`, by bisection in log space.
pub fn analytic_gaussian_epsilon(sigma: f64, delta: f64) -> f64 {
    let delta_of = |eps: f64| -> f64 {
        let a = log_ndtr(0.5 / sigma - eps * sigma);
        let b = eps + log_ndtr(-0.5 / sigma - eps * sigma);
        if b >= a {
            0.0
        } else {
            a.exp() * -(b - a).exp_m1()
        }
    };
    if delta_of(0.0) <= delta {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    while delta_of(hi) > delta {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if delta_of(mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-15 * hi {
            break;
        }
    }
    hi
}
