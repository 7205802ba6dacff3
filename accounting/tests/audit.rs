//! The one-run audit (`burn_vmap_accounting::audit`):
//!
//! * the binomial tail and the p-value against values computed by hand;
//! * perfect guesses against the closed form `P[Binomial(r, p) ≥ r] = pʳ`;
//! * a simulated Gaussian mechanism (seeded): the audit stays below the mechanism's exact ε
//!   (and the accountant's) at σ = 1, 2, 4, and catches a broken one (σ = 0.05) above the ε
//!   claimed for σ = 1;
//! * every bad input gives a typed error.

mod common;

use burn_vmap_accounting::audit::{binomial_tail, count_correct};
use burn_vmap_accounting::{
    audit, draw_inclusion, AccountingError, AuditConfig, GuessCount, GuessTally, Guesses,
    PldAccountant, PoissonGaussian,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

fn close(got: f64, want: f64, rtol: f64) -> bool {
    (got - want).abs() <= rtol * want.abs()
}

// ---------------------------------------------------------------------------------------------
// (a) The binomial tail and the p-value, by hand.

#[test]
fn should_match_hand_computed_binomial_tails() {
    let cases: &[(u64, f64, u64, f64)] = &[
        (4, 0.5, 3, 5.0 / 16.0),                           // (4 + 1) / 16
        (6, 0.5, 4, 22.0 / 64.0),                          // (15 + 6 + 1) / 64
        (3, 0.2, 1, 1.0 - 0.512),                          // 1 − 0.8³
        (5, 0.3, 2, 1.0 - 0.168_07 - 5.0 * 0.3 * 0.240_1), // 1 − P[0] − P[1]
        (10, 0.9, 10, 0.348_678_440_1),                    // 0.9¹⁰
        (4, 0.75, 3, 189.0 / 256.0),                       // (4·27 + 81) / 256
        (1, 0.25, 1, 0.25),
        (7, 0.0, 1, 0.0),
        (7, 1.0, 7, 1.0),
        (7, 0.4, 0, 1.0),
        (7, 0.4, 8, 0.0),
    ];
    for &(n, p, v, want) in cases {
        let got = binomial_tail(n, p, v).unwrap();
        assert!(
            close(got, want, 1e-13) || (want == 0.0 && got == 0.0),
            "P[Bin({n}, {p}) ≥ {v}] = {got}, by hand {want}"
        );
    }
    // Symmetry at larger n: P[Bin(2001, ½) ≥ 1001] = ½ exactly.
    let half = binomial_tail(2001, 0.5, 1001).unwrap();
    assert!(close(half, 0.5, 1e-13), "{half}");
}

#[test]
fn should_match_hand_computed_p_values() {
    // δ = 0: the p-value is P[Bin(r, e^ε/(1 + e^ε)) ≥ v]; at ε = ln 3 the accuracy is ¾.
    let tally = GuessTally::new(10, 4, 3).unwrap();
    let got = tally.p_value(3f64.ln(), 0.0).unwrap();
    assert!(close(got, 189.0 / 256.0, 1e-13), "{got}");
    // δ > 0, r = v = 3, ε = 0, m = 10: f(3) = ⅛ and
    // max(P[X = 2] / 1, P[1 ≤ X ≤ 2] / 2, P[X ≤ 2] / 3) = max(3/8, 3/8, 7/24) = 3/8,
    // so p = ⅛ + 2·10·δ·⅜.
    let tally = GuessTally::new(10, 3, 3).unwrap();
    let got = tally.p_value(0.0, 1e-3).unwrap();
    assert!(close(got, 0.125 + 20.0 * 1e-3 * 0.375, 1e-13), "{got}");
    // The correction can push the p-value past 1: it is capped.
    assert_eq!(tally.p_value(0.0, 0.5).unwrap(), 1.0);
    // No correct guess: p = 1. Infinite ε: p = 1.
    assert_eq!(
        GuessTally::new(5, 5, 0).unwrap().p_value(2.0, 0.0).unwrap(),
        1.0
    );
    assert_eq!(tally.p_value(f64::INFINITY, 0.0).unwrap(), 1.0);
}

#[test]
fn should_count_correct_guesses_from_the_ranking() {
    let scores = [0.3, 0.9, -1.0, 0.5, 0.5, 0.0];
    let included = [false, true, false, true, false, true];
    // Ranking: 2 (−1), 5 (0), 0 (0.3), 3 (0.5), 4 (0.5, tie after 3), 1 (0.9).
    // Top 2: 1 (in, right), 4 (out, wrong); bottom 2: 2 (out, right), 5 (in, wrong).
    assert_eq!(
        count_correct(&scores, &included, Guesses::symmetric(2)).unwrap(),
        2
    );
    assert_eq!(
        count_correct(&scores, &included, Guesses::new(1, 1)).unwrap(),
        2
    );
    assert_eq!(
        count_correct(&scores, &included, Guesses::new(0, 3)).unwrap(),
        2
    );
    assert_eq!(
        count_correct(&scores, &included, Guesses::new(6, 0)).unwrap(),
        3
    );
}

// ---------------------------------------------------------------------------------------------
// (b) Perfect guesses: P[Bin(r, p) ≥ r] = pʳ < β  ⟺  ε < −ln(β^(−1/r) − 1).

#[test]
fn should_match_the_closed_form_for_perfect_guesses() {
    let beta: f64 = 0.05;
    let r = 100;
    // 3.4929…
    let want = -(-beta.ln() / r as f64).exp_m1().ln();
    // 100 canaries, alternately included; the score is the inclusion bit.
    let included: Vec<bool> = (0..r).map(|i| i % 2 == 0).collect();
    let scores: Vec<f64> = included.iter().map(|&b| f64::from(u8::from(b))).collect();
    let report = audit(
        &scores,
        &included,
        &AuditConfig::new(Guesses::symmetric(50)),
    )
    .unwrap();
    assert_eq!((report.correct, report.guesses.total()), (100, 100));
    let got = report.epsilon_lower_bound;
    assert!(
        got <= want && close(got, want, 1e-9),
        "{got} vs closed form {want}"
    );
    // The same from the tally, for any number of canaries (m only enters with δ > 0).
    let tally = GuessTally::new(100_000, 100, 100).unwrap();
    assert_eq!(tally.epsilon_lower_bound(0.95, 0.0).unwrap(), got);
    // One fewer correct guess: P[Bin(r, p) ≥ r − 1] = pʳ + r pʳ⁻¹(1 − p), a smaller bound.
    let one_wrong = GuessTally::new(100, 100, 99).unwrap();
    let e = one_wrong.epsilon_lower_bound(0.95, 0.0).unwrap();
    let p = 1.0 / (1.0 + (-e).exp());
    let tail = p.powi(100) + 100.0 * p.powi(99) * (1.0 - p);
    assert!(e < got && close(tail, beta, 1e-8), "ε = {e}: tail {tail}");
    // δ > 0 only lowers the bound, more so with more canaries.
    let small_m = GuessTally::new(100, 100, 100).unwrap();
    let with_delta = small_m.epsilon_lower_bound(0.95, 1e-4).unwrap();
    let with_more = tally.epsilon_lower_bound(0.95, 1e-4).unwrap();
    assert!(
        with_more < with_delta && with_delta < got,
        "{with_more} {with_delta} {got}"
    );
    // The reported bound passed its test; a slightly larger one would not.
    assert!(small_m.p_value(with_delta, 1e-4).unwrap() < beta);
    assert!(small_m.p_value(with_delta * (1.0 + 1e-6), 1e-4).unwrap() >= beta);
}

// ---------------------------------------------------------------------------------------------
// (c) The Gaussian mechanism: canary i's score is bᵢ + N(0, σ²), sensitivity 1, so the release
// is (ε(σ, δ), δ)-DP with ε(σ, δ) the analytic Gaussian ε.

const DELTA: f64 = 1e-5;
const CANARIES: usize = 1000;

/// The audit of one simulated run at noise σ (seeded).
fn gaussian_audit(sigma: f64, seed: u64) -> burn_vmap_accounting::AuditReport {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let included = draw_inclusion(&mut rng, CANARIES);
    let scores: Vec<f64> = included
        .iter()
        .map(|&b| f64::from(u8::from(b)) + sigma * standard_normal(&mut rng))
        .collect();
    let candidates = [25, 50, 100, 200, 300, 400]
        .map(Guesses::symmetric)
        .to_vec();
    let config = AuditConfig::new(GuessCount::BestOf(candidates)).with_delta(DELTA);
    audit(&scores, &included, &config).unwrap()
}

/// Box–Muller (independent of the library).
fn standard_normal(rng: &mut ChaCha20Rng) -> f64 {
    let u1 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The accountant's ε for one Gaussian step (q = 1) at δ.
fn accountant_epsilon(sigma: f64) -> f64 {
    let mut pld = PldAccountant::with_discretization(1e-3).unwrap();
    pld.compose(PoissonGaussian::new(1.0, sigma).unwrap(), 1)
        .unwrap();
    pld.epsilon(DELTA).unwrap()
}

#[test]
fn should_stay_below_the_gaussian_mechanism_epsilon() {
    for (sigma, seed) in [(1.0, 11), (2.0, 12), (4.0, 13)] {
        let report = gaussian_audit(sigma, seed);
        let exact = common::analytic_gaussian_epsilon(sigma, DELTA);
        let accountant = accountant_epsilon(sigma);
        println!(
            "σ = {sigma}: audit ε ≥ {:.4} ({} of {} correct), exact ε = {exact:.4}, PLD ε = \
             {accountant:.4}",
            report.epsilon_lower_bound,
            report.correct,
            report.guesses.total()
        );
        assert!(
            exact <= accountant * (1.0 + 1e-9),
            "{exact} vs {accountant}"
        );
        assert!(
            report.epsilon_lower_bound < exact,
            "σ = {sigma}: the audit's {report} exceeds the exact ε = {exact}"
        );
    }
}

#[test]
fn should_catch_a_broken_mechanism() {
    // σ = 0.05 where σ = 1 is claimed: the audit must exceed the claimed ε.
    let claimed = accountant_epsilon(1.0);
    let report = gaussian_audit(0.05, 14);
    println!("σ = 0.05: {report}; claimed (σ = 1) ε = {claimed:.4}");
    assert_eq!(report.correct, report.guesses.total());
    assert!(
        report.epsilon_lower_bound > claimed,
        "{report} vs claimed {claimed}"
    );
    assert!(report.epsilon_lower_bound < common::analytic_gaussian_epsilon(0.05, DELTA));
}

#[test]
fn should_keep_its_false_alarm_rate_on_randomized_response() {
    // ε₀-DP randomized response (each canary's bit, flipped with probability 1/(1 + e^ε₀)) is
    // the worst case of the δ = 0 theorem: the correct guesses are exactly Binomial(r, e^ε₀/(1 +
    // e^ε₀)). So ε_lb > ε₀ must happen in at most a fraction β of the runs.
    let eps0: f64 = 1.0;
    let flip = 1.0 / (1.0 + eps0.exp());
    let config = AuditConfig::new(Guesses::symmetric(40));
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    let runs = 300;
    let (mut alarms, mut sum) = (0, 0.0);
    for _ in 0..runs {
        let included = draw_inclusion(&mut rng, 200);
        let scores: Vec<f64> = included
            .iter()
            .map(|&b| f64::from(u8::from(b ^ (rng.random::<f64>() < flip))))
            .collect();
        let eps = audit(&scores, &included, &config)
            .unwrap()
            .epsilon_lower_bound;
        alarms += usize::from(eps > eps0);
        sum += eps;
    }
    println!(
        "randomized response ε₀ = {eps0}: {alarms} of {runs} bounds above ε₀, mean bound {:.3}",
        sum / runs as f64
    );
    // Expected at most 15; 4 standard deviations of Binomial(300, 0.05) above that.
    assert!(alarms <= 30, "{alarms} false alarms in {runs} runs");
    assert!(sum / runs as f64 > 0.2);
}

#[test]
fn should_pay_for_the_union_bound() {
    // The best of n candidates is tested at β / n: never above the same candidate alone.
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let included = draw_inclusion(&mut rng, 500);
    let scores: Vec<f64> = included
        .iter()
        .map(|&b| f64::from(u8::from(b)) + 0.5 * standard_normal(&mut rng))
        .collect();
    let alone = audit(
        &scores,
        &included,
        &AuditConfig::new(Guesses::symmetric(100)),
    )
    .unwrap();
    let candidates = [10, 100, 200].map(Guesses::symmetric).to_vec();
    let best = audit(
        &scores,
        &included,
        &AuditConfig::new(GuessCount::BestOf(candidates)),
    )
    .unwrap();
    assert!(alone.epsilon_lower_bound > 0.0);
    assert_eq!(best.candidates, 3);
    // Each candidate at β / 3; the report is the largest of them.
    let at_third = |g: Guesses| {
        let correct = count_correct(&scores, &included, g).unwrap();
        GuessTally::new(500, g.total(), correct)
            .unwrap()
            .epsilon_lower_bound(1.0 - 0.05 / 3.0, 0.0)
            .unwrap()
    };
    let bounds = [10, 100, 200].map(|k| at_third(Guesses::symmetric(k)));
    let largest = bounds.iter().copied().fold(0.0, f64::max);
    assert!(
        close(best.epsilon_lower_bound, largest, 1e-9),
        "{best} vs {bounds:?}"
    );
    assert!(
        bounds[1] < alone.epsilon_lower_bound,
        "{bounds:?} vs {alone}"
    );
    let text = best.to_string();
    assert!(
        text.contains("with 95% confidence") && text.contains("best of 3 guess counts"),
        "{text}"
    );
}

#[test]
fn should_draw_fair_reproducible_inclusion_bits() {
    let a = draw_inclusion(&mut ChaCha20Rng::seed_from_u64(5), 10_000);
    let b = draw_inclusion(&mut ChaCha20Rng::seed_from_u64(5), 10_000);
    assert_eq!(a, b);
    let count = a.iter().filter(|&&x| x).count();
    assert!((4_800..5_200).contains(&count), "{count}"); // ±4 standard deviations
    assert!(draw_inclusion(&mut ChaCha20Rng::seed_from_u64(5), 0).is_empty());
    // Lengths that are not multiples of 64 take a prefix of the same stream.
    let c = draw_inclusion(&mut ChaCha20Rng::seed_from_u64(5), 100);
    assert_eq!(c[..], a[..100]);
}

// ---------------------------------------------------------------------------------------------
// (d) Errors.

#[test]
fn should_refuse_bad_inputs() {
    let scores = [0.1, 0.2, 0.3];
    let included = [true, false, true];
    let config = AuditConfig::new(Guesses::symmetric(1));

    let err = audit(&scores, &included[..2], &config).unwrap_err();
    assert_eq!(
        err,
        AccountingError::LengthMismatch {
            name: "included",
            other: "scores",
            expected: 3,
            actual: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid argument `included`: expected 3 elements (one per element of `scores`), got 2"
    );

    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = audit(&[0.1, bad, 0.3], &included, &config).unwrap_err();
        assert!(
            matches!(err, AccountingError::InvalidArgument { name: "scores", actual, .. }
                if actual.to_bits() == bad.to_bits()),
            "{err}"
        );
    }

    for confidence in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
        let err = audit(
            &scores,
            &included,
            &config.clone().with_confidence(confidence),
        );
        assert!(
            matches!(
                err,
                Err(AccountingError::InvalidArgument {
                    name: "confidence",
                    ..
                })
            ),
            "{confidence}: {err:?}"
        );
        assert!(GuessTally::new(3, 2, 2)
            .unwrap()
            .epsilon_lower_bound(confidence, 0.0)
            .is_err());
    }

    for delta in [1.0, -1e-9, 2.0, f64::NAN, f64::INFINITY] {
        let err = audit(&scores, &included, &config.clone().with_delta(delta));
        assert!(
            matches!(
                err,
                Err(AccountingError::InvalidArgument { name: "delta", .. })
            ),
            "{delta}: {err:?}"
        );
    }

    let err = audit(&scores, &included, &AuditConfig::new(Guesses::new(2, 2))).unwrap_err();
    assert_eq!(
        err,
        AccountingError::CountTooLarge {
            name: "guesses",
            what: "the number of canaries",
            limit: 3,
            actual: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid argument `guesses`: expected at most 3 (the number of canaries), got 4"
    );
    let mixed = GuessCount::BestOf(vec![Guesses::symmetric(1), Guesses::new(3, 1)]);
    assert!(matches!(
        audit(&scores, &included, &AuditConfig::new(mixed)),
        Err(AccountingError::CountTooLarge { actual: 4, .. })
    ));
    assert!(matches!(
        count_correct(&scores, &included, Guesses::new(4, 0)),
        Err(AccountingError::CountTooLarge { actual: 4, .. })
    ));

    for none in [
        AuditConfig::new(Guesses::new(0, 0)),
        AuditConfig::new(GuessCount::BestOf(Vec::new())),
    ] {
        assert!(matches!(
            audit(&scores, &included, &none),
            Err(AccountingError::InvalidCount {
                name: "guesses",
                actual: 0,
                ..
            })
        ));
    }
    // No canaries at all: any guess is one too many.
    assert!(matches!(
        audit(&[], &[], &config),
        Err(AccountingError::CountTooLarge { limit: 0, .. })
    ));

    assert!(matches!(
        GuessTally::new(10, 4, 5),
        Err(AccountingError::CountTooLarge {
            name: "correct",
            limit: 4,
            actual: 5,
            ..
        })
    ));
    let tally = GuessTally::new(10, 4, 3).unwrap();
    assert!(matches!(
        tally.p_value(-1.0, 0.0),
        Err(AccountingError::InvalidArgument {
            name: "epsilon",
            ..
        })
    ));
    assert!(matches!(
        tally.p_value(f64::NAN, 0.0),
        Err(AccountingError::InvalidArgument {
            name: "epsilon",
            ..
        })
    ));
    assert!(matches!(
        tally.p_value(1.0, 1.0),
        Err(AccountingError::InvalidArgument { name: "delta", .. })
    ));
    for p in [-0.1, 1.1, f64::NAN] {
        assert!(matches!(
            binomial_tail(5, p, 2),
            Err(AccountingError::InvalidArgument {
                name: "success_probability",
                ..
            })
        ));
    }
}
