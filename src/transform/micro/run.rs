//! The microbatched loop shared by `micro_vmap` and `micro_grad`: strided microbatches, each
//! run by the vectorizer and folded into the accumulators.

use burn::tensor::Tensor;
use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice};

use super::VmapFn;
use crate::VmapError;
use crate::accumulate::{Acc, AccContext, Flat, RowOp, from_flat, to_flat};
use crate::batching::BatchOps;
use crate::transform::axes::{Axes, Mapped};
use crate::tree::{DynTree, Leaf, Spec, Tree, TreeDef, rows};

/// Rows `k, k+n, ..., k+(m-1)n` of axis `axis` (optax's strided microbatches).
fn microbatch<B: Backend>(leaf: Leaf<B>, axis: usize, k: usize, n: usize, m: usize) -> Leaf<B> {
    if n == 1 {
        return leaf;
    }
    // Rows k, k + n, ..., k + (m - 1) n: one strided slice, no copy of the whole batch.
    let rows = Slice::new(k as isize, Some((k + (m - 1) * n + 1) as isize), n as isize);
    leaf.slice_axis(axis, rows)
}

/// No rows of axis `axis` (to learn the output structure when no microbatch runs).
fn no_rows<B: Backend>(leaf: Leaf<B>, axis: usize) -> Leaf<B> {
    leaf.slice_axis(axis, rows(0..0))
}

/// The microbatching settings of `micro_vmap` and `micro_grad` (the builders' options that do not
/// change their type).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Microbatching {
    /// Examples per microbatch (`None`: one vmap over the whole batch).
    pub(super) microbatch_size: Option<usize>,
    /// Microbatches run (`None`: all).
    pub(super) num_real_microbatches: Option<usize>,
}

/// The setters of [`Microbatching`], for a builder holding it at the given field path.
macro_rules! microbatching_setters {
    ($($field:ident).+) => {
        /// Examples per microbatch (`None`, the default: one vectorized pass over the whole
        /// batch). Must divide the batch.
        pub fn microbatch_size(mut self, size: impl Into<Option<usize>>) -> Self {
            self.$($field).+.microbatch_size = size.into();
            self
        }

        /// Runs only the first `n` microbatches (ignored without a microbatch size). See also
        /// [`call_with`](Self::call_with), which changes it per call.
        pub fn num_real_microbatches(mut self, n: Option<usize>) -> Self {
            self.$($field).+.num_real_microbatches = n;
            self
        }
    };
}
pub(super) use microbatching_setters;

/// The microbatched loop shared by `micro_vmap` and `micro_grad`: runs `f` with `vmap_fn`
/// on each microbatch and folds the outputs with the accumulator spec `acc`.
pub(super) fn run_microbatched<BI, BO, A, R, F, V>(
    f: &F,
    vmap_fn: &V,
    in_axes: &Axes,
    mapped: Mapped<BI>,
    micro: Microbatching,
    acc: &Spec<Acc<BO>>,
) -> Result<DynTree<BO>, VmapError>
where
    BI: BatchOps,
    BO: BatchOps,
    F: Fn(A) -> R,
    A: Tree<BI>,
    R: Tree<BO>,
    V: VmapFn,
{
    let Some(m) = micro.microbatch_size else {
        // One vmap over the whole batch.
        let whole = DynTree {
            leaves: mapped.leaves,
            def: mapped.def,
        };
        return accumulate_whole(vmap_fn.apply(f, in_axes, whole)?, acc);
    };
    let (ctx, runs) = microbatches(mapped.size, m, micro.num_real_microbatches)?;
    let n = ctx.num_microbatches;
    let select = |sel: &dyn Fn(Leaf<BI>, usize) -> Leaf<BI>| DynTree {
        leaves: mapped
            .leaves
            .iter()
            .zip(&mapped.axes)
            .map(|(leaf, axis)| match axis {
                Some(a) => sel(leaf.clone(), *a),
                None => leaf.clone(),
            })
            .collect(),
        def: mapped.def.clone(),
    };
    let mut fold: Option<Fold<BO>> = None;
    for k in 0..runs {
        let out: DynTree<BO> =
            vmap_fn.apply(f, in_axes, select(&|leaf, a| microbatch(leaf, a, k, n, m)))?;
        if fold.is_none() {
            let accs = acc.broadcast_to(&out.def, "accumulator", "out")?;
            fold = Some(Fold::new(out.def.clone(), accs, ctx));
        }
        fold.as_mut().expect("set above").add(k, out.leaves);
    }
    let fold = match fold {
        Some(fold) => fold,
        None => {
            // No microbatch runs: learn the output structure from a vmap over zero rows.
            let out: DynTree<BO> =
                vmap_fn.apply(f, in_axes, select(&|leaf, a| no_rows(leaf, a)))?;
            let accs = acc.broadcast_to(&out.def, "accumulator", "out")?;
            Fold::empty(out, accs, ctx)
        }
    };
    fold.finish()
}

/// Each accumulator's within-batch reduction of the outputs of one vmap over the whole batch.
fn accumulate_whole<B: Backend>(
    out: DynTree<B>,
    acc: &Spec<Acc<B>>,
) -> Result<DynTree<B>, VmapError> {
    let accs = acc.broadcast_to(&out.def, "accumulator", "out")?;
    let leaves = out
        .leaves
        .into_iter()
        .zip(&accs)
        .map(|(leaf, a)| {
            if a.row_op() == RowOp::Identity && a.keeps_batch_axis() {
                // Concat of one vmap: the vmap's output itself.
                return leaf;
            }
            let (value, example, was_bool) = a.aggregate_leaf(leaf);
            from_flat(value, &example, a.keeps_batch_axis(), was_bool)
        })
        .collect();
    Ok(DynTree {
        leaves,
        def: out.def,
    })
}

/// The sizes of the microbatching of a batch of `b` examples in microbatches of `m`, and the
/// number of microbatches that run.
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

/// The accumulators of the output leaves across microbatches: per leaf, its accumulator, one
/// example's shape (and whether it was bool), its carry and, when no microbatch ran, a
/// zero-row output ([`Concat`](crate::accumulate::Concat)'s template).
struct Fold<B: Backend> {
    ctx: AccContext,
    def: TreeDef,
    accs: Vec<Acc<B>>,
    examples: Vec<(Vec<usize>, bool)>,
    carries: Vec<Carry<B>>,
    templates: Vec<Option<Leaf<B>>>,
}

impl<B: Backend> Fold<B> {
    /// Before the first microbatch.
    fn new(def: TreeDef, accs: Vec<Acc<B>>, ctx: AccContext) -> Self {
        Self {
            ctx,
            def,
            accs,
            examples: Vec::new(),
            carries: Vec::new(),
            templates: Vec::new(),
        }
    }

    /// Folds the output leaves of microbatch `k`.
    fn add(&mut self, k: usize, leaves: Vec<Leaf<B>>) {
        let ctx = &self.ctx;
        for (i, leaf) in leaves.into_iter().enumerate() {
            let acc = &self.accs[i];
            if acc.is_builtin_concat() {
                // Concat keeps the microbatches as they are and orders them once at the end.
                if k == 0 {
                    self.examples.push((leaf.shape()[1..].to_vec(), false));
                    self.carries.push(Carry::Parts(vec![leaf]));
                    self.templates.push(None);
                } else if let Carry::Parts(parts) = &mut self.carries[i] {
                    parts.push(leaf);
                }
                continue;
            }
            let (value, example, was_bool) = acc.aggregate_leaf(leaf);
            if k == 0 {
                self.examples.push((example, was_bool));
                let carry = acc.init(&value, ctx);
                self.carries
                    .push(Carry::Flat(Some(acc.update(carry, value, k, ctx))));
                self.templates.push(None);
            } else if let Carry::Flat(slot) = &mut self.carries[i] {
                let carry = slot.take().expect("set at k = 0");
                *slot = Some(acc.update(carry, value, k, ctx));
            }
        }
    }

    /// When no microbatch runs: from the output of a vmap over zero rows, every accumulator
    /// starts from a microbatch of zeros' shape.
    fn empty(out: DynTree<B>, accs: Vec<Acc<B>>, ctx: AccContext) -> Self {
        let mut fold = Self::new(out.def, accs, ctx);
        for (i, leaf) in out.leaves.into_iter().enumerate() {
            let acc = &fold.accs[i];
            if acc.is_builtin_concat() {
                fold.examples.push((leaf.shape()[1..].to_vec(), false));
                fold.carries.push(Carry::Parts(Vec::new()));
                fold.templates.push(Some(leaf));
                continue;
            }
            let (flat, example, was_bool) = to_flat(leaf);
            let zeros = flat.zeros_rows(ctx.microbatch_size);
            let value = acc.aggregate(zeros);
            fold.examples.push((example, was_bool));
            fold.carries.push(Carry::Flat(Some(acc.init(&value, &ctx))));
            fold.templates.push(None);
        }
        fold
    }

    /// The accumulated outputs.
    fn finish(self) -> Result<DynTree<B>, VmapError> {
        let (n, m) = (self.ctx.num_microbatches, self.ctx.microbatch_size);
        let paths = self.def.leaf_paths("out");
        let mut leaves = Vec::with_capacity(self.carries.len());
        for ((((carry, a), (example, was_bool)), path), template) in self
            .carries
            .into_iter()
            .zip(&self.accs)
            .zip(&self.examples)
            .zip(&paths)
            .zip(self.templates)
        {
            let carry = match carry {
                Carry::Parts(parts) => {
                    leaves.push(concat_parts(parts, template, n, m));
                    continue;
                }
                Carry::Flat(c) => c.expect("one carry per leaf"),
            };
            let result = a.finalize(carry, &self.ctx);
            let want = if a.keeps_batch_axis() {
                self.ctx.batch_size
            } else {
                1
            };
            if result.rows() != want {
                return Err(VmapError::AccumulatorRows {
                    path: path.clone(),
                    accumulator: a.name(),
                    expected: want,
                    got: result.rows(),
                });
            }
            leaves.push(from_flat(result, example, a.keeps_batch_axis(), *was_bool));
        }
        Ok(DynTree {
            leaves,
            def: self.def,
        })
    }
}

/// An accumulator's state across microbatches.
enum Carry<B: Backend> {
    /// The accumulator's own carry (a `[rows, elements]` matrix).
    Flat(Option<Flat<B>>),
    /// [`Concat`](crate::accumulate::Concat): the microbatch outputs `[m, ...]` so far, at their own rank and kind.
    Parts(Vec<Leaf<B>>),
}

/// [`Concat`](crate::accumulate::Concat)'s result from the outputs of the microbatches that ran: zeros for those that did
/// not, then row `k + j·n` = row `j` of microbatch `k` (the original order). One `cat` and one
/// `select`, whatever the number of microbatches.
fn concat_parts<B: Backend>(
    mut parts: Vec<Leaf<B>>,
    template: Option<Leaf<B>>,
    n: usize,
    m: usize,
) -> Leaf<B> {
    let template = match (parts.first(), template) {
        (Some(first), _) => first.clone(),
        (None, Some(t)) => t,
        (None, None) => unreachable!("a template exists when no microbatch ran"),
    };
    if n * m == 0 {
        // An empty batch: the zero-row output.
        return no_rows(template, 0);
    }
    if parts.len() < n {
        let mut dims = template.shape().to_vec();
        dims[0] = (n - parts.len()) * m;
        parts.push(template.zeros_like(Shape::from(dims)));
    }
    let stacked = Leaf::cat(parts, 0);
    if n == 1 || m == 1 {
        return stacked;
    }
    // stacked row k·m + j holds example j of microbatch k, which belongs at row j·n + k.
    let perm: Vec<i32> = (0..n * m).map(|r| ((r % n) * m + r / n) as i32).collect();
    let idx = Tensor::<B, 1, burn::tensor::Int>::from_ints(perm.as_slice(), &stacked.device())
        .into_primitive();
    stacked.select(0, idx)
}
