//! The timings quoted in NOTES.md: `cargo run --release --example timings`.
use std::time::Instant;

use burn_vmap_accounting::{
    calibrate_noise_multiplier, AccountantKind, NoiseCalibration, PldAccountant, PoissonGaussian,
    RdpAccountant,
};

fn main() -> Result<(), burn_vmap_accounting::AccountingError> {
    let step = PoissonGaussian::new(0.01, 1.1)?;

    let t = Instant::now();
    let mut rdp = RdpAccountant::new();
    for _ in 0..10_000 {
        rdp.compose(step, 1)?;
    }
    let eps = rdp.epsilon(1e-5)?;
    println!(
        "RDP, 10 000 compose(step, 1) calls + ε: {:.2?} (ε = {eps:.6})",
        t.elapsed()
    );

    let t = Instant::now();
    let mut rdp = RdpAccountant::new();
    rdp.compose(step, 10_000)?;
    let eps = rdp.epsilon(1e-5)?;
    println!(
        "RDP, compose(step, 10 000) + ε: {:.2?} (ε = {eps:.6})",
        t.elapsed()
    );

    let t = Instant::now();
    let mut pld = PldAccountant::new();
    pld.compose(step, 10_000)?;
    let eps = pld.epsilon(1e-5)?;
    println!(
        "PLD (Δ = 1e-4), q = 0.01, σ = 1.1, T = 10 000: {:.2?} (ε = {eps:.6})",
        t.elapsed()
    );
    let t = Instant::now();
    let eps6 = pld.epsilon(1e-6)?;
    println!(
        "  second query (cached composition): {:.2?} (ε at 1e-6 = {eps6:.6})",
        t.elapsed()
    );

    let t = Instant::now();
    let s = calibrate_noise_multiplier(1.0, 1e-5, 0.01, 1000, AccountantKind::Rdp, 1e-6)?;
    println!(
        "calibration RDP (ε = 1, δ = 1e-5, q = 0.01, T = 1000, tol 1e-6): {:.2?} (σ = {s:.7})",
        t.elapsed()
    );

    let t = Instant::now();
    let s = calibrate_noise_multiplier(1.0, 1e-5, 0.01, 1000, AccountantKind::Pld, 1e-4)?;
    println!(
        "calibration PLD (same, Δ = 1e-4, tol 1e-4): {:.2?} (σ = {s:.5})",
        t.elapsed()
    );

    let t = Instant::now();
    let s = NoiseCalibration::new(1.0, 1e-5, 0.01, 1000)?
        .tolerance(1e-4)?
        .bracket(0.756561, 1.513273)?
        .run(&PldAccountant::new())?;
    println!(
        "calibration PLD with dp-accounting's bracket: {:.2?} (σ = {s:.5})",
        t.elapsed()
    );
    Ok(())
}
