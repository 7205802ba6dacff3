//! [`checkpoint_chunked_scan`]: a scan whose backward pass recomputes each chunk.
//!
//! - `mod.rs`: the transform, and its forward pass chunk by chunk;
//! - `chunk.rs`: one chunk's body, run forward without a graph, and how its outputs join the
//!   user's graph;
//! - `tape.rs`: the custom autodiff nodes of a chunk (gate chain, outputs, taps, sinks);
//! - `recompute.rs`: a chunk's backward pass (its recomputation).

mod chunk;
mod recompute;
mod tape;

use std::marker::PhantomData;
use std::sync::Arc;

use burn::tensor::Device;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::TensorMetadata;
use burn_backend::backend::AutodiffBackend;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_dispatch::{Dispatch, DispatchKindConversion, DispatchTensor};

use self::chunk::{AdBackend, ChunkBody, Input, NAME, ad_of, leaf_of, plain_prim};
use self::recompute::recompute_chunk;
use self::tape::{ChunkOutput, ChunkTape, GateLink, zeros1};
use super::builder::{Checkpointed, Scan};
use super::run::{Body, StepFn, Xs, order, stack_ys};
use crate::VmapError;
use crate::batching::record;
use crate::runtime::{AutodiffJob, UserBackend, detach, is_capture, on_autodiff_backend};
use crate::transform::draws::seeded;
use crate::tree::{Leaf, Lift, Tree, TreeDef, rows};

/// A [`scan`](fn@super::scan) whose backward pass recomputes each chunk of `chunk_size` steps
/// instead of keeping every step's intermediates: powerpax's `checkpoint_chunked_scan`.
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
/// Values and gradients equal those of [`scan`](fn@super::scan); only the memory held between
/// the forward and the backward pass changes: about `n / chunk_size` carries (plus `xs` and
/// `ys`) instead of every step's intermediates, for one extra forward pass. Gradients flow to
/// `init`, to `xs` and through the returned carry and outputs. `chunk_size(None)` (the default)
/// checkpoints only at the start: one chunk of the whole length.
///
/// # Where it checkpoints
/// - On the user's tensors on an **autodiff device** (`Device::autodiff()`), the loop is
///   checkpointed as above, with Burn's own `backward`.
/// - On a device without autodiff, it is a plain [`scan`](fn@super::scan) (nothing to keep).
/// - Inside a function that a transform records (a per-example loss of
///   [`per_example_grads`](crate::per_example_grads), a `vmap`), the steps are recorded with
///   the function and differentiated with it: the values and per-example gradients are those
///   of the scan, but the transform's backward pass keeps every step's intermediates.
///
/// # Random values
/// A body that draws (a `Dropout` in training mode, `random_like`) draws the same values when
/// its chunk is recomputed, so the gradient is that of the values returned. The forward pass
/// runs on the autodiff device without a graph (a layer that acts only on an autodiff device,
/// `Dropout`, acts as in `scan`), and before a chunk with tracked inputs runs, the device's
/// generator is seeded with a seed drawn from it (a seeded run stays reproducible); the
/// recomputation seeds it with that seed again, then goes on from a fresh one. That costs, a
/// chunk, forward and backward, a read of four integers from the device and a wait for the
/// chunk's work. Checkpointed scans on several threads take turns for these sections; another
/// thread that draws from the same generator (Burn's generators are one per backend and
/// process) while a chunk runs makes the two passes' draws differ.
///
/// # Tensors the body captures
/// The recomputation rebuilds the graph of each chunk from its checkpoint alone, so a tensor
/// that requires gradients and that `f` **captures** (instead of receiving it through the carry
/// or `xs`) cannot get its gradient: the call fails with
/// [`VmapError::CapturedTrackedTensor`] rather than return a silently wrong gradient. Pass such
/// parameters in the carry and return them unchanged (their gradient is then computed, and is
/// the same as a plain scan's for a captured parameter). Captured tensors that do not require
/// gradients (constants) are fine.
///
/// # Implementation
/// burn-autodiff runs a backward pass while holding its graph's lock, so the reverse pass of a
/// recomputed chunk (a separate small graph) runs on a short-lived helper thread; its results
/// come back to the outer backward step before it continues. `f` must therefore be
/// `Send + Sync + 'static` (a `move` closure over owned values).
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::{checkpoint_chunked_scan, scan};
/// let device = Device::default().autodiff();
///
/// let step = |c: Tensor<1>, x: Tensor<1>| {
///     let c = (c * x).sin();
///     (c.clone(), c.sum())
/// };
/// let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let init = Tensor::<1>::from_floats([0.5, -0.5], &device).require_grad();
///
/// let (c, _ys) = checkpoint_chunked_scan(step, init.clone(), xs.clone())
///     .chunk_size(Some(2))
///     .call()
///     .unwrap();
/// let g = init.grad(&c.sum().backward()).unwrap();
///
/// let (c, _ys) = scan(step, init.clone(), xs).call().unwrap();
/// let expected = init.grad(&c.sum().backward()).unwrap();
/// g.into_data().assert_approx_eq::<f32>(&expected.into_data(), Default::default());
/// ```
///
/// # Errors
/// As [`scan`](fn@super::scan), and
/// - [`VmapError::ChunkSizeNotPositive`]: `chunk_size(Some(k))` with `k <= 0`;
/// - [`VmapError::CapturedTrackedTensor`]: `f` captures a tensor that requires gradients.
///
/// # Panics
/// If `f` panics during the recomputation (in the backward pass).
pub fn checkpoint_chunked_scan<F, C, XS>(f: F, init: C, xs: XS) -> Scan<F, C, XS, Checkpointed> {
    Scan::with_mode(f, init, xs, Checkpointed::default())
}

impl<F, C, XS> Scan<F, C, XS, Checkpointed> {
    /// Checkpoints every `chunk_size` steps (`None`: only at the start). Must be positive; need
    /// not divide the length.
    pub fn chunk_size(mut self, chunk_size: Option<isize>) -> Self {
        self.mode.chunk_size = chunk_size;
        self
    }

    /// Runs the loop; returns the final carry and the stacked outputs. Type parameters as in
    /// [`Scan::call`](super::Scan::call).
    ///
    /// # Errors
    /// See [`checkpoint_chunked_scan`].
    pub fn call<X, Y>(self) -> Result<(C, Y::Lifted), VmapError>
    where
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
        C: Tree + 'static,
        XS: Tree,
        X: Tree + 'static,
        Y: Tree + Lift + 'static,
        Y::Lifted: Tree,
    {
        self.call_as::<X, Y, Y::Lifted>()
    }

    /// As [`call`](Self::call), with the type `YS` of the stacked outputs named by the caller.
    ///
    /// # Errors
    /// See [`checkpoint_chunked_scan`].
    pub fn call_as<X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
        C: Tree + 'static,
        XS: Tree,
        X: Tree + 'static,
        Y: Tree + 'static,
        YS: Tree,
    {
        if let Some(k) = self.mode.chunk_size.filter(|&k| k <= 0) {
            return Err(VmapError::ChunkSizeNotPositive {
                transform: NAME,
                chunk_size: k,
            });
        }
        let Self {
            f,
            init,
            xs,
            length,
            reverse,
            mode,
        } = self;
        let xs = Xs::new(NAME, xs, length)?;
        let n = xs.length;
        let (carry, carry_def) = init.flatten();
        let autodiff = carry
            .iter()
            .chain(&xs.leaves)
            .map(Leaf::device)
            .find(|d| d.is_autodiff() && !is_capture(d));
        let (Some(device), true) = (autodiff, n > 0) else {
            // Nothing to checkpoint: the plain loop.
            let body = Body::<F, C, X, Y>::new(NAME, &f);
            let init = C::unflatten_named(&carry_def, carry.clone(), "init")?;
            if n == 0 {
                let (y_def, examples) = body.dry_run(init, &xs)?;
                let carry = C::unflatten_named(&carry_def, carry, "init")?;
                return Ok((carry, stack_ys(Vec::new(), &y_def, &examples)?));
            }
            let looped = body.run(init, order(n, reverse), &xs.def, |t| xs.row(t), |_| true)?;
            let (y_def, examples) = looped.y.expect("at least one step ran");
            let mut kept = looped.kept;
            kept.sort_by_key(|(t, _)| *t);
            let ys = stack_ys(
                kept.into_iter().map(|(_, y)| y).collect(),
                &y_def,
                &examples,
            )?;
            return Ok((looped.carry, ys));
        };
        let job = Checkpoint::<F, C, X, Y> {
            f,
            carry,
            carry_def: carry_def.clone(),
            xs,
            steps: order(n, reverse).collect(),
            chunk: mode.chunk_size.map_or(n, |k| k as usize),
            types: PhantomData,
        };
        let (carry, ys, y_def) = on_autodiff_backend(NAME, &device, job)??;
        let carry = C::unflatten_named(&carry_def, carry, "carry")?;
        Ok((carry, YS::unflatten_named(&y_def, ys, "ys")?))
    }
}

/// The checkpointed loop on the user's autodiff backend.
struct Checkpoint<F, C, X, Y> {
    f: F,
    carry: Vec<Leaf>,
    carry_def: TreeDef,
    xs: Xs,
    /// Step indices in execution order.
    steps: Vec<usize>,
    chunk: usize,
    types: PhantomData<StepFn<C, X, Y>>,
}

/// The final carry's leaves, the stacked outputs' leaves and their structure.
type Outputs = (Vec<Leaf>, Vec<Leaf>, TreeDef);

impl<F, C, X, Y> AutodiffJob for Checkpoint<F, C, X, Y>
where
    F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
    C: Tree + 'static,
    X: Tree + 'static,
    Y: Tree + 'static,
{
    type Output = Result<Outputs, VmapError>;

    fn run<U, CS>(self, _device: U::Device) -> Self::Output
    where
        U: UserBackend,
        CS: CheckpointStrategy,
        DispatchTensor: DispatchKindConversion<Autodiff<U, CS>>,
    {
        let f = Arc::new(self.f);
        let mut carry = self.carry;
        let mut parts: Vec<(usize, Vec<Leaf>)> = Vec::new();
        let mut y_def: Option<TreeDef> = None;
        for steps in self.steps.chunks(self.chunk) {
            let lo = *steps.iter().min().expect("a chunk has a step");
            let hi = *steps.iter().max().expect("a chunk has a step") + 1;
            let body = Arc::new(ChunkBody {
                f: f.clone(),
                carry_def: self.carry_def.clone(),
                x_def: self.xs.def.clone(),
                steps: steps.to_vec(),
                lo,
            });
            let slab: Vec<Leaf> = (self.xs.leaves.iter())
                .map(|l| l.clone().slice_axis(0, rows(lo..hi)))
                .collect();
            let plain = |l: &Leaf| Leaf(detach(l.clone().into_dispatch()));
            let carry_inner: Vec<Leaf> = carry.iter().map(plain).collect();
            let slab_inner: Vec<Leaf> = slab.iter().map(plain).collect();
            let tracked = |l: &Leaf| ad_of::<U, CS>(l).filter(|t| t.is_tracked());
            let inputs: Vec<_> = (carry.iter().enumerate())
                .filter_map(|(i, l)| tracked(l).map(|t| (Input::Carry(i), t)))
                .chain(
                    (slab.iter().enumerate())
                        .filter_map(|(j, l)| tracked(l).map(|t| (Input::Xs(j), t))),
                )
                .collect();
            // On the user's autodiff device without a graph (untracked): a layer that acts only
            // on an autodiff device (`Dropout`) acts as in `scan` and as in the recomputation.
            let untracked = |l: &Leaf| {
                let t = l.clone().into_dispatch();
                Leaf(if t.dtype().is_float() {
                    Dispatch::float_set_require_grad(t, false)
                } else {
                    t
                })
            };
            let forward = || {
                body.forward::<C, X, Y>(
                    &carry.iter().map(untracked).collect::<Vec<_>>(),
                    &slab.iter().map(untracked).collect::<Vec<_>>(),
                )
            };
            // A chunk the backward pass recomputes draws what it draws again: the generator is
            // seeded before the chunk runs forward, and again with that seed before it reruns.
            let device = carry.iter().chain(&slab).next().map(Leaf::device);
            let (out, seed) = match device {
                Some(device) if !inputs.is_empty() => {
                    let (out, seed) = seeded(&device, None, NAME, forward);
                    (out?, Some((device, seed)))
                }
                _ => (forward()?, None),
            };
            y_def.get_or_insert_with(|| out.y_def.clone());
            let carry_out = out.carry;
            let mut ys = out.ys;
            ys.sort_by_key(|(t, _)| *t);
            let ys_out = stack(ys.into_iter().map(|(_, y)| y).collect());
            if inputs.is_empty() {
                carry = carry_out;
                parts.push((lo, ys_out));
                continue;
            }
            let chunk = TrackedChunk::<U, CS, F> {
                body,
                carry_inner,
                slab_inner,
                inputs,
                seed,
            };
            let (c, ys) = chunk.connect::<C, X, Y>(carry_out, ys_out);
            carry = c;
            parts.push((lo, ys));
        }
        parts.sort_by_key(|(lo, _)| *lo);
        let ys = if parts.len() == 1 {
            parts.pop().expect("one part").1
        } else {
            let width = parts[0].1.len();
            let mut columns: Vec<Vec<Leaf>> = (0..width).map(|_| Vec::new()).collect();
            for (_, part) in parts {
                for (column, leaf) in columns.iter_mut().zip(part) {
                    column.push(leaf);
                }
            }
            columns.into_iter().map(|c| Leaf::cat(c, 0)).collect()
        };
        Ok((carry, ys, y_def.expect("at least one chunk ran")))
    }
}

/// Rows of output leaves (one per step) stacked into one leaf per output.
fn stack(rows: Vec<Vec<Leaf>>) -> Vec<Leaf> {
    let width = rows[0].len();
    let mut columns: Vec<Vec<Leaf>> = (0..width).map(|_| Vec::new()).collect();
    for row in rows {
        for (column, leaf) in columns.iter_mut().zip(row) {
            column.push(leaf);
        }
    }
    columns.into_iter().map(|c| Leaf::stack(c, 0)).collect()
}

/// A chunk with tracked inputs, run forward: what its backward pass needs.
struct TrackedChunk<U: AdBackend<CS>, CS: CheckpointStrategy, F> {
    body: Arc<ChunkBody<F>>,
    /// The carry the chunk started from, and its slab of `xs` (without autodiff).
    carry_inner: Vec<Leaf>,
    slab_inner: Vec<Leaf>,
    /// The tracked float inputs (carry leaves, then slab leaves), in chain order.
    inputs: Vec<(Input, FloatTensor<Autodiff<U, CS>>)>,
    /// The user's device and the seed its generator had when the chunk ran forward.
    seed: Option<(Device, u64)>,
}

impl<U: AdBackend<CS>, CS: CheckpointStrategy, F> TrackedChunk<U, CS, F> {
    /// Wires the chunk's outputs into the user's graph: a gate chain over the tracked inputs,
    /// whose backward recomputes the chunk, and every float output a node on that gate.
    /// Returns the carry and the stacked outputs as the user's (autodiff) leaves.
    fn connect<C, X, Y>(self, carry_out: Vec<Leaf>, ys_out: Vec<Leaf>) -> (Vec<Leaf>, Vec<Leaf>)
    where
        C: Tree + 'static,
        X: Tree + 'static,
        Y: Tree + 'static,
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
    {
        let Self {
            body,
            carry_inner,
            slab_inner,
            inputs,
            seed,
        } = self;
        let is_float = |l: &Leaf| l.dtype().is_float();
        // Float outputs: carry leaves, then ys leaves.
        let float_outputs: Vec<(bool, usize)> = carry_out
            .iter()
            .enumerate()
            .filter(|(_, l)| is_float(l))
            .map(|(i, _)| (true, i))
            .chain(
                ys_out
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| is_float(l))
                    .map(|(i, _)| (false, i)),
            )
            .collect();
        let first = inputs[0].1.primitive();
        let (device, dtype) = (first.device(), first.dtype());
        let recompute = recompute_chunk::<U, CS, F, C, X, Y>(
            body,
            carry_inner,
            slab_inner,
            inputs.iter().map(|(r, _)| *r).collect(),
            float_outputs.clone(),
            (device.clone(), dtype),
            seed,
        );
        let tape = Arc::new(ChunkTape::new(float_outputs.len(), recompute));
        let mut gate = Autodiff::<U, CS>::from_inner(zeros1::<U>(&device, dtype));
        for (k, (_, input)) in inputs.iter().enumerate() {
            let link = zeros1::<U>(&device, dtype);
            gate = record::<U, CS, _, 2>(GateLink, [&gate, input], (tape.clone(), k, dtype), link);
        }
        let mut next = 0;
        let mut wrap = |leaf: Leaf| {
            if !is_float(&leaf) {
                return leaf;
            }
            let value = plain_prim::<U>(leaf);
            let state = (tape.clone(), next, dtype);
            next += 1;
            leaf_of::<U, CS>(record::<U, CS, _, 1>(ChunkOutput, [&gate], state, value))
        };
        let carry = carry_out.into_iter().map(&mut wrap).collect();
        let ys = ys_out.into_iter().map(&mut wrap).collect();
        (carry, ys)
    }
}
