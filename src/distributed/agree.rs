//! What the ranks of a data-parallel job must agree on, checked rather than assumed: a seed
//! from rank 0 (the data split), the model itself (a fingerprint of its parameters and
//! constants, compared inside a step's collective), and counts summed over the ranks exactly
//! (the dataset's size, from which the sampling rate follows).
//!
//! A rank started with another `--seed` would split the data differently (an example in two
//! shards is sampled twice: sensitivity `2C`), and a rank with another learning rate, optimizer
//! or initial model would compute its clipped sum on another model (the released update is
//! then no rank's gradient). Neither shows in the collectives' results: both are caught here.

use std::time::Duration;

use burn::module::{Module, ModuleDisplay};

use super::{Collective, CollectiveError, DistributedError};
use crate::transform::module::{constants, param_tensors};

/// `value` from rank `root` on every rank. **Collective.**
///
/// # Errors
/// [`DistributedError::Collective`].
pub(super) fn from_rank<C: Collective + ?Sized>(
    engine: &C,
    root: usize,
    value: u64,
    timeout: Duration,
) -> Result<u64, DistributedError> {
    let mut bytes = value.to_le_bytes();
    engine.broadcast_bytes(&mut bytes, root, timeout)?;
    Ok(u64::from_le_bytes(bytes))
}

/// A 64-bit fingerprint of everything a step computes with besides the data: every float
/// parameter's values (bit for bit, in visiting order, with its shape) and the module's
/// constants (a dropout probability, a temperature). FNV-1a over 64-bit words: the same on
/// every platform and build (std's hasher is not specified across versions).
pub(super) fn fingerprint<M: Module + ModuleDisplay>(module: &M) -> u64 {
    let mut hash = Fnv::default();
    for leaf in param_tensors(module) {
        for &d in leaf.shape().as_slice() {
            hash.word(d as u64);
        }
        hash.bytes(leaf.to_data().as_bytes());
    }
    hash.bytes(constants(module).as_bytes());
    hash.0
}

/// FNV-1a, a word (or the tail's bytes, zero-padded) at a time.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let tail = chunks.remainder();
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        // The length separates a tail of zeros from no tail.
        self.word(u64::from_le_bytes(last) ^ ((bytes.len() as u64) << 56));
    }
}

/// The slots a fingerprint takes in a step's all-reduce: four 16-bit limbs per rank, exact in
/// `f32` (every other rank adds zeros to a rank's slots).
pub(super) const LIMBS: usize = 4;

/// Writes `print` into rank `rank`'s slots of `slots` (`LIMBS` per rank).
pub(super) fn write_limbs(slots: &mut [f32], rank: usize, print: u64) {
    for i in 0..LIMBS {
        slots[rank * LIMBS + i] = ((print >> (16 * i)) & 0xFFFF) as f32;
    }
}

/// The ranks whose fingerprint in `slots` (after the all-reduce) differs from rank 0's.
pub(super) fn differing(slots: &[f32]) -> Vec<usize> {
    let rank = |r: usize| &slots[r * LIMBS..(r + 1) * LIMBS];
    (1..slots.len() / LIMBS)
        .filter(|&r| rank(r) != rank(0))
        .collect()
}

/// The most ranks [`sum_counts`] sums exactly: a limb's sum, at most `ranks · 255`, stays below
/// `2^24`, where every `f32` integer is exact.
const MAX_COUNT_RANKS: usize = (1 << 24) / 255;

/// The element-wise sums over every rank of `counts`, exactly: each count travels as eight
/// 8-bit limbs in `f32`, whose sums over up to [`MAX_COUNT_RANKS`] (65 793) ranks stay below
/// `2^24` (exact); a larger group, or a sum beyond `u64`, is an error. **Collective.**
pub(super) fn sum_counts<C: Collective + ?Sized>(
    engine: &C,
    counts: &[u64],
    timeout: Duration,
) -> Result<Vec<u64>, CollectiveError> {
    const LIMBS: usize = 8;
    if engine.size() > MAX_COUNT_RANKS {
        return Err(CollectiveError::Engine(format!(
            "counts are summed exactly over at most {MAX_COUNT_RANKS} ranks, this group has {}",
            engine.size()
        )));
    }
    let mut limbs: Vec<f32> = counts
        .iter()
        .flat_map(|&c| (0..LIMBS).map(move |i| ((c >> (8 * i)) & 0xFF) as f32))
        .collect();
    engine.all_reduce_sum(&mut limbs, timeout)?;
    limbs
        .chunks(LIMBS)
        .map(|l| {
            let total: u128 = l
                .iter()
                .enumerate()
                .map(|(i, &v)| (v as u128) << (8 * i))
                .sum();
            u64::try_from(total).map_err(|_| {
                CollectiveError::Engine(format!(
                    "a count summed over the ranks, {total}, exceeds u64"
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::Local;
    use burn::nn::{DropoutConfig, LinearConfig};
    use burn::tensor::Device;

    #[test]
    fn should_tell_models_apart_by_values_and_constants() {
        let device = Device::default();
        let a = LinearConfig::new(3, 2).init(&device);
        let b = LinearConfig::new(3, 2).init(&device);
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        let p = |prob| fingerprint(&DropoutConfig::new(prob).init());
        assert_ne!(p(0.1), p(0.2));
    }

    #[test]
    fn should_round_trip_limbs_and_name_differing_ranks() {
        let prints = [u64::MAX, u64::MAX, 0x0123_4567_89ab_cdef, u64::MAX];
        let mut slots = vec![0f32; LIMBS * prints.len()];
        for (r, p) in prints.iter().enumerate() {
            write_limbs(&mut slots, r, *p);
        }
        assert_eq!(differing(&slots), vec![2]);
    }

    #[test]
    fn should_hash_a_tail_of_zeros_apart_from_no_tail() {
        let h = |b: &[u8]| {
            let mut f = Fnv::default();
            f.bytes(b);
            f.0
        };
        assert_ne!(
            h(&[1, 2, 3, 4, 5, 6, 7, 8]),
            h(&[1, 2, 3, 4, 5, 6, 7, 8, 0])
        );
        assert_ne!(h(&[]), h(&[0]));
    }

    #[test]
    fn should_sum_counts_exactly() {
        let counts = [0, 1, 65_535, 65_536, u32::MAX as u64 + 7, 1 << 60];
        assert_eq!(
            sum_counts(&Local, &counts, Duration::ZERO).unwrap(),
            counts.to_vec()
        );
    }

    /// `n` ranks that all contribute what this one does (an all-reduce multiplies by `n`, in
    /// `f32` as an engine sums).
    struct Alike(usize);

    impl Collective for Alike {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            self.0
        }
        fn all_reduce_sum(&self, values: &mut [f32], _: Duration) -> Result<(), CollectiveError> {
            for v in values {
                *v = (0..self.0).fold(0f32, |s, _| s + *v);
            }
            Ok(())
        }
        fn broadcast(&self, _: &mut [f32], _: usize, _: Duration) -> Result<(), CollectiveError> {
            Ok(())
        }
        fn broadcast_bytes(
            &self,
            _: &mut [u8],
            _: usize,
            _: Duration,
        ) -> Result<(), CollectiveError> {
            Ok(())
        }
    }

    /// 16-bit limbs were exact to 256 ranks only (1000 ranks of 65 535 overflow f32's 2^24).
    #[test]
    fn should_sum_counts_exactly_over_many_ranks_and_refuse_too_many() {
        let counts = [65_535, u32::MAX as u64, 12_345_678_901];
        let sums = sum_counts(&Alike(1000), &counts, Duration::ZERO).unwrap();
        assert_eq!(sums, counts.map(|c| c * 1000).to_vec());
        let err = sum_counts(&Alike(MAX_COUNT_RANKS + 1), &[1], Duration::ZERO).unwrap_err();
        assert!(matches!(err, CollectiveError::Engine(_)), "{err}");
    }
}
