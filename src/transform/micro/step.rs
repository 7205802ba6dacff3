//! One microbatch as one batched computation on the engine (a [`Job`] each): [`VmapStep`] for
//! `micro_vmap` (the recorded function on `Vmap<B>`), [`GradStep`] for `micro_grad` (the
//! recorded loss on `Autodiff<Vmap<B>>`, one backward pass, then the recorded `transform_fn`
//! and `metrics_fn` on `Vmap<B>` on the per-example gradients while they are still batched, at
//! the same level).
//!
//! Both hand every output back as the accumulators' [`Reduce`] plan says: summed or averaged
//! over the examples on the engine (so a factored per-example weight gradient is reduced as
//! one matrix product, never multiplied out per example), or unbatched into rows.

use burn::tensor::Device;
use burn_autodiff::Autodiff;
use burn_backend::TensorMetadata;
use burn_backend::backend::AutodiffBackend;
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};

use super::grad_fn::sealed::GradProgram;
use crate::Vmap;
use crate::VmapError;
use crate::accumulate::Reduce;
use crate::graph::Program;
use crate::guard;
use crate::level::{Level, Randomness, VmapScope};
use crate::runtime::{Job, UserBackend, on_backend};
use crate::transform::grad::into_autodiff;
use crate::transform::run::{batch, lift, lower, unbatch};
use crate::tree::Leaf;
use crate::value::Value;

type AD<B> = Autodiff<Vmap<B>>;

/// The inputs of one batched run: per input its leaf, its mapped axis (`None`: shared by every
/// example) and whether the function sees it with a leading unit axis (`keep_batch_dim`).
pub(super) struct StepInputs {
    pub(super) leaves: Vec<Leaf>,
    pub(super) axes: Vec<Option<usize>>,
    pub(super) unit: Vec<bool>,
    /// The examples in this run.
    pub(super) size: usize,
}

impl StepInputs {
    /// Lifts every input into `Vmap<B>`, batching the mapped ones at `level` (then giving them
    /// their unit axis, a pending reshape on the engine).
    fn lift<B: UserBackend>(
        self,
        transform: &'static str,
        level: Level,
    ) -> Result<Vec<Value<Vmap<B>>>, VmapError> {
        let mut out = Vec::with_capacity(self.leaves.len());
        for ((leaf, axis), unit) in self.leaves.into_iter().zip(&self.axes).zip(&self.unit) {
            let mut v = lift::<B>(transform, leaf)?;
            if let Some(a) = axis {
                v = batch::<Vmap<B>>(v, *a, level);
            }
            if *unit {
                v = unit_axis::<B>(v);
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// `v` with a leading axis of size 1 (logical; a batched tensor keeps its batch dims).
fn unit_axis<B: UserBackend>(v: Value<Vmap<B>>) -> Value<Vmap<B>> {
    let mut dims = v.shape().to_vec();
    dims.insert(0, 1);
    let shape = dims.into();
    match v {
        Value::Float(t) => Value::Float(Vmap::<B>::float_reshape(t, shape)),
        Value::Int(t) => Value::Int(Vmap::<B>::int_reshape(t, shape)),
        Value::Bool(t) => Value::Bool(Vmap::<B>::bool_reshape(t, shape)),
    }
}

/// An output leaving the batched run as `reduce` says: unbatched at axis 0 (`[m, ...]`), then,
/// for a float leaf to be summed or averaged, reduced over that axis on the engine
/// (`[1, ...]`; a factored product's sum over examples is one matrix product).
fn hand_back<B: UserBackend>(v: Value<Vmap<B>>, reduce: Reduce, level: Level, size: usize) -> Leaf {
    // Cast while still batched at `level`, where equal values are known as equal (the cast
    // shares their casts: `rules::factored::cast`).
    let v = match (reduce, v) {
        (Reduce::WideSum, Value::Float(t)) => {
            let wide = crate::compat::widest_float::<B>(&t.device());
            Value::Float(Vmap::<B>::float_cast(t, wide))
        }
        (_, v) => v,
    };
    let rows = unbatch::<Vmap<B>>(v, level, size, 0);
    let out = match (reduce, rows) {
        (Reduce::Sum | Reduce::WideSum, Value::Float(t)) => {
            Value::Float(Vmap::<B>::float_sum_dim(t, 0))
        }
        (Reduce::Mean, Value::Float(t)) => Value::Float(Vmap::<B>::float_mean_dim(t, 0)),
        (_, rows) => rows,
    };
    Leaf(B::tensor(lower::<B>(out)))
}

/// The first random draw refused in `scope`, as the transform's error.
fn refused(scope: &VmapScope, transform: &'static str) -> Result<(), VmapError> {
    match scope.take_refused() {
        Some(r) => Err(VmapError::Randomness {
            transform,
            op: r.op.into(),
            size: r.size,
        }),
        None => Ok(()),
    }
}

// -------------------------------------------------------------------------------------------------
// micro_vmap
// -------------------------------------------------------------------------------------------------

/// One microbatch of `micro_vmap`: the recorded function on `Vmap<B>`, every output handed
/// back as `reduce` says.
pub(super) struct VmapStep<'a> {
    pub(super) transform: &'static str,
    pub(super) program: &'a Program,
    pub(super) inputs: StepInputs,
    pub(super) reduce: &'a [Reduce],
    pub(super) randomness: Randomness,
}

impl VmapStep<'_> {
    /// Runs on the backend of `device`.
    pub(super) fn run_on(self, device: &Device) -> Result<Vec<Leaf>, VmapError> {
        on_backend(self.transform, device, self)?
    }
}

impl Job for VmapStep<'_> {
    type Output = Result<Vec<Leaf>, VmapError>;

    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output {
        let transform = self.transform;
        let level = Level::fresh();
        let size = self.inputs.size;
        let inputs = self.inputs.lift::<B>(transform, level)?;
        let scope = VmapScope::enter(level, size, self.randomness);
        let out = guard::catch(|| -> Result<Vec<Leaf>, VmapError> {
            let outputs = self.program.run::<Vmap<B>>(inputs, &device)?;
            refused(&scope, transform)?;
            Ok(outputs
                .into_iter()
                .zip(self.reduce)
                .map(|(v, r)| hand_back::<B>(v, *r, level, size))
                .collect())
        })
        .map_err(|message| VmapError::Op { transform, message })?;
        drop(scope);
        out
    }
}

// -------------------------------------------------------------------------------------------------
// micro_grad
// -------------------------------------------------------------------------------------------------

/// One microbatch of `micro_grad`: per-example value-and-grad of the recorded loss (outputs:
/// the loss, then the aux leaves) in one backward pass on `Autodiff<Vmap<B>>`, then
/// `transform_fn` and `metrics_fn` on `Vmap<B>` on the per-example gradients, still batched.
///
/// Returns the transformed gradients as `reduce` says, then the rows of the loss values
/// (`[m, 1]`), of the metrics and of the aux.
pub(super) struct GradStep<'a> {
    pub(super) transform: &'static str,
    pub(super) loss: &'a Program,
    pub(super) transform_fn: &'a GradProgram,
    pub(super) metrics_fn: &'a GradProgram,
    /// The loss program's inputs (a module's parameters first, unmapped).
    pub(super) inputs: StepInputs,
    /// The differentiated inputs, in the order of the gradient tree.
    pub(super) tracked: &'a [usize],
    pub(super) reduce: &'a [Reduce],
}

impl GradStep<'_> {
    /// Runs on the backend of `device`.
    pub(super) fn run_on(self, device: &Device) -> Result<Vec<Leaf>, VmapError> {
        on_backend(self.transform, device, self)?
    }
}

impl Job for GradStep<'_> {
    type Output = Result<Vec<Leaf>, VmapError>;

    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output {
        let transform = self.transform;
        let level = Level::fresh();
        let size = self.inputs.size;
        let values = self.inputs.lift::<B>(transform, level)?;
        let mut is_tracked = vec![false; values.len()];
        for &i in self.tracked {
            is_tracked[i] = true;
        }
        let inputs: Vec<Value<AD<B>>> = values
            .into_iter()
            .zip(&is_tracked)
            .map(|(v, tracked)| match v {
                Value::Float(t) if *tracked => Value::Float(AD::<B>::float_set_require_grad(
                    AD::<B>::from_inner(t),
                    true,
                )),
                v => into_autodiff::<B>(v),
            })
            .collect();
        let tracked: Vec<_> = self
            .tracked
            .iter()
            .map(|&i| inputs[i].clone().float())
            .collect();
        // Every example draws its own random numbers (a dropout mask each), as the loop would.
        let scope = VmapScope::enter(level, size, Randomness::Different);
        let out = guard::catch(|| -> Result<Vec<Leaf>, VmapError> {
            let mut outputs = self.loss.run::<AD<B>>(inputs, &device)?.into_iter();
            let loss = outputs.next().expect("a loss output").float();
            let shape = loss.shape();
            if shape.num_elements() != 1 {
                return Err(VmapError::LossNotScalar {
                    transform,
                    shape: shape.to_vec(),
                });
            }
            let aux: Vec<Value<Vmap<B>>> = outputs.map(inner::<B>).collect();
            let value = Vmap::<B>::float_reshape(AD::<B>::inner(loss.clone()), [1].into());
            let mut grads = AD::<B>::backward(loss);
            // Each gradient is moved out of the container at its input's last place in
            // `tracked` (an argument listed twice in `argnums` gets it twice).
            let mut last = vec![0; is_tracked.len()];
            for (p, &i) in self.tracked.iter().enumerate() {
                last[i] = p;
            }
            let raw: Vec<Value<Vmap<B>>> = tracked
                .iter()
                .enumerate()
                .map(|(p, t)| {
                    let g = match last[self.tracked[p]] == p {
                        true => AD::<B>::grad_remove(t, &mut grads),
                        false => AD::<B>::grad(t, &grads),
                    };
                    Value::Float(g.unwrap_or_else(|| {
                        // Not reached by the loss: a zero gradient for every example.
                        Vmap::<B>::float_zeros(t.shape(), &device, t.dtype().into())
                    }))
                })
                .collect();
            drop(grads);
            let metrics = match self.metrics_fn {
                GradProgram::Nothing => Vec::new(),
                p => apply::<B>(p, raw.clone(), &device)?,
            };
            let transformed = apply::<B>(self.transform_fn, raw, &device)?;
            refused(&scope, transform)?;
            // Last leaf first, in the order a backward pass produces its gradients (a module's
            // first layer last), then put back in order: glibc lays Flex's fresh outputs out
            // best in that order (README, Performance), and the clipped step of the MLP of
            // `benches/clipping.rs` takes 38% fewer page faults than in the leaves' order.
            let reduce = &self.reduce[..transformed.len()];
            let mut out: Vec<Leaf> = transformed
                .into_iter()
                .zip(reduce)
                .rev()
                .map(|(v, r)| hand_back::<B>(v, *r, level, size))
                .collect();
            out.reverse();
            let rows = std::iter::once(Value::Float(value))
                .chain(metrics)
                .chain(aux);
            out.extend(rows.map(|v| hand_back::<B>(v, Reduce::Rows, level, size)));
            Ok(out)
        })
        .map_err(|message| VmapError::Op { transform, message })?;
        drop(scope);
        out
    }
}

/// A gradient function's outputs on the (batched) gradients `raw`.
fn apply<B: UserBackend>(
    p: &GradProgram,
    raw: Vec<Value<Vmap<B>>>,
    device: &B::Device,
) -> Result<Vec<Value<Vmap<B>>>, VmapError> {
    match p {
        GradProgram::Identity => Ok(raw),
        GradProgram::Nothing => Ok(Vec::new()),
        GradProgram::Recorded(r) => r.0.program.run::<Vmap<B>>(raw, device),
    }
}

/// A value of `Autodiff<Vmap<B>>` as a value of `Vmap<B>` (a float tensor without its graph).
fn inner<B: UserBackend>(v: Value<AD<B>>) -> Value<Vmap<B>> {
    match v {
        Value::Float(t) => Value::Float(AD::<B>::inner(t)),
        Value::Int(t) => Value::Int(t),
        Value::Bool(t) => Value::Bool(t),
    }
}
