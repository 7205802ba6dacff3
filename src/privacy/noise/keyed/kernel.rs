//! The keyed discrete Gaussian as a cubecl kernel (wgpu, CUDA): one unit a coordinate, each
//! running the CPU reference's algorithm (`mod.rs`) on its own ChaCha20 words, the grid sum
//! formed in 32-bit halves, the release written in the gradient's float type. Nothing is read
//! back and nothing is uploaded but the launch's scalars (the key among them). A second kernel
//! on the same words draws the plain noise ([`super::KeyedNormal`]).
//!
//! [`KeyedNoise`] is the backend operation: the kernel on [`CubeBackend`], and on
//! `Fusion<B>` (Burn's `fusion` feature) an opaque custom operation queued in the fusion stream
//! that runs `B`'s. Both are implemented whether or not Burn's `fusion` feature is on (cargo
//! may turn it on from another crate of the user's build), so dispatch's `Cube` backend, which
//! is one or the other, always has it.
//!
//! The kernel matches the reference word for word: every loop, every early exit, the order of
//! the uniform draws; `&&` and `||` (which the kernel language evaluates eagerly) only join
//! values already drawn. Its float operations are the reference's: exact ones (a product by a
//! power of two, `floor`, a difference of neighbours, casts of integers below `2^32` that are
//! exact), and, for the release, one conversion of each 32-bit half and one sum, rounded to
//! nearest as on the host.

// The kernel follows RFC 8439's pseudo-code and the CPU reference statement for statement
// (`a = a + b`, rotations as two shifts), and spells its power-of-two constants in full.
#![allow(
    clippy::assign_op_pattern,
    clippy::manual_rotate,
    clippy::excessive_precision
)]

use burn_backend::Shape;
use burn_backend::cubecl::dtype_to_storage_type;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_fusion::stream::{Operation, StreamId};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use super::{DOMAIN, Keyed, KeyedNormal, NORMAL_DOMAIN};

/// The noise one launch draws.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Noise {
    /// The keyed discrete Gaussian, released on its grid (the CPU reference's bits).
    Discrete(Keyed),
    /// Textbook noise (`NoiseKind::Plain`): `x + std·Z`.
    Normal(KeyedNormal),
}

/// A backend that draws the keyed noise where its tensors live.
pub(crate) trait KeyedNoise: burn_backend::Backend {
    /// `values` (rank 1; finite for [`Noise::Discrete`]) with `noise` added, in `values`'
    /// dtype.
    fn keyed_noise(values: FloatTensor<Self>, noise: Noise) -> FloatTensor<Self>;
}

impl KeyedNoise for CubeBackend {
    fn keyed_noise(values: FloatTensor<Self>, noise: Noise) -> FloatTensor<Self> {
        launch(values, noise)
    }
}

/// The custom operation's id in the fusion stream.
const OP_ID: &str = "burn_vmap::keyed_noise";

/// The keyed noise queued in a fusion stream: its IR (one input, one output) and its settings.
/// The key stays in the operation, out of the IR (which fusion may cache and compare).
#[derive(Debug)]
struct KeyedNoiseOp<B> {
    desc: CustomOpIr,
    noise: Noise,
    _backend: core::marker::PhantomData<B>,
}

impl<B: FusionBackend + KeyedNoise> Operation<B::FusionRuntime> for KeyedNoiseOp<B> {
    fn execute(
        &self,
        handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    ) -> Result<(), burn_fusion::ExecutionError> {
        let ([input], [output]) = self.desc.as_fixed();
        let values = handles.get_float_tensor::<B>(input);
        let noised = B::keyed_noise(values, self.noise);
        handles.register_float_tensor::<B>(&output.id, noised);
        Ok(())
    }
}

impl<B: FusionBackend + KeyedNoise> KeyedNoise for Fusion<B> {
    fn keyed_noise(values: FloatTensor<Self>, noise: Noise) -> FloatTensor<Self> {
        let client = values.client.clone();
        let input = values.into_ir();
        let output = TensorIr::uninit(
            client.create_empty_handle(),
            input.shape.clone(),
            input.dtype,
        );
        let desc = CustomOpIr::new(OP_ID, &[input], &[output]);
        let op = KeyedNoiseOp::<B> {
            desc: desc.clone(),
            noise,
            _backend: core::marker::PhantomData,
        };
        client
            .register(StreamId::current(), OperationIr::Custom(desc), op)
            .into_iter()
            .next()
            .expect("one output")
    }
}

/// The launch's scalars: the key, the first coordinate's index in halves, the nonce's third
/// word; for the discrete Gaussian the integer scale and the grid's factors `2^-k` and `2^k`
/// (exact in `f32`: `|k| ≤ 64`), for the normal its standard deviation (the others unused, 0).
#[derive(CubeLaunch, CubeType)]
pub(crate) struct NoiseArgs {
    k0: u32,
    k1: u32,
    k2: u32,
    k3: u32,
    k4: u32,
    k5: u32,
    k6: u32,
    k7: u32,
    first_lo: u32,
    first_hi: u32,
    domain: u32,
    scale: u32,
    up: f32,
    down: f32,
    std: f32,
}

/// Launches the kernel of `noise` on `values` (flattened, made contiguous).
fn launch(values: CubeTensor, noise: Noise) -> CubeTensor {
    let n = values.meta.num_elements();
    let dtype = values.dtype;
    let values = into_contiguous(CubeBackend::float_reshape(values, Shape::new([n])));
    let client = values.client.clone();
    let output = empty_device_contiguous_dtype(
        client.clone(),
        values.device.clone(),
        Shape::new([n]),
        dtype,
    );
    if n == 0 {
        return output;
    }
    let (key, first, domain, scale, up, down, std) = match noise {
        Noise::Discrete(d) => (
            d.key,
            d.first,
            DOMAIN,
            d.scale,
            2f32.powi(-d.exponent),
            2f32.powi(d.exponent),
            0.0,
        ),
        Noise::Normal(d) => (d.key, d.first, NORMAL_DOMAIN, 0, 0.0, 0.0, d.std),
    };
    let [k0, k1, k2, k3, k4, k5, k6, k7] = key.0;
    let args = NoiseArgsLaunch::new(
        k0,
        k1,
        k2,
        k3,
        k4,
        k5,
        k6,
        k7,
        first as u32,
        (first >> 32) as u32,
        domain,
        scale,
        up,
        down,
        std,
    );
    let cube_dim = CubeDim::new(&client, n);
    let cube_count = cubecl::calculate_cube_count_elemwise(&client, n, cube_dim);
    let (input, out) = (values.into_tensor_arg(), output.clone().into_tensor_arg());
    let dtype = dtype_to_storage_type(dtype);
    match noise {
        Noise::Discrete(_) => {
            keyed_noise_kernel::launch(&client, cube_count, cube_dim, input, out, args, dtype)
        }
        Noise::Normal(_) => {
            keyed_normal_kernel::launch(&client, cube_count, cube_dim, input, out, args, dtype)
        }
    }
    output
}

/// The index of the coordinate at `pos`: `first + pos` from its halves.
#[cube]
fn coordinate(args: &NoiseArgs, pos: u32) -> Words {
    let lo = args.first_lo + pos;
    let mut hi = args.first_hi;
    if lo < pos {
        hi += 1u32;
    }
    Words::new(lo, hi)
}

/// `x + std·Z` with `Z` by Box and Muller from three words: `u1 ∈ (0, 1]` from two (48 bits
/// where they matter, near 0: tails to 8.2 standard deviations), the angle from the third.
/// In `f32`, as the host's plain noise; not bit for bit any CPU's (the transcendental
/// functions are the target's).
#[cube(launch)]
fn keyed_normal_kernel<F: Float>(
    values: &Tensor<F>,
    output: &mut Tensor<F>,
    args: NoiseArgs,
    #[define(F)] _dtype: ElemType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= values.len() {
        terminate!();
    }
    let mut words = coordinate(&args, pos as u32);
    let a = f32::cast_from(words.next(&args) >> 8u32);
    let b = f32::cast_from(words.next(&args) >> 8u32);
    let c = f32::cast_from(words.next(&args) >> 8u32);
    let step = 5.9604645e-8f32; // 2^-24
    let u1 = (a + (b + 1.0f32) * step) * step;
    let u2 = c * step;
    let z = (-2.0f32 * u1.ln()).sqrt() * (6.2831855f32 * u2).cos();
    output[pos] = values[pos] + F::cast_from(z * args.std);
}

#[cube(launch)]
fn keyed_noise_kernel<F: Float>(
    values: &Tensor<F>,
    output: &mut Tensor<F>,
    args: NoiseArgs,
    #[define(F)] _dtype: ElemType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= values.len() {
        terminate!();
    }
    let mut words = coordinate(&args, pos as u32);
    let z = sample(&mut words, &args);
    output[pos] = release::<F>(values[pos], z, &args);
}

/// One coordinate's words: ChaCha20 blocks `0, 1, ...` of nonce `(n0, n1, DOMAIN)`.
#[derive(CubeType)]
struct Words {
    buffer: Array<u32>,
    at: u32,
    counter: u32,
    n0: u32,
    n1: u32,
}

#[cube]
impl Words {
    fn new(n0: u32, n1: u32) -> Words {
        Words {
            buffer: Array::new(16usize),
            at: 16u32,
            counter: 0u32,
            n0,
            n1,
        }
    }

    fn next(&mut self, args: &NoiseArgs) -> u32 {
        if self.at == 16u32 {
            chacha_block(&mut self.buffer, args, self.counter, self.n0, self.n1);
            self.counter += 1u32;
            self.at = 0u32;
        }
        let w = self.buffer[self.at as usize];
        self.at += 1u32;
        w
    }
}

#[cube]
fn quarter(
    s: &mut Array<u32>,
    #[comptime] a: usize,
    #[comptime] b: usize,
    #[comptime] c: usize,
    #[comptime] d: usize,
) {
    s[a] = s[a] + s[b];
    let x = s[d] ^ s[a];
    s[d] = (x << 16u32) | (x >> 16u32);
    s[c] = s[c] + s[d];
    let y = s[b] ^ s[c];
    s[b] = (y << 12u32) | (y >> 20u32);
    s[a] = s[a] + s[b];
    let x = s[d] ^ s[a];
    s[d] = (x << 8u32) | (x >> 24u32);
    s[c] = s[c] + s[d];
    let y = s[b] ^ s[c];
    s[b] = (y << 7u32) | (y >> 25u32);
}

/// ChaCha20's block function (RFC 8439) into `out`; the nonce's third word is the launch's
/// domain.
#[cube]
fn chacha_block(out: &mut Array<u32>, args: &NoiseArgs, counter: u32, n0: u32, n1: u32) {
    let mut init = Array::<u32>::new(16usize);
    init[0] = 0x6170_7865u32;
    init[1] = 0x3320_646eu32;
    init[2] = 0x7962_2d32u32;
    init[3] = 0x6b20_6574u32;
    init[4] = args.k0;
    init[5] = args.k1;
    init[6] = args.k2;
    init[7] = args.k3;
    init[8] = args.k4;
    init[9] = args.k5;
    init[10] = args.k6;
    init[11] = args.k7;
    init[12] = counter;
    init[13] = n0;
    init[14] = n1;
    init[15] = args.domain;
    let mut s = Array::<u32>::new(16usize);
    #[unroll]
    for i in 0..16usize {
        s[i] = init[i];
    }
    for _ in 0..10u32 {
        quarter(&mut s, 0usize, 4usize, 8usize, 12usize);
        quarter(&mut s, 1usize, 5usize, 9usize, 13usize);
        quarter(&mut s, 2usize, 6usize, 10usize, 14usize);
        quarter(&mut s, 3usize, 7usize, 11usize, 15usize);
        quarter(&mut s, 0usize, 5usize, 10usize, 15usize);
        quarter(&mut s, 1usize, 6usize, 11usize, 12usize);
        quarter(&mut s, 2usize, 7usize, 8usize, 13usize);
        quarter(&mut s, 3usize, 4usize, 9usize, 14usize);
    }
    #[unroll]
    for i in 0..16usize {
        out[i] = s[i] + init[i];
    }
}

/// A uniform integer in `[0, m)` (no word for `m ≤ 1`).
#[cube]
fn below(w: &mut Words, args: &NoiseArgs, m: u32) -> u32 {
    let mut result = 0u32;
    if m > 1u32 {
        let mut mask = m - 1u32;
        mask |= mask >> 1u32;
        mask |= mask >> 2u32;
        mask |= mask >> 4u32;
        mask |= mask >> 8u32;
        mask |= mask >> 16u32;
        loop {
            let v = w.next(args) & mask;
            if v < m {
                result = v;
                break;
            }
        }
    }
    result
}

/// The `Bernoulli(γ/K)` trial of a [`bernoulli_exp`]: the reference's three closures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Trial {
    /// `γ = 1/2`: a uniform in `[0, 2K)` is 0.
    Half,
    /// `γ = j/n`: one in `[0, n)` is below `j`, and one in `[0, K)` is 0.
    X,
    /// `γ = j²/(2n²)`: two in `[0, n)` are below `j`, and one in `[0, 2K)` is 0.
    XSquared,
}

/// `Bernoulli(exp(-γ))` by Algorithm 1 with `trial` (`j`, `n` unused for [`Trial::Half`]): the
/// uniforms drawn in the reference's order, the first failed test ending the trial.
#[cube]
#[allow(clippy::collapsible_if)] // The outer `if` is resolved when the kernel is compiled.
fn bernoulli_exp(
    w: &mut Words,
    args: &NoiseArgs,
    j: u32,
    n: u32,
    #[comptime] trial: Trial,
) -> bool {
    let mut k = 1u32;
    loop {
        if k >= 1073741824u32 {
            break;
        }
        let mut pass = true;
        if comptime!(trial != Trial::Half) {
            pass = below(w, args, n) < j;
        }
        if comptime!(trial == Trial::XSquared) {
            if pass {
                pass = below(w, args, n) < j;
            }
        }
        if pass {
            let mut m = 2u32 * k;
            if comptime!(trial == Trial::X) {
                m = k;
            }
            pass = below(w, args, m) == 0u32;
        }
        if !pass {
            break;
        }
        k += 1u32;
    }
    (k & 1u32) == 1u32
}

/// Step 1: `k` with probability `∝ exp(-k²/2)`, below `2^16`.
#[cube]
#[allow(unused_assignments)] // `result`'s first value: the kernel language declares it before the loop.
fn half_normal_step(w: &mut Words, args: &NoiseArgs) -> u32 {
    let mut result = 0u32;
    loop {
        let mut k = 0u32;
        loop {
            if k >= 65536u32 {
                break;
            }
            if !bernoulli_exp(w, args, 0u32, 0u32, Trial::Half) {
                break;
            }
            k += 1u32;
        }
        if k < 65536u32 {
            let mut kept = true;
            let mut left = 0u32;
            if k > 1u32 {
                left = k * (k - 1u32);
            }
            loop {
                if !kept {
                    break;
                }
                if left == 0u32 {
                    break;
                }
                kept = bernoulli_exp(w, args, 0u32, 0u32, Trial::Half);
                left -= 1u32;
            }
            if kept {
                result = k;
                break;
            }
        }
    }
    result
}

/// A draw `±(hi·2^32 + lo)`.
#[derive(CubeType)]
struct Draw {
    negative: bool,
    hi: u32,
    lo: u32,
}

/// One draw of `N_Z(0, N²)`, `N = args.scale`.
#[cube]
fn sample(w: &mut Words, args: &NoiseArgs) -> Draw {
    let n = args.scale;
    let mut draw = Draw {
        negative: false,
        hi: 0u32,
        lo: 0u32,
    };
    loop {
        let k = half_normal_step(w, args);
        let negative = (w.next(args) & 1u32) == 1u32;
        let j = below(w, args, n);
        let minus_zero = j == 0u32 && k == 0u32 && negative;
        if !minus_zero {
            let mut kept = true;
            let mut left = k;
            loop {
                if !kept {
                    break;
                }
                if left == 0u32 {
                    break;
                }
                kept = bernoulli_exp(w, args, j, n, Trial::X);
                left -= 1u32;
            }
            if kept {
                kept = bernoulli_exp(w, args, j, n, Trial::XSquared);
            }
            if kept {
                // k·n + j in halves: k < 2^16, n < 2^32.
                let a = k * (n & 0xFFFFu32);
                let b = k * (n >> 16u32);
                let mut lo = (b << 16u32) + a;
                let mut hi = b >> 16u32;
                if lo < a {
                    hi += 1u32;
                }
                let sum = lo + j;
                if sum < j {
                    hi += 1u32;
                }
                lo = sum;
                draw.negative = negative;
                draw.hi = hi;
                draw.lo = lo;
                break;
            }
        }
    }
    draw
}

/// `γ·v(round(x/γ) + z)` in `F`.
#[cube]
fn release<F: Float>(x: F, z: Draw, args: &NoiseArgs) -> F {
    let up = F::cast_from(args.up);
    let down = F::cast_from(args.down);
    let half = F::new(0.5f32);
    let one = F::new(1.0f32);
    let two = F::new(2.0f32);
    let limit = F::new(4611686018427387904.0f32);
    let two_32 = F::new(4294967296.0f32);
    let inverse_32 = F::new(2.3283064365386963e-10f32);

    // m = round(x·2^-k), half to even, clamped to ±2^62.
    let t = x * up;
    let f = t.floor();
    let r = t - f;
    let odd = (f * half).floor() * two != f;
    let mut m = f;
    if r > half {
        m = f + one;
    }
    if r == half && odd {
        m = f + one;
    }
    m = F::max(m, F::new(0.0f32) - limit);
    m = F::min(m, limit);
    let a = m.abs();
    let a_hi = (a * inverse_32).floor();
    let a_lo = a - a_hi * two_32;
    let mut m_hi = u32::cast_from(a_hi);
    let mut m_lo = u32::cast_from(a_lo);
    if m < F::new(0.0f32) {
        m_lo = (m_lo ^ 0xFFFF_FFFFu32) + 1u32;
        m_hi = m_hi ^ 0xFFFF_FFFFu32;
        if m_lo == 0u32 {
            m_hi += 1u32;
        }
    }
    let mut z_hi = z.hi;
    let mut z_lo = z.lo;
    if z.negative {
        z_lo = (z_lo ^ 0xFFFF_FFFFu32) + 1u32;
        z_hi = z_hi ^ 0xFFFF_FFFFu32;
        if z_lo == 0u32 {
            z_hi += 1u32;
        }
    }
    // s = m + z, two's complement in halves.
    let mut s_lo = m_lo + z_lo;
    let mut s_hi = m_hi + z_hi;
    if s_lo < m_lo {
        s_hi += 1u32;
    }
    let negative = (s_hi >> 31u32) == 1u32;
    if negative {
        s_lo = (s_lo ^ 0xFFFF_FFFFu32) + 1u32;
        s_hi = s_hi ^ 0xFFFF_FFFFu32;
        if s_lo == 0u32 {
            s_hi += 1u32;
        }
    }
    let mut v = (F::cast_from(s_hi) * two_32 + F::cast_from(s_lo)) * down;
    if negative {
        v = F::new(0.0f32) - v;
    }
    v
}
