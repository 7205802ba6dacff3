//! The statistics the samplers' law tests share (`discrete/tests`, `keyed/tests`): chi-square
//! against the exact pmf of the discrete Gaussian at small scales, in bins of equal probability
//! at the DP scale, and against the normal law at the largest scales, with the moments.

/// The critical value of a chi-square with `df` degrees of freedom at `p ≈ 10⁻⁶`
/// (Wilson–Hilferty).
pub(crate) fn critical(df: usize) -> f64 {
    let d = df as f64;
    let c = 2.0 / (9.0 * d);
    d * (1.0 - c + 4.75 * c.sqrt()).powi(3)
}

/// Pearson's statistic of `counts` against the probabilities `probs` (summing to 1).
pub(crate) fn chi_square(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

/// Chi-square of draws against the exact pmf `∝ exp(-z²/(2σ²))` (in `f64`), one bin per
/// integer with at least 20 expected draws and one per tail; the mean, the variance (the
/// pmf's own) and the balance of signs within 5 standard errors. `reference` is the σ of
/// the pmf tested against (σ itself but in the test of the test).
pub(crate) fn check_small(z: &[i64], reference: f64) -> Result<(), String> {
    let n = z.len() as f64;
    let limit = (40.0 * reference).ceil() as i64;
    let weight = |z: i64| (-((z * z) as f64) / (2.0 * reference * reference)).exp();
    let total: f64 = (-limit..=limit).map(weight).sum();
    let pmf = |z: i64| weight(z) / total;
    let variance: f64 = (-limit..=limit).map(|z| (z * z) as f64 * pmf(z)).sum();
    let fourth: f64 = (-limit..=limit)
        .map(|z| (z * z * z * z) as f64 * pmf(z))
        .sum();
    let top = (0..limit)
        .take_while(|&z| pmf(z) * n >= 20.0)
        .last()
        .unwrap();
    // Bins: z < -top, -top..=top, z > top.
    let mut counts = vec![0u64; 2 * top as usize + 3];
    for &v in z {
        counts[(v.clamp(-top - 1, top + 1) + top + 1) as usize] += 1;
    }
    let tail: f64 = (top + 1..=limit).map(pmf).sum();
    let mut probs = vec![tail];
    probs.extend((-top..=top).map(pmf));
    probs.push(tail);
    let chi2 = chi_square(&counts, &probs);
    let df = probs.len() - 1;
    eprintln!(
        "σ = {reference}: chi-square {chi2:.1} ({df} df, critical {:.1})",
        critical(df)
    );
    let mut failures = Vec::new();
    if chi2 > critical(df) {
        failures.push(format!(
            "chi-square {chi2:.1} > {:.1} ({df} df)",
            critical(df)
        ));
    }
    let mean = z.iter().map(|&v| v as f64).sum::<f64>() / n;
    if mean.abs() > 5.0 * (variance / n).sqrt() {
        failures.push(format!("mean {mean}"));
    }
    let second = z.iter().map(|&v| (v * v) as f64).sum::<f64>() / n;
    let sd = ((fourth - variance * variance) / n).sqrt();
    if (second - variance).abs() > 5.0 * sd {
        failures.push(format!("E[z²] {second}, expected {variance} ± {sd}"));
    }
    let positive = z.iter().filter(|&&v| v > 0).count() as f64;
    let negative = z.iter().filter(|&&v| v < 0).count() as f64;
    if (positive - negative).abs() > 5.0 * (positive + negative).sqrt() {
        failures.push(format!("{positive} positive, {negative} negative"));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Chi-square of draws in `bins` bins of equal probability under the exact pmf at `σ`,
/// summed in `f64` over `|z| ≤ 9σ` (the rest weighs below 10⁻¹⁸); mean, second moment and
/// sign balance as in [`check_small`].
pub(crate) fn check_binned(z: &[i64], sigma: f64, bins: usize) -> Result<(), String> {
    let limit = (9.0 * sigma).ceil() as i64;
    let weight = |z: i64| (-((z as f64) * (z as f64)) / (2.0 * sigma * sigma)).exp();
    let total: f64 = (-limit..=limit).map(weight).sum();
    // starts[b]: the least z of bin b (b ≥ 1); bin 0 from -∞.
    let (mut starts, mut probs) = (vec![i64::MIN], Vec::new());
    let mut mass = 0.0;
    let mut cumulative = 0.0;
    for v in -limit..=limit {
        let p = weight(v) / total;
        if cumulative + p > (starts.len() as f64) / bins as f64 && starts.len() < bins {
            probs.push(mass);
            starts.push(v);
            mass = 0.0;
        }
        mass += p;
        cumulative += p;
    }
    probs.push(mass + (1.0 - cumulative).max(0.0));
    let mut counts = vec![0u64; bins];
    for &v in z {
        counts[starts.partition_point(|&s| s <= v) - 1] += 1;
    }
    let chi2 = chi_square(&counts, &probs);
    eprintln!(
        "σ = {sigma}: chi-square {chi2:.1} ({} df, critical {:.1})",
        bins - 1,
        critical(bins - 1)
    );
    let mut failures = Vec::new();
    if chi2 > critical(bins - 1) {
        failures.push(format!("chi-square {chi2:.1} > {:.1}", critical(bins - 1)));
    }
    moments(z, sigma, &mut failures);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Mean, second moment (`σ²`, the discrete law's own to 10⁻¹²) and sign balance of draws at
/// a large `σ`, within 5 standard errors.
pub(crate) fn moments(z: &[i64], sigma: f64, failures: &mut Vec<String>) {
    let n = z.len() as f64;
    let x: Vec<f64> = z.iter().map(|&v| v as f64 / sigma).collect();
    let mean = x.iter().sum::<f64>() / n;
    if mean.abs() > 5.0 / n.sqrt() {
        failures.push(format!("mean/σ {mean}"));
    }
    let second = x.iter().map(|x| x * x).sum::<f64>() / n;
    if (second - 1.0).abs() > 5.0 * (2.0 / n).sqrt() {
        failures.push(format!("E[z²]/σ² {second}"));
    }
    let positive = z.iter().filter(|&&v| v > 0).count() as f64;
    let negative = z.iter().filter(|&&v| v < 0).count() as f64;
    if (positive - negative).abs() > 5.0 * (positive + negative).sqrt() {
        failures.push(format!("{positive} positive, {negative} negative"));
    }
}

/// The standard normal CDF, `1/2 + ∫_0^x φ` by Simpson's rule (error below 10⁻¹⁰).
pub(crate) fn normal_cdf(x: f64) -> f64 {
    let steps = 4000;
    let h = x.abs() / steps as f64;
    let phi = |t: f64| (-t * t / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let inner: f64 = (1..steps)
        .map(|i| phi(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 })
        .sum();
    let integral = h / 3.0 * (phi(0.0) + inner + phi(x.abs()));
    0.5 + integral.copysign(x)
}

/// Chi-square of `z/σ` in 200 bins of width 0.05 over `[-5, 5]` and two tails, against
/// the normal CDF (the discrete law's bins differ from it by `O(1/σ)`: 10⁻⁸ here), and
/// moments.
pub(crate) fn check_continuous(z: &[i64], sigma: f64) -> Result<(), String> {
    let edges: Vec<f64> = (0..=200).map(|i| -5.0 + 0.05 * i as f64).collect();
    let cdf: Vec<f64> = edges.iter().map(|&x| normal_cdf(x)).collect();
    let mut probs = vec![cdf[0]];
    probs.extend(cdf.windows(2).map(|w| w[1] - w[0]));
    probs.push(1.0 - cdf[200]);
    let mut counts = vec![0u64; probs.len()];
    for &v in z {
        counts[edges.partition_point(|&e| e <= v as f64 / sigma)] += 1;
    }
    let chi2 = chi_square(&counts, &probs);
    let df = probs.len() - 1;
    eprintln!(
        "σ = {sigma}: chi-square of z/σ {chi2:.1} ({df} df, critical {:.1})",
        critical(df)
    );
    let mut failures = Vec::new();
    if chi2 > critical(probs.len() - 1) {
        failures.push(format!(
            "chi-square {chi2:.1} > {:.1}",
            critical(probs.len() - 1)
        ));
    }
    moments(z, sigma, &mut failures);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
