//! [`Vmap<B>`]: the batching backend decorator.

use core::marker::PhantomData;

use burn_backend::backend::{
    Backend, BackendTypes, DTypeUsageSet, ExecutionError, GraphUnsupported, MemoryPoolUsage,
    ProfileDuration, ProfileOptions, ProfileToken, SlicedPoolReport,
};
use burn_backend::{DType, TensorData};

use crate::tensor::VmapTensor;

/// A backend decorator whose tensors carry vmap batch dimensions.
///
/// `Vmap<B>` implements Burn's [`Backend`] on top of any backend `B`, the way
/// `Autodiff<B>` does. Each op applies a batching rule so that code written for one example runs
/// on a batch (the `vmap` transform moves tensors in and out of a level through
/// [`BatchOps`](crate::BatchOps)). Tensors that are not batched take a fast path that
/// calls `B` directly.
///
/// Stack it under autodiff to get per-example gradients: `Autodiff<Vmap<B>>`.
///
/// ```
/// use burn_backend::Backend;
/// use burn_flex::Flex;
/// use burn_vmap::Vmap;
///
/// assert_eq!(Vmap::<Flex>::name(&Default::default()), "vmap<flex>");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Vmap<B> {
    _b: PhantomData<B>,
}

impl<B: Backend> BackendTypes for Vmap<B> {
    type Device = B::Device;

    type FloatTensorPrimitive = VmapTensor<B::FloatTensorPrimitive>;
    type IntTensorPrimitive = VmapTensor<B::IntTensorPrimitive>;
    type BoolTensorPrimitive = VmapTensor<B::BoolTensorPrimitive>;
    type QuantizedTensorPrimitive = VmapTensor<B::QuantizedTensorPrimitive>;

    // A captured device graph replays the inner backend's launches against the buffers it
    // recorded; batch dims are bookkeeping on the host that a replay would not see, so `Vmap`
    // does not capture device graphs (the `graph_*` methods keep their defaults, which error,
    // so callers fall back to re-running).
    type GraphPrimitive = GraphUnsupported;
}

impl<B: Backend> Backend for Vmap<B> {
    fn name(device: &Self::Device) -> String {
        format!("vmap<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    // Overridden to forward to the inner backend (the defaults would do nothing, or measure
    // the wrong stream).
    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(device)
    }

    fn flush(device: &Self::Device) -> Result<(), ExecutionError> {
        B::flush(device)
    }

    fn ad_enabled(device: &Self::Device) -> bool {
        B::ad_enabled(device)
    }

    fn profile<O: Send + 'static>(
        device: &Self::Device,
        options: ProfileOptions,
        func: impl FnOnce() -> O + Send,
    ) -> Result<(O, ProfileDuration), ExecutionError> {
        B::profile(device, options, func)
    }

    fn profile_start(device: &Self::Device) -> Result<Option<ProfileToken>, ExecutionError> {
        B::profile_start(device)
    }

    fn profile_end(
        device: &Self::Device,
        token: ProfileToken,
        options: ProfileOptions,
    ) -> Result<ProfileDuration, ExecutionError> {
        B::profile_end(device, token, options)
    }

    fn profile_abandon(device: &Self::Device, token: ProfileToken) {
        B::profile_abandon(device, token)
    }

    fn memory_pool_report(device: &Self::Device) -> Option<Vec<SlicedPoolReport>> {
        B::memory_pool_report(device)
    }

    fn memory_pool_usage(device: &Self::Device) -> Option<MemoryPoolUsage> {
        B::memory_pool_usage(device)
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
