//! The sampler's parts: the bit stream, the uniform and Bernoulli draws, the acceptance, the
//! interval arithmetic and the table of `k`.

use super::*;

#[test]
fn should_read_the_stream_in_order_most_significant_bit_first() {
    let words: Vec<u64> = (1..=2000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let stream_bit = |p: usize| (words[p / 64] >> (63 - p % 64)) & 1;
    let mut rng = Counter(0);
    let mut bits = Bits::new(&mut rng);
    let mut pos = 0;
    // Widths of every kind, across word and refill boundaries.
    for i in 0..600 {
        let n = (i * 37 % 64) as u32 + 1;
        if i % 5 == 0 {
            let peeked = bits.peek64();
            let expected = (0..64).fold(0u64, |acc, b| acc << 1 | stream_bit(pos + b));
            assert_eq!(peeked, expected, "peek at {pos}");
        }
        let got = bits.take(n);
        let expected = (0..n as usize).fold(0u64, |acc, b| acc << 1 | stream_bit(pos + b));
        assert_eq!(got, expected, "{n} bits at {pos}");
        pos += n as usize;
    }
    assert!(pos > 64 * (WORDS + 1) * 3);
}

/// A refill reads the generator's bytes; the words are its `next_u64` all the same.
#[test]
fn should_read_chacha_words_as_next_u64_does() {
    let mut words = ChaCha20Rng::seed_from_u64(4);
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let mut bits = Bits::new(&mut rng);
    for i in 0..3 * WORDS + 5 {
        assert_eq!(bits.take(64), words.next_u64(), "word {i}");
    }
}

#[test]
fn should_draw_uniform_below() {
    for n in [7u64, 1000, (1 << 20) + 3, (1 << 46) + 12345] {
        let b = (u64::BITS - (n - 1).leading_zeros() + SPARE).min(64);
        let threshold = (((1u128 << b) % n as u128) << (64 - b)) as u64;
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let mut bits = Bits::new(&mut rng);
        // Seven equal buckets of [0, n) (n = 7: the values themselves).
        let mut counts = [0u64; 7];
        for _ in 0..70_000 {
            let v = bits.uniform(n, b, threshold);
            assert!(v < n);
            counts[(v as u128 * 7 / n as u128) as usize] += 1;
        }
        let probs: Vec<f64> = (0..7u128)
            .map(|i| ((i + 1) * n as u128).div_ceil(7) - (i * n as u128).div_ceil(7))
            .map(|c| c as f64 / n as f64)
            .collect();
        let chi2 = chi_square(&counts, &probs);
        assert!(chi2 < critical(6), "n = {n}: {counts:?}");
    }
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    assert_eq!(Bits::new(&mut rng).uniform(1, 0, 0), 0);
}

/// Every value of Lemire's step, for every `x` of `b` bits: each output in `[0, n)` exactly as
/// often as the others, the rest redrawn (a statistical test cannot see a bias of `2^-SPARE`).
#[test]
fn should_draw_every_uniform_value_equally_often_exhaustively() {
    for n in 1u64..=300 {
        for spare in [0, 1, 3] {
            let b = u64::BITS - (n - 1).leading_zeros() + spare;
            if b == 0 {
                continue;
            }
            let threshold = (((1u128 << b) % n as u128) << (64 - b)) as u64;
            let mut counts = vec![0u64; n as usize];
            for x in 0..1u64 << b {
                if let Some(v) = lemire(x << (64 - b), n, threshold) {
                    counts[v as usize] += 1;
                }
            }
            assert!(
                counts.iter().all(|&c| c == counts[0] && c > 0),
                "n = {n}, b = {b}: {counts:?}"
            );
        }
    }
    // All 64 bits: the mask keeps every bit (a shift by 64 is not defined).
    let mut rng = Counter(0);
    let mut bits = Bits::new(&mut rng);
    let n = (1u64 << 63) + 5;
    let threshold = ((1u128 << 64) % n as u128) as u64;
    assert!(bits.uniform(n, 64, threshold) < n);
}

/// One block of the Bernoulli draw, exhaustively: of the `2^16` values, `⌊num·2^16/den⌋` answer
/// true, at most one continues, with what is left of the fraction (`{num·2^16/den}·den`), and
/// the rest answer false: by induction on the blocks, `P(true) = num/den` exactly.
#[test]
fn should_split_each_bernoulli_block_exactly() {
    for den in 1u128..=40 {
        for num in 0..den {
            let (mut yes, mut no, mut rest) = (0u128, 0u128, Vec::new());
            for v in 0..1u128 << 16 {
                match bernoulli_block(v, num, den) {
                    Ok(true) => yes += 1,
                    Ok(false) => no += 1,
                    Err(r) => rest.push((v, r)),
                }
            }
            let scaled = num << 16;
            assert_eq!(yes, scaled / den, "{num}/{den}");
            match rest.as_slice() {
                [] => assert_eq!(scaled % den, 0, "{num}/{den}"),
                [(v, r)] => {
                    assert_eq!((*v, *r), (scaled / den, scaled % den), "{num}/{den}");
                }
                more => panic!("{num}/{den}: {} blocks undecided", more.len()),
            }
            assert_eq!(yes + no + rest.len() as u128, 1 << 16);
        }
    }
}

#[test]
fn should_draw_bernoulli_of_a_fraction() {
    for (num, den) in [
        (0u64, 1u64),
        (1, 1),
        (1, 3),
        (2, 3),
        (5, 1 << 40),
        (u64::MAX / 3, u64::MAX),
        ((1 << 46) + 1, (1 << 47) - 1),
    ] {
        let p = num as f64 / den as f64;
        frequency(200_000, p, |b| b.bernoulli(num, den));
    }
    frequency(200_000, 1.0 / 15.0, |b| b.bernoulli_over(1, 3, 5));
    frequency(200_000, 0.5 / 3.0, |b| {
        b.bernoulli_over(u64::MAX / 2, u64::MAX, 3)
    });
}

#[test]
fn should_draw_bernoulli_of_exp() {
    for (num, den) in [
        (0u128, 1u64),
        (1, 2),
        (1, 1),
        (7, 3),
        (5, 1),
        ((3 << 62) + 12345, 1 << 62),
        (u64::MAX as u128 - 1, u64::MAX),
    ] {
        let p = (-(num as f64) / den as f64).exp();
        frequency(200_000, p, |b| b.bernoulli_exp(num, den));
    }
}

/// `exp(-x(2k + x)/(2m²))` for `x = n/a`, both ways of drawing it.
#[test]
fn should_accept_with_the_exact_probability() {
    for e in [0, 1, 3, 6] {
        let g = DiscreteGaussian::with_m_exp(12.345, e).unwrap();
        let (a, m2) = (g.a, g.m2);
        for (k, n) in [
            (0, a / 2),
            (0, a - 1),
            (m2 / 2, a / 3),
            (m2 - 1, a - 1),
            (m2, a / 5),
            (3 * m2 + 1, a / 2),
            (m2 + 40, 1),
            (2 * m2 - 1, a - 1),
            (2 * m2, a - 1),
        ] {
            let x = n as f64 / a as f64;
            let p = (-x * (2.0 * k as f64 + x) / (2.0 * m2 as f64)).exp();
            frequency(100_000, p, |b| g.accept(b, k, n));
            frequency(100_000, p, |b| g.accept_far(b, k, n));
            frequency(100_000, p, |b| g.accept_power(b, k, n));
        }
    }
}

// --- Interval arithmetic ---

#[test]
fn should_compute_naturals_as_u128_does() {
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    for _ in 0..2000 {
        let x = rng.next_u64() >> (rng.next_u32() % 64);
        let y = rng.next_u64() >> (rng.next_u32() % 64);
        let (bx, by) = (Nat::from_u64(x), Nat::from_u64(y));
        let (x, y) = (x as u128, y as u128);
        assert_eq!(bx.mul(&by).to_u128(), x * y);
        assert_eq!(bx.add(&by).to_u128(), x + y);
        let (big, small) = if bx >= by { (&bx, &by) } else { (&by, &bx) };
        assert_eq!(big.sub(small).to_u128(), x.abs_diff(y));
        assert_eq!(bx.cmp(&by), x.cmp(&y));
        let s = rng.next_u32() % 60;
        assert_eq!(bx.shl(s).to_u128(), x << s);
        let xy = Nat::from_u128(x * y);
        assert_eq!(xy.shr(s).to_u128(), (x * y) >> s);
        assert_eq!(xy.shr_ceil(s).to_u128(), (x * y).div_ceil(1 << s));
        if y > 0 {
            assert_eq!(xy.div_small(y as u64).to_u128(), x);
            assert_eq!(
                quotient_of(&xy, &by),
                (x * y / y).min(u64::MAX as u128) as u64
            );
        }
    }
    // Past 128 bits: (2^100 + 3)² = 2^200 + 6·2^100 + 9.
    let v = Nat::pow2(100).add(&Nat::from_u64(3));
    let sq = v.mul(&v);
    assert_eq!(
        sq.sub(&Nat::pow2(200)).sub(&Nat::pow2(100).mul_small(6)),
        Nat::from_u64(9)
    );
    assert_eq!(sq.shr(150), Nat::pow2(50));
    assert_eq!(sq.shr_ceil(150), Nat::pow2(50).add(&Nat::from_u64(1)));
    assert_eq!(big::quotient_u64(&Nat::pow2(130), &Nat::pow2(60)), u64::MAX);
    assert_eq!(
        big::quotient_u64(&Nat::pow2(120).mul_small(3), &Nat::pow2(60).mul_small(2)),
        3 << 59
    );
}

fn quotient_of(x: &Nat, y: &Nat) -> u64 {
    big::quotient_u64(x, y)
}

fn to_f64(n: &Nat, p: u32) -> f64 {
    n.to_f64() * 2f64.powi(-(p as i32))
}

#[test]
fn should_bracket_the_law_of_k() {
    for e in 0..=M_EXP_MAX {
        let m2 = (1u64 << (2 * e)) as f64;
        let curve = Curve::new(e, 128);
        let total: f64 = (0..100_000u64)
            .map(|k| (-((k * k) as f64) / (2.0 * m2)).exp())
            .sum();
        let (s_lo, s_hi) = (to_f64(&curve.s[0], 128), to_f64(&curve.s[1], 128));
        assert!(
            s_lo <= total * (1.0 + 1e-14) && total <= s_hi * (1.0 + 1e-14),
            "e = {e}"
        );
        // The brackets are tight: below 2^-100 (the error of the products grows as k²).
        assert!(
            curve.s[1].sub(&curve.s[0]) < Nat::from_u64(1 << 28),
            "e = {e}"
        );
        let mut partial = 0.0;
        for (k, [lo, hi]) in curve.cum.iter().enumerate().take(2000) {
            partial += (-((k * k) as f64) / (2.0 * m2)).exp();
            assert!(
                lo <= hi && hi.sub(lo) < Nat::from_u64(1 << 28),
                "e = {e}, k = {k}"
            );
            let (l, h) = (to_f64(lo, 128), to_f64(hi, 128));
            assert!(
                (l - partial).abs() <= 1e-14 * partial && (h - partial).abs() <= 1e-14 * partial,
                "e = {e}, k = {k}"
            );
        }
    }
}

#[test]
fn should_tabulate_the_cdf_of_k() {
    for e in 0..=M_EXP_MAX {
        let table = Table::get(e);
        let m2 = (1u64 << (2 * e)) as f64;
        let total: f64 = (0..100_000u64)
            .map(|k| (-((k * k) as f64) / (2.0 * m2)).exp())
            .sum();
        let mut cumulative = 0.0;
        let w = &table.windows;
        assert_eq!(w.last().unwrap().hi, u64::MAX);
        for (k, win) in w.iter().enumerate() {
            cumulative += (-((k * k) as f64) / (2.0 * m2)).exp() / total;
            assert!(
                win.lo <= win.hi && win.hi - win.lo <= 1,
                "e = {e}, k = {k}: {win:?}"
            );
            assert_eq!(win.below, if k == 0 { 0 } else { w[k - 1].hi });
            if k > 0 {
                assert!(w[k - 1].hi <= win.lo, "e = {e}, k = {k}");
            }
            let f = cumulative * 2f64.powi(64);
            assert!(
                (win.lo as f64 - f).abs() <= f * 1e-13 + 4096.0,
                "e = {e}, k = {k}"
            );
        }
        // ~9.4·m entries: where F_k reaches 1 - 2^-64.
        let m = (1 << e) as f64;
        assert!(
            (w.len() as f64) < 9.5 * m + 4.0 && (w.len() as f64) > 9.0 * m - 2.0,
            "{}",
            w.len()
        );
        let mut pure = 0.0;
        for (t, &slot) in table.guide.iter().enumerate() {
            let start = (t as u64) << SLICE;
            let g = usize::from(slot & !PURE);
            assert!(w[g].hi >= start && (g == 0 || w[g - 1].hi < start));
            if slot & PURE != 0 {
                // Every `u` of the slice: below `F_k`, above `F_{k-1}` (decided, with `k`).
                let end = start | ((1 << SLICE) - 1);
                assert!(end < w[g].lo && w[g].below < start, "e = {e}, t = {t}");
                for u in [start, end, start | (1 << (SLICE - 1))] {
                    assert_eq!(
                        table.decide(u),
                        Some((g as u64, GUIDE_BITS)),
                        "e = {e}, t = {t}"
                    );
                }
                pure += 1.0 / table.guide.len() as f64;
            }
        }
        // The share of `u` the guide alone decides.
        if e == M_EXP_MAX {
            assert!(pure > 0.9, "{pure}");
        }
    }
}

/// The table decides `k` as the exact inversion does, from the bits it says it used; the
/// undecided `u` are those in a window.
#[test]
fn should_decide_k_as_the_exact_inversion() {
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    for e in 0..=M_EXP_MAX {
        let table = Table::get(e);
        let mut us: Vec<u64> = (0..300).map(|_| rng.next_u64()).collect();
        for w in table.windows.iter().step_by(1 + table.windows.len() / 50) {
            us.extend([
                w.lo.wrapping_sub(1),
                w.lo,
                w.hi,
                w.hi.wrapping_add(1),
                w.below.wrapping_add(1),
            ]);
        }
        us.extend([0, 1, u64::MAX]);
        for u in us {
            let exact = |rng: &mut ChaCha20Rng| {
                big::invert(&table.curve, Nat::from_u64(u), 64, || rng.next_u64())
            };
            match table.decide(u) {
                Some((k, used)) => {
                    assert!((1..=64).contains(&used));
                    let never = || -> u64 { panic!("decided by 64 bits") };
                    assert_eq!(
                        big::invert(&table.curve, Nat::from_u64(u), 64, never),
                        k,
                        "e = {e}, u = {u:#x}"
                    );
                    // Any u sharing the `used` first bits gives the same k.
                    for _ in 0..20 {
                        let tail = if used == 64 {
                            0
                        } else {
                            rng.next_u64() >> used
                        };
                        let keep = if used == 64 {
                            u64::MAX
                        } else {
                            !(u64::MAX >> used)
                        };
                        let v = (u & keep) | tail;
                        if let Some((kv, _)) = table.decide(v) {
                            assert_eq!(kv, k, "e = {e}, u = {u:#x}, v = {v:#x}");
                        } else {
                            assert_eq!(exact(&mut rng), k);
                        }
                    }
                }
                None => {
                    let w = &table.windows;
                    let inside = w.iter().position(|w| w.lo <= u && u <= w.hi);
                    let first = inside.expect("undecided only in a window");
                    // The windows it is in, and the one after (none after the last).
                    let last = w.iter().rposition(|w| w.lo <= u && u <= w.hi).unwrap();
                    let k = exact(&mut rng) as usize;
                    assert!(k >= first, "e = {e}, u = {u:#x}: {k} vs {first}");
                    assert!(
                        k <= last + 1 || last == w.len() - 1,
                        "e = {e}, u = {u:#x}: {k}"
                    );
                }
            }
        }
    }
}

/// The exact inversion on its own (every bit of `U` from the stream, brackets from a coarse
/// `2^-64` precision up) draws `k` with the law `P(k) ∝ exp(-k²/(2m²))`.
#[test]
fn should_draw_k_by_exact_inversion_alone() {
    for e in [0, 2] {
        let curve = Curve::new(e, 64);
        let m2 = (1u64 << (2 * e)) as f64;
        let mut rng = ChaCha20Rng::seed_from_u64(5 + e as u64);
        let n = 20_000;
        let top = 3 << e;
        let mut counts = vec![0u64; top + 1];
        for _ in 0..n {
            let k = big::invert(&curve, Nat::zero(), 0, || rng.next_u64()) as usize;
            counts[k.min(top)] += 1;
        }
        let weights: Vec<f64> = (0..200)
            .map(|k| (-((k * k) as f64) / (2.0 * m2)).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut probs: Vec<f64> = weights[..top].iter().map(|w| w / total).collect();
        probs.push(weights[top..].iter().sum::<f64>() / total);
        let chi2 = chi_square(&counts, &probs);
        assert!(chi2 < critical(top), "e = {e}: {chi2} {counts:?}");
    }
}

/// The bits after `k` are fresh: `k` and the next 4 bits are independent (a chi-square of
/// independence on 10⁶ draws; consuming one bit fewer than the rule says fails it).
#[test]
fn should_leave_fresh_bits_after_k() {
    for e in [0, 3, 6] {
        let table = Table::get(e);
        let mut rng = ChaCha20Rng::seed_from_u64(17);
        let mut bits = Bits::new(&mut rng);
        let groups = 8;
        let mut counts = vec![[0u64; 16]; groups];
        for _ in 0..1_000_000 {
            let k = table.sample(&mut bits) as usize;
            let next = bits.take(4) as usize;
            counts[(k >> e).min(groups - 1)][next] += 1;
        }
        let n = 1_000_000f64;
        let rows: Vec<f64> = counts
            .iter()
            .map(|r| r.iter().sum::<u64>() as f64)
            .collect();
        let cols: Vec<f64> = (0..16)
            .map(|c| counts.iter().map(|r| r[c]).sum::<u64>() as f64)
            .collect();
        let mut chi2 = 0.0;
        let mut df = 0;
        for (g, row) in counts.iter().enumerate() {
            if rows[g] < 1000.0 {
                continue;
            }
            df += 15;
            for (c, &count) in row.iter().enumerate() {
                let expected = rows[g] * cols[c] / n;
                chi2 += (count as f64 - expected).powi(2) / expected;
            }
        }
        assert!(chi2 < critical(df), "e = {e}: chi-square {chi2} ({df} df)");
    }
}

/// A generator whose first word is given, then ChaCha20's.
struct Rigged(Option<u64>, ChaCha20Rng);

impl rand::TryRng for Rigged {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.try_next_u64()? as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.0.take().unwrap_or_else(|| self.1.next_u64()))
    }
    /// The given word's little-endian bytes first.
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        let rest = match self.0.take() {
            Some(word) => {
                let n = dst.len().min(8);
                dst[..n].copy_from_slice(&word.to_le_bytes()[..n]);
                &mut dst[n..]
            }
            None => dst,
        };
        self.1.fill_bytes(rest);
        Ok(())
    }
}

/// First 64 bits in a window: the draw goes on with the exact inversion, on the same bits.
#[test]
fn should_hand_undecided_draws_to_the_exact_inversion() {
    for e in [0, 4, 6] {
        let table = Table::get(e);
        let w = &table.windows;
        for (i, u) in [
            (0, w[0].lo),
            (1, w[1].hi),
            (w.len() / 3, w[w.len() / 3].lo),
            (w.len() - 1, u64::MAX),
        ] {
            assert_eq!(table.decide(u), None);
            for seed in 0..20 {
                let mut rng = Rigged(Some(u), ChaCha20Rng::seed_from_u64(seed));
                let k = table.sample(&mut Bits::new(&mut rng));
                let mut rest = ChaCha20Rng::seed_from_u64(seed);
                let exact = big::invert(&table.curve, Nat::from_u64(u), 64, || rest.next_u64());
                assert_eq!(k, exact, "e = {e}, window {i}");
                assert!(k as usize >= i);
            }
        }
    }
}

// --- The sampler ---

#[test]
fn should_round_the_scale_up_by_less_than_2_to_the_minus_45() {
    for s in [
        1.0,
        1.5,
        10.0,
        4505.6,
        1.1 * 1048576.0,
        1e8,
        3.0e9,
        3_037_000_499.0,
        1e14,
        140737488355327.0,
    ] {
        let g = DiscreteGaussian::new(s).unwrap();
        let (a, d) = g.scale();
        assert!(a < 1 << 47 && d.is_power_of_two());
        assert!(
            a as u128 >= (s * d as f64) as u128 && a as f64 >= s * d as f64,
            "σ = {a}/{d} < {s}"
        );
        assert!(
            (a as f64 / d as f64) < s * (1.0 + 2f64.powi(-45)),
            "σ = {a}/{d} for {s}"
        );
    }
    assert_eq!(
        DiscreteGaussian::new(1.0).unwrap().scale(),
        (1 << 46, 1 << 46)
    );
    assert_eq!(
        DiscreteGaussian::new(140737488355327.0).unwrap().scale(),
        ((1 << 47) - 1, 1)
    );
    for s in [
        0.0,
        0.99,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        140737488355328.0,
        1e300,
    ] {
        assert_eq!(DiscreteGaussian::new(s), None, "{s}");
    }
    assert_eq!(DiscreteGaussian::with_m_exp(3.0, M_EXP_MAX + 1), None);
}

#[test]
fn should_choose_the_finest_envelope_at_large_scales() {
    let m = |s: f64| DiscreteGaussian::new(s).unwrap().intervals_per_sigma();
    assert_eq!(m(1.1 * 1048576.0), 64);
    assert_eq!(m(3e8), 64);
    // w = σ/m = 1: x = 0, nothing to test.
    assert_eq!(m(1.0), 1);
    assert_eq!(m(4.0), 4);
    for s in [1.0, 1.3, 2.7, 10.0, 100.0, 1e4] {
        let g = DiscreteGaussian::new(s).unwrap();
        let chosen = DiscreteGaussian::cost(g.a, g.d_exp, g.e);
        assert!((0..=M_EXP_MAX).all(|e| DiscreteGaussian::cost(g.a, g.d_exp, e) >= chosen));
    }
}

#[test]
fn should_locate_candidates_alike_in_u64_and_u128() {
    for s in [1.0, 1.5, 3.0, 1.1 * 1048576.0, 1e14] {
        for e in [0, 3, 6] {
            let g = DiscreteGaussian::with_m_exp(s, e).unwrap();
            for k in [0u64, 1, 7, 100, 65535] {
                for j in [0, g.slots / 2, g.slots - 1] {
                    assert_eq!(
                        g.locate(k, j),
                        g.locate_wide(k, j),
                        "s = {s}, e = {e}, k = {k}"
                    );
                    let (i, n) = g.locate(k, j);
                    // i·Dm = k·a + n: x = n/a = i/w - k.
                    assert_eq!(i << g.dm_exp, k as u128 * g.a as u128 + n as u128);
                }
            }
        }
    }
}
