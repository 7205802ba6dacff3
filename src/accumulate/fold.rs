//! Running an accumulator tree over the outputs of a microbatched transform: which reductions
//! the batched run makes itself ([`Reduce`]), one pass over the whole batch
//! ([`whole_batch`]), and the fold across microbatches ([`Fold`]), on user tensors.

use burn::tensor::Device;
use burn_backend::Shape;
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_dispatch::Dispatch;

use super::erased::Flat;
use super::{Acc, AccContext, RowOp};
use crate::VmapError;
use crate::graph::TensorSig;
use crate::tree::Leaf;

/// How a batched run hands one output leaf back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduce {
    /// Summed over the examples on the batching engine: `[1, example...]`.
    Sum,
    /// Cast to the backend's widest float, then summed as [`Reduce::Sum`] ([`super::WideSum`]).
    WideSum,
    /// Averaged over the examples on the batching engine: `[1, example...]`.
    Mean,
    /// Every example's row: `[m, example...]`.
    Rows,
}

/// How each output leaf (accumulator `accs[i]`, one example's signature `sigs[i]`) leaves a
/// batched run of `size` examples: the built-in row reductions of float leaves run on the
/// engine (where a factored per-example gradient is summed as one matrix product); the rest
/// come back as rows.
pub(crate) fn reduce_plan(accs: &[Acc], sigs: &[TensorSig], size: usize) -> Vec<Reduce> {
    accs.iter()
        .zip(sigs)
        .map(|(acc, sig)| match acc.row_op() {
            _ if size == 0 || !sig.dtype.is_float() => Reduce::Rows,
            RowOp::Sum => Reduce::Sum,
            RowOp::WideSum => Reduce::WideSum,
            RowOp::Mean => Reduce::Mean,
            RowOp::Identity | RowOp::Other => Reduce::Rows,
        })
        .collect()
}

/// `rows` zero examples of signature `sig`: `[rows, example...]` on `device`.
pub(crate) fn zero_rows(sig: &TensorSig, rows: usize, device: &Device) -> Leaf {
    let mut dims = sig.shape.to_vec();
    dims.insert(0, rows);
    let shape = Shape::from(dims);
    let device = device.as_dispatch();
    let dtype = sig.dtype;
    Leaf(if dtype.is_float() {
        Dispatch::float_zeros(shape, device, dtype.into())
    } else if dtype.is_bool() {
        Dispatch::bool_zeros(shape, device, dtype.into())
    } else {
        Dispatch::int_zeros(shape, device, dtype.into())
    })
}

/// An output leaf as one aggregated value: reduced already by the batched run, or its rows
/// through the accumulator's `aggregate`.
fn aggregated(acc: &Acc, leaf: Leaf, reduce: Reduce) -> Flat {
    let (flat, _, _) = Flat::of_leaf(leaf);
    match reduce {
        Reduce::Rows => acc.aggregate(flat),
        Reduce::Sum | Reduce::WideSum | Reduce::Mean => flat,
    }
}

/// Checks a result has the rows its accumulator promises: 1, or the batch when it keeps it.
fn check_rows(acc: &Acc, path: &str, got: usize, batch_size: usize) -> Result<(), VmapError> {
    let expected = if acc.keeps_batch_axis() {
        batch_size
    } else {
        1
    };
    if got != expected {
        return Err(VmapError::AccumulatorRows {
            path: path.to_string(),
            accumulator: acc.name(),
            expected,
            got,
        });
    }
    Ok(())
}

/// The outputs of a transform, leaf by leaf: what accumulates each, one example's signature,
/// and its path for messages.
#[derive(Clone, Copy)]
pub(crate) struct Outputs<'a> {
    pub(crate) accs: &'a [Acc],
    pub(crate) sigs: &'a [TensorSig],
    pub(crate) paths: &'a [String],
}

/// Each accumulator's `aggregate` of the outputs of one batched run over the whole batch
/// (no microbatch size): `leaves` as [`reduce_plan`] `plan` says the run returns them.
///
/// # Errors
/// [`VmapError::AccumulatorRows`] when a custom accumulator returns the wrong number of rows.
pub(crate) fn whole_batch(
    outs: Outputs<'_>,
    leaves: Vec<Leaf>,
    plan: &[Reduce],
    batch_size: usize,
) -> Result<Vec<Leaf>, VmapError> {
    let mut out = Vec::with_capacity(leaves.len());
    for (i, leaf) in leaves.into_iter().enumerate() {
        let (acc, sig) = (&outs.accs[i], &outs.sigs[i]);
        if acc.is_builtin_concat() {
            // Concat of one run: the rows themselves.
            out.push(leaf);
            continue;
        }
        let value = aggregated(acc, leaf, plan[i]);
        check_rows(acc, &outs.paths[i], value.rows(), batch_size)?;
        out.push(value.into_leaf(&sig.shape, acc.keeps_batch_axis(), sig.dtype.is_bool()));
    }
    Ok(out)
}

/// The accumulators of the output leaves across microbatches (optax's loop): one carry per
/// leaf, started by the first microbatch that runs.
pub(crate) struct Fold<'a> {
    ctx: AccContext,
    outs: Outputs<'a>,
    device: Device,
    carries: Vec<Option<Carry>>,
}

/// An accumulator's state across microbatches.
enum Carry {
    /// The accumulator's own carry (a `[rows, elements]` matrix).
    Flat(Box<Flat>),
    /// [`Concat`](super::Concat): the microbatch outputs `[m, ...]` so far, at their own rank
    /// and kind.
    Parts(Vec<Leaf>),
}

impl<'a> Fold<'a> {
    /// Before the first microbatch; `device` holds the zeros of microbatches that do not run.
    pub(crate) fn new(outs: Outputs<'a>, ctx: AccContext, device: Device) -> Self {
        Self {
            ctx,
            outs,
            device,
            carries: outs.accs.iter().map(|_| None).collect(),
        }
    }

    /// Folds the outputs of microbatch `k` (as [`reduce_plan`] `plan` says the run returns
    /// them).
    pub(crate) fn add(&mut self, k: usize, leaves: Vec<Leaf>, plan: &[Reduce]) {
        let ctx = &self.ctx;
        for (i, leaf) in leaves.into_iter().enumerate() {
            let acc = &self.outs.accs[i];
            let slot = &mut self.carries[i];
            if acc.is_builtin_concat() {
                // Concat keeps the microbatches as they are and orders them once at the end.
                match slot {
                    Some(Carry::Parts(parts)) => parts.push(leaf),
                    _ => *slot = Some(Carry::Parts(vec![leaf])),
                }
                continue;
            }
            let value = aggregated(acc, leaf, plan[i]);
            let carry = match slot.take() {
                Some(Carry::Flat(c)) => *c,
                _ => acc.init(&value, ctx),
            };
            *slot = Some(Carry::Flat(Box::new(acc.update(carry, value, k, ctx))));
        }
    }

    /// The accumulated outputs. An accumulator whose microbatches never ran starts from the
    /// aggregate of a microbatch of zeros (optax's `init` of a zero microbatch).
    ///
    /// # Errors
    /// [`VmapError::AccumulatorRows`] when a custom accumulator returns the wrong number of rows.
    pub(crate) fn finish(self) -> Result<Vec<Leaf>, VmapError> {
        let ctx = self.ctx;
        let (n, m) = (ctx.num_microbatches, ctx.microbatch_size);
        let mut out = Vec::with_capacity(self.carries.len());
        for (i, carry) in self.carries.into_iter().enumerate() {
            let (acc, sig) = (&self.outs.accs[i], &self.outs.sigs[i]);
            let carry = match carry {
                Some(Carry::Parts(parts)) => {
                    out.push(concat_parts(parts, sig, n, m, &self.device));
                    continue;
                }
                None if acc.is_builtin_concat() => {
                    out.push(concat_parts(Vec::new(), sig, n, m, &self.device));
                    continue;
                }
                Some(Carry::Flat(c)) => *c,
                None => {
                    let zeros = zero_rows(sig, m, &self.device);
                    let value = aggregated(acc, zeros, Reduce::Rows);
                    acc.init(&value, &ctx)
                }
            };
            let result = acc.finalize(carry, &ctx);
            check_rows(acc, &self.outs.paths[i], result.rows(), ctx.batch_size)?;
            out.push(result.into_leaf(&sig.shape, acc.keeps_batch_axis(), sig.dtype.is_bool()));
        }
        Ok(out)
    }
}

/// [`Concat`](super::Concat)'s result from the outputs of the microbatches that ran: zeros for
/// those that did not, then row `k + j·n` = row `j` of microbatch `k` (the original order). One
/// `cat` and one transpose, whatever the number of microbatches.
fn concat_parts(
    mut parts: Vec<Leaf>,
    sig: &TensorSig,
    n: usize,
    m: usize,
    device: &Device,
) -> Leaf {
    if n * m == 0 {
        return zero_rows(sig, 0, device);
    }
    if parts.len() < n {
        parts.push(zero_rows(sig, (n - parts.len()) * m, device));
    }
    let stacked = Leaf::cat(parts, 0);
    if n == 1 || m == 1 {
        return stacked;
    }
    // stacked row k·m + j holds example j of microbatch k, which belongs at row j·n + k:
    // [n, m, ...] -> [m, n, ...] -> [m·n, ...].
    let example = sig.shape.to_vec();
    let split: Vec<usize> = [n, m].into_iter().chain(example.iter().copied()).collect();
    let joined: Vec<usize> = [n * m].into_iter().chain(example).collect();
    stacked
        .reshape(split.into())
        .move_axis(0, 1)
        .reshape(joined.into())
}
