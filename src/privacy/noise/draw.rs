//! The hardened noise's integers `Z`, drawn apart from the gradient they go on.
//!
//! `Z` does not depend on the gradient (the release is `γ·(round(x/γ) + Z)`), so a DP step can
//! start drawing it before the gradient is computed: [`Draw::start`] takes the chunks' keys
//! from the generator at once, in order, and with `background` a thread of its own draws the
//! chunks while the caller computes (on a CPU backend the step leaves a core idle in most of
//! its element-wise work; on a GPU backend the host waits). [`Draw::finish`] draws what is left
//! on the calling thread and rayon's, and waits for the chunk in flight.
//!
//! Every chunk of [`CHUNK`] coordinates is drawn from its own ChaCha20 stream, keyed from the
//! generator; which thread draws it does not matter, so a seeded generator gives the same noise
//! drawn ahead or not, on any number of threads. The integers live only inside the `Draw`: a
//! step that fails drops them (its background thread stops at its current chunk), and nothing
//! saves them, so a noise stream is never replayed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;

use super::PrivacyRng;
use super::discrete::{Bits, DiscreteGaussian};

/// Coordinates per ChaCha20 stream (a constant: the noise of a seeded generator does not depend
/// on the number of threads).
pub(super) const CHUNK: usize = 1 << 14;

/// The integers `Z ~ N_Z(0, σ²)` of `dims` coordinates, being drawn.
pub(crate) struct Draw {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

struct Shared {
    /// `None`: no noise (`Z = 0`).
    gaussian: Option<DiscreteGaussian>,
    dims: usize,
    keys: Vec<[u8; 32]>,
    /// The next chunk to claim (past the last: nothing left, or stopped).
    next: AtomicUsize,
    chunks: Vec<OnceLock<Ints>>,
}

/// One chunk's integers: as `i32` while they fit (at the DP scale, `σ ≈ 10⁶` grid steps, a
/// value beyond `2^31` is thousands of `σ` out), else as `i64`. Half the memory, and a chunk's
/// buffer (64 KiB) stays below the size from which glibc maps a buffer afresh for every chunk.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ints {
    Narrow(Vec<i32>),
    Wide(Vec<i64>),
}

impl Ints {
    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            Ints::Narrow(v) => v.len(),
            Ints::Wide(v) => v.len(),
        }
    }

    /// Integer `i` (tests).
    #[cfg(test)]
    fn get(&self, i: usize) -> i64 {
        match self {
            Ints::Narrow(v) => i64::from(v[i]),
            Ints::Wide(v) => v[i],
        }
    }
}

impl Shared {
    /// The integers of chunk `i`, from its own stream.
    fn chunk(&self, i: usize) -> Ints {
        let len = CHUNK.min(self.dims - i * CHUNK);
        let Some(gaussian) = self.gaussian else {
            return Ints::Narrow(vec![0; len]);
        };
        let mut stream = ChaCha20Rng::from_seed(self.keys[i]);
        let mut bits = Bits::new(&mut stream);
        let mut narrow = Vec::with_capacity(len);
        while narrow.len() < len {
            let z = gaussian.sample(&mut bits);
            match i32::try_from(z) {
                Ok(z) => narrow.push(z),
                Err(_) => {
                    // The same draws, wide from here on.
                    let mut wide: Vec<i64> = narrow.iter().map(|&z| i64::from(z)).collect();
                    wide.push(z);
                    wide.extend((wide.len()..len).map(|_| gaussian.sample(&mut bits)));
                    return Ints::Wide(wide);
                }
            }
        }
        Ints::Narrow(narrow)
    }

    /// Claims and draws chunks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.keys.len() {
                return;
            }
            // Claimed once: the cell is empty.
            let _ = self.chunks[i].set(self.chunk(i));
        }
    }
}

impl Draw {
    /// Starts drawing the integers of `dims` coordinates (all zero when `gaussian` is `None`):
    /// one key per chunk taken from `rng` now, in order; with `background`, a thread of its
    /// own starts drawing the chunks (if the thread cannot be started, [`finish`](Self::finish)
    /// draws them all).
    pub(super) fn start(
        dims: usize,
        gaussian: Option<DiscreteGaussian>,
        rng: &mut PrivacyRng,
        background: bool,
    ) -> Self {
        let keys: Vec<[u8; 32]> = (0..dims.div_ceil(CHUNK))
            .map(|_| {
                let mut key = [0u8; 32];
                rng.rng().fill_bytes(&mut key);
                key
            })
            .collect();
        let shared = Arc::new(Shared {
            gaussian,
            dims,
            chunks: keys.iter().map(|_| OnceLock::new()).collect(),
            keys,
            next: AtomicUsize::new(0),
        });
        let worker = (background && gaussian.is_some() && dims > 0)
            .then(|| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name("burn-vmap-noise".into())
                    .spawn(move || shared.work())
                    .ok()
            })
            .flatten();
        Self { shared, worker }
    }

    /// The number of coordinates.
    pub(super) fn dims(&self) -> usize {
        self.shared.dims
    }

    /// Every coordinate's integer, in order: the chunks not yet claimed are drawn here (on
    /// rayon's threads), then the background thread's last chunk is waited for.
    pub(super) fn finish(mut self) -> Noise {
        let shared = Arc::clone(&self.shared);
        (0..rayon::current_num_threads())
            .into_par_iter()
            .for_each(|_| shared.work());
        if let Some(worker) = self.worker.take() {
            // A worker that panicked left its chunk empty: drawn below from the same key.
            let _ = worker.join();
        }
        // The worker's reference ended with its thread, and `self`'s ends here: the chunks are
        // ours to move out.
        drop(self);
        let chunks = match Arc::try_unwrap(shared) {
            Ok(mut shared) => std::mem::take(&mut shared.chunks)
                .into_iter()
                .enumerate()
                .map(|(i, cell)| cell.into_inner().unwrap_or_else(|| shared.chunk(i)))
                .collect(),
            Err(shared) => (0..shared.chunks.len())
                .map(|i| {
                    shared.chunks[i]
                        .get()
                        .cloned()
                        .unwrap_or_else(|| shared.chunk(i))
                })
                .collect(),
        };
        Noise { chunks }
    }
}

/// Every coordinate's integer `Z`, by chunk of [`CHUNK`].
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Noise {
    chunks: Vec<Ints>,
}

impl Noise {
    /// The coordinates `start..start + len` as pieces that each lie in one chunk: `(offset in
    /// the range, chunk, offset in the chunk, length)`.
    pub(super) fn pieces(
        &self,
        start: usize,
        len: usize,
    ) -> impl Iterator<Item = (usize, &Ints, usize, usize)> {
        let end = start + len;
        let mut at = start;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let (chunk, within) = (at / CHUNK, at % CHUNK);
                let n = (CHUNK - within).min(end - at);
                let piece = (at - start, &self.chunks[chunk], within, n);
                at += n;
                piece
            })
        })
    }

    /// Every integer, in order (tests).
    #[cfg(test)]
    pub(super) fn to_vec(&self) -> Vec<i64> {
        self.chunks
            .iter()
            .flat_map(|c| (0..c.len()).map(move |i| c.get(i)))
            .collect()
    }
}

impl Drop for Draw {
    /// Stops the background thread at its current chunk (a failed step's noise is dropped).
    fn drop(&mut self) {
        self.shared
            .next
            .fetch_max(self.shared.keys.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_draw_the_same_integers_ahead_or_not() {
        let gaussian = DiscreteGaussian::new(3.5);
        let dims = 2 * CHUNK + 17;
        let here = Draw::start(dims, gaussian, &mut PrivacyRng::seeded(5), false)
            .finish()
            .to_vec();
        let ahead = Draw::start(dims, gaussian, &mut PrivacyRng::seeded(5), true);
        std::thread::sleep(std::time::Duration::from_millis(5));
        let ahead = ahead.finish().to_vec();
        assert_eq!(here.len(), dims);
        assert_eq!(here, ahead);
        assert!(here.iter().any(|&z| z != 0));
    }

    #[test]
    fn should_draw_fresh_integers_for_each_draw_of_one_generator() {
        let mut rng = PrivacyRng::seeded(5);
        let gaussian = DiscreteGaussian::new(3.5);
        let first = Draw::start(100, gaussian, &mut rng, true).finish().to_vec();
        let dropped = Draw::start(100, gaussian, &mut rng, true);
        drop(dropped);
        let second = Draw::start(100, gaussian, &mut rng, true).finish().to_vec();
        assert_ne!(first, second);
    }

    #[test]
    fn should_draw_zeros_without_a_gaussian() {
        let z = Draw::start(CHUNK + 1, None, &mut PrivacyRng::seeded(5), true).finish();
        assert_eq!(z.to_vec(), vec![0; CHUNK + 1]);
    }
}
