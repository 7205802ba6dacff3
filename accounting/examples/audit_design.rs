//! Which one-run audit catches a DP-SGD step run with half its noise:
//! `cargo run --release --example audit_design [seeds]` (100 seeds by default, about a minute).
//!
//! Synthetic white-box scores `scoreᵢ = bᵢ + s·Zᵢ` (bᵢ the canary's inclusion bit, Zᵢ standard
//! normal, s the noise in units of the signal: s = σ for one step at q = 1), audited over a grid
//! of canaries m, guesses k₊ = k₋ = k and δ at 95% confidence. A setting *flags* σ when the
//! audit's lower bound exceeds the accountant's ε for the claimed σ = 1 at the same δ; it must
//! not flag σ = 1 itself (the audit is valid).
//!
//! ```text
//! for each m, each σ, each seed:  draw bᵢ, Zᵢ; rank the scores once
//!     for each k, each δ:        ε_lb of the k₊ = k₋ = k guesses (fixed, at β; or the best
//!                                of a few k, each at β / n)
//! print, per (m, k, δ) and σ: the fraction of seeds flagged, the median ε_lb [min, max]
//! ```
//!
//! It first checks that steps alone do not help: T steps of σ at q = 1 compose to one step of
//! σ/√T (for the accountant, and for scores summed over the steps), so the broken run is still
//! the claimed one with half its noise.
use burn_vmap_accounting::{
    AuditConfig, GuessCount, GuessTally, Guesses, PldAccountant, PoissonGaussian,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

const CONFIDENCE: f64 = 0.95;
const CANARIES: [usize; 4] = [1_000, 20_000, 50_000, 100_000];
const SIGMAS: [f64; 7] = [0.2, 0.3, 0.5, 0.55, 0.6, 0.7, 1.0];
const DELTAS: [f64; 3] = [1e-5, 3e-6, 1e-6];
const KS: [usize; 6] = [400, 1_000, 2_000, 2_500, 3_000, 5_000];
/// The candidates of the `BestOf` rows, each tested at β / n.
const BEST_OF: &[&[usize]] = &[&[1_000, 2_000], &[2_000, 3_000], &[400, 1_000, 3_000]];

/// The accountant's ε of `steps` Gaussian steps (q = 1) with noise `sigma`, at `delta`.
fn claimed(sigma: f64, steps: u64, delta: f64) -> f64 {
    let mut pld = PldAccountant::new();
    pld.compose(PoissonGaussian::new(1.0, sigma).unwrap(), steps)
        .unwrap();
    pld.epsilon(delta).unwrap()
}

/// `n` standard normals: Box–Muller in f64, both outputs used.
fn normals(rng: &mut ChaCha20Rng, n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let u1 = 1.0 - rng.random::<f64>(); // (0, 1]
        let u2 = rng.random::<f64>();
        let radius = (-2.0 * u1.ln()).sqrt();
        let (sin, cos) = (std::f64::consts::TAU * u2).sin_cos();
        out.extend([radius * cos, radius * sin]);
    }
    out.truncate(n);
    out
}

/// One seeded run on `m` canaries: `(k, correct guesses)` for every k of `KS` with 2k ≤ m,
/// from one ranking of the scores (as `audit` ranks them: by score, ties by index).
fn correct_by_k(m: usize, sigma: f64, seed: u64) -> Vec<(usize, usize)> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let included = burn_vmap_accounting::draw_inclusion(&mut rng, m);
    let noise = normals(&mut rng, m);
    let scores: Vec<f64> = (0..m)
        .map(|i| f64::from(u8::from(included[i])) + sigma * noise[i])
        .collect();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_unstable_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    KS.iter()
        .filter(|&&k| 2 * k <= m)
        .map(|&k| {
            let low = order[..k].iter().filter(|&&i| !included[i]).count();
            let high = order[m - k..].iter().filter(|&&i| included[i]).count();
            (k, low + high)
        })
        .collect()
}

/// ε_lb of `ks` (each at `β / ks.len()`, the largest reported) for one run's tallies.
fn lower_bound(m: usize, ks: &[usize], run: &[(usize, usize)], delta: f64) -> f64 {
    let each = 1.0 - (1.0 - CONFIDENCE) / ks.len() as f64;
    ks.iter()
        .map(|k| {
            let correct = run.iter().find(|(kk, _)| kk == k).unwrap().1;
            GuessTally::new(m, 2 * k, correct)
                .unwrap()
                .epsilon_lower_bound(each, delta)
                .unwrap()
        })
        .fold(0.0, f64::max)
}

fn main() {
    let seeds: u64 = std::env::args()
        .nth(1)
        .map_or(100, |s| s.parse().expect("seeds: a count"));
    println!("T steps of σ at q = 1 are one step of σ/√T (PLD, δ = 1e-5):");
    for steps in [1u64, 4, 16] {
        let sqrt_t = (steps as f64).sqrt();
        println!(
            "  T = {steps:2}: ε(σ = 1, T) = {:.4}, ε(σ = 1/√T, 1) = {:.4}; ε(σ = ½, T) = {:.4}, \
             ε(σ = 1/(2√T), 1) = {:.4}",
            claimed(1.0, steps, 1e-5),
            claimed(1.0 / sqrt_t, 1, 1e-5),
            claimed(0.5, steps, 1e-5),
            claimed(0.5 / sqrt_t, 1, 1e-5),
        );
    }
    let claims: Vec<f64> = DELTAS.iter().map(|&d| claimed(1.0, 1, d)).collect();
    for (delta, claim) in DELTAS.iter().zip(&claims) {
        let truth: Vec<String> = SIGMAS
            .iter()
            .map(|&s| format!("{s}: {:.2}", claimed(s, 1, *delta)))
            .collect();
        println!(
            "δ = {delta:e}: claimed ε (σ = 1) = {claim:.4}; true ε by σ {}",
            truth.join(", ")
        );
    }
    println!(
        "\n{seeds} seeds; per σ in {SIGMAS:?}: fraction flagged, median ε_lb [min, max]; max ε: \
         all guesses correct (AuditConfig::max_epsilon)"
    );
    for &m in &CANARIES {
        // runs[σ][seed] = [(k, correct)]
        let runs: Vec<Vec<Vec<(usize, usize)>>> = SIGMAS
            .iter()
            .map(|&s| (0..seeds).map(|seed| correct_by_k(m, s, seed)).collect())
            .collect();
        let ks: Vec<usize> = runs[0][0].iter().map(|&(k, _)| k).collect();
        let mut rows: Vec<Vec<usize>> = ks.iter().map(|&k| vec![k]).collect();
        rows.extend(
            BEST_OF
                .iter()
                .filter(|set| set.iter().all(|k| ks.contains(k)))
                .map(|set| set.to_vec()),
        );
        println!("\nm = {m}");
        for (&delta, &claim) in DELTAS.iter().zip(&claims) {
            for row in &rows {
                let guesses =
                    GuessCount::BestOf(row.iter().map(|&k| Guesses::symmetric(k)).collect());
                let most = AuditConfig::new(guesses)
                    .with_delta(delta)
                    .with_confidence(CONFIDENCE)
                    .max_epsilon(m)
                    .unwrap();
                let cells: Vec<String> = runs
                    .iter()
                    .map(|by_seed| {
                        let mut bounds: Vec<f64> = by_seed
                            .iter()
                            .map(|run| lower_bound(m, row, run, delta))
                            .collect();
                        bounds.sort_by(f64::total_cmp);
                        let flagged = bounds.iter().filter(|&&e| e > claim).count();
                        format!(
                            "{:5.3} {:4.2} [{:4.2}, {:4.2}]",
                            flagged as f64 / seeds as f64,
                            bounds[bounds.len() / 2],
                            bounds[0],
                            bounds[bounds.len() - 1],
                        )
                    })
                    .collect();
                let label = if row.len() == 1 {
                    format!("k = {}", row[0])
                } else {
                    format!("best of {row:?}")
                };
                println!(
                    "  δ = {delta:e} {label:>20} (max ε {most:4.2}): {}",
                    cells.join(" | ")
                );
            }
        }
    }
}
