//! The sampler's tests: its parts (`parts.rs`) and its law against the exact pmf (`law.rs`), with
//! the statistics they share.

mod law;
mod parts;

use super::bits::{WORDS, bernoulli_block};
use super::*;
use crate::privacy::noise::law::*;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// Frequency of `f` over `n` draws, asserted within 5 binomial standard deviations of `p`.
fn frequency(n: usize, p: f64, mut f: impl FnMut(&mut Bits<'_, ChaCha20Rng>) -> bool) {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let mut bits = Bits::new(&mut rng);
    let hits = (0..n).filter(|_| f(&mut bits)).count() as f64;
    let tolerance = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-12;
    let got = hits / n as f64;
    assert!(
        (got - p).abs() <= tolerance,
        "frequency {got}, expected {p}"
    );
}

/// `n` draws of `gaussian` from a seeded ChaCha20 stream.
fn draws(gaussian: &DiscreteGaussian, n: usize, seed: u64) -> Vec<i64> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut bits = Bits::new(&mut rng);
    (0..n).map(|_| gaussian.sample(&mut bits)).collect()
}

fn sigma_of(gaussian: &DiscreteGaussian) -> f64 {
    let (a, d) = gaussian.scale();
    a as f64 / d as f64
}

// --- Bits ---

/// A generator of 0, 1, 2, ...: the bit stream is known.
struct Counter(u64);

impl rand::TryRng for Counter {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.try_next_u64()? as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        self.0 += 1;
        Ok(self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
    /// The words' little-endian bytes, as a block generator's.
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let word = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

/// The algorithm as the module's notes state it, without `sample`'s shortcut.
fn sample_plainly<R: Rng + ?Sized>(g: &DiscreteGaussian, bits: &mut Bits<'_, R>) -> i64 {
    loop {
        let k = g.table.sample(bits);
        let j = bits.uniform(g.slots, g.j_bits, g.j_threshold);
        let (i, n) = g.locate(k, j);
        if n >= g.a || i > i64::MAX as u128 || !g.accept(bits, k, n) {
            continue;
        }
        let negative = bits.bit();
        if i == 0 && negative {
            continue;
        }
        return if negative { -(i as i64) } else { i as i64 };
    }
}
