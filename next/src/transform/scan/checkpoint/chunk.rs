//! One chunk of a checkpointed scan: its forward pass without a graph, and how its outputs join
//! the user's autodiff graph (a gate chain over its tracked inputs whose backward recomputes
//! it, `recompute.rs`).

use std::sync::Arc;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::TensorMetadata;
use burn_backend::backend::AutodiffBackend;
use burn_backend::tensor::FloatTensor;
use burn_dispatch::{
    BackendTensor, Dispatch, DispatchAutodiffContext, DispatchKindConversion, DispatchTensor,
};

use super::super::run::Body;
use super::NAME;
use super::recompute::recompute_chunk;
use super::tape::{ChunkOutput, ChunkTape, GateLink, zeros1};
use crate::VmapError;
use crate::batching::record;
use crate::runtime::{UserBackend, detach};
use crate::tree::{Leaf, Tree, TreeDef};
use crate::value::Value;

/// The autodiff backend a checkpointed chunk joins: the user's autodiff device's.
pub(super) type Ad<U, CS> = Autodiff<U, CS>;

/// The inner backend of a user's autodiff device: the tensors of `Autodiff<Self, CS>` come out
/// of and go back into the user's (dispatch) tensors.
pub(super) trait AdBackend<CS: CheckpointStrategy>: UserBackend {
    /// The autodiff tensor in a user's tensor.
    fn ad_tensor(t: DispatchTensor) -> Result<BackendTensor<Ad<Self, CS>>, String>;
    /// A user's tensor holding an autodiff tensor.
    fn user_tensor(t: BackendTensor<Ad<Self, CS>>) -> DispatchTensor;
}

impl<U: UserBackend, CS: CheckpointStrategy> AdBackend<CS> for U
where
    DispatchTensor: DispatchKindConversion<Autodiff<U, CS>>,
{
    fn ad_tensor(t: DispatchTensor) -> Result<BackendTensor<Ad<Self, CS>>, String> {
        <DispatchTensor as DispatchKindConversion<Ad<U, CS>>>::try_into_backend(t)
    }

    fn user_tensor(t: BackendTensor<Ad<Self, CS>>) -> DispatchTensor {
        <DispatchTensor as DispatchKindConversion<Ad<U, CS>>>::from_backend(t)
    }
}

/// The autodiff primitive of `leaf`: `None` unless it is a float tensor on an autodiff device.
pub(super) fn ad_of<U, CS>(leaf: &Leaf) -> Option<FloatTensor<Ad<U, CS>>>
where
    U: AdBackend<CS>,
    CS: CheckpointStrategy,
{
    let t = leaf.clone().into_dispatch();
    if !t.dtype().is_float() || t.autodiff == DispatchAutodiffContext::Disabled {
        return None;
    }
    match U::ad_tensor(t) {
        Ok(BackendTensor::Float(t)) => Some(t),
        _ => None,
    }
}

/// A user's leaf holding an autodiff primitive.
pub(super) fn leaf_of<U, CS>(t: FloatTensor<Ad<U, CS>>) -> Leaf
where
    U: AdBackend<CS>,
    CS: CheckpointStrategy,
{
    Leaf(U::user_tensor(BackendTensor::Float(t)))
}

/// The primitive of a float leaf without autodiff.
pub(super) fn plain_prim<U: UserBackend>(leaf: Leaf) -> FloatTensor<U> {
    U::value(leaf.into_dispatch())
        .expect("vmap: internal: a tensor of the chunk's backend")
        .float()
}

/// A user's leaf (without autodiff) holding a primitive.
pub(super) fn plain_leaf<U: UserBackend>(t: FloatTensor<U>) -> Leaf {
    Leaf(U::tensor(Value::Float(t)))
}

/// Which input of a chunk a tracked tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Input {
    /// Leaf `i` of the carry.
    Carry(usize),
    /// Leaf `j` of the chunk's slab of `xs`.
    Xs(usize),
}

/// One chunk of the loop: what is needed to run it (forward) and to rerun it (backward).
pub(super) struct ChunkBody<F> {
    pub(super) f: Arc<F>,
    pub(super) carry_def: TreeDef,
    pub(super) x_def: TreeDef,
    /// Step indices in execution order.
    pub(super) steps: Vec<usize>,
    /// Smallest step index (row 0 of the chunk's slab of `xs`).
    pub(super) lo: usize,
}

/// A chunk run forward: its final carry and every step's outputs (leaves without autodiff),
/// the outputs by step index in execution order.
pub(super) struct Ran {
    pub(super) carry: Vec<Leaf>,
    pub(super) ys: Vec<(usize, Vec<Leaf>)>,
    pub(super) y_def: TreeDef,
    /// One output's leaves (shapes and kinds of an empty stack).
    pub(super) y_examples: Vec<Leaf>,
}

impl<F> ChunkBody<F> {
    /// Row `t` of every leaf of the chunk's slab of `xs`.
    pub(super) fn row(&self, slab: &[Leaf], t: usize) -> Vec<Leaf> {
        slab.iter().map(|l| l.index(0, t - self.lo)).collect()
    }

    /// Runs `steps` from `carry` over rows of `slab` (leaves as given: without autodiff
    /// forward, fresh tracked leaves when recomputing).
    pub(super) fn run<C, X, Y>(
        &self,
        carry: Vec<Leaf>,
        mut x_at: impl FnMut(usize) -> Vec<Leaf>,
    ) -> Result<Ran, VmapError>
    where
        F: Fn(C, X) -> (C, Y),
        C: Tree,
        X: Tree,
        Y: Tree,
    {
        let init = C::unflatten_named(&self.carry_def, carry, "carry")?;
        let looped = Body::<F, C, X, Y>::new(NAME, &*self.f).run(
            init,
            self.steps.iter().copied(),
            &self.x_def,
            &mut x_at,
            |_| true,
        )?;
        let (y_def, y_examples) = looped.y.expect("a chunk has at least one step");
        Ok(Ran {
            carry: looped.carry.flatten().0,
            ys: looped.kept,
            y_def,
            y_examples,
        })
    }

    /// Runs the chunk forward without recording a graph: from `carry` over `slab` (leaves
    /// without autodiff).
    ///
    /// # Errors
    /// As the loop, and [`VmapError::CapturedTrackedTensor`] when an output is tracked (the
    /// body captured a tensor that requires gradients).
    pub(super) fn forward<C, X, Y>(&self, carry: &[Leaf], slab: &[Leaf]) -> Result<Ran, VmapError>
    where
        F: Fn(C, X) -> (C, Y),
        C: Tree,
        X: Tree,
        Y: Tree,
    {
        let ran = self.run::<C, X, Y>(carry.to_vec(), |t| self.row(slab, t))?;
        let outputs = ran.carry.iter().chain(ran.ys.iter().flat_map(|(_, y)| y));
        if outputs.map(|l| l.clone().into_dispatch()).any(|t| {
            t.dtype().is_float()
                && t.autodiff != DispatchAutodiffContext::Disabled
                && Dispatch::is_tracked(&t)
        }) {
            return Err(VmapError::CapturedTrackedTensor { transform: NAME });
        }
        let plain = |l: Leaf| Leaf(detach(l.into_dispatch()));
        Ok(Ran {
            carry: ran.carry.into_iter().map(plain).collect(),
            ys: ran
                .ys
                .into_iter()
                .map(|(t, y)| (t, y.into_iter().map(plain).collect()))
                .collect(),
            y_def: ran.y_def,
            y_examples: ran.y_examples,
        })
    }
}

/// A chunk with tracked inputs, run forward: what its backward pass needs.
pub(super) struct TrackedChunk<U: AdBackend<CS>, CS: CheckpointStrategy, F> {
    pub(super) body: Arc<ChunkBody<F>>,
    /// The carry the chunk started from, and its slab of `xs` (without autodiff).
    pub(super) carry_inner: Vec<Leaf>,
    pub(super) slab_inner: Vec<Leaf>,
    /// The tracked float inputs (carry leaves, then slab leaves), in chain order.
    pub(super) inputs: Vec<(Input, FloatTensor<Ad<U, CS>>)>,
}

impl<U: AdBackend<CS>, CS: CheckpointStrategy, F> TrackedChunk<U, CS, F> {
    /// Wires the chunk's outputs into the user's graph: a gate chain over the tracked inputs,
    /// whose backward recomputes the chunk, and every float output a node on that gate.
    /// Returns the carry and the stacked outputs as the user's (autodiff) leaves.
    pub(super) fn connect<C, X, Y>(
        self,
        carry_out: Vec<Leaf>,
        ys_out: Vec<Leaf>,
    ) -> (Vec<Leaf>, Vec<Leaf>)
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
        );
        let tape = Arc::new(ChunkTape::new(float_outputs.len(), recompute));
        let mut gate = Ad::<U, CS>::from_inner(zeros1::<U>(&device, dtype));
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
