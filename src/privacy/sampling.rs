//! Poisson sampling, and a loader that draws DP-SGD batches from a `burn::data` dataset with the
//! user's own batcher.

use std::sync::Arc;

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
#[derive(Clone, Debug)]
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

/// One step's Poisson batch from a [`PoissonLoader`].
#[derive(Debug, Clone)]
pub struct PoissonBatch<O> {
    /// The batched examples, `None` when no example joined this step (DP-SGD still takes a
    /// noise-only step then: skipping it would reveal that the batch was empty).
    pub batch: Option<O>,
    /// How many examples joined.
    pub size: usize,
    /// `q · N`.
    pub expected_size: f64,
}

/// DP-SGD batches from a `burn::data` [`Dataset`] and your own [`Batcher`]: every step, each
/// example joins independently with probability `q` ([`PoissonSampler`]), and the batcher turns
/// the examples that joined into the model's input. Burn's own data loaders draw fixed-size
/// shuffled batches, for which the DP accountants' guarantee does not hold.
///
/// ```
/// use std::sync::Arc;
/// use burn::data::dataloader::batcher::Batcher;
/// use burn::data::dataset::InMemDataset;
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::privacy::{PoissonLoader, PrivacyRng};
///
/// #[derive(Clone)]
/// struct Rows;
/// impl Batcher<[f32; 2], Tensor<2>> for Rows {
///     fn batch(&self, items: Vec<[f32; 2]>, device: &Device) -> Tensor<2> {
///         let rows: Vec<Tensor<2>> =
///             items.iter().map(|r| Tensor::<1>::from_floats(*r, device).unsqueeze()).collect();
///         Tensor::cat(rows, 0)
///     }
/// }
///
/// let data = InMemDataset::new((0..100).map(|i| [i as f32, 1.0]).collect());
/// let mut loader = PoissonLoader::with_rng(
///     Arc::new(data), Arc::new(Rows), 0.1, Device::default(), PrivacyRng::seeded(3),
/// ).unwrap();
/// let step = loader.next_batch();
/// assert_eq!(step.expected_size, 10.0);
/// assert_eq!(step.batch.map_or(0, |b| b.dims()[0]), step.size);
/// ```
pub struct PoissonLoader<I, O> {
    dataset: Arc<dyn Dataset<I>>,
    batcher: Arc<dyn Batcher<I, O>>,
    sampler: PoissonSampler,
    device: Device,
}

impl<I, O> PoissonLoader<I, O> {
    /// A loader over `dataset` at `sampling_rate`, sampling from the operating system's entropy.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] for a rate outside `[0, 1]`.
    pub fn new(
        dataset: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        sampling_rate: f64,
        device: Device,
    ) -> Result<Self, PrivacyError> {
        Self::with_rng(
            dataset,
            batcher,
            sampling_rate,
            device,
            PrivacyRng::from_entropy(),
        )
    }

    /// As [`new`](Self::new) with a given generator (seeded: reproducible and not private).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_rng(
        dataset: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        sampling_rate: f64,
        device: Device,
        rng: PrivacyRng,
    ) -> Result<Self, PrivacyError> {
        let sampler = PoissonSampler::with_rng(dataset.len(), sampling_rate, rng)?;
        Ok(Self {
            dataset,
            batcher,
            sampler,
            device,
        })
    }

    /// The sampler (rate, dataset size, expected batch size, steps per epoch).
    pub fn sampler(&self) -> &PoissonSampler {
        &self.sampler
    }

    /// Draws one step's batch.
    pub fn next_batch(&mut self) -> PoissonBatch<O> {
        let indices = self.sampler.sample();
        let size = indices.len();
        let items: Vec<I> = indices
            .into_iter()
            .filter_map(|i| self.dataset.get(i).ok())
            .collect();
        let batch = (!items.is_empty()).then(|| self.batcher.batch(items, &self.device));
        PoissonBatch {
            batch,
            size,
            expected_size: self.sampler.expected_batch_size(),
        }
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
