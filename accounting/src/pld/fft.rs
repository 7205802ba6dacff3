//! FFT convolutions of probability vectors (complex FFTs from `rustfft`).

use std::sync::Arc;

use rustfft::num_complex::Complex;
use rustfft::{Fft, FftPlanner};

/// Smallest `n' ≥ n` of the form `2^a·3^b·5^c·7^d` with `a ≥ 1` (even, and fast for `rustfft`).
pub(crate) fn next_fast_len(n: usize) -> usize {
    let n = n.max(2);
    let mut best = usize::MAX;
    let mut p7 = 1usize;
    while p7 < best {
        let mut p5 = p7;
        while p5 < best {
            let mut p3 = p5;
            while p3 < best {
                // Smallest power of two times p3 that reaches n (at least 2·p3).
                let mut m = p3 * 2;
                while m < n {
                    m *= 2;
                }
                best = best.min(m);
                match p3.checked_mul(3) {
                    Some(v) => p3 = v,
                    None => break,
                }
            }
            match p5.checked_mul(5) {
                Some(v) => p5 = v,
                None => break,
            }
        }
        match p7.checked_mul(7) {
            Some(v) => p7 = v,
            None => break,
        }
    }
    best
}

/// Real-signal DFT of even length `n` on top of one `rustfft` complex FFT of length `n/2`
/// (the standard packing of even/odd samples into one complex signal). The inverse reuses the
/// *forward* plan by conjugation, so only one plan is built: planning (twiddle tables) costs
/// more than a transform at these sizes.
struct RealDft {
    n: usize,
    fft: Arc<dyn Fft<f64>>,
    scratch: std::cell::RefCell<Vec<Complex<f64>>>,
    /// `W^k = e^{−2πik/n}` for `k = 0..=n/2`, from a two-level table (2√n `sin_cos` calls).
    twiddles: Vec<Complex<f64>>,
}

impl RealDft {
    fn new(n: usize) -> Self {
        debug_assert!(n.is_multiple_of(2) && n >= 2);
        let half = n / 2;
        let fft = FftPlanner::new().plan_fft_forward(half);
        let w = |k: usize| {
            let (s, c) = (-2.0 * std::f64::consts::PI * k as f64 / n as f64).sin_cos();
            Complex::new(c, s)
        };
        let block = ((half + 1) as f64).sqrt().ceil() as usize;
        let coarse: Vec<_> = (0..=half / block).map(|j| w(j * block)).collect();
        let fine: Vec<_> = (0..block).map(w).collect();
        let twiddles = (0..=half)
            .map(|k| coarse[k / block] * fine[k % block])
            .collect();
        let scratch = vec![Complex::new(0.0, 0.0); fft.get_inplace_scratch_len()].into();
        Self {
            n,
            fft,
            scratch,
            twiddles,
        }
    }

    /// `X[k] = Σ_j x[j] W^{jk}`, `k = 0..=n/2`, for `x` zero-padded (or wrapped) to length `n`.
    fn forward(&self, x: &[f64]) -> Vec<Complex<f64>> {
        let half = self.n / 2;
        let x: std::borrow::Cow<'_, [f64]> = if x.len() > self.n {
            // Longer inputs wrap around (circular convolution semantics).
            let mut folded = vec![0.0; self.n];
            for (i, &v) in x.iter().enumerate() {
                folded[i % self.n] += v;
            }
            folded.into()
        } else {
            x.into()
        };
        let at = |i: usize| x.get(i).copied().unwrap_or(0.0);
        let mut z: Vec<Complex<f64>> = (0..half)
            .map(|m| Complex::new(at(2 * m), at(2 * m + 1)))
            .collect();
        self.fft
            .process_with_scratch(&mut z, &mut self.scratch.borrow_mut());
        let mut out = Vec::with_capacity(half + 1);
        for k in 0..=half {
            let a = z[k % half];
            let b = z[(half - k) % half].conj();
            let even = (a + b) * 0.5;
            let odd = (a - b) * Complex::new(0.0, -0.5);
            out.push(even + self.twiddles[k] * odd);
        }
        out
    }

    /// The real signal whose half spectrum is `spectrum` (inverse of [`Self::forward`]).
    fn inverse(&self, spectrum: &[Complex<f64>]) -> Vec<f64> {
        let half = self.n / 2;
        // Z[k] = E[k] + i·O[k] with E, O the spectra of the even and odd samples; the packed
        // signal is IDFT(Z) = conj(DFT(conj(Z)))/half.
        let mut z: Vec<Complex<f64>> = (0..half)
            .map(|k| {
                let a = spectrum[k];
                let b = spectrum[half - k].conj();
                let even = (a + b) * 0.5;
                let odd = (a - b) * 0.5 * self.twiddles[k].conj();
                (even + Complex::new(0.0, 1.0) * odd).conj()
            })
            .collect();
        self.fft
            .process_with_scratch(&mut z, &mut self.scratch.borrow_mut());
        let scale = 1.0 / half as f64;
        let mut out = Vec::with_capacity(self.n);
        for v in z {
            let v = v.conj() * scale;
            out.push(v.re);
            out.push(v.im);
        }
        out
    }
}

/// Linear convolution of `a` and `b` (length `a.len() + b.len() − 1`).
pub(crate) fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let len = a.len() + b.len() - 1;
    if a.len().min(b.len()) <= 64 {
        // Direct product: exact up to roundoff, and cheaper for short inputs.
        let mut out = vec![0.0; len];
        for (i, &x) in a.iter().enumerate() {
            if x != 0.0 {
                for (o, &y) in out[i..].iter_mut().zip(b) {
                    *o += x * y;
                }
            }
        }
        return out;
    }
    let dft = RealDft::new(next_fast_len(len));
    let fa = dft.forward(a);
    let fb = dft.forward(b);
    let prod: Vec<Complex<f64>> = fa.iter().zip(&fb).map(|(x, y)| x * y).collect();
    let mut out = dft.inverse(&prod);
    out.truncate(len);
    out
}

/// `p` convolved with itself `times` times, circularly on `n` points: the spectrum raised to
/// the power `times` by binary exponentiation (relative error ~`times`·ε per bin, as in polar
/// form, at a fraction of the cost); bins whose power would underflow are set to zero up front
/// (subnormal arithmetic is slow).
pub(crate) fn self_convolve_circular(p: &[f64], times: u64, n: usize) -> Vec<f64> {
    let dft = RealDft::new(n);
    let mut spectrum = dft.forward(p);
    // |z|^times < 1e-300 ⟺ |z|² < exp(−2·690.8/times).
    let cutoff = (-2.0 * 690.8 / times as f64).exp();
    for z in &mut spectrum {
        *z = if z.norm_sqr() < cutoff {
            Complex::new(0.0, 0.0)
        } else {
            pow(*z, times)
        };
    }
    dft.inverse(&spectrum)
}

/// `zᵏ` by binary exponentiation.
fn pow(mut z: Complex<f64>, mut k: u64) -> Complex<f64> {
    let mut acc = Complex::new(1.0, 0.0);
    while k > 0 {
        if k & 1 == 1 {
            acc *= z;
        }
        k >>= 1;
        if k > 0 {
            z = z * z;
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_lengths() {
        assert_eq!(next_fast_len(1), 2);
        assert_eq!(next_fast_len(11), 12);
        assert_eq!(next_fast_len(97), 98);
        assert_eq!(next_fast_len(1025), 1050);
        for n in 1..2000 {
            let m = next_fast_len(n);
            assert!(m >= n && m.is_multiple_of(2));
        }
    }

    #[test]
    fn convolution_matches_direct() {
        let a: Vec<f64> = (0..300)
            .map(|i| ((i * 7919) % 101) as f64 / 101.0)
            .collect();
        let b: Vec<f64> = (0..200)
            .map(|i| ((i * 104_729) % 89) as f64 / 89.0)
            .collect();
        let fast = convolve(&a, &b);
        let mut direct = vec![0.0; a.len() + b.len() - 1];
        for (i, x) in a.iter().enumerate() {
            for (j, y) in b.iter().enumerate() {
                direct[i + j] += x * y;
            }
        }
        for (x, y) in fast.iter().zip(&direct) {
            assert!((x - y).abs() < 1e-10);
        }
    }

    #[test]
    fn real_dft_matches_direct_dft() {
        for n in [2usize, 6, 10, 16, 42] {
            let x: Vec<f64> = (0..n).map(|i| ((i * 37 + 11) % 17) as f64 - 8.0).collect();
            let dft = RealDft::new(n);
            let spec = dft.forward(&x);
            for (k, s) in spec.iter().enumerate() {
                let mut want = Complex::new(0.0, 0.0);
                for (j, &v) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * (j * k) as f64 / n as f64;
                    want += Complex::new(a.cos(), a.sin()) * v;
                }
                assert!((s - want).norm() < 1e-10, "n={n} k={k}: {s} vs {want}");
            }
            let back = dft.inverse(&spec);
            for (a, b) in back.iter().zip(&x) {
                assert!((a - b).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn self_convolution_of_a_coin() {
        // Binomial(10, ½) from the 2-point distribution.
        let out = self_convolve_circular(&[0.5, 0.5], 10, 12);
        let mut c = 1.0;
        for (k, &v) in out.iter().take(11).enumerate() {
            assert!((v - c / 1024.0).abs() < 1e-15, "k={k}");
            c = c * (10 - k) as f64 / (k + 1) as f64;
        }
    }
}
