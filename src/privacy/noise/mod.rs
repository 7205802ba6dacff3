//! Gaussian noise for DP-SGD from the [`PrivacyRng`]: hardened against floating-point attacks
//! by default ([`NoiseKind::Hardened`]), or textbook ([`NoiseKind::Plain`]).
//!
//! # Where the noise is drawn
//! - **Hardened, on a wgpu or CUDA device**: where the gradient lives, by a cubecl kernel
//!   (`keyed/`): a 256-bit key from the [`PrivacyRng`], fresh for every step, and each
//!   coordinate's integer drawn from ChaCha20 words of that key and of the coordinate's index,
//!   exactly from the discrete Gaussian at the integer scale `⌈s⌉` (never less noise than
//!   asked). The gradient is not read back and no noise is uploaded; one flag is (are all
//!   values finite). Burn's `fusion` on or off. The kernel has a CPU reference, bit for bit the
//!   same, which the tests run it against on wgpu.
//! - **Hardened, on any other device** (Flex): on the host's cores by the sampler below (the
//!   gradient is read back and the release written), started before the clipped sum is.
//! - **Plain**: on a wgpu or CUDA device, where the gradient lives, by a kernel of the same
//!   keyed words (Box and Muller in `f32`); elsewhere `f32` normals on the host, uploaded.
//!
//! Scales beyond `2^32 - 1` grid steps (`std/γ`; `2^20·std` at the default grid) take the
//! host's sampler on every device.
//!
//! # Why plain noise leaks
//! A floating-point sample `x + N` does not take every float value with the probability the
//! real-valued Gaussian promises: which values are reachable, and how often, depends on `x`'s
//! low-order bits, and an observer of one output can tell neighbouring inputs apart with
//! certainty (Mironov 2012, "On significance of the least significant bits for differential
//! privacy").
//!
//! # The hardened mechanism
//! With a grid `γ = 2^-k` and `s = std/γ`, every coordinate `x` of the gradient (read back as
//! `f64`, exactly) is released as `γ·(round(x/γ) + Z)` with `Z ~ N_Z(0, σ²)` the discrete
//! Gaussian (`P(z) ∝ exp(-z²/(2σ²))` on the integers) at scale `σ ≥ s`, sampled exactly in
//! integer arithmetic (`discrete/`: Karney 2016's Algorithm D with a 64-fold finer envelope, the
//! envelope's interval drawn by inverting its exact CDF, Canonne, Kamath and Steinke 2020's
//! Algorithm 1 for the acceptance): no floating-point operation touches the noise. The scale is
//! the rational `σ = ⌈s·D⌉/D` for the largest power of two `D` with `σ·D < 2^47`, so
//! `s ≤ σ < s·(1 + 2^-45)`: never less noise than asked (the one departure from the exact law:
//! `Z` is conditioned on `|Z| < 2^63`, which fails with probability below `exp(-2^31)`). The output
//! can be any point of the grid whatever `x`, and the value written into the gradient's dtype
//! is a fixed function of the integer `round(x/γ) + Z` (post-processing).
//!
//! # What the DP code must calibrate for
//! Rounding moves each coordinate by at most `γ/2`, but two neighbouring sums can be rounded in
//! opposite directions (`γ/2 - ε` to `0`, `γ/2 + ε` to `γ`): the rounded sums differ by up to
//! `γ` more per coordinate, so an L2 sensitivity `C` becomes **`C + γ·√d`** for `d`
//! coordinates ([`sensitivity_inflation`]). Noise for noise multiplier `σ_m` is then
//! `std = σ_m·(C + γ·√d)` ([`NoiseKind::calibrated_std`]), and the accountant is run with
//! `σ_m`. With `γ = 2^-20` and half a million parameters the inflation is `6.7·10⁻⁴`.
//!
//! # What carries over from the continuous Gaussian
//! For integer shifts the discrete Gaussian's Rényi divergence is at most the continuous
//! one's, `D_α(N_Z(μ, σ²) ‖ N_Z(ν, σ²)) ≤ α(μ - ν)²/(2σ²)` (CKS, Theorem 4 and its proof),
//! and Rényi divergences add over independent coordinates: one step satisfies the same
//! `(α, α·Δ²/(2σ²))`-RDP as the continuous Gaussian with `Δ/σ = σ_m⁻¹`. Under Poisson
//! sampling with rate `q`, the divergence of the step with the example from the step without
//! it, `E_P[((1 - q) + q·Q/P)^α]` at integer `α`, expands into terms `E_P[(Q/P)^j]` with
//! non-negative weights, each at most the continuous value: that direction of the sampled
//! Gaussian's RDP holds too. The other direction, and the privacy-loss-distribution ε, are not
//! proven here for the discrete Gaussian; a conservative accountant bounds them from the
//! per-step RDP alone (Zhu and Wang 2019, the general bound for Poisson-subsampled RDP).
//!
//! # Cost
//! About 47 random bits decide a coordinate, and 1.006 proposals, at the DP scale (`σ ≈ 10⁶`
//! grid steps), all in `u64` arithmetic but for a table of the envelope's law built once per
//! process (3 ms). 19 draws in 20 take their interval from a 12-bit guide with no search and are
//! decided by one 64-bit word of the stream, which they consume whole, so the core overlaps
//! consecutive draws (`discrete/`): on one core of a 2-core machine a draw costs 10 ns with its
//! ChaCha20 bits (22 ns before those two changes; the sampler it replaced, Canonne, Kamath and
//! Steinke's Algorithms 1–3, took 109 ns and 286 bits), against 6.5 ns for the plain sampler.
//! Coordinates are drawn in chunks of 16384 in parallel (rayon), each chunk from its own
//! ChaCha20 stream keyed from the [`PrivacyRng`] (so the noise does not depend on the number
//! of threads), each chunk's integers held as `i32` while they fit (half the memory, and a
//! buffer small enough for the allocator to reuse), and the grid rounding and the noise applied
//! a chunk at a time in one pass over the values in their own dtype, written over the
//! gradient's buffer read back (Flex hands over a buffer no other tensor shares; else over a
//! copy), after a check that every value is finite, in `f64` alone a block of values at a time
//! where all are below `2^51` grid steps (`grid.rs`): 7.9-8.1 ms per million coordinates on both
//! cores of a 2-core machine, against 6.9-7.2 ms for the plain sampler (1.1-1.15x), 13.2-13.4 ms
//! on one thread (`cargo bench --bench noise`, `add_noise` whole on a fresh gradient, read back
//! and written). The integers do not depend on the gradient, so a DP step
//! ([`DpMechanism`](super::DpMechanism)) starts drawing them on a thread of its own before it
//! computes the clipped sum, and only what is left when the sum is done costs it time
//! (`draw.rs`). OpenDP 0.16's sampler of the same law (arbitrary-precision
//! rationals) takes 3.6 s per million, and without its OpenSSL feature draws from
//! `rand::thread_rng`, not from a generator the caller controls.
//!
mod copies;
mod discrete;
mod draw;
mod grid;
pub(crate) mod keyed;
#[cfg(test)]
mod law;

use burn::tensor::{Device, Tensor, TensorData};
use rand_distr::{Distribution, StandardNormal};

use super::{PrivacyError, PrivacyRng};
use crate::transform::grad::ParamGrads;
use crate::tree::Leaf;
use discrete::DiscreteGaussian;
use draw::Draw;

/// How [`add_noise`] draws its Gaussian noise.
///
/// ```
/// use burn_vmap::privacy::NoiseKind;
/// assert_eq!(NoiseKind::default(), NoiseKind::Hardened { granularity: NoiseKind::DEFAULT_GRANULARITY });
/// assert_eq!(NoiseKind::DEFAULT_GRANULARITY, 2f64.powi(-20));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoiseKind {
    /// The discrete Gaussian on the grid `granularity·ℤ`, exact (the [module](self)'s
    /// construction): immune to floating-point attacks, at the price of the sensitivity
    /// inflation `granularity·√d` ([`sensitivity_inflation`]) and of a slower sampler.
    Hardened {
        /// The grid `γ`: a power of two in `[2^-64, 2^32]`, at most `std`. Smaller grids
        /// inflate the sensitivity less; `std/γ` must stay below `1.4·10¹⁴` (`2^47`).
        granularity: f64,
    },
    /// Textbook `f32` Gaussians scaled by `std` and added on the device (drawn on the host by
    /// a ziggurat, or on wgpu and CUDA by a kernel): fast, and open to Mironov's attack on the
    /// least significant bits.
    Plain,
}

impl NoiseKind {
    /// The default grid, `2^-20`: released values of magnitude below 16 are exact in `f32`,
    /// the sensitivity inflation is `9.6·10⁻⁷·√d` (`6.7·10⁻⁴` for `d = 5·10⁵`, `0.03` for
    /// `d = 10⁹`: choose a finer grid for large models), and any `std` up to `2^27` is accepted.
    pub const DEFAULT_GRANULARITY: f64 = 1.0 / (1u64 << 20) as f64;

    /// The scale at which [`add_noise`] draws the noise for `std` on `device`, in the
    /// gradient's units: never below `std`. `std` for [`Plain`](Self::Plain); for
    /// [`Hardened`](Self::Hardened) the discrete Gaussian's `σ` (`P(z) ∝ exp(-z²/(2σ²))` on the
    /// grid `γ`): `γ·⌈std/γ⌉` where the keyed kernel draws it (a wgpu or CUDA device, up to
    /// `2^32 - 1` grid steps), else `γ·⌈s·D⌉/D` for `s = std/γ` and a power of two `D`
    /// (`s ≤ σ/γ < s·(1 + 2^-45)`). The accountant needs no change: more noise is as private.
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_vmap::privacy::NoiseKind;
    /// let kind = NoiseKind::Hardened { granularity: 1.0 };
    /// let drawn = kind.drawn_std(1.5, &Device::default())?;
    /// assert!((1.5..=2.0).contains(&drawn)); // 2 on wgpu and CUDA, 1.5 on the host
    /// assert_eq!(NoiseKind::Plain.drawn_std(1.5, &Device::default())?, 1.5);
    /// # Ok::<(), burn_vmap::privacy::PrivacyError>(())
    /// ```
    ///
    /// # Errors
    /// As [`add_noise`] for `std` and the granularity.
    pub fn drawn_std(self, std: f64, device: &Device) -> Result<f64, PrivacyError> {
        if !(std.is_finite() && std >= 0.0) {
            return Err(argument("std", "a finite standard deviation >= 0", std));
        }
        let NoiseKind::Hardened { granularity } = self else {
            return Ok(std);
        };
        grid_exponent(granularity)?;
        let gaussian = discrete_gaussian(std, granularity)?;
        Ok(match (keyed::scale(std, granularity, device), gaussian) {
            (Some(scale), _) => f64::from(scale) * granularity,
            (None, Some(gaussian)) => gaussian.sigma() * granularity,
            (None, None) => 0.0,
        })
    }

    /// The standard deviation to ask [`add_noise`] for, so that the noise has noise multiplier
    /// `noise_multiplier` relative to the sensitivity of a sum of `dims` coordinates whose L2
    /// sensitivity is `clip_norm`: `σ_m·C` for [`Plain`](Self::Plain), `σ_m·(C + γ·√d)` for
    /// [`Hardened`](Self::Hardened) (rounded up). The accountant is run with
    /// `noise_multiplier`.
    ///
    /// ```
    /// use burn_vmap::privacy::NoiseKind;
    /// let plain = NoiseKind::Plain.calibrated_std(1.1, 1.0, 1 << 20)?;
    /// let hardened = NoiseKind::Hardened { granularity: 2f64.powi(-20) }.calibrated_std(1.1, 1.0, 1 << 20)?;
    /// assert_eq!(plain, 1.1);
    /// assert!(hardened >= 1.1 * (1.0 + 2f64.powi(-10))); // C + γ·√d = 1 + 2^-10
    /// # Ok::<(), burn_vmap::privacy::PrivacyError>(())
    /// ```
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] for a negative or non-finite `noise_multiplier`, a
    /// `clip_norm` that is not finite and positive, or a bad granularity.
    pub fn calibrated_std(
        self,
        noise_multiplier: f64,
        clip_norm: f64,
        dims: usize,
    ) -> Result<f64, PrivacyError> {
        if !(noise_multiplier.is_finite() && noise_multiplier >= 0.0) {
            return Err(argument(
                "noise_multiplier",
                "a finite σ >= 0",
                noise_multiplier,
            ));
        }
        if !(clip_norm.is_finite() && clip_norm > 0.0) {
            return Err(argument("clip_norm", "a finite norm > 0", clip_norm));
        }
        if noise_multiplier == 0.0 {
            // No noise (not private): not the smallest subnormal that rounding up would give.
            return Ok(0.0);
        }
        let sensitivity = match self {
            NoiseKind::Plain => return Ok(noise_multiplier * clip_norm),
            NoiseKind::Hardened { granularity } => {
                (clip_norm + sensitivity_inflation(dims, granularity)?).next_up()
            }
        };
        Ok((noise_multiplier * sensitivity).next_up())
    }
}

impl NoiseKind {
    /// The accountant whose ε holds for this noise (the one [`DpMechanism`](super::DpMechanism)
    /// reports): the Poisson-subsampled discrete Gaussian's Rényi DP for
    /// [`Hardened`](Self::Hardened), the continuous Gaussian's privacy loss distribution for
    /// [`Plain`](Self::Plain). Calibrate σ with it
    /// ([`calibrate_noise_multiplier`](super::accounting::calibrate_noise_multiplier)).
    ///
    /// ```
    /// use burn_vmap::privacy::NoiseKind;
    /// use burn_vmap::privacy::accounting::{calibrate_noise_multiplier, AccountantKind};
    /// let kind = NoiseKind::default().accountant();
    /// assert_eq!(kind, AccountantKind::RdpDiscreteGaussian);
    /// let sigma = calibrate_noise_multiplier(2.0, 1e-5, 0.01, 1000, kind, 1e-3)?;
    /// assert!(sigma > 0.5 && sigma < 2.0, "{sigma}");
    /// # Ok::<(), burn_vmap::privacy::accounting::AccountingError>(())
    /// ```
    pub fn accountant(self) -> super::accounting::AccountantKind {
        use super::accounting::AccountantKind;
        match self {
            NoiseKind::Hardened { .. } => AccountantKind::RdpDiscreteGaussian,
            NoiseKind::Plain => AccountantKind::Pld,
        }
    }
}

impl Default for NoiseKind {
    /// [`NoiseKind::Hardened`] on the grid [`NoiseKind::DEFAULT_GRANULARITY`].
    fn default() -> Self {
        NoiseKind::Hardened {
            granularity: Self::DEFAULT_GRANULARITY,
        }
    }
}

/// How much rounding to the grid `granularity` can add to the L2 sensitivity of a sum of
/// `dims` coordinates: `granularity·√dims`, rounded up. Add it to the clipping norm `C` before
/// calibrating [`NoiseKind::Hardened`] noise (see [`NoiseKind::calibrated_std`]).
///
/// Each coordinate is rounded to the nearest grid point, off by at most `γ/2`; two neighbouring
/// sums may be rounded in opposite directions, so their rounded difference exceeds the true one
/// by up to `γ` per coordinate, `γ·√d` in L2 (not `γ·√d/2`).
///
/// ```
/// use burn_vmap::privacy::sensitivity_inflation;
/// let grid = 2f64.powi(-20);
/// assert!(sensitivity_inflation(1 << 20, grid)? >= 2f64.powi(-10));
/// assert!(sensitivity_inflation(500_000, grid)? < 6.8e-4);
/// # Ok::<(), burn_vmap::privacy::PrivacyError>(())
/// ```
///
/// # Errors
/// [`PrivacyError::Argument`] when `granularity` is not a power of two in `[2^-64, 2^32]`.
pub fn sensitivity_inflation(dims: usize, granularity: f64) -> Result<f64, PrivacyError> {
    grid_exponent(granularity)?;
    if dims == 0 {
        return Ok(0.0);
    }
    // √d rounded up (the square root is rounded to nearest); the power of two scales exactly.
    Ok(granularity * (dims as f64).sqrt().next_up())
}

/// Adds independent Gaussian noise of standard deviation `std` to every coordinate of every
/// gradient in `grads`, drawn from `rng` on the host (never from Burn's tensor RNG, which is
/// process-global and seedable), as `kind` says: the discrete Gaussian on a grid
/// ([`NoiseKind::Hardened`], the default; see the [module](self)) or textbook `f32` Gaussians
/// ([`NoiseKind::Plain`], what [`add_gaussian_noise`] draws).
///
/// For DP-SGD the noise goes on the SUM of the clipped per-example gradients; `std` comes from
/// [`NoiseKind::calibrated_std`], which adds the grid's [`sensitivity_inflation`] to `C`.
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::per_example_grads;
/// use burn_vmap::privacy::{add_noise, NoiseKind, PrivacyRng};
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let xs = Tensor::<2>::ones([4, 3], &device);
/// let sum = per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
///     .unwrap()
///     .sum_batch();
/// let kind = NoiseKind::default();
/// let std = kind.calibrated_std(1.1, 1.0, 8)?; // σ = 1.1, C = 1, 3·2 + 2 coordinates
/// let noisy = add_noise(sum, std, kind, &mut PrivacyRng::seeded(1))?;
/// let w: Tensor<2> = noisy.get("weight").unwrap();
/// // Every released value lies on the grid 2^-20.
/// for v in w.into_data().try_to_vec::<f32>().unwrap() {
///     assert_eq!((v as f64 * 2f64.powi(20)).fract(), 0.0);
/// }
/// # Ok::<(), burn_vmap::privacy::PrivacyError>(())
/// ```
///
/// # Errors
/// [`PrivacyError::Argument`] for a negative or non-finite `std`; for
/// [`NoiseKind::Hardened`], also for a granularity that is not a power of two in
/// `[2^-64, 2^32]`, a positive `std` below the granularity or above `2^47` times it, and a
/// gradient value that is not finite (it cannot be rounded to the grid).
pub fn add_noise(
    grads: ParamGrads,
    std: f64,
    kind: NoiseKind,
    rng: &mut PrivacyRng,
) -> Result<ParamGrads, PrivacyError> {
    let dims = grads.iter().map(|(_, _, g)| g.shape().num_elements()).sum();
    let device = match grads.iter().next() {
        Some((_, _, g)) => g.device(),
        None => Device::default(),
    };
    PendingNoise::start(dims, std, kind, rng, false, &device)?.add(grads, rng)
}

/// Noise for `dims` coordinates whose random part is drawn before the gradient it goes on
/// exists: a DP step starts it, computes its clipped sum meanwhile, then [`add`](Self::add)s
/// it. Hardened noise draws its integers `Z` from the generator's keys taken at the start (on
/// a thread of its own with `background`; see `draw.rs`); plain noise is drawn when added. The
/// same generator gives the same noise either way.
pub(crate) struct PendingNoise {
    std: f64,
    hardened: Option<Hardened>,
}

/// Hardened noise started.
enum Hardened {
    /// On the host: its integers, being drawn, and the grid's exponent `k` (`γ = 2^k`).
    Host(Draw, i32),
    /// Where the gradient lives (a wgpu or CUDA device): the key and the integer scale of the
    /// keyed sampler, which draws each coordinate's integer from the key and its index when the
    /// gradient is there (`keyed/`).
    Keyed(keyed::Keyed, usize),
}

impl PendingNoise {
    /// Starts the noise of `kind` and standard deviation `std` (from
    /// [`NoiseKind::calibrated_std`]) for `dims` coordinates of a gradient that will live on
    /// `device`: hardened noise for a wgpu or CUDA device is the keyed sampler's, drawn there
    /// when the gradient is added (for a scale of at most `2^32 - 1` grid steps; the host's
    /// sampler beyond); for any other device its integers are drawn on the host from now on.
    ///
    /// # Errors
    /// As [`add_noise`] for `std` and the granularity.
    pub(crate) fn start(
        dims: usize,
        std: f64,
        kind: NoiseKind,
        rng: &mut PrivacyRng,
        background: bool,
        device: &Device,
    ) -> Result<Self, PrivacyError> {
        if !(std.is_finite() && std >= 0.0) {
            return Err(argument("std", "a finite standard deviation >= 0", std));
        }
        let hardened = match kind {
            NoiseKind::Plain => None,
            NoiseKind::Hardened { granularity } => {
                let k = grid_exponent(granularity)?;
                let gaussian = discrete_gaussian(std, granularity)?;
                Some(match keyed::scale(std, granularity, device) {
                    Some(scale) => {
                        let noise = keyed::Keyed {
                            key: keyed::Key::draw(rng),
                            first: 0,
                            scale,
                            exponent: k,
                        };
                        Hardened::Keyed(noise, dims)
                    }
                    None => Hardened::Host(Draw::start(dims, gaussian, rng, background), k),
                })
            }
        };
        Ok(Self { std, hardened })
    }

    /// `grads` (as many coordinates as started, in order) with the noise added; plain noise is
    /// drawn now from `rng`.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] for hardened noise on a gradient value that is not finite or
    /// on another number of coordinates than started.
    pub(crate) fn add(
        self,
        grads: ParamGrads,
        rng: &mut PrivacyRng,
    ) -> Result<ParamGrads, PrivacyError> {
        match self.hardened {
            None => Ok(plain(grads, self.std, rng)),
            Some(started) => {
                let count: usize = grads.iter().map(|(_, _, g)| g.shape().num_elements()).sum();
                let dims = match &started {
                    Hardened::Host(draw, _) => draw.dims(),
                    Hardened::Keyed(_, dims) => *dims,
                };
                if count != dims {
                    return Err(PrivacyError::Argument {
                        argument: "grads",
                        expected: "as many coordinates as the noise was drawn for",
                        got: format!("{count} coordinates, noise for {dims}"),
                    });
                }
                match started {
                    Hardened::Host(draw, k) => grid::hardened(grads, draw, k),
                    Hardened::Keyed(noise, _) => keyed::add_to(grads, noise),
                }
            }
        }
    }
}

/// Adds independent Gaussian noise `N(0, std²)` to every coordinate of every gradient in
/// `grads`: textbook `f32` Gaussians from `rng`, as
/// [`add_noise`]`(grads, std, `[`NoiseKind::Plain`]`, rng)` (the same draws).
///
/// For DP-SGD the noise goes on the SUM of the clipped per-example gradients, whose sensitivity
/// to one example is the clipping norm `C`: `std = σ · C` ([`DpSgd`](super::DpSgd) does this).
/// Plain noise is open to floating-point attacks; [`add_noise`] with [`NoiseKind::Hardened`]
/// is not.
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::per_example_grads;
/// use burn_vmap::privacy::{add_gaussian_noise, PrivacyRng};
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let xs = Tensor::<2>::ones([4, 3], &device);
/// let grads = per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
///     .unwrap()
///     .sum_batch();
/// let noisy = add_gaussian_noise(grads.clone(), 0.5, &mut PrivacyRng::seeded(1)).unwrap();
/// let (a, b): (Tensor<2>, Tensor<2>) = (grads.get("weight").unwrap(), noisy.get("weight").unwrap());
/// assert_ne!(a.into_data(), b.into_data());
/// ```
///
/// # Errors
/// [`PrivacyError::Argument`] for a negative or non-finite `std`.
pub fn add_gaussian_noise(
    grads: ParamGrads,
    std: f64,
    rng: &mut PrivacyRng,
) -> Result<ParamGrads, PrivacyError> {
    add_noise(grads, std, NoiseKind::Plain, rng)
}

fn argument(argument: &'static str, expected: &'static str, got: f64) -> PrivacyError {
    PrivacyError::Argument {
        argument,
        expected,
        got: got.to_string(),
    }
}

/// `k` for a granularity `2^k`, `-64 ≤ k ≤ 32`.
fn grid_exponent(granularity: f64) -> Result<i32, PrivacyError> {
    let bits = granularity.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let power_of_two = granularity.is_normal() && granularity > 0.0 && bits << 12 == 0;
    if power_of_two && (-64..=32).contains(&exponent) {
        Ok(exponent)
    } else {
        Err(argument(
            "granularity",
            "a power of two in [2^-64, 2^32]",
            granularity,
        ))
    }
}

/// A value of the gradient was not finite: hardened noise has no grid point to round it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NotFinite;

/// The error for a gradient at `path` that holds a value that is not finite. It names the
/// parameter only: in a DP step the value and its place would be a release of the data that
/// no noise covers.
fn not_finite(path: &str) -> PrivacyError {
    PrivacyError::Argument {
        argument: "grads",
        expected: "finite gradient values (hardened noise rounds them to its grid)",
        got: format!("a value that is not finite (NaN or ±inf) in {path}"),
    }
}

/// `x` flattened to rank 1.
fn flat(leaf: Leaf) -> Tensor<1> {
    let n = leaf.shape().num_elements();
    leaf.reshape([n].into())
        .into_tensor()
        .expect("a float gradient")
}

/// Textbook noise of `std` on every coordinate: on a wgpu or CUDA device drawn there by the
/// keyed normal kernel, elsewhere `f32` normals drawn on the host and uploaded.
fn plain(grads: ParamGrads, std: f64, rng: &mut PrivacyRng) -> ParamGrads {
    // In f32, rounded up: never less noise than calibrated.
    let std = match std as f32 {
        s if f64::from(s) < std => s.next_up(),
        s => s,
    };
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    let (mut key, mut offset) = (None, 0u64);
    grads.map(|_, g| {
        let shape = g.shape();
        // On a wgpu or CUDA device, drawn there by the keyed kernel (one key for the call).
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        {
            let first = offset;
            offset += shape.num_elements() as u64;
            if keyed::on_device(&g.device()) {
                let key = *key.get_or_insert_with(|| keyed::Key::draw(rng));
                let noise = keyed::KeyedNormal { key, first, std };
                return Leaf::new(keyed::normal(flat(g), noise)).reshape(shape);
            }
        }
        // Standard normals (ziggurat) scaled: f32, as the gradients are.
        let values: Vec<f32> = (0..shape.num_elements())
            .map(|_| {
                let z: f32 = StandardNormal.sample(rng.rng());
                z * std
            })
            .collect();
        let data = TensorData::new(values, [shape.num_elements()]).convert_dtype(g.dtype());
        let noise = copies::to_device(data, &g.device(), g.dtype());
        Leaf::new(flat(g) + noise).reshape(shape)
    })
}

/// The discrete Gaussian of standard deviation `std` on the grid `granularity` (`None` for
/// `std = 0`: no noise).
fn discrete_gaussian(std: f64, granularity: f64) -> Result<Option<DiscreteGaussian>, PrivacyError> {
    if std == 0.0 {
        return Ok(None);
    }
    // s = std/γ, exact (a power-of-two scaling of a value >= γ).
    DiscreteGaussian::new(std / granularity)
        .map(Some)
        .ok_or_else(|| argument("std", "0, or between granularity and 2^47·granularity", std))
}
