//! One chunk of a checkpointed scan, run forward without a graph (and rerun with one by
//! `recompute.rs`), and the conversions between the user's tensors and the autodiff backend.

use std::sync::Arc;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::TensorMetadata;
use burn_backend::tensor::FloatTensor;
use burn_dispatch::{
    BackendTensor, Dispatch, DispatchAutodiffContext, DispatchKindConversion, DispatchTensor,
};

use super::super::run::Body;
use crate::VmapError;
use crate::runtime::{UserBackend, detach};
use crate::tree::{Leaf, Tree, TreeDef};
use crate::value::Value;

/// The transform's name in errors.
pub(super) const NAME: &str = "checkpoint_chunked_scan";

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

    /// Runs `steps` from `carry` over rows of `slab` (leaves as given: untracked forward, fresh
    /// tracked leaves when recomputing).
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
    /// untracked), the outputs returned without autodiff.
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
