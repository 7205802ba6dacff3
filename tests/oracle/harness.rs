//! The oracle's building blocks: quiet panics, deterministic randomness, operand
//! specifications, the drawn case parameters and rank-erased tensors ([`T`]).
//!
//! Every choice of a case (op parameters, operand values, the batched/unbatched mix, axes,
//! sizes) derives from the seed proptest draws, so a failure shrinks and replays.

#![allow(dead_code)]

use std::ops::RangeInclusive;

use burn::tensor::kind::{Basic, TensorKind};
use burn::tensor::{Bool, Int, Tensor};
use burn_vmap::tree::{Leaf, Leaves, TreeDef};
use burn_vmap::{Tree, VmapError};
use proptest::prelude::*;

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

/// Operand with a given generator.
pub fn op(shape: &[usize], r#gen: Gen) -> Operand {
    Operand {
        shape: shape.to_vec(),
        r#gen,
    }
}
/// Float operand in `[-2, 2]`.
pub fn fl(shape: &[usize]) -> Operand {
    op(shape, Gen::F(-2.0, 2.0))
}
/// Int operand in `[-4, 4]`.
pub fn it(shape: &[usize]) -> Operand {
    op(shape, Gen::I(-4, 4))
}
/// Index operand in `0..bound`.
pub fn idx(shape: &[usize], bound: usize) -> Operand {
    op(shape, Gen::I(0, bound as i64 - 1))
}
/// Bool operand.
pub fn bo(shape: &[usize]) -> Operand {
    op(shape, Gen::B)
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

/// A rank-erased Burn 0.22 tensor (one tree leaf): what the op closures take and return, on the
/// user's device in the loop and on the capture device while `vmap` records.
#[derive(Clone, Debug)]
pub struct T(pub Leaf);

impl Tree for T {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(self.0);
        TreeDef::Leaf
    }
    fn unflatten_from(_def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        Ok(T(leaves.next_leaf()?))
    }
}

impl<const D: usize, Kd: TensorKind + Basic> From<Tensor<D, Kd>> for T {
    fn from(t: Tensor<D, Kd>) -> Self {
        T(Leaf::new(t))
    }
}

impl T {
    pub fn rank(&self) -> usize {
        self.0.shape().num_dims()
    }
    pub fn dims(&self) -> Vec<usize> {
        self.0.shape().to_vec()
    }
    pub fn kind(&self) -> K {
        match self.0.kind_name() {
            "float" => K::F,
            "int" => K::I,
            _ => K::B,
        }
    }
    #[track_caller]
    fn get<const D: usize, Kd: TensorKind + Basic>(&self, what: &str) -> Tensor<D, Kd> {
        self.0.clone().into_tensor().unwrap_or_else(|_| {
            panic!(
                "expected a {what} tensor of rank {D}, got {:?} of rank {}",
                self.kind(),
                self.rank()
            )
        })
    }
    /// As a float tensor of rank `D`.
    #[track_caller]
    pub fn f<const D: usize>(&self) -> Tensor<D> {
        self.get("float")
    }
    /// As an int tensor of rank `D`.
    #[track_caller]
    pub fn i<const D: usize>(&self) -> Tensor<D, Int> {
        self.get("int")
    }
    /// As a bool tensor of rank `D`.
    #[track_caller]
    pub fn b<const D: usize>(&self) -> Tensor<D, Bool> {
        self.get("bool")
    }
}

/// `y`, typed like `x` (pins inferred const ranks).
pub fn same<X>(_x: &X, y: X) -> X {
    y
}

/// Runs `$body` with `$x` (and `$y`, `$z`) bound to `$t` (`$u`, `$w`) as tensors of `$t`'s
/// rank (0..=4; 1..=4 for three operands), via accessors `f`, `i`, `b`, and wraps the result
/// in a [`T`].
macro_rules! ranked {
    (@arm $r:literal, $t:ident, $acc:ident, $x:ident, $body:expr) => {{
        let $x = $t.$acc::<$r>();
        $crate::harness::T::from($body)
    }};
    ($t:expr, $acc:ident, |$x:ident| $body:expr) => {{
        let t: &$crate::harness::T = &$t;
        match t.rank() {
            0 => ranked!(@arm 0, t, $acc, $x, $body),
            1 => ranked!(@arm 1, t, $acc, $x, $body),
            2 => ranked!(@arm 2, t, $acc, $x, $body),
            3 => ranked!(@arm 3, t, $acc, $x, $body),
            4 => ranked!(@arm 4, t, $acc, $x, $body),
            r => panic!("ranked!: rank {r} not supported"),
        }
    }};
    ($t:expr, $acc:ident, $u:expr, $acc2:ident, |$x:ident, $y:ident| $body:expr) => {{
        let t: &$crate::harness::T = &$t;
        let u: &$crate::harness::T = &$u;
        macro_rules! arm2 {
            ($r:literal) => {{
                let $x = t.$acc::<$r>();
                let $y = u.$acc2::<$r>();
                $crate::harness::T::from($body)
            }};
        }
        match t.rank() {
            0 => arm2!(0),
            1 => arm2!(1),
            2 => arm2!(2),
            3 => arm2!(3),
            4 => arm2!(4),
            r => panic!("ranked!: rank {r} not supported"),
        }
    }};
    ($t:expr, $acc:ident, $u:expr, $acc2:ident, $w:expr, $acc3:ident,
     |$x:ident, $y:ident, $z:ident| $body:expr) => {{
        let t: &$crate::harness::T = &$t;
        let u: &$crate::harness::T = &$u;
        let w: &$crate::harness::T = &$w;
        macro_rules! arm3 {
            ($r:literal) => {{
                let $x = t.$acc::<$r>();
                let $y = u.$acc2::<$r>();
                let $z = w.$acc3::<$r>();
                $crate::harness::T::from($body)
            }};
        }
        match t.rank() {
            1 => arm3!(1),
            2 => arm3!(2),
            3 => arm3!(3),
            4 => arm3!(4),
            r => panic!("ranked!: rank {r} not supported"),
        }
    }};
}
