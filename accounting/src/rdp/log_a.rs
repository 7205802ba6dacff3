//! Exact Rényi divergence of one Poisson-subsampled Gaussian step.
//!
//! With `μ₀ = N(0, σ²)`, `μ₁ = N(1, σ²)` and `μ = (1−q)μ₀ + qμ₁`, the RDP of order α of one step
//! is `ln(A_α)/(α−1)` where (Mironov, Talwar & Zhang 2019, arXiv 1908.10530, §3)
//!
//! ```text
//! A_α = E_{z∼μ₀}[(μ(z)/μ₀(z))^α] = E_{z∼μ₀}[(1 + u(z))^α],   u(z) = q·(exp((2z−1)/(2σ²)) − 1).
//! ```
//!
//! Because `E[u] = 0`, `A_α − 1 = E[g(u)]` with `g(u) = (1+u)^α − 1 − αu ≥ 0`. Every method below
//! computes `ln(A_α − 1)` rather than `ln A_α`, so that the RDP keeps full relative precision
//! when `A_α` is within `1e-12` of 1 (large σ, small q), where `ln A_α` computed from `A_α`
//! would have lost most of its digits.
//!
//! * integer α: the binomial expansion is finite, and `A_α − 1` is a sum of positive terms
//!   ([`log_a_minus_1_int`]);
//! * fractional α: the two binomial series of MTZ19 §3.3 with **signed** terms, rearranged into
//!   `A_α − 1` ([`log_a_minus_1_frac`]); the terms' magnitudes provably decrease from index
//!   `(α−1)/2` on and alternate in sign from `⌊α⌋+2` on, which gives a rigorous bound on the
//!   remainder: the truncated sum is rounded *up* by that bound, so the result is never below
//!   the exact value (beyond floating-point roundoff);
//! * when the series converges too slowly or cancels too much (q near or above ½ with large σ),
//!   `E[g(u)]` is integrated numerically instead (`quad::log_a_minus_1_quad`), in log space.

use crate::rdp::quad::{log_a_minus_1_quad, log_g_at};
use crate::special::{log1m_exp, log_add_exp, log_ndtr, log_ndtr_neg_scaled};

/// Relative accuracy asked of the series (on `A_α − 1`).
const SERIES_RTOL: f64 = 1e-15;
/// Give up on the series when its direct part would need this many terms (α this large).
const SERIES_MAX_TERMS: usize = 200_000;
/// Integrate instead when the signed series loses more than this factor to cancellation.
const SERIES_MAX_CANCELLATION: f64 = 1e5;
/// Most terms of the Euler-transformed alternating tail.
const SERIES_MAX_EULER: usize = 200;
/// Integer orders up to this value use the finite binomial sum.
const MAX_DIRECT_INT_ORDER: f64 = 1e6;

/// RDP of one Poisson-subsampled Gaussian step at order `alpha > 1`, including the special
/// cases `q = 0` (0), `σ = 0` or `α = ∞` (∞) and `q = 1` (`α/(2σ²)`).
pub(crate) fn rdp_single(q: f64, sigma: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if alpha.is_infinite() || sigma == 0.0 {
        return f64::INFINITY;
    }
    if q == 1.0 {
        return alpha / (2.0 * sigma * sigma);
    }
    let lam = log_a_minus_1(q, sigma, alpha);
    // ln A = ln(1 + e^lam).
    crate::special::log1p_exp(lam) / (alpha - 1.0)
}

/// `ln(A_α − 1)` for `0 < q < 1`, `σ > 0`, `α > 1` finite.
pub(crate) fn log_a_minus_1(q: f64, sigma: f64, alpha: f64) -> f64 {
    if alpha.fract() == 0.0 && alpha <= MAX_DIRECT_INT_ORDER {
        return log_a_minus_1_int(q, sigma, alpha as u64);
    }
    match log_a_minus_1_frac(q, sigma, alpha) {
        Some(v) => v,
        None => log_a_minus_1_quad(q, sigma, alpha),
    }
}

/// Running sum of signed terms given by their logarithms, kept as `e^scale·(pos − neg)` with
/// Neumaier-compensated accumulators.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SignedLogSum {
    scale: f64,
    pos: (f64, f64),
    neg: (f64, f64),
}

impl SignedLogSum {
    pub(crate) fn new() -> Self {
        Self {
            scale: f64::NEG_INFINITY,
            pos: (0.0, 0.0),
            neg: (0.0, 0.0),
        }
    }

    pub(crate) fn add(&mut self, log_mag: f64, positive: bool) {
        if log_mag == f64::NEG_INFINITY {
            return;
        }
        if log_mag > self.scale {
            let f = (self.scale - log_mag).exp();
            self.pos = (self.pos.0 * f, self.pos.1 * f);
            self.neg = (self.neg.0 * f, self.neg.1 * f);
            self.scale = log_mag;
        }
        let v = (log_mag - self.scale).exp();
        let acc = if positive {
            &mut self.pos
        } else {
            &mut self.neg
        };
        let t = acc.0 + v;
        acc.1 += if acc.0.abs() >= v {
            (acc.0 - t) + v
        } else {
            (v - t) + acc.0
        };
        acc.0 = t;
    }

    fn pos(&self) -> f64 {
        self.pos.0 + self.pos.1
    }

    fn neg(&self) -> f64 {
        self.neg.0 + self.neg.1
    }

    /// `ln(value)`, or `None` when the value is not positive.
    pub(crate) fn ln_value(&self) -> Option<f64> {
        let d = self.pos() - self.neg();
        (d > 0.0).then(|| self.scale + d.ln())
    }

    /// `(|pos| + |neg|) / (pos − neg)`: how many times larger the terms are than their sum.
    fn cancellation(&self) -> f64 {
        (self.pos() + self.neg()) / (self.pos() - self.neg())
    }
}

/// `ln(eᶜ − 1)` for `c ≥ 0`.
pub(crate) fn log_expm1(c: f64) -> f64 {
    if c == 0.0 {
        f64::NEG_INFINITY
    } else if c > 40.0 {
        c // e^{-c} < 5e-18
    } else {
        c + log1m_exp(-c)
    }
}

/// `ln k` for integers `k`, tabulated up to 2¹⁶.
pub(crate) fn ln_int(k: u64) -> f64 {
    static TABLE: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| (0..1u64 << 16).map(|k| (k as f64).ln()).collect());
    table
        .get(k as usize)
        .copied()
        .unwrap_or_else(|| (k as f64).ln())
}

/// Integer α: `A_α − 1 = Σ_{i=2}^{α} C(α,i) qⁱ (1−q)^{α−i} (exp((i²−i)/(2σ²)) − 1)`, all terms
/// positive (the `−1` uses `Σ_i C(α,i) qⁱ(1−q)^{α−i} = 1`).
pub(crate) fn log_a_minus_1_int(q: f64, sigma: f64, alpha: u64) -> f64 {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let two_s2 = 2.0 * sigma * sigma;
    let a = alpha as f64;
    let mut sum = SignedLogSum::new();
    // ln C(α, 1) = ln α; advance to C(α, i) by the ratio (α − i + 1)/i.
    let mut log_c = ln_int(alpha);
    for i in 2..=alpha {
        let fi = i as f64;
        log_c += ln_int(alpha - i + 1) - ln_int(i);
        let c = fi * (fi - 1.0) / two_s2;
        sum.add(log_c + fi * lq + (a - fi) * l1q + log_expm1(c), true);
    }
    sum.ln_value().unwrap_or(f64::NEG_INFINITY)
}

/// Fractional α: signed two-series expansion (MTZ19 §3.3) of `A_α − 1`; `None` when it would
/// be slow or inaccurate (the caller then integrates).
///
/// Split the line at `z₀ = σ² ln(1/q − 1) + ½`, where `q·μ₁/μ₀ = 1 − q`. Below `z₀` expand in
/// powers of `q·μ₁/μ₀ / (1−q) < 1`, above it in powers of the inverse:
///
/// ```text
/// T0_i = C(α,i) qⁱ (1−q)^{α−i} e^{(i²−i)/(2σ²)} Φ((z₀−i)/σ)
/// T1_i = C(α,i) q^{α−i} (1−q)ⁱ e^{(j²−j)/(2σ²)} Φ((j−z₀)/σ),   j = α − i
/// A_α = Σ_i T0_i + Σ_i T1_i.
/// ```
///
/// `C(α,i) < 0` for odd `i − ⌊α⌋ − 1 > 0`: these terms are *subtracted* (dp-accounting 0.6.0 adds
/// their magnitudes, an over-estimate). Subtracting `∫(1 + αu)dμ₀ = 1` region by region turns
/// `T0_0 + T0_1` into `a·P₀ − b·P₁` with `a = g(−q) ≥ 0`, `b = αq(1 − (1−q)^{α−1}) ≥ 0`,
/// `P₀ = Φ(z₀/σ)`, `P₁ = Φ((z₀−1)/σ)`, and adds `−(1−αq)Q₀ − αqQ₁` with `Q₀ = Φ(−z₀/σ)`,
/// `Q₁ = Φ((1−z₀)/σ)`.
///
/// Both series satisfy `|T_{i+1}| ≤ |T_i|·|α−i|/(i+1)` (from `d/dx ln erfc(x) ≤ −2x`), so the
/// magnitudes decrease once `i > (α−1)/2`; for `i ≥ ⌊α⌋+2` the signs alternate. The remainder
/// after index `n` is therefore bracketed, and its upper end is added.
pub(crate) fn log_a_minus_1_frac(q: f64, sigma: f64, alpha: f64) -> Option<f64> {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let s2 = sigma * sigma;
    let two_s2 = 2.0 * s2;
    let z0 = s2 * (l1q - lq) + 0.5;
    let half_z0_sq = z0 * z0 / two_s2;
    let base = alpha * l1q - half_z0_sq; // shared by every tail term, see below
    let mut sum = SignedLogSum::new();

    // Linear terms.
    let log_a = log_g_at(-q, alpha);
    let log_b = (alpha * q).ln() + log1m_exp((alpha - 1.0) * l1q);
    sum.add(log_a + log_ndtr(z0 / sigma), true);
    sum.add(log_b + log_ndtr((z0 - 1.0) / sigma), false);
    let one_m_aq = 1.0 - alpha * q;
    if one_m_aq != 0.0 {
        sum.add(one_m_aq.abs().ln() + log_ndtr(-z0 / sigma), one_m_aq < 0.0);
    }
    sum.add((alpha * q).ln() + log_ndtr((1.0 - z0) / sigma), false);

    // ln|T0_i| and ln|T1_i| given ln|C(α,i)|. Far in the tails, where Φ(−y) underflows and
    // e^{(i²−i)/(2σ²)} overflows, the exponents are combined analytically:
    // (i²−i)/(2σ²) − y²/2 = i·ln((1−q)/q) − z₀²/(2σ²) with y = (i−z₀)/σ, and likewise for j.
    let log_t0 = |i: f64, log_c: f64| -> f64 {
        let y = (i - z0) / sigma;
        if y <= 0.0 {
            log_c + i * lq + (alpha - i) * l1q + i * (i - 1.0) / two_s2 + log_ndtr(-y)
        } else {
            log_c + base + log_ndtr_neg_scaled(y)
        }
    };
    let log_t1 = |i: f64, log_c: f64| -> f64 {
        let j = alpha - i;
        let y = (z0 - j) / sigma;
        if y <= 0.0 {
            log_c + j * lq + i * l1q + j * (j - 1.0) / two_s2 + log_ndtr(-y)
        } else {
            log_c + base + log_ndtr_neg_scaled(y)
        }
    };

    let finish = |sum: &SignedLogSum| -> Option<f64> {
        if sum.cancellation() > SERIES_MAX_CANCELLATION {
            None
        } else {
            sum.ln_value()
        }
    };
    let ln_tol = SERIES_RTOL.ln();
    // First index of the alternating tail (C(α,i) changes sign at every step from here on).
    let n_alt = (alpha.floor() + 2.0).max(2.0);
    if n_alt > SERIES_MAX_TERMS as f64 {
        return None;
    }
    let n_alt = n_alt as usize;
    let mut log_c = 0.0; // ln|C(α, i)|
    let mut positive = true; // sign of C(α, i)
    let advance = |i: f64, log_c: &mut f64, positive: &mut bool| {
        // C(α, i+1) = C(α, i)·(α − i)/(i + 1).
        let ratio = alpha - i;
        *log_c += ratio.abs().ln() - (i + 1.0).ln();
        if ratio < 0.0 {
            *positive = !*positive;
        }
    };
    for n in 0..n_alt {
        let i = n as f64;
        let t1 = log_t1(i, log_c);
        let t0 = if n >= 2 {
            log_t0(i, log_c)
        } else {
            f64::NEG_INFINITY
        };
        if n >= 2 && i > (alpha - 1.0) / 2.0 {
            // From index n on the magnitudes decrease with ratio ≤ r: positive terms up to
            // ⌊α⌋+1 (geometrically bounded), then an alternating tail no larger than T_n.
            if let Some(log_s) = sum.ln_value() {
                let r = (alpha - i) / (i + 1.0);
                let bound = log_add_exp(t0, t1) + (1.0 / (1.0 - r) + 1.0).ln();
                if bound - log_s <= ln_tol {
                    sum.add(bound, true);
                    return finish(&sum);
                }
            }
        }
        sum.add(t0, positive);
        sum.add(t1, positive);
        advance(i, &mut log_c, &mut positive);
    }

    // Alternating tail Σ_{i≥n} ±f(i), f(i) = |T0_i| + |T1_i| completely monotone in i (|C(α,i)|
    // ∝ Γ(i−α)/Γ(i+1) and Φ(−y)e^{y²/2} = ∫₀^∞ e^{−yt−t²/2}dt/√(2π) are Laplace transforms, y
    // linear in i). Euler's transform Σ_k (−1)^kΔ^k f(n)/2^{k+1} then has non-negative terms
    // d_k = (−1)^kΔ^k f(n) that decrease in k, so the error after K terms is in
    // [0, d_K/2^K] ≤ f(n)/2^K: rigorous and fast (K ≈ 50).
    let n = n_alt as f64;
    let log_f = |i: f64, log_c: f64| log_add_exp(log_t0(i, log_c), log_t1(i, log_c));
    let log_f0 = log_f(n, log_c);
    let tail_positive = positive;
    let mut diag: Vec<f64> = vec![1.0]; // diag[j] = Δʲf(n + k − j) / f(n)
    let mut euler = 0.0;
    let mut scale = 1.0; // 2^{-k}
    for k in 0..SERIES_MAX_EULER {
        let d_k = if k % 2 == 0 { diag[k] } else { -diag[k] }.max(0.0);
        let bound = d_k * scale;
        if let Some(log_s) = sum.ln_value() {
            if bound == 0.0 || log_f0 + bound.ln() - log_s <= ln_tol {
                let tail = if tail_positive { euler + bound } else { euler };
                if tail > 0.0 {
                    sum.add(log_f0 + tail.ln(), tail_positive);
                }
                return finish(&sum);
            }
        }
        euler += 0.5 * bound;
        scale *= 0.5;
        let i = n + k as f64;
        advance(i, &mut log_c, &mut positive);
        let v = (log_f(i + 1.0, log_c) - log_f0).exp();
        let mut next = Vec::with_capacity(k + 2);
        next.push(v);
        for j in 1..=k + 1 {
            next.push(next[j - 1] - diag[j - 1]);
        }
        diag = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_and_quadrature_agree() {
        for &(q, sigma) in &[
            (0.01, 1.1),
            (0.256, 0.5),
            (0.05, 2.0),
            (0.001, 4.0),
            (0.256, 0.3),
        ] {
            for &alpha in &[1.01, 1.1, 1.5, 2.5, 7.3, 30.5, 100.5] {
                let s = log_a_minus_1_frac(q, sigma, alpha).expect("series");
                let i = log_a_minus_1_quad(q, sigma, alpha);
                let (rs, ri) = (crate::special::log1p_exp(s), crate::special::log1p_exp(i));
                assert!(
                    ((rs - ri) / ri).abs() < 1e-11,
                    "q={q} σ={sigma} α={alpha}: series {rs} quad {ri}"
                );
            }
        }
    }

    #[test]
    fn integer_sum_matches_quadrature() {
        for &(q, sigma) in &[(0.01, 1.1), (0.256, 0.5), (0.001, 4.0), (0.5, 10.0)] {
            for &alpha in &[2u64, 3, 10, 64, 256] {
                let s = log_a_minus_1_int(q, sigma, alpha);
                let i = log_a_minus_1_quad(q, sigma, alpha as f64);
                assert!(
                    ((s - i) / s.abs().max(1.0)).abs() < 1e-11,
                    "q={q} σ={sigma} α={alpha}: sum {s} quad {i}"
                );
            }
        }
    }

    #[test]
    fn log_g_matches_direct_formula_where_that_is_accurate() {
        for &alpha in &[1.01, 1.5, 3.7, 40.0] {
            for &u in &[-0.9, -0.5, -0.1, -1e-3, 1e-3, 0.2, 0.7, 3.0, 50.0] {
                let direct: f64 = (1.0f64 + u).powf(alpha) - 1.0 - alpha * u;
                let got = log_g_at(u, alpha).exp();
                // The direct formula cancels; allow for its own error.
                let tol = 1e-13 * ((1.0f64 + u).powf(alpha) + 1.0 + alpha * u.abs());
                assert!(
                    (got - direct).abs() <= tol,
                    "α={alpha} u={u}: {got} vs {direct}"
                );
            }
        }
    }
}
