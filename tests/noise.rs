//! DP noise: the hardened sampler's draws follow the exact discrete Gaussian (mean, variance,
//! pmf by chi-square), every released value lies on the grid, a seed reproduces the noise
//! whatever the number of threads, the calibration adds the grid's inflation, bad arguments are
//! refused.

use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_vmap::privacy::{
    NoiseKind, PrivacyError, PrivacyRng, add_gaussian_noise, add_noise, sensitivity_inflation,
};
use burn_vmap::{ParamGrads, per_example_grads};

fn dev() -> Device {
    Device::default()
}

/// The gradient sum of `sum(x·W + b)` over one example `x` of `inputs` values: the weight's
/// gradient is `x` (per output), the bias's is 1.
fn grads(inputs: &[f32], outputs: usize) -> ParamGrads {
    let model: Linear = LinearConfig::new(inputs.len(), outputs).init(&dev());
    let xs = Tensor::<2>::from_data(TensorData::new(inputs.to_vec(), [1, inputs.len()]), &dev());
    per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
        .unwrap()
        .sum_batch()
}

/// Zero gradients with `inputs·outputs + outputs` coordinates.
fn zeros(inputs: usize, outputs: usize) -> ParamGrads {
    let model: Linear = LinearConfig::new(inputs, outputs).init(&dev());
    let xs = Tensor::<2>::zeros([1, inputs], &dev());
    per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| {
        m.forward(x).sum().mul_scalar(0.0)
    })
    .unwrap()
    .sum_batch()
}

/// Every coordinate, weight then bias.
fn values(g: &ParamGrads) -> Vec<f64> {
    let read = |data: TensorData| data.convert::<f64>().try_to_vec::<f64>().unwrap();
    let mut v = read(g.get::<2>("weight").unwrap().into_data());
    v.extend(read(g.get::<1>("bias").unwrap().into_data()));
    v
}

fn hardened(granularity: f64) -> NoiseKind {
    NoiseKind::Hardened { granularity }
}

/// The pmf of `N_Z(0, σ²)` at `z`.
fn pmf(sigma: f64) -> impl Fn(i64) -> f64 {
    let weight = move |z: i64| (-(z as f64).powi(2) / (2.0 * sigma * sigma)).exp();
    let bound = (40.0 * sigma).ceil() as i64;
    let total: f64 = (-bound..=bound).map(weight).sum();
    move |z| weight(z) / total
}

#[test]
fn should_draw_the_exact_discrete_gaussian() {
    // On the grid 1 the noise of zero gradients is the integer draw itself.
    let zero = zeros(1000, 200);
    for (seed, sigma) in [(1, 1.5), (2, 4.0), (3, 12.5)] {
        let v = values(
            &add_noise(
                zero.clone(),
                sigma,
                hardened(1.0),
                &mut PrivacyRng::seeded(seed),
            )
            .unwrap(),
        );
        let n = v.len() as f64;
        assert!(v.iter().all(|x| x.fract() == 0.0), "integers");
        // The law drawn on this device: σ itself on the host, ⌈σ⌉ by the keyed kernel (wgpu,
        // CUDA); never less.
        let drawn = hardened(1.0).drawn_std(sigma, &dev()).unwrap();
        assert!(
            drawn >= sigma && drawn <= sigma.ceil(),
            "σ {sigma}: drawn at {drawn}"
        );
        let p = pmf(drawn);
        // Mean 0 and the exact variance (slightly below σ² for small σ).
        let variance: f64 = (-(40.0 * sigma) as i64..=(40.0 * sigma) as i64)
            .map(|z| (z * z) as f64 * p(z))
            .sum();
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| x * x).sum::<f64>() / n - mean * mean;
        assert!(
            mean.abs() < 5.0 * (variance / n).sqrt(),
            "σ {sigma}: mean {mean}"
        );
        // Var of the sample variance ≈ (μ4 - σ⁴)/n ≤ 2σ⁴/n for a near-Gaussian.
        assert!(
            (var - variance).abs() < 5.0 * variance * (2.0 / n).sqrt(),
            "σ {sigma}: var {var}, exact {variance}"
        );
        // Chi-square against the pmf: one bin per integer with an expected count >= 5, the
        // tails pooled.
        let k = (0..).take_while(|&z| n * p(z) >= 5.0).last().unwrap();
        let mut observed = vec![0f64; (2 * k + 3) as usize];
        for &x in &v {
            let z = (x as i64).clamp(-k - 1, k + 1);
            observed[(z + k + 1) as usize] += 1.0;
        }
        let tail: f64 = 0.5
            - (0..=k)
                .map(|z| if z == 0 { p(0) / 2.0 } else { p(z) })
                .sum::<f64>();
        let chi2: f64 = observed
            .iter()
            .enumerate()
            .map(|(i, &o)| {
                let z = i as i64 - k - 1;
                let e = n * if z.abs() == k + 1 { tail } else { p(z) };
                (o - e).powi(2) / e
            })
            .sum();
        let df = (observed.len() - 1) as f64;
        // About 6 standard deviations of the chi-square above its mean.
        assert!(
            chi2 < df + 6.0 * (2.0 * df).sqrt(),
            "σ {sigma}: χ² {chi2} with {df} degrees of freedom"
        );
    }
}

#[test]
fn should_draw_the_discrete_gaussian_at_dp_sgd_scale() {
    // σ·C = 1.1 on the default grid 2^-20: Z has scale 1.1·2^20 ≈ 1.15·10⁶ grid steps. Bins of
    // a quarter σ from -4σ to 4σ and the two tails, against the exact pmf summed over each bin.
    let grid = NoiseKind::DEFAULT_GRANULARITY;
    let sigma = 1.1 / grid;
    let v: Vec<i64> = values(
        &add_noise(
            zeros(1000, 200),
            1.1,
            NoiseKind::default(),
            &mut PrivacyRng::seeded(6),
        )
        .unwrap(),
    )
    .iter()
    .map(|x| {
        let z = x / grid;
        assert_eq!(z.fract(), 0.0, "on the grid");
        z as i64
    })
    .collect();
    let n = v.len() as f64;
    let edges: Vec<i64> = (-16..=16)
        .map(|i| (i as f64 * sigma / 4.0).round() as i64)
        .collect();
    let weight = |z: i64| (-(z as f64).powi(2) / (2.0 * sigma * sigma)).exp();
    // Beyond 7σ: a mass of 3·10⁻¹², nothing for 200 000 draws.
    let bound = (7.0 * sigma) as i64;
    let masses: Vec<f64> = (0..=edges.len())
        .map(|i| {
            let lo = if i == 0 { -bound } else { edges[i - 1] };
            let hi = if i == edges.len() { bound } else { edges[i] };
            (lo..hi).map(weight).sum::<f64>()
        })
        .collect();
    let total: f64 = masses.iter().sum();
    // Bin i holds [edges[i - 1], edges[i]); bin 0 and the last the tails.
    let bin = |z: i64| edges.partition_point(|&e| e <= z);
    let mut observed = vec![0f64; edges.len() + 1];
    for &z in &v {
        observed[bin(z)] += 1.0;
    }
    let chi2: f64 = observed
        .iter()
        .zip(&masses)
        .map(|(o, m)| {
            let e = n * m / total;
            (o - e).powi(2) / e
        })
        .sum();
    let df = (observed.len() - 1) as f64;
    assert!(
        chi2 < df + 6.0 * (2.0 * df).sqrt(),
        "χ² {chi2} with {df} degrees of freedom"
    );
}

#[test]
fn should_release_values_on_the_grid() {
    let inputs: Vec<f32> = (0..300).map(|i| (i as f32 * 0.377).sin() * 3.0).collect();
    let g = grads(&inputs, 4);
    let grid = 2f64.powi(-12);
    let noisy =
        values(&add_noise(g.clone(), 1.1, hardened(grid), &mut PrivacyRng::seeded(4)).unwrap());
    assert!(
        noisy.iter().all(|v| (v / grid).fract() == 0.0),
        "on the grid"
    );
    // The noise is written over the gradient's own buffer only where no other tensor shares it:
    // the clone passed in left `g` as it was.
    let exact = values(&g);
    assert_eq!(exact, values(&grads(&inputs, 4)), "g unchanged");
    // Without noise: each coordinate rounded to its nearest grid point.
    let rounded = values(&add_noise(g, 0.0, hardened(grid), &mut PrivacyRng::seeded(4)).unwrap());
    for (r, x) in rounded.iter().zip(&exact) {
        assert!(
            (r / grid).fract() == 0.0 && (r - x).abs() <= grid / 2.0,
            "{x} rounded to {r}"
        );
    }
    // The noise's spread is the std asked for (2^-12 grid: σ/γ ≈ 4506).
    let zero = values(
        &add_noise(
            zeros(500, 100),
            1.1,
            NoiseKind::default(),
            &mut PrivacyRng::seeded(5),
        )
        .unwrap(),
    );
    let n = zero.len() as f64;
    let std = (zero.iter().map(|x| x * x).sum::<f64>() / n).sqrt();
    assert!((std - 1.1).abs() < 0.02 * 1.1, "std {std}");
}

#[test]
fn should_reproduce_the_noise_with_a_seed_whatever_the_threads() {
    // 20 100 coordinates: two chunks of the sampler.
    let zero = zeros(200, 100);
    let draw = |seed| {
        values(
            &add_noise(
                zero.clone(),
                0.7,
                NoiseKind::default(),
                &mut PrivacyRng::seeded(seed),
            )
            .unwrap(),
        )
    };
    let a = draw(9);
    assert_eq!(a, draw(9));
    assert_ne!(a, draw(10));
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    assert_eq!(
        a,
        one_thread.install(|| draw(9)),
        "one thread, the same noise"
    );
    // A generator from the operating system draws other noise.
    let fresh = values(
        &add_noise(
            zero.clone(),
            0.7,
            NoiseKind::default(),
            &mut PrivacyRng::from_entropy(),
        )
        .unwrap(),
    );
    assert_ne!(a, fresh);
}

#[test]
fn should_draw_plain_noise_as_add_gaussian_noise() {
    let g = grads(&[1.0, -2.0, 0.5], 2);
    let a =
        values(&add_noise(g.clone(), 0.5, NoiseKind::Plain, &mut PrivacyRng::seeded(3)).unwrap());
    let b = values(&add_gaussian_noise(g, 0.5, &mut PrivacyRng::seeded(3)).unwrap());
    assert_eq!(a, b);
}

#[test]
fn should_add_the_grids_inflation_to_the_sensitivity() {
    let grid = 2f64.powi(-16);
    assert_eq!(sensitivity_inflation(0, grid).unwrap(), 0.0);
    assert!(sensitivity_inflation(1 << 20, grid).unwrap() >= 1024.0 * grid);
    assert!(sensitivity_inflation(1 << 20, grid).unwrap() <= 1024.0 * grid * (1.0 + 1e-15));
    // √3 rounded up, not to nearest.
    assert!(sensitivity_inflation(3, 1.0).unwrap() > 3f64.sqrt());
    let d = 535_818;
    let std = hardened(grid).calibrated_std(1.1, 0.5, d).unwrap();
    assert!(std >= 1.1 * (0.5 + grid * (d as f64).sqrt()));
    assert!(std <= 1.1 * (0.5 + grid * (d as f64).sqrt()) * (1.0 + 1e-14));
    assert_eq!(
        NoiseKind::Plain.calibrated_std(1.1, 0.5, d).unwrap(),
        1.1 * 0.5
    );
}

fn refused(result: Result<impl Sized, PrivacyError>) -> &'static str {
    match result {
        Err(PrivacyError::Argument { argument, .. }) => argument,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn should_refuse_bad_arguments() {
    let g = grads(&[1.0, 2.0], 1);
    let rng = &mut PrivacyRng::seeded(1);
    for std in [-1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(
            refused(add_noise(g.clone(), std, NoiseKind::default(), rng)),
            "std"
        );
        assert_eq!(
            refused(add_noise(g.clone(), std, NoiseKind::Plain, rng)),
            "std"
        );
    }
    for granularity in [
        0.0,
        -0.5,
        0.3,
        3.0,
        f64::NAN,
        f64::INFINITY,
        2f64.powi(-65),
        2f64.powi(33),
    ] {
        assert_eq!(
            refused(add_noise(g.clone(), 1.0, hardened(granularity), rng)),
            "granularity"
        );
        assert_eq!(
            refused(sensitivity_inflation(10, granularity)),
            "granularity"
        );
    }
    // A std below the grid, or too many grid steps (σ/γ at 2^47 or above).
    assert_eq!(
        refused(add_noise(g.clone(), 0.5, hardened(1.0), rng)),
        "std"
    );
    assert_eq!(
        refused(add_noise(
            g.clone(),
            2f64.powi(27),
            hardened(2f64.powi(-20)),
            rng
        )),
        "std"
    );
    // A gradient that cannot be rounded to the grid.
    let nan = grads(&[1.0, f32::NAN], 1);
    let message = match add_noise(nan.clone(), 1.0, NoiseKind::default(), rng) {
        Err(
            e @ PrivacyError::Argument {
                argument: "grads", ..
            },
        ) => e.to_string(),
        other => panic!("{:?}", other.map(|_| ())),
    };
    assert!(message.contains("weight"), "{message}");
    assert!(
        !message.contains("[1]"),
        "the value's place is not released: {message}"
    );
    assert!(
        add_noise(nan, 1.0, NoiseKind::Plain, rng).is_ok(),
        "plain noise passes NaN through"
    );
    let kind = NoiseKind::default();
    assert_eq!(
        refused(kind.calibrated_std(-1.0, 1.0, 10)),
        "noise_multiplier"
    );
    assert_eq!(refused(kind.calibrated_std(1.0, 0.0, 10)), "clip_norm");
    assert_eq!(
        refused(hardened(0.3).calibrated_std(1.0, 1.0, 10)),
        "granularity"
    );
}
