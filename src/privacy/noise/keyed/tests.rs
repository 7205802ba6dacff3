//! The keyed sampler's CPU reference: its words against RFC 8439 and rand_chacha, its parts
//! against their probabilities, its law against the exact pmf, and its release.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

use super::*;
use crate::privacy::noise::law::*;

/// RFC 8439, section 2.3.2: the block of counter 1 under key 00..1f and nonce
/// 00:00:00:09:00:00:00:4a:00:00:00:00.
#[test]
fn should_compute_the_rfc_8439_block() {
    let bytes: Vec<u8> = (0..32).collect();
    let key = Key(std::array::from_fn(|i| {
        u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap())
    }));
    let got = block(&key, 1, [0x0900_0000, 0x4a00_0000, 0]);
    let expected = [
        0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3, 0xc7f4d1c7, 0x0368c033, 0x9aaa2204,
        0x4e6cd4c3, 0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9, 0xd19c12b5, 0xb94e16de,
        0xe883d0cb, 0x4e3c50a2,
    ];
    assert_eq!(got, expected);
}

/// A coordinate's words are rand_chacha's ChaCha20 stream `nonce[1] | DOMAIN << 32` from word
/// `16·(nonce[0] << 32)`: words 12-13 are its 64-bit counter, 14-15 its stream.
#[test]
fn should_read_the_words_rand_chacha_reads() {
    let mut seed = ChaCha20Rng::seed_from_u64(3);
    let mut bytes = [0u8; 32];
    seed.fill_bytes(&mut bytes);
    let key = Key(std::array::from_fn(|i| {
        u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap())
    }));
    for index in [0u64, 1, 77, (5 << 32) + 9, u64::MAX] {
        let mut ours = Words::new(key, index);
        let mut theirs = ChaCha20Rng::from_seed(bytes);
        theirs.set_stream(u64::from((index >> 32) as u32) | u64::from(DOMAIN) << 32);
        theirs.set_word_pos(u128::from(index as u32) << 36);
        for _ in 0..40 {
            assert_eq!(ours.next(), theirs.next_u32(), "coordinate {index}");
        }
    }
}

fn words(seed: u64) -> Words {
    let mut rng = PrivacyRng::seeded(seed);
    Words::new(Key::draw(&mut rng), seed)
}

/// Frequency of `f` over `n` runs within 5 binomial standard deviations of `p`.
fn frequency(n: usize, p: f64, mut f: impl FnMut(&mut Words) -> bool) {
    let mut w = words(11);
    let hits = (0..n).filter(|_| f(&mut w)).count() as f64;
    let tolerance = 5.0 * (p * (1.0 - p) / n as f64).sqrt();
    let got = hits / n as f64;
    assert!(
        (got - p).abs() <= tolerance,
        "frequency {got}, expected {p}"
    );
}

#[test]
fn should_draw_uniform_integers_below_m() {
    for m in [1u32, 2, 3, 5, 7, 1000, (1 << 31) + 1, u32::MAX] {
        let mut w = words(u64::from(m));
        let n = 200_000;
        let mut low = 0;
        for _ in 0..n {
            let v = below(&mut w, m);
            assert!(v < m);
            low += usize::from(u64::from(v) < u64::from(m).div_ceil(2));
        }
        let p = u64::from(m).div_ceil(2) as f64 / f64::from(m);
        let tolerance = 5.0 * (p * (1.0 - p) / n as f64).sqrt();
        assert!((low as f64 / n as f64 - p).abs() <= tolerance, "m = {m}");
    }
    // The three values of [0, 3) alike, each within 5 standard deviations.
    let mut w = words(5);
    let mut counts = [0usize; 3];
    for _ in 0..300_000 {
        counts[below(&mut w, 3) as usize] += 1;
    }
    for c in counts {
        assert!((c as f64 - 100_000.0).abs() < 5.0 * (300_000.0f64 * 2.0 / 9.0).sqrt());
    }
}

#[test]
fn should_draw_bernoulli_exponentials() {
    frequency(400_000, (-0.5f64).exp(), exp_half);
    for (j, n) in [
        (0, 7),
        (1, 7),
        (6, 7),
        (999_999, 1_000_000),
        (123_456, 1_048_577),
    ] {
        let x = f64::from(j) / f64::from(n);
        frequency(200_000, (-x).exp(), |w| exp_x(w, j, n));
        frequency(200_000, (-x * x / 2.0).exp(), |w| exp_x_squared(w, j, n));
    }
}

#[test]
fn should_draw_k_with_probability_proportional_to_exp_minus_k_squared_over_two() {
    let weights: Vec<f64> = (0..12).map(|k| (-(k * k) as f64 / 2.0).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut w = words(2);
    let n = 400_000;
    let mut counts = vec![0u64; 5];
    for _ in 0..n {
        counts[(half_normal_step(&mut w) as usize).min(4)] += 1;
    }
    let mut probs: Vec<f64> = weights[..4].iter().map(|p| p / total).collect();
    probs.push(weights[4..].iter().sum::<f64>() / total);
    let chi2 = chi_square(&counts, &probs);
    assert!(chi2 < critical(4), "chi-square {chi2}");
}

/// Draws of coordinates `0..n` of a seeded key at scale `scale`.
fn draws(scale: u32, n: usize, seed: u64) -> Vec<i64> {
    let noise = Keyed {
        key: Key::draw(&mut PrivacyRng::seeded(seed)),
        first: 0,
        scale,
        exponent: 0,
    };
    (0..n as u64)
        .into_par_iter()
        .map(|i| noise.integer(i))
        .collect()
}

#[test]
fn should_draw_the_discrete_gaussian_at_small_scales() {
    for scale in [1, 2, 3, 10] {
        let z = draws(scale, 1_000_000, u64::from(scale));
        check_small(&z, f64::from(scale)).unwrap_or_else(|e| panic!("N = {scale}: {e}"));
    }
}

#[test]
fn should_draw_the_discrete_gaussian_at_the_dp_scale() {
    let scale = 1_153_434; // ⌈1.1·2^20⌉
    let z = draws(scale, 1_000_000, 4);
    check_binned(&z, f64::from(scale), 200).unwrap();
    check_continuous(&z, f64::from(scale)).unwrap();
}

#[test]
fn should_draw_the_discrete_gaussian_at_the_largest_scale() {
    let scale = u32::MAX;
    let z = draws(scale, 300_000, 6);
    check_continuous(&z, f64::from(scale)).unwrap();
}

#[test]
fn should_tell_a_wrong_law_apart() {
    let z = draws(3, 1_000_000, 3);
    assert!(check_small(&z, 3.03).is_err());
    let z = draws(1_153_434, 1_000_000, 4);
    assert!(check_binned(&z, 1_153_434.0 * 1.01, 200).is_err());
}

#[test]
#[ignore = "10^7 draws a scale: about 5 s each in release, a minute unoptimized"]
fn should_draw_the_discrete_gaussian_ten_million_times() {
    for scale in [1, 3, 10] {
        let z = draws(scale, 10_000_000, 20 + u64::from(scale));
        check_small(&z, f64::from(scale)).unwrap_or_else(|e| panic!("N = {scale}: {e}"));
    }
    let z = draws(1_153_434, 10_000_000, 24);
    check_binned(&z, 1_153_434.0, 200).unwrap();
}

/// About 22 words (1.4 blocks) a coordinate at the DP scale: the kernel's cost.
#[test]
fn should_read_about_twenty_words_a_coordinate() {
    let noise = Keyed {
        key: Key::draw(&mut PrivacyRng::seeded(9)),
        first: 0,
        scale: 1_153_434,
        exponent: 0,
    };
    let n = 100_000;
    let used: u64 = (0..n)
        .map(|i| {
            let mut w = Words::new(noise.key, i);
            sample(&mut w, noise.scale);
            w.used
        })
        .sum();
    let mean = used as f64 / n as f64;
    eprintln!("{mean:.2} words a coordinate");
    assert!(mean < 40.0, "{mean} words a coordinate");
}

#[test]
fn should_round_half_to_even_and_clamp() {
    let up = 1.0f32;
    for (x, m) in [
        (0.5f32, 0),
        (1.5, 2),
        (2.5, 2),
        (-0.5, 0),
        (-1.5, -2),
        (-2.5, -2),
        (0.49999997, 0),
        (2.7, 3),
        (-2.7, -3),
        (16777216.0, 16777216),
        (1e30, 1 << 62),
        (-1e30, -(1 << 62)),
        (f32::MAX, 1 << 62),
    ] {
        assert_eq!(x.grid(up), m, "{x}");
        assert_eq!(f64::from(x).grid(1.0), m, "{x} in f64");
    }
    // On the grid 2^-20: x·2^20 rounded.
    assert_eq!(0.75f32.grid(f32::pow2(20)), 786_432);
    assert_eq!((3.0f32 * 2f32.powi(-21)).grid(f32::pow2(20)), 2);
    assert_eq!(4_611_686_018_427_387_904.0f64.grid(1.0), 1 << 62);
    assert_eq!(
        4_000_000_000_000_000_000.0f64.grid(1.0),
        4_000_000_000_000_000_000
    );
    assert_eq!((-1e300f64).grid(1.0), -(1 << 62));
}

#[test]
fn should_write_integers_exactly_where_the_float_holds_them() {
    for s in [0i64, 1, -1, 16_777_216, -16_777_215, 1 << 40, -(1 << 53)] {
        assert_eq!(f64::release(s, 1.0), s as f64, "{s}");
    }
    for s in [0i64, 1, -1, 16_777_215, -16_777_216] {
        assert_eq!(f32::release(s, 1.0), s as f32, "{s}");
    }
    assert_eq!(f32::release(3, 0.25), 0.75);
    assert_eq!(f32::release(0, 1.0).to_bits(), 0.0f32.to_bits());
    // A fixed function of s beyond 2^24: two roundings, within two ulps of s.
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    for _ in 0..10_000 {
        let s: i64 = rng.random_range(-(1i64 << 62)..(1i64 << 62));
        let v = f32::release(s, 1.0);
        let error = (f64::from(v) - s as f64).abs();
        assert!(error <= (s as f64).abs() * 2f64.powi(-22), "{s}: {v}");
    }
}

/// The reference releases `γ·(round(x/γ) + Z)` with the integers of `Keyed::integer`, and the
/// noise of coordinates `offset..` of a longer tensor is that tensor's from `offset` on.
#[test]
fn should_release_the_grid_sum_and_split_by_offset() {
    let noise = Keyed {
        key: Key::draw(&mut PrivacyRng::seeded(7)),
        first: 5,
        scale: 1000,
        exponent: -10,
    };
    let values: Vec<f32> = (0..100).map(|i| i as f32 * 0.37 - 15.0).collect();
    let out = reference(&values, noise);
    for (i, (&x, &y)) in values.iter().zip(&out).enumerate() {
        let m = (f64::from(x) * 1024.0).round_ties_even() as i64;
        let expected = (m + noise.integer(i as u64)) as f64 / 1024.0;
        assert_eq!(f64::from(y), expected, "coordinate {i}");
    }
    assert_eq!(reference(&values[40..], noise.at(40)), out[40..].to_vec());
    let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    let out64 = reference(&wide, noise);
    assert_eq!(out64, out.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
}

/// The kernel on the default device (wgpu in CI: Mesa's lavapipe), against the reference.
/// `add_noise`'s hardened noise is drawn where the gradient lives: on a wgpu or CUDA device by
/// the keyed kernel (the reference's values under the key drawn first from the generator),
/// with no copy of the gradient to the host nor of noise to the device, and one flag read (are
/// all values finite); elsewhere by the host's sampler, which reads every leaf and writes it
/// back (the counter counts).
#[test]
fn should_noise_the_gradient_where_it_lives() {
    use crate::privacy::noise::{NoiseKind, add_noise, copies};
    use burn::module::ParamId;
    use burn::tensor::{Device, TensorData};
    let device = Device::default();
    let values = [vec![0.25f32, -1.5, 3.0, 0.0], vec![1e-3; 5], vec![-7.75]];
    let leaf = |v: &Vec<f32>| {
        Leaf::new(Tensor::<1>::from_data(
            TensorData::new(v.clone(), [v.len()]),
            &device,
        ))
    };
    let grads = ParamGrads::new(
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("w{i}"), ParamId::new(), leaf(v)))
            .collect(),
    );
    let (std, granularity) = (3.3, 2f64.powi(-10));
    let before = copies::counted();
    let noisy = add_noise(
        grads,
        std,
        NoiseKind::Hardened { granularity },
        &mut PrivacyRng::seeded(7),
    )
    .unwrap();
    let after = copies::counted();
    let made = (
        after.to_host - before.to_host,
        after.to_device - before.to_device,
        after.flags - before.flags,
    );
    if !on_device(&device) {
        assert_eq!(
            made,
            (3, 3, 0),
            "(to host, to device, flags) on the host's sampler"
        );
        return;
    }
    assert_eq!(made, (0, 0, 1), "(to host, to device, flags) on the device");
    let noise = Keyed {
        key: Key::draw(&mut PrivacyRng::seeded(7)),
        first: 0,
        scale: (std / granularity).ceil() as u32,
        exponent: -10,
    };
    let expected = reference(&values.concat(), noise);
    let got: Vec<f32> = noisy
        .iter()
        .flat_map(|(_, _, g)| g.to_data().try_to_vec::<f32>().unwrap())
        .collect();
    assert_eq!(got, expected);
    assert_ne!(got, values.concat(), "noised");
}

/// Plain noise too is drawn where the gradient lives: on a wgpu or CUDA device by the keyed
/// normal kernel, no copy either way, the same seed giving the same noise; on the host as `f32`
/// normals uploaded, one copy to the device a leaf.
#[test]
fn should_add_plain_noise_where_the_gradient_lives() {
    use crate::privacy::noise::{NoiseKind, add_noise, copies};
    use burn::module::ParamId;
    use burn::tensor::{Device, TensorData};
    let device = Device::default();
    let noised = |seed| {
        let grads = ParamGrads::new(
            [3usize, 1000, 7]
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let values = TensorData::new(vec![0.5f32; n], [n]);
                    let leaf = Leaf::new(Tensor::<1>::from_data(values, &device));
                    (format!("w{i}"), ParamId::new(), leaf)
                })
                .collect(),
        );
        let before = copies::counted();
        let noisy = add_noise(grads, 2.0, NoiseKind::Plain, &mut PrivacyRng::seeded(seed)).unwrap();
        let after = copies::counted();
        let made = (
            after.to_host - before.to_host,
            after.to_device - before.to_device,
            after.flags - before.flags,
        );
        let values: Vec<f32> = noisy
            .iter()
            .flat_map(|(_, _, g)| g.to_data().try_to_vec::<f32>().unwrap())
            .collect();
        (made, values)
    };
    let (made, values) = noised(3);
    let expected = if on_device(&device) {
        (0, 0, 0)
    } else {
        (0, 3, 0)
    };
    assert_eq!(made, expected, "(to host, to device, flags)");
    assert_eq!(noised(3).1, values, "the same seed, the same noise");
    assert_ne!(noised(4).1, values);
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| f64::from(v) - 0.5).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|&v| (f64::from(v) - 0.5).powi(2))
        .sum::<f64>()
        / n;
    assert!(
        mean.abs() < 0.3 && (var.sqrt() - 2.0).abs() < 0.2,
        "mean {mean}, std {}",
        var.sqrt()
    );
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod device {
    use burn::tensor::{Device, TensorData};

    use super::*;

    fn device() -> Option<Device> {
        let device = Device::default();
        on_device(&device).then_some(device)
    }

    fn on_the_device(values: &[f32], noise: Keyed, device: &Device) -> Vec<f32> {
        let tensor =
            Tensor::<1>::from_data(TensorData::new(values.to_vec(), [values.len()]), device);
        add(tensor, noise)
            .into_data()
            .try_into_vec::<f32>()
            .unwrap()
    }

    /// Values of every kind the grid meets: halves (ties), negatives, zeros, tiny and huge
    /// magnitudes, beyond `2^62` grid steps.
    fn values(n: usize) -> Vec<f32> {
        let mut rng = ChaCha20Rng::seed_from_u64(17);
        (0..n)
            .map(|i| match i % 8 {
                0 => 0.0,
                1 => (i as f32 / 2.0).copysign(if i % 16 == 1 { -1.0 } else { 1.0 }),
                2 => rng.random_range(-1e-3f32..1e-3),
                3 => rng.random_range(-4.0f32..4.0),
                4 => rng.random_range(-1e9f32..1e9),
                5 => f32::MAX * if i % 16 == 5 { -1.0 } else { 1.0 },
                6 => (rng.random_range(-1000i32..1000) as f32 + 0.5) * 2f32.powi(-20),
                _ => rng.random_range(-1e30f32..1e30),
            })
            .collect()
    }

    #[test]
    fn should_equal_the_reference_bit_for_bit() {
        let Some(device) = device() else { return };
        let values = values(40_000);
        for (scale, exponent, first) in [
            (1, 0, 0),
            (3, -3, 7),
            (1_153_434, -20, (1u64 << 32) - 20_000),
            (u32::MAX, -20, 1 << 40),
            (1000, 5, 12),
        ] {
            let noise = Keyed {
                key: Key::draw(&mut PrivacyRng::seeded(scale.into())),
                first,
                scale,
                exponent,
            };
            let got = on_the_device(&values, noise, &device);
            let expected = reference(&values, noise);
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "N = {scale}, k = {exponent}, coordinate {i} (x = {}): {g} against {e}",
                    values[i]
                );
            }
        }
    }

    /// The integers themselves (zeros on the grid 1: the release is `Z`, exact in `f32` below
    /// `2^24`), 10^7 at a small scale and at the DP scale, against the exact pmf. (About 30 s a
    /// scale on lavapipe, the kernel's time; σ = 1, 2 and 10 are drawn 10^6 times by the CPU
    /// reference, `should_draw_the_discrete_gaussian_at_small_scales`, which the device equals
    /// bit for bit.)
    #[test]
    fn should_draw_the_discrete_gaussian_ten_million_times() {
        let Some(device) = device() else { return };
        let n = 10_000_000;
        let zeros = Tensor::<1>::zeros([n], &device);
        for (scale, seed) in [(3u32, 2u64), (1_153_434, 3)] {
            let noise = Keyed {
                key: Key::draw(&mut PrivacyRng::seeded(seed)),
                first: 0,
                scale,
                exponent: 0,
            };
            let z: Vec<i64> = add(zeros.clone(), noise)
                .into_data()
                .try_into_vec::<f32>()
                .unwrap()
                .into_iter()
                .map(|v| v as i64)
                .collect();
            let sigma = f64::from(scale);
            let checked = if scale < 100 {
                check_small(&z, sigma)
            } else {
                check_binned(&z, sigma, 200)
            };
            checked.unwrap_or_else(|e| panic!("N = {scale}: {e}"));
        }
    }

    /// The keyed normal's law on 10^6 draws (`z·2^20` read as integers: rounding of `2^-20`
    /// standard deviations), and its words by coordinate: the same key and index, the same
    /// value, whatever the launch.
    #[test]
    fn should_draw_the_normal_on_the_device() {
        let Some(device) = device() else { return };
        let n = 1_000_000;
        let sigma = 1_048_576.0f32;
        let key = Key::draw(&mut PrivacyRng::seeded(5));
        let draw = |len: usize, first: u64| -> Vec<f32> {
            let noise = KeyedNormal {
                key,
                first,
                std: sigma,
            };
            normal(Tensor::<1>::zeros([len], &device), noise)
                .into_data()
                .try_into_vec::<f32>()
                .unwrap()
        };
        let values = draw(n, 0);
        let z: Vec<i64> = values.iter().map(|v| v.round() as i64).collect();
        check_continuous(&z, sigma.into()).unwrap();
        assert_eq!(draw(10, 5), values[5..15]);
    }
}
