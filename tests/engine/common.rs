//! The loop oracle at primitive level: a batched op's result equals the op applied to every
//! example (the examples stacked), on Flex.
//!
//! Operands are [`Arg`]s: a physical Flex tensor batched at some of the levels of a [`Levels`]
//! (one or two vmap levels). [`check`] runs the op once on their `VmapTensor`s through
//! `Vmap<Flex>`, then once per example (every index of every level) on the examples' own
//! tensors through `Flex`, and compares.

#![allow(dead_code)]

use burn_backend::{DType, Shape, TensorData, TensorMetadata};
use burn_flex::{Flex, FlexTensor};
use burn_vmap::Vmap;
use burn_vmap::level::Level;
use burn_vmap::tensor::{BatchDim, BatchDims, VmapTensor};

pub type F = Flex;
pub type V = Vmap<Flex>;
pub type T = FlexTensor;
pub type VT = VmapTensor<FlexTensor>;

/// The device.
pub fn dev() -> burn_flex::FlexDevice {
    Default::default()
}

/// Values in `[-1, 1)` from a small linear congruential generator (deterministic per seed).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A float tensor of `shape` with [`values`].
pub fn floats(shape: &[usize], seed: u64) -> T {
    let n = shape.iter().product();
    T::from_data(TensorData::new(values(n, seed), shape.to_vec()))
}

/// An int tensor of `shape` with values in `lo..hi`.
pub fn ints(shape: &[usize], lo: i64, hi: i64, seed: u64) -> T {
    let n = shape.iter().product();
    let span = (hi - lo) as f32;
    let v: Vec<i32> = values(n, seed)
        .into_iter()
        .map(|x| lo as i32 + (((x + 1.0) / 2.0 * span) as i32).min(span as i32 - 1))
        .collect();
    T::from_data(TensorData::new(v, shape.to_vec()))
}

/// A bool tensor of `shape`.
pub fn bools(shape: &[usize], seed: u64) -> T {
    let n = shape.iter().product();
    let v: Vec<bool> = values(n, seed).into_iter().map(|x| x > 0.0).collect();
    T::from_data(TensorData::new(v, shape.to_vec()))
}

/// A tensor's values as `f32` (ints and bools converted), row-major.
pub fn read(t: T) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

/// The shape of a tensor as a vector.
pub fn dims<M: TensorMetadata>(t: &M) -> Vec<usize> {
    t.shape().to_vec()
}

/// One or more vmap levels with their sizes, outermost first.
pub struct Levels {
    pub levels: Vec<(Level, usize)>,
}

impl Levels {
    pub fn new(sizes: &[usize]) -> Self {
        Levels {
            levels: sizes.iter().map(|&s| (Level::fresh(), s)).collect(),
        }
    }

    /// Every multi-index over the levels, row-major.
    pub fn indices(&self) -> Vec<Vec<usize>> {
        let mut out = vec![vec![]];
        for &(_, size) in &self.levels {
            out = out
                .into_iter()
                .flat_map(|prefix| {
                    (0..size).map(move |i| {
                        let mut p = prefix.clone();
                        p.push(i);
                        p
                    })
                })
                .collect();
        }
        out
    }

    /// The batch dims of the levels `at` (indices into the levels).
    pub fn bdims(&self, at: &[usize]) -> BatchDims {
        BatchDims::from_sorted(
            at.iter()
                .map(|&i| BatchDim {
                    level: self.levels[i].0,
                    size: self.levels[i].1,
                })
                .collect(),
        )
    }

    fn sizes(&self, at: &[usize]) -> Vec<usize> {
        at.iter().map(|&i| self.levels[i].1).collect()
    }

    /// A float operand of logical shape `logical` batched at the levels `at`.
    pub fn floats(&self, at: &[usize], logical: &[usize], seed: u64) -> Arg {
        self.arg(at, logical, |shape| floats(shape, seed))
    }

    /// An int operand with values in `lo..hi`.
    pub fn ints(&self, at: &[usize], logical: &[usize], lo: i64, hi: i64, seed: u64) -> Arg {
        self.arg(at, logical, |shape| ints(shape, lo, hi, seed))
    }

    /// A bool operand.
    pub fn bools(&self, at: &[usize], logical: &[usize], seed: u64) -> Arg {
        self.arg(at, logical, |shape| bools(shape, seed))
    }

    /// An operand made by `make` at its physical shape.
    pub fn arg(&self, at: &[usize], logical: &[usize], make: impl FnOnce(&[usize]) -> T) -> Arg {
        let mut physical = self.sizes(at);
        physical.extend_from_slice(logical);
        if logical.is_empty() {
            physical.push(1);
        }
        Arg {
            physical: make(&physical),
            at: at.to_vec(),
            logical: logical.to_vec(),
        }
    }
}

/// An operand: one value per example of the levels it is batched at.
#[derive(Clone)]
pub struct Arg {
    pub physical: T,
    pub at: Vec<usize>,
    pub logical: Vec<usize>,
}

impl Arg {
    /// As a `VmapTensor` (a logical rank-0 operand through `from_physical_scalar`).
    pub fn vt(&self, lv: &Levels) -> VT {
        let bdims = lv.bdims(&self.at);
        if self.logical.is_empty() {
            return VmapTensor::from_physical_scalar(self.physical.clone(), bdims);
        }
        VmapTensor::from_physical(self.physical.clone(), bdims)
    }

    /// The example at the multi-index `idx` (over every level) as a Flex tensor of the logical
    /// shape.
    pub fn example(&self, lv: &Levels, idx: &[usize]) -> T {
        example_of(self.physical.clone(), &self.at, lv, idx, &self.logical)
    }
}

/// The example `idx` of a physical tensor batched at the levels `at` (row-major over them).
fn example_of(physical: T, at: &[usize], lv: &Levels, idx: &[usize], logical: &[usize]) -> T {
    let data = physical.into_data();
    let dtype = data.dtype();
    let n: usize = logical.iter().product();
    let row = at.iter().fold(0, |acc, &l| acc * lv.levels[l].1 + idx[l]);
    let size = dtype_size(dtype);
    let bytes = data.as_bytes()[row * n * size..(row + 1) * n * size].to_vec();
    T::from_data(TensorData::from_bytes_vec(bytes, logical.to_vec(), dtype))
}

fn dtype_size(dtype: DType) -> usize {
    match dtype {
        DType::Bool(_) => 1,
        other => other.size(),
    }
}

/// Asserts that two value lists agree to 1e-5 (relative above 1).
#[track_caller]
pub fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths differ");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let ok = (a - e).abs() <= 1e-5 * (1.0 + e.abs()) || (a.is_nan() && e.is_nan());
        assert!(
            ok,
            "{what}: element {i}: {a} (batched) vs {e} (loop)\n{actual:?}\n{expected:?}"
        );
    }
}

/// The values of example `idx` of a batched result (its own batch dims; the same value for
/// every index of a level it is not batched at).
pub fn result_example(out: &VT, lv: &Levels, idx: &[usize]) -> (Vec<usize>, Vec<f32>) {
    let logical = dims(out);
    let (physical, bdims) = out.clone().into_parts();
    let at: Vec<usize> = bdims
        .as_slice()
        .iter()
        .map(|d| {
            lv.levels
                .iter()
                .position(|(l, _)| *l == d.level)
                .expect("the result is batched at a level of the test")
        })
        .collect();
    let flat = if logical.is_empty() {
        vec![1]
    } else {
        logical.clone()
    };
    let t = example_of(physical, &at, lv, idx, &flat);
    (logical, read(t))
}

/// The loop oracle: `batched` on the operands' `VmapTensor`s equals `single` on every example's
/// operands.
#[track_caller]
pub fn check<const N: usize>(
    lv: &Levels,
    args: [&Arg; N],
    batched: impl FnOnce([VT; N]) -> VT,
    single: impl Fn([T; N]) -> T,
) {
    let out = batched(args.map(|a| a.vt(lv)));
    check_result(lv, &out, |idx| single(args.map(|a| a.example(lv, idx))));
}

/// Compares a batched result with `expected(idx)` for every example.
#[track_caller]
pub fn check_result(lv: &Levels, out: &VT, expected: impl Fn(&[usize]) -> T) {
    for idx in lv.indices() {
        let want = expected(&idx);
        let want_shape = dims(&want);
        let (shape, values) = result_example(out, lv, &idx);
        assert_eq!(shape, want_shape, "example {idx:?}: logical shapes differ");
        assert_close(&values, &read(want), &format!("example {idx:?}"));
    }
}

/// The batched mixes of two operands over two levels: `(lhs levels, rhs levels)`.
pub const MIXES2: &[(&[usize], &[usize])] = &[
    (&[0], &[]),
    (&[], &[0]),
    (&[0], &[0]),
    (&[0], &[1]),
    (&[1], &[0, 1]),
    (&[0, 1], &[]),
    (&[0, 1], &[0, 1]),
];

/// `shape` as a `Shape`.
pub fn shape(dims: &[usize]) -> Shape {
    Shape::from(dims.to_vec())
}
