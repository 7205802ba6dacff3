//! [`DpStatement`]: what a DP-SGD run guarantees, and what it assumes, for people.

use std::fmt;

use super::accounting::PrivacyStatement;
use super::config::DpConfig;

/// What a [`DpMechanism`](super::DpMechanism) run guarantees so far and everything the
/// guarantee rests on: the sampling, the neighbouring relation, whether the generator was
/// seeded (then **nothing** is guaranteed), `δ` against `1 / N`, and what it does not cover.
/// `Display` renders it for a report.
#[derive(Debug, Clone, PartialEq)]
pub struct DpStatement {
    /// The accountant's statement (ε, δ, steps, the accountant); its ε is the relation's.
    pub accounted: PrivacyStatement,
    /// The mechanism's settings.
    pub config: DpConfig,
    /// The noise or sampling generator was seeded by the caller at some point of the run:
    /// anyone with the seed can regenerate the noise, so the run is **not private**.
    pub seeded: bool,
    /// The noise construction, in words.
    pub noise: String,
    /// The number of processes of a data-parallel run (`None`: one process). Their shards,
    /// each sampled at `q`, are one Poisson sample of the union; their clipped sums are summed
    /// and the noise is added once to the total (each process noises its own slice of the
    /// coordinates). The peers are trusted, and the guarantee is for the released parameters;
    /// what each peer sees of the un-noised sum is [`scattered`](Self::scattered).
    pub processes: Option<usize>,
    /// In a data-parallel run, whether each process receives the complete un-noised sum of its
    /// own slice of the coordinates only (an engine with its own reduce-scatter, MPI), rather
    /// than the whole un-noised sum (every other engine).
    pub scattered: bool,
}

impl DpStatement {
    /// Whether the (ε, δ) holds: the generators were seeded by the operating system throughout.
    pub fn is_private(&self) -> bool {
        !self.seeded && self.accounted.epsilon.is_finite()
    }

    /// The certified ε (infinite for a mechanism without noise).
    pub fn epsilon(&self) -> f64 {
        self.accounted.epsilon
    }

    /// The δ it holds at.
    pub fn delta(&self) -> f64 {
        self.accounted.delta
    }
}

impl fmt::Display for DpStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        if self.seeded {
            writeln!(
                f,
                "NOT PRIVATE: the noise or sampling generator was seeded by the caller; anyone \
                 with the seed can regenerate the noise. The figures below are what an unseeded \
                 run would guarantee."
            )?;
        }
        writeln!(
            f,
            "(ε = {}, δ = {})-differential privacy for the released parameters after {} step{} \
             of DP-SGD",
            sig(self.accounted.epsilon),
            sig(self.accounted.delta),
            self.accounted.steps,
            if self.accounted.steps == 1 { "" } else { "s" }
        )?;
        writeln!(
            f,
            "  mechanism: Poisson sampling (every example joins a step's batch independently \
             with q = {}); every example's gradient clipped to L2 norm C = {} ({}; a non-finite \
             gradient contributes zero); {} noise of standard deviation σ·C with σ = {} added \
             once to the sum of a step; the sum divided by {}",
            sig(c.sampling_rate),
            sig(c.clip_norm),
            if c.per_layer {
                "per layer, C/√P per parameter tensor"
            } else {
                "global norm"
            },
            self.noise,
            sig(c.noise_multiplier),
            sig(c.normaliser()),
        )?;
        if let Some(n) = self.processes {
            writeln!(
                f,
                "  data-parallel over {n} process{}: each samples its shard with q (together: \
                 Poisson sampling of the union); their clipped sums are reduced across the \
                 processes, each receiving the complete sum of its own slice of the coordinates, \
                 which it noises (the noise is added once to the total) before the noised slices \
                 are gathered: the same update on every process. Trust model: the peers are \
                 trusted; {}; the guarantee is for the released parameters",
                if n == 1 { "" } else { "es" },
                if self.scattered {
                    "each sees the un-noised sum of its own slice (1/n of it; the reduction may \
                     route partial sums of other slices through it)"
                } else {
                    "each sees the whole un-noised sum (this engine reduces everything on every \
                     process)"
                }
            )?;
        }
        writeln!(f, "  neighbouring datasets: {}", c.neighbouring.describe())?;
        let n = c.public_size();
        writeln!(
            f,
            "  δ = {} against 1/N = {} (N = {}{}){}",
            sig(c.delta),
            sig(1.0 / n),
            sig(n),
            match c.neighbouring {
                super::Neighbouring::AddRemove { .. } => ", the public expected batch size / q",
                super::Neighbouring::ReplaceOne { .. } => "",
            },
            if c.delta * n >= 1.0 {
                ": WARNING δ ≥ 1/N, a mechanism that publishes one example at random meets it"
            } else {
                ""
            }
        )?;
        writeln!(f, "  accountant: {:?}", self.accounted.accountant)?;
        writeln!(
            f,
            "  assumes: the generators' seed is secret (drawn from the operating system){}; \
             every step's batch was sampled by this mechanism and released once, in order; \
             the batcher makes each example's row from that example alone (no padding to the \
             batch's longest item that the loss reads, no batch statistics, no mixing of \
             examples), so that one example changes one row; \
             in a data-parallel run, every peer is trusted (the guarantee is for the released \
             parameters, not for what peers see){}",
            if self.seeded { " -- VIOLATED" } else { "" },
            match c.noise {
                super::NoiseKind::Hardened { .. } => {
                    "; the discrete Gaussian on the grid γ is accounted by Rényi DP: one step \
                     is (α, α/(2σ²))-RDP for the sensitivity C + γ·√d of the rounded sums \
                     (Canonne, Kamath & Steinke 2020), Poisson sampling by Zhu & Wang 2019's \
                     general bound, converted to (ε, δ) by Balle et al. 2020 (Thm 21)"
                }
                super::NoiseKind::Plain => "",
            }
        )?;
        write!(
            f,
            "  does not cover: hyper-parameter tuning or repeated runs on the same data (each \
             run spends its own ε), the per-step metrics (the counts of clipped and non-finite \
             examples, the losses), the error of a step that failed after reading its batch \
             (accounted as a step, but not noised), timing side channels, floating-point rounding in the \
             clipping (each example's gradient and its norm are computed in f32: a clipped \
             norm may exceed C by the rounding of that norm) and in the sum (accumulated in \
             f64, at most about B·2⁻⁵³ of the sum of the clipped norms, on wgpu, which has no \
             f64, B·2⁻²⁴; a data-parallel run exchanges each process's sum in f32, 2⁻²⁴ of \
             it), and anything computed from the data outside the mechanism"
        )
    }
}

/// `x` with 4 significant digits, without trailing zeros.
fn sig(x: f64) -> String {
    if !x.is_finite() {
        return if x > 0.0 { "∞".into() } else { x.to_string() };
    }
    let s = format!("{x:.4e}");
    let v: f64 = s.parse().unwrap_or(x);
    let mag = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    if (-4..=6).contains(&mag) {
        let decimals = (3 - mag).max(0) as usize;
        let t = format!("{v:.decimals$}");
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t
        }
    } else {
        format!("{v:e}")
    }
}
