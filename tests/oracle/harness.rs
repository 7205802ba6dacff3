//! The loop oracle: `vmap(f)(xs)` must equal stacking `f(x_i)` over the examples.
//!
//! Operands are rank-erased ([`T`], one `Leaf<V>`), so one harness serves every op, kind and
//! rank. The oracle side runs on plain host data ([`Host`]): it slices example `i` out of every
//! mapped operand, calls `f` on unbatched `Vmap<TestBackend>` tensors (the pass-through path) and
//! stacks the results along `out_axes`. The vmapped side calls `burn_vmap::vmap` once per level
//! (nested levels are nested `vmap` calls).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::ops::RangeInclusive;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use burn_vmap::testing::TestBackend;
use burn_vmap::tree::{Leaf, Spec};
use burn_vmap::tree::{Leaves, TreeDef};
use burn_vmap::{BatchOps, Tree, Vmap, VmapError, vmap};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The backend under test.
pub type V = Vmap<TestBackend>;

// ------------------------------------------------------------------------------------------
// Panics: caught quietly (expected ones would otherwise flood the output).
// ------------------------------------------------------------------------------------------

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
static HOOK: std::sync::Once = std::sync::Once::new();

/// `catch_unwind` without printing the panic (on this thread).
pub fn quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                prev(info)
            }
        }));
    });
    let old = QUIET.with(|q| q.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(old));
    r.map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "<non-string panic>".into())
    })
}

// ------------------------------------------------------------------------------------------
// Deterministic randomness (everything derives from the proptest-drawn seed).
// ------------------------------------------------------------------------------------------

/// SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
    pub fn choose<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
}

// ------------------------------------------------------------------------------------------
// Operand specifications.
// ------------------------------------------------------------------------------------------

/// The kind of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum K {
    F,
    I,
    B,
}

/// How an operand's values are drawn.
#[derive(Clone, Debug)]
pub enum Gen {
    /// Float uniform in `[lo, hi]`.
    F(f64, f64),
    /// Float with `|x|` uniform in `[lo, hi]` and a random sign (divisors).
    FNonZero(f64, f64),
    /// Float from a small grid `{-1, -0.5, 0, 0.5, 1}` (ties for comparisons).
    FGrid,
    /// Distinct floats (a random permutation of `0..n`, scaled): no ties for arg-ops.
    FDistinct,
    /// Int uniform in `[lo, hi]`.
    I(i64, i64),
    /// Int with `|x|` in `[lo, hi]` and a random sign.
    INonZero(i64, i64),
    /// Distinct ints (a random permutation of `0..n`, shifted).
    IDistinct,
    /// Random bools.
    B,
}

impl Gen {
    pub fn kind(&self) -> K {
        match self {
            Gen::F(..) | Gen::FNonZero(..) | Gen::FGrid | Gen::FDistinct => K::F,
            Gen::I(..) | Gen::INonZero(..) | Gen::IDistinct => K::I,
            Gen::B => K::B,
        }
    }
}

/// One operand of an op: its per-example (logical) shape and value distribution.
#[derive(Clone, Debug)]
pub struct Operand {
    pub shape: Vec<usize>,
    pub r#gen: Gen,
}

/// Float operand in `[-2, 2]`.
pub fn fl(shape: &[usize]) -> Operand {
    Operand {
        shape: shape.to_vec(),
        r#gen: Gen::F(-2.0, 2.0),
    }
}
/// Operand with a given generator.
pub fn op(shape: &[usize], r#gen: Gen) -> Operand {
    Operand {
        shape: shape.to_vec(),
        r#gen,
    }
}
/// Int operand in `[-4, 4]`.
pub fn it(shape: &[usize]) -> Operand {
    Operand {
        shape: shape.to_vec(),
        r#gen: Gen::I(-4, 4),
    }
}
/// Index operand in `0..bound`.
pub fn idx(shape: &[usize], bound: usize) -> Operand {
    Operand {
        shape: shape.to_vec(),
        r#gen: Gen::I(0, bound as i64 - 1),
    }
}
/// Bool operand.
pub fn bo(shape: &[usize]) -> Operand {
    Operand {
        shape: shape.to_vec(),
        r#gen: Gen::B,
    }
}

// ------------------------------------------------------------------------------------------
// Case parameters: what proptest draws.
// ------------------------------------------------------------------------------------------

/// Parameters of one proptest case: four dims in `1..=4`, a rank, and a seed from which every
/// other choice (op parameters, operand values, batched/unbatched mix, axes, sizes) derives.
#[derive(Clone, Debug)]
pub struct P {
    pub d: Vec<usize>,
    pub rank: usize,
    pub seed: u64,
}

impl P {
    /// The first `rank` dims.
    pub fn shape(&self) -> Vec<usize> {
        self.d[..self.rank].to_vec()
    }
    /// A deterministic choice in `0..n`, different per `salt`.
    pub fn pick(&self, salt: u64, n: usize) -> usize {
        assert!(n > 0);
        Rng::new(
            self.seed
                .wrapping_mul(31)
                .wrapping_add(salt.wrapping_mul(0x1234_5678_9ABC)),
        )
        .below(n)
    }
    /// `shape()` with some dims replaced by 1 (a broadcasting operand), chosen by `salt`.
    pub fn bshape(&self, salt: u64) -> Vec<usize> {
        self.shape()
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if self.pick(salt + 100 + i as u64, 3) == 0 {
                    1
                } else {
                    d
                }
            })
            .collect()
    }
    /// A dim of the first `rank` dims.
    pub fn dim(&self, salt: u64) -> usize {
        self.pick(salt, self.rank)
    }
    /// A sub-range `a..b` (non-empty) of `0..n`.
    pub fn range(&self, salt: u64, n: usize) -> (usize, usize) {
        let a = self.pick(salt, n);
        let b = a + 1 + self.pick(salt + 1, n - a);
        (a, b)
    }
    /// A random permutation of `0..n`.
    pub fn perm(&self, salt: u64, n: usize) -> Vec<usize> {
        let mut rng = Rng::new(self.seed ^ salt.wrapping_mul(0xABCD));
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, rng.below(i + 1));
        }
        v
    }
}

/// Proptest strategy for case parameters: dims in `1..=4`, rank in `ranks`, a seed.
pub fn shape_strategy(ranks: RangeInclusive<usize>) -> impl Strategy<Value = P> {
    (prop::collection::vec(1usize..=4, 4), ranks, any::<u64>()).prop_map(|(d, rank, seed)| P {
        d,
        rank,
        seed,
    })
}

// ------------------------------------------------------------------------------------------
// Rank-erased tensors.
// ------------------------------------------------------------------------------------------

/// A rank-erased tensor (one tree leaf) of backend `B` (default `V`): what the op closures take
/// and return.
#[derive(Clone, Debug)]
pub struct T<B: Backend = V>(pub Leaf<B>);

impl<B: Backend> Tree<B> for T<B> {
    fn flatten_into(self, leaves: &mut Vec<Leaf<B>>) -> TreeDef {
        leaves.push(self.0);
        TreeDef::Leaf
    }
    fn unflatten_from(_def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
        Ok(T(leaves.next_leaf()?))
    }
}

macro_rules! t_from {
    ($kind:ty) => {
        impl<B: Backend, const D: usize> From<Tensor<B, D, $kind>> for T<B> {
            fn from(t: Tensor<B, D, $kind>) -> Self {
                let (mut leaves, _) = Tree::<B>::flatten(t);
                T(leaves.remove(0))
            }
        }
    };
}
t_from!(burn::tensor::Float);
t_from!(Int);
t_from!(Bool);

impl<B: Backend> T<B> {
    pub fn rank(&self) -> usize {
        self.0.shape().num_dims()
    }
    pub fn dims(&self) -> Vec<usize> {
        self.0.shape().to_vec()
    }
    pub fn kind(&self) -> K {
        match self.0 {
            Leaf::Float(_) => K::F,
            Leaf::Int(_) => K::I,
            Leaf::Bool(_) => K::B,
        }
    }
    /// As a float tensor of rank `D`.
    #[track_caller]
    pub fn f<const D: usize>(&self) -> Tensor<B, D> {
        match &self.0 {
            Leaf::Float(p) if self.rank() == D => Tensor::from_primitive(p.clone()),
            _ => panic!(
                "expected a float tensor of rank {D}, got {:?} of rank {}",
                self.kind(),
                self.rank()
            ),
        }
    }
    /// As an int tensor of rank `D`.
    #[track_caller]
    pub fn i<const D: usize>(&self) -> Tensor<B, D, Int> {
        match &self.0 {
            Leaf::Int(p) if self.rank() == D => Tensor::from_primitive(p.clone()),
            _ => panic!(
                "expected an int tensor of rank {D}, got {:?} of rank {}",
                self.kind(),
                self.rank()
            ),
        }
    }
    /// As a bool tensor of rank `D`.
    #[track_caller]
    pub fn b<const D: usize>(&self) -> Tensor<B, D, Bool> {
        match &self.0 {
            Leaf::Bool(p) if self.rank() == D => Tensor::from_primitive(p.clone()),
            _ => panic!(
                "expected a bool tensor of rank {D}, got {:?} of rank {}",
                self.kind(),
                self.rank()
            ),
        }
    }
}

/// `y`, typed like `x` (pins inferred const ranks).
pub fn same<X>(_x: &X, y: X) -> X {
    y
}

/// Runs `$body` with `$x` bound to `$t` as a tensor of its actual rank (0..=4), via accessor
/// `$acc` (`f`, `i`, `b`), and wraps the result in a [`T`].
macro_rules! ranked {
    ($t:expr, $acc:ident, |$x:ident| $body:expr) => {{
        let t: &$crate::harness::T = &$t;
        match t.rank() {
            0 => {
                let $x = t.$acc::<0>();
                $crate::harness::T::from($body)
            }
            1 => {
                let $x = t.$acc::<1>();
                $crate::harness::T::from($body)
            }
            2 => {
                let $x = t.$acc::<2>();
                $crate::harness::T::from($body)
            }
            3 => {
                let $x = t.$acc::<3>();
                $crate::harness::T::from($body)
            }
            4 => {
                let $x = t.$acc::<4>();
                $crate::harness::T::from($body)
            }
            r => panic!("ranked!: rank {r} not supported"),
        }
    }};
    ($t:expr, $acc:ident, $u:expr, $acc2:ident, |$x:ident, $y:ident| $body:expr) => {{
        let t: &$crate::harness::T = &$t;
        let u: &$crate::harness::T = &$u;
        match t.rank() {
            0 => {
                let $x = t.$acc::<0>();
                let $y = u.$acc2::<0>();
                $crate::harness::T::from($body)
            }
            1 => {
                let $x = t.$acc::<1>();
                let $y = u.$acc2::<1>();
                $crate::harness::T::from($body)
            }
            2 => {
                let $x = t.$acc::<2>();
                let $y = u.$acc2::<2>();
                $crate::harness::T::from($body)
            }
            3 => {
                let $x = t.$acc::<3>();
                let $y = u.$acc2::<3>();
                $crate::harness::T::from($body)
            }
            4 => {
                let $x = t.$acc::<4>();
                let $y = u.$acc2::<4>();
                $crate::harness::T::from($body)
            }
            r => panic!("ranked!: rank {r} not supported"),
        }
    }};
    ($t:expr, $acc:ident, $u:expr, $acc2:ident, $w:expr, $acc3:ident, |$x:ident, $y:ident, $z:ident| $body:expr) => {{
        let t: &$crate::harness::T = &$t;
        let u: &$crate::harness::T = &$u;
        let w: &$crate::harness::T = &$w;
        match t.rank() {
            1 => {
                let $x = t.$acc::<1>();
                let $y = u.$acc2::<1>();
                let $z = w.$acc3::<1>();
                $crate::harness::T::from($body)
            }
            2 => {
                let $x = t.$acc::<2>();
                let $y = u.$acc2::<2>();
                let $z = w.$acc3::<2>();
                $crate::harness::T::from($body)
            }
            3 => {
                let $x = t.$acc::<3>();
                let $y = u.$acc2::<3>();
                let $z = w.$acc3::<3>();
                $crate::harness::T::from($body)
            }
            4 => {
                let $x = t.$acc::<4>();
                let $y = u.$acc2::<4>();
                let $z = w.$acc3::<4>();
                $crate::harness::T::from($body)
            }
            r => panic!("ranked!: rank {r} not supported"),
        }
    }};
}

// ------------------------------------------------------------------------------------------
// Host tensors: the oracle's side.
// ------------------------------------------------------------------------------------------

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

macro_rules! by_rank {
    ($rank:expr, $R:ident => $body:expr) => {
        match $rank {
            0 => {
                const $R: usize = 0;
                $body
            }
            1 => {
                const $R: usize = 1;
                $body
            }
            2 => {
                const $R: usize = 2;
                $body
            }
            3 => {
                const $R: usize = 3;
                $body
            }
            4 => {
                const $R: usize = 4;
                $body
            }
            5 => {
                const $R: usize = 5;
                $body
            }
            6 => {
                const $R: usize = 6;
                $body
            }
            7 => {
                const $R: usize = 7;
                $body
            }
            8 => {
                const $R: usize = 8;
                $body
            }
            r => panic!("rank {r} not supported by the harness"),
        }
    };
}

impl Host {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn kind(&self) -> K {
        match self.data {
            Data::F(_) => K::F,
            Data::I(_) => K::I,
            Data::B(_) => K::B,
        }
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
        let data = match &empty.data {
            Data::F(_) => Data::F(stack_vec(
                &parts
                    .iter()
                    .map(|p| match &p.data {
                        Data::F(v) => v,
                        _ => panic!("kind"),
                    })
                    .collect::<Vec<_>>(),
                &part_shape,
                axis,
            )),
            Data::I(_) => Data::I(stack_vec(
                &parts
                    .iter()
                    .map(|p| match &p.data {
                        Data::I(v) => v,
                        _ => panic!("kind"),
                    })
                    .collect::<Vec<_>>(),
                &part_shape,
                axis,
            )),
            Data::B(_) => Data::B(stack_vec(
                &parts
                    .iter()
                    .map(|p| match &p.data {
                        Data::B(v) => v,
                        _ => panic!("kind"),
                    })
                    .collect::<Vec<_>>(),
                &part_shape,
                axis,
            )),
        };
        Host { shape, data }
    }

    /// An unbatched tensor of `V` with these values.
    pub fn to_t(&self) -> T {
        self.to_tb::<V>()
    }

    /// An unbatched tensor of backend `B` with these values, through `Tensor::from_data` (which
    /// picks the device's default dtypes). `Tensor::from_data` rejects rank 0, which the oracle
    /// needs (examples of a rank-1 batch): those go through the backend's `*_from_data`, with
    /// the dtype a rank-1 tensor gets.
    pub fn to_tb<B: Backend>(&self) -> T<B> {
        use burn::tensor::TensorPrimitive;
        let device = Default::default();
        if !self.shape.is_empty() {
            let shape = self.shape.clone();
            return by_rank!(shape.len(), R => match &self.data {
                Data::F(v) => T::from(Tensor::<B, R>::from_data(
                    TensorData::new(v.iter().map(|&x| x as f32).collect::<Vec<f32>>(), shape), &device)),
                Data::I(v) => T::from(Tensor::<B, R, Int>::from_data(TensorData::new(v.clone(), shape), &device)),
                Data::B(v) => T::from(Tensor::<B, R, Bool>::from_data(TensorData::new(v.clone(), shape), &device)),
            });
        }
        let scalar: Vec<usize> = Vec::new();
        T(match &self.data {
            Data::F(v) => {
                let data = TensorData::new(vec![v[0] as f32], [1]);
                let dtype = Tensor::<B, 1>::from_data(data, &device).dtype();
                let data = TensorData::new(vec![v[0] as f32], scalar).convert_dtype(dtype);
                Leaf::Float(TensorPrimitive::Float(B::float_from_data(data, &device)))
            }
            Data::I(v) => {
                let dtype =
                    Tensor::<B, 1, Int>::from_data(TensorData::new(vec![v[0]], [1]), &device)
                        .dtype();
                Leaf::Int(B::int_from_data(
                    TensorData::new(vec![v[0]], scalar).convert_dtype(dtype),
                    &device,
                ))
            }
            Data::B(v) => {
                let dtype =
                    Tensor::<B, 1, Bool>::from_data(TensorData::new(vec![v[0]], [1]), &device)
                        .dtype();
                Leaf::Bool(B::bool_from_data(
                    TensorData::new(vec![v[0]], scalar).convert_dtype(dtype),
                    &device,
                ))
            }
        })
    }

    /// Reads a tensor back (it must not be batched).
    pub fn from_t<B: Backend>(t: T<B>) -> Host {
        let rank = t.rank();
        let kind = t.kind();
        let data: TensorData = by_rank!(rank, R => match t.0 {
            Leaf::Float(p) => Tensor::<B, R>::from_primitive(p).into_data(),
            Leaf::Int(p) => Tensor::<B, R, Int>::from_primitive(p).into_data(),
            Leaf::Bool(p) => Tensor::<B, R, Bool>::from_primitive(p).into_data(),
        });
        Host::from_data(data, kind)
    }

    /// From tensor data of a known kind.
    pub fn from_data(data: TensorData, kind: K) -> Host {
        let shape = data.shape.to_vec();
        let data = match kind {
            K::F => Data::F(data.iter::<f64>().collect()),
            K::I => Data::I(data.iter::<i64>().collect()),
            K::B => Data::B(data.iter::<bool>().collect()),
        };
        Host { shape, data }
    }

    /// Zeros of the same kind and shape (a stand-in example for batch size 0).
    pub fn zeros_like(shape: &[usize], kind: K) -> Host {
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

/// First difference between two host tensors, if any.
pub fn diff(expected: &Host, got: &Host, tol: Tol) -> Option<String> {
    if expected.shape != got.shape {
        return Some(format!(
            "shape: expected {:?}, got {:?}",
            expected.shape, got.shape
        ));
    }
    let fmt_idx = |flat: usize| {
        let mut idx = vec![0; expected.shape.len()];
        let mut r = flat;
        for (d, &n) in expected.shape.iter().enumerate().rev() {
            idx[d] = r % n.max(1);
            r /= n.max(1);
        }
        idx
    };
    match (&expected.data, &got.data) {
        (Data::F(a), Data::F(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let ok = (x.is_nan() && y.is_nan())
                    || x == y
                    || (x - y).abs() <= tol.atol + tol.rtol * x.abs().max(y.abs());
                if !ok {
                    return Some(format!("at {:?}: expected {x}, got {y}", fmt_idx(i)));
                }
            }
            None
        }
        (Data::I(a), Data::I(b)) => a
            .iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .map(|i| format!("at {:?}: expected {}, got {}", fmt_idx(i), a[i], b[i])),
        (Data::B(a), Data::B(b)) => a
            .iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .map(|i| format!("at {:?}: expected {}, got {}", fmt_idx(i), a[i], b[i])),
        (a, b) => Some(format!(
            "kind: expected {:?}, got {:?}",
            kind_of(a),
            kind_of(b)
        )),
    }
}

fn kind_of(d: &Data) -> K {
    match d {
        Data::F(_) => K::F,
        Data::I(_) => K::I,
        Data::B(_) => K::B,
    }
}

// ------------------------------------------------------------------------------------------
// Configurations: which operands are mapped at which level, on which axis.
// ------------------------------------------------------------------------------------------

/// One vmap level.
#[derive(Clone, Debug)]
pub struct LevelCfg {
    pub size: usize,
    /// Per operand: `None` (not mapped) or the axis (may be negative).
    pub in_axes: Vec<Option<isize>>,
    /// Per output: the axis (may be negative).
    pub out_axes: Vec<isize>,
}

fn norm(axis: isize, rank: usize) -> usize {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    assert!(
        a >= 0 && (a as usize) < rank,
        "axis {axis} out of range for rank {rank}"
    );
    a as usize
}

/// Axis choices `{0, 1, -1}` valid for a tensor of `rank` (at least 1).
fn axis_choices(rank: usize) -> Vec<isize> {
    let mut v = vec![0isize, -1];
    if rank >= 3 {
        v.push(1);
    }
    v
}

/// Builds the levels (outermost first) given, per level, which operands are mapped.
pub fn make_levels(
    rng: &mut Rng,
    base_ranks: &[usize],
    out_ranks: &[usize],
    mapped: &[Vec<bool>],
    sizes: &[usize],
) -> Vec<LevelCfg> {
    let nl = mapped.len();
    let mut levels = Vec::with_capacity(nl);
    for l in 0..nl {
        let in_axes = (0..base_ranks.len())
            .map(|o| {
                if !mapped[l][o] {
                    return None;
                }
                // Rank of operand o as seen by level l: its base rank plus the levels >= l that map it.
                let rank = base_ranks[o] + (l..nl).filter(|&m| mapped[m][o]).count();
                Some(rng.choose(&axis_choices(rank)))
            })
            .collect();
        let out_axes = out_ranks
            .iter()
            .map(|&r| {
                let rank = r + (nl - l);
                rng.choose(&axis_choices(rank))
            })
            .collect();
        levels.push(LevelCfg {
            size: sizes[l],
            in_axes,
            out_axes,
        });
    }
    levels
}

/// Batched host inputs for `levels`: per-example shape with the mapped axes inserted
/// (innermost level first), values drawn for the full shape.
pub fn make_inputs(rng: &mut Rng, operands: &[Operand], levels: &[LevelCfg]) -> Vec<Host> {
    operands
        .iter()
        .enumerate()
        .map(|(o, spec)| {
            let mut shape = spec.shape.clone();
            for lvl in levels.iter().rev() {
                if let Some(a) = lvl.in_axes[o] {
                    let at = norm(a, shape.len() + 1);
                    shape.insert(at, lvl.size);
                }
            }
            Host::r#gen(&shape, &spec.r#gen, rng)
        })
        .collect()
}

/// An op under test: `f` maps per-example operands to per-example outputs.
pub type OpFn = fn(&P, Vec<T>) -> Vec<T>;

/// The oracle: loop over the examples of every level and stack.
pub fn oracle(
    f: &dyn Fn(Vec<T>) -> Vec<T>,
    args: &[Host],
    levels: &[LevelCfg],
    out_example: &[Host],
) -> Vec<Host> {
    let Some((lvl, rest)) = levels.split_first() else {
        return f(args.iter().map(Host::to_t).collect())
            .into_iter()
            .map(Host::from_t)
            .collect();
    };
    let mut per_example: Vec<Vec<Host>> = Vec::with_capacity(lvl.size);
    for i in 0..lvl.size {
        let args_i: Vec<Host> = args
            .iter()
            .zip(&lvl.in_axes)
            .map(|(a, ax)| match ax {
                Some(ax) => a.take(norm(*ax, a.shape.len()), i),
                None => a.clone(),
            })
            .collect();
        per_example.push(oracle(f, &args_i, rest, out_example));
    }
    (0..lvl.out_axes.len())
        .map(|k| {
            let parts: Vec<Host> = per_example.iter().map(|outs| outs[k].clone()).collect();
            // Shape of one part (for batch size 0): the example output with the inner levels.
            let mut part_shape = out_example[k].shape.clone();
            for l in rest.iter().rev() {
                let at = norm(l.out_axes[k], part_shape.len() + 1);
                part_shape.insert(at, l.size);
            }
            let empty = Host::zeros_like(&part_shape, out_example[k].kind());
            Host::stack(&parts, norm(lvl.out_axes[k], part_shape.len() + 1), &empty)
        })
        .collect()
}

/// The vmapped computation: one `vmap` per level.
pub fn vmapped(
    f: &dyn Fn(Vec<T>) -> Vec<T>,
    args: Vec<T>,
    levels: &[LevelCfg],
) -> Result<Vec<T>, VmapError> {
    vmapped_b::<V, V>(f, args, levels)
}

/// [`vmapped`] for any backends: arguments on `BI` (e.g. `Autodiff<V>`), results on `BO`.
pub fn vmapped_b<BI: BatchOps, BO: BatchOps>(
    f: &dyn Fn(Vec<T<BI>>) -> Vec<T<BO>>,
    args: Vec<T<BI>>,
    levels: &[LevelCfg],
) -> Result<Vec<T<BO>>, VmapError> {
    let Some((lvl, rest)) = levels.split_first() else {
        return Ok(f(args));
    };
    let in_axes = Spec::Seq(lvl.in_axes.iter().map(|a| Spec::Leaf(*a)).collect());
    let out_axes = Spec::Seq(lvl.out_axes.iter().map(|a| Spec::Leaf(Some(*a))).collect());
    // `Different`: random ops draw per example, like the loop (the cases' checks hold for any
    // draw).
    vmap(|a: Vec<T<BI>>| vmapped_b::<BI, BO>(f, a, rest).expect("inner vmap failed"))
        .randomness(burn_vmap::Randomness::Different)
        .in_axes(in_axes)
        .out_axes(out_axes)
        .call_as(args)
}

pub fn describe(operands: &[Operand], levels: &[LevelCfg], inputs: &[Host]) -> String {
    let mut s = String::new();
    for (o, spec) in operands.iter().enumerate() {
        let maps: Vec<String> = levels
            .iter()
            .enumerate()
            .filter_map(|(l, lvl)| lvl.in_axes[o].map(|a| format!("L{l}:axis {a}")))
            .collect();
        let _ = write!(
            s,
            "\n    arg{o}: {:?} per-example {:?}, {} -> batched shape {:?}",
            spec.r#gen.kind(),
            spec.shape,
            if maps.is_empty() {
                "unbatched".to_string()
            } else {
                maps.join(", ")
            },
            inputs[o].shape
        );
    }
    for (l, lvl) in levels.iter().enumerate() {
        let _ = write!(
            s,
            "\n    level {l}: size {}, out_axes {:?}",
            lvl.size, lvl.out_axes
        );
    }
    s
}

/// Number of configurations compared with the oracle (for the summary line).
pub static CONFIGS_CHECKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `f` over one configuration and compares with the oracle.
pub fn check_levels(
    name: &str,
    f: &dyn Fn(Vec<T>) -> Vec<T>,
    operands: &[Operand],
    levels: &[LevelCfg],
    out_example: &[Host],
    rng: &mut Rng,
    tol: Tol,
) -> Result<(), String> {
    CONFIGS_CHECKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let inputs = make_inputs(rng, operands, levels);
    let expected = oracle(f, &inputs, levels, out_example);
    let args: Vec<T> = inputs.iter().map(Host::to_t).collect();
    let got = match quietly(|| vmapped(f, args, levels)) {
        Ok(Ok(outs)) => outs.into_iter().map(Host::from_t).collect::<Vec<_>>(),
        Ok(Err(e)) => {
            return Err(format!(
                "{name}: vmap returned an error: {e}{}",
                describe(operands, levels, &inputs)
            ));
        }
        Err(msg) => {
            return Err(format!(
                "{name}: vmap panicked: {msg}{}",
                describe(operands, levels, &inputs)
            ));
        }
    };
    if got.len() != expected.len() {
        return Err(format!(
            "{name}: {} outputs, expected {}",
            got.len(),
            expected.len()
        ));
    }
    for (k, (e, g)) in expected.iter().zip(&got).enumerate() {
        if let Some(d) = diff(e, g, tol) {
            return Err(format!(
                "{name}: output {k}: {d}{}",
                describe(operands, levels, &inputs)
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Registered op cases and the runner.
// ------------------------------------------------------------------------------------------

/// An oracle test: a name, the required backend methods it exercises, its operands and op.
#[derive(Clone)]
pub struct OpCase {
    /// Oracle test name (unique).
    pub name: &'static str,
    /// Backend methods (of `FloatTensorOps`/`IntTensorOps`/`BoolTensorOps`) it exercises.
    pub covers: &'static [&'static str],
    /// Per-example ranks drawn for `P::rank`.
    pub ranks: RangeInclusive<usize>,
    /// Per-example operands for the drawn parameters.
    pub operands: fn(&P) -> Vec<Operand>,
    /// The op.
    pub f: OpFn,
    /// Float tolerance.
    pub tol: Tol,
    /// Also run with nested levels.
    pub nested: bool,
}

/// Builder shorthand.
pub fn case(
    name: &'static str,
    covers: &'static [&'static str],
    ranks: RangeInclusive<usize>,
    operands: fn(&P) -> Vec<Operand>,
    f: OpFn,
) -> OpCase {
    OpCase {
        name,
        covers,
        ranks,
        operands,
        f,
        tol: TOL,
        nested: true,
    }
}

/// Largest physical rank of the test backend (NdArray: 6).
pub const MAX_PHYSICAL_RANK: usize = 6;

/// Every configuration for one drawn `P`: all batched/unbatched mixes at one level (random
/// axes, sizes `1..=4`), a few two-level nestings (outer maps one operand and inner another,
/// both levels on the same operand, random mixes) and one three-level nesting.
pub fn check_case(case: &OpCase, p: &P) -> Result<(), String> {
    let operands = (case.operands)(p);
    let n = operands.len();
    let mut rng = Rng::new(p.seed);
    let f = |a: Vec<T>| (case.f)(p, a);

    // One example, unbatched: the output kinds and shapes.
    let example: Vec<Host> = operands
        .iter()
        .map(|o| Host::r#gen(&o.shape, &o.r#gen, &mut rng))
        .collect();
    let out_example: Vec<Host> = match quietly(|| {
        f(example.iter().map(Host::to_t).collect())
            .into_iter()
            .map(Host::from_t)
            .collect::<Vec<_>>()
    }) {
        Ok(o) => o,
        Err(msg) => {
            return Err(format!(
                "{}: the op itself panicked on unbatched inputs (test bug?): {msg}; operands {operands:?}",
                case.name
            ));
        }
    };
    let base_ranks: Vec<usize> = operands.iter().map(|o| o.shape.len()).collect();
    let out_ranks: Vec<usize> = out_example.iter().map(|h| h.shape.len()).collect();

    // NdArray supports physical ranks up to 6; every level adds one dim.
    let max_rank = base_ranks
        .iter()
        .chain(&out_ranks)
        .copied()
        .max()
        .unwrap_or(0);
    let max_levels = MAX_PHYSICAL_RANK.saturating_sub(max_rank);

    let mut configs: Vec<(Vec<Vec<bool>>, Vec<usize>)> = Vec::new();
    // Single level: every non-empty subset of mapped operands.
    for mask in 1u32..(1 << n) {
        let mapped: Vec<bool> = (0..n).map(|o| mask & (1 << o) != 0).collect();
        configs.push((vec![mapped], vec![1 + rng.below(4)]));
    }
    if case.nested {
        // Two levels: both on operand 0.
        let mut both = vec![false; n];
        both[0] = true;
        configs.push((
            vec![both.clone(), both],
            vec![1 + rng.below(3), 1 + rng.below(3)],
        ));
        if n >= 2 {
            // Outer maps operand 0, inner maps operand 1; and the reverse.
            let (mut a, mut b) = (vec![false; n], vec![false; n]);
            a[0] = true;
            b[1] = true;
            configs.push((
                vec![a.clone(), b.clone()],
                vec![1 + rng.below(3), 1 + rng.below(3)],
            ));
            configs.push((vec![b, a], vec![1 + rng.below(3), 1 + rng.below(3)]));
            // Two random mixes (each level maps at least one operand).
            for _ in 0..2 {
                let mut lv = || loop {
                    let m: Vec<bool> = (0..n).map(|_| rng.coin()).collect();
                    if m.iter().any(|&x| x) {
                        break m;
                    }
                };
                let (x, y) = (lv(), lv());
                configs.push((vec![x, y], vec![1 + rng.below(3), 1 + rng.below(3)]));
            }
        }
        // Three levels, random mixes, sizes 1..=2.
        let lv3: Vec<Vec<bool>> = (0..3)
            .map(|_| {
                loop {
                    let m: Vec<bool> = (0..n).map(|_| rng.coin()).collect();
                    if m.iter().any(|&x| x) {
                        break m;
                    }
                }
            })
            .collect();
        configs.push((
            lv3,
            vec![1 + rng.below(2), 1 + rng.below(2), 1 + rng.below(2)],
        ));
    }

    for (mapped, sizes) in configs {
        if mapped.len() > max_levels {
            continue;
        }
        let levels = make_levels(&mut rng, &base_ranks, &out_ranks, &mapped, &sizes);
        check_levels(
            case.name,
            &f,
            &operands,
            &levels,
            &out_example,
            &mut rng,
            case.tol,
        )?;
    }
    Ok(())
}

/// Number of proptest cases per op (`ORACLE_CASES` overrides): 16 on ndarray, 2 on the GPU
/// backends (every op is a kernel launch there, and CI runs them on a software Vulkan driver).
pub fn num_cases() -> u32 {
    let default = if cfg!(any(feature = "wgpu", feature = "cuda")) {
        2
    } else {
        16
    };
    std::env::var("ORACLE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Whether the unbatched op panics with "not implemented" in the test backend (NdArray lacks
/// `argtopk`, for example): such a case cannot have an oracle here.
pub fn backend_lacks(case: &OpCase) -> Option<String> {
    let p = P {
        d: vec![2, 3, 2, 3],
        rank: *case.ranks.end(),
        seed: 1,
    };
    let operands = (case.operands)(&p);
    let mut rng = Rng::new(1);
    let args: Vec<T> = operands
        .iter()
        .map(|o| Host::r#gen(&o.shape, &o.r#gen, &mut rng).to_t())
        .collect();
    match quietly(|| (case.f)(&p, args).into_iter().map(Host::from_t).count()) {
        Ok(_) => None,
        Err(msg) => msg.contains("not implemented").then_some(msg),
    }
}

/// Runs every case (filtered by `ORACLE_FILTER`, a substring of the name) under proptest and
/// fails listing **every** failing case with its shrunk counterexample.
pub fn run_cases(cases: Vec<OpCase>) {
    // Every op must have a real batching rule: the loop fallback panics in strict mode.
    burn_vmap::strict::set_strict(true);
    let filter = std::env::var("ORACLE_FILTER").ok();
    let mut failures = Vec::new();
    let mut skipped: Vec<&str> = Vec::new();
    let mut ran = 0;
    for case in cases {
        if let Some(f) = &filter
            && !case.name.contains(f.as_str())
        {
            continue;
        }
        ran += 1;
        if let Some(why) = backend_lacks(&case) {
            println!(
                "[{}] SKIPPED: the test backend lacks this op ({why})",
                case.name
            );
            skipped.push(case.name);
            continue;
        }
        let mut config = Config::with_cases(num_cases());
        config.failure_persistence = None;
        config.max_shrink_iters = 256;
        let mut runner = TestRunner::new(config);
        let result = runner.run(&shape_strategy(case.ranks.clone()), |p| {
            check_case(&case, &p).map_err(TestCaseError::fail)
        });
        if let Err(e) = result {
            failures.push(format!("[{}] {e}", case.name));
        }
    }
    println!(
        "oracle: {ran} cases run ({} skipped), {} configurations checked so far in this process",
        skipped.len(),
        CONFIGS_CHECKED.load(std::sync::atomic::Ordering::Relaxed)
    );
    if !failures.is_empty() {
        let mut msg = format!("{} of {ran} oracle cases failed:\n", failures.len());
        for f in &failures {
            msg.push_str(f);
            msg.push_str("\n\n");
        }
        println!("{msg}");
        panic!("{msg}");
    }
}
