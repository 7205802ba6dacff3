//! Human-readable privacy statements.

use std::fmt;

/// A run of steps with the same sampling rate and noise multiplier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepGroup {
    /// Poisson sampling rate q.
    pub sampling_rate: f64,
    /// Noise multiplier σ.
    pub noise_multiplier: f64,
    /// Number of steps.
    pub steps: u64,
}

/// Which accountant produced a statement, with its parameters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AccountantDescription {
    /// Rényi DP (Mironov, Talwar & Zhang 2019) with the improved RDP → (ε, δ) conversion.
    Rdp {
        /// Smallest Rényi order evaluated.
        min_order: f64,
        /// Largest Rényi order evaluated.
        max_order: f64,
        /// Number of orders evaluated.
        num_orders: usize,
        /// The order giving the reported ε.
        optimal_order: Option<f64>,
    },
    /// Rényi DP of the Poisson-subsampled *discrete* Gaussian: Zhu & Wang's (2019) general
    /// upper bound for Poisson subsampling on the base RDP `α/(2σ²)` of Canonne, Kamath &
    /// Steinke (2020), with the improved RDP → (ε, δ) conversion.
    RdpDiscreteGaussian {
        /// Smallest Rényi order evaluated.
        min_order: f64,
        /// Largest Rényi order evaluated.
        max_order: f64,
        /// Number of orders evaluated.
        num_orders: usize,
        /// The order giving the reported ε.
        optimal_order: Option<f64>,
    },
    /// Privacy loss distribution (connect-the-dots discretisation, FFT composition).
    Pld {
        /// Grid spacing of the privacy loss.
        discretization: f64,
        /// Whether the estimate is an upper bound (pessimistic) — the only kind that is a
        /// privacy guarantee.
        pessimistic: bool,
    },
}

/// What was accounted and the (ε, δ)-DP guarantee it gives; `Display` renders it for people.
///
/// ```
/// use burn_vmap_accounting::{PoissonGaussian, RdpAccountant};
///
/// let mut acc = RdpAccountant::new();
/// acc.compose(PoissonGaussian::new(0.01, 1.1)?, 1000)?;
/// let text = acc.statement(1e-5)?.with_clipping_norm(1.0).to_string();
/// assert!(text.contains("Poisson"));
/// assert!(text.contains("add or remove one example"));
/// assert!(text.contains("σ = 1.1"));
/// assert!(text.contains("C = 1"));
/// assert!(text.contains("δ = 1e-5"));
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PrivacyStatement {
    /// The certified ε.
    pub epsilon: f64,
    /// The δ it holds at.
    pub delta: f64,
    /// Total number of steps.
    pub steps: u64,
    /// The steps, grouped by `(q, σ)`.
    pub groups: Vec<StepGroup>,
    /// The per-example clipping norm C, when the caller supplies it (it does not change ε).
    pub clipping_norm: Option<f64>,
    /// The accountant and its parameters.
    pub accountant: AccountantDescription,
}

impl PrivacyStatement {
    /// Records the clipping norm C for the text (noise standard deviation σ·C).
    pub fn with_clipping_norm(mut self, clipping_norm: f64) -> Self {
        self.clipping_norm = Some(clipping_norm);
        self
    }
}

/// `x` with `digits` significant digits, without trailing zeros.
fn sig(x: f64, digits: usize) -> String {
    if !x.is_finite() || x == 0.0 {
        return if x == f64::INFINITY {
            "∞".to_string()
        } else {
            format!("{x}")
        };
    }
    let mag = x.abs().log10().floor() as i32;
    if !(-4..=9).contains(&mag) {
        let s = format!("{:.*e}", digits.saturating_sub(1), x);
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.trim_end_matches('0').trim_end_matches('.')
        } else {
            mantissa
        };
        return format!("{mantissa}e{exponent}");
    }
    let decimals = (digits as i32 - 1 - mag).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

impl fmt::Display for PrivacyStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "(ε = {}, δ = {})-differential privacy after {} step{} of DP-SGD",
            sig(self.epsilon, 5),
            sig(self.delta, 3),
            self.steps,
            if self.steps == 1 { "" } else { "s" }
        )?;
        writeln!(
            f,
            "  neighbouring datasets: add or remove one example (example-level privacy)"
        )?;
        let c = self
            .clipping_norm
            .map_or_else(|| "C".to_string(), |c| format!("C = {}", sig(c, 6)));
        let noise = match self.accountant {
            AccountantDescription::RdpDiscreteGaussian { .. } => {
                "discrete Gaussian noise (Canonne, Kamath & Steinke 2020) of scale σ·C"
            }
            _ => "Gaussian noise of standard deviation σ·C",
        };
        writeln!(
            f,
            "  each step: Poisson subsampling (every example joins the batch independently with \
             probability q), per-example gradients clipped to L2 norm {c}, {noise} added to \
             their sum"
        )?;
        if self.groups.is_empty() {
            writeln!(f, "  steps: none")?;
        }
        for g in &self.groups {
            writeln!(
                f,
                "  {} × (q = {}, σ = {})",
                g.steps,
                sig(g.sampling_rate, 6),
                sig(g.noise_multiplier, 6)
            )?;
        }
        match &self.accountant {
            AccountantDescription::Rdp {
                min_order,
                max_order,
                num_orders,
                optimal_order,
            }
            | AccountantDescription::RdpDiscreteGaussian {
                min_order,
                max_order,
                num_orders,
                optimal_order,
            } => {
                let what = if matches!(self.accountant, AccountantDescription::Rdp { .. }) {
                    "Rényi DP of the subsampled Gaussian (Mironov, Talwar & Zhang 2019)"
                } else {
                    "Rényi DP of the Poisson-subsampled discrete Gaussian, Zhu & Wang's general \
                     bound (ICML 2019, Thm 5; base RDP α/(2σ²), Canonne, Kamath & Steinke 2020)"
                };
                write!(
                    f,
                    "  accountant: {what}, {num_orders} orders in [{}, {}]",
                    sig(*min_order, 6),
                    sig(*max_order, 6)
                )?;
                if let Some(a) = optimal_order {
                    write!(f, ", optimal order {}", sig(*a, 6))?;
                }
                write!(f, ", RDP→(ε, δ) by Balle et al. 2020 Thm 21")
            }
            AccountantDescription::Pld {
                discretization,
                pessimistic,
            } => write!(
                f,
                "  accountant: privacy loss distribution ({} connect-the-dots discretisation, \
                 interval Δ = {}, FFT composition)",
                if *pessimistic {
                    "pessimistic"
                } else {
                    "optimistic (NOT a guarantee)"
                },
                sig(*discretization, 6)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sig;

    #[test]
    fn significant_digits() {
        assert_eq!(sig(1.035_512_3, 5), "1.0355");
        assert_eq!(sig(1e-5, 3), "1e-5");
        assert_eq!(sig(2.5e-6, 3), "2.5e-6");
        assert_eq!(sig(4.0, 6), "4");
        assert_eq!(sig(5_449_454.9, 5), "5449455");
        assert_eq!(sig(f64::INFINITY, 5), "∞");
        assert_eq!(sig(0.0, 5), "0");
        assert_eq!(sig(0.001, 6), "0.001");
    }
}
