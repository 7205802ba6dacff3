//! Accumulators: how [`micro_vmap`](crate::micro_vmap) and [`micro_grad`](crate::micro_grad)
//! combine per-example outputs (optax's `optax.microbatching.Accumulator`).
//!
//! An accumulator is four functions, applied leafwise over a tree prefix of the outputs:
//!
//! ```text
//! carry = None
//! for k in 0..num_real_microbatches:          # microbatch k holds rows k, k+n, k+2n, ...
//!     value = aggregate(vmap(f)(microbatch k)) # reduce the m rows of one microbatch
//!     if carry is None: carry = init(value)
//!     carry = update(carry, value, k)
//! result = finalize(carry)
//! # without a microbatch size: result = aggregate(vmap(f)(whole batch))
//! ```
//!
//! The built-ins are [`Sum`], [`Mean`], [`RunningMean`] and [`Concat`]. Write your own by
//! implementing [`Accumulator`] and wrapping it in [`Custom`] (or [`Acc::new`]) where an
//! accumulator tree is expected.
//!
//! # Accumulator trees
//! The accumulator given to a transform is a **prefix** of the output tree: one accumulator for
//! everything, or the output's own struct (deriving [`Tree`](crate::Tree)) holding accumulators where the
//! output holds tensors, or a tuple, or a [`Spec`](crate::tree::Spec). Accumulators are leaf-less trees, so the
//! same generic struct describes both:
//!
//! ```
//! use burn::tensor::Tensor;
//! use burn_vmap::accumulate::{Concat, Sum, Mean};
//! use burn_vmap::testing::TestBackend;
//! use burn_vmap::{micro_vmap, Vmap};
//! type B = Vmap<TestBackend>;
//! let device = Default::default();
//!
//! // Per example: (2v, sum(v)). Keep every 2v, sum the sums.
//! let f = |v: Tensor<B, 1>| (v.clone() * 2.0, v.sum());
//! let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], &device);
//! let (doubled, total): (Tensor<B, 2>, Tensor<B, 1>) = micro_vmap(f)
//!     .microbatch_size(2)
//!     .accumulator((Concat, Sum))
//!     .call(xs)
//!     .unwrap();
//! assert_eq!(doubled.dims(), [4, 2]);
//! assert_eq!(total.into_data().to_vec::<f32>().unwrap(), vec![36.0]);
//! ```
//!
//! This module holds the [`Accumulator`] trait and the built-ins; `erased.rs` holds their
//! type-erased form ([`Acc`]) and what the microbatched loop (`transform::micro`) runs on it.

mod erased;
mod output;

use burn::tensor::{Element, Tensor};
use burn_backend::backend::Backend;
use burn_backend::tensor::Ordered;

pub use erased::Acc;
pub(crate) use erased::{Flat, accumulator_spec, from_flat, to_flat};
pub use output::AccOutput;

/// Where an accumulator runs: the sizes of the microbatching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccContext {
    /// `B`: examples in the whole batch.
    pub batch_size: usize,
    /// `m`: examples per microbatch.
    pub microbatch_size: usize,
    /// `n = B / m`: microbatches in the batch (run or not).
    pub num_microbatches: usize,
}

/// Tensor kinds an accumulator handles: float and int ([`Ordered`] numeric kinds).
pub trait AccKind<B: Backend>: Ordered<B, Elem: Element> {}
impl<B: Backend, K: Ordered<B, Elem: Element>> AccKind<B> for K {}

/// How per-example outputs are combined across a batch (optax's `Accumulator`).
///
/// Every output leaf is seen as a matrix of `[rows, elements]`: an example's tensor of any
/// shape is flattened into one row. `aggregate` reduces the `m` rows of one microbatch,
/// `init` builds the carry from the first aggregated value, `update` folds microbatch `index`
/// into the carry, and `finalize` turns the carry into the result, which has one row (a
/// reduction, reshaped to the example's shape) or, when [`keeps_batch_axis`] is true, `B` rows
/// (reshaped to `[B, example shape...]`). The same methods serve float and int leaves (`K`);
/// bool leaves are accumulated as ints (0/1).
///
/// [`keeps_batch_axis`]: Accumulator::keeps_batch_axis
///
/// # Example: a running maximum
/// ```
/// use burn::tensor::{backend::Backend, Tensor};
/// use burn_vmap::accumulate::{AccContext, AccKind, Accumulator, Custom};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{micro_vmap, Vmap};
///
/// #[derive(Clone)]
/// struct Max;
/// impl Accumulator for Max {
///     fn name(&self) -> String { "max".into() }
///     fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
///         rows.max_dim(0)
///     }
///     fn init<B: Backend, K: AccKind<B>>(&self, value: &Tensor<B, 2, K>, _: &AccContext) -> Tensor<B, 2, K> {
///         Tensor::full(value.shape(), f32::NEG_INFINITY, &value.device())
///     }
///     fn update<B: Backend, K: AccKind<B>>(
///         &self, carry: Tensor<B, 2, K>, value: Tensor<B, 2, K>, _index: usize, _: &AccContext,
///     ) -> Tensor<B, 2, K> {
///         carry.max_pair(value)
///     }
/// }
///
/// type B = Vmap<TestBackend>;
/// let xs = Tensor::<B, 2>::from_floats([[3.0], [-1.0], [7.0], [2.0]], &Default::default());
/// // A custom accumulator's result type is named (`call_as`): it cannot follow from the types.
/// let m: Tensor<B, 1> = micro_vmap(|x: Tensor<B, 1>| x * 2.0)
///     .microbatch_size(2)
///     .accumulator(Custom(Max))
///     .call_as(xs)
///     .unwrap();
/// assert_eq!(m.into_data().to_vec::<f32>().unwrap(), vec![14.0]);
/// ```
pub trait Accumulator: Send + Sync + 'static {
    /// A short name for messages (`"sum"`, `"concat"`, ...).
    fn name(&self) -> String;

    /// Whether the result keeps the batch axis (`[B, ...]`, like [`Concat`]); otherwise it is
    /// one reduced example.
    fn keeps_batch_axis(&self) -> bool {
        false
    }

    /// Whether int outputs are converted to float before accumulating (like [`Mean`]).
    fn promotes_int(&self) -> bool {
        false
    }

    /// What [`aggregate`](Accumulator::aggregate) does, when it is one of the common row
    /// reductions: the library then reduces a leaf at its own rank instead of flattening it
    /// first (a copy on backends whose reshape copies). Keep the default, [`RowOp::Other`],
    /// unless `aggregate` is exactly that operation.
    fn row_op(&self) -> RowOp {
        RowOp::Other
    }

    /// Reduces the rows of one microbatch (`[m, elements]`): one row, or `m` rows when the
    /// accumulator keeps the batch axis.
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K>;

    /// The initial carry, given the first aggregated value (for its shape, kind and device).
    /// By default zeros like `value` (a running sum's start).
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let _ = ctx;
        value.zeros_like()
    }

    /// Folds the aggregated value of microbatch `index` into the carry. By default
    /// `carry + value` (a running sum).
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        index: usize,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let _ = (index, ctx);
        carry + value
    }

    /// The result from the final carry (the carry itself by default).
    fn finalize<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let _ = ctx;
        carry
    }
}

/// The common within-microbatch reductions (see [`Accumulator::row_op`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    /// The rows unchanged.
    Identity,
    /// The sum of the rows.
    Sum,
    /// The mean of the rows.
    Mean,
    /// Anything else: the library calls `aggregate` on the flattened rows.
    Other,
}

/// Sums over the batch (optax's `SUM`; `micro_grad`'s default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum;

/// Averages over the batch (optax's `MEAN`). With microbatching, the sum of the microbatch means
/// is divided by the TOTAL number of microbatches, even when fewer are run
/// (`num_real_microbatches`). Int outputs are averaged as floats. The mean of an empty batch is
/// NaN (0 / 0, as `jnp.mean`); [`Sum`] gives zeros and [`Concat`] an empty batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mean;

/// Averages the microbatches that actually run (optax's `RUNNING_MEAN`): the running mean
/// `c_{k+1} = c_k·k/(k+1) + o_k/(k+1)`; zero when none runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunningMean;

/// Keeps every example (optax's `CONCAT`; `micro_vmap`'s default): the result is `[B, ...]` in
/// the original order; rows of microbatches that were not run are zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Concat;

/// What [`Mean`] and [`RunningMean`] share: the mean of a microbatch's rows, ints averaged as
/// floats.
macro_rules! averaging {
    ($name:literal) => {
        fn name(&self) -> String {
            $name.into()
        }
        fn row_op(&self) -> RowOp {
            RowOp::Mean
        }
        fn promotes_int(&self) -> bool {
            true
        }
        fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
            rows.mean_dim(0)
        }
    };
}

impl Accumulator for Sum {
    fn name(&self) -> String {
        "sum".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Sum
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows.sum_dim(0)
    }
    // `init` and `update`: the default running sum.
}

impl Accumulator for Mean {
    averaging!("mean");
    // `init` and `update`: the default running sum.
    fn finalize<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        carry.div_scalar(ctx.num_microbatches.max(1) as f64)
    }
}

impl Accumulator for RunningMean {
    averaging!("running_mean");
    // `init`: the default zeros.
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        index: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        let k = index as f64;
        carry.mul_scalar(k / (k + 1.0)) + value.div_scalar(k + 1.0)
    }
}

impl Accumulator for Concat {
    fn name(&self) -> String {
        "concat".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Identity
    }
    fn keeps_batch_axis(&self) -> bool {
        true
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows
    }
    /// The carry is `[n, m·elements]`: row `k` holds microbatch `k`.
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let [m, e] = value.dims();
        Tensor::zeros([ctx.num_microbatches, m * e], &value.device())
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        index: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        let [m, e] = value.dims();
        carry.slice_assign([index..index + 1, 0..m * e], value.reshape([1, m * e]))
    }
    /// Row `k + j·n` of the result is row `j` of microbatch `k`: the original order.
    fn finalize<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        ctx: &AccContext,
    ) -> Tensor<B, 2, K> {
        let (n, m) = (ctx.num_microbatches, ctx.microbatch_size);
        let e = carry.dims()[1].checked_div(m).unwrap_or(0);
        if n * m * e == 0 {
            // (Burn's `reshape` reads a 0 as "keep this dim".)
            return Tensor::zeros([n * m, e], &carry.device());
        }
        carry.reshape([n, m, e]).swap_dims(0, 1).reshape([n * m, e])
    }
}

/// A user-defined [`Accumulator`] as a leaf of an accumulator tree.
///
/// Built-in accumulators are accumulator trees themselves; a type of yours becomes one through
/// this wrapper (Rust's coherence rules forbid a blanket impl). See [`Accumulator`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Custom<A>(pub A);
