//! [`checkpoint_chunked_scan`]: a scan whose backward pass recomputes each chunk.
//!
//! - `mod.rs`: the transform, its forward pass chunk by chunk, and how each chunk joins the
//!   outer graph;
//! - `chunk.rs`: one chunk's body, run forward without a graph and rerun with one;
//! - `tape.rs`: the custom autodiff nodes of a chunk (gate chain, outputs, taps, sinks);
//! - `recompute.rs`: a chunk's backward pass (its recomputation).

mod chunk;
mod recompute;
mod tape;

use std::sync::{Arc, Mutex};

use burn::tensor::TensorPrimitive;
use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::TensorMetadata;
use burn_backend::backend::Backend;
use burn_backend::tensor::FloatTensor;

use self::chunk::{ChunkBody, Input};
use self::recompute::recompute_chunk;
use self::tape::{ChunkOutput, ChunkTape, GateLink, TapeState, zeros1};
use super::run::{Ran, Step, check_xs, order};
use super::{LoopOptions, loop_options};
use crate::VmapError;
use crate::batching::record;
use crate::transform::columns;
use crate::tree::{Leaf, Tree, TreeDef, rows};

/// The transform's name in errors.
const NAME: &str = "checkpoint_chunked_scan";

/// A [`scan`](fn@super::super::scan) whose backward pass recomputes each chunk of `chunk_size` steps instead of keeping
/// every step's intermediates: powerpax's `checkpoint_chunked_scan`.
///
/// ```text
/// carry = init
/// for chunk in steps split every chunk_size steps (in execution order):
///     checkpoint(carry)                       # the only thing kept for the backward pass
///     for t in chunk:
///         carry, ys[t] = f(carry, xs[t])      # run without recording a graph
/// return (carry, stack(ys))
///
/// backward, chunk by chunk from the last:
///     rerun the chunk from its checkpoint, recording a graph; back-propagate the incoming
///     cotangents of its carry and ys into its input carry and its xs rows; drop that graph
/// ```
///
/// Values and gradients equal those of [`scan`](fn@super::super::scan) under `Autodiff<_>`; only the memory held
/// between the forward and the backward pass changes: about `n / chunk_size` carries (plus
/// `xs` and `ys`) instead of every step's intermediates, for one extra forward pass. Gradients
/// flow to `init`, to `xs` and through the returned carry and outputs. `chunk_size(None)` (the
/// default) checkpoints only at the start: one chunk of the whole length.
///
/// Runs on `Autodiff<B, _>` for any inner backend `B` (including `Vmap<_>`, for per-example
/// gradients through a checkpointed loop).
///
/// # Tensors the body captures
/// The recomputation rebuilds the graph of each chunk from its checkpoint alone, so a tensor
/// that requires gradients and that `f` **captures** (instead of receiving it through the carry
/// or `xs`) cannot get its gradient: the call fails with
/// [`VmapError::CapturedTrackedTensor`] rather than return a silently wrong gradient. Pass such
/// parameters in the carry and return them unchanged (their gradient is then computed, and is
/// the same as a plain scan's for a captured parameter). Captured tensors that do not require
/// gradients (constants) are fine. (A tracked tensor that `f` uses only in a detached way is
/// not detected and must not be captured either.)
///
/// # Implementation
/// burn-autodiff runs a backward pass while holding its graph's lock, so the reverse pass of a
/// recomputed chunk (a separate small graph) runs on a short-lived helper thread; its results
/// come back to the outer backward step before it continues. `f` must therefore be
/// `Send + Sync + 'static` (a `move` closure over owned values). Each such thread finishes when
/// the outer backward pass does, holding until then a copy of burn-autodiff's node table (its
/// size is that of the largest graph the process has built), so the backward pass costs about
/// `n / chunk_size` such copies on top of the carries: with a large plain graph built earlier
/// in the same process this can outweigh the savings of a small carry.
///
/// Measured (`cargo bench --bench scan`, fresh processes, NdArray): a 4,096-step scan with a
/// 256-float carry, forward + backward, peaks at 55.6 MiB as a plain scan and 12.7 MiB with
/// `chunk_size(Some(64))` (4.4x less), for about 1.1x the time.
///
/// # Example
/// ```
/// use burn::backend::Autodiff;
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::{checkpoint_chunked_scan, scan};
/// type B = Autodiff<TestBackend>;
/// let device = Default::default();
///
/// let step = |c: Tensor<B, 1>, x: Tensor<B, 1>| {
///     let c = (c * x).sin();
///     (c.clone(), c.sum())
/// };
/// let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let init = Tensor::<B, 1>::from_floats([0.5, -0.5], &device).require_grad();
///
/// let (c, _ys): (Tensor<B, 1>, Tensor<B, 2>) =
///     checkpoint_chunked_scan(step, init.clone(), xs.clone()).chunk_size(Some(2)).call().unwrap();
/// let g = init.grad(&c.sum().backward()).unwrap();
///
/// let (c, _ys): (Tensor<B, 1>, Tensor<B, 2>) = scan(step, init.clone(), xs).call().unwrap();
/// let expected = init.grad(&c.sum().backward()).unwrap();
/// g.into_data().assert_approx_eq::<f32>(&expected.into_data(), Default::default());
/// ```
///
/// # Errors
/// As [`scan`](fn@super::super::scan), and
/// - [`VmapError::ChunkSizeNotPositive`]: `chunk_size(Some(k))` with `k <= 0`;
/// - [`VmapError::CapturedTrackedTensor`]: `f` captures a tensor that requires gradients.
///
/// # Panics
/// If `f` panics during the recomputation (in the backward pass).
pub fn checkpoint_chunked_scan<F, C, XS>(f: F, init: C, xs: XS) -> CheckpointChunkedScan<F, C, XS> {
    CheckpointChunkedScan {
        f,
        init,
        xs,
        opts: LoopOptions::default(),
        chunk_size: None,
    }
}

/// A checkpointed scan being configured: see [`checkpoint_chunked_scan`].
pub struct CheckpointChunkedScan<F, C, XS> {
    f: F,
    init: C,
    xs: XS,
    opts: LoopOptions,
    chunk_size: Option<isize>,
}

/// The autodiff backend a checkpointed scan runs on.
pub(super) type Ad<B, CS> = Autodiff<B, CS>;
/// Leaves on the autodiff backend.
type AdLeaves<B, CS> = Vec<Leaf<Ad<B, CS>>>;
/// Leaves of one chunk's outputs, keyed by the chunk's first step index.
type Parts<B, CS> = Vec<(usize, AdLeaves<B, CS>)>;

pub(super) fn to_inner<B: Backend, CS: CheckpointStrategy>(leaf: Leaf<Ad<B, CS>>) -> Leaf<B> {
    match leaf {
        Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(t.tensor().primitive)),
        Leaf::Int(t) => Leaf::Int(t),
        Leaf::Bool(t) => Leaf::Bool(t),
    }
}

pub(super) fn from_inner<B: Backend, CS: CheckpointStrategy>(leaf: Leaf<B>) -> Leaf<Ad<B, CS>> {
    match leaf {
        Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(
            <Ad<B, CS> as AutodiffBackend>::from_inner(t.tensor()),
        )),
        Leaf::Int(t) => Leaf::Int(t),
        Leaf::Bool(t) => Leaf::Bool(t),
    }
}

pub(super) fn float_of<B: Backend>(leaf: &Leaf<B>) -> Option<FloatTensor<B>> {
    match leaf {
        Leaf::Float(t) => Some(t.clone().tensor()),
        _ => None,
    }
}

impl<F, C, XS> CheckpointChunkedScan<F, C, XS> {
    loop_options!();

    /// Checkpoints every `chunk_size` steps (`None`: only at the start). Must be positive; need
    /// not divide the length.
    pub fn chunk_size(mut self, chunk_size: Option<isize>) -> Self {
        self.chunk_size = chunk_size;
        self
    }

    /// Runs the loop on `Autodiff<B, CS>`; returns the final carry and the stacked outputs.
    /// Type parameters as in [`Scan::call`](super::Scan::call).
    ///
    /// # Errors
    /// See [`checkpoint_chunked_scan`].
    pub fn call<B, CS, X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        B: Backend,
        CS: CheckpointStrategy,
        C: Tree<Ad<B, CS>> + 'static,
        XS: Tree<Ad<B, CS>>,
        X: Tree<Ad<B, CS>> + 'static,
        Y: Tree<Ad<B, CS>> + 'static,
        YS: Tree<Ad<B, CS>>,
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
    {
        if let Some(k) = self.chunk_size.filter(|&k| k <= 0) {
            return Err(VmapError::ChunkSizeNotPositive {
                transform: NAME,
                chunk_size: k,
            });
        }
        let xs = check_xs::<Ad<B, CS>, XS>(NAME, self.xs, self.opts.length)?;
        let n = xs.length;
        let (carry_leaves, carry_def) = self.init.flatten();
        if n == 0 {
            let init = C::unflatten_named(&carry_def, carry_leaves, "init")?;
            return Step::<Ad<B, CS>, C, X, Y, F>::new(NAME, &self.f).empty(init, &xs);
        }
        let chunk = self.chunk_size.map_or(n, |k| k as usize);
        let f = Arc::new(self.f);
        let steps: Vec<usize> = order(n, self.opts.reverse).collect();
        let mut carry = carry_leaves;
        let mut parts: Parts<B, CS> = Vec::new();
        let mut y_def: Option<TreeDef> = None;
        for chunk_steps in steps.chunks(chunk) {
            let lo = *chunk_steps.iter().min().expect("non-empty chunk");
            let hi = *chunk_steps.iter().max().expect("non-empty chunk") + 1;
            let body = Arc::new(ChunkBody {
                f: f.clone(),
                carry_def: carry_def.clone(),
                x_def: xs.def.clone(),
                steps: chunk_steps.to_vec(),
                lo,
            });
            let slab: Vec<Leaf<Ad<B, CS>>> = xs
                .leaves
                .iter()
                .map(|l| l.clone().slice_axis(0, rows(lo..hi)))
                .collect();
            let slab_inner: Vec<Leaf<B>> = slab.iter().cloned().map(to_inner).collect();
            let carry_inner: Vec<Leaf<B>> = carry.iter().cloned().map(to_inner).collect();
            let out = body.forward::<B, CS, C, X, Y>(&carry_inner, &slab_inner)?;
            y_def.get_or_insert_with(|| out.y_def.clone());
            let (carry_out, ys_inner) = stacked_inner::<B, CS>(out, &body.steps);
            let inputs = tracked_inputs::<B, CS>(&carry, &slab);
            let ys = if inputs.is_empty() {
                carry = carry_out.into_iter().map(from_inner).collect();
                ys_inner.into_iter().map(from_inner).collect()
            } else {
                let chunk = TrackedChunk {
                    body,
                    carry_inner,
                    slab_inner,
                    inputs,
                };
                let (c, ys) = chunk.connect::<C, X, Y>(carry_out, ys_inner);
                carry = c;
                ys
            };
            parts.push((lo, ys));
        }
        let y_def = y_def.expect("at least one chunk ran");
        let carry = C::unflatten_named(&carry_def, carry, "carry")?;
        Ok((carry, YS::unflatten_named(&y_def, cat_parts(parts), "ys")?))
    }
}

/// A chunk's outputs on the inner backend: its carry, and every output leaf stacked by
/// increasing step index.
fn stacked_inner<B: Backend, CS: CheckpointStrategy>(
    out: Ran<Ad<B, CS>>,
    steps: &[usize],
) -> (Vec<Leaf<B>>, Vec<Leaf<B>>) {
    let carry_out: Vec<Leaf<B>> = out.carry.into_iter().map(to_inner).collect();
    let mut rows: Vec<(usize, Vec<Leaf<B>>)> = steps
        .iter()
        .copied()
        .zip(out.ys)
        .map(|(t, y)| (t, y.into_iter().map(to_inner).collect()))
        .collect();
    rows.sort_by_key(|(t, _)| *t);
    let width = rows[0].1.len();
    let ys_inner = columns(rows.into_iter().map(|(_, row)| row), width)
        .into_iter()
        .map(Leaf::stack)
        .collect();
    (carry_out, ys_inner)
}

/// The tracked float inputs of a chunk (carry leaves, then rows of `xs`), in chain order.
fn tracked_inputs<B: Backend, CS: CheckpointStrategy>(
    carry: &[Leaf<Ad<B, CS>>],
    slab: &[Leaf<Ad<B, CS>>],
) -> Vec<(Input, FloatTensor<Ad<B, CS>>)> {
    let mut inputs = Vec::new();
    for (i, leaf) in carry.iter().enumerate() {
        if let Some(t) = float_of(leaf).filter(|t| t.is_tracked()) {
            inputs.push((Input::Carry(i), t));
        }
    }
    for (j, leaf) in slab.iter().enumerate() {
        if let Some(t) = float_of(leaf).filter(|t| t.is_tracked()) {
            inputs.push((Input::Xs(j), t));
        }
    }
    inputs
}

/// A chunk with tracked inputs, run forward: what its backward pass needs.
struct TrackedChunk<B: Backend, CS: CheckpointStrategy, F> {
    body: Arc<ChunkBody<F>>,
    carry_inner: Vec<Leaf<B>>,
    slab_inner: Vec<Leaf<B>>,
    inputs: Vec<(Input, FloatTensor<Ad<B, CS>>)>,
}

impl<B: Backend, CS: CheckpointStrategy, F> TrackedChunk<B, CS, F> {
    /// Wires the chunk's outputs into the outer graph: a gate chain over the tracked inputs,
    /// whose backward recomputes the chunk, and every float output a node on that gate.
    /// Returns the carry and the stacked outputs on the autodiff backend.
    fn connect<C, X, Y>(
        self,
        carry_out: Vec<Leaf<B>>,
        ys_inner: Vec<Leaf<B>>,
    ) -> (AdLeaves<B, CS>, AdLeaves<B, CS>)
    where
        C: Tree<Ad<B, CS>> + 'static,
        X: Tree<Ad<B, CS>> + 'static,
        Y: Tree<Ad<B, CS>> + 'static,
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
    {
        let Self {
            body,
            carry_inner,
            slab_inner,
            inputs,
        } = self;
        // Float outputs: carry leaves, then ys leaves.
        let float_outputs: Vec<(bool, usize)> = carry_out
            .iter()
            .enumerate()
            .filter(|(_, l)| matches!(l, Leaf::Float(_)))
            .map(|(i, _)| (true, i))
            .chain(
                ys_inner
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| matches!(l, Leaf::Float(_)))
                    .map(|(i, _)| (false, i)),
            )
            .collect();
        let first = &inputs[0].1.primitive;
        let (device, dtype) = (B::float_device(first), first.dtype());
        let recompute = recompute_chunk::<B, CS, C, X, Y, F>(
            body.clone(),
            carry_inner,
            slab_inner,
            inputs.iter().map(|(r, _)| *r).collect(),
            float_outputs.clone(),
            (device.clone(), dtype),
        );
        let tape = Arc::new(ChunkTape {
            state: Mutex::new(TapeState {
                cotangents: vec![None; float_outputs.len()],
                recompute: Some(recompute),
                grads: Vec::new(),
            }),
        });
        let mut gate = <Ad<B, CS> as AutodiffBackend>::from_inner(zeros1::<B>(&device, dtype));
        for (k, (_, input)) in inputs.iter().enumerate() {
            let link = zeros1::<B>(&device, dtype);
            gate = record::<B, CS, _, 2>(GateLink, [&gate, input], (tape.clone(), k, dtype), link);
        }
        let output = |i: usize, value: FloatTensor<B>| -> Leaf<Ad<B, CS>> {
            let t = record::<B, CS, _, 1>(ChunkOutput, [&gate], (tape.clone(), i, dtype), value);
            Leaf::Float(TensorPrimitive::Float(t))
        };
        let mut next = 0;
        let mut wrap = |leaf: Leaf<B>| match leaf {
            Leaf::Float(t) => {
                next += 1;
                output(next - 1, t.tensor())
            }
            other => from_inner(other),
        };
        let carry = carry_out.into_iter().map(&mut wrap).collect();
        let ys = ys_inner.into_iter().map(&mut wrap).collect();
        (carry, ys)
    }
}

/// The chunks' stacked outputs, concatenated in step order.
fn cat_parts<B: Backend, CS: CheckpointStrategy>(mut parts: Parts<B, CS>) -> AdLeaves<B, CS> {
    parts.sort_by_key(|(lo, _)| *lo);
    if parts.len() == 1 {
        return parts.pop().expect("one part").1;
    }
    let width = parts[0].1.len();
    columns(parts.into_iter().map(|(_, part)| part), width)
        .into_iter()
        .map(|c| Leaf::cat(c, 0))
        .collect()
}
