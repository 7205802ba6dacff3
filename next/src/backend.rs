//! [`Vmap<B>`]: the batching backend decorator.

use core::marker::PhantomData;

use burn_backend::backend::{Backend, BackendTypes, DTypeUsageSet, ExecutionError};
use burn_backend::{DType, TensorData};

use crate::tensor::VmapTensor;

/// A backend decorator whose tensors carry vmap batch dimensions.
///
/// `Vmap<B>` implements Burn's [`Backend`] on top of any backend `B`, the way
/// `Autodiff<B>` does. Each op applies a batching rule so that code written for one example runs
/// on a batch: see [`vmap`](crate::vmap). Tensors that are not batched take a fast path that
/// calls `B` directly.
///
/// Stack it under autodiff to get per-example gradients: `Autodiff<Vmap<B>>`.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::Vmap;
/// use burn::tensor::backend::Backend;
///
/// type V = Vmap<TestBackend>;
/// let device = Default::default();
/// let x = Tensor::<V, 1>::from_floats([1.0, 2.0, 3.0], &device);
/// assert_eq!((x * 2.0).into_data().to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
/// assert!(V::name(&device).starts_with("vmap<"));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Vmap<B> {
    _b: PhantomData<B>,
}

impl<B: Backend> BackendTypes for Vmap<B> {
    type Device = B::Device;

    type FloatTensorPrimitive = VmapTensor<B::FloatTensorPrimitive>;
    type FloatElem = B::FloatElem;

    type IntTensorPrimitive = VmapTensor<B::IntTensorPrimitive>;
    type IntElem = B::IntElem;

    type BoolTensorPrimitive = VmapTensor<B::BoolTensorPrimitive>;
    type BoolElem = B::BoolElem;

    type QuantizedTensorPrimitive = VmapTensor<B::QuantizedTensorPrimitive>;
}

impl<B: Backend> Backend for Vmap<B> {
    fn name(device: &Self::Device) -> String {
        format!("vmap<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    // Overridden to forward to the inner backend (the defaults would do nothing).
    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(device)
    }

    fn memory_persistent_allocations<
        Output: Send,
        Input: Send,
        Func: Fn(Input) -> Output + Send,
    >(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        B::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        B::memory_cleanup(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        B::staging(data, device)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        B::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        B::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }
}
