//! The engine over Burn's capture backend (`burn_dispatch::backends::Capture`), which records
//! ops without running them: a batched computation records without reading a value, and its
//! graph, replayed on Flex, gives what `Vmap<Flex>` computes; the ops that must read values
//! refuse with a `vmap:` message.

use burn_backend::ops::{
    ActivationOps, BoolTensorOps, ConvOptions, FloatTensorOps, IntTensorOps, ModuleOps,
};
use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{BackendTypes, IntDType, TensorData, TensorMetadata, read_sync};
use burn_dispatch::backends::Capture;
use burn_ir::{TensorIr, TensorStatus};
use burn_router::TensorInterpreter;
use burn_vmap::tensor::{BatchDims, VmapTensor};
use burn_vmap::{BatchOps, Vmap};

use crate::common::*;

type C = Capture;
type VC = Vmap<Capture>;

/// Per example: `x: [3]` through a linear layer, a softmax, the weight gradient `x ⊗ p` (held
/// factored) and its squared norm (from the factors); the norms of every example, `[e, 1]`.
macro_rules! chain {
    ($V:ty, $xs:expr, $w:expr, $b:expr, $level:expr, $e:expr) => {{
        let x = <$V>::float_batch(VmapTensor::from_physical($xs, BatchDims::none()), 0, $level);
        let x = <$V>::float_reshape(x, shape(&[1, 3]));
        let y = <$V>::float_tanh(<$V>::linear(x.clone(), $w, Some($b)));
        let p = <$V>::softmax(y, 1);
        let g = <$V>::linear_weight_backward(x, p);
        assert!(g.is_factored());
        let norm = <$V>::float_sum(<$V>::float_mul(g.clone(), g));
        <$V>::float_unbatch(norm, $level, $e, 0)
    }};
}

/// Per example: `x: [1, 2, 5, 5]` through a convolution, a max pool, a sort, a select with the
/// example's own indices, a scatter, a cat and a matmul; every example's result, `[e, 2, 4]`.
macro_rules! chain2 {
    ($V:ty, $xs:expr, $is:expr, $k:expr, $level:expr, $e:expr) => {{
        let x = <$V>::float_batch(VmapTensor::from_physical($xs, BatchDims::none()), 0, $level);
        let i = <$V>::int_batch(VmapTensor::from_physical($is, BatchDims::none()), 0, $level);
        let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
        let c = <$V>::conv2d(x, $k, None, options); // [1, 3, 5, 5]
        let p = <$V>::max_pool2d(c, [2, 2], [2, 2], [0, 0], [1, 1], false); // [1, 3, 2, 2]
        let r = <$V>::float_reshape(p, shape(&[3, 4]));
        let sorted = <$V>::float_sort(r, 1, true);
        let picked = <$V>::float_select(sorted.clone(), 0, i.clone()); // [2, 4]
        let idx = <$V>::int_reshape(i, shape(&[2, 1]));
        let idx = <$V>::int_expand(idx, shape(&[2, 4]));
        let sc = <$V>::float_scatter(0, sorted, idx, picked.clone(), IndexingUpdateOp::Add);
        let both = <$V>::float_cat(vec![sc, picked], 0); // [5, 4]
        let m = <$V>::float_matmul(<$V>::float_swap_dims(both.clone(), 0, 1), both); // [4, 4]
        let out = <$V>::float_slice(m, &[(0..2).into(), (0..4).into()]);
        <$V>::float_unbatch(out, $level, $e, 0)
    }};
}

fn data(shape: &[usize], seed: u64) -> TensorData {
    TensorData::new(values(shape.iter().product(), seed), shape.to_vec())
}

#[test]
fn should_record_a_batched_computation_that_replays_to_the_same_values() {
    let e = 4;
    let level = burn_vmap::level::Level::fresh();
    let device = <C as BackendTypes>::Device::default();
    let mut out_ir = None;
    let captured = device
        .capture_scope(|scope| {
            let xs = C::float_from_data(data(&[e, 3], 1), &device);
            let w = VmapTensor::from_physical(
                C::float_from_data(data(&[3, 2], 2), &device),
                BatchDims::none(),
            );
            let b = VmapTensor::from_physical(
                C::float_from_data(data(&[2], 3), &device),
                BatchDims::none(),
            );
            let out = chain!(VC, xs, w, b, level, e);
            let (physical, bdims) = out.into_parts();
            assert!(bdims.is_empty());
            out_ir = Some(ir(&physical));
            scope.complete([], [physical.id()])
        })
        .expect("a captured graph");
    let replayed = replay(captured, out_ir.expect("the output"));
    // Run directly on `Vmap<Flex>`.
    let level = burn_vmap::level::Level::fresh();
    let w = VmapTensor::from_physical(
        F::float_from_data(data(&[3, 2], 2), &dev()),
        BatchDims::none(),
    );
    let b = VmapTensor::from_physical(F::float_from_data(data(&[2], 3), &dev()), BatchDims::none());
    let direct = chain!(
        V,
        F::float_from_data(data(&[e, 3], 1), &dev()),
        w,
        b,
        level,
        e
    );
    assert_eq!(dims(&direct), vec![e, 1]);
    assert_close(&replayed, &read(direct.into_parts().0), "replayed on Flex");
}

/// The output of a capture: its id, shape and dtype.
fn ir(t: &<C as BackendTypes>::FloatTensorPrimitive) -> TensorIr {
    TensorIr {
        id: t.id(),
        shape: t.shape(),
        status: TensorStatus::ReadOnly,
        dtype: t.dtype(),
    }
}

/// A captured graph replayed on Flex: the value of `out`.
fn replay(captured: burn_capture::CapturedGraph, out: TensorIr) -> Vec<f32> {
    let mut flex = TensorInterpreter::<F>::new(dev());
    for (id, value) in captured.values {
        flex.register_tensor_data_id(id, value);
    }
    for op in captured.graph.operations {
        flex.register_op(op);
    }
    let data = read_sync(flex.read_tensor_async(out)).expect("the replayed output");
    data.iter::<f32>().collect()
}

#[test]
fn should_record_convolutions_pools_sorts_and_indexing() {
    let e = 3;
    let is = || TensorData::new(vec![2i32, 0, 1, 1, 0, 2], vec![e, 2]);
    let level = burn_vmap::level::Level::fresh();
    let device = <C as BackendTypes>::Device::default();
    let mut out = None;
    let captured = device
        .capture_scope(|scope| {
            let xs = C::float_from_data(data(&[e, 1, 2, 5, 5], 1), &device);
            let is = C::int_from_data(is(), &device);
            let k = C::float_from_data(data(&[3, 2, 3, 3], 2), &device);
            let k = VmapTensor::from_physical(k, BatchDims::none());
            let (physical, _) = chain2!(VC, xs, is, k, level, e).into_parts();
            out = Some(ir(&physical));
            scope.complete([], [physical.id()])
        })
        .expect("a captured graph");
    let replayed = replay(captured, out.expect("the output"));
    let level = burn_vmap::level::Level::fresh();
    let xs = F::float_from_data(data(&[e, 1, 2, 5, 5], 1), &dev());
    let is = F::int_from_data(is(), &dev());
    let k = VmapTensor::from_physical(
        F::float_from_data(data(&[3, 2, 3, 3], 2), &dev()),
        BatchDims::none(),
    );
    let direct = chain2!(V, xs, is, k, level, e);
    assert_eq!(dims(&direct), vec![e, 2, 4]);
    assert_close(&replayed, &read(direct.into_parts().0), "replayed on Flex");
}

#[test]
#[should_panic(
    expected = "vmap: bool_argwhere: the result's size depends on each example's values"
)]
fn should_refuse_to_read_values_on_the_capture_backend() {
    let device = <C as BackendTypes>::Device::default();
    let level = burn_vmap::level::Level::fresh();
    let _ = device.capture_scope(|scope| {
        let mask = C::bool_from_data(
            TensorData::new(vec![true, false, true, true], vec![2, 2]),
            &device,
        );
        let mask = VC::bool_batch(VmapTensor::from_physical(mask, BatchDims::none()), 0, level);
        let _ = read_sync(VC::bool_argwhere(mask, IntDType::I64));
        scope.complete([], [])
    });
}
