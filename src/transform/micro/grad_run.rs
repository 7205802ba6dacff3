//! What `micro_grad` and `micro_grad_module` share once the loss is recorded: recording
//! `transform_fn` and `metrics_fn` at one example's gradient signature, laying out the outputs
//! (gradients to accumulate, then the stacked values, metrics and aux), and the microbatched
//! loop of [`GradStep`]s.

use burn::tensor::Tensor;

use super::batches::{Microbatching, run_microbatched};
use super::grad_fn::sealed::{GradProgram, GradSig, Sealed};
use super::grad_fn::{GradFn, LossOutput, MicroAux};
use super::micro_grad::MicroGrad;
use super::step::{GradStep, StepInputs};
use crate::VmapError;
use crate::accumulate::{Acc, Concat, Outputs, accumulator_spec};
use crate::graph::TensorSig;
use crate::transform::axes::Mapped;
use crate::transform::run::{Cache, Recorded, common_device};
use crate::tree::{DynTree, Leaf, Tree, TreeDef};

/// The recordings a [`MicroGrad`] holds: the loss, `transform_fn` and `metrics_fn`, each by
/// signature.
#[derive(Debug, Clone, Default)]
pub(super) struct Caches {
    pub(super) loss: Cache,
    pub(super) transform: Cache,
    pub(super) metrics: Cache,
}

impl Caches {
    /// The same, without the recordings of a `transform_fn` being replaced.
    pub(super) fn with_new_transform(self) -> Self {
        Self {
            transform: Cache::default(),
            ..self
        }
    }

    /// The same, without the recordings of a `metrics_fn` being replaced.
    pub(super) fn with_new_metrics(self) -> Self {
        Self {
            metrics: Cache::default(),
            ..self
        }
    }
}

/// A loss function's output as the recorded program's outputs: `(loss, aux)`.
pub(super) fn loss_tree(out: impl LossOutput) -> DynTree {
    let (loss, aux) = out.split();
    DynTree::tuple(vec![
        DynTree {
            leaves: vec![loss],
            def: TreeDef::Leaf,
        },
        DynTree::new(aux),
    ])
}

/// Per-example signatures with a leading unit dim where `unit` says (`keep_batch_dim`).
pub(super) fn with_unit_dims(mut sigs: Vec<TensorSig>, unit: &[bool]) -> Vec<TensorSig> {
    for (sig, unit) in sigs.iter_mut().zip(unit) {
        if *unit {
            let mut dims = sig.shape.to_vec();
            dims.insert(0, 1);
            sig.shape = dims.into();
        }
    }
    sigs
}

/// A recorded loss and what its run needs.
pub(super) struct GradRun<'a> {
    pub(super) transform: &'static str,
    /// Inputs: `params` then the arguments; outputs: `(loss, aux)` ([`loss_tree`]).
    pub(super) loss: &'a Recorded,
    /// A module's parameters (shared by every example), or none.
    pub(super) params: Vec<Leaf>,
    pub(super) args: Mapped,
    /// Per argument leaf: whether the loss sees it with a leading unit dim.
    pub(super) unit: Vec<bool>,
    /// The differentiated program inputs, in the order of the gradient tree.
    pub(super) tracked: Vec<usize>,
    /// One example's gradient tree: structure and signatures.
    pub(super) grad_def: TreeDef,
    pub(super) grad_sigs: Vec<TensorSig>,
    pub(super) micro: Microbatching,
}

/// The structure and per-example signatures of a gradient function's output.
fn outputs_of(p: &GradProgram, grad: (&TreeDef, &[TensorSig])) -> (TreeDef, Vec<TensorSig>) {
    match p {
        GradProgram::Identity => (grad.0.clone(), grad.1.to_vec()),
        GradProgram::Nothing => (().flatten().1, Vec::new()),
        GradProgram::Recorded(r) => (r.0.out_def.clone(), r.0.program.output_sigs().collect()),
    }
}

impl<F, S, T, M, Src> MicroGrad<F, S, T, M, Src> {
    /// Records `transform_fn` and `metrics_fn` at the gradient's signature and runs the loss
    /// microbatch by microbatch: the accumulated transformed gradients, and [`MicroAux`].
    pub(super) fn run_grads<G, MO, XO>(
        &self,
        run: GradRun<'_>,
    ) -> Result<(G, MicroAux<MO, XO>), VmapError>
    where
        S: Tree + Clone,
        T: GradFn,
        M: GradFn,
        G: Tree,
        MO: Tree,
        XO: Tree,
    {
        let transform = run.transform;
        let sig = |cache| GradSig {
            transform,
            def: &run.grad_def,
            sigs: &run.grad_sigs,
            cache,
        };
        let transform_fn = Sealed::record(&self.transform_fn, sig(&self.caches.transform))?;
        let metrics_fn = Sealed::record(&self.metrics_fn, sig(&self.caches.metrics))?;
        let grad = (&run.grad_def, run.grad_sigs.as_slice());
        let (grads_def, grads_sigs) = outputs_of(&transform_fn, grad);
        let (metrics_def, metrics_sigs) = outputs_of(&metrics_fn, grad);
        let TreeDef::Node { children, .. } = &run.loss.out_def else {
            unreachable!("the loss is recorded as (loss, aux)")
        };
        let aux_def = children[1].clone();
        let loss_sigs: Vec<TensorSig> = run.loss.program.output_sigs().collect();

        // The outputs: the transformed gradients (the user's accumulators), then the loss
        // values, the metrics and the aux (stacked: Concat).
        let spec = accumulator_spec(&self.accumulator.clone().flatten().1)?;
        let mut accs = spec.broadcast_to(&grads_def, "accumulator", "grads")?;
        let (n_grads, n_metrics) = (accs.len(), metrics_sigs.len());
        let value_sig = TensorSig {
            shape: [1].into(),
            dtype: loss_sigs[0].dtype,
        };
        let mut sigs = grads_sigs;
        sigs.push(value_sig);
        sigs.extend(metrics_sigs);
        sigs.extend(loss_sigs.into_iter().skip(1));
        accs.resize(sigs.len(), Acc::new(Concat));
        let mut paths = grads_def.leaf_paths("grads");
        paths.push("aux.values".into());
        paths.extend(metrics_def.leaf_paths("aux.metrics"));
        paths.extend(aux_def.leaf_paths("aux.aux"));
        let outs = Outputs {
            accs: &accs,
            sigs: &sigs,
            paths: &paths,
        };

        let all: Vec<Leaf> = run.params.iter().chain(&run.args.leaves).cloned().collect();
        let device = common_device(transform, &all)?;
        let n_params = run.params.len();
        let axes: Vec<Option<usize>> = std::iter::repeat_n(None, n_params)
            .chain(run.args.axes.iter().copied())
            .collect();
        let unit: Vec<bool> = std::iter::repeat_n(false, n_params)
            .chain(run.unit.iter().copied())
            .collect();
        let leaves = run_microbatched(&run.args, run.micro, outs, &device, |leaves, size, plan| {
            let mut inputs = run.params.clone();
            inputs.extend(leaves);
            GradStep {
                transform,
                loss: &run.loss.program,
                transform_fn: &transform_fn,
                metrics_fn: &metrics_fn,
                inputs: StepInputs {
                    leaves: inputs,
                    axes: axes.clone(),
                    unit: unit.clone(),
                    size,
                },
                tracked: &run.tracked,
                reduce: &plan[..n_grads],
            }
            .run_on(&device)
        })
        .map_err(|e| e.in_transform(transform))?;

        let mut leaves = leaves.into_iter();
        let grads =
            G::unflatten_named(&grads_def, leaves.by_ref().take(n_grads).collect(), "grads")?;
        let values = leaves.next().expect("the loss values: [B, 1]");
        let b = values.shape()[0];
        let values: Tensor<1> = values.reshape([b].into()).into_tensor_at("aux.values")?;
        let metrics = MO::unflatten_named(
            &metrics_def,
            leaves.by_ref().take(n_metrics).collect(),
            "aux.metrics",
        )?;
        let aux = XO::unflatten_named(&aux_def, leaves.collect(), "aux.aux")?;
        Ok((
            grads,
            MicroAux {
                values,
                metrics,
                aux,
            },
        ))
    }
}
