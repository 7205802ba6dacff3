//! `QTensorOps` for `Vmap<B>`.
//!
//! Unbatched quantized tensors pass straight through. A batched quantized tensor can be
//! dequantized (the physical tensor was quantized as a whole, so dequantizing it physically is
//! exact) and moved between devices; other ops on it panic with a `vmap:` message that says to
//! dequantize first, rather than mixing scales across examples.

use burn_backend::backend::{Backend, ExecutionError};
use burn_backend::ops::QTensorOps;
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{FloatDType, Shape, Slice, TensorData};

use super::assert_unbatched;
use crate::Vmap;
use crate::rules::elementwise::unary;
use crate::rules::helpers::vmap_panic;
use crate::tensor::VmapTensor;

fn unbatched_q<P: Clone>(op: &str, t: VmapTensor<P>) -> P {
    if t.is_batched() {
        vmap_panic(
            op,
            "the quantized tensor is batched, and its quantization scales would mix examples",
            "dequantize it (`tensor.dequantize()`) before this op inside vmap",
        )
    }
    t.inner()
}

impl<B: Backend> QTensorOps<Self> for Vmap<B> {
    fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_from_data(data, device))
    }

    fn quantize(
        tensor: FloatTensor<Self>,
        scheme: &QuantScheme,
        qparams: QuantizationParametersPrimitive<Self>,
    ) -> QuantizedTensor<Self> {
        let t = unbatched_q("quantize", tensor);
        let scales = unbatched_q("quantize", qparams.scales);
        let global = qparams.global.map(|g| unbatched_q("quantize", g));
        VmapTensor::unbatched(B::quantize(
            t,
            scheme,
            QuantizationParametersPrimitive { scales, global },
        ))
    }

    fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        unary(tensor, |t| B::dequantize(t, dtype))
    }

    fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self> {
        unary(tensor, |t| B::q_to_device(t, device))
    }

    fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_reshape(unbatched_q("q_reshape", tensor), shape))
    }

    fn q_into_data(
        tensor: QuantizedTensor<Self>,
    ) -> impl core::future::Future<Output = Result<TensorData, ExecutionError>> + Send {
        assert_unbatched(&tensor, "q_into_data");
        B::q_into_data(tensor.inner())
    }

    // Overridden (exactness and speed): `q_expand`, `q_select` and `q_slice` run the inner op on
    // the quantized values of an unbatched tensor; the defaults dequantize, run the float op
    // and quantize again (which refuses a batched tensor the same way).
    fn q_expand(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_expand(unbatched_q("q_expand", tensor), shape))
    }

    fn q_swap_dims(
        tensor: QuantizedTensor<Self>,
        dim1: usize,
        dim2: usize,
    ) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_swap_dims(
            unbatched_q("q_swap_dims", tensor),
            dim1,
            dim2,
        ))
    }

    fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_permute(unbatched_q("q_permute", tensor), axes))
    }

    fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_flip(unbatched_q("q_flip", tensor), axes))
    }

    fn q_select(
        tensor: QuantizedTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> QuantizedTensor<Self> {
        let t = unbatched_q("q_select", tensor);
        let i = unbatched_q("q_select", indices);
        VmapTensor::unbatched(B::q_select(t, dim, i))
    }

    fn q_slice(tensor: QuantizedTensor<Self>, slices: &[Slice]) -> QuantizedTensor<Self> {
        VmapTensor::unbatched(B::q_slice(unbatched_q("q_slice", tensor), slices))
    }
}
