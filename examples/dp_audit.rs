//! A one-run privacy audit of DP-SGD (Steinke, Nasr & Jagielski 2023) through
//! `burn_vmap::privacy`: 100 000 canaries, each inserted with probability ½, one DP-SGD step of the
//! real mechanism, a score per canary read from the released model, and the empirical lower
//! bound on ε (`privacy::accounting::audit`) beside the ε the mechanism claims. Then the same
//! run with half the noise (a calibration bug: σ = ½ where σ = 1 is claimed) and with the noise
//! switched off: their bounds rise above the claim, as an audit should catch.
//!
//! ```text
//! cargo run --release --example dp_audit
//! ```
//!
//! The model is one column of embeddings (`Embedding(m, 1)`) with the loss `−e_i`, so canary `i`
//! (the token `i`) moves its own embedding alone, by `1/B` when included (its gradient has norm
//! 1 = C), and its score is that embedding's change: the white-box audit of the paper. With one
//! step at `q = 1` the run is the Gaussian mechanism on each coordinate.
//!
//! **What it can catch.** The audit's bound can never exceed [`AuditConfig::max_epsilon`] (every
//! guess right), which the `2mδ` term of the paper's theorem caps near `ln(r·β / (2mδ))`: with
//! 1000 canaries it stays far below 4.38, the ε of σ = 1 at δ = 1e-5, so such an audit flags only
//! a mechanism with σ ≤ 0.2 (true ε ≥ 33). 100 000 canaries and 3000 guesses each way (designed
//! with `burn-vmap-accounting`'s `examples/audit_design.rs`: σ = ½ flagged in 500 of 500 seeded
//! runs of synthetic scores, σ = 1 in none) certify up to 5.31, enough to catch σ halved.
//!
//! The mechanism draws plain noise: its claim is the continuous Gaussian's privacy-loss
//! distribution (4.38), the tightest, so the audit has the most room above it. The default
//! hardened noise has the same variance and claims 4.75 (the discrete Gaussian's Rényi DP, a
//! looser accountant), closer to what the audit can certify. The canaries' coins and the
//! mechanism's generators are separate streams (the same stream would correlate the noise with
//! the canaries it should hide).

use std::error::Error;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::{Embedding, EmbeddingConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::privacy::accounting::audit::{
    AuditConfig, AuditReport, Guesses, audit, draw_inclusion,
};
use burn_vmap::privacy::accounting::{PldAccountant, PoissonGaussian};
use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring, NoiseKind};
use rand::SeedableRng;

/// Canaries: the embedding table's rows.
pub const CANARIES: usize = 100_000;
/// Guesses each way (the highest scores "included", the lowest "excluded").
pub const GUESSES: usize = 3_000;
/// The δ of the audit and of the claim.
pub const DELTA: f64 = 1e-5;

/// Canary `i` is the token `i`: a batch of tokens `[n, 1]`.
#[derive(Clone)]
struct Tokens;

impl Batcher<usize, Tensor<2, Int>> for Tokens {
    fn batch(&self, items: Vec<usize>, device: &Device) -> Tensor<2, Int> {
        let tokens: Vec<i64> = items.iter().map(|&i| i as i64).collect();
        Tensor::from_data(TensorData::new(tokens, [items.len(), 1]), device)
    }
}

/// The audit's settings: 3000 guesses each way at δ = 1e-5, 95% confidence.
pub fn design() -> AuditConfig {
    AuditConfig::new(Guesses::symmetric(GUESSES))
        .with_delta(DELTA)
        .with_confidence(0.95)
}

/// The audit of one run: the empirical lower bound, and the ε the mechanism claims.
pub struct Audited {
    /// The audit's report (its ε lower bound at 95% confidence).
    pub report: AuditReport,
    /// The ε the mechanism's accountant claims for σ = 1 (one step, q = 1), at the same δ.
    pub claimed: f64,
}

/// One DP-SGD step whose noise has multiplier `sigma` (`0`: switched off), on the canaries a
/// `seed`ed coin includes, audited against what the mechanism claims for σ = 1. The mechanism's
/// generator is seeded too (a reproducible run; its statement says it is not private), from
/// another stream than the coins.
///
/// # Errors
/// A refused setting or step.
pub fn audit_run(sigma: f64, seed: u64) -> Result<Audited, Box<dyn Error>> {
    let device = Device::default();
    let mut coins = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let included = draw_inclusion(&mut coins, CANARIES);
    let data: Vec<usize> = (0..CANARIES).filter(|&i| included[i]).collect();

    let config = |sigma| {
        let public = Neighbouring::AddRemove {
            expected_batch_size: CANARIES as f64 / 2.0,
        };
        DpConfig::new(1.0, sigma, 1.0, public)
            .with_delta(DELTA)
            .with_noise(NoiseKind::Plain)
    };
    // Not the coins' stream: a generator keyed from another seed.
    let mut dp = DpMechanism::seeded(config(sigma), seed ^ 0x9E37_79B9_7F4A_7C15)?;
    let mut loader = dp.loader(
        Arc::new(InMemDataset::new(data)),
        Arc::new(Tokens),
        device.clone(),
    )?;
    let model: Embedding = EmbeddingConfig::new(CANARIES, 1).init(&device);
    let loss = |m: &Embedding, tokens: Tensor<2, Int>| -m.forward(tokens).sum();
    let (gradient, _) = dp.noisy_gradient(&model, loss, loader.next_batch()?)?;

    // The released update is `-gradient`; canary i's score is its row.
    let update: Tensor<2> = -gradient.get::<2>("weight").expect("the table's gradient");
    let scores: Vec<f64> = update
        .into_data()
        .convert::<f64>()
        .try_into_vec::<f64>()
        .expect("f64 scores");
    let report = audit(&scores, &included, &design())?;
    // What the real mechanism (σ = 1, plain noise: the continuous Gaussian's PLD) claims for
    // this one step.
    let mut accountant = PldAccountant::new();
    accountant.compose(PoissonGaussian::new(1.0, 1.0)?, 1)?;
    Ok(Audited {
        report,
        claimed: accountant.epsilon(DELTA)?,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    println!(
        "{CANARIES} canaries, {GUESSES} guesses each way: the audit can certify at most ε = {:.3} \
         (δ = {DELTA:e}, 95% confidence)\n",
        design().max_epsilon(CANARIES)?
    );
    for (name, sigma) in [
        ("DP-SGD, σ = 1", 1.0),
        ("broken: half the noise, σ = ½", 0.5),
        ("broken: noise off", 0.0),
    ] {
        let run = audit_run(sigma, 7)?;
        println!("{name}:");
        println!("  {}", run.report);
        println!(
            "  empirical ε ≥ {:.3} (95% confidence) against the accountant's ε = {:.3} for σ = 1{}",
            run.report.epsilon_lower_bound,
            run.claimed,
            if run.report.epsilon_lower_bound > run.claimed {
                ": the audit catches the broken mechanism"
            } else {
                ""
            }
        );
    }
    Ok(())
}
