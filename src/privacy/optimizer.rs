//! [`DpSgd`]: DP-SGD around any Burn optimizer, and per-layer clipping.

use burn::module::{Module, ModuleDisplay};
use burn::optim::ModuleOptimizer;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::tensor::Tensor;
use burn_backend::TensorMetadata;
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::Dispatch;

use super::clipped;
use super::{DpMechanism, PrivacyError, Sampled, StepReport};
use crate::ParamGrads;
use crate::tree::{Leaf, Tree};

/// DP-SGD around any Burn optimizer (a [`ModuleOptimizer`]: what `SgdConfig::init`,
/// `AdamConfig::init`, ... return, or any per-parameter `burn::optim::Optimizer` through
/// `into()`): the [`DpMechanism`] makes the privatized gradient of each step, and the
/// optimizer applies it. See the [module](super) for a training loop.
///
/// It refuses a module with a layer that mixes the examples of a batch (BatchNorm in training
/// mode) before the first step, naming its path and the fix (GroupNorm / LayerNorm).
pub struct DpSgd {
    inner: ModuleOptimizer,
    mechanism: DpMechanism,
}

impl std::fmt::Debug for DpSgd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpSgd")
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

impl DpSgd {
    /// `inner` stepped with the gradients `mechanism` privatizes.
    pub fn new(inner: impl Into<ModuleOptimizer>, mechanism: DpMechanism) -> Self {
        Self {
            inner: inner.into(),
            mechanism,
        }
    }

    /// The mechanism (its loader, ε, statement, record).
    pub fn mechanism(&self) -> &DpMechanism {
        &self.mechanism
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &ModuleOptimizer {
        &self.inner
    }

    /// The optimizer and the mechanism, for saving both.
    pub fn into_parts(self) -> (ModuleOptimizer, DpMechanism) {
        (self.inner, self.mechanism)
    }

    /// One DP-SGD step of `model` with learning rate `lr` on a `batch` the mechanism's loader
    /// sampled, `loss_fn(model, example)` being the loss of one example seen as a batch of one
    /// ([`DpMechanism::noisy_gradient`]). Returns the updated model, as Burn's optimizers do,
    /// in training mode (`Module::train` is applied to a model whose parameters are not
    /// autodiff tensors yet, as Burn's optimizer step needs; evaluate with `model.valid()`),
    /// and what the step did.
    ///
    /// # Errors
    /// As [`DpMechanism::noisy_gradient`]; the model is returned untouched only through a
    /// successful step (on an error the optimizer did not run).
    pub fn step<M, A, F>(
        &mut self,
        lr: impl Into<ModuleLearningRate>,
        model: M,
        loss_fn: F,
        batch: Sampled<A>,
    ) -> Result<(M, StepReport), PrivacyError>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let (grads, report) = self.mechanism.noisy_gradient(&model, loss_fn, batch)?;
        Ok((apply(&mut self.inner, lr, model, grads), report))
    }
}

/// `optimizer` stepped on `model` with the privatized `grads`, the model put in training mode
/// first (Burn's optimizers step autodiff parameters).
pub(crate) fn apply<M: Module>(
    optimizer: &mut ModuleOptimizer,
    lr: impl Into<ModuleLearningRate>,
    model: M,
    grads: ParamGrads,
) -> M {
    let model = if clipped::is_autodiff(&model) {
        model
    } else {
        model.train()
    };
    optimizer.step(lr, model, grads.into_gradients_params())
}

/// Per-layer clipping: every float leaf of one example's gradient tree (every parameter tensor
/// of a [`ParamGrads`]) scaled to L2 norm at most `max_norm / √P` (`P` float leaves), so the
/// whole gradient's norm is at most `max_norm`, the sensitivity DP-SGD's noise is calibrated
/// to. Written for one example, as [`clip_by_global_norm`](crate::clip_by_global_norm); in a
/// `transform_fn` it clips every example independently (a factored weight gradient's norm is
/// taken from its factors and the scaling multiplies one factor).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::privacy::clip_per_layer;
/// use burn_vmap::{global_norm, micro_grad_module};
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let x = Tensor::<2>::ones([4, 3], &device) * 100.0;
/// let (g, _) = micro_grad_module(|m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum())
///     .transform_fn(|g| clip_per_layer(g, 1.0))
///     .call(&model, (x,))
///     .unwrap();
/// // Four examples, each clipped to norm 1: the sum's norm is at most 4.
/// assert!(global_norm(&g).into_scalar::<f32>() <= 4.0 + 1e-4);
/// let bias: Tensor<1> = g.get("bias").unwrap(); // each example's bias gradient: 1/√2 at most
/// assert!(bias.powi_scalar(2).sum().sqrt().into_scalar::<f32>() <= 4.0 / 2f32.sqrt() + 1e-4);
/// ```
///
/// # Panics
/// If the tree has no float leaf.
pub fn clip_per_layer<T: Tree>(grads: T, max_norm: f64) -> T {
    let (leaves, def) = grads.flatten();
    let count = leaves.iter().filter(|l| l.kind_name() == "float").count();
    assert!(count > 0, "clip_per_layer: the tree has no float leaf");
    let per_tensor = max_norm / (count as f64).sqrt();
    let leaves = leaves
        .into_iter()
        .map(|leaf| {
            if leaf.kind_name() != "float" {
                return leaf;
            }
            let t = leaf.into_dispatch();
            let rank = t.shape().num_dims();
            let sq = Dispatch::float_sum(Dispatch::float_mul(t.clone(), t.clone()));
            let norm = Tensor::<1>::from_dispatch(Dispatch::float_reshape(sq, [1].into())).sqrt();
            let factor = norm.clamp_min(per_tensor).recip() * per_tensor;
            let factor = Dispatch::float_reshape(factor.into_dispatch(), vec![1; rank].into());
            Leaf(Dispatch::float_mul(t, factor))
        })
        .collect();
    T::unflatten(&def, leaves).expect("the same tree rebuilds")
}
