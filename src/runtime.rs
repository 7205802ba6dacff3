//! The backend behind a user's [`Device`]: the one place that matches Burn 0.22's closed set of
//! dispatch backends, and where a user's `Tensor` becomes a backend primitive and back.
//!
//! Burn 0.22's `Tensor<D>` dispatches at run time over a closed enum (Flex, the cubecl
//! backends, capture, ...); no outside backend can sit under it. burn-vmap's engine runs at
//! primitive level instead: a transform is a [`Job`] generic over the inner backend, and
//! [`on_backend`] runs it on the backend of the user's device. The capture backend is one of
//! them: a transform used inside a function being recorded runs its batched computation on
//! capture tensors, recording it into the enclosing graph.

use burn::tensor::Device;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn_backend::TensorMetadata;
use burn_backend::backend::{AutodiffBackend, Backend};
use burn_dispatch::GradientCheckpointingStrategy;
use burn_dispatch::{
    BackendTensor, Dispatch, DispatchAutodiffContext, DispatchDevice, DispatchKindConversion,
    DispatchTensor, DispatchTensorKind,
};

use crate::VmapError;
use crate::value::Value;

/// A backend a user's tensors live on: its primitives come out of a Burn `Tensor` and go back
/// into one without a copy.
pub(crate) trait UserBackend: Backend {
    /// The primitive of a user's tensor on this backend. An autodiff tensor is taken without
    /// its autodiff graph (transforms differentiate what they record themselves).
    ///
    /// # Errors
    /// A description of the mismatch when the tensor lives on another backend.
    fn value(tensor: DispatchTensor) -> Result<Value<Self>, String>;

    /// A user's tensor holding `value`.
    fn tensor(value: Value<Self>) -> DispatchTensor;
}

impl<B: Backend> UserBackend for B
where
    DispatchTensor: DispatchKindConversion<B>,
{
    fn value(tensor: DispatchTensor) -> Result<Value<Self>, String> {
        match <DispatchTensor as DispatchKindConversion<B>>::try_into_backend(detach(tensor))? {
            BackendTensor::Float(t) => Ok(Value::Float(t)),
            BackendTensor::Int(t) => Ok(Value::Int(t)),
            BackendTensor::Bool(t) => Ok(Value::Bool(t)),
            BackendTensor::Autodiff(t) => Ok(Value::Float(t.into_primitive())),
            BackendTensor::Quantized(_) => {
                Err("quantized tensors are not supported by burn-vmap".to_string())
            }
        }
    }

    fn tensor(value: Value<Self>) -> DispatchTensor {
        let tensor = match value {
            Value::Float(t) => BackendTensor::Float(t),
            Value::Int(t) => BackendTensor::Int(t),
            Value::Bool(t) => BackendTensor::Bool(t),
        };
        <DispatchTensor as DispatchKindConversion<B>>::from_backend(tensor)
    }
}

/// `tensor` without its autodiff graph.
pub(crate) fn detach(tensor: DispatchTensor) -> DispatchTensor {
    if tensor.autodiff == DispatchAutodiffContext::Disabled {
        tensor
    } else if let DispatchTensorKind::Autodiff(inner) = &tensor.kind
        && matches!(**inner, DispatchTensorKind::Capture(_))
    {
        // A float tensor recorded for gradients (`Autodiff<Capture>`): Burn's `inner` refuses
        // capture tensors, so it is unwrapped here.
        let DispatchTensorKind::Autodiff(inner) = tensor.kind else {
            unreachable!()
        };
        let DispatchTensorKind::Capture(t) = *inner else {
            unreachable!()
        };
        let t = match t {
            BackendTensor::Autodiff(t) => BackendTensor::Float(t.into_primitive()),
            other => other,
        };
        DispatchTensor {
            kind: DispatchTensorKind::Capture(t),
            autodiff: DispatchAutodiffContext::Disabled,
        }
    } else if tensor.dtype().is_float() {
        Dispatch::inner(tensor)
    } else if tensor.dtype().is_bool() {
        Dispatch::bool_inner(tensor)
    } else {
        Dispatch::int_inner(tensor)
    }
}

/// Work generic over the backend behind the user's device.
pub(crate) trait Job {
    /// What the work returns.
    type Output;
    /// Runs the work on backend `B`, whose device is `device`.
    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output;
}

/// Runs `job` on the backend of `device` (the inner device of an autodiff device).
///
/// # Errors
/// [`VmapError::Device`] when burn-vmap does not run on that backend (a remote device, or a
/// deprecated NdArray/LibTorch device).
pub(crate) fn on_backend<J: Job>(
    transform: &'static str,
    device: &Device,
    job: J,
) -> Result<J::Output, VmapError> {
    on_dispatch(transform, device.as_dispatch().clone(), job)
}

fn on_dispatch<J: Job>(
    transform: &'static str,
    device: DispatchDevice,
    job: J,
) -> Result<J::Output, VmapError> {
    match device {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(d) => Ok(job.run::<burn_dispatch::backends::Flex>(d)),
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        DispatchDevice::Cube(d) => Ok(job.run::<burn_dispatch::backends::Cube>(d)),
        DispatchDevice::Capture(d) => Ok(job.run::<burn_dispatch::backends::Capture>(d)),
        DispatchDevice::Autodiff(d) => on_dispatch(transform, d.inner(), job),
        #[allow(unreachable_patterns)]
        other => Err(VmapError::Device {
            transform,
            why: format!(
                "burn-vmap runs on Flex, wgpu, CUDA and capture devices, not on {other:?}"
            ),
        }),
    }
}

/// Work generic over the autodiff backend behind the user's autodiff device: its inner backend
/// `B` and its gradient-checkpointing strategy `C`.
pub(crate) trait AutodiffJob {
    /// What the work returns.
    type Output;
    /// Runs the work on `Autodiff<B, C>`, whose inner device is `device`.
    fn run<B, C>(self, device: B::Device) -> Self::Output
    where
        B: UserBackend,
        C: CheckpointStrategy,
        DispatchTensor: DispatchKindConversion<Autodiff<B, C>>;
}

/// Runs `job` on the autodiff backend of `device`.
///
/// # Errors
/// [`VmapError::Device`] when `device` is not an autodiff device of a backend burn-vmap runs on.
pub(crate) fn on_autodiff_backend<J: AutodiffJob>(
    transform: &'static str,
    device: &Device,
    job: J,
) -> Result<J::Output, VmapError> {
    let unsupported = |what: String| VmapError::Device {
        transform,
        why: format!(
            "burn-vmap differentiates on Flex, wgpu and CUDA autodiff devices, not on {what}"
        ),
    };
    let DispatchDevice::Autodiff(device) = device.as_dispatch().clone() else {
        return Err(unsupported(format!("{device:?}")));
    };
    let balanced =
        device.gradient_checkpointing_strategy() == GradientCheckpointingStrategy::Balanced;
    /// `job` on `Autodiff<$b>` with the device's strategy.
    macro_rules! run {
        ($b:ty, $d:expr) => {
            if balanced {
                Ok(job.run::<$b, BalancedCheckpointing>($d))
            } else {
                Ok(job.run::<$b, NoCheckpointing>($d))
            }
        };
    }
    match device.inner() {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(d) => run!(burn_dispatch::backends::Flex, d),
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        DispatchDevice::Cube(d) => run!(burn_dispatch::backends::Cube, d),
        #[allow(unreachable_patterns)]
        other => Err(unsupported(format!("{other:?}"))),
    }
}

/// Whether `device` is a capture device: a function given tensors on it is being recorded by a
/// transform (the autodiff capture device of a recording made for gradients included).
pub(crate) fn is_capture(device: &Device) -> bool {
    matches!(
        device.clone().without_autodiff().as_dispatch(),
        DispatchDevice::Capture(_)
    )
}
