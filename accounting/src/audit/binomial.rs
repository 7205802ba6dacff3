//! `Binomial(n, p)` probabilities in log space, for the audit's p-values: Loader's saddle-point
//! formula (Stirling remainders and the deviance `bd0`), exact to full relative accuracy at any
//! `n`, with no normal approximation.

use crate::special::{log_add_exp, HALF_LN_2PI};

/// A tail sum stops when the geometric bound on the rest is below `e^-40` (< 2⁻⁵⁷) of the sum.
const LN_TAIL_TOLERANCE: f64 = -40.0;

/// `Binomial(n, p)` in log space; `q = 1 − p` is given separately so that it keeps its
/// relative precision when it is tiny.
pub(super) struct LogBinomial {
    n: u64,
    p: f64,
    q: f64,
    ln_p: f64,
    ln_q: f64,
    stirlerr_n: f64,
}

impl LogBinomial {
    pub(super) fn new(n: u64, p: f64, q: f64) -> Self {
        Self {
            n,
            p,
            q,
            ln_p: p.ln(),
            ln_q: q.ln(),
            stirlerr_n: stirlerr(n),
        }
    }

    /// The accuracy of ε-DP randomized response, `p = e^ε / (1 + e^ε)`, with `1 − p` and both
    /// logarithms computed without cancellation.
    pub(super) fn randomized_response(n: u64, epsilon: f64) -> Self {
        let t = (-epsilon).exp(); // in [0, 1]
        let ln_p = -t.ln_1p();
        Self {
            n,
            p: 1.0 / (1.0 + t),
            q: t / (1.0 + t),
            ln_p,
            ln_q: ln_p - epsilon,
            stirlerr_n: stirlerr(n),
        }
    }

    /// `ln P[X = k]` (Loader 2000: Stirling remainders and the deviance `bd0`, no cancellation).
    pub(super) fn ln_pmf(&self, k: u64) -> f64 {
        let n = self.n;
        if k > n {
            return f64::NEG_INFINITY;
        }
        if k == 0 {
            return if self.q == 0.0 {
                f64::NEG_INFINITY
            } else {
                n as f64 * self.ln_q
            };
        }
        if k == n {
            return if self.p == 0.0 {
                f64::NEG_INFINITY
            } else {
                n as f64 * self.ln_p
            };
        }
        if self.p == 0.0 || self.q == 0.0 {
            return f64::NEG_INFINITY;
        }
        let (nf, kf, jf) = (n as f64, k as f64, (n - k) as f64);
        self.stirlerr_n
            - stirlerr(k)
            - stirlerr(n - k)
            - bd0(kf, nf * self.p)
            - bd0(jf, nf * self.q)
            + 0.5 * (nf.ln() - kf.ln() - jf.ln())
            - HALF_LN_2PI
    }

    /// `P[X = k + 1] / P[X = k]` for `k < n`.
    pub(super) fn ratio_up(&self, k: u64) -> f64 {
        ((self.n - k) as f64 / (k + 1) as f64) * (self.p / self.q)
    }

    /// `ln P[X ≥ v]`, rounded up: the sum stops when the geometric bound on the rest is below
    /// `e^LN_TAIL_TOLERANCE` of it, and adds that bound.
    pub(super) fn ln_upper_tail(&self, v: u64) -> f64 {
        if v == 0 || self.q == 0.0 {
            return if v <= self.n { 0.0 } else { f64::NEG_INFINITY };
        }
        if v > self.n || self.p == 0.0 {
            return f64::NEG_INFINITY;
        }
        let mut acc = f64::NEG_INFINITY;
        for k in v..=self.n {
            let term = self.ln_pmf(k);
            acc = log_add_exp(acc, term);
            if k == self.n {
                break;
            }
            // The ratios P[X = j + 1] / P[X = j] decrease in j: once below 1, the rest is at
            // most term · ρ / (1 − ρ).
            let rho = self.ratio_up(k);
            if rho < 1.0 {
                let ln_rest = term + (rho / (1.0 - rho)).ln();
                if ln_rest < acc + LN_TAIL_TOLERANCE {
                    return log_add_exp(acc, ln_rest);
                }
            }
        }
        acc
    }

    /// `ln max_{1 ≤ i ≤ v} P[v − i ≤ X < v] / i`, for `1 ≤ v ≤ n`: the δ-term of the paper's
    /// (ε, δ) bound. Exact: the loop stops only when no later i can give a larger mean.
    pub(super) fn ln_max_window_mean(&self, v: u64) -> f64 {
        // P[X = k − 1] ≤ P[X = k] iff k ≤ (n + 1)p: walking down from such a k, terms never grow.
        // `k + 1 ≤ (n + 1)p` keeps one index of margin against the rounding of (n + 1)p.
        let below_mode = |k: u64| (k + 1) as f64 <= (self.n as f64 + 1.0) * self.p;
        let mut ln_sum = f64::NEG_INFINITY;
        let mut best = f64::NEG_INFINITY;
        for i in 1..=v {
            let k = v - i;
            let term = self.ln_pmf(k);
            // Once the terms only shrink and one is at most the current mean, the mean only
            // falls from here on (each new term is at most the mean before it).
            if i > 1 && below_mode(k) && term <= ln_sum - ((i - 1) as f64).ln() {
                break;
            }
            ln_sum = log_add_exp(ln_sum, term);
            best = best.max(ln_sum - (i as f64).ln());
        }
        best
    }
}

/// Stirling's remainder `ln n! − (n + ½) ln n + n − ½ ln 2π` (0 at n = 0).
fn stirlerr(n: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let x = n as f64;
    if n <= 15 {
        // Direct: the absolute error (~1e-14) is what the log-pmf sees.
        return libm::lgamma(x + 1.0) - (x + 0.5) * x.ln() + x - HALF_LN_2PI;
    }
    // Stirling series 1/(12n) − 1/(360n³) + 1/(1260n⁵) − 1/(1680n⁷) + 1/(1188n⁹); the next
    // term, 691/(360360 n¹¹), is below 1e-16 for n ≥ 16.
    let x2 = x * x;
    (1.0 / 12.0
        - (1.0 / 360.0 - (1.0 / 1260.0 - (1.0 / 1680.0 - 1.0 / (1188.0 * x2)) / x2) / x2) / x2)
        / x
}

/// The deviance `x ln(x / μ) + μ − x ≥ 0`, without cancellation when `x ≈ μ` (series in
/// `v = (x − μ)/(x + μ)`: `(x − μ)v + 2x Σ_{j≥1} v^{2j+1}/(2j + 1)`).
fn bd0(x: f64, mu: f64) -> f64 {
    if (x - mu).abs() < 0.1 * (x + mu) {
        let v = (x - mu) / (x + mu);
        let v2 = v * v;
        let mut sum = (x - mu) * v;
        let mut power = 2.0 * x * v;
        for j in 1..1000 {
            power *= v2;
            let next = sum + power / f64::from(2 * j + 1);
            if next == sum {
                break;
            }
            sum = next;
        }
        sum
    } else {
        x * (x / mu).ln() + mu - x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_match_direct_pmf() {
        // Small n against the factorial formula, including p close to 1.
        for &(n, p) in &[(10u64, 0.5), (17, 0.3), (30, 0.97), (40, 0.999)] {
            let b = LogBinomial::new(n, p, 1.0 - p);
            for k in 0..=n {
                let ln_choose = libm::lgamma(n as f64 + 1.0)
                    - libm::lgamma(k as f64 + 1.0)
                    - libm::lgamma((n - k) as f64 + 1.0);
                let direct = ln_choose + k as f64 * p.ln() + (n - k) as f64 * (1.0 - p).ln();
                let got = b.ln_pmf(k);
                assert!(
                    (got - direct).abs() < 1e-12,
                    "n={n} p={p} k={k}: {got} vs {direct}"
                );
            }
        }
    }

    #[test]
    fn should_sum_pmf_to_one() {
        let b = LogBinomial::randomized_response(5000, 1.3);
        let total = b.ln_upper_tail(0);
        assert_eq!(total, 0.0);
        let mut acc = f64::NEG_INFINITY;
        for k in 0..=5000 {
            acc = log_add_exp(acc, b.ln_pmf(k));
        }
        assert!(acc.abs() < 1e-12, "{acc}");
    }

    #[test]
    fn should_find_max_window_mean_like_a_full_scan() {
        for &(n, eps) in &[(50u64, 0.0), (200, 1.0), (1000, 3.0), (1000, 0.2)] {
            let b = LogBinomial::randomized_response(n, eps);
            for v in [1, n / 3, n / 2, (3 * n) / 4, n - 1, n] {
                let mut sum = 0.0;
                let mut best = 0.0f64;
                for i in 1..=v {
                    sum += b.ln_pmf(v - i).exp();
                    best = best.max(sum / i as f64);
                }
                let got = b.ln_max_window_mean(v).exp();
                assert!(
                    (got - best).abs() <= 1e-12 * best,
                    "n={n} ε={eps} v={v}: {got} vs {best}"
                );
            }
        }
    }

    #[test]
    fn should_bound_deviance_without_cancellation() {
        // bd0(x, μ) ≈ (x − μ)²/(2μ) for x ≈ μ.
        let got = bd0(1e6 + 1.0, 1e6);
        assert!((got - 0.5e-6).abs() < 1e-12, "{got}");
        assert_eq!(bd0(3.0, 3.0), 0.0);
    }
}
