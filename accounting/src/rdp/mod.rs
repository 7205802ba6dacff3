//! The Rényi-DP accountant of the Poisson-subsampled Gaussian mechanism.
//!
//! RDP composes additively: after `T` steps with per-step RDP `r(α)` the total is `T·r(α)`,
//! and steps with different `(q, σ)` simply add their curves. The per-step curve is exact
//! (see [`poisson_gaussian_rdp`]); the conversion to (ε, δ) is [`rdp_to_epsilon`].
//!
//! For the *discrete* Gaussian ([`NoiseDistribution::DiscreteGaussian`]) the per-step curve is
//! an upper bound, Zhu & Wang's general bound for Poisson subsampling
//! ([`poisson_subsampled_rdp_bound`], module `subsampled`), at integer orders.

mod conversion;
pub(crate) mod log_a;
mod quad;
mod subsampled;

pub use conversion::{rdp_to_delta, rdp_to_epsilon, DeltaAt, EpsilonAt};
pub use subsampled::{
    poisson_discrete_gaussian_rdp, poisson_subsampled_rdp_bound, MAX_SUBSAMPLED_ORDER,
};

use std::sync::Arc;

use crate::error::{AccountingError, Result};
use crate::event::{check_count, Accountant, PoissonGaussian};
use crate::statement::{AccountantDescription, PrivacyStatement, StepGroup};

/// The default Rényi orders: dp-accounting's `DEFAULT_RDP_ORDERS` (1.1, 1.2, …, 10.9, 11, …, 63,
/// 128, 256, 512, 1024) plus 1.01…1.09 (large-ε regime), a denser set of large orders
/// (64…4096, which matter when ε is small: large σ, few steps). 210 orders; our ε is never
/// larger than dp-accounting's on the same mechanism.
///
/// ```
/// let orders = burn_vmap_accounting::default_orders();
/// assert_eq!(orders.len(), 210);
/// assert_eq!((orders[0], *orders.last().unwrap()), (1.01, 4096.0));
/// ```
pub fn default_orders() -> Vec<f64> {
    let mut orders: Vec<f64> = (1..10).map(|k| 1.0 + k as f64 / 100.0).collect();
    // Same arithmetic as dp-accounting (`1 + x / 10.0`), so the shared orders are bit-identical.
    orders.extend((1..100).map(|x| 1.0 + x as f64 / 10.0));
    orders.extend((11..=63).map(f64::from));
    for (start, end, step) in [
        (64, 128, 8),
        (144, 256, 16),
        (288, 512, 32),
        (576, 1024, 64),
        (1152, 2048, 128),
        (2304, 4096, 256),
    ] {
        orders.extend((start..=end).step_by(step).map(f64::from));
    }
    orders
}

pub(crate) fn check_order(alpha: f64) -> Result<f64> {
    if alpha > 1.0 {
        Ok(alpha)
    } else {
        Err(AccountingError::InvalidArgument {
            name: "orders",
            expected: "Rényi orders > 1 (+inf allowed)",
            actual: alpha,
        })
    }
}

/// The RDP of **one** Poisson-subsampled Gaussian step at each of `orders`, exact
/// (Mironov, Talwar & Zhang 2019, arXiv 1908.10530):
///
/// * `q = 0` → 0; `σ = 0` or `α = ∞` → ∞; `q = 1` → `α/(2σ²)`;
/// * otherwise `ln(A_α)/(α−1)` with `A_α = E_{z∼N(0,σ²)}[((1−q) + q·e^{(2z−1)/(2σ²)})^α]`:
///   for integer α the finite binomial sum, for fractional α the two-series formula with signed
///   terms and a rigorous (upward-rounded) remainder bound, or numerical integration where the
///   series would cancel. Relative accuracy ~1e-12; never below the exact value beyond roundoff.
///
/// ```
/// use burn_vmap_accounting::{poisson_gaussian_rdp, PoissonGaussian};
///
/// let step = PoissonGaussian::new(0.01, 1.1)?;
/// let rdp = poisson_gaussian_rdp(step, &[1.1, 2.0])?;
/// // mpmath (40 digits): 6.95885155937026e-5. dp-accounting 0.6.0 reports 7.3633e-5 at
/// // α = 1.1: it adds the negative terms of the fractional series instead of subtracting them.
/// assert!((rdp[0] / 6.95885155937026e-5 - 1.0).abs() < 1e-10);
/// assert!((rdp[1] / 1.2851008160516542e-4 - 1.0).abs() < 1e-9);
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
pub fn poisson_gaussian_rdp(event: PoissonGaussian, orders: &[f64]) -> Result<Vec<f64>> {
    event.validate()?;
    orders
        .iter()
        .map(|&a| check_order(a))
        .collect::<Result<Vec<_>>>()?;
    Ok(orders
        .iter()
        .map(|&a| log_a::rdp_single(event.sampling_rate, event.noise_multiplier, a))
        .collect())
}

/// The noise added to the sum of clipped gradients, which decides an [`RdpAccountant`]'s
/// per-step RDP curve.
///
/// ```
/// use burn_vmap_accounting::{NoiseDistribution, RdpAccountant};
///
/// assert_eq!(RdpAccountant::new().noise_distribution(), NoiseDistribution::Gaussian);
/// let discrete = RdpAccountant::discrete_gaussian();
/// assert_eq!(discrete.noise_distribution(), NoiseDistribution::DiscreteGaussian);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NoiseDistribution {
    /// The Gaussian `N(0, (σC)²)`: exact RDP, [`poisson_gaussian_rdp`].
    #[default]
    Gaussian,
    /// The discrete Gaussian `N_ℤ(0, σ²)` on the integer lattice (Canonne, Kamath & Steinke
    /// 2020), σ relative to the L2 sensitivity: Zhu & Wang's upper bound,
    /// [`poisson_discrete_gaussian_rdp`].
    DiscreteGaussian,
}

/// How many distinct events' per-step curves to keep (a training loop calls
/// [`RdpAccountant::compose`] once per step, usually with one or two distinct events).
const CACHE_SIZE: usize = 8;

/// Rényi-DP accountant for DP-SGD (Poisson-subsampled Gaussian steps, add/remove-one
/// neighbouring).
///
/// [`new`](Self::new) and [`with_orders`](Self::with_orders) account for Gaussian noise (exact
/// RDP); [`discrete_gaussian`](Self::discrete_gaussian) for discrete Gaussian noise (Zhu &
/// Wang's upper bound). The conversion to (ε, δ) ([`rdp_to_epsilon`]) holds for any mechanism.
///
/// Composing costs one addition per order once an event's per-step curve is known (the last
/// few distinct events' curves are cached), so calling [`compose`](Self::compose) once per
/// training step is cheap.
///
/// ```
/// use burn_vmap_accounting::{PoissonGaussian, RdpAccountant};
///
/// // Abadi et al. 2016 (MNIST): q = 0.01, σ = 4, 100 epochs = 10 000 steps, δ = 1e-5.
/// let mut acc = RdpAccountant::new();
/// acc.compose(PoissonGaussian::new(0.01, 4.0)?, 10_000)?;
/// let at = acc.epsilon_and_order(1e-5)?;
/// assert!((at.epsilon - 1.0355).abs() < 1e-3, "{}", at.epsilon);
/// assert_eq!(at.order, Some(17.0));
/// # Ok::<(), burn_vmap_accounting::AccountingError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RdpAccountant {
    orders: Vec<f64>,
    rdp: Vec<f64>,
    steps: u64,
    history: Vec<StepGroup>,
    cache: Vec<(PoissonGaussian, Arc<[f64]>)>,
    noise: NoiseDistribution,
}

impl Default for RdpAccountant {
    fn default() -> Self {
        Self::new()
    }
}

impl RdpAccountant {
    /// An empty accountant on [`default_orders`].
    pub fn new() -> Self {
        Self::from_checked_orders(default_orders(), NoiseDistribution::Gaussian)
    }

    /// An empty accountant for the Poisson-subsampled **discrete** Gaussian
    /// ([`NoiseDistribution::DiscreteGaussian`]) on the integer orders of [`default_orders`]
    /// (2, 3, …, 63 and 64…4096: 111 orders), where its bound is proven. Events are
    /// [`PoissonGaussian`]s as for the Gaussian: σ is the discrete Gaussian's scale over the L2
    /// sensitivity of the (scaled, rounded, clipped) sum.
    ///
    /// ```
    /// use burn_vmap_accounting::{PoissonGaussian, RdpAccountant};
    ///
    /// let step = PoissonGaussian::new(0.01, 1.1)?;
    /// let (mut discrete, mut gaussian) = (RdpAccountant::discrete_gaussian(), RdpAccountant::new());
    /// discrete.compose(step, 10_000)?;
    /// gaussian.compose(step, 10_000)?;
    /// let (eps_d, eps_g) = (discrete.epsilon(1e-5)?, gaussian.epsilon(1e-5)?);
    /// assert_eq!(discrete.orders().len(), 111);
    /// assert!(eps_d >= eps_g && eps_d < 1.1 * eps_g, "{eps_d} vs {eps_g}");
    /// assert!(discrete.statement(1e-5)?.to_string().contains("discrete Gaussian"));
    /// # Ok::<(), burn_vmap_accounting::AccountingError>(())
    /// ```
    pub fn discrete_gaussian() -> Self {
        let orders = default_orders()
            .into_iter()
            .filter(|a| a.fract() == 0.0)
            .collect();
        Self::from_checked_orders(orders, NoiseDistribution::DiscreteGaussian)
    }

    /// An empty discrete-Gaussian accountant (see [`discrete_gaussian`](Self::discrete_gaussian))
    /// on custom orders (each `> 1`; `+∞` allowed; at least one). A fractional order gets the
    /// bound of the next integer (see [`poisson_discrete_gaussian_rdp`]), so integer orders are
    /// the useful ones.
    ///
    /// ```
    /// use burn_vmap_accounting::RdpAccountant;
    ///
    /// assert!(RdpAccountant::discrete_gaussian_with_orders(vec![2.0, 8.0, 32.0]).is_ok());
    /// assert!(RdpAccountant::discrete_gaussian_with_orders(vec![1.0]).is_err());
    /// ```
    pub fn discrete_gaussian_with_orders(orders: impl Into<Vec<f64>>) -> Result<Self> {
        let mut acc = Self::with_orders(orders)?;
        acc.noise = NoiseDistribution::DiscreteGaussian;
        Ok(acc)
    }

    /// An empty accountant on custom orders (each `> 1`; `+∞` allowed; at least one).
    ///
    /// ```
    /// use burn_vmap_accounting::RdpAccountant;
    ///
    /// assert!(RdpAccountant::with_orders(vec![1.5, 2.0, 32.0]).is_ok());
    /// assert!(RdpAccountant::with_orders(Vec::new()).is_err());
    /// assert!(RdpAccountant::with_orders(vec![0.5]).is_err());
    /// ```
    pub fn with_orders(orders: impl Into<Vec<f64>>) -> Result<Self> {
        let orders = orders.into();
        if orders.is_empty() {
            return Err(AccountingError::EmptyOrders);
        }
        for &a in &orders {
            check_order(a)?;
        }
        Ok(Self::from_checked_orders(
            orders,
            NoiseDistribution::Gaussian,
        ))
    }

    fn from_checked_orders(orders: Vec<f64>, noise: NoiseDistribution) -> Self {
        let n = orders.len();
        Self {
            orders,
            rdp: vec![0.0; n],
            steps: 0,
            history: Vec::new(),
            cache: Vec::new(),
            noise,
        }
    }

    /// The noise whose RDP this accountant composes.
    pub fn noise_distribution(&self) -> NoiseDistribution {
        self.noise
    }

    /// The Rényi orders.
    pub fn orders(&self) -> &[f64] {
        &self.orders
    }

    /// The accumulated RDP at each order (same indexing as [`orders`](Self::orders)).
    pub fn rdp(&self) -> &[f64] {
        &self.rdp
    }

    /// Total number of steps composed.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Records `count ≥ 1` steps of `event`.
    pub fn compose(&mut self, event: PoissonGaussian, count: u64) -> Result<()> {
        event.validate()?;
        let count = check_count(count)?;
        if !event.is_trivial() {
            let curve = self.curve(event);
            let c = count as f64;
            for (total, &r) in self.rdp.iter_mut().zip(curve.iter()) {
                *total += c * r;
            }
        }
        self.steps = self.steps.saturating_add(count);
        crate::event::push_group(&mut self.history, event, count);
        Ok(())
    }

    fn curve(&mut self, event: PoissonGaussian) -> Arc<[f64]> {
        if let Some(pos) = self.cache.iter().position(|(e, _)| *e == event) {
            let hit = self.cache.remove(pos);
            self.cache.push(hit.clone());
            return hit.1;
        }
        let single = match self.noise {
            NoiseDistribution::Gaussian => log_a::rdp_single,
            NoiseDistribution::DiscreteGaussian => subsampled::discrete_rdp_single,
        };
        let curve: Arc<[f64]> = self
            .orders
            .iter()
            .map(|&a| single(event.sampling_rate, event.noise_multiplier, a))
            .collect();
        if self.cache.len() == CACHE_SIZE {
            self.cache.remove(0);
        }
        self.cache.push((event, curve.clone()));
        curve
    }

    /// The smallest ε over the orders at `δ ∈ [0, 1)`, and the order achieving it.
    pub fn epsilon_and_order(&self, delta: f64) -> Result<EpsilonAt> {
        rdp_to_epsilon(&self.orders, &self.rdp, delta)
    }

    /// The smallest ε over the orders at `δ ∈ [0, 1)`.
    pub fn epsilon(&self, delta: f64) -> Result<f64> {
        Ok(self.epsilon_and_order(delta)?.epsilon)
    }

    /// The smallest δ over the orders at `ε ≥ 0`, and the order achieving it.
    pub fn delta_and_order(&self, epsilon: f64) -> Result<DeltaAt> {
        rdp_to_delta(&self.orders, &self.rdp, epsilon)
    }

    /// The smallest δ over the orders at `ε ≥ 0`.
    pub fn delta(&self, epsilon: f64) -> Result<f64> {
        Ok(self.delta_and_order(epsilon)?.delta)
    }

    /// What was accounted, and the (ε, δ) it gives.
    pub fn statement(&self, delta: f64) -> Result<PrivacyStatement> {
        let at = self.epsilon_and_order(delta)?;
        let finite = || self.orders.iter().copied();
        let (min_order, max_order, num_orders, optimal_order) = (
            finite().fold(f64::INFINITY, f64::min),
            finite().fold(f64::NEG_INFINITY, f64::max),
            self.orders.len(),
            at.order,
        );
        let accountant = match self.noise {
            NoiseDistribution::Gaussian => AccountantDescription::Rdp {
                min_order,
                max_order,
                num_orders,
                optimal_order,
            },
            NoiseDistribution::DiscreteGaussian => AccountantDescription::RdpDiscreteGaussian {
                min_order,
                max_order,
                num_orders,
                optimal_order,
            },
        };
        Ok(PrivacyStatement {
            epsilon: at.epsilon,
            delta,
            steps: self.steps,
            groups: self.history.clone(),
            clipping_norm: None,
            accountant,
        })
    }
}

impl Accountant for RdpAccountant {
    fn compose(&mut self, event: PoissonGaussian, count: u64) -> Result<()> {
        RdpAccountant::compose(self, event, count)
    }
    fn epsilon(&self, delta: f64) -> Result<f64> {
        RdpAccountant::epsilon(self, delta)
    }
    fn delta(&self, epsilon: f64) -> Result<f64> {
        RdpAccountant::delta(self, epsilon)
    }
    fn statement(&self, delta: f64) -> Result<PrivacyStatement> {
        RdpAccountant::statement(self, delta)
    }
    fn steps(&self) -> u64 {
        self.steps
    }
}
