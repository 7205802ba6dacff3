//! Zhu & Wang's general bound for Poisson subsampling (`poisson_subsampled_rdp_bound`) and the
//! discrete-Gaussian accountant built on it:
//!
//! * reference values of the bound from `mpmath` at 50 digits (script below);
//! * the bound against the continuous Gaussian's exact RDP: never below it, never more than
//!   `ln 3/(α−1)` above it (proptest);
//! * ε of the discrete-Gaussian accountant against the Gaussian accountant's;
//! * argument errors name the argument.

use burn_vmap_accounting::{
    calibrate_noise_multiplier, poisson_discrete_gaussian_rdp, poisson_gaussian_rdp,
    poisson_subsampled_rdp_bound, Accountant, AccountantDescription, AccountantKind,
    AccountingError, NoiseDistribution, PoissonGaussian, RdpAccountant,
};
use proptest::prelude::*;

/// The bound with the discrete Gaussian's base RDP `ε(l) = l/(2σ²)`.
fn zw(q: f64, sigma: f64, order: u64) -> f64 {
    poisson_subsampled_rdp_bound(q, |l| l as f64 / (2.0 * sigma * sigma), order).unwrap()
}

fn gaussian(q: f64, sigma: f64, order: u64) -> f64 {
    poisson_gaussian_rdp(PoissonGaussian::new(q, sigma).unwrap(), &[order as f64]).unwrap()[0]
}

/// Zhu & Wang's bound (ICML 2019, Thm 5) with `ε(l) = l/(2σ²)`, from mpmath 1.3.0 at 50 digits,
/// printed to 25 significant digits. Columns: q, σ, α, ε'(α). Made with:
///
/// ```python
/// import mpmath as mp
/// mp.mp.dps = 50
///
/// def zw(q, s, a):
///     q, s = mp.mpf(q), mp.mpf(s)  # the exact binary values of the doubles
///     eps = lambda l: mp.mpf(l) / (2 * s * s)
///     total = (1 - q) ** (a - 1) * (a * q - q + 1)
///     total += mp.binomial(a, 2) * q**2 * (1 - q) ** (a - 2) * mp.exp(eps(2))
///     total += 3 * mp.fsum(mp.binomial(a, l) * (1 - q) ** (a - l) * q**l
///                          * mp.exp((l - 1) * eps(l)) for l in range(3, a + 1))
///     return mp.log(total) / (a - 1)
///
/// cases = [(1e-4, 50.0, a) for a in (2, 3, 16, 256, 4096)]
/// cases += [(0.5, 0.5, a) for a in (2, 3, 8, 32)]
/// cases += [(0.01, 1.1, a) for a in (2, 10, 32, 128)]
/// cases += [(0.05, 1.0, a) for a in (4, 12, 64)]
/// cases += [(0.9, 3.0, 5), (1e-6, 0.3, 7), (1.0, 2.0, 2), (1.0, 2.0, 3)]
/// for q, s, a in cases:
///     print(f"({q!r}, {s!r}, {a}, {mp.nstr(zw(q, s, a), 25, min_fixed=-30, max_fixed=30)}),")
/// ```
#[allow(clippy::excessive_precision)]
const MPMATH_ZW: &[(f64, f64, u64, f64)] = &[
    (0.0001, 50.0, 2, 0.000000000004000800106669331369427359),
    (0.0001, 50.0, 3, 0.000000000007002401120383096408730304),
    (0.0001, 50.0, 16, 0.0000000001066899158682716825002478),
    (0.0001, 50.0, 256, 0.00000002180525275316756193079237),
    (0.0001, 50.0, 4096, 0.000004104351541890600754375508),
    (0.5, 0.5, 2, 2.667196088586042889436985),
    (0.5, 0.5, 3, 5.509757171431745009090327),
    (0.5, 0.5, 8, 15.36477640631343981944909),
    (0.5, 0.5, 32, 63.31993233905644709000141),
    (0.01, 1.1, 2, 0.000128510081605161802909099),
    (0.01, 1.1, 10, 0.00126376183785616752490138),
    (0.01, 1.1, 32, 8.504855539761993686696004),
    (0.01, 1.1, 128, 48.25978110537809274616415),
    (0.05, 1.0, 4, 0.01909770703674681058500219),
    (0.05, 1.0, 12, 2.83214944563850847586985),
    (0.05, 1.0, 64, 28.97415471081289983594055),
    (0.9, 3.0, 5, 0.5074592548076197149973246),
    (1e-06, 0.3, 7, 22.95389528604192354155762),
    (1.0, 2.0, 2, 0.25),
    (1.0, 2.0, 3, 0.9243061443340548456976226),
];

#[test]
fn should_match_mpmath_reference_values() {
    let mut worst = 0.0f64;
    for &(q, sigma, alpha, want) in MPMATH_ZW {
        let got = zw(q, sigma, alpha);
        let r = ((got - want) / want).abs();
        worst = worst.max(r);
        assert!(
            r < 1e-10,
            "q={q} σ={sigma} α={alpha}: {got} vs mpmath {want} (rel {r:e})"
        );
        assert!(
            got >= want * (1.0 - 1e-13),
            "q={q} σ={sigma} α={alpha}: {got} below the exact bound {want}"
        );
    }
    println!(
        "Zhu–Wang bound vs mpmath: {} values, max relative difference {worst:.2e}",
        MPMATH_ZW.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Each term of the bound is the Gaussian's term times 1 (l = 2) or 3 (l ≥ 3), so
    /// `A_α ≤ S_α ≤ 3·A_α`; the discrete-Gaussian curve is the smaller of this and bounds that
    /// are themselves ≥ the Gaussian's RDP.
    #[test]
    fn should_lie_between_gaussian_rdp_and_it_plus_ln3_over_alpha_minus_1(
        q in prop_oneof![1e-6f64..1.0, (-8.0f64..0.0).prop_map(|e| 10f64.powf(e))],
        sigma in 0.3f64..=50.0,
        alpha in 2u64..200,
    ) {
        prop_assume!(q > 0.0 && q < 1.0);
        let exact = gaussian(q, sigma, alpha);
        let bound = zw(q, sigma, alpha);
        let slack = 3f64.ln() / (alpha as f64 - 1.0);
        prop_assert!(bound >= exact * (1.0 - 1e-12), "{bound} < exact {exact}");
        prop_assert!(bound <= exact + slack + 1e-12 * exact, "{bound} > {exact} + {slack}");
        let step = PoissonGaussian::new(q, sigma).unwrap();
        let curve = poisson_discrete_gaussian_rdp(step, &[alpha as f64]).unwrap()[0];
        prop_assert!(curve >= exact * (1.0 - 1e-12) && curve <= bound, "{curve}");
    }
}

#[test]
fn should_handle_the_edge_cases() {
    let step = |q, s| PoissonGaussian::new(q, s).unwrap();
    // q = 0: nothing leaks, at every order; base_rdp is not even consulted.
    let never = |_: u64| -> f64 { panic!("base_rdp called at q = 0") };
    assert_eq!(poisson_subsampled_rdp_bound(0.0, never, 10), Ok(0.0));
    let zero = poisson_discrete_gaussian_rdp(step(0.0, 1.0), &[1.5, 2.0, f64::INFINITY]).unwrap();
    assert_eq!(zero, vec![0.0; 3]);
    // σ = 0 or α = ∞: ∞.
    let inf = poisson_discrete_gaussian_rdp(step(0.1, 0.0), &[2.0]).unwrap();
    assert_eq!(inf, vec![f64::INFINITY]);
    let inf = poisson_discrete_gaussian_rdp(step(0.1, 1.0), &[f64::INFINITY]).unwrap();
    assert_eq!(inf, vec![f64::INFINITY]);
    assert_eq!(
        poisson_subsampled_rdp_bound(0.1, |_| f64::INFINITY, 2),
        Ok(f64::INFINITY)
    );
    // q = 1: the curve is the base mechanism's α/(2σ²) (the bound alone adds ln 3/(α−1)).
    let full = poisson_discrete_gaussian_rdp(step(1.0, 2.0), &[1.5, 2.0, 3.0]).unwrap();
    assert_eq!(full, vec![1.5 / 8.0, 2.0 / 8.0, 3.0 / 8.0]);
    assert_eq!(zw(1.0, 2.0, 3), 3.0 / 8.0 + 3f64.ln() / 2.0);
    // Beyond MAX_SUBSAMPLED_ORDER only the convexity bound, ≤ α/(2σ²), is evaluated.
    let huge = poisson_discrete_gaussian_rdp(step(1e-3, 1e3), &[2e6]).unwrap()[0];
    assert!(huge > 0.0 && huge < 2e6 / 2e6, "{huge}");
    // A fractional order gets the next integer's Zhu–Wang bound (RDP grows with the order).
    let frac = poisson_discrete_gaussian_rdp(step(0.01, 1.1), &[9.5, 10.0]).unwrap();
    assert_eq!(frac[0], frac[1]);
    assert_eq!(frac[1], zw(0.01, 1.1, 10));
}

/// (ε of the discrete-Gaussian accountant, ε of the Gaussian one) after `steps` steps.
fn epsilons(q: f64, sigma: f64, steps: u64, delta: f64) -> (f64, f64) {
    let step = PoissonGaussian::new(q, sigma).unwrap();
    let mut discrete = RdpAccountant::discrete_gaussian();
    let mut continuous = RdpAccountant::new();
    discrete.compose(step, steps).unwrap();
    continuous.compose(step, steps).unwrap();
    (
        discrete.epsilon(delta).unwrap(),
        continuous.epsilon(delta).unwrap(),
    )
}

/// The factor 3 of the bound multiplies `e^{(l−1)ε(l)}`, so a term `l ≥ 3` of `S_α − 1` is
/// `3e^{x} − 1 ≥ 2` times its weight where the Gaussian's is `e^{x} − 1 ≈ x`: the bound is
/// close to the Gaussian's RDP when σ ≈ 1 (or q = 1) and several times larger per step when σ
/// is large and the best order is large (small per-step RDP, many steps).
#[test]
fn should_spend_at_least_the_gaussian_epsilon_and_not_much_more() {
    for &(q, sigma, steps, max_ratio) in &[
        (0.01, 1.1, 10_000, 1.1),
        (0.05, 1.0, 1000, 1.25),
        // Same RDP at q = 1; the discrete accountant only has integer orders.
        (1.0, 1.0, 1, 1.01),
        (0.001, 4.0, 100, 1.1),
        (0.01, 2.0, 1000, 1.4),
        (0.256, 0.5, 100, 2.2),
        // Large σ, many steps: the looseness of the factor 3.
        (0.004, 8.0, 10_000, 2.7),
    ] {
        let (d, g) = epsilons(q, sigma, steps, 1e-5);
        let ratio = d / g;
        println!(
            "q = {q}, σ = {sigma}, T = {steps}: ε discrete {d:.6}, Gaussian {g:.6}, \
             ratio {ratio:.5}"
        );
        assert!(d >= g, "q={q} σ={sigma} T={steps}: {d} < {g}");
        assert!(
            ratio <= max_ratio,
            "q={q} σ={sigma} T={steps}: ratio {ratio}"
        );
    }
}

#[test]
fn should_compose_and_report_like_the_gaussian_accountant() {
    let step = PoissonGaussian::new(0.01, 1.1).unwrap();
    let mut once = RdpAccountant::discrete_gaussian();
    let mut boxed: Box<dyn Accountant> = Box::new(RdpAccountant::discrete_gaussian());
    once.compose(step, 300).unwrap();
    for _ in 0..3 {
        boxed.compose(step, 100).unwrap();
    }
    let eps = once.epsilon(1e-5).unwrap();
    assert!((boxed.epsilon(1e-5).unwrap() / eps - 1.0).abs() < 1e-12);
    assert_eq!(boxed.steps(), 300);
    // δ at that ε is back at 1e-5 (same order, inverse conversion).
    assert!((once.delta(eps).unwrap() / 1e-5 - 1.0).abs() < 1e-9);
    let at = once.epsilon_and_order(1e-5).unwrap();
    assert_eq!(at.order.map(f64::fract), Some(0.0));
    assert_eq!(
        once.noise_distribution(),
        NoiseDistribution::DiscreteGaussian
    );
    let statement = once.statement(1e-5).unwrap();
    assert!(matches!(
        statement.accountant,
        AccountantDescription::RdpDiscreteGaussian {
            num_orders: 111,
            min_order: 2.0,
            max_order: 4096.0,
            ..
        }
    ));
    let text = statement.to_string();
    assert!(
        text.contains(
            "Rényi DP of the Poisson-subsampled discrete Gaussian, Zhu & Wang's general bound"
        ),
        "{text}"
    );
    assert!(text.contains("discrete Gaussian noise"), "{text}");
    let gaussian_text = RdpAccountant::new().statement(1e-5).unwrap().to_string();
    assert!(!gaussian_text.contains("discrete"), "{gaussian_text}");
}

#[test]
fn should_calibrate_at_least_as_much_noise_as_for_the_gaussian() {
    let (eps, delta, q, steps) = (1.0, 1e-5, 0.01, 1000);
    let tol = 1e-4;
    let g = calibrate_noise_multiplier(eps, delta, q, steps, AccountantKind::Rdp, tol).unwrap();
    let d = calibrate_noise_multiplier(
        eps,
        delta,
        q,
        steps,
        AccountantKind::RdpDiscreteGaussian,
        tol,
    )
    .unwrap();
    assert!(
        d >= g - tol && d < 1.25 * g,
        "discrete σ {d}, Gaussian σ {g}"
    );
    let mut acc = RdpAccountant::discrete_gaussian();
    acc.compose(PoissonGaussian::new(q, d).unwrap(), steps)
        .unwrap();
    assert!(acc.epsilon(delta).unwrap() <= eps);
}

fn named(err: AccountingError) -> &'static str {
    match err {
        AccountingError::InvalidArgument { name, .. }
        | AccountingError::InvalidCount { name, .. } => name,
        AccountingError::EmptyOrders => "orders",
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn should_name_the_argument_in_errors() {
    let base = |l: u64| l as f64;
    for q in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = poisson_subsampled_rdp_bound(q, base, 4).unwrap_err();
        assert_eq!(named(err.clone()), "sampling_rate");
        assert!(err.to_string().contains("`sampling_rate`"), "{err}");
    }
    for order in [0, 1, 1_000_001] {
        let err = poisson_subsampled_rdp_bound(0.1, base, order).unwrap_err();
        assert_eq!(named(err.clone()), "order");
        assert!(err.to_string().contains("`order`"), "{err}");
    }
    for bad in [-1.0, f64::NAN] {
        let err =
            poisson_subsampled_rdp_bound(0.1, |l| if l == 3 { bad } else { 1.0 }, 4).unwrap_err();
        assert_eq!(named(err.clone()), "base_rdp");
        assert!(err.to_string().contains("`base_rdp`"), "{err}");
    }
    let bad_event = PoissonGaussian {
        sampling_rate: 0.1,
        noise_multiplier: -1.0,
    };
    let err = poisson_discrete_gaussian_rdp(bad_event, &[2.0]).unwrap_err();
    assert_eq!(named(err), "noise_multiplier");
    let step = PoissonGaussian::new(0.1, 1.0).unwrap();
    for order in [1.0, 0.5, f64::NAN] {
        let err = poisson_discrete_gaussian_rdp(step, &[2.0, order]).unwrap_err();
        assert_eq!(named(err), "orders");
    }
    let err = RdpAccountant::discrete_gaussian_with_orders(Vec::new()).unwrap_err();
    assert_eq!(err, AccountingError::EmptyOrders);
    let err = RdpAccountant::discrete_gaussian()
        .compose(step, 0)
        .unwrap_err();
    assert_eq!(named(err), "count");
}
