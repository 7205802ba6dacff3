//! Custom operations: a call of a function with its own batching rule, recorded as **one** node
//! of the enclosing program, whose batched form is decided when the program runs
//! (`custom_vmap`, `sequential_vmap`; `transform/custom.rs` implements [`CustomHandler`]).
//!
//! ```text
//! recording (the function is called on capture tensors of one example):
//!     record_call: one CustomOpIr on the inputs' capture device, outputs of the function's
//!                  per-example signatures; its handler joins the open capture (capture.rs),
//!                  which stores it in the program
//! running (Program::run on backend X, the custom op reached):
//!     X batches (Vmap<B>, Autodiff<Vmap<B>>) and an input is batched:
//!         level = innermost level at which an input is batched, size = its size
//!         in_batched[i] = input i batched there (every float input on an autodiff backend)
//!         args = the inputs, batched ones unbatched into axis 0 (unbatched ones broadcast there
//!                when marked batched)
//!         the rule's program for (size, in_batched, signature): run on X
//!         outputs declared batched are batched again at the level from their axis 0
//!     otherwise: the function's own program runs on X
//! ```
//!
//! The interpreter is generic over any backend (`Program::run::<B>`), and only this operation
//! needs to know whether `B` batches. The backends that do form a closed set (those of
//! `runtime.rs`, under `Vmap` and `Autodiff<Vmap>`), so [`execute`] finds out by comparing type
//! ids instead of putting a batching bound on every run of every program.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use burn::tensor::Device;
use burn_autodiff::Autodiff;
use burn_backend::backend::{AutodiffBackend, Backend, BackendTypes};
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_dispatch::backends::Capture;
use burn_dispatch::{DispatchDevice, DispatchTensor};
use burn_ir::{CustomOpIr, OperationIr, TensorIr};
use burn_router::RouterClient;

use super::env::Env;
use super::program::{Program, TensorSig};
use crate::Vmap;
use crate::VmapError;
use crate::batching::BatchOps;
use crate::level::Level;
use crate::runtime::{UserBackend, detach};
use crate::tensor::{BatchDims, VmapTensor};
use crate::value::Value;

/// The handlers of a program's custom operations, by operation id.
pub(crate) type Customs = Arc<HashMap<String, Arc<dyn CustomHandler>>>;

/// What a custom operation runs: the function for one example, and its batching rule.
pub(crate) trait CustomHandler: Send + Sync + Debug {
    /// The transform, for errors (`custom_vmap`, `sequential_vmap`).
    fn transform(&self) -> &'static str;

    /// The function recorded for one example: what runs when no input is batched.
    fn program(&self) -> &Program;

    /// The rule recorded for one batching pattern: `size` examples, input `i` with the batch as
    /// its axis 0 when `in_batched[i]`, inputs of signature `sigs`, on an autodiff capture device
    /// when `autodiff`.
    ///
    /// # Errors
    /// Whatever recording the rule gives (its own errors, [`VmapError::InvalidRuleOutput`] for
    /// outputs of another structure than the function's).
    fn rule(
        &self,
        size: usize,
        in_batched: &[bool],
        sigs: &[TensorSig],
        autodiff: bool,
    ) -> Result<Arc<RuleProgram>, VmapError>;
}

/// A rule recorded for one batching pattern.
#[derive(Debug)]
pub(crate) struct RuleProgram {
    pub(crate) program: Program,
    /// Which outputs have the batch as their axis 0.
    pub(crate) out_batched: Vec<bool>,
    /// The outputs' paths (`out`, `out[1]`), for errors.
    pub(crate) out_paths: Vec<String>,
}

// =================================================================================================
// Recording
// =================================================================================================

/// Records a call of a custom function on capture tensors: one custom operation of the capture
/// device the inputs are on, with outputs of the signatures of `handler`'s program. Returns the
/// outputs (autodiff capture tensors when an input is one).
///
/// # Errors
/// [`VmapError::ForeignTensor`] when the inputs are not all on one capture device of an open
/// recording.
pub(crate) fn record_call(
    transform: &'static str,
    inputs: Vec<DispatchTensor>,
    handler: Arc<dyn CustomHandler>,
) -> Result<Vec<DispatchTensor>, VmapError> {
    let foreign = |detail: String| VmapError::ForeignTensor { transform, detail };
    let autodiff = inputs.iter().any(|t| t.autodiff != Default::default());
    let mut client = None;
    let mut irs = Vec::with_capacity(inputs.len());
    for t in inputs {
        let device = Device::new(burn_backend::TensorMetadata::device(&t));
        let value = <Capture as UserBackend>::value(detach(t))
            .map_err(|_| foreign(format!("a tensor on {device:?}")))?;
        let router = match value {
            Value::Float(t) | Value::Int(t) | Value::Bool(t) => t,
        };
        match &client {
            None => client = Some(router.client.clone()),
            Some(c) if c.device() == router.client.device() => {}
            Some(c) => {
                return Err(foreign(format!(
                    "tensors on two capture devices ({:?} and {:?})",
                    c.device(),
                    router.client.device()
                )));
            }
        }
        irs.push(router.into_ir());
    }
    let client = client.expect("record_call: at least one input");
    let device = Device::new(DispatchDevice::Capture(client.device()));
    let outputs: Vec<TensorIr> = handler
        .program()
        .output_sigs()
        .map(|sig| TensorIr::uninit(client.create_empty_handle(), sig.shape, sig.dtype))
        .collect();
    let id = super::capture::register_custom(&device, handler).ok_or_else(|| {
        foreign(format!(
            "a tensor on {device:?}, which belongs to no recording in progress"
        ))
    })?;
    let op = CustomOpIr {
        id,
        inputs: irs,
        outputs,
        scalars: Vec::new(),
    };
    let outs = client.register(OperationIr::Custom(op));
    Ok(outs
        .into_iter()
        .map(|t| {
            let dtype = burn_backend::TensorMetadata::dtype(&t);
            let value = if dtype.is_float() {
                Value::Float(t)
            } else if dtype.is_bool() {
                Value::Bool(t)
            } else {
                Value::Int(t)
            };
            if autodiff {
                <Autodiff<Capture> as UserBackend>::tensor(match value {
                    Value::Float(t) => Value::Float(Autodiff::<Capture>::from_inner(t)),
                    Value::Int(t) => Value::Int(t),
                    Value::Bool(t) => Value::Bool(t),
                })
            } else {
                <Capture as UserBackend>::tensor(value)
            }
        })
        .collect())
}

// =================================================================================================
// Running
// =================================================================================================

/// Runs a custom operation: reads its inputs from `env`, binds its outputs.
///
/// # Errors
/// [`VmapError::UnsupportedOp`] for a custom operation burn-vmap did not record (a backend
/// extension's), and the errors of the rule (see [`CustomHandler::rule`], and
/// [`VmapError::InvalidRuleOutput`] for outputs that break what the rule declared).
pub(crate) fn execute<B: Backend>(env: &mut Env<B>, op: &CustomOpIr) -> Result<(), VmapError> {
    let Some(handler) = env.custom(&op.id) else {
        return Err(VmapError::UnsupportedOp {
            op: format!("custom operation `{}`", op.id),
            why: "custom operations of backend extensions carry no batching rule",
        });
    };
    let inputs: Vec<Value<B>> = op.inputs.iter().map(|t| env.read(t.id)).collect();
    let outputs = run::<B>(&handler, op, inputs, &env.device)?;
    for (t, value) in op.outputs.iter().zip(outputs) {
        env.bind(t.id, value);
    }
    Ok(())
}

/// `value` as a `U` (the same type as `T`, checked by the caller).
fn cast<T: 'static, U: 'static>(value: T) -> U {
    *(Box::new(value) as Box<dyn Any>)
        .downcast::<U>()
        .unwrap_or_else(|_| unreachable!("vmap: internal: cast between different types"))
}

/// Runs the custom operation on `B`: batched when `B` is a batching backend, the function's own
/// program otherwise. On the capture backend (a batched function recorded into an enclosing
/// one) a call with no batched input is recorded again as a custom operation, so that the
/// enclosing transform batches it with its rule too.
fn run<B: Backend>(
    handler: &Arc<dyn CustomHandler>,
    op: &CustomOpIr,
    inputs: Vec<Value<B>>,
    device: &B::Device,
) -> Result<Vec<Value<B>>, VmapError> {
    /// `run_batched` on `$x` (autodiff: `$ad`) when `B` is `$x`; with no batched input, the
    /// function's program runs (`program`) or the call is recorded again (`rerecord`).
    macro_rules! batching_backend {
        ($x:ty, $ad:expr, program) => {
            batching_backend!($x, $ad, |inputs, device: &<$x as BackendTypes>::Device| {
                handler.program().run::<$x>(inputs, device)
            })
        };
        ($x:ty, $ad:expr, rerecord) => {
            batching_backend!(
                $x,
                $ad,
                |inputs: Vec<Value<$x>>, _: &<$x as BackendTypes>::Device| {
                    let inputs = inputs.into_iter().map(lower_unbatched).collect();
                    let outputs = rerecord(handler, inputs)?;
                    Ok(outputs.into_iter().map(lift_unbatched).collect())
                }
            )
        };
        ($x:ty, $ad:expr, $unbatched:expr) => {
            if TypeId::of::<B>() == TypeId::of::<$x>() {
                let device = (device as &dyn Any)
                    .downcast_ref::<<$x as BackendTypes>::Device>()
                    .expect("vmap: internal: the device of the same backend");
                let out = run_batched::<$x>(handler, op, cast(inputs), device, $ad, $unbatched)?;
                return Ok(cast(out));
            }
        };
    }
    #[cfg(feature = "flex")]
    {
        use burn_dispatch::backends::Flex;
        batching_backend!(Vmap<Flex>, false, program);
        batching_backend!(Autodiff<Vmap<Flex>>, true, program);
    }
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        use crate::runtime::CubeEngine;
        batching_backend!(Vmap<CubeEngine>, false, program);
        batching_backend!(Autodiff<Vmap<CubeEngine>>, true, program);
    }
    batching_backend!(Vmap<Capture>, false, rerecord);
    // Differentiated: the function's program, so that its gradient is recorded too.
    batching_backend!(Autodiff<Vmap<Capture>>, true, program);
    if TypeId::of::<B>() == TypeId::of::<Capture>() {
        return Ok(cast(rerecord(handler, cast(inputs))?));
    }
    handler.program().run::<B>(inputs, device)
}

/// Records the call again on the capture device of `inputs`.
fn rerecord(
    handler: &Arc<dyn CustomHandler>,
    inputs: Vec<Value<Capture>>,
) -> Result<Vec<Value<Capture>>, VmapError> {
    let inputs = inputs
        .into_iter()
        .map(<Capture as UserBackend>::tensor)
        .collect();
    let outputs = record_call(handler.transform(), inputs, handler.clone())?;
    outputs
        .into_iter()
        .map(|t| {
            <Capture as UserBackend>::value(t).map_err(|why| VmapError::Device {
                transform: handler.transform(),
                why,
            })
        })
        .collect()
}

fn lower_unbatched(value: Value<Vmap<Capture>>) -> Value<Capture> {
    use crate::ops::into_unbatched;
    match value {
        Value::Float(t) => Value::Float(into_unbatched(t, Capture::float_reshape)),
        Value::Int(t) => Value::Int(into_unbatched(t, Capture::int_reshape)),
        Value::Bool(t) => Value::Bool(into_unbatched(t, Capture::bool_reshape)),
    }
}

fn lift_unbatched(value: Value<Capture>) -> Value<Vmap<Capture>> {
    match value {
        Value::Float(t) => Value::Float(VmapTensor::unbatched(t)),
        Value::Int(t) => Value::Int(VmapTensor::unbatched(t)),
        Value::Bool(t) => Value::Bool(VmapTensor::unbatched(t)),
    }
}

fn batch_dims<X: BatchOps>(value: &Value<X>) -> BatchDims {
    match value {
        Value::Float(t) => X::float_batch_dims(t),
        Value::Int(t) => X::int_batch_dims(t),
        Value::Bool(t) => X::bool_batch_dims(t),
    }
}

fn unbatch<X: BatchOps>(value: Value<X>, level: Level, size: usize) -> Value<X> {
    match value {
        Value::Float(t) => Value::Float(X::float_unbatch(t, level, size, 0)),
        Value::Int(t) => Value::Int(X::int_unbatch(t, level, size, 0)),
        Value::Bool(t) => Value::Bool(X::bool_unbatch(t, level, size, 0)),
    }
}

fn batch<X: BatchOps>(value: Value<X>, level: Level) -> Value<X> {
    match value {
        Value::Float(t) => Value::Float(X::float_batch(t, 0, level)),
        Value::Int(t) => Value::Int(X::int_batch(t, 0, level)),
        Value::Bool(t) => Value::Bool(X::bool_batch(t, 0, level)),
    }
}

/// Runs the custom operation on a batching backend `X` (an autodiff one when `autodiff`);
/// `unbatched` runs it when no input is batched.
fn run_batched<X: BatchOps>(
    handler: &Arc<dyn CustomHandler>,
    op: &CustomOpIr,
    inputs: Vec<Value<X>>,
    device: &X::Device,
    autodiff: bool,
    unbatched: impl FnOnce(Vec<Value<X>>, &X::Device) -> Result<Vec<Value<X>>, VmapError>,
) -> Result<Vec<Value<X>>, VmapError> {
    let dims: Vec<BatchDims> = inputs.iter().map(batch_dims::<X>).collect();
    let innermost = dims
        .iter()
        .flat_map(|d| d.as_slice().iter().copied())
        .max_by_key(|d| d.level);
    let Some(innermost) = innermost else {
        return unbatched(inputs, device);
    };
    let (level, size) = (innermost.level, innermost.size);
    // On an autodiff backend every float input goes to the rule batched (an unbatched one
    // broadcast), so that each example gets its own copy and its own gradient: a rule that
    // mixed the examples' contributions to a shared input would sum them.
    let in_batched: Vec<bool> = inputs
        .iter()
        .zip(&dims)
        .map(|(v, d)| d.position(level).is_some() || (autodiff && matches!(v, Value::Float(_))))
        .collect();
    let args: Vec<Value<X>> = inputs
        .into_iter()
        .zip(&in_batched)
        .map(|(v, &b)| if b { unbatch(v, level, size) } else { v })
        .collect();
    let sigs: Vec<TensorSig> = args
        .iter()
        .map(|v| TensorSig {
            shape: v.shape(),
            dtype: v.dtype(),
        })
        .collect();
    let rule = handler.rule(size, &in_batched, &sigs, autodiff)?;
    let outputs = rule.program.run::<X>(args, device)?;
    let mut result = Vec::with_capacity(outputs.len());
    for (((out, &batched), path), expected) in outputs
        .into_iter()
        .zip(&rule.out_batched)
        .zip(&rule.out_paths)
        .zip(&op.outputs)
    {
        let shape = out.shape().to_vec();
        let invalid = |why: String| VmapError::InvalidRuleOutput {
            output: path.clone(),
            why,
        };
        let example = if batched {
            if shape.first() != Some(&size) {
                return Err(invalid(format!(
                    "declared batched, so its leading axis must be the batch of size {size}, \
                     but its shape is {shape:?}"
                )));
            }
            batch(out, level)
        } else {
            out
        };
        let got = example.shape().to_vec();
        if got != expected.shape.as_slice() || !same_kind(example.dtype(), expected.dtype) {
            return Err(invalid(format!(
                "the function returns a rank-{} {} tensor of shape {:?} here, but the rule's \
                 output is a rank-{} {} tensor (shape {shape:?}, batch size {size}, declared {}); \
                 an output declared unbatched must have the shape of one example's output, a \
                 batched one one more leading axis",
                expected.shape.num_dims(),
                kind_name(expected.dtype),
                expected.shape.as_slice(),
                shape.len(),
                example.kind_name(),
                if batched { "batched" } else { "unbatched" },
            )));
        }
        result.push(example);
    }
    Ok(result)
}

fn kind_name(dtype: burn_backend::DType) -> &'static str {
    if dtype.is_float() {
        "float"
    } else if dtype.is_bool() {
        "bool"
    } else {
        "int"
    }
}

fn same_kind(a: burn_backend::DType, b: burn_backend::DType) -> bool {
    kind_name(a) == kind_name(b)
}
