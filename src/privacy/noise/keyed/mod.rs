//! The keyed discrete Gaussian: hardened noise in which every coordinate's integer is a
//! function of a key and of the coordinate's index alone, so it can be drawn where the gradient
//! lives: one thread a coordinate in a cubecl kernel on wgpu and CUDA (`kernel.rs`), or on the
//! host by this file, the kernel's CPU reference (the same words, the same branches, the same
//! float operations: bit for bit the kernel's output, which the tests on wgpu check).
//!
//! # The law
//! `Z ~ N_Z(0, N²)`, `P(z) ∝ exp(-z²/(2N²))` on the integers, at an **integer** scale `N`
//! (grid steps, `1 ≤ N < 2^32`: [`super::NoiseKind::Hardened`]'s `s = std/γ` rounded up,
//! never less noise than asked), drawn exactly by Karney (2016, "Sampling exactly from the
//! normal distribution", Algorithm D) with μ = 0 and σ = N:
//! 1. `k ≥ 0` with probability `∝ exp(-k²/2)` (Karney's steps N1-N2: `k` counts successes of
//!    `Bernoulli(exp(-1/2))` until the first failure, and is kept when `k(k-1)` more succeed);
//! 2. a sign `±` from one bit, `j` uniform in `[0, N)`; `z = ±(kN + j)`, dropped (back to 1)
//!    for `-0`, so that 0 is drawn from one side only;
//! 3. kept with probability `exp(-x(2k + x)/2) = exp(-x)^k · exp(-x²/2)` for `x = j/N`, else
//!    back to 1: `P(z) ∝ exp(-k²/2)·exp(-x(2k+x)/2) = exp(-(k + x)²/2) = exp(-z²/(2N²))`.
//!
//! Every `Bernoulli(exp(-γ))`, `γ ∈ [0, 1]`, is Canonne, Kamath and Steinke (2020)'s
//! Algorithm 1: count the successes of `Bernoulli(γ/K)` for `K = 1, 2, ...` until the first
//! failure, and succeed when the count is even. The three `γ` used are rationals whose trials
//! are products of independent uniform integers, all in `u32`: `γ = 1/2` (a uniform in
//! `[0, 2K)` is 0), `γ = j/N` (a uniform in `[0, N)` is below `j`, and one in `[0, K)` is 0)
//! and `γ = j²/(2N²)` (two uniforms in `[0, N)` below `j`, one in `[0, 2K)` at 0). A uniform
//! in `[0, m)` is a word masked to the bits of `m - 1`, drawn again while `≥ m`. No floating
//! point touches `Z`.
//!
//! The departures from the exact law, each of probability below `2^-(2^30)`: `k` is kept below
//! `2^16` (a `k` that reaches it starts step 1 again; `P(k ≥ 2^16) < exp(-2^31)`), a trial
//! count `K` stops at `2^30` (`P < 1/(2^30)!`), and a coordinate's stream holds `2^32` blocks
//! of 16 words (one to two blocks are used on average).
//!
//! # The words
//! Coordinate `i` (its index among all the coordinates one key is used for) reads the ChaCha20
//! blocks (RFC 8439: 20 rounds, a 256-bit key, a 32-bit block counter and a 96-bit nonce) of
//! counter `0, 1, 2, ...` and nonce `(i mod 2^32, i / 2^32, DOMAIN)`, sixteen words a block in
//! order. The key is 256 bits from the [`PrivacyRng`] (a ChaCha20 generator keyed from the
//! operating system), fresh for every noise: no key, counter and nonce are ever used twice.
//! The words are those of a stream cipher under a secret key: indistinguishable from uniform
//! to anyone who does not hold the key, as the host sampler's are.
//!
//! # The release
//! A coordinate `x` (an `f32` or `f64`) is released as `γ·v(round(x/γ) + Z)`, `γ = 2^k`, where
//! `round` rounds half to even (computed as `floor` and a comparison of the exact remainder, so
//! that no target's `round` instruction is relied on), clamped to `±2^62` (1-Lipschitz: it
//! cannot raise the sensitivity, and acts only beyond `2^62` grid steps), and `v` writes the
//! integer `s` in the float type from its two 32-bit halves, `v(s) = ±(f(|s| >> 32)·2^32 +
//! f(|s| mod 2^32))` with each `f` and the sum rounded to nearest: a fixed function of `s`
//! (post-processing), exact for `|s| < 2^24` in `f32`. A value that is not finite is refused
//! before any noise is drawn (`super::NoiseKind::Hardened`).

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod kernel;
#[cfg(test)]
mod tests;

use burn::tensor::{Device, Tensor};
use rand::Rng;
use rayon::prelude::*;

use super::{PrivacyError, PrivacyRng, copies, flat};
use crate::transform::grad::ParamGrads;
use crate::tree::Leaf;
use burn::tensor::Bool;

/// The third word of every nonce: keeps this sampler's words apart from any other use of a key.
pub(crate) const DOMAIN: u32 = u32::from_le_bytes(*b"dpsg");

/// The third nonce word of the keyed normal's words ([`KeyedNormal`]).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) const NORMAL_DOMAIN: u32 = u32::from_le_bytes(*b"dpsp");

/// Step 1's `k` stays below this (it starts again when it reaches it).
pub(crate) const MAX_K: u32 = 1 << 16;

/// A trial count `K` of a `Bernoulli(exp(-γ))` stops here.
pub(crate) const MAX_TRIALS: u32 = 1 << 30;

/// The largest integer scale `N` (grid steps): uniforms in `[0, N)` are drawn from one word.
pub(crate) const MAX_SCALE: u64 = u32::MAX as u64;

/// ChaCha20's constant words, "expand 32-byte k".
const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// The key of one noise: 256 bits, fresh from a [`PrivacyRng`] for every noise drawn. Its
/// `Debug` shows no word of it (fusion may log the operations it queues).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key(pub(crate) [u32; 8]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A fresh key from `rng`.
    pub(crate) fn draw(rng: &mut PrivacyRng) -> Self {
        let mut words = [0u32; 8];
        for w in &mut words {
            *w = rng.rng().next_u32();
        }
        Self(words)
    }
}

#[inline(always)]
fn quarter(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(12);
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(7);
}

/// ChaCha20's block function (RFC 8439, section 2.3): the 16 words of block `counter` under
/// `key` and `nonce`.
pub(crate) fn block(key: &Key, counter: u32, nonce: [u32; 3]) -> [u32; 16] {
    let k = key.0;
    let init = [
        SIGMA[0], SIGMA[1], SIGMA[2], SIGMA[3], k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7],
        counter, nonce[0], nonce[1], nonce[2],
    ];
    let mut s = init;
    for _ in 0..10 {
        quarter(&mut s, 0, 4, 8, 12);
        quarter(&mut s, 1, 5, 9, 13);
        quarter(&mut s, 2, 6, 10, 14);
        quarter(&mut s, 3, 7, 11, 15);
        quarter(&mut s, 0, 5, 10, 15);
        quarter(&mut s, 1, 6, 11, 12);
        quarter(&mut s, 2, 7, 8, 13);
        quarter(&mut s, 3, 4, 9, 14);
    }
    for (w, i) in s.iter_mut().zip(init) {
        *w = w.wrapping_add(i);
    }
    s
}

/// The words of coordinate `index`'s stream under `key`.
pub(crate) struct Words {
    key: Key,
    nonce: [u32; 3],
    counter: u32,
    buffer: [u32; 16],
    at: usize,
    /// Words read so far.
    pub(crate) used: u64,
}

impl Words {
    pub(crate) fn new(key: Key, index: u64) -> Self {
        Self {
            key,
            nonce: [index as u32, (index >> 32) as u32, DOMAIN],
            counter: 0,
            buffer: [0; 16],
            at: 16,
            used: 0,
        }
    }

    #[inline]
    fn next(&mut self) -> u32 {
        if self.at == 16 {
            self.buffer = block(&self.key, self.counter, self.nonce);
            self.counter = self.counter.wrapping_add(1);
            self.at = 0;
        }
        let w = self.buffer[self.at];
        self.at += 1;
        self.used += 1;
        w
    }
}

/// A uniform integer in `[0, m)`, `m ≥ 1`: words masked to the bits of `m - 1` until one is
/// below `m` (no word for `m = 1`).
#[inline]
fn below(w: &mut Words, m: u32) -> u32 {
    if m <= 1 {
        return 0;
    }
    let mut mask = m - 1;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    loop {
        let v = w.next() & mask;
        if v < m {
            return v;
        }
    }
}

/// `Bernoulli(exp(-γ))` given `trial(K) ~ Bernoulli(γ/K)`, `γ ∈ [0, 1]` (Canonne, Kamath and
/// Steinke 2020, Algorithm 1).
#[inline]
fn bernoulli_exp(w: &mut Words, mut trial: impl FnMut(&mut Words, u32) -> bool) -> bool {
    let mut k = 1;
    while k < MAX_TRIALS && trial(w, k) {
        k += 1;
    }
    k % 2 == 1
}

/// `Bernoulli(exp(-1/2))`.
#[inline]
fn exp_half(w: &mut Words) -> bool {
    bernoulli_exp(w, |w, k| below(w, 2 * k) == 0)
}

/// `Bernoulli(exp(-j/n))`, `j < n`.
#[inline]
fn exp_x(w: &mut Words, j: u32, n: u32) -> bool {
    bernoulli_exp(w, |w, k| below(w, n) < j && below(w, k) == 0)
}

/// `Bernoulli(exp(-j²/(2n²)))`, `j < n`.
#[inline]
fn exp_x_squared(w: &mut Words, j: u32, n: u32) -> bool {
    bernoulli_exp(w, |w, k| {
        below(w, n) < j && below(w, n) < j && below(w, 2 * k) == 0
    })
}

/// Step 1: `k ≥ 0` with probability `∝ exp(-k²/2)`, below [`MAX_K`].
fn half_normal_step(w: &mut Words) -> u32 {
    loop {
        let mut k = 0;
        while k < MAX_K && exp_half(w) {
            k += 1;
        }
        if k == MAX_K {
            continue;
        }
        let mut kept = true;
        let mut left = if k > 1 { k * (k - 1) } else { 0 };
        while kept && left > 0 {
            kept = exp_half(w);
            left -= 1;
        }
        if kept {
            return k;
        }
    }
}

/// One draw of `N_Z(0, n²)` from `w` (see the module's docs).
pub(crate) fn sample(w: &mut Words, n: u32) -> i64 {
    debug_assert!(n >= 1);
    loop {
        let k = half_normal_step(w);
        let negative = w.next() & 1 == 1;
        let j = below(w, n);
        if j == 0 && k == 0 && negative {
            continue;
        }
        let mut kept = true;
        let mut left = k;
        while kept && left > 0 {
            kept = exp_x(w, j, n);
            left -= 1;
        }
        if kept && exp_x_squared(w, j, n) {
            let v = i64::from(k) * i64::from(n) + i64::from(j);
            return if negative { -v } else { v };
        }
    }
}

/// A float the keyed noise is released in (`f32`, `f64`): the grid rounding and the writing of
/// an integer, in the float's own arithmetic, as the kernel computes them.
pub(crate) trait KeyedFloat: Copy + Send + Sync + 'static {
    /// `round(x·up)` half to even, clamped to `±2^62` (`x` finite, `up` a power of two).
    fn grid(self, up: Self) -> i64;
    /// `v(s)·down` (see the module's docs).
    fn release(s: i64, down: Self) -> Self;
    /// `2^e` in this type.
    fn pow2(e: i32) -> Self;
}

macro_rules! keyed_float {
    ($t:ty) => {
        impl KeyedFloat for $t {
            #[inline]
            fn grid(self, up: Self) -> i64 {
                const LIMIT: $t = (1u64 << 62) as $t;
                const TWO_32: $t = 4294967296.0;
                let t = self * up;
                let f = t.floor();
                let r = t - f;
                let odd = (f * 0.5).floor() * 2.0 != f;
                let m = if r > 0.5 || (r == 0.5 && odd) {
                    f + 1.0
                } else {
                    f
                };
                let m = m.max(-LIMIT).min(LIMIT);
                let a = m.abs();
                let hi = (a * (1.0 / TWO_32)).floor();
                let lo = a - hi * TWO_32;
                let magnitude = ((hi as u64) << 32) | lo as u64;
                if m < 0.0 {
                    -(magnitude as i64)
                } else {
                    magnitude as i64
                }
            }

            #[inline]
            fn release(s: i64, down: Self) -> Self {
                const TWO_32: $t = 4294967296.0;
                let a = s.unsigned_abs();
                let v = ((a >> 32) as u32 as $t) * TWO_32 + (a as u32 as $t);
                let v = v * down;
                if s < 0 { -v } else { v }
            }

            fn pow2(e: i32) -> Self {
                2f64.powi(e) as $t
            }
        }
    };
}

keyed_float!(f32);
keyed_float!(f64);

/// The kernel's integer scale `⌈std/γ⌉` when it draws the hardened noise of `std` (checked:
/// finite, and 0 or between `γ` and `2^47·γ`) on `device`: a wgpu or CUDA device, at most
/// `2^32 - 1` grid steps, `std > 0`; `None` for the host's sampler.
pub(crate) fn scale(std: f64, granularity: f64, device: &Device) -> Option<u32> {
    // s = std/γ is exact; the kernel's scale is s rounded up to an integer.
    let scale = (std / granularity).ceil();
    (std > 0.0 && scale <= MAX_SCALE as f64 && on_device(device)).then_some(scale as u32)
}

/// The settings of one keyed noise: its key, the index of the first coordinate, the integer
/// scale `N` and the grid's exponent `k` (`γ = 2^k`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keyed {
    pub(crate) key: Key,
    pub(crate) first: u64,
    pub(crate) scale: u32,
    pub(crate) exponent: i32,
}

impl Keyed {
    /// The same noise, for the coordinates from `offset` on.
    pub(crate) fn at(self, offset: u64) -> Self {
        Self {
            first: self.first + offset,
            ..self
        }
    }

    /// The integer of coordinate `i` (counted from this noise's first).
    pub(crate) fn integer(&self, i: u64) -> i64 {
        sample(&mut Words::new(self.key, self.first + i), self.scale)
    }
}

/// Textbook noise drawn where the gradient lives ([`super::NoiseKind::Plain`] on a wgpu or
/// CUDA device): `x + std·Z` for a standard normal `Z` from coordinate `first + i`'s words
/// (of nonce `(i, NORMAL_DOMAIN)`), by Box and Muller in `f32` (`kernel.rs`). It has no CPU
/// reference (the transcendental functions are the target's); its tests check its law.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyedNormal {
    pub(crate) key: Key,
    pub(crate) first: u64,
    pub(crate) std: f32,
}

/// [`KeyedNormal`]'s noise on `values` (rank 1, on a device where [`on_device`] holds).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn normal(values: Tensor<1>, noise: KeyedNormal) -> Tensor<1> {
    on_cube(values, kernel::Noise::Normal(noise))
}

/// The CPU reference of the kernel: `γ·v(round(x/γ) + Z_i)` for every `values[i]` (finite),
/// `Z_i` the integer of coordinate `noise.first + i`.
pub(crate) fn reference<E: KeyedFloat>(values: &[E], noise: Keyed) -> Vec<E> {
    let up = E::pow2(-noise.exponent);
    let down = E::pow2(noise.exponent);
    values
        .par_iter()
        .enumerate()
        .map(|(i, &x)| {
            let z = noise.integer(i as u64);
            E::release(x.grid(up).saturating_add(z), down)
        })
        .collect()
}

/// The keyed sampler's noise on every coordinate of `grads` (in order; their count checked by
/// `PendingNoise::add`), each gradient noised where it lives (`keyed::add`); one read of a flag when every value is
/// finite, the values themselves only to name the first that is not.
pub(super) fn add_to(grads: ParamGrads, noise: Keyed) -> Result<ParamGrads, PrivacyError> {
    let flags: Vec<Tensor<1, Bool>> = grads
        .iter()
        .filter(|(_, _, g)| g.shape().num_elements() > 0)
        .map(|(_, _, g)| {
            let g = flat(g.clone());
            g.clone().is_nan().any().bool_or(g.is_inf().any())
        })
        .collect();
    if !flags.is_empty() && copies::any(Tensor::cat(flags, 0)) {
        return Err(non_finite(&grads));
    }
    let mut offset = 0u64;
    Ok(grads.map(|_, g| {
        let shape = g.shape();
        let at = offset;
        offset += shape.num_elements() as u64;
        Leaf::new(add(flat(g), noise.at(at))).reshape(shape)
    }))
}

/// The error for the first gradient of `grads` that holds a value that is not finite.
fn non_finite(grads: &ParamGrads) -> PrivacyError {
    for (path, _, g) in grads.iter() {
        let values = copies::to_host(flat(g.clone())).convert::<f64>();
        let values = values.as_slice::<f64>().expect("f64");
        if super::grid::first_not_finite(values).is_some() {
            return super::not_finite(path);
        }
    }
    unreachable!("a value that is not finite was flagged")
}

/// `values` (rank 1, finite) with the keyed noise of `noise` released on its grid, computed
/// where they live: by the kernel on a wgpu or CUDA device, by [`reference()`] on the host
/// elsewhere (the same values bit for bit).
pub(crate) fn add(values: Tensor<1>, noise: Keyed) -> Tensor<1> {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if on_device(&values.device()) {
        return on_cube(values, kernel::Noise::Discrete(noise));
    }
    on_host(values, noise)
}

/// Whether the kernel runs on `device`: a wgpu or CUDA device (an autodiff one's inner
/// device included).
pub(crate) fn on_device(device: &Device) -> bool {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        matches!(
            device.clone().without_autodiff().as_dispatch(),
            burn_dispatch::DispatchDevice::Cube(_)
        )
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = device;
        false
    }
}

/// [`add`] by the kernel: dispatch's `Cube` backend is `CubeBackend` or, with Burn's
/// `fusion` feature, `Fusion<CubeBackend>`; [`kernel::KeyedNoise`] is implemented for both.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn on_cube(values: Tensor<1>, noise: kernel::Noise) -> Tensor<1> {
    use crate::runtime::UserBackend;
    use crate::value::Value;
    use burn_dispatch::backends::Cube;
    use kernel::KeyedNoise;
    let Ok(Value::Float(values)) = Cube::value(values.into_dispatch()) else {
        unreachable!("a float tensor on a cubecl device is a cubecl float primitive")
    };
    Tensor::from_dispatch(Cube::tensor(Value::Float(Cube::keyed_noise(values, noise))))
}

/// [`add`] on the host, through [`reference()`] in the values' own dtype (`f32`, `f64`;
/// others through `f64`).
fn on_host(values: Tensor<1>, noise: Keyed) -> Tensor<1> {
    use burn::tensor::{DType, TensorData};
    let (device, dtype) = (values.device(), values.dtype());
    let data = copies::to_host(values);
    let n = data.num_elements();
    let released = match dtype {
        DType::F32 => TensorData::new(reference(data.as_slice::<f32>().expect("f32"), noise), [n]),
        DType::F64 => TensorData::new(reference(data.as_slice::<f64>().expect("f64"), noise), [n]),
        _ => {
            let wide = data.convert::<f64>();
            TensorData::new(reference(wide.as_slice::<f64>().expect("f64"), noise), [n])
                .convert_dtype(dtype)
        }
    };
    copies::to_device(released, &device, dtype)
}
