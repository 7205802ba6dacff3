//! What the one-run audit can catch (`burn_vmap_accounting::audit`):
//!
//! * [`AuditConfig::max_epsilon`], the largest bound an audit can give, against `audit` of
//!   perfectly separating scores and the closed form at δ = 0;
//! * a DP-SGD step at q = 1 run with half its noise (σ = ½ where σ = 1 is claimed), simulated
//!   as white-box scores `bᵢ + σ·Zᵢ` (seeded): the audit of examples/audit_design.rs (100 000
//!   canaries, 3000 guesses each way, δ = 1e-5) flags it above the claimed ε, and does not flag
//!   the step with its full noise.

use burn_vmap_accounting::{
    audit, draw_inclusion, AccountingError, AuditConfig, GuessCount, GuessTally, Guesses,
    PldAccountant, PoissonGaussian,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The audit design that catches σ halved (examples/audit_design.rs: σ = ½ flagged in 500 of
/// 500 seeded runs, σ = 1 in none).
const CANARIES: usize = 100_000;
const GUESSES: usize = 3_000;
const DELTA: f64 = 1e-5;

fn design() -> AuditConfig {
    AuditConfig::new(Guesses::symmetric(GUESSES))
        .with_delta(DELTA)
        .with_confidence(0.95)
}

/// The accountant's ε for one Gaussian step with σ = 1 at q = 1, at δ = 1e-5: 4.3772.
fn claimed() -> f64 {
    let mut pld = PldAccountant::new();
    pld.compose(PoissonGaussian::new(1.0, 1.0).unwrap(), 1)
        .unwrap();
    pld.epsilon(DELTA).unwrap()
}

/// Box–Muller in f64 (independent of the library).
fn standard_normal(rng: &mut ChaCha20Rng) -> f64 {
    let u1 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Inclusion bits and white-box scores `bᵢ + σ·Zᵢ` of one seeded run.
fn gaussian_run(sigma: f64, seed: u64) -> (Vec<bool>, Vec<f64>) {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let included = draw_inclusion(&mut rng, CANARIES);
    let scores = included
        .iter()
        .map(|&b| f64::from(u8::from(b)) + sigma * standard_normal(&mut rng))
        .collect();
    (included, scores)
}

// ---------------------------------------------------------------------------------------------
// (a) The largest ε an audit can certify.

#[test]
fn should_give_the_bound_of_perfect_guesses_as_max_epsilon() {
    let included: Vec<bool> = (0..1000).map(|i| i % 3 != 0).collect();
    let perfect: Vec<f64> = included.iter().map(|&b| f64::from(u8::from(b))).collect();
    let configs = [
        AuditConfig::new(Guesses::symmetric(300)),
        AuditConfig::new(Guesses::new(500, 200)).with_delta(1e-5),
        AuditConfig::new(Guesses::symmetric(100)).with_delta(1e-4),
        AuditConfig::new(GuessCount::BestOf(
            [50, 150, 300].map(Guesses::symmetric).to_vec(),
        ))
        .with_delta(1e-6)
        .with_confidence(0.99),
    ];
    for config in configs {
        let report = audit(&perfect, &included, &config).unwrap();
        assert_eq!(report.correct, report.guesses.total(), "{report}");
        let most = config.max_epsilon(1000).unwrap();
        assert_eq!(most, report.epsilon_lower_bound, "{config:?}");
        // One wrong guess gives less.
        let wrong = GuessTally::new(1000, report.guesses.total(), report.correct - 1).unwrap();
        let each = 1.0 - (1.0 - config.confidence) / config.guesses.candidates().len() as f64;
        assert!(wrong.epsilon_lower_bound(each, config.delta).unwrap() < most);
    }
    // δ = 0: P[Binomial(r, p) ≥ r] = pʳ < β  ⟺  ε < −ln(β^(−1/r) − 1).
    for r in [10usize, 100, 1000] {
        let want = -(-(0.05f64.ln()) / r as f64).exp_m1().ln();
        let got = AuditConfig::new(Guesses::new(r, 0)).max_epsilon(r).unwrap();
        assert!(
            got <= want && (got - want).abs() <= 1e-9 * want,
            "r = {r}: {got} vs {want}"
        );
    }
}

#[test]
fn should_grow_max_epsilon_with_the_guesses_and_shrink_it_with_2m_delta() {
    let most = |k: usize, canaries: usize, delta: f64| {
        AuditConfig::new(Guesses::symmetric(k))
            .with_delta(delta)
            .max_epsilon(canaries)
            .unwrap()
    };
    let by_k: Vec<f64> = [10, 100, 1000, 3000, 10_000]
        .iter()
        .map(|&k| most(k, 100_000, 1e-5))
        .collect();
    assert!(by_k.windows(2).all(|w| w[0] < w[1]), "{by_k:?}");
    // The run may reveal every canary with probability δ each: the cap falls with m δ ...
    let by_m: Vec<f64> = [10_000, 100_000, 1_000_000]
        .iter()
        .map(|&m| most(3000, m, 1e-5))
        .collect();
    assert!(by_m.windows(2).all(|w| w[0] > w[1]), "{by_m:?}");
    assert!(most(3000, 100_000, 1e-7) > most(3000, 100_000, 1e-5));
    // ... to about ln(r β / (2 m δ)) once 2 m δ is above β: ln(6000 · 0.05 / 2) = 5.01.
    let capped = most(3000, 100_000, 1e-5);
    assert!((capped - 5.31).abs() < 0.01, "{capped}");
    // The union bound over n candidates costs ln n of room at the cap.
    let best_of = AuditConfig::new(GuessCount::BestOf(
        [2000, 3000].map(Guesses::symmetric).to_vec(),
    ))
    .with_delta(1e-5)
    .max_epsilon(100_000)
    .unwrap();
    assert!(best_of < capped - 0.5, "{best_of} vs {capped}");
}

#[test]
fn should_refuse_a_max_epsilon_it_cannot_give() {
    let config = AuditConfig::new(Guesses::symmetric(10));
    assert!(matches!(
        config.max_epsilon(19),
        Err(AccountingError::CountTooLarge {
            name: "guesses",
            limit: 19,
            actual: 20,
            ..
        })
    ));
    assert!(matches!(
        config.clone().with_confidence(1.0).max_epsilon(100),
        Err(AccountingError::InvalidArgument {
            name: "confidence",
            ..
        })
    ));
    assert!(matches!(
        config.clone().with_delta(-1.0).max_epsilon(100),
        Err(AccountingError::InvalidArgument { name: "delta", .. })
    ));
    assert!(matches!(
        AuditConfig::new(GuessCount::BestOf(Vec::new())).max_epsilon(100),
        Err(AccountingError::InvalidCount {
            name: "guesses",
            ..
        })
    ));
}

// ---------------------------------------------------------------------------------------------
// (b) Half the noise: σ = ½ where σ = 1 is claimed.

#[test]
fn should_flag_a_step_with_half_its_noise() {
    let claimed = claimed();
    assert!((claimed - 4.3772).abs() < 1e-3, "{claimed}");
    let config = design();
    let most = config.max_epsilon(CANARIES).unwrap();
    assert!(most > claimed + 0.9, "{most} vs {claimed}");

    let (included, scores) = gaussian_run(0.5, 1);
    let broken = audit(&scores, &included, &config).unwrap();
    println!("σ = ½: {broken}; claimed (σ = 1) ε = {claimed:.4}, at most {most:.4}");
    assert!(
        broken.epsilon_lower_bound > claimed,
        "{broken} vs {claimed}"
    );
    assert!(broken.epsilon_lower_bound <= most);

    let (included, scores) = gaussian_run(1.0, 1);
    let sound = audit(&scores, &included, &config).unwrap();
    println!("σ = 1: {sound}");
    assert!(sound.epsilon_lower_bound < claimed, "{sound} vs {claimed}");
}

#[test]
fn should_flag_half_the_noise_on_every_seed() {
    // examples/audit_design.rs: 500 of 500 seeds flag σ = ½ (the lowest bound 4.60), none
    // flags σ = 1 (the highest 2.53); a few seeds here, each side.
    let claimed = claimed();
    let config = design();
    for seed in 2..6 {
        let (included, scores) = gaussian_run(0.5, seed);
        let broken = audit(&scores, &included, &config).unwrap();
        assert!(
            broken.epsilon_lower_bound > claimed,
            "seed {seed}: {broken}"
        );
        let (included, scores) = gaussian_run(1.0, seed);
        let sound = audit(&scores, &included, &config).unwrap();
        assert!(sound.epsilon_lower_bound < claimed, "seed {seed}: {sound}");
    }
}
