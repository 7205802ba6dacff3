//! What the microbatching tests share: data, value helpers, the per-example function.
#![allow(dead_code)]

#[path = "../shared/tolerance.rs"]
pub mod tolerance;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

pub fn dev() -> Device {
    Device::default()
}

/// A deterministic, irregular sequence of `n * d` values in [-2, 2).
pub fn data(n: usize, d: usize, seed: u64) -> Vec<f32> {
    (0..n * d)
        .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 250.0) - 2.0)
        .collect()
}

/// A `[n, d]` tensor of [`data`].
pub fn matrix(n: usize, d: usize, seed: u64) -> Tensor<2> {
    Tensor::from_data(TensorData::new(data(n, d, seed), [n, d]), &dev())
}

pub fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

pub fn ints<const D: usize>(t: Tensor<D, Int>) -> Vec<i64> {
    t.into_data().try_into_vec_as::<i64>().unwrap()
}

pub fn bools<const D: usize>(t: Tensor<D, Bool>) -> Vec<bool> {
    t.into_data().try_into_vec_as::<bool>().unwrap()
}

/// Every value of `got` within `tol · (1 + |want|)` of `want`, same shapes.
pub fn close_tol<const D: usize>(got: Tensor<D>, want: Tensor<D>, tol: f32) {
    assert_eq!(got.dims(), want.dims(), "shapes");
    let (g, w) = (floats(got), floats(want));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= tolerance::device_tol(tol) * (1.0 + b.abs()),
            "at {i}: {a} vs {b}\n got {g:?}\nwant {w:?}"
        );
    }
}

pub fn close<const D: usize>(got: Tensor<D>, want: Tensor<D>) {
    close_tol(got, want, 1e-5)
}

/// The per-example function of the tests: `tanh(v) * sum(v²)`.
pub fn f(v: Tensor<1>) -> Tensor<1> {
    let s = (v.clone() * v.clone()).sum();
    v.tanh() * s
}

/// The loop: every row through `f`, stacked: `[B, d]`.
pub fn looped(xs: &Tensor<2>) -> Tensor<2> {
    let [b, d] = xs.dims();
    if b == 0 {
        return Tensor::zeros([0, d], &dev());
    }
    let rows: Vec<_> = (0..b)
        .map(|i| f(xs.clone().narrow(0, i, 1).reshape([d])).unsqueeze::<2>())
        .collect();
    Tensor::cat(rows, 0)
}

/// Rows of microbatch `k` (strided: k, k+n, ...).
pub fn rows_of(k: usize, n: usize, m: usize) -> Vec<usize> {
    (0..m).map(|j| k + j * n).collect()
}

/// The rows `rows` of `t`.
pub fn pick(t: &Tensor<2>, rows: &[usize]) -> Tensor<2> {
    let idx: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    t.clone()
        .select(0, Tensor::<1, Int>::from_ints(idx.as_slice(), &dev()))
}
