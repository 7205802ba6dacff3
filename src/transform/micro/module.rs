//! [`micro_grad_module`]: [`micro_grad`](super::micro_grad) over a Burn module's parameters.

use super::PlainVmap;
use super::grad_fn::{
    Identity, MicroAux, MicroGradResult, MicroGradTypes, ModuleGrads, ModuleParams, NoMetrics,
};
use super::micro_grad::{GradOptions, MicroGrad};
use super::run::Microbatching;
use crate::VmapError;
use crate::accumulate::Sum;
use crate::transform::grad::{ParamGrads, prepare_module};
use crate::transform::transform_call;
use crate::tree::Tree;

/// [`micro_grad`](super::micro_grad) for a Burn `Module`: per-example gradients of the module's
/// parameters, as [`ParamGrads`] (convert the accumulated result with
/// [`into_gradients_params`](ParamGrads::into_gradients_params) for `optimizer.step`).
///
/// `loss_fn(model, args)` computes the loss; the builder holds no model: [`call`](MicroGrad::call)
/// takes the model as it is at that step, so one builder serves a whole training loop (and the
/// optimizer can take the model by value between calls). `args` is a tuple whose entries are
/// all batched on axis 0 unless [`batch_argnums`](MicroGrad::batch_argnums) says otherwise.
/// Everything else is as [`micro_grad`](super::micro_grad): `keep_batch_dim` (default `true`:
/// `loss_fn` sees a batch of one, so an existing batched forward pass works unchanged),
/// microbatching, accumulator (default **[`Sum`](crate::accumulate::Sum)**), `transform_fn` and
/// `metrics_fn` over the per-example [`ParamGrads`] (their closures need no type annotation).
/// Build the model on `Autodiff<Vmap<B>>` (it trains normally there: nothing is batched
/// outside).
///
/// Each call first reads every parameter once (Burn initializes parameters lazily; that draw
/// must happen outside vmap) and refuses a module with a layer that mixes the examples of a
/// batch (`BatchNorm` in training mode) with [`VmapError::MixesExamples`], before anything
/// runs.
///
/// # Example: per-example clipping (DP-SGD's gradient)
/// ```
/// use burn::backend::Autodiff;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{clip_by_global_norm, global_norm, micro_grad_module, Vmap};
/// type AD = Autodiff<Vmap<TestBackend>>;
/// let device = Default::default();
/// let model: Linear<AD> = LinearConfig::new(3, 1).init(&device);
/// let x = Tensor::<AD, 2>::ones([8, 3], &device);
/// let y = Tensor::<AD, 2>::zeros([8, 1], &device);
///
/// let clipped_mean = micro_grad_module(|m: &Linear<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 2>)| {
///     (m.forward(x) - y).powi_scalar(2).mean()
/// })
/// .microbatch_size(4)
/// .accumulator(Mean)
/// .transform_fn(|g| clip_by_global_norm(g, 1.0))
/// .metrics_fn(|g| global_norm(&g));
/// let (grads, aux) = clipped_mean.call(&model, (x, y)).unwrap();
/// assert_eq!(aux.metrics.dims(), [8, 1]); // the raw per-example norms
/// assert!(global_norm(&grads).into_scalar() <= 1.0 + 1e-6); // a mean of clipped gradients
/// let for_optimizer = grads.into_gradients_params();
/// ```
pub fn micro_grad_module<F>(
    loss_fn: F,
) -> MicroGrad<F, Sum, Identity, NoMetrics, PlainVmap, ModuleParams> {
    let opts = GradOptions {
        argnums: vec![],
        single_argnum: false,
        batch_argnums: None,
        keep_batch_dim: true,
        micro: Microbatching::default(),
    };
    MicroGrad::new(loss_fn, ModuleParams, opts)
}

impl<F, S, T, M, V> MicroGrad<F, S, T, M, V, ModuleParams> {
    transform_call! {
        micro_grad_module;
        /// Applies the transform to `model` and the argument tuple `args`; the result type
        /// follows from the builder's ([`MicroGradTypes`] with the raw gradient
        /// [`ParamGrads`]).
        ///
        /// # Errors
        /// See [`micro_grad`](super::micro_grad), and [`VmapError::MixesExamples`] for a module
        /// with a `BatchNorm` (refused before anything runs).
        #[allow(clippy::type_complexity)]
        [(S, T, M): MicroGradTypes<AB::InnerBackend, ParamGrads<AB::InnerBackend>, Out::Aux>]
        pub fn call(
            &self,
            model: &Mod,
            args: I,
        ) -> Result<
            MicroGradResult<AB::InnerBackend, (S, T, M), ParamGrads<AB::InnerBackend>, Out::Aux>,
            VmapError,
        > {
            self.call_module(model, args, self.opts.micro.num_real_microbatches)
        }
    }

    transform_call! {
        micro_grad_module;
        /// As [`call`](MicroGrad::call), with `num_real_microbatches` for this call only.
        ///
        /// # Errors
        /// As [`call`](MicroGrad::call).
        #[allow(clippy::type_complexity)]
        [(S, T, M): MicroGradTypes<AB::InnerBackend, ParamGrads<AB::InnerBackend>, Out::Aux>]
        pub fn call_with(
            &self,
            model: &Mod,
            args: I,
            num_real_microbatches: Option<usize>,
        ) -> Result<
            MicroGradResult<AB::InnerBackend, (S, T, M), ParamGrads<AB::InnerBackend>, Out::Aux>,
            VmapError,
        > {
            self.call_module(model, args, num_real_microbatches)
        }
    }

    transform_call! {
        micro_grad_module;
        /// As [`call`](MicroGrad::call), with the result named by the caller (`let (grads,
        /// aux): (G, MicroAux<I, MO, XO>) = ...call_as(&model, args)?`), for results whose
        /// types do not follow from the builder's.
        ///
        /// # Errors
        /// As [`call`](MicroGrad::call).
        #[allow(clippy::type_complexity)]
        [G: Tree<AB::InnerBackend>, MO: Tree<AB::InnerBackend>, XO: Tree<AB::InnerBackend>]
        pub fn call_as<G, MO, XO>(
            &self,
            model: &Mod,
            args: I,
        ) -> Result<(G, MicroAux<AB::InnerBackend, MO, XO>), VmapError> {
            self.call_module(model, args, self.opts.micro.num_real_microbatches)
        }
    }

    transform_call! {
        micro_grad_module;
        #[allow(clippy::type_complexity)]
        [G: Tree<AB::InnerBackend>, MO: Tree<AB::InnerBackend>, XO: Tree<AB::InnerBackend>]
        fn call_module<G, MO, XO>(
            &self,
            model: &Mod,
            args: I,
            num_real_microbatches: Option<usize>,
        ) -> Result<(G, MicroAux<AB::InnerBackend, MO, XO>), VmapError> {
            prepare_module(model, "micro_grad_module")?;
            let loss = |a: A| (self.f)(model, a);
            self.run(
                &loss,
                &ModuleGrads(model),
                args,
                num_real_microbatches,
                "micro_grad_module",
            )
        }
    }
}
