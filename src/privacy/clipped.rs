//! The clipped sum of a batch's per-example gradients, through
//! [`micro_grad_module`](crate::micro_grad_module) with the clipping as its recorded
//! `transform_fn` (a dense layer's or a convolution's per-example weight gradient stays factored
//! through the clipping and the sum). The builders are kept across steps: one per loss function
//! type, each holding its recordings (one per module and batch signature; a Poisson batch
//! changes only the batch size, which is not part of the signature).
//!
//! **Non-finite examples contribute zero.** The recorded transform returns, beside the clipped
//! gradient, two flags per example read from the norm the clipping computes anyway (its norm is
//! not finite; its norm exceeds `C`), summed with the gradients: the counts cost a few scalar
//! ops per example, and the factored forms stay factored. When the count of non-finite examples
//! is not zero (the sum is then NaN: `0 · NaN` is NaN, so no scaling can zero such an example
//! inside a factored product), the sum is taken again over the batch's finite examples only,
//! which one more vectorized pass finds: the plain clip's cost in the common case, and the same
//! released value as zeroing them (an example still counts as sampled).

use std::any::{Any, TypeId};
use std::sync::Arc;

use burn::module::{Module, ModuleDisplay, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::Dispatch;

use crate::accumulate::WideSum;
use crate::transform::grad::ParamGrads;
use crate::transform::micro::{non_finite, scale_tree};
use crate::tree::{Leaf, Tree, rows};
use crate::{VmapError, global_norm, micro_grad_module};

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
    /// One example's gradient clipped, with its flags `[norm not finite, norm > C]` (written
    /// for one example; recorded as `transform_fn`). The global norm is computed once, for the
    /// clipping and the flags.
    fn apply(self, g: ParamGrads) -> (ParamGrads, Tensor<1>) {
        if self.per_layer {
            let (_, flags) = flagged(&g, self.norm);
            (clip_per_layer(g, self.norm), flags)
        } else {
            clip_and_flag(g, self.norm)
        }
    }
}

/// The global norm of `tree` and its flags `[norm not finite, norm finite and > max_norm]`: an
/// example is one or the other, never both (an infinite norm is above any `max_norm`; a NaN
/// one compares false, and which of the two a non-finite gradient gives depends on the
/// backend's kernels).
fn flagged<T: Tree + Clone>(tree: &T, max_norm: f64) -> (Tensor<1>, Tensor<1>) {
    let norm = global_norm(tree);
    let bad = norm.clone().is_nan().bool_or(norm.clone().is_inf());
    let over = norm
        .clone()
        .greater_elem(max_norm)
        .bool_and(bad.clone().bool_not());
    (norm, Tensor::cat(vec![bad.float(), over.float()], 0))
}

/// The DP mechanism's clipping of one example's gradient: [`clip_by_global_norm`] (scaled by
/// `max_norm / max(norm, max_norm)`) with the example's flags from the same norm,
/// `[norm not finite, norm finite and above max_norm]`. Used as a `transform_fn`, the flags sum
/// to the batch's counts of non-finite and clipped examples, at the cost of a few scalar ops per
/// example; a factored weight gradient stays factored (its norm comes from its factors, the
/// scaling multiplies one factor).
///
/// **It does not make a sum finite.** An example whose gradient is NaN or infinite is flagged,
/// not zeroed: no scaling can zero it (`0 · NaN` is NaN, inside a factored product too), so a
/// `Sum` over a batch holding one is NaN. When the first flag's sum is not zero, drop the
/// flagged examples and sum again: [`DpMechanism::noisy_gradient`] does exactly that (one more
/// vectorized pass finds them), so that a non-finite example contributes zero there.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::privacy::clip_and_flag;
/// let d = Device::default();
/// let (c, flags) = clip_and_flag(Tensor::<1>::from_floats([3.0, 4.0], &d), 1.0);
/// assert_eq!(flags.into_data().to_vec::<f32>().unwrap(), vec![0.0, 1.0]); // finite, clipped
/// let (_, flags) = clip_and_flag(Tensor::<1>::from_floats([f32::NAN, 4.0], &d), 1.0);
/// assert_eq!(flags.into_data().to_vec::<f32>().unwrap(), vec![1.0, 0.0]); // not finite
/// let (_, flags) = clip_and_flag(Tensor::<1>::from_floats([f32::INFINITY, 4.0], &d), 1.0);
/// assert_eq!(flags.into_data().to_vec::<f32>().unwrap(), vec![1.0, 0.0]); // not clipped
/// ```
///
/// # Panics
/// If the tree has no float leaf.
///
/// [`clip_by_global_norm`]: crate::clip_by_global_norm
/// [`DpMechanism::noisy_gradient`]: super::DpMechanism::noisy_gradient
pub fn clip_and_flag<T: Tree + Clone>(tree: T, max_norm: f64) -> (T, Tensor<1>) {
    let (norm, flags) = flagged(&tree, max_norm);
    let factor = norm.clamp_min(max_norm).recip() * max_norm;
    (scale_tree(tree, factor), flags)
}

/// A batch's clipped sum and what its examples were.
#[derive(Debug)]
pub(super) struct ClippedSum {
    /// The sum of the clipped gradients of the finite examples.
    pub(super) sum: ParamGrads,
    /// Examples whose gradient was not finite (they contribute zero).
    pub(super) non_finite: usize,
    /// Finite examples whose gradient norm exceeded `C` (scaled down to `C`).
    pub(super) clipped: usize,
}

/// The clipped sum of the per-example gradients of `loss_fn` over a batch (`&M`, the batch),
/// with the summed flags.
type Runner<M, A> = Box<dyn Fn(&M, A) -> Result<(ParamGrads, Tensor<1>), VmapError> + Send>;

/// Every example's non-finite flag (`[B]`, 1 where its gradient is not finite).
type Finder<M, A> = Box<dyn Fn(&M, A) -> Result<Tensor<1>, VmapError> + Send>;

/// The two builders of one loss function: the clipped sum, and the finder of non-finite
/// examples (built on first need).
struct Runners<M, A> {
    sum: Runner<M, A>,
    finder: Finder<M, A>,
}

/// The builders of the clipped sums, one per `(loss function, module, batch)` type and clipping.
#[derive(Default)]
pub(super) struct ClippedSums {
    runners: Vec<(TypeId, Clipping, Box<dyn Any + Send>)>,
    /// Every loss passed is one function (the burn-train adapter's own, for the whole run): the
    /// builders of a loss type are kept whatever the type holds.
    one_loss: bool,
}

impl std::fmt::Debug for ClippedSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClippedSums({} loss functions)", self.runners.len())
    }
}

impl ClippedSums {
    /// The sum over the examples of `batch` of every example's gradient of `loss_fn(model,
    /// example)` (a batch of one), clipped by `clipping`, an example with a non-finite gradient
    /// contributing zero. The first call with a loss function type builds (and keeps) its
    /// builder around that function; later calls with the same type reuse it, and its
    /// recordings, where the type names one function: it holds nothing (a `fn` item, a closure
    /// that captures nothing), or every loss passed is one (`one_loss`). Two closures of one
    /// type that hold other values (a temperature moved in) compute different losses, and all
    /// function pointers of a signature are one type: such a loss is recorded at every call.
    pub(super) fn sum<M, A, F>(
        &mut self,
        clipping: Clipping,
        model: &M,
        loss_fn: F,
        batch: A,
    ) -> Result<ClippedSum, VmapError>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        if std::mem::size_of::<F>() != 0 && !self.one_loss {
            return run(&runners::<M, A, F>(clipping, loss_fn), model, batch);
        }
        let key = TypeId::of::<(F, M, A)>();
        let found = self
            .runners
            .iter()
            .position(|(k, c, _)| *k == key && *c == clipping);
        let index = match found {
            Some(i) => i,
            None => {
                let runners: Runners<M, A> = runners(clipping, loss_fn);
                self.runners.push((key, clipping, Box::new(runners)));
                self.runners.len() - 1
            }
        };
        let runners = self.runners[index]
            .2
            .downcast_ref::<Runners<M, A>>()
            .expect("runners of their key's types");
        run(runners, model, batch)
    }

    /// Keep the builders of every loss type passed from now on, whatever the type holds: the
    /// caller passes one loss function at every step.
    pub(super) fn one_loss(&mut self) {
        self.one_loss = true;
    }
}

/// [`ClippedSums::sum`] with the builders of its loss function.
fn run<M, A>(runners: &Runners<M, A>, model: &M, batch: A) -> Result<ClippedSum, VmapError>
where
    M: Module + ModuleDisplay + 'static,
    A: Tree + 'static,
{
    let (leaves, def) = batch.flatten();
    let sampled = batch_size(&leaves);
    let (sum, flags) = (runners.sum)(model, A::unflatten(&def, leaves.clone())?)?;
    let [non_finite, clipped] = counts(flags);
    if non_finite == 0 {
        return Ok(ClippedSum {
            sum,
            non_finite,
            clipped,
        });
    }
    // The sum is NaN: again over the finite examples only.
    let bad = (runners.finder)(model, A::unflatten(&def, leaves.clone())?)?;
    let bad = bad
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 flags");
    let keep: Vec<i64> = (0..sampled as i64)
        .filter(|&i| bad[i as usize] == 0.0)
        .collect();
    let sum = if keep.is_empty() {
        ParamGrads::zeros(NAME, model)?
    } else {
        let index = Tensor::<1, burn::tensor::Int>::from_ints(keep.as_slice(), &leaves[0].device());
        let rows = leaves
            .iter()
            .map(|l| l.clone().select(0, index.clone().into_dispatch()))
            .collect();
        (runners.sum)(model, A::unflatten(&def, rows)?)?.0
    };
    Ok(ClippedSum {
        sum,
        non_finite: sampled - keep.len(),
        clipped,
    })
}

/// The name errors of the clipped sum carry.
const NAME: &str = "DpMechanism::step";

/// The summed flags as counts.
fn counts(flags: Tensor<1>) -> [usize; 2] {
    let v = flags
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 flags");
    // An example has at most one flag (`flagged`): the two counts add up to at most the batch.
    [v[0].round() as usize, v[1].round() as usize]
}

/// The leading size of a batch (every leaf's; the transform checks they agree).
fn batch_size(leaves: &[Leaf]) -> usize {
    leaves
        .first()
        .and_then(|l| l.shape().as_slice().first().copied())
        .unwrap_or(0)
}

/// The entrywise sum of two gradient trees of one module (the same parameters in order).
fn add(a: ParamGrads, b: ParamGrads) -> ParamGrads {
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
/// The finder runs the loss once more with the non-finite flag as its `metrics_fn`.
fn runners<M, A, F>(clipping: Clipping, loss_fn: F) -> Runners<M, A>
where
    M: Module + ModuleDisplay + 'static,
    A: Tree + 'static,
    F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
{
    let loss_fn = Arc::new(loss_fn);
    // The batch goes in as a one-argument tuple, so any tree (a tensor, a tuple, a struct) is a
    // batch; every leaf is batched on axis 0 and seen with a leading 1 (keep_batch_dim).
    let loss = move |m: &M, (a,): (A,)| -> Tensor<1> { loss_fn(m, a) };
    let finder = micro_grad_module(loss.clone())
        .metrics_fn(|g: ParamGrads| non_finite(&g))
        .microbatch_size(clipping.microbatch_size);
    // Summed in the backend's widest float (f64 on Flex and CUDA): the sum's rounding does not
    // grow with the batch as an f32 sum's does (the statement says what remains).
    let whole = micro_grad_module(loss)
        .accumulator(WideSum)
        .transform_fn(move |g: ParamGrads| clipping.apply(g));
    let micro = clipping
        .microbatch_size
        .map(|m| (m, whole.clone().microbatch_size(m)));
    let sum = Box::new(move |model: &M, batch: A| {
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
        let mut sum: Option<(ParamGrads, Tensor<1>)> = None;
        if let (true, Some((_, micro))) = (split > 0, &micro) {
            let (s, _) = micro.call(model, part(0..split)?)?;
            sum = Some(s);
        }
        if split < size || size == 0 {
            let (s, _) = whole.call(model, part(split..size)?)?;
            sum = Some(match sum {
                Some((a, fa)) => (add(a, s.0), fa + s.1),
                None => s,
            });
        }
        Ok(sum.expect("a part ran"))
    });
    let finder = Box::new(move |model: &M, batch: A| {
        let (_, aux) = finder.call(model, (batch,))?;
        let flags: Tensor<2> = aux.metrics;
        Ok(flags.flatten(0, 1))
    });
    Runners { sum, finder }
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
