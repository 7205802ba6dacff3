//! What [`micro_grad`](super::micro_grad) plugs in: the loss output, the per-example gradient
//! functions (`transform_fn`, `metrics_fn`), where gradients come from, and [`MicroAux`].

use std::marker::PhantomData;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::TensorMetadata;
use burn_backend::backend::Backend;
use burn_backend::backend::ops::FloatTensorOps;

use super::Inner;
use crate::VmapError;
use crate::accumulate::AccOutput;
use crate::transform::grad::ParamGrads;
use crate::tree::{DynTree, Leaf, Lift, Tree};

/// What a loss function returns: a loss tensor with one element, or `(loss, aux)` where `aux` is
/// any [`Tree`] (optax's `has_aux`).
pub trait LossOutput<B: Backend> {
    /// The auxiliary tree (`()` without aux).
    type Aux: Tree<B>;
    /// Splits into the loss primitive and the aux.
    fn split(self) -> (TensorPrimitive<B>, Self::Aux);
}

impl<B: Backend, const D: usize> LossOutput<B> for Tensor<B, D> {
    type Aux = ();
    fn split(self) -> (TensorPrimitive<B>, ()) {
        (self.into_primitive(), ())
    }
}

impl<B: Backend, const D: usize, X: Tree<B>> LossOutput<B> for (Tensor<B, D>, X) {
    type Aux = X;
    fn split(self) -> (TensorPrimitive<B>, X) {
        (self.0.into_primitive(), self.1)
    }
}

/// A function of one example's gradient tree: `transform_fn` or `metrics_fn` of
/// [`micro_grad`](super::micro_grad). Built from closures by [`MicroGrad::transform_fn`](super::MicroGrad::transform_fn) and
/// [`MicroGrad::metrics_fn`](super::MicroGrad::metrics_fn).
pub trait GradFn<B: Backend> {
    /// Applies the function to a gradient tree given as leaves.
    ///
    /// # Errors
    /// If the gradient tree does not fit the function's argument type.
    fn apply(&self, grads: DynTree<B>) -> Result<DynTree<B>, VmapError>;
}

/// The type a [`GradFn`] makes of one example's gradient tree `G`: how the result type of
/// [`micro_grad`](super::micro_grad) follows from the closures given to it.
pub trait GradOut<G> {
    /// The function's output for a gradient tree of type `G`.
    type Out;
}

impl<G> GradOut<G> for Identity {
    type Out = G;
}

impl<G> GradOut<G> for NoMetrics {
    type Out = ();
}

impl<Fc, G, O> GradOut<G> for TreeFn<Fc, G, O> {
    type Out = O;
}

/// The result types of [`micro_grad`](super::micro_grad) with the parts `(S, T, M)`
/// (accumulator, `transform_fn`, `metrics_fn`), one example's raw gradient tree `G` and the loss
/// function's aux `X`, on the backend `B` of the gradients: how a call's result follows from the
/// builder's types. Implemented for every combination whose types are known ([`AccOutput`],
/// [`GradOut`], [`Lift`]); the others name their result with `call_as`.
pub trait MicroGradTypes<B: Backend, G, X> {
    /// The accumulated (transformed) gradients.
    type Grads: Tree<B>;
    /// The stacked metrics ([`MicroAux::metrics`]).
    type Metrics: Tree<B>;
    /// The stacked aux ([`MicroAux::aux`]).
    type Aux: Tree<B>;
}

impl<B: Backend, G, X, S, T, M> MicroGradTypes<B, G, X> for (S, T, M)
where
    T: GradOut<G>,
    M: GradOut<G>,
    S: AccOutput<B, T::Out>,
    M::Out: Lift<B>,
    X: Lift<B>,
{
    type Grads = S::Output;
    type Metrics = <M::Out as Lift<B>>::Lifted;
    type Aux = X::Lifted;
}

/// What a call of [`micro_grad`](super::micro_grad) returns, from its [`MicroGradTypes`] `P`:
/// the accumulated gradients and the stacked per-example parts.
pub type MicroGradResult<B, P, G, X> = (
    <P as MicroGradTypes<B, G, X>>::Grads,
    MicroAux<B, <P as MicroGradTypes<B, G, X>>::Metrics, <P as MicroGradTypes<B, G, X>>::Aux>,
);

/// The identity `transform_fn` (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl<B: Backend> GradFn<B> for Identity {
    fn apply(&self, grads: DynTree<B>) -> Result<DynTree<B>, VmapError> {
        Ok(grads)
    }
}

/// No `metrics_fn` (the default): `aux.metrics` is `()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl<B: Backend> GradFn<B> for NoMetrics {
    fn apply(&self, _: DynTree<B>) -> Result<DynTree<B>, VmapError> {
        Ok(DynTree::new(()))
    }
}

/// A closure `Fn(G) -> O` as a [`GradFn`].
pub struct TreeFn<Fc, G, O>(
    pub(super) Fc,
    /// The function's argument as error messages name it (`transform_fn(g)`).
    pub(super) &'static str,
    pub(super) PhantomData<fn(G) -> O>,
);

impl<B: Backend, Fc: Fn(G) -> O, G: Tree<B>, O: Tree<B>> GradFn<B> for TreeFn<Fc, G, O> {
    fn apply(&self, grads: DynTree<B>) -> Result<DynTree<B>, VmapError> {
        let g: G = grads.into_tree(self.1)?;
        Ok(DynTree::new((self.0)(g)))
    }
}

/// Where [`micro_grad`](super::micro_grad) takes gradients from: the differentiated arguments ([`ArgGrads`]) or
/// the parameters of a Burn module ([`ModuleGrads`], from [`micro_grad_module`](super::micro_grad_module)).
pub trait GradSource<AB: AutodiffBackend> {
    /// One example's gradient tree, from the backward pass `grads`; `tracked` is the tree of
    /// the differentiated arguments (as the gradient is structured).
    fn extract(&self, grads: &mut AB::Gradients, tracked: DynTree<AB>)
    -> DynTree<AB::InnerBackend>;
}

/// Gradients with respect to the arguments named by `argnums` (the default source).
#[derive(Debug, Clone, Copy, Default)]
pub struct ArgGrads;

impl<AB: AutodiffBackend> GradSource<AB> for ArgGrads {
    fn extract(
        &self,
        grads: &mut AB::Gradients,
        tracked: DynTree<AB>,
    ) -> DynTree<AB::InnerBackend> {
        let leaves = tracked
            .leaves
            .into_iter()
            .map(|leaf| {
                let Leaf::Float(t) = leaf else {
                    unreachable!("differentiated leaves are checked to be float")
                };
                let t = t.tensor();
                let g = AB::grad_remove(&t, grads).unwrap_or_else(|| {
                    Inner::<AB>::float_zeros(t.shape(), &AB::float_device(&t), t.dtype().into())
                });
                Leaf::Float(TensorPrimitive::Float(g))
            })
            .collect();
        DynTree {
            leaves,
            def: tracked.def,
        }
    }
}

/// Marks a [`MicroGrad`](super::MicroGrad) built by [`micro_grad_module`](super::micro_grad_module):
/// its gradients are a module's parameters', and its call takes the module.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModuleParams;

/// Gradients of a Burn module's parameters, as [`ParamGrads`] (see [`micro_grad_module`](super::micro_grad_module)).
#[derive(Debug)]
pub struct ModuleGrads<'a, M>(pub(super) &'a M);

impl<AB: AutodiffBackend, M: AutodiffModule<AB>> GradSource<AB> for ModuleGrads<'_, M> {
    fn extract(&self, grads: &mut AB::Gradients, _: DynTree<AB>) -> DynTree<AB::InnerBackend> {
        DynTree::new(ParamGrads::<AB::InnerBackend>::from_module::<AB, M>(
            grads, self.0,
        ))
    }
}

/// The per-example outputs of [`micro_grad`](super::micro_grad), stacked on a leading batch axis (optax's `Aux`).
/// Rows of microbatches that were not run are zero.
#[derive(Debug, Clone)]
pub struct MicroAux<B: Backend, M = (), X = ()> {
    /// The loss of every example: `[B]`.
    pub values: Tensor<B, 1>,
    /// `metrics_fn` of every example's raw gradient, stacked (`()` without `metrics_fn`).
    pub metrics: M,
    /// The function's aux of every example, stacked (`()` without aux).
    pub aux: X,
}
