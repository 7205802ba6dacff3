//! The hardened noise on the host (Flex and any backend without the keyed kernel): each
//! gradient read back, every value `x` released as `γ·(round(x/γ) + Z)` with its integer `Z`
//! from [`Draw`], written over the values read back (the gradient's own buffer where no other
//! tensor shares it), and the release written to the device.

use burn::tensor::{DType, Tensor, TensorData};
use rayon::prelude::*;

use super::draw::{Draw, Ints, Noise};
use super::{NotFinite, PrivacyError, copies, flat, not_finite};
use crate::transform::grad::ParamGrads;
use crate::tree::Leaf;

/// The grid index `round(x/γ)` is clamped to `±2^100` (`|Z| < 2^63`: the sum fits an `i128`).
const M_MAX: f64 = 1.2676506002282294e30;

/// The integer `m + z` (`m` an integer-valued `f64`, `|m| ≤ 2^100`) rounded to the nearest
/// `f64`: in `i64` when it fits (the common case: `i128` conversions are library calls), else in
/// `i128`; the same value either way.
#[inline]
fn grid_sum(m: f64, z: i64) -> f64 {
    const FITS: f64 = (1u64 << 62) as f64;
    if m.abs() < FITS
        && let Some(sum) = (m as i64).checked_add(z)
    {
        return sum as f64;
    }
    (m as i128 + z as i128) as f64
}

/// `γ·(round(x/γ) + Z)` for every coordinate `x` of `grads`, in order, `γ = 2^k`, with the
/// integers `Z` of `draw` (as many: checked by [`PendingNoise::add`](super::PendingNoise::add)).
pub(super) fn hardened(grads: ParamGrads, draw: Draw, k: i32) -> Result<ParamGrads, PrivacyError> {
    let z = draw.finish();
    let mut offset = 0;
    let mut failure = None;
    let noisy = grads.map(|path, g| {
        if failure.is_some() {
            return g;
        }
        let (shape, device, dtype) = (g.shape(), g.device(), g.dtype());
        let n = shape.num_elements();
        let z = (&z, offset);
        offset += n;
        // The gradient itself is read back (not a clone): a backend that holds its values on the
        // host hands over its buffer when no other tensor shares it (Flex), and the release is
        // written over it, with no copy made.
        let data = copies::to_host(flat(g));
        // One pass over the values in their own dtype (f32 and f64 are read as they are, every
        // value exact in f64), written in it; other dtypes through f64.
        let released = match dtype {
            DType::F32 => released::<f32>(data, z, k),
            DType::F64 => released::<f64>(data, z, k),
            dtype => released::<f64>(data.convert::<f64>(), z, k).map(|d| d.convert_dtype(dtype)),
        };
        match released {
            Ok(data) => Leaf::new(copies::to_device(data, &device, dtype)).reshape(shape),
            Err(NotFinite) => {
                failure = Some(not_finite(path));
                // A stand-in of the gradient's shape: the call returns the error, not these.
                Leaf::new(Tensor::<1>::zeros([n], (&device, dtype))).reshape(shape)
            }
        }
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(noisy),
    }
}

/// A float dtype the grid is read from and written to: every value is exact in `f64`, and the
/// released value is the nearest one to the grid point (post-processing).
pub(super) trait GridFloat: Copy + Send + Sync + 'static {
    fn wide(self) -> f64;
    fn narrow(v: f64) -> Self;
}

impl GridFloat for f32 {
    fn wide(self) -> f64 {
        f64::from(self)
    }
    fn narrow(v: f64) -> Self {
        v as f32
    }
}

impl GridFloat for f64 {
    fn wide(self) -> f64 {
        self
    }
    fn narrow(v: f64) -> Self {
        v
    }
}

/// `data` (a flat host copy of one gradient, values of type `E`) released: every value `x`
/// replaced by `γ·(round(x/γ) + Z)` ([`on_grid`]), written over the copy where its bytes can be
/// written (no second buffer to allocate and fault in), else into a new one.
fn released<E: GridFloat + burn::tensor::Element>(
    mut data: TensorData,
    noise: (&Noise, usize),
    k: i32,
) -> Result<TensorData, NotFinite> {
    if let Ok(values) = data.as_mut_slice::<E>() {
        on_grid(values, noise, k)?;
        return Ok(data);
    }
    let mut values: Vec<E> = data.try_to_vec().expect("the gradient's own dtype");
    let n = values.len();
    on_grid(&mut values, noise, k)?;
    Ok(TensorData::new(values, [n]))
}

/// `γ·(round(x/γ) + Z)` for every value `x` with its integer `Z` (coordinates `at..` of
/// `noise`), `γ = 2^k`, in `x`'s type, written over `x`; a value that is not finite (it
/// has no grid point) as an error, before any is written. In parallel, a chunk of the noise at a
/// time.
fn on_grid<E: GridFloat>(
    values: &mut [E],
    (noise, at): (&Noise, usize),
    k: i32,
) -> Result<(), NotFinite> {
    if first_not_finite(values).is_some() {
        return Err(NotFinite);
    }
    let (up, down) = (2f64.powi(-k), 2f64.powi(k));
    // The values cut where the chunks of the noise are: disjoint pieces, one task each.
    let len = values.len();
    let mut rest = values;
    let mut pieces = Vec::new();
    for (_, ints, within, n) in noise.pieces(at, len) {
        let (piece, tail) = rest.split_at_mut(n);
        rest = tail;
        pieces.push((piece, ints, within));
    }
    pieces
        .into_par_iter()
        .for_each(|(piece, ints, within)| match ints {
            Ints::Narrow(z) => noised(piece, &z[within..], (up, down)),
            Ints::Wide(z) => noised(piece, &z[within..], (up, down)),
        });
    Ok(())
}

/// The index of the first value of `values` that is not finite, if any: in parallel, a block
/// at a time, each block checked without a branch per value (rayon's `position_first` over the
/// values, one call per value, took a third of the hardened noise's time on one thread).
pub(super) fn first_not_finite<E: GridFloat>(values: &[E]) -> Option<usize> {
    const BLOCK: usize = 1 << 12;
    let finite = |x: &E| x.wide().is_finite();
    let block = values
        .par_chunks(BLOCK)
        .position_first(|b| !b.iter().fold(true, |all, x| all & finite(x)))?;
    let start = block * BLOCK;
    values[start..]
        .iter()
        .position(|x| !finite(x))
        .map(|i| start + i)
}

/// `xs[i] = γ·(round(xs[i]/γ) + z[i])`, `(up, down) = (2^-k, 2^k)`, a block of values at a
/// time: in `f64` alone ([`noised_small`]) where every `|x/γ|` and `|z|` of the block is below
/// `2^51` (gradients: `|x| < 2^31` at `γ = 2^-20`), else by the integer path ([`noised_exact`]);
/// the same values either way.
#[inline(always)]
fn noised<E: GridFloat, Z: Copy + Into<i64>>(xs: &mut [E], z: &[Z], (up, down): (f64, f64)) {
    const BLOCK: usize = 64;
    for (xs, z) in xs.chunks_mut(BLOCK).zip(z.chunks(BLOCK)) {
        // Without a branch a value; NaN is not below (the values are finite here).
        let small = xs.iter().zip(z).fold(true, |small, (x, &z)| {
            small & ((x.wide() * up).abs() < SMALL) & ((z.into() as f64).abs() < SMALL)
        });
        if small {
            noised_small(xs, z, (up, down));
        } else {
            noised_exact(xs, z, (up, down));
        }
    }
}

/// `2^51`: below it, `v` rounds to an integer in `f64` ([`noised_small`]).
const SMALL: f64 = (1u64 << 51) as f64;

/// [`noised`] for `|x/γ| < 2^51` and `|z| < 2^51`: `v + 1.5·2^52` lies in `[2^52, 2^53)`, where
/// the `f64` are the integers, so IEEE round-to-nearest-even (Rust's float arithmetic, never
/// reassociated) makes `(v + 1.5·2^52) - 1.5·2^52` the integer nearest `v`, ties to even, as
/// `round_ties_even` does, and `|m + z| < 2^52` is exact: no branch and no library call a value
/// (the compiler vectorizes it).
#[inline(always)]
fn noised_small<E: GridFloat, Z: Copy + Into<i64>>(xs: &mut [E], z: &[Z], (up, down): (f64, f64)) {
    const ROUND: f64 = (3u64 << 51) as f64;
    for (x, &z) in xs.iter_mut().zip(z) {
        let m = (x.wide() * up + ROUND) - ROUND;
        *x = E::narrow((m + z.into() as f64) * down);
    }
}

/// [`noised`] for any finite values, in integers.
#[inline(never)]
fn noised_exact<E: GridFloat, Z: Copy + Into<i64>>(xs: &mut [E], z: &[Z], (up, down): (f64, f64)) {
    for (x, &z) in xs.iter_mut().zip(z) {
        // x·2^-k is exact; the clamp (1-Lipschitz: it cannot raise the sensitivity) acts only
        // far beyond any gradient, and keeps m + z in range.
        let m = (x.wide() * up).round_ties_even().clamp(-M_MAX, M_MAX);
        // A fixed function of the integer m + z: post-processing.
        *x = E::narrow(grid_sum(m, z.into()) * down);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_find_the_first_value_not_finite() {
        let n = 3 * 4096 + 5;
        assert_eq!(first_not_finite(&vec![1.0f32; n]), None);
        assert_eq!(first_not_finite::<f64>(&[]), None);
        for (at, bad) in [
            (0, f32::NAN),
            (4095, f32::INFINITY),
            (4096, f32::NEG_INFINITY),
        ] {
            for later in [None, Some(n - 1)] {
                let mut v = vec![-2.5f32; n];
                v[at] = bad;
                if let Some(j) = later {
                    v[j] = f32::NAN;
                }
                assert_eq!(first_not_finite(&v), Some(at), "{bad} at {at}");
            }
        }
        let mut v = vec![0.0f64; n];
        v[n - 1] = f64::NAN;
        assert_eq!(first_not_finite(&v), Some(n - 1));
        v[n - 1] = f64::MAX;
        assert_eq!(first_not_finite(&v), None);
    }

    #[test]
    fn should_sum_on_the_grid_as_in_i128() {
        let p62 = (1u64 << 62) as f64;
        for (m, z) in [
            (0.0, 0i64),
            (-3.0, 5),
            (p62 / 2.0, i64::MAX),
            (-p62 / 2.0, i64::MIN + 1),
            (p62 - 1024.0, 7),
            (p62, -7),
            (-p62, 7),
            (M_MAX, i64::MAX),
            (-M_MAX, i64::MIN + 1),
        ] {
            let exact = (m as i128 + z as i128) as f64;
            assert_eq!(grid_sum(m, z), exact, "{m} + {z}");
        }
    }

    /// Bit for bit (the sign of zero too) as the integer path, in blocks all small, all
    /// large and mixed, ties included.
    #[test]
    fn should_release_in_f64_as_in_integers() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (up, down) = (2f64.powi(20), 2f64.powi(-20));
        let edge = SMALL * down;
        let xs: Vec<f64> = (0..1000)
            .map(|i| match i % 7 {
                // Ties: (n + 1/2)·γ, both signs.
                0 => (f64::from(rng.random_range(-1000i32..1000)) + 0.5) * down,
                1 => rng.random_range(-1.0..1.0),
                2 => rng.random_range(-1e-6..1e-6),
                3 => -0.0,
                // Near 2^51 grid steps, in the last blocks only.
                4 if i >= 640 => edge * rng.random_range(0.999..1.001),
                5 if i >= 640 => -edge * rng.random_range(0.999..1.001),
                4 | 5 => rng.random_range(-1e9..1e9) * down,
                _ => rng.random_range(-1e3..1e3),
            })
            .collect();
        // Blocks 0-2 and 4-9 small (in f64 alone), 3 with large integers, 10-15 with large
        // values.
        assert!(xs[..640].iter().all(|x| (x * up).abs() < SMALL));
        let z: Vec<i64> = (0..xs.len())
            .map(|i| match i {
                200 => 1 << 52,
                201 => -(1 << 60),
                _ => rng.random_range(-(1i64 << 31)..1 << 31),
            })
            .collect();
        let narrow: Vec<i32> = z
            .iter()
            .map(|&z| z.clamp(-(1 << 31), (1 << 31) - 1) as i32)
            .collect();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (mut fast, mut exact) = (xs.clone(), xs.clone());
        noised(&mut fast, &z, (up, down));
        noised_exact(&mut exact, &z, (up, down));
        assert_eq!(bits(&fast), bits(&exact));
        let (mut fast, mut exact) = (xs.clone(), xs.clone());
        noised(&mut fast, &narrow, (up, down));
        noised_exact(&mut exact, &narrow, (up, down));
        assert_eq!(bits(&fast), bits(&exact));
        let small: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
        let (mut fast, mut exact) = (small.clone(), small);
        noised(&mut fast, &narrow, (up, down));
        noised_exact(&mut exact, &narrow, (up, down));
        assert!(
            fast.iter()
                .zip(&exact)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        // The path taken: a block of values at 0.25 (ties at 2^18 grid steps) in f64 alone.
        let mut quarter = vec![0.25 + down / 2.0; 64];
        noised_small(&mut quarter, &[0i32; 64], (up, down));
        assert!(quarter.iter().all(|&x| x == 0.25));
    }
}
