//! The custom autodiff nodes of a checkpointed chunk: the gate chain that recomputes the chunk
//! in the backward pass, its outputs, and the taps and sinks of the recomputed graph.

use std::sync::Mutex;
use std::sync::{Arc, mpsc};

use burn_autodiff::NodeId;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops};
use burn_backend::backend::Backend;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape, TensorMetadata};

/// Recomputes a chunk and back-propagates its output cotangents (one per float output, `None`
/// when no gradient reached it) into the gradients of its tracked inputs.
pub(super) type Recompute<B> =
    Box<dyn FnOnce(Vec<Option<FloatTensor<B>>>) -> Vec<FloatTensor<B>> + Send + 'static>;

/// The backward state shared by the nodes of one chunk.
pub(super) struct ChunkTape<B: Backend> {
    pub(super) state: Mutex<TapeState<B>>,
}

pub(super) struct TapeState<B: Backend> {
    pub(super) cotangents: Vec<Option<FloatTensor<B>>>,
    pub(super) recompute: Option<Recompute<B>>,
    pub(super) grads: Vec<Option<FloatTensor<B>>>,
}

impl<B: Backend> std::fmt::Debug for ChunkTape<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkTape")
    }
}

impl<B: Backend> ChunkTape<B> {
    /// A tape for `outputs` float outputs, recomputed by `recompute`.
    pub(super) fn new(outputs: usize, recompute: Recompute<B>) -> Self {
        Self {
            state: Mutex::new(TapeState {
                cotangents: vec![None; outputs],
                recompute: Some(recompute),
                grads: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TapeState<B>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_cotangent(&self, output: usize, grad: FloatTensor<B>) {
        let mut state = self.lock();
        let slot = &mut state.cotangents[output];
        *slot = Some(match slot.take() {
            Some(old) => B::float_add(old, grad),
            None => grad,
        });
    }

    /// The gradient of tracked input `k`, recomputing the chunk on the first call.
    fn input_grad(&self, k: usize) -> Option<FloatTensor<B>> {
        let pending = {
            let mut state = self.lock();
            state.recompute.take().map(|r| {
                let cots = std::mem::take(&mut state.cotangents);
                (r, cots)
            })
        };
        if let Some((recompute, cots)) = pending {
            let grads = recompute(cots);
            self.lock().grads = grads.into_iter().map(Some).collect();
        }
        self.lock().grads.get_mut(k).and_then(Option::take)
    }
}

/// A one-element zero tensor: the value of the chain links, which carry no data.
pub(super) fn zeros1<B: Backend>(device: &B::Device, dtype: DType) -> FloatTensor<B> {
    B::float_zeros(Shape::from(vec![1]), device, dtype.into())
}

/// Gives `parent` (the chain below a link) a dummy gradient, which keeps it in the backward
/// pass.
fn keep_alive<B: Backend>(
    grads: &mut Gradients,
    parent: Option<NodeId>,
    device: &B::Device,
    dtype: DType,
) {
    if let Some(id) = parent {
        grads.register::<B>(id, zeros1::<B>(device, dtype));
    }
}

/// The backward of a chain link with parents `[prev, other]` and state `S` (its dtype read by
/// `dtype`): `other` gets `grad(state)` (when it gives one), `prev` a dummy gradient that keeps
/// the chain below in the backward pass.
fn link_backward<B: Backend, S>(
    ops: Ops<S, 2>,
    grads: &mut Gradients,
    dtype: impl FnOnce(&S) -> DType,
    grad: impl FnOnce(S) -> Option<FloatTensor<B>>,
) {
    let own = grads.consume::<B>(&ops.node);
    let device = own.device();
    let dtype = dtype(&ops.state);
    let [prev, other] = ops.parents.map(|p| p.map(|n| n.id));
    if let Some(id) = other
        && let Some(g) = grad(ops.state)
    {
        grads.register::<B>(id, g);
    }
    keep_alive::<B>(grads, prev, &device, dtype);
}

/// Link `k` of a chunk's gate chain (parents: the previous link, tracked input `k`). The last
/// link is the first to run backward: it recomputes the chunk; each link hands its input its
/// gradient and keeps the chain below it alive with a dummy gradient.
#[derive(Debug)]
pub(super) struct GateLink;

impl<B: Backend> Backward<B, 2> for GateLink {
    type State = (Arc<ChunkTape<B>>, usize, DType);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _c: &mut Checkpointer) {
        link_backward::<B, _>(ops, grads, |s| s.2, |(tape, k, _)| tape.input_grad(k));
    }
}

/// Float output `i` of a chunk (parent: the gate). Stores its cotangent for the recomputation.
#[derive(Debug)]
pub(super) struct ChunkOutput;

impl<B: Backend> Backward<B, 1> for ChunkOutput {
    type State = (Arc<ChunkTape<B>>, usize, DType);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _c: &mut Checkpointer) {
        let (tape, i, dtype) = ops.state;
        let g = grads.consume::<B>(&ops.node);
        let device = g.device();
        tape.set_cotangent(i, g);
        let [gate] = ops.parents;
        keep_alive::<B>(grads, gate.map(|n| n.id), &device, dtype);
    }
}

/// In a recomputed chunk's graph: reports the gradient of input leaf `id` through a channel
/// (the graph's backward pass runs on a helper thread and its result is never returned), or
/// drops it for an input whose gradient is not needed. Every float input is tracked and tapped
/// so that the recomputation records no untracked ops (burn-autodiff keeps the records of
/// untracked ops until a backward pass ends, which the helper thread cannot do before the
/// outer backward pass has finished).
#[derive(Debug)]
pub(super) struct Tap;

impl<B: Backend> Backward<B, 1> for Tap {
    type State = Option<(usize, mpsc::Sender<(usize, FloatTensor<B>)>)>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _c: &mut Checkpointer) {
        let g = grads.consume::<B>(&ops.node);
        if let Some((id, sender)) = ops.state {
            // The receiver only goes away if the outer backward step panicked.
            let _ = sender.send((id, g));
        }
    }
}

/// In a recomputed chunk's graph: a link of the root chain (parents: the previous link, a
/// target); gives the target its cotangent.
#[derive(Debug)]
pub(super) struct Sink;

impl<B: Backend> Backward<B, 2> for Sink {
    type State = (FloatTensor<B>, DType);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _c: &mut Checkpointer) {
        link_backward::<B, _>(ops, grads, |s| s.1, |(cotangent, _)| Some(cotangent));
    }
}
