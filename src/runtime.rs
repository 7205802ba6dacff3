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

/// [`UserBackend`] for a backend whose tensors are dispatch's own kind (Flex, capture, the
/// autodiff backends over them, dispatch's fused cubecl backend).
macro_rules! direct {
    () => {
        fn value(tensor: DispatchTensor) -> Result<Value<Self>, String> {
            direct_value::<Self>(tensor)
        }

        fn tensor(value: Value<Self>) -> DispatchTensor {
            direct_tensor::<Self>(value)
        }
    };
}

#[cfg(feature = "flex")]
impl UserBackend for burn_dispatch::backends::Flex {
    direct!();
}

impl UserBackend for burn_dispatch::backends::Capture {
    direct!();
}

impl<B: Backend, C: CheckpointStrategy> UserBackend for Autodiff<B, C>
where
    DispatchTensor: DispatchKindConversion<Autodiff<B, C>>,
{
    direct!();
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<B: burn_fusion::FusionBackend> UserBackend for burn_fusion::Fusion<B>
where
    DispatchTensor: DispatchKindConversion<burn_fusion::Fusion<B>>,
{
    direct!();
}

/// The engine's cubecl backend: dispatch's `Cube` backend without Burn's fusion
/// ([`cube::Unfused`]).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl UserBackend for burn_cubecl::CubeBackend {
    fn value(tensor: DispatchTensor) -> Result<Value<Self>, String> {
        use cube::Unfused;
        let value = direct_value::<burn_dispatch::backends::Cube>(tensor)?;
        Ok(burn_dispatch::backends::Cube::unfused(value))
    }

    fn tensor(value: Value<Self>) -> DispatchTensor {
        use cube::Unfused;
        direct_tensor::<burn_dispatch::backends::Cube>(burn_dispatch::backends::Cube::fused(value))
    }
}

fn direct_value<B: Backend>(tensor: DispatchTensor) -> Result<Value<B>, String>
where
    DispatchTensor: DispatchKindConversion<B>,
{
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

fn direct_tensor<B: Backend>(value: Value<B>) -> DispatchTensor
where
    DispatchTensor: DispatchKindConversion<B>,
{
    let tensor = match value {
        Value::Float(t) => BackendTensor::Float(t),
        Value::Int(t) => BackendTensor::Int(t),
        Value::Bool(t) => BackendTensor::Bool(t),
    };
    <DispatchTensor as DispatchKindConversion<B>>::from_backend(tensor)
}

/// The backend the engine runs on for a wgpu or CUDA device: `CubeBackend`, unfused whether or
/// not dispatch's `Cube` backend is fused ([`cube`]).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) type CubeEngine = burn_cubecl::CubeBackend;

/// Dispatch's cubecl backend and the engine's: Burn's fusion left outside the engine.
///
/// Dispatch's `Cube` backend is `CubeBackend`, or `Fusion<CubeBackend>` with Burn's `fusion`
/// feature (which `burn`'s default features turn on: what a wgpu or CUDA user runs, whatever
/// burn-vmap's own features). Under fusion the engine's batched programs gave wrong values
/// (Burn 0.22.1's fusion misreads some of the strided views the engine builds: batch axes
/// permuted to the front, broadcast operands; per-example gradients of an MLP off by 0.06,
/// softmax, `ctc_loss`, gelu's backward, masked fills found by the loop oracle on wgpu), so
/// the engine runs on `CubeBackend` itself: a fused tensor is resolved out of its fusion stream
/// (the queued work runs first) when it enters a transform, and its results are registered back
/// as fusion tensors. The user's own code around the transforms stays fused.
///
/// Run on fusion again (2026-11-29, lavapipe), the engine gave the loop's per-example gradients
/// on the four bench models and passed the loop oracle but for two cases: a mean over an empty
/// dim read 0 for NaN (Burn's fusion zeroes tensors made after an empty one, with no vmap:
/// `tests/oracle/gaps.rs`, `known_gap_fusion_tensors_made_after_an_empty_one`) and `ctc_loss`
/// read NaN at one configuration (not yet reduced to Burn alone).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube {
    use burn_backend::TensorMetadata;
    use burn_backend::backend::Backend;
    use burn_cubecl::CubeBackend;
    use burn_fusion::stream::StreamId;
    use burn_fusion::{Fusion, FusionBackend, NoOp, get_client};
    use burn_ir::{InitOperationIr, OperationIr};

    use crate::value::Value;

    /// A cubecl backend and the backend the engine runs on for it.
    pub(crate) trait Unfused: Backend {
        /// The engine's backend (`CubeBackend`, fused or not).
        type Engine: Backend;
        /// `value` as the engine's.
        fn unfused(value: Value<Self>) -> Value<Self::Engine>;
        /// An engine's `value` as this backend's.
        fn fused(value: Value<Self::Engine>) -> Value<Self>;
    }

    impl Unfused for CubeBackend {
        type Engine = CubeBackend;

        fn unfused(value: Value<Self>) -> Value<Self> {
            value
        }

        fn fused(value: Value<Self>) -> Value<Self> {
            value
        }
    }

    impl<B: FusionBackend> Unfused for Fusion<B> {
        type Engine = B;

        fn unfused(value: Value<Self>) -> Value<B> {
            match value {
                Value::Float(t) => Value::Float(t.client.clone().resolve_tensor_float::<B>(t)),
                Value::Int(t) => Value::Int(t.client.clone().resolve_tensor_int::<B>(t)),
                Value::Bool(t) => Value::Bool(t.client.clone().resolve_tensor_bool::<B>(t)),
            }
        }

        fn fused(value: Value<B>) -> Value<Self> {
            /// `$t` registered in its device's fusion stream, as Burn's `float_from_data` does.
            macro_rules! register {
                ($t:expr, $handle:ident) => {{
                    let t = $t;
                    let (shape, dtype) = (t.shape(), t.dtype());
                    let client = get_client::<B>(&t.device());
                    let handle = B::$handle(t);
                    let desc = InitOperationIr::create(shape, dtype, || {
                        client.register_tensor_handle(handle)
                    });
                    client
                        .register(
                            StreamId::current(),
                            OperationIr::Init(desc),
                            NoOp::<B>::new(),
                        )
                        .into_iter()
                        .next()
                        .expect("an initialized tensor")
                }};
            }
            match value {
                Value::Float(t) => Value::Float(register!(t, float_tensor_handle)),
                Value::Int(t) => Value::Int(register!(t, int_tensor_handle)),
                Value::Bool(t) => Value::Bool(register!(t, bool_tensor_handle)),
            }
        }
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
        // Unfused: see `cube`.
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        DispatchDevice::Cube(d) => Ok(job.run::<CubeEngine>(d)),
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
