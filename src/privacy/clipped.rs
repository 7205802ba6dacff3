//! The clipped sum of a batch's per-example gradients, through
//! [`micro_grad_module`](crate::micro_grad_module) with the clipping as its recorded
//! `transform_fn` (a dense layer's or a convolution's per-example weight gradient stays factored
//! through the clipping and the sum). The builders are kept across steps: one per loss function
//! type, each holding its recordings (one per module and batch signature; a Poisson batch
//! changes only the batch size, which is not part of the signature).

use std::any::{Any, TypeId};
use std::sync::Arc;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::Dispatch;

use crate::transform::grad::ParamGrads;
use crate::tree::{Leaf, Tree, rows};
use crate::{VmapError, clip_by_global_norm, micro_grad_module};

use super::clip_per_layer;

/// How every example's gradient is clipped, and how many examples run per vectorized pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Clipping {
    /// `C`.
    pub(super) norm: f64,
    /// Per-layer (`C / √P` per parameter tensor) instead of the global norm.
    pub(super) per_layer: bool,
    /// Examples per vectorized backward pass (`None`: the whole batch).
    pub(super) microbatch_size: Option<usize>,
}

impl Clipping {
    /// One example's gradient clipped (written for one example; recorded as `transform_fn`).
    fn apply(self, g: ParamGrads) -> ParamGrads {
        if self.per_layer {
            clip_per_layer(g, self.norm)
        } else {
            clip_by_global_norm(g, self.norm)
        }
    }
}

/// The clipped sum of the per-example gradients of `loss_fn` over a batch (`&M`, the batch).
type Runner<M, A> = Box<dyn Fn(&M, A) -> Result<ParamGrads, VmapError> + Send>;

/// The builders of the clipped sums, one per `(loss function, module, batch)` type and clipping.
#[derive(Default)]
pub(super) struct ClippedSums {
    runners: Vec<(TypeId, Clipping, Box<dyn Any + Send>)>,
}

impl std::fmt::Debug for ClippedSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClippedSums({} loss functions)", self.runners.len())
    }
}

impl ClippedSums {
    /// The sum over the examples of `batch` of every example's gradient of `loss_fn(model,
    /// example)` (a batch of one), clipped by `clipping`. The first call with a loss function
    /// type builds (and keeps) its builder around that function; later calls with the same type
    /// reuse it, and its recordings.
    pub(super) fn sum<M, A, F>(
        &mut self,
        clipping: Clipping,
        model: &M,
        loss_fn: F,
        batch: A,
    ) -> Result<ParamGrads, VmapError>
    where
        M: Module + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let key = TypeId::of::<(F, M, A)>();
        let found = self
            .runners
            .iter()
            .position(|(k, c, _)| *k == key && *c == clipping);
        let index = match found {
            Some(i) => i,
            None => {
                let runner: Runner<M, A> = runner(clipping, loss_fn);
                self.runners.push((key, clipping, Box::new(runner)));
                self.runners.len() - 1
            }
        };
        let runner = self.runners[index]
            .2
            .downcast_ref::<Runner<M, A>>()
            .expect("a runner of its key's types");
        runner(model, batch)
    }
}

/// The leading size of a batch (every leaf's; the transform checks they agree).
fn batch_size(leaves: &[Leaf]) -> usize {
    leaves
        .first()
        .and_then(|l| l.shape().as_slice().first().copied())
        .unwrap_or(0)
}

/// The entrywise sum of two gradient trees of one module (the same parameters in order).
pub(super) fn add(a: ParamGrads, b: ParamGrads) -> ParamGrads {
    let mut others = b
        .iter()
        .map(|(_, _, g)| g.clone())
        .collect::<Vec<_>>()
        .into_iter();
    a.map(|_, g| {
        let other = others.next().expect("the same parameters");
        Leaf(Dispatch::float_add(
            g.into_dispatch(),
            other.into_dispatch(),
        ))
    })
}

/// The builders around `loss_fn`: the whole batch in one vectorized pass, and with a
/// microbatch size the rows it divides in microbatches, the ragged rest as one more pass (the
/// same sum). The two builders share their recordings (a builder's clone shares its caches).
fn runner<M, A, F>(clipping: Clipping, loss_fn: F) -> Runner<M, A>
where
    M: Module + 'static,
    A: Tree + 'static,
    F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
{
    let loss_fn = Arc::new(loss_fn);
    // The batch goes in as a one-argument tuple, so any tree (a tensor, a tuple, a struct) is a
    // batch; every leaf is batched on axis 0 and seen with a leading 1 (keep_batch_dim).
    let loss = move |m: &M, (a,): (A,)| -> Tensor<1> { loss_fn(m, a) };
    let whole = micro_grad_module(loss).transform_fn(move |g: ParamGrads| clipping.apply(g));
    let micro = clipping
        .microbatch_size
        .map(|m| (m, whole.clone().microbatch_size(m)));
    Box::new(move |model: &M, batch: A| {
        let (leaves, def) = batch.flatten();
        let size = batch_size(&leaves);
        let split = match &micro {
            Some((m, _)) if *m < size => size - size % m,
            _ => 0,
        };
        let part = |range: std::ops::Range<usize>| -> Result<(A,), VmapError> {
            if range.start == 0 && range.end == size {
                return Ok((A::unflatten(&def, leaves.clone())?,));
            }
            let rows_of = leaves
                .iter()
                .map(|l| l.clone().slice_axis(0, rows(range.clone())))
                .collect();
            Ok((A::unflatten(&def, rows_of)?,))
        };
        let mut sum: Option<ParamGrads> = None;
        if let (true, Some((_, micro))) = (split > 0, &micro) {
            let (s, _) = micro.call(model, part(0..split)?)?;
            sum = Some(s);
        }
        if split < size || size == 0 {
            let (s, _) = whole.call(model, part(split..size)?)?;
            sum = Some(match sum {
                Some(a) => add(a, s),
                None => s,
            });
        }
        Ok(sum.expect("a part ran"))
    })
}

/// Whether any float parameter of `model` is an autodiff tensor (the model is in training
/// mode, `Module::train`).
pub(super) fn is_autodiff<M: Module>(model: &M) -> bool {
    #[derive(Default)]
    struct Any(bool);
    impl ModuleVisitor for Any {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0 |= param.val().is_autodiff();
        }
    }
    let mut any = Any::default();
    model.visit(&mut any);
    any.0
}
