//! A one-run privacy audit of DP-SGD (Steinke, Nasr & Jagielski 2023) through
//! `burn_vmap::privacy`: 1000 canaries, each inserted with probability ½, one DP-SGD step of the
//! real mechanism, a score per canary read from the released model, and the empirical lower
//! bound on ε (`privacy::accounting::audit`) beside the accountant's ε. Then the same run with
//! the noise switched off (a deliberately broken mechanism): its bound rises above the ε the
//! real mechanism claims, as an audit should catch.
//!
//! ```text
//! cargo run --release --example dp_audit
//! ```
//!
//! The model is a bias-free `Linear(1000 → 1)` with the loss `−w·x`, so canary `i` (the unit
//! vector `e_i`, norm 1 = C) moves weight `i` alone, by `1/B` when included, and its score is
//! that weight's change: the white-box audit of the paper. With one step at `q = 1` the run is
//! the Gaussian mechanism on each coordinate.

use std::error::Error;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_vmap::privacy::accounting::audit::{
    AuditConfig, AuditReport, Guesses, audit, draw_inclusion,
};
use burn_vmap::privacy::accounting::{PldAccountant, PoissonGaussian};
use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring};
use rand::SeedableRng;

/// Canaries, and the model's input width.
pub const CANARIES: usize = 1000;

/// Canary `i` is the unit vector `e_i`.
#[derive(Clone)]
struct OneHot;

impl Batcher<usize, Tensor<2>> for OneHot {
    fn batch(&self, items: Vec<usize>, device: &Device) -> Tensor<2> {
        let mut rows = vec![0.0f32; items.len() * CANARIES];
        for (row, &i) in items.iter().enumerate() {
            rows[row * CANARIES + i] = 1.0;
        }
        Tensor::from_data(TensorData::new(rows, [items.len(), CANARIES]), device)
    }
}

/// The audit of one run: the empirical lower bound, and the ε the mechanism claims.
pub struct Audited {
    /// The audit's report (its ε lower bound at 95% confidence).
    pub report: AuditReport,
    /// The accountant's ε of the real mechanism (σ = 1), at the same δ.
    pub claimed: f64,
}

/// One DP-SGD step with `sigma` (`0`: the noise switched off) on the canaries a `seed`ed coin
/// includes, audited. The mechanism's generator is seeded too (a reproducible test; the
/// statement says it is not private).
///
/// # Errors
/// A refused setting or step.
pub fn audit_run(sigma: f64, seed: u64) -> Result<Audited, Box<dyn Error>> {
    let device = Device::default();
    let delta = 1e-5;
    let mut coins = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let included = draw_inclusion(&mut coins, CANARIES);
    let data: Vec<usize> = (0..CANARIES).filter(|&i| included[i]).collect();

    let public = Neighbouring::AddRemove {
        expected_batch_size: CANARIES as f64 / 2.0,
    };
    let config = DpConfig::new(1.0, sigma, 1.0, public).with_delta(delta);
    let mut dp = DpMechanism::seeded(config, seed)?;
    let mut loader = dp.loader(
        Arc::new(InMemDataset::new(data)),
        Arc::new(OneHot),
        device.clone(),
    )?;
    let model: Linear = LinearConfig::new(CANARIES, 1)
        .with_bias(false)
        .init(&device);
    let loss = |m: &Linear, x: Tensor<2>| -m.forward(x).sum();
    let (gradient, _) = dp.noisy_gradient(&model, loss, loader.next_batch()?)?;

    // The released update is `-gradient`; canary i's score is its coordinate.
    let update: Tensor<2> = -gradient.get::<2>("weight").expect("the weight's gradient");
    let scores: Vec<f64> = update
        .into_data()
        .convert::<f64>()
        .try_into_vec::<f64>()
        .expect("f64 scores");
    let report = audit(
        &scores,
        &included,
        &AuditConfig::new(Guesses::symmetric(400))
            .with_delta(delta)
            .with_confidence(0.95),
    )?;
    // What the real mechanism (σ = 1) claims for this one step.
    let mut accountant = PldAccountant::new();
    accountant.compose(PoissonGaussian::new(1.0, 1.0)?, 1)?;
    Ok(Audited {
        report,
        claimed: accountant.epsilon(delta)?,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    for (name, sigma) in [("DP-SGD, σ = 1", 1.0), ("broken: noise off", 0.0)] {
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
