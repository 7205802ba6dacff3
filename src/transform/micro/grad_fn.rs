//! What [`micro_grad`](super::micro_grad) plugs in: the loss output ([`LossOutput`]), the
//! per-example gradient functions (`transform_fn`, `metrics_fn`: [`GradFn`]), how its result
//! type follows from them ([`MicroGradTypes`]), and what it returns ([`MicroAux`]).

use std::marker::PhantomData;
use std::sync::Arc;

use burn::tensor::Tensor;

use crate::accumulate::AccOutput;
use crate::tree::{Leaf, Lift, Tree};

/// What a loss function returns: a loss tensor with one element, or `(loss, aux)` where `aux` is
/// any [`Tree`] (optax's `has_aux`).
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::micro::LossOutput;
/// let loss = Tensor::<1>::from_floats([2.0], &Device::default());
/// let (leaf, aux) = (loss.clone(), loss * 3.0).split();
/// assert_eq!(leaf.shape().to_vec(), vec![1]);
/// assert_eq!(aux.into_data().to_vec::<f32>().unwrap(), vec![6.0]);
/// ```
pub trait LossOutput {
    /// The auxiliary tree (`()` without aux).
    type Aux: Tree;
    /// Splits into the loss and the aux.
    fn split(self) -> (Leaf, Self::Aux);
}

impl<const D: usize> LossOutput for Tensor<D> {
    type Aux = ();
    fn split(self) -> (Leaf, ()) {
        (Leaf::new(self), ())
    }
}

impl<const D: usize, X: Tree> LossOutput for (Tensor<D>, X) {
    type Aux = X;
    fn split(self) -> (Leaf, X) {
        (Leaf::new(self.0), self.1)
    }
}

/// A loss function of [`micro_grad`](super::micro_grad): any `Fn(A) -> Out` whose `Out` is a
/// [`LossOutput`] (so the call's generics name the arguments, not the output).
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::micro::LossFn;
/// fn loss_of<A, F: LossFn<A>>(f: &F, a: A) -> F::Out {
///     f.loss(a)
/// }
/// let w = Tensor::<1>::from_floats([2.0], &Device::default());
/// let l = loss_of(&|w: Tensor<1>| (w.clone() * w).sum(), w);
/// assert_eq!(l.into_data().to_vec::<f32>().unwrap(), vec![4.0]);
/// ```
pub trait LossFn<A> {
    /// What the function returns.
    type Out: LossOutput;
    /// Calls the function.
    fn loss(&self, args: A) -> Self::Out;
}

impl<F, A, O> LossFn<A> for F
where
    F: Fn(A) -> O,
    O: LossOutput,
{
    type Out = O;
    fn loss(&self, args: A) -> O {
        self(args)
    }
}

/// A loss function of a module, for [`micro_grad_module`](super::micro_grad_module): any
/// `Fn(&M, A) -> Out` whose `Out` is a [`LossOutput`].
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::micro::ModuleLossFn;
/// fn loss_of<M, A, F: ModuleLossFn<M, A>>(f: &F, m: &M, a: A) -> F::Out {
///     f.loss(m, a)
/// }
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(2, 1).init(&device);
/// let l = loss_of(&|m: &Linear, x: Tensor<2>| m.forward(x).sum(), &model, Tensor::ones([1, 2], &device));
/// assert_eq!(l.dims(), [1]);
/// ```
pub trait ModuleLossFn<M, A> {
    /// What the function returns.
    type Out: LossOutput;
    /// Calls the function.
    fn loss(&self, module: &M, args: A) -> Self::Out;
}

impl<F, M, A, O> ModuleLossFn<M, A> for F
where
    F: Fn(&M, A) -> O,
    O: LossOutput,
{
    type Out = O;
    fn loss(&self, module: &M, args: A) -> O {
        self(module, args)
    }
}

/// The aux type of a loss function `F` of arguments `A` (`()` without aux).
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::transform::micro::LossAux;
/// fn aux_of<A, F: burn_vmap::transform::micro::LossFn<A>>(_: &F) -> std::marker::PhantomData<LossAux<F, A>> {
///     std::marker::PhantomData
/// }
/// let with_aux = |w: Tensor<1>| (w.clone().sum(), w);
/// let _: std::marker::PhantomData<Tensor<1>> = aux_of(&with_aux);
/// ```
pub type LossAux<F, A> = <<F as LossFn<A>>::Out as LossOutput>::Aux;

/// The aux type of a module's loss function `F` of arguments `A` (`()` without aux).
///
/// ```
/// use burn::nn::Linear;
/// use burn::tensor::Tensor;
/// use burn_vmap::transform::micro::{ModuleLossAux, ModuleLossFn};
/// fn aux_of<M, A, F: ModuleLossFn<M, A>>(_: &F) -> std::marker::PhantomData<ModuleLossAux<F, M, A>> {
///     std::marker::PhantomData
/// }
/// let no_aux = |m: &Linear, x: Tensor<2>| m.forward(x).sum();
/// let _: std::marker::PhantomData<()> = aux_of(&no_aux);
/// ```
pub type ModuleLossAux<F, M, A> = <<F as ModuleLossFn<M, A>>::Out as LossOutput>::Aux;

pub(crate) mod sealed {
    use super::*;
    use crate::VmapError;
    use crate::graph::TensorSig;
    use crate::transform::run::{Cache, Recorded, record};
    use crate::tree::TreeDef;

    /// One example's gradient tree, as a function of it is recorded at, and the cache of its
    /// recordings.
    pub struct GradSig<'a> {
        pub(crate) transform: &'static str,
        pub(crate) def: &'a TreeDef,
        pub(crate) sigs: &'a [TensorSig],
        pub(crate) cache: &'a Cache,
    }

    /// A recorded function of the gradients.
    pub struct RecordedFn(pub(crate) Arc<Recorded>);

    /// What a [`GradFn`] becomes for one gradient signature.
    pub enum GradProgram {
        /// The gradients themselves (no `transform_fn`).
        Identity,
        /// No output (no `metrics_fn`).
        Nothing,
        /// A recorded function of the gradients.
        Recorded(RecordedFn),
    }

    /// The recording side of [`GradFn`] (hidden: only this crate's types implement it).
    pub trait Sealed {
        /// Records the function at one example's gradient signature (once per signature, with
        /// `cache`).
        fn record(&self, sig: GradSig<'_>) -> Result<GradProgram, VmapError>;
    }

    impl Sealed for Identity {
        fn record(&self, _: GradSig<'_>) -> Result<GradProgram, VmapError> {
            Ok(GradProgram::Identity)
        }
    }

    impl Sealed for NoMetrics {
        fn record(&self, _: GradSig<'_>) -> Result<GradProgram, VmapError> {
            Ok(GradProgram::Nothing)
        }
    }

    impl<Fc: Fn(G) -> O, G: Tree, O: Tree> Sealed for TreeFn<Fc, G, O> {
        fn record(&self, sig: GradSig<'_>) -> Result<GradProgram, VmapError> {
            let recorded = sig.cache.get_or_record(sig.def, sig.sigs, false, || {
                record::<G, O>(sig.transform, &self.f, sig.def, sig.sigs, false)
            })?;
            Ok(GradProgram::Recorded(RecordedFn(recorded)))
        }
    }
}

/// A function of one example's gradient tree: `transform_fn` or `metrics_fn` of
/// [`micro_grad`](super::micro_grad), built from closures by
/// [`MicroGrad::transform_fn`](super::MicroGrad::transform_fn) and
/// [`MicroGrad::metrics_fn`](super::MicroGrad::metrics_fn); [`Identity`] and [`NoMetrics`] are
/// the defaults. Each is recorded once per gradient signature and run on the batched
/// per-example gradients.
///
/// ```
/// use burn_vmap::transform::micro::{GradFn, Identity, NoMetrics};
/// fn is_grad_fn<T: GradFn>(_: T) {}
/// is_grad_fn(Identity);
/// is_grad_fn(NoMetrics);
/// ```
pub trait GradFn: sealed::Sealed {}
impl<T: sealed::Sealed> GradFn for T {}

/// The type a [`GradFn`] makes of one example's gradient tree `G`: how the result type of
/// [`micro_grad`](super::micro_grad) follows from the closures given to it.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::transform::micro::{GradOut, Identity, NoMetrics};
/// fn out<T: GradOut<G>, G>() -> std::marker::PhantomData<T::Out> {
///     std::marker::PhantomData
/// }
/// let _: std::marker::PhantomData<Tensor<1>> = out::<Identity, Tensor<1>>();
/// let _: std::marker::PhantomData<()> = out::<NoMetrics, Tensor<1>>();
/// ```
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
/// function's aux `X`: how a call's result follows from the builder's types. Implemented for
/// every combination whose types are known ([`AccOutput`], [`GradOut`], [`Lift`]); the others
/// name their result with `call_as`.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::Sum;
/// use burn_vmap::transform::micro::{Identity, MicroGradTypes, NoMetrics};
/// fn grads<P: MicroGradTypes<G, ()>, G>() -> std::marker::PhantomData<P::Grads> {
///     std::marker::PhantomData
/// }
/// let _: std::marker::PhantomData<Tensor<2>> = grads::<(Sum, Identity, NoMetrics), Tensor<2>>();
/// ```
pub trait MicroGradTypes<G, X> {
    /// The accumulated (transformed) gradients.
    type Grads: Tree;
    /// The stacked metrics ([`MicroAux::metrics`]).
    type Metrics: Tree;
    /// The stacked aux ([`MicroAux::aux`]).
    type Aux: Tree;
}

impl<G, X, S, T, M> MicroGradTypes<G, X> for (S, T, M)
where
    T: GradOut<G>,
    M: GradOut<G>,
    S: AccOutput<T::Out>,
    M::Out: Lift,
    X: Lift,
{
    type Grads = S::Output;
    type Metrics = <M::Out as Lift>::Lifted;
    type Aux = X::Lifted;
}

/// What a call of [`micro_grad`](super::micro_grad) returns for the parts `S`, `T`, `M`
/// (accumulator, `transform_fn`, `metrics_fn`; see [`MicroGradTypes`]), the raw gradient `G`
/// and the aux `X`: the accumulated gradients and the stacked per-example parts.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::Concat;
/// use burn_vmap::transform::micro::{Identity, MicroGradResult, NoMetrics};
/// use burn_vmap::MicroAux;
/// // Per-example gradients of a `Tensor<1>` argument, no metrics, no aux.
/// fn same(r: MicroGradResult<Concat, Identity, NoMetrics, Tensor<1>, ()>) -> (Tensor<2>, MicroAux) {
///     r
/// }
/// ```
pub type MicroGradResult<S, T, M, G, X> = (
    <(S, T, M) as MicroGradTypes<G, X>>::Grads,
    MicroAux<
        <(S, T, M) as MicroGradTypes<G, X>>::Metrics,
        <(S, T, M) as MicroGradTypes<G, X>>::Aux,
    >,
);

/// What a call of [`micro_grad`](super::micro_grad) returns: its [`MicroGradResult`], or the
/// error.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::Sum;
/// use burn_vmap::transform::micro::{Identity, MicroGradCall, NoMetrics};
/// use burn_vmap::{MicroAux, VmapError};
/// fn same(r: MicroGradCall<Sum, Identity, NoMetrics, Tensor<1>, ()>) -> Result<(Tensor<1>, MicroAux), VmapError> {
///     r
/// }
/// ```
pub type MicroGradCall<S, T, M, G, X> = Result<MicroGradResult<S, T, M, G, X>, crate::VmapError>;

/// The identity `transform_fn` (the default).
///
/// ```
/// use burn_vmap::transform::micro::Identity;
/// let _ = Identity;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

/// No `metrics_fn` (the default): `aux.metrics` is `()`.
///
/// ```
/// use burn_vmap::transform::micro::NoMetrics;
/// let _ = NoMetrics;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

/// A closure `Fn(G) -> O` of one example's gradient tree, as a [`GradFn`] (what
/// [`MicroGrad::transform_fn`](super::MicroGrad::transform_fn) and
/// [`MicroGrad::metrics_fn`](super::MicroGrad::metrics_fn) make of their closures).
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::transform::micro::TreeFn;
/// let double = TreeFn::new(|g: Tensor<1>| g * 2.0);
/// let _ = double;
/// ```
pub struct TreeFn<Fc, G, O> {
    f: Fc,
    _types: PhantomData<fn(G) -> O>,
}

impl<Fc: Fn(G) -> O, G, O> TreeFn<Fc, G, O> {
    /// Wraps `f`.
    pub fn new(f: Fc) -> Self {
        Self {
            f,
            _types: PhantomData,
        }
    }
}

impl<Fc: Clone, G, O> Clone for TreeFn<Fc, G, O> {
    fn clone(&self) -> Self {
        Self {
            f: self.f.clone(),
            _types: PhantomData,
        }
    }
}

impl<Fc, G, O> std::fmt::Debug for TreeFn<Fc, G, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TreeFn({} -> {})",
            std::any::type_name::<G>(),
            std::any::type_name::<O>()
        )
    }
}

/// The per-example outputs of [`micro_grad`](super::micro_grad), stacked on a leading batch
/// axis (optax's `Aux`). Rows of microbatches that were not run are zero.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::MicroAux;
/// let aux = MicroAux { values: Tensor::<1>::zeros([4], &Device::default()), metrics: (), aux: () };
/// assert_eq!(aux.values.dims(), [4]);
/// ```
#[derive(Debug, Clone)]
pub struct MicroAux<M = (), X = ()> {
    /// The loss of every example: `[B]`.
    pub values: Tensor<1>,
    /// `metrics_fn` of every example's raw gradient, stacked (`()` without `metrics_fn`).
    pub metrics: M,
    /// The function's aux of every example, stacked (`()` without aux).
    pub aux: X,
}
