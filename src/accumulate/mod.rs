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
//! Where each step runs: `aggregate` of the built-in row reductions ([`Sum`], [`Mean`],
//! [`RunningMean`] on float outputs) runs on the batching engine, inside the microbatch's batched
//! computation, so a per-example weight gradient held factored is summed over the examples as
//! one matrix product; every other `aggregate`, and `init`, `update` and `finalize`, run on
//! ordinary Burn tensors between microbatches.
//!
//! # Accumulator trees
//! The accumulator given to a transform is a **prefix** of the output tree: one accumulator for
//! everything, or the output's own struct (deriving [`Tree`](crate::Tree)) holding accumulators
//! where the output holds tensors, or a tuple, or a [`Spec`](crate::tree::Spec). Accumulators
//! are leaf-less trees, so the same generic struct describes both:
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use burn_vmap::accumulate::{Concat, Sum};
//! use burn_vmap::micro_vmap;
//! let device = Device::default();
//!
//! // Per example: (2v, sum(v)). Keep every 2v, sum the sums.
//! let f = |v: Tensor<1>| (v.clone() * 2.0, v.sum());
//! let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], &device);
//! let (doubled, total) = micro_vmap(f)
//!     .microbatch_size(2)
//!     .accumulator((Concat, Sum))
//!     .call(xs)
//!     .unwrap();
//! assert_eq!(doubled.dims(), [4, 2]);
//! assert_eq!(total.into_data().to_vec::<f32>().unwrap(), vec![36.0]);
//! ```
//!
//! This module holds the [`Accumulator`] trait and the built-ins; `erased.rs` holds their
//! type-erased form ([`Acc`]), `fold.rs` what the microbatched loop runs on it, `output.rs` the
//! result types ([`AccOutput`]).

mod erased;
mod fold;
mod output;

use burn::tensor::Tensor;
use burn::tensor::kind::Ordered;

pub use erased::Acc;
pub(crate) use erased::accumulator_spec;
pub(crate) use fold::{Fold, Outputs, Reduce, reduce_plan, whole_batch, zero_rows};
pub use output::AccOutput;

/// Where an accumulator runs: the sizes of the microbatching.
///
/// ```
/// use burn_vmap::accumulate::AccContext;
/// let ctx = AccContext { batch_size: 8, microbatch_size: 2, num_microbatches: 4 };
/// assert_eq!(ctx.batch_size, ctx.microbatch_size * ctx.num_microbatches);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccContext {
    /// `B`: examples in the whole batch.
    pub batch_size: usize,
    /// `m`: examples per microbatch.
    pub microbatch_size: usize,
    /// `n = B / m`: microbatches in the batch (run or not).
    pub num_microbatches: usize,
}

/// Tensor kinds an accumulator handles: float and int (Burn's ordered kinds).
///
/// ```
/// use burn::tensor::{Float, Int};
/// use burn_vmap::accumulate::AccKind;
/// fn handles<K: AccKind>() {}
/// handles::<Float>();
/// handles::<Int>();
/// ```
pub trait AccKind: Ordered {}
impl<K: Ordered> AccKind for K {}

/// How per-example outputs are combined across a batch (optax's `Accumulator`).
///
/// Every output leaf is seen as a matrix of `[rows, elements]`: an example's tensor of any
/// shape is flattened into one row. `aggregate` reduces the `m` rows of one microbatch,
/// `init` builds the carry from the first aggregated value, `update` folds microbatch `index`
/// into the carry, and `finalize` turns the carry into the result, which has one row (a
/// reduction, reshaped to the example's shape) or, when [`keeps_batch_axis`] is true, `B` rows
/// (reshaped to `[B, example shape...]`). The same methods serve float and int leaves (`K`);
/// bool leaves are accumulated as ints (0/1). They are ordinary Burn 0.22 tensor code.
///
/// [`keeps_batch_axis`]: Accumulator::keeps_batch_axis
///
/// # Example: a running maximum
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::accumulate::{AccContext, AccKind, Accumulator, Custom};
/// use burn_vmap::micro_vmap;
///
/// #[derive(Clone)]
/// struct Max;
/// impl Accumulator for Max {
///     fn name(&self) -> String { "max".into() }
///     fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
///         rows.max_dim(0)
///     }
///     fn init<K: AccKind>(&self, value: &Tensor<2, K>, _: &AccContext) -> Tensor<2, K> {
///         Tensor::full(value.shape(), f32::NEG_INFINITY, &value.device())
///     }
///     fn update<K: AccKind>(
///         &self, carry: Tensor<2, K>, value: Tensor<2, K>, _index: usize, _: &AccContext,
///     ) -> Tensor<2, K> {
///         carry.max_pair(value)
///     }
/// }
///
/// let xs = Tensor::<2>::from_floats([[3.0], [-1.0], [7.0], [2.0]], &Device::default());
/// // A custom accumulator's result type is named (`call_as`): it cannot follow from the types.
/// let m: Tensor<1> = micro_vmap(|x: Tensor<1>| x * 2.0)
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
    /// reductions: the library then reduces a float leaf on the batching engine, inside the
    /// microbatch's batched computation (a factored per-example gradient summed as one matrix
    /// product), instead of calling `aggregate` on its flattened rows. Keep the default,
    /// [`RowOp::Other`], unless `aggregate` is exactly that operation.
    fn row_op(&self) -> RowOp {
        RowOp::Other
    }

    /// Reduces the rows of one microbatch (`[m, elements]`): one row, or `m` rows when the
    /// accumulator keeps the batch axis.
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K>;

    /// The initial carry, given the first aggregated value (for its shape, kind and device).
    /// By default zeros like `value` (a running sum's start).
    fn init<K: AccKind>(&self, value: &Tensor<2, K>, ctx: &AccContext) -> Tensor<2, K> {
        let _ = ctx;
        value.zeros_like()
    }

    /// Folds the aggregated value of microbatch `index` into the carry. By default
    /// `carry + value` (a running sum).
    fn update<K: AccKind>(
        &self,
        carry: Tensor<2, K>,
        value: Tensor<2, K>,
        index: usize,
        ctx: &AccContext,
    ) -> Tensor<2, K> {
        let _ = (index, ctx);
        carry + value
    }

    /// The result from the final carry (the carry itself by default).
    fn finalize<K: AccKind>(&self, carry: Tensor<2, K>, ctx: &AccContext) -> Tensor<2, K> {
        let _ = ctx;
        carry
    }
}

/// The common within-microbatch reductions (see [`Accumulator::row_op`]).
///
/// ```
/// use burn_vmap::accumulate::{Accumulator, Mean, RowOp, Sum};
/// assert_eq!(Sum.row_op(), RowOp::Sum);
/// assert_eq!(Mean.row_op(), RowOp::Mean);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    /// The rows unchanged.
    Identity,
    /// The sum of the rows.
    Sum,
    /// The sum of the rows in the widest float dtype of the backend (see [`WideSum`]).
    WideSum,
    /// The mean of the rows.
    Mean,
    /// Anything else: the library calls `aggregate` on the flattened rows.
    Other,
}

/// Sums over the batch (optax's `SUM`; `micro_grad`'s default).
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::{accumulate::Sum, micro_vmap};
/// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Device::default());
/// let s = micro_vmap(|x: Tensor<1>| x).microbatch_size(2).accumulator(Sum).call(xs).unwrap();
/// assert_eq!(s.into_data().to_vec::<f32>().unwrap(), vec![10.0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum;

/// Sums over the batch in the widest float dtype the backend has: `f64` on Flex and CUDA,
/// `f32` on wgpu (WGSL has no `f64`). Float results are of that dtype; int results are summed
/// as ints. Each example's float output is cast (exactly) before the sum over the examples and
/// the sum across microbatches, so the rounding of the sum does not grow with the batch as an
/// `f32` sum's does (at most `B·2⁻⁵³` relative, against `B·2⁻²⁴`); a factored per-example weight
/// gradient stays factored (its factors are cast, and summed as one `f64` matrix product).
///
/// What the DP mechanism sums its clipped per-example gradients with (the sensitivity of the
/// released sum is their clipping norm up to that rounding).
///
/// ```
/// use burn::tensor::{DType, Device, Tensor};
/// use burn_vmap::accumulate::{Sum, WideSum};
/// use burn_vmap::micro_vmap;
/// // f32 steps by 8 at 1e8: an f32 sum rounds the three ones away.
/// let xs = Tensor::<2>::from_floats([[1e8], [1.0], [1.0], [1.0]], &Device::default());
/// let wide: Tensor<1> = micro_vmap(|x: Tensor<1>| x)
///     .microbatch_size(2)
///     .accumulator(WideSum)
///     .call_as(xs.clone())
///     .unwrap();
/// assert_eq!(wide.dtype(), DType::F64); // on Flex
/// assert_eq!(wide.into_data().to_vec::<f64>().unwrap(), vec![100_000_003.0]);
/// let narrow = micro_vmap(|x: Tensor<1>| x).accumulator(Sum).call(xs).unwrap();
/// let narrow = narrow.into_data().to_vec::<f32>().unwrap()[0];
/// assert_ne!(f64::from(narrow), 100_000_003.0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WideSum;

/// Averages over the batch (optax's `MEAN`). With microbatching, the sum of the microbatch means
/// is divided by the TOTAL number of microbatches, even when fewer are run
/// (`num_real_microbatches`). Int outputs are averaged as floats. The mean of an empty batch is
/// NaN (0 / 0, as `jnp.mean`); [`Sum`] gives zeros and [`Concat`] an empty batch.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::{accumulate::Mean, micro_vmap};
/// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Device::default());
/// // Microbatches {1, 3} and {2, 4}; only the first runs, and the mean divides by both.
/// let m = micro_vmap(|x: Tensor<1>| x)
///     .microbatch_size(2)
///     .num_real_microbatches(Some(1))
///     .accumulator(Mean)
///     .call(xs)
///     .unwrap();
/// assert_eq!(m.into_data().to_vec::<f32>().unwrap(), vec![1.0]); // (1 + 3) / 2 / 2
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mean;

/// Averages the microbatches that actually run (optax's `RUNNING_MEAN`): the running mean
/// `c_{k+1} = c_k·k/(k+1) + o_k/(k+1)`; zero when none runs.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::{accumulate::RunningMean, micro_vmap};
/// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Device::default());
/// let m = micro_vmap(|x: Tensor<1>| x)
///     .microbatch_size(2)
///     .num_real_microbatches(Some(1))
///     .accumulator(RunningMean)
///     .call(xs)
///     .unwrap();
/// assert_eq!(m.into_data().to_vec::<f32>().unwrap(), vec![2.0]); // (1 + 3) / 2
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunningMean;

/// Keeps every example (optax's `CONCAT`; `micro_vmap`'s default): the result is `[B, ...]` in
/// the original order; rows of microbatches that were not run are zero.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::{accumulate::Concat, micro_vmap};
/// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Device::default());
/// let all = micro_vmap(|x: Tensor<1>| x * 10.0)
///     .microbatch_size(2)
///     .num_real_microbatches(Some(1)) // rows 0 and 2
///     .accumulator(Concat)
///     .call(xs)
///     .unwrap();
/// assert_eq!(all.into_data().to_vec::<f32>().unwrap(), vec![10.0, 0.0, 30.0, 0.0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Concat;

impl Accumulator for Sum {
    fn name(&self) -> String {
        "sum".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Sum
    }
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
        rows.sum_dim(0)
    }
    // `init` and `update`: the default running sum.
}

impl Accumulator for WideSum {
    fn name(&self) -> String {
        "wide_sum".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::WideSum
    }
    /// The rows summed (a float leaf reaches this only as `f64` rows, on a backend whose widest
    /// float is the leaf's own; the engine sums float leaves itself).
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
        rows.sum_dim(0)
    }
    // `init` and `update`: the default running sum, in the dtype of the aggregated values.
}

impl Accumulator for Mean {
    fn name(&self) -> String {
        "mean".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Mean
    }
    fn promotes_int(&self) -> bool {
        true
    }
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
        rows.mean_dim(0)
    }
    // `init` and `update`: the default running sum.
    /// `n = 0` only for an empty batch: `0 / 0`, NaN, as without a microbatch size (the mean
    /// of no example, `jnp.mean`'s).
    fn finalize<K: AccKind>(&self, carry: Tensor<2, K>, ctx: &AccContext) -> Tensor<2, K> {
        carry.div_scalar(ctx.num_microbatches as f64)
    }
}

impl Accumulator for RunningMean {
    fn name(&self) -> String {
        "running_mean".into()
    }
    fn row_op(&self) -> RowOp {
        RowOp::Mean
    }
    fn promotes_int(&self) -> bool {
        true
    }
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
        rows.mean_dim(0)
    }
    // `init`: the default zeros.
    fn update<K: AccKind>(
        &self,
        carry: Tensor<2, K>,
        value: Tensor<2, K>,
        index: usize,
        _: &AccContext,
    ) -> Tensor<2, K> {
        let k = index as f64;
        carry.mul_scalar(k / (k + 1.0)) + value.div_scalar(k + 1.0)
    }
    /// The running mean; of an empty batch (no microbatch, `n = 0`) NaN, the mean of no
    /// example, as [`Mean`]'s and as without a microbatch size.
    fn finalize<K: AccKind>(&self, carry: Tensor<2, K>, ctx: &AccContext) -> Tensor<2, K> {
        if ctx.num_microbatches == 0 {
            carry.div_scalar(0.0)
        } else {
            carry
        }
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
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
        rows
    }
    /// The carry is `[n, m·elements]`: row `k` holds microbatch `k`.
    fn init<K: AccKind>(&self, value: &Tensor<2, K>, ctx: &AccContext) -> Tensor<2, K> {
        let [m, e] = value.dims();
        Tensor::zeros(
            [ctx.num_microbatches, m * e],
            (&value.device(), value.dtype()),
        )
    }
    fn update<K: AccKind>(
        &self,
        carry: Tensor<2, K>,
        value: Tensor<2, K>,
        index: usize,
        _: &AccContext,
    ) -> Tensor<2, K> {
        let [m, e] = value.dims();
        carry.slice_assign([index..index + 1, 0..m * e], value.reshape([1, m * e]))
    }
    /// Row `k + j·n` of the result is row `j` of microbatch `k`: the original order.
    fn finalize<K: AccKind>(&self, carry: Tensor<2, K>, ctx: &AccContext) -> Tensor<2, K> {
        let (n, m) = (ctx.num_microbatches, ctx.microbatch_size);
        let e = carry.dims()[1].checked_div(m).unwrap_or(0);
        if n * m * e == 0 {
            return Tensor::zeros([n * m, e], (&carry.device(), carry.dtype()));
        }
        carry.reshape([n, m, e]).swap_dims(0, 1).reshape([n * m, e])
    }
}

/// A user-defined [`Accumulator`] as a leaf of an accumulator tree.
///
/// Built-in accumulators are accumulator trees themselves; a type of yours becomes one through
/// this wrapper (Rust's coherence rules forbid a blanket impl). See [`Accumulator`].
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::accumulate::{AccKind, Accumulator, Custom};
/// use burn_vmap::micro_vmap;
///
/// /// The sum of squares of the rows.
/// #[derive(Clone)]
/// struct SumSq;
/// impl Accumulator for SumSq {
///     fn name(&self) -> String { "sum_sq".into() }
///     fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
///         (rows.clone() * rows).sum_dim(0)
///     }
/// }
/// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0]], &Device::default());
/// let s: Tensor<1> = micro_vmap(|x: Tensor<1>| x)
///     .microbatch_size(1)
///     .accumulator(Custom(SumSq))
///     .call_as(xs)
///     .unwrap();
/// assert_eq!(s.into_data().to_vec::<f32>().unwrap(), vec![14.0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Custom<A>(pub A);
