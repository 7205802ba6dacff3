//! Host tensors: the oracle's side. Batched inputs are drawn on the host, examples are sliced
//! out of them there, and results (vmapped and looped) are read back and compared there.

#![allow(dead_code)]

#[path = "../shared/tolerance.rs"]
mod tolerance;

use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_dispatch::Dispatch;

use crate::harness::{Gen, K, Rng, T};

/// Host values.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F(Vec<f64>),
    I(Vec<i64>),
    B(Vec<bool>),
}

/// A host tensor (row-major).
#[derive(Clone, Debug)]
pub struct Host {
    pub shape: Vec<usize>,
    pub data: Data,
}

fn take_vec<E: Clone>(v: &[E], shape: &[usize], axis: usize, i: usize) -> Vec<E> {
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        let start = (o * n + i) * inner;
        out.extend_from_slice(&v[start..start + inner]);
    }
    out
}

fn stack_vec<E: Clone>(parts: &[&Vec<E>], part_shape: &[usize], axis: usize) -> Vec<E> {
    let outer: usize = part_shape[..axis].iter().product();
    let inner: usize = part_shape[axis..].iter().product();
    let mut out = Vec::with_capacity(outer * inner * parts.len());
    for o in 0..outer {
        for p in parts {
            out.extend_from_slice(&p[o * inner..(o + 1) * inner]);
        }
    }
    out
}

fn kind_of(d: &Data) -> K {
    match d {
        Data::F(_) => K::F,
        Data::I(_) => K::I,
        Data::B(_) => K::B,
    }
}

impl Host {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn kind(&self) -> K {
        kind_of(&self.data)
    }

    /// Random values of `shape`.
    pub fn r#gen(shape: &[usize], r#gen: &Gen, rng: &mut Rng) -> Host {
        let n: usize = shape.iter().product();
        let data = match *r#gen {
            Gen::F(lo, hi) => Data::F(
                (0..n)
                    .map(|_| ((lo + (hi - lo) * rng.unit()) as f32) as f64)
                    .collect(),
            ),
            Gen::FNonZero(lo, hi) => Data::F(
                (0..n)
                    .map(|_| {
                        let m = lo + (hi - lo) * rng.unit();
                        ((if rng.coin() { m } else { -m }) as f32) as f64
                    })
                    .collect(),
            ),
            Gen::FGrid => Data::F(
                (0..n)
                    .map(|_| rng.choose(&[-1.0, -0.5, 0.0, 0.5, 1.0]))
                    .collect(),
            ),
            Gen::FDistinct => {
                let mut v: Vec<f64> = (0..n).map(|i| i as f64 * 0.25 - 1.0).collect();
                for i in (1..n).rev() {
                    v.swap(i, rng.below(i + 1));
                }
                Data::F(v)
            }
            Gen::I(lo, hi) => Data::I((0..n).map(|_| rng.range(lo, hi)).collect()),
            Gen::INonZero(lo, hi) => Data::I(
                (0..n)
                    .map(|_| {
                        let m = rng.range(lo, hi);
                        if rng.coin() { m } else { -m }
                    })
                    .collect(),
            ),
            Gen::IDistinct => {
                let mut v: Vec<i64> = (0..n as i64).map(|i| i - 3).collect();
                for i in (1..n).rev() {
                    v.swap(i, rng.below(i + 1));
                }
                Data::I(v)
            }
            Gen::B => Data::B((0..n).map(|_| rng.coin()).collect()),
        };
        Host {
            shape: shape.to_vec(),
            data,
        }
    }

    /// Example `i` along `axis` (the axis is removed).
    pub fn take(&self, axis: usize, i: usize) -> Host {
        let mut shape = self.shape.clone();
        shape.remove(axis);
        let data = match &self.data {
            Data::F(v) => Data::F(take_vec(v, &self.shape, axis, i)),
            Data::I(v) => Data::I(take_vec(v, &self.shape, axis, i)),
            Data::B(v) => Data::B(take_vec(v, &self.shape, axis, i)),
        };
        Host { shape, data }
    }

    /// Stacks equally shaped parts along a new `axis`; `empty` gives kind and part shape when
    /// there are no parts (batch size 0).
    pub fn stack(parts: &[Host], axis: usize, empty: &Host) -> Host {
        let part_shape = parts
            .first()
            .map(|p| p.shape.clone())
            .unwrap_or_else(|| empty.shape.clone());
        for p in parts {
            assert_eq!(
                p.shape, part_shape,
                "oracle: examples returned different shapes"
            );
        }
        let mut shape = part_shape.clone();
        shape.insert(axis, parts.len());
        macro_rules! join {
            ($v:ident) => {
                Data::$v(stack_vec(
                    &parts
                        .iter()
                        .map(|p| match &p.data {
                            Data::$v(v) => v,
                            other => panic!("oracle: examples of kinds {:?}", kind_of(other)),
                        })
                        .collect::<Vec<_>>(),
                    &part_shape,
                    axis,
                ))
            };
        }
        let data = match &empty.data {
            Data::F(_) => join!(F),
            Data::I(_) => join!(I),
            Data::B(_) => join!(B),
        };
        Host { shape, data }
    }

    /// A tensor of these values on the default (user's) device.
    pub fn to_t(&self) -> T {
        self.to_t_on(&Device::default())
    }

    /// A tensor of these values on `device`, with the device's default dtype of its kind,
    /// made at primitive level: Burn 0.22's `Tensor::from_data` refuses rank 0 (the examples
    /// of a rank-1 batch), and nothing but the data is recorded on a capture device.
    pub fn to_t_on(&self, device: &Device) -> T {
        let shape = self.shape.clone();
        let settings = device.settings();
        let d = device.as_dispatch();
        let t = match &self.data {
            Data::F(v) => {
                let data = TensorData::new(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)
                    .convert_dtype(DType::from(settings.float_dtype));
                Dispatch::float_from_data(data, d)
            }
            Data::I(v) => {
                let data = TensorData::new(v.clone(), shape)
                    .convert_dtype(DType::from(settings.int_dtype));
                Dispatch::int_from_data(data, d)
            }
            Data::B(v) => {
                let data = TensorData::new(v.clone(), shape)
                    .convert_dtype(DType::from(settings.bool_dtype));
                Dispatch::bool_from_data(data, d)
            }
        };
        macro_rules! wrap {
            ($($r:literal),*) => {
                match (self.shape.len(), self.kind()) {
                    $(($r, K::F) => T::from(Tensor::<$r>::from_dispatch(t)),
                      ($r, K::I) => T::from(Tensor::<$r, Int>::from_dispatch(t)),
                      ($r, K::B) => T::from(Tensor::<$r, Bool>::from_dispatch(t)),)*
                    (r, _) => panic!("rank {r} not supported by the harness"),
                }
            };
        }
        wrap!(0, 1, 2, 3, 4, 5, 6, 7, 8)
    }

    /// Reads a tensor back.
    pub fn from_t(t: T) -> Host {
        let kind = t.kind();
        Host::from_data(t.0.to_data(), kind)
    }

    /// From tensor data of a known kind.
    pub fn from_data(data: TensorData, kind: K) -> Host {
        let shape = data.shape().to_vec();
        let data = match kind {
            K::F => Data::F(data.iter::<f64>().collect()),
            K::I => Data::I(data.iter::<i64>().collect()),
            K::B => Data::B(data.iter::<bool>().collect()),
        };
        Host { shape, data }
    }

    /// Stand-in values of a kind and shape (an example for batch size 0).
    pub fn filler(shape: &[usize], kind: K) -> Host {
        let n: usize = shape.iter().product();
        let data = match kind {
            K::F => Data::F(vec![0.5; n]),
            K::I => Data::I(vec![1; n]),
            K::B => Data::B(vec![false; n]),
        };
        Host {
            shape: shape.to_vec(),
            data,
        }
    }
}

/// Float comparison tolerance.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

pub const TOL: Tol = Tol {
    rtol: 1e-4,
    atol: 1e-5,
};

/// First difference between two host tensors, if any (floats within `tol`, raised to TF32's
/// tolerance on CUDA: `tests/shared/tolerance.rs`).
pub fn diff(expected: &Host, got: &Host, tol: Tol) -> Option<String> {
    let (rtol, atol) = if tolerance::tf32() {
        (tol.rtol.max(tolerance::TF32), tol.atol.max(tolerance::TF32))
    } else {
        (tol.rtol, tol.atol)
    };
    if expected.shape != got.shape {
        return Some(format!(
            "shape: expected {:?}, got {:?}",
            expected.shape, got.shape
        ));
    }
    let at = |flat: usize| {
        let mut idx = vec![0; expected.shape.len()];
        let mut r = flat;
        for (d, &n) in expected.shape.iter().enumerate().rev() {
            idx[d] = r % n.max(1);
            r /= n.max(1);
        }
        idx
    };
    match (&expected.data, &got.data) {
        (Data::F(a), Data::F(b)) => a.iter().zip(b).position(|(x, y)| {
            !((x.is_nan() && y.is_nan())
                || x == y
                || (x - y).abs() <= atol + rtol * x.abs().max(y.abs()))
        }),
        (Data::I(a), Data::I(b)) => a.iter().zip(b).position(|(x, y)| x != y),
        (Data::B(a), Data::B(b)) => a.iter().zip(b).position(|(x, y)| x != y),
        (a, b) => {
            return Some(format!(
                "kind: expected {:?}, got {:?}",
                kind_of(a),
                kind_of(b)
            ));
        }
    }
    .map(|i| {
        let show = |d: &Data| match d {
            Data::F(v) => format!("{}", v[i]),
            Data::I(v) => format!("{}", v[i]),
            Data::B(v) => format!("{}", v[i]),
        };
        format!(
            "at {:?}: expected {}, got {}",
            at(i),
            show(&expected.data),
            show(&got.data)
        )
    })
}
