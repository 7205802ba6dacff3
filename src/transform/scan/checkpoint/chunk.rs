//! One chunk of a checkpointed scan: what runs it forward and reruns it backward.

use std::sync::Arc;

use burn_backend::backend::Backend;

use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::TensorMetadata;

use super::tape::{RELEASE_EVERY, release_dropped_records};
use super::{Ad, NAME, float_of, from_inner, to_inner};
use crate::VmapError;
use crate::transform::scan::run::{Ran, Step};
use crate::tree::{Leaf, Tree, TreeDef};

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

impl<F> ChunkBody<F> {
    /// Runs the chunk forward from `carry_inner` over its rows `slab_inner` of `xs` (inner
    /// tensors), recording no graph: the inputs are fresh untracked tensors.
    ///
    /// # Errors
    /// As the loop, and [`VmapError::CapturedTrackedTensor`] when an output is tracked (the
    /// body captured a tensor that requires gradients).
    pub(super) fn forward<B, CS, C, X, Y>(
        &self,
        carry_inner: &[Leaf<B>],
        slab_inner: &[Leaf<B>],
    ) -> Result<Ran<Ad<B, CS>>, VmapError>
    where
        B: Backend,
        CS: CheckpointStrategy,
        C: Tree<Ad<B, CS>>,
        X: Tree<Ad<B, CS>>,
        Y: Tree<Ad<B, CS>>,
        F: Fn(C, X) -> (C, Y),
    {
        // Forward, recording no graph: the inputs are fresh untracked tensors. In blocks of
        // at most RELEASE_EVERY steps, releasing the records of the untracked ops between.
        let mut out: Option<Ran<Ad<B, CS>>> = None;
        for block in self.steps.chunks(RELEASE_EVERY) {
            let sub = ChunkBody {
                f: self.f.clone(),
                carry_def: self.carry_def.clone(),
                x_def: self.x_def.clone(),
                steps: block.to_vec(),
                lo: self.lo,
            };
            let carry_in: Vec<Leaf<Ad<B, CS>>> = match &out {
                None => carry_inner.iter().cloned().map(from_inner).collect(),
                Some(o) => o
                    .carry
                    .iter()
                    .cloned()
                    .map(to_inner)
                    .map(from_inner)
                    .collect(),
            };
            let rows = block
                .iter()
                .map(|&t| {
                    sub.x_inner(slab_inner, t)
                        .into_iter()
                        .map(from_inner)
                        .collect()
                })
                .collect();
            let step = Step::<Ad<B, CS>, C, X, Y, F>::new(NAME, &*sub.f);
            let part = step.run_steps(&sub.carry_def, carry_in, &sub.steps, &sub.x_def, rows)?;
            if part
                .carry
                .iter()
                .chain(part.ys.iter().flatten())
                .filter_map(float_of)
                .any(|t| t.is_tracked())
            {
                return Err(VmapError::CapturedTrackedTensor { transform: NAME });
            }
            let part = Ran {
                carry: part
                    .carry
                    .into_iter()
                    .map(to_inner)
                    .map(from_inner)
                    .collect(),
                ys: part
                    .ys
                    .into_iter()
                    .map(|y| y.into_iter().map(to_inner).map(from_inner).collect())
                    .collect(),
                y_def: part.y_def,
                y_specs: part.y_specs,
            };
            if let Some(first) = part
                .carry
                .iter()
                .chain(part.ys.iter().flatten())
                .find_map(float_of)
            {
                release_dropped_records::<B, CS>(
                    &B::float_device(&first.primitive),
                    first.primitive.dtype(),
                );
            }
            out = Some(match out {
                None => part,
                Some(mut o) => {
                    o.carry = part.carry;
                    o.ys.extend(part.ys);
                    o
                }
            });
        }
        Ok(out.expect("a chunk has at least one step"))
    }

    /// Row `t` of every leaf of the chunk's slab of `xs` (inner backend).
    pub(super) fn x_inner<B: Backend>(&self, slab: &[Leaf<B>], t: usize) -> Vec<Leaf<B>> {
        slab.iter().map(|l| l.index(t - self.lo)).collect()
    }
}

/// Which input of a chunk a tracked tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Input {
    /// Leaf `i` of the carry.
    Carry(usize),
    /// Leaf `j` of the chunk's slab of `xs`.
    Xs(usize),
}
