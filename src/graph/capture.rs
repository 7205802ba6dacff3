//! Recording a user's function once, for one example, on Burn's capture device.
//!
//! A transform calls [`capture`] with a closure that creates the function's inputs on the
//! capture device (placeholders of one example's shape, or a model moved there), calls the
//! user's function, and returns the input and output tensors; the result is a [`Program`].
//!
//! The capture device is chosen per nesting depth from a per-thread pool, so a transform used
//! inside a function being recorded (a `vmap` inside a `vmap`) records on a device of its own.
//! Its default dtypes are the user's device's (`DeviceSettings`): a tensor the function creates
//! (`arange`, `zeros`, a comparison's mask, an `argmax`) gets the dtype it gets on the user's
//! device, so it combines with the function's arguments as in the loop (Flex's `I32` and
//! native bools against the capture backend's own `I64` and `U8` defaults otherwise).
//! A recording made for gradients runs on the capture device with autodiff turned on, the way a
//! user's own training step runs on an autodiff device: `Dropout` in training mode then records
//! its random mask (the transform draws it per example) instead of being skipped.
//!
//! Burn 0.22.1 specifics (the part most likely to move in later releases): runtime inputs are
//! declared by tensor id (placeholders created from data on the capture device are accepted as
//! inputs; parameters declared as inputs are accepted as well, as capture.rs:210-219 of
//! burn-capture 0.22.1 shows), and an autodiff tensor on the capture device is unwrapped with
//! `Dispatch::inner` before its id is read.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::{Device, DeviceConfig};
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::{DeviceSettings, TensorData};
use burn_dispatch::backends::Capture;
use burn_dispatch::backends::capture::CapturedGraph;
use burn_dispatch::{BackendTensor, Dispatch, DispatchTensor, DispatchTensorKind};
use burn_ir::TensorId;

use super::custom::CustomHandler;
use super::program::{Program, TensorSig};
use crate::VmapError;
use crate::guard;

thread_local! {
    /// Capture devices by nesting depth (Burn allows one open scope per device), one per
    /// default-dtype settings (a device's settings are set once).
    static POOL: RefCell<Vec<Vec<(DeviceSettings, Device)>>> = const { RefCell::new(Vec::new()) };
    /// How many captures are open on this thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The custom operations recorded so far by each open capture (by depth), with their
    /// handlers (`custom.rs`).
    static CUSTOMS: RefCell<Vec<Vec<Pending>>> = const { RefCell::new(Vec::new()) };
    /// The placeholders of each open capture (by depth): the id of the view the function gets
    /// -> the id of the value Burn records as the graph's input.
    static VIEWS: RefCell<Vec<HashMap<TensorId, TensorId>>> = const { RefCell::new(Vec::new()) };
}

/// A custom operation recorded by an open capture: its id and handler.
type Pending = (String, Arc<dyn CustomHandler>);

/// Ids of custom operations, unique in the process.
static CUSTOM_IDS: AtomicU64 = AtomicU64::new(0);

/// Gives `handler` to the open capture on `device` (a capture device of this thread's pool):
/// the program it records will run `handler` for the custom operation of the returned id.
/// `None` when no capture is open on `device`.
pub(crate) fn register_custom(device: &Device, handler: Arc<dyn CustomHandler>) -> Option<String> {
    let depth = POOL.with(|pool| {
        pool.borrow()
            .iter()
            .take(DEPTH.get())
            .position(|devices| devices.iter().any(|(_, d)| d == device))
    })?;
    let id = format!(
        "burn_vmap/{}#{}",
        handler.transform(),
        CUSTOM_IDS.fetch_add(1, Ordering::Relaxed)
    );
    CUSTOMS.with(|c| c.borrow_mut()[depth].push((id.clone(), handler)));
    Some(id)
}

/// What a capture closure records: the function's inputs and outputs (flattened, in order) and
/// whatever else the caller needs back (the output's tree structure, say).
pub(crate) struct Recording<R> {
    pub(crate) inputs: Vec<DispatchTensor>,
    pub(crate) outputs: Vec<DispatchTensor>,
    pub(crate) extra: R,
}

/// A placeholder input of signature `sig` on the capture device `device` (zeros: its values are
/// never read, only its shape and dtype are recorded).
pub(crate) fn placeholder(sig: &TensorSig, device: &Device) -> DispatchTensor {
    // The function gets a view of the recorded input, not the input itself: Burn's capture keeps
    // the data of a tensor created from data and would hand it to a read (zeros, a silently
    // wrong control flow), while a view has no value, so a read is `VmapError::ValueRead`. The
    // view is one `expand` of a value of ones-shape; the program takes the view as its input
    // and drops the `expand` (`Program::new`).
    let unit = vec![1; sig.shape.num_dims()];
    let data = TensorData::full_dtype(unit, 0, sig.dtype);
    let shape = sig.shape.clone();
    let device = device.as_dispatch();
    let (value, view) = if sig.dtype.is_float() {
        let v = Dispatch::float_from_data(data, device);
        (v.clone(), Dispatch::float_expand(v, shape))
    } else if sig.dtype.is_bool() {
        let v = Dispatch::bool_from_data(data, device);
        (v.clone(), Dispatch::bool_expand(v, shape))
    } else {
        let v = Dispatch::int_from_data(data, device);
        (v.clone(), Dispatch::int_expand(v, shape))
    };
    if let (Ok(value), Ok(view_id)) = (id("vmap", value), id("vmap", view.clone())) {
        let depth = DEPTH.get().saturating_sub(1);
        VIEWS.with(|v| {
            let mut v = v.borrow_mut();
            v.resize_with(depth + 1, HashMap::new);
            v[depth].insert(view_id, value);
        });
    }
    view
}

/// [`capture_with`] the default device's dtypes, for callers that know no user device.
pub(crate) fn capture<R>(
    transform: &'static str,
    autodiff: bool,
    record: impl FnOnce(&Device) -> Result<Recording<R>, VmapError>,
) -> Result<(Program, R), VmapError> {
    capture_with(transform, autodiff, Device::default().settings(), record)
}

/// Records `record` on a capture device (with autodiff on when `autodiff`, with the default
/// dtypes of `settings`: the user's device's) and returns the program with the closure's extra
/// result. `transform` names the caller in errors.
///
/// # Errors
/// - [`VmapError::ForeignTensor`]: the function used a tensor from another device;
/// - [`VmapError::ValueRead`]: the function read a recorded tensor's values;
/// - [`VmapError::FunctionPanicked`]: any other panic of the function;
/// - whatever error `record` returns.
pub(crate) fn capture_with<R>(
    transform: &'static str,
    autodiff: bool,
    settings: DeviceSettings,
    record: impl FnOnce(&Device) -> Result<Recording<R>, VmapError>,
) -> Result<(Program, R), VmapError> {
    capture_graph(
        transform,
        autodiff,
        settings,
        record,
        |graph, (inputs, outputs, extra): Boundary<R>, depth| {
            // The graph's boundary is ours, in order, with Burn's aliases resolved: map our ids to
            // it.
            let declared = unique(&outputs);
            let resolve = |id: &TensorId| {
                let pos = declared
                    .iter()
                    .position(|d| d == id)
                    .expect("declared above");
                graph.graph.outputs[pos]
            };
            let outputs = outputs.iter().map(resolve).collect();
            // Placeholders are their views; other inputs (a module's parameters) as Burn resolved
            // them.
            let inputs = VIEWS.with(|v| {
                let v = v.borrow();
                inputs
                    .iter()
                    .zip(&graph.graph.inputs)
                    .map(
                        |(ours, burns)| match v.get(depth).is_some_and(|m| m.contains_key(ours)) {
                            true => *ours,
                            false => *burns,
                        },
                    )
                    .collect()
            });
            let customs = CUSTOMS
                .with(|c| std::mem::take(&mut c.borrow_mut()[depth]))
                .into_iter()
                .collect::<HashMap<_, _>>();
            let program = Program::new(
                graph.graph.operations,
                inputs,
                outputs,
                graph.values,
                Arc::new(customs),
            );
            (program, extra)
        },
    )
}

/// The data of every tensor that reaches a capture device while `f` runs (a module moved there,
/// in the order the tensors arrive), captured as [`capture_with`] captures (`autodiff`, the
/// default dtypes of `settings`), nothing recorded as a program.
///
/// # Errors
/// As [`capture_with`]'s.
pub(crate) fn capture_values(
    transform: &'static str,
    autodiff: bool,
    settings: DeviceSettings,
    f: impl FnOnce(&Device) -> Result<(), VmapError>,
) -> Result<Vec<TensorData>, VmapError> {
    let record = |device: &Device| {
        f(device)?;
        Ok(Recording {
            inputs: Vec::new(),
            outputs: Vec::new(),
            extra: (),
        })
    };
    capture_graph(transform, autodiff, settings, record, |graph, _, _| {
        // Burn's tensor ids count up: the map's order is the order of arrival.
        graph.values.into_values().collect()
    })
}

/// Runs `record` in a scope of this thread's capture device for the current depth and gives
/// `finish` the captured graph and the boundary `record` declared (our ids: outputs possibly
/// repeated; its extra result), with the depth, while the depth is still held.
fn capture_graph<R, T>(
    transform: &'static str,
    autodiff: bool,
    settings: DeviceSettings,
    record: impl FnOnce(&Device) -> Result<Recording<R>, VmapError>,
    finish: impl FnOnce(CapturedGraph, Boundary<R>, usize) -> T,
) -> Result<T, VmapError> {
    let depth = DEPTH.get();
    let (device, fresh) = POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        while pool.len() <= depth {
            pool.push(Vec::new());
        }
        let devices = &mut pool[depth];
        match devices.iter().find(|(s, _)| *s == settings) {
            Some((_, d)) => (d.clone(), false),
            None => (Device::capture(), true),
        }
    });
    let _depth = DepthGuard::enter(depth);
    CUSTOMS.with(|c| {
        let mut c = c.borrow_mut();
        c.resize_with(depth + 1, Vec::new);
        c[depth].clear();
    });
    VIEWS.with(|v| {
        let mut v = v.borrow_mut();
        v.resize_with(depth + 1, HashMap::new);
        v[depth].clear();
    });
    let user_device = if autodiff {
        device.clone().autodiff()
    } else {
        device.clone()
    };

    let mut outcome: Option<Result<Boundary<R>, VmapError>> = None;
    let captured = device.capture_scope(|scope| {
        // A new device takes the user's default dtypes in its first scope (Burn checks them
        // against the capture client, which exists only inside a scope).
        let configured = if fresh {
            let config = DeviceConfig::new(
                Some(settings.float_dtype),
                Some(settings.int_dtype),
                Some(settings.bool_dtype),
            );
            device
                .clone()
                .configure(config)
                .map_err(|e| VmapError::Device {
                    transform,
                    why: format!("the capture device refused the arguments' default dtypes: {e:?}"),
                })
        } else {
            Ok(())
        };
        if fresh && configured.is_ok() {
            POOL.with(|pool| pool.borrow_mut()[depth].push((settings, device.clone())));
        }
        let result = configured
            .and_then(|()| {
                guard::catch(|| record(&user_device)).map_err(|m| classify(transform, m))
            })
            .and_then(|r| r)
            .and_then(|recording| {
                let inputs = ids(transform, recording.inputs)?;
                let outputs = ids(transform, recording.outputs)?;
                Ok((inputs, outputs, recording.extra))
            });
        // Burn records a placeholder's value as the input; the program takes its view.
        let (inputs, outputs) = match &result {
            Ok((inputs, outputs, _)) => {
                let declared = VIEWS.with(|v| {
                    let v = v.borrow();
                    let views = v.get(depth);
                    inputs
                        .iter()
                        .map(|id| views.and_then(|m| m.get(id)).copied().unwrap_or(*id))
                        .collect()
                });
                (declared, unique(outputs))
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        outcome = Some(result);
        scope.complete(inputs, outputs)
    });
    let result = outcome
        .expect("the capture closure ran")
        .and_then(|boundary| {
            let captured = captured.map_err(|e| VmapError::FunctionPanicked {
                transform,
                message: format!("Burn rejected the recorded graph: {e}"),
            })?;
            Ok(finish(captured, boundary, depth))
        });
    // What `finish` did not take of the custom operations is dropped with the capture.
    CUSTOMS.with(|c| c.borrow_mut()[depth].clear());
    result
}

/// A recording's boundary as the closure gave it: input ids, output ids, and its extra result.
type Boundary<R> = (Vec<TensorId>, Vec<TensorId>, R);

/// Marks one more capture open on this thread while it lives.
struct DepthGuard(usize);

impl DepthGuard {
    fn enter(depth: usize) -> Self {
        DEPTH.set(depth + 1);
        DepthGuard(depth)
    }
}

impl Drop for DepthGuard {
    fn drop(&mut self) {
        DEPTH.set(self.0);
    }
}

/// `ids` without repeats, first occurrence first.
fn unique(ids: &[TensorId]) -> Vec<TensorId> {
    let mut out: Vec<TensorId> = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(id) {
            out.push(*id);
        }
    }
    out
}

/// The capture ids of recorded tensors.
fn ids(transform: &'static str, tensors: Vec<DispatchTensor>) -> Result<Vec<TensorId>, VmapError> {
    tensors.into_iter().map(|t| id(transform, t)).collect()
}

/// The capture id of a tensor recorded on the capture device (autodiff or not).
fn id(transform: &'static str, tensor: DispatchTensor) -> Result<TensorId, VmapError> {
    fn of(transform: &'static str, tensor: BackendTensor<Capture>) -> Result<TensorId, VmapError> {
        match tensor {
            BackendTensor::Float(t) | BackendTensor::Int(t) | BackendTensor::Bool(t) => Ok(t.id()),
            BackendTensor::Autodiff(t) => Ok(t.into_primitive().id()),
            BackendTensor::Quantized(_) => Err(VmapError::UnsupportedOp {
                op: format!("{transform}: a quantized tensor"),
                why: "quantized tensors are not supported by burn-vmap; run the model in float",
            }),
        }
    }
    let foreign = |kind: &DispatchTensorKind| VmapError::ForeignTensor {
        transform,
        detail: format!(
            "a tensor on {:?}",
            burn_backend::TensorMetadata::device(kind)
        ),
    };
    match tensor.kind {
        DispatchTensorKind::Capture(t) => of(transform, t),
        DispatchTensorKind::Autodiff(inner) => match *inner {
            DispatchTensorKind::Capture(t) => of(transform, t),
            other => Err(foreign(&other)),
        },
        #[allow(unreachable_patterns)]
        other => Err(foreign(&other)),
    }
}

/// The error a panic inside a function recorded on a capture device stands for (a value read, a
/// tensor of another device, any other panic).
pub(crate) fn classify(transform: &'static str, message: String) -> VmapError {
    let lower = message.to_lowercase();
    if lower.contains("no concrete value") || lower.contains("no initialized value") {
        VmapError::ValueRead {
            transform,
            detail: first_line(&message),
        }
    } else if lower.contains("device") || lower.contains("wrong backend") {
        // Burn names a module's parameter on another device "on the wrong backend".
        VmapError::ForeignTensor {
            transform,
            detail: first_line(&message),
        }
    } else {
        VmapError::FunctionPanicked { transform, message }
    }
}

fn first_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("==="))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
