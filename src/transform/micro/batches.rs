//! The microbatched loop shared by `micro_vmap` and `micro_grad`: strided microbatches, each
//! run as one batched computation (a step), its outputs folded into the accumulators.

use burn::tensor::Device;
use burn_backend::Slice;

use crate::VmapError;
use crate::accumulate::{AccContext, Fold, Outputs, Reduce, reduce_plan, whole_batch, zero_rows};
use crate::transform::axes::Mapped;
use crate::tree::Leaf;

/// The microbatching settings of `micro_vmap` and `micro_grad` (the builders' options that do
/// not change their type).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Microbatching {
    /// Examples per microbatch (`None`: one batched run over the whole batch).
    pub(super) microbatch_size: Option<usize>,
    /// Microbatches run (`None`: all).
    pub(super) num_real_microbatches: Option<usize>,
}

/// Rows `k, k+n, ..., k+(m-1)n` of axis `axis` (optax's strided microbatches): one strided
/// slice, no copy of the batch.
fn microbatch(leaf: &Leaf, axis: usize, k: usize, n: usize, m: usize) -> Leaf {
    if n == 1 {
        return leaf.clone();
    }
    let rows = Slice::new(k as isize, Some((k + (m - 1) * n + 1) as isize), n as isize);
    leaf.clone().slice_axis(axis, rows)
}

/// The sizes of the microbatching of a batch of `b` examples in microbatches of `m`, and the
/// number of microbatches that run.
///
/// # Errors
/// [`VmapError::NonDividingMicrobatchSize`], [`VmapError::NumRealMicrobatchesOutOfRange`].
fn microbatches(
    b: usize,
    m: usize,
    num_real: Option<usize>,
) -> Result<(AccContext, usize), VmapError> {
    if m == 0 || !b.is_multiple_of(m) {
        return Err(VmapError::NonDividingMicrobatchSize {
            batch_size: b,
            microbatch_size: m,
        });
    }
    let n = b / m;
    let runs = num_real.unwrap_or(n);
    if runs > n {
        return Err(VmapError::NumRealMicrobatchesOutOfRange {
            num_real_microbatches: runs,
            num_microbatches: n,
        });
    }
    let ctx = AccContext {
        batch_size: b,
        microbatch_size: m,
        num_microbatches: n,
    };
    Ok((ctx, runs))
}

/// The microbatched loop:
///
/// ```text
/// no microbatch size: aggregate(step(whole batch))            (zeros rows for an empty batch)
/// else, for k in 0..num_real_microbatches:
///     fold(k, step(rows k, k+n, ... of every mapped argument))
/// finish the fold (microbatches not run: optax's zeros)
/// ```
///
/// `step(leaves, m, plan)` runs one batched computation over `m` examples and returns every
/// output leaf as `plan` says ([`Reduce`]); `outs` says how the outputs accumulate.
///
/// # Errors
/// The microbatching's errors, the step's, and the accumulators'.
pub(super) fn run_microbatched(
    args: &Mapped,
    micro: Microbatching,
    outs: Outputs<'_>,
    device: &Device,
    mut step: impl FnMut(Vec<Leaf>, usize, &[Reduce]) -> Result<Vec<Leaf>, VmapError>,
) -> Result<Vec<Leaf>, VmapError> {
    let b = args.size;
    let Some(m) = micro.microbatch_size else {
        let plan = reduce_plan(outs.accs, outs.sigs, b);
        let leaves = if b == 0 {
            outs.sigs.iter().map(|s| zero_rows(s, 0, device)).collect()
        } else {
            step(args.leaves.clone(), b, &plan)?
        };
        return whole_batch(outs, leaves, &plan, b);
    };
    let (ctx, runs) = microbatches(b, m, micro.num_real_microbatches)?;
    let n = ctx.num_microbatches;
    let plan = reduce_plan(outs.accs, outs.sigs, m);
    let mut fold = Fold::new(outs, ctx, device.clone());
    for k in 0..runs {
        let leaves = args
            .leaves
            .iter()
            .zip(&args.axes)
            .map(|(leaf, axis)| match axis {
                Some(a) => microbatch(leaf, *a, k, n, m),
                None => leaf.clone(),
            })
            .collect();
        fold.add(k, step(leaves, m, &plan)?, &plan);
    }
    fold.finish()
}
