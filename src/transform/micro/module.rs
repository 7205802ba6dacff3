//! [`micro_grad_module`]: [`micro_grad`](super::micro_grad) over a Burn module's parameters.

use burn::module::{Module, ModuleDisplay};

use super::batches::Microbatching;
use super::grad_fn::{
    GradFn, Identity, MicroAux, MicroGradCall, MicroGradTypes, ModuleLossAux, ModuleLossFn,
    NoMetrics,
};
use super::grad_run::{GradRun, loss_tree, with_unit_dims};
use super::micro_grad::{GradOptions, MicroGrad, ModuleParams};
use crate::VmapError;
use crate::accumulate::Sum;
use crate::graph::TensorSig;
use crate::transform::axes::map_inputs;
use crate::transform::grad::ParamGrads;
use crate::transform::module::{self, record_module_fn};
use crate::transform::operations::{self, Operations};
use crate::transform::run::{common_device, example_sigs};
use crate::tree::{DynTree, Key, NodeKind, Tree, TreeDef};

const NAME: &str = "micro_grad_module";

/// [`micro_grad`](crate::micro_grad) for a Burn `Module`: per-example gradients of the module's
/// trainable float parameters, as [`ParamGrads`] (convert the accumulated result with
/// [`into_gradients_params`](ParamGrads::into_gradients_params) for `optimizer.step`).
///
/// ```text
/// for every example i:                        # every argument sliced at axis 0 by default
///     (value_i, aux_i), g_i = value_and_grad(loss_fn)(model, example i's args)  # ParamGrads
///     t_i = transform_fn(g_i); metric_i = metrics_fn(g_i)
/// grads = accumulator over t_i                # default SUM
/// ```
///
/// `loss_fn(model, args)` computes the loss with the unmodified model; the builder holds no
/// model: [`call`](MicroGrad::call) takes the model as it is at that step, so one builder
/// serves a whole training loop (the loss is recorded once, with the parameters as inputs, and
/// every call feeds the current ones). The rest of the model is part of the recording's key: a
/// call with another value of a field that is not a parameter (a `Dropout`'s probability, a
/// temperature, a `#[module(skip)]` value, read through Burn's `ModuleDisplay`, which
/// `#[derive(Module)]` implements) records the loss again, as does a change of the values of a
/// tensor field that is not a `Param` (a `RotaryEncoding`'s frequencies, a buffer the training
/// loop updates), which are read for that at every call (on a GPU, a read to the host of those
/// tensors: hold a large tensor that changes as a frozen `Param` instead, an input of the
/// recording that is never read back). `args` is a tuple whose entries are all batched on
/// axis 0 unless [`batch_argnums`](MicroGrad::batch_argnums) says otherwise. Everything else is
/// as [`micro_grad`](crate::micro_grad): `keep_batch_dim` (default `true`: `loss_fn` sees a
/// batch of one, so an existing batched forward pass works unchanged), microbatching,
/// accumulator (default **[`Sum`]**), `transform_fn` and `metrics_fn` over one example's
/// [`ParamGrads`] (their closures need no type annotation). A dense layer's, a convolution's or
/// an embedding's per-example weight gradient stays factored through `transform_fn` (a
/// [`clip_by_global_norm`](crate::clip_by_global_norm) computes each norm from the factors)
/// and the built-in accumulators' sums (one matrix product over the examples).
///
/// A module with a layer that mixes the examples of a batch in training mode (`BatchNorm`) is
/// refused with [`VmapError::MixesExamples`] before anything runs; with `model.valid()` it runs
/// per example and changes no state. `Dropout` in training mode draws a mask per example. A
/// module holding one parameter at two paths (a tied weight: the same `ParamId`) is refused
/// with [`VmapError::SharedParameter`].
///
/// # Example: per-example clipping (DP-SGD's gradient)
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::{clip_by_global_norm, global_norm, micro_grad_module};
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 1).init(&device);
/// let x = Tensor::<2>::ones([8, 3], &device);
/// let y = Tensor::<2>::zeros([8, 1], &device);
///
/// let clipped_mean = micro_grad_module(|m: &Linear, (x, y): (Tensor<2>, Tensor<2>)| {
///     (m.forward(x) - y).powi_scalar(2).mean()
/// })
/// .microbatch_size(4)
/// .accumulator(Mean)
/// .transform_fn(|g| clip_by_global_norm(g, 1.0))
/// .metrics_fn(|g| global_norm(&g));
/// let (grads, aux) = clipped_mean.call(&model, (x, y)).unwrap();
/// assert_eq!(aux.metrics.dims(), [8, 1]); // the raw per-example norms
/// assert!(global_norm(&grads).into_scalar::<f32>() <= 1.0 + 1e-6); // a mean of clipped gradients
/// let for_optimizer = grads.into_gradients_params();
/// ```
///
/// # Errors
/// See [`micro_grad`](crate::micro_grad), [`VmapError::MixesExamples`] and
/// [`VmapError::SharedParameter`].
pub fn micro_grad_module<F>(loss_fn: F) -> MicroGrad<F, Sum, Identity, NoMetrics, ModuleParams> {
    MicroGrad::new(
        loss_fn,
        GradOptions {
            argnums: vec![],
            single_argnum: false,
            batch_argnums: None,
            keep_batch_dim: true,
            micro: Microbatching::default(),
        },
    )
}

impl<F, S, T, M> MicroGrad<F, S, T, M, ModuleParams> {
    /// Applies the transform to `model` and the argument tuple `args`; the result type
    /// follows from the builder's ([`MicroGradTypes`] with the raw gradient [`ParamGrads`]).
    ///
    /// ```
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{accumulate::Concat, micro_grad_module};
    /// let device = Device::default();
    /// let model: Linear = LinearConfig::new(3, 2).init(&device);
    /// let x = Tensor::<2>::ones([5, 3], &device);
    /// let per_example = micro_grad_module(|m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum())
    ///     .accumulator(Concat);
    /// let (grads, aux) = per_example.call(&model, (x,)).unwrap();
    /// assert_eq!(grads.get::<3>("weight").unwrap().dims(), [5, 3, 2]);
    /// assert_eq!(aux.values.dims(), [5]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad_module`].
    pub fn call<Mod, I, A>(
        &self,
        model: &Mod,
        args: I,
    ) -> MicroGradCall<S, T, M, ParamGrads, ModuleLossAux<F, Mod, A>>
    where
        Mod: Module + ModuleDisplay,
        F: ModuleLossFn<Mod, A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        (S, T, M): MicroGradTypes<ParamGrads, ModuleLossAux<F, Mod, A>>,
    {
        self.run_module(model, args, self.opts.micro.num_real_microbatches)
    }

    /// As [`call`](MicroGrad::call), with `num_real_microbatches` for this call only.
    ///
    /// ```
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_grad_module;
    /// let device = Device::default();
    /// let model: Linear = LinearConfig::new(3, 1).init(&device);
    /// let x = Tensor::<2>::ones([4, 3], &device);
    /// let grad = micro_grad_module(|m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum()).microbatch_size(2);
    /// let (half, aux) = grad.call_with(&model, (x,), Some(1)).unwrap();
    /// assert_eq!(half.get::<1>("bias").unwrap().into_data().to_vec::<f32>().unwrap(), vec![2.0]);
    /// assert_eq!(aux.values.dims(), [4]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad_module`].
    pub fn call_with<Mod, I, A>(
        &self,
        model: &Mod,
        args: I,
        num_real_microbatches: Option<usize>,
    ) -> MicroGradCall<S, T, M, ParamGrads, ModuleLossAux<F, Mod, A>>
    where
        Mod: Module + ModuleDisplay,
        F: ModuleLossFn<Mod, A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        (S, T, M): MicroGradTypes<ParamGrads, ModuleLossAux<F, Mod, A>>,
    {
        self.run_module(model, args, num_real_microbatches)
    }

    /// As [`call`](MicroGrad::call), with the result named by the caller (`let (grads, aux):
    /// (G, MicroAux<MO, XO>) = ...call_as(&model, args)?`), for results whose types do not
    /// follow from the builder's.
    ///
    /// ```
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::accumulate::{Acc, Sum};
    /// use burn_vmap::tree::Spec;
    /// use burn_vmap::{micro_grad_module, MicroAux, ParamGrads};
    /// let device = Device::default();
    /// let model: Linear = LinearConfig::new(3, 1).init(&device);
    /// let x = Tensor::<2>::ones([4, 3], &device);
    /// let (g, _): (ParamGrads, MicroAux) = micro_grad_module(|m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum())
    ///     .accumulator(Spec::Leaf(Acc::new(Sum)))
    ///     .call_as(&model, (x,))
    ///     .unwrap();
    /// assert_eq!(g.get::<1>("bias").unwrap().into_data().to_vec::<f32>().unwrap(), vec![4.0]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad_module`].
    pub fn call_as<Mod, I, A, G, MO, XO>(
        &self,
        model: &Mod,
        args: I,
    ) -> Result<(G, MicroAux<MO, XO>), VmapError>
    where
        Mod: Module + ModuleDisplay,
        F: ModuleLossFn<Mod, A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        G: Tree,
        MO: Tree,
        XO: Tree,
    {
        self.run_module(model, args, self.opts.micro.num_real_microbatches)
    }

    /// The backend operations one [`call`](MicroGrad::call) on `model` and `args` runs, every
    /// microbatch, `transform_fn`, `metrics_fn` and the accumulation included: the call made on
    /// Burn's capture device, which records each operation instead of computing it (see
    /// [`operations`](crate::transform::operations): the proxy for a step's kernel launches on a
    /// GPU). Compare with
    /// [`standard_step_operations`](crate::transform::operations::standard_step_operations).
    ///
    /// ```
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::transform::operations::standard_step_operations;
    /// use burn_vmap::{ParamGrads, clip_by_global_norm, micro_grad_module};
    /// let device = Device::default();
    /// let model: Linear = LinearConfig::new(3, 2).init(&device);
    /// let x = Tensor::<2>::ones([8, 3], &device);
    /// let loss = |m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum();
    /// let clipped = micro_grad_module(loss).transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0));
    /// let ops = clipped.operations(&model, (x.clone(),)).unwrap();
    /// let standard = standard_step_operations(&model, (x,), loss).unwrap();
    /// println!("clipped sum: {ops}\nstandard step: {standard}");
    /// assert!(ops.launches() > standard.launches()); // the norms, the scaling
    /// ```
    ///
    /// # Errors
    /// See [`micro_grad_module`]; [`VmapError::ValueRead`] when the step reads a value on the
    /// host (a synchronisation inside the step).
    pub fn operations<Mod, I, A>(&self, model: &Mod, args: I) -> Result<Operations, VmapError>
    where
        Mod: Module + ModuleDisplay,
        F: ModuleLossFn<Mod, A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
    {
        let num_real = self.opts.micro.num_real_microbatches;
        self.with_module_run(model, args, num_real, |mut run| {
            let settings = common_device(NAME, &run.args.leaves)?.settings();
            let n_params = run.params.len();
            let mut leaves = std::mem::take(&mut run.params);
            leaves.append(&mut run.args.leaves);
            operations::count(NAME, settings, leaves, |mut moved| {
                run.args.leaves = moved.split_off(n_params);
                run.params = moved;
                self.run_grads::<DynTree, DynTree, DynTree>(run).map(|_| ())
            })
        })
    }

    /// Records the loss with the module's parameters as inputs (or takes the recording cached
    /// for this module's parameters and the arguments' signature) and runs it.
    fn run_module<Mod, I, A, G, MO, XO>(
        &self,
        model: &Mod,
        args: I,
        num_real_microbatches: Option<usize>,
    ) -> Result<(G, MicroAux<MO, XO>), VmapError>
    where
        Mod: Module + ModuleDisplay,
        F: ModuleLossFn<Mod, A>,
        I: Tree,
        A: Tree,
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        G: Tree,
        MO: Tree,
        XO: Tree,
    {
        self.with_module_run(model, args, num_real_microbatches, |run| {
            self.run_grads(run)
        })
    }

    /// Records the loss with the module's parameters as inputs (or takes the recording cached
    /// for this module's parameters and the arguments' signature) and gives `f` the run.
    fn with_module_run<Mod, I, A, R>(
        &self,
        model: &Mod,
        args: I,
        num_real_microbatches: Option<usize>,
        f: impl FnOnce(GradRun<'_>) -> Result<R, VmapError>,
    ) -> Result<R, VmapError>
    where
        Mod: Module + ModuleDisplay,
        F: ModuleLossFn<Mod, A>,
        I: Tree,
        A: Tree,
    {
        let (params, key) = module::ModuleParams::of(NAME, model)?;
        // A recording stands for the loss at this module's constants too (a temperature, a
        // dropout probability): a change records again instead of replaying a stale graph.
        let (leaves, def) = args.flatten();
        let plan = self.opts.plan(&leaves, &def)?;
        let mapped = map_inputs(NAME, leaves, def, &plan.in_axes)?;
        let sigs = with_unit_dims(example_sigs(&mapped.leaves, &mapped.axes), &plan.unit);
        let settings = common_device(NAME, &mapped.leaves)
            .map(|d| d.settings())
            .unwrap_or_else(|_| burn::tensor::Device::default().settings());
        let key = key.with_constants(NAME, model, settings)?;
        // One recording per module (parameter ids, shapes, flags, constants) and argument
        // signature.
        let key_def = TreeDef::Node {
            kind: NodeKind::Tuple,
            keys: vec![Key::Index(0), Key::Index(1)],
            children: vec![TreeDef::static_value(key), mapped.def.clone()],
        };
        let loss = self.caches.loss.get_or_record(&key_def, &sigs, true, || {
            let f = |m: &Mod, a: A| loss_tree(self.f.loss(m, a));
            record_module_fn(NAME, model, &f, &mapped.def, &sigs, settings)
        })?;
        // One example's gradient: ParamGrads of the trainable parameters.
        let tracked: Vec<usize> = (0..params.ids.len())
            .filter(|&i| params.trainable[i])
            .collect();
        let entries = tracked
            .iter()
            .map(|&i| {
                let t = params.tensors[i].clone();
                (params.paths[i].clone(), params.ids[i], t)
            })
            .collect();
        let (grad_leaves, grad_def) = ParamGrads::new(entries).flatten();
        let grad_sigs = grad_leaves
            .iter()
            .map(|l| TensorSig {
                shape: l.shape(),
                dtype: l.dtype(),
            })
            .collect();
        f(GradRun {
            transform: NAME,
            loss: &loss,
            params: params.tensors,
            args: mapped,
            unit: plan.unit,
            tracked,
            grad_def,
            grad_sigs,
            micro: Microbatching {
                num_real_microbatches,
                ..self.opts.micro
            },
        })
    }
}
