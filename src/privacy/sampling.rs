//! Poisson sampling, and the loader that draws a mechanism's DP-SGD batches from a `burn::data`
//! dataset with the user's own batcher.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::tensor::Device;
use rand::distr::{Bernoulli, Distribution};

use super::{PrivacyError, PrivacyRng};

/// Draws DP-SGD batches by Poisson sampling: at every step each of the `N` examples joins the
/// batch independently with probability `q`, so the batch size is Binomial(N, q) and may be 0.
/// This is the sampling the accountants assume (with the add/remove-one neighbouring relation);
/// shuffled fixed-size batches are a different mechanism, for which their ε does not hold.
///
/// ```
/// use burn_vmap::privacy::{PoissonSampler, PrivacyRng};
/// let mut sampler = PoissonSampler::with_rng(1000, 0.01, PrivacyRng::seeded(1)).unwrap();
/// assert_eq!(sampler.expected_batch_size(), 10.0);
/// let batch = sampler.sample(); // sorted indices; its length varies from step to step
/// assert!(batch.windows(2).all(|w| w[0] < w[1]));
/// ```
/// Not `Clone`: a clone would draw the same batches as the original.
#[derive(Debug)]
pub struct PoissonSampler {
    num_examples: usize,
    rate: f64,
    coin: Bernoulli,
    rng: PrivacyRng,
}

impl PoissonSampler {
    /// A sampler of `num_examples` examples at `sampling_rate` (`q` in `[0, 1]`), drawing from a
    /// generator seeded from the operating system's entropy.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] for a rate outside `[0, 1]`.
    pub fn new(num_examples: usize, sampling_rate: f64) -> Result<Self, PrivacyError> {
        Self::with_rng(num_examples, sampling_rate, PrivacyRng::from_entropy())
    }

    /// As [`new`](Self::new) with a given generator ([`PrivacyRng::seeded`] for tests: then the
    /// sampling is reproducible and the guarantee does not hold).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_rng(
        num_examples: usize,
        sampling_rate: f64,
        rng: PrivacyRng,
    ) -> Result<Self, PrivacyError> {
        let coin = Bernoulli::new(sampling_rate).map_err(|_| PrivacyError::Argument {
            argument: "sampling_rate",
            expected: "a probability in [0, 1]",
            got: sampling_rate.to_string(),
        })?;
        Ok(Self {
            num_examples,
            rate: sampling_rate,
            coin,
            rng,
        })
    }

    /// `q`.
    pub fn sampling_rate(&self) -> f64 {
        self.rate
    }

    /// `N`.
    pub fn num_examples(&self) -> usize {
        self.num_examples
    }

    /// `q · N`, the batch size on average: DP-SGD divides the noisy sum by it.
    pub fn expected_batch_size(&self) -> f64 {
        self.rate * self.num_examples as f64
    }

    /// Steps per epoch, `⌈1 / q⌉` (each example is seen once per epoch on average).
    pub fn steps_per_epoch(&self) -> usize {
        if self.rate > 0.0 {
            (1.0 / self.rate).ceil() as usize
        } else {
            0
        }
    }

    /// One step's batch: the sorted indices of the examples that joined.
    pub fn sample(&mut self) -> Vec<usize> {
        let coin = self.coin;
        let rng = self.rng.rng();
        (0..self.num_examples)
            .filter(|_| coin.sample(rng))
            .collect()
    }
}

/// Where a [`Sampled`] batch came from: the mechanism and the batch's place in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket {
    /// The issuing mechanism (a random number drawn when it was made).
    pub(super) mechanism: u64,
    /// The batch's number: the mechanism releases batch `k` at its step `k`.
    pub(super) seq: u64,
}

/// What a mechanism shares with its loaders: its identity, the sampling rate, the numbering
/// of the batches, and the generator the loaders' samplers derive from.
#[derive(Debug)]
pub(super) struct Issuer {
    pub(super) id: u64,
    pub(super) sampling_rate: f64,
    /// The number the next sampled batch gets.
    pub(super) next: AtomicU64,
    pub(super) rng: Mutex<PrivacyRng>,
}

impl Issuer {
    fn ticket(&self) -> Ticket {
        Ticket {
            mechanism: self.id,
            seq: self.next.fetch_add(1, Ordering::SeqCst),
        }
    }
}

/// One step's batch, Poisson-sampled by a [`DpMechanism`](super::DpMechanism)'s
/// [`DpLoader`]: the only kind of batch the mechanism's step accepts, once, in the order it
/// was sampled. Not `Clone`, and only a loader makes one.
#[derive(Debug)]
pub struct Sampled<O> {
    batch: Option<O>,
    size: usize,
    pub(super) ticket: Ticket,
}

impl<O> Sampled<O> {
    /// The batched examples, `None` when no example joined (the step is then noise alone:
    /// skipping it would reveal that the batch was empty).
    pub fn batch(&self) -> Option<&O> {
        self.batch.as_ref()
    }

    /// How many examples joined (private: for the mechanism, not for logs).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether no example joined.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The batch taken out for the step.
    pub(super) fn into_batch(self) -> (Option<O>, usize, Ticket) {
        (self.batch, self.size, self.ticket)
    }
}

/// DP-SGD batches from a `burn::data` [`Dataset`] and your own [`Batcher`], made by
/// [`DpMechanism::loader`](super::DpMechanism::loader): every step, each example joins
/// independently with the mechanism's probability `q` ([`PoissonSampler`], from a generator
/// derived from the mechanism's), and the batcher turns the examples that joined into the
/// model's input. Burn's own data loaders draw fixed-size shuffled batches, for which the DP
/// accountants' guarantee does not hold.
///
/// See [`DpMechanism`](super::DpMechanism) for a training loop.
pub struct DpLoader<I, O> {
    dataset: Arc<dyn Dataset<I>>,
    batcher: Arc<dyn Batcher<I, O>>,
    sampler: PoissonSampler,
    device: Device,
    issuer: Arc<Issuer>,
}

impl<I, O> std::fmt::Debug for DpLoader<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpLoader")
            .field("sampler", &self.sampler)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl<I, O> DpLoader<I, O> {
    pub(super) fn new(
        dataset: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        device: Device,
        issuer: Arc<Issuer>,
    ) -> Result<Self, PrivacyError> {
        let rng = issuer.rng.lock().expect("the issuer's generator").derive();
        let sampler = PoissonSampler::with_rng(dataset.len(), issuer.sampling_rate, rng)?;
        Ok(Self {
            dataset,
            batcher,
            sampler,
            device,
            issuer,
        })
    }

    /// The sampler (its rate is the mechanism's).
    pub fn sampler(&self) -> &PoissonSampler {
        &self.sampler
    }

    /// Steps in one epoch: `⌈1 / q⌉`, so that every example is seen once per epoch on average.
    pub fn steps_per_epoch(&self) -> usize {
        self.sampler.steps_per_epoch()
    }

    /// Draws the next step's batch: Poisson sampling, then the user's batcher over the
    /// examples that joined (none: `batch()` is `None`, and the step is noise alone).
    ///
    /// # Errors
    /// [`PrivacyError::Dataset`] when the dataset fails to give an example it counts (the
    /// batch is then not issued: dropping the example silently would change the mechanism).
    pub fn next_batch(&mut self) -> Result<Sampled<O>, PrivacyError> {
        let indices = self.sampler.sample();
        let size = indices.len();
        let items = indices
            .into_iter()
            .map(|index| {
                self.dataset.get(index).map_err(|e| PrivacyError::Dataset {
                    index,
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<I>, _>>()?;
        let batch = (!items.is_empty()).then(|| self.batcher.batch(items, &self.device));
        Ok(Sampled {
            batch,
            size,
            ticket: self.issuer.ticket(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::PrivacyRng;

    fn ln_binom_pmf(n: usize, k: usize, q: f64) -> f64 {
        let lg = |x: f64| libm_lgamma(x);
        lg(n as f64 + 1.0) - lg(k as f64 + 1.0) - lg((n - k) as f64 + 1.0)
            + k as f64 * q.ln()
            + (n - k) as f64 * (1.0 - q).ln()
    }

    // Stirling series, good to ~1e-10 for x >= 1 (enough for a test's expected counts).
    fn libm_lgamma(x: f64) -> f64 {
        if x < 7.0 {
            let mut p = 1.0;
            let mut y = x;
            while y < 7.0 {
                p *= y;
                y += 1.0;
            }
            return libm_lgamma(y) - p.ln();
        }
        let x2 = x * x;
        (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
            - 1.0 / (360.0 * x * x2)
            + 1.0 / (1260.0 * x2 * x2 * x)
    }

    #[test]
    fn should_draw_binomial_batch_sizes() {
        let (n, q, steps) = (200, 0.05, 5_000);
        let mut s = PoissonSampler::with_rng(n, q, PrivacyRng::seeded(3)).unwrap();
        let mut counts = vec![0usize; n + 1];
        for _ in 0..steps {
            counts[s.sample().len()] += 1;
        }
        // Chi-square over bins with expected count >= 5, the tails pooled.
        let expected: Vec<f64> = (0..=n)
            .map(|k| steps as f64 * ln_binom_pmf(n, k, q).exp())
            .collect();
        let (mut chi2, mut dof, mut pool_e, mut pool_o) = (0.0, 0usize, 0.0, 0.0);
        for k in 0..=n {
            pool_e += expected[k];
            pool_o += counts[k] as f64;
            if pool_e >= 5.0 {
                chi2 += (pool_o - pool_e).powi(2) / pool_e;
                dof += 1;
                pool_e = 0.0;
                pool_o = 0.0;
            }
        }
        println!("chi2 {chi2} dof {dof}");
        assert!(chi2 < dof as f64 + 4.0 * (2.0 * dof as f64).sqrt());
    }
}
