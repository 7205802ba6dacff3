//! How a data-parallel DP step lays out what its two collectives move: the clipped sums by
//! slice for the reduce-scatter (each slice with every rank's flags and fingerprint), and the
//! noised slices for the all-gather (each with its rank's noise flag).
//!
//! ```text
//! d coordinates, n ranks, b = ⌈d/n⌉: slice r is coordinates [r·b, min((r+1)·b, d))
//! reduce-scatter, block r:  sum[slice r] (padded to b) | failed[0..n] | fingerprint[0..4n]
//!   every rank writes its own flag and fingerprint into every block, so each rank receives
//!   every rank's flags (exact sums: the others add zeros) with the complete sum of its slice
//! all-gather, block r:      noised[slice r] (padded to b) | noise failed on rank r
//! ```

use super::agree;

/// The layout of one step's blocks over `size` ranks for `len` coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Blocks {
    len: usize,
    size: usize,
    /// Coordinates per slice, `⌈len / size⌉` (the last slices may be shorter, or empty).
    slice: usize,
    /// Whether the reduce-scatter blocks carry the ranks' fingerprints.
    prints: bool,
}

/// What a rank tells the others with its clipped sum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Flag {
    /// 0: its part of the step succeeded; 1: it failed before reading its batch; 2: after.
    pub(super) failed: f32,
    /// Its model's fingerprint, where the step compares models.
    pub(super) print: Option<u64>,
}

impl Blocks {
    pub(super) fn new(len: usize, size: usize, prints: bool) -> Self {
        Self {
            len,
            size,
            slice: len.div_ceil(size.max(1)),
            prints,
        }
    }

    /// The gradient's coordinates.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Rank `r`'s coordinates.
    pub(super) fn range(&self, r: usize) -> std::ops::Range<usize> {
        let lo = (r * self.slice).min(self.len);
        lo..(lo + self.slice).min(self.len)
    }

    /// Values of a reduce-scatter block: a slice, the flags, the fingerprints.
    pub(super) fn width(&self) -> usize {
        self.slice
            + self.size
            + if self.prints {
                agree::LIMBS * self.size
            } else {
                0
            }
    }

    /// Values of an all-gather block: a slice and a flag.
    fn gathered_width(&self) -> usize {
        self.slice + 1
    }

    /// The reduce-scatter's send buffer of rank `rank`: its clipped sum `flat` by slice, its
    /// flag and fingerprint in every block.
    pub(super) fn pack(&self, flat: &[f32], rank: usize, flag: Flag) -> Vec<f32> {
        let width = self.width();
        let mut send = vec![0f32; width * self.size];
        for (s, block) in send.chunks_mut(width).enumerate() {
            let range = self.range(s);
            block[..range.len()].copy_from_slice(&flat[range]);
            block[self.slice + rank] = flag.failed;
            if let Some(print) = flag.print {
                agree::write_limbs(&mut block[self.slice + self.size..], rank, print);
            }
        }
        send
    }

    /// This rank's received block: the complete sum of its slice, every rank's failure flag,
    /// and the ranks whose fingerprint differs from rank 0's.
    pub(super) fn unpack<'a>(&self, block: &'a [f32], rank: usize) -> Received<'a> {
        let flags = &block[self.slice..self.slice + self.size];
        Received {
            sum: &block[..self.range(rank).len()],
            failed: flags.to_vec(),
            diverged: if self.prints {
                agree::differing(&block[self.slice + self.size..])
            } else {
                Vec::new()
            },
        }
    }

    /// The all-gather's block of this rank: its noised slice (`None`: noising failed).
    pub(super) fn gathered_block(&self, noised: Option<&[f32]>) -> Vec<f32> {
        let mut block = vec![0f32; self.gathered_width()];
        match noised {
            Some(values) => block[..values.len()].copy_from_slice(values),
            None => block[self.slice] = 1.0,
        }
        block
    }

    /// The all-gather's receive buffer.
    pub(super) fn gathered_buffer(&self) -> Vec<f32> {
        vec![0f32; self.gathered_width() * self.size]
    }

    /// The noised update assembled from every rank's gathered block, or the ranks whose
    /// noising failed.
    pub(super) fn assemble(&self, gathered: &[f32]) -> Result<Vec<f32>, Vec<usize>> {
        let width = self.gathered_width();
        let failed: Vec<usize> = (0..self.size)
            .filter(|&r| gathered[r * width + self.slice] > 0.0)
            .collect();
        if !failed.is_empty() {
            return Err(failed);
        }
        let mut update = Vec::with_capacity(self.len);
        for r in 0..self.size {
            let n = self.range(r).len();
            update.extend_from_slice(&gathered[r * width..r * width + n]);
        }
        Ok(update)
    }
}

/// What a rank receives from the reduce-scatter.
#[derive(Debug)]
pub(super) struct Received<'a> {
    /// The complete sum of this rank's slice.
    pub(super) sum: &'a [f32],
    /// Every rank's failure flag (0, 1 or 2, see [`Flag::failed`]).
    pub(super) failed: Vec<f32>,
    /// The ranks whose model differs from rank 0's.
    pub(super) diverged: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_cover_every_coordinate_once_with_uneven_and_empty_slices() {
        for (len, size) in [(10, 3), (3, 4), (0, 2), (12, 4), (1, 1)] {
            let b = Blocks::new(len, size, false);
            let covered: Vec<usize> = (0..size).flat_map(|r| b.range(r)).collect();
            assert_eq!(covered, (0..len).collect::<Vec<_>>(), "{len} over {size}");
        }
    }

    #[test]
    fn should_round_trip_sums_flags_and_noised_slices() {
        let (len, size) = (7, 3);
        let b = Blocks::new(len, size, true);
        let flats: Vec<Vec<f32>> = (0..size)
            .map(|r| (0..len).map(|i| (r * 10 + i) as f32).collect())
            .collect();
        let flags = [0.0, 2.0, 0.0];
        // The reduce-scatter by hand: block s summed over the ranks' sends.
        let sends: Vec<Vec<f32>> = (0..size)
            .map(|r| {
                let print = Some(if r == 2 { 7 } else { 5 });
                b.pack(
                    &flats[r],
                    r,
                    Flag {
                        failed: flags[r],
                        print,
                    },
                )
            })
            .collect();
        let w = b.width();
        for r in 0..size {
            let block: Vec<f32> = (0..w)
                .map(|i| sends.iter().map(|s| s[r * w + i]).sum())
                .collect();
            let got = b.unpack(&block, r);
            let expected: Vec<f32> = b
                .range(r)
                .map(|i| flats.iter().map(|f| f[i]).sum())
                .collect();
            assert_eq!(got.sum, expected.as_slice());
            assert_eq!(got.failed, flags.to_vec());
            assert_eq!(got.diverged, vec![2]);
        }
        // The all-gather: every slice back in place; a failed rank named.
        let mut gathered = b.gathered_buffer();
        for r in 0..size {
            let slice: Vec<f32> = b.range(r).map(|i| -(i as f32)).collect();
            let block = b.gathered_block(Some(&slice));
            gathered[r * block.len()..(r + 1) * block.len()].copy_from_slice(&block);
        }
        let update = b.assemble(&gathered).unwrap();
        assert_eq!(update, (0..len).map(|i| -(i as f32)).collect::<Vec<_>>());
        let failed = b.gathered_block(None);
        let width = failed.len();
        gathered[width..2 * width].copy_from_slice(&failed);
        assert_eq!(b.assemble(&gathered), Err(vec![1]));
    }
}
