//! `vmap` on Burn 0.22 tensors: semantics against the loop, nesting, the recording's trace
//! semantics as typed errors, and the cache.

use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use burn_vmap::{Randomness, VmapError, vmap};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{a:?} vs {b:?}");
    }
}

#[test]
fn should_equal_the_loop_for_a_softmax_attention_row() {
    let device = Device::default();
    // One example: a query row against shared keys and values.
    let f = |(q, k, v): (Tensor<1>, Tensor<2>, Tensor<2>)| {
        let scores = k.matmul(q.unsqueeze_dim::<2>(1)).squeeze_dim::<1>(1); // [n]
        let w = burn::tensor::activation::softmax(scores, 0);
        w.unsqueeze_dim::<2>(0).matmul(v).squeeze_dim::<1>(0) // [d]
    };
    let qs = Tensor::<2>::random([7, 4], Distribution::Normal(0.0, 1.0), &device);
    let k = Tensor::<2>::random([5, 4], Distribution::Normal(0.0, 1.0), &device);
    let v = Tensor::<2>::random([5, 3], Distribution::Normal(0.0, 1.0), &device);
    let batched: Tensor<2> = vmap(f)
        .in_axes([Some(0), None, None])
        .call((qs.clone(), k.clone(), v.clone()))
        .unwrap();
    let looped: Vec<Tensor<1>> = (0..7)
        .map(|i| {
            f((
                qs.clone().narrow(0, i, 1).reshape([4]),
                k.clone(),
                v.clone(),
            ))
        })
        .collect();
    assert_close(&values(batched), &values(Tensor::stack::<2>(looped, 0)));
}

#[test]
fn should_map_axis_1_and_place_the_batch_at_out_axis_1() {
    let device = Device::default();
    let xs = Tensor::<2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device);
    // Map over columns: each example is a column [2]; return (sum (shape [1]), column * 10).
    let (sums, scaled): (Tensor<2>, Tensor<2>) = vmap(|c: Tensor<1>| (c.clone().sum(), c * 10.0))
        .in_axes(1)
        .out_axes([Some(0), Some(1)])
        .call_as(xs)
        .unwrap();
    assert_eq!(sums.dims(), [3, 1]);
    assert_eq!(values(sums), vec![5.0, 7.0, 9.0]);
    assert_eq!(values(scaled), vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
}

#[test]
fn should_nest_vmap_inside_a_recorded_function() {
    let device = Device::default();
    // Pairwise products: the outer map over rows of a, the inner over rows of b.
    let a = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
    let b = Tensor::<2>::from_floats([[1.0, 0.0], [0.0, 1.0]], &device);
    let outer = |(x, bs): (Tensor<1>, Tensor<2>)| -> Tensor<1> {
        let dots: Tensor<1> = vmap(|(y, x): (Tensor<1>, Tensor<1>)| (x * y).sum())
            .in_axes([Some(0), None])
            .call((bs, x))
            .unwrap()
            .squeeze_dim(1);
        dots
    };
    let out: Tensor<2> = vmap(outer).in_axes([Some(0), None]).call((a, b)).unwrap();
    assert_eq!(out.dims(), [3, 2]);
    assert_eq!(values(out), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn should_batch_int_and_bool_leaves() {
    let device = Device::default();
    let table = Tensor::<2>::from_floats([[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]], &device);
    let idx = Tensor::<2, Int>::from_ints([[2, 0], [1, 1]], &device);
    // One example: select rows of the shared table by its indices, mask negatives.
    let f = |(i, t): (Tensor<1, Int>, Tensor<2>)| {
        let rows = t.select(0, i); // [2, 2]
        let mask = rows.clone().lower_elem(5.0);
        rows.mask_fill(mask, -1.0)
    };
    let out: Tensor<3> = vmap(f).in_axes([Some(0), None]).call((idx, table)).unwrap();
    assert_eq!(
        values(out),
        vec![20.0, 21.0, -1.0, -1.0, 10.0, 11.0, 10.0, 11.0]
    );
}

#[test]
fn should_refuse_a_tensor_the_function_closes_over() {
    let device = Device::default();
    let w = Tensor::<1>::from_floats([1.0, 2.0], &device);
    let xs = Tensor::<2>::ones([3, 2], &device);
    let err = vmap(|x: Tensor<1>| x * w.clone()).call(xs).unwrap_err();
    assert!(matches!(err, VmapError::ForeignTensor { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("pass every tensor it reads as an argument"),
        "{err}"
    );
}

#[test]
fn should_refuse_reading_values_while_recording() {
    let device = Device::default();
    let xs = Tensor::<2>::ones([3, 2], &device);
    let err = vmap(|x: Tensor<1>| {
        let s: f32 = x.clone().sum().into_scalar();
        if s > 0.0 { x } else { -x }
    })
    .call(xs)
    .unwrap_err();
    assert!(matches!(err, VmapError::ValueRead { .. }), "{err}");
}

#[test]
fn should_report_inconsistent_batch_sizes_and_unmapped_outputs() {
    let device = Device::default();
    let a = Tensor::<2>::ones([3, 2], &device);
    let b = Tensor::<2>::ones([4, 2], &device);
    let err = vmap(|(x, y): (Tensor<1>, Tensor<1>)| x + y)
        .call((a.clone(), b))
        .unwrap_err();
    assert!(
        matches!(err, VmapError::InconsistentBatchSizes { .. }),
        "{err}"
    );

    let err = vmap(|x: Tensor<1>| x * 2.0)
        .out_axes(Option::<isize>::None)
        .call_as::<_, _, _, Tensor<1>>(a.clone())
        .unwrap_err();
    assert!(err.to_string().contains("varies across the batch"), "{err}");

    let err = vmap(|x: Tensor<1>| x).in_axes(2).call(a).unwrap_err();
    assert!(matches!(err, VmapError::AxisOutOfRange { .. }), "{err}");
}

#[test]
fn should_draw_per_example_or_shared_randomness_or_refuse() {
    let device = Device::default();
    let xs = Tensor::<2>::zeros([4, 50], &device);
    let noisy = |x: Tensor<1>| x.clone() + x.random_like(Distribution::Default);
    let err = vmap(noisy).call(xs.clone()).unwrap_err();
    assert!(matches!(err, VmapError::Randomness { .. }), "{err}");

    let rows = |t: Tensor<2>| values(t);
    let different = rows(
        vmap(noisy)
            .randomness(Randomness::Different)
            .call(xs.clone())
            .unwrap(),
    );
    assert_ne!(different[0..50], different[50..100]);
    let same = rows(vmap(noisy).randomness(Randomness::Same).call(xs).unwrap());
    assert_eq!(same[0..50], same[50..100]);
}

#[test]
fn should_reuse_the_recording_for_another_batch_size() {
    let device = Device::default();
    let double = vmap(|x: Tensor<1>| x * 2.0);
    for n in [1, 3, 8] {
        let xs = Tensor::<2>::from_data(
            TensorData::new((0..2 * n).map(|v| v as f32).collect::<Vec<_>>(), [n, 2]),
            &device,
        );
        let out: Tensor<2> = double.call(xs).unwrap();
        let expected: Vec<f32> = (0..2 * n).map(|v| 2.0 * v as f32).collect();
        assert_eq!(values(out), expected);
    }
}

/// A rank-0 tensor of Burn 0.22 (`from_data` refuses rank 0): a `[1]` tensor reshaped.
fn rank0(v: f32) -> Tensor<0> {
    use burn_backend::Shape;
    use burn_backend::ops::FloatTensorOps;
    let one = Tensor::<1>::from_floats([v], &Device::default()).into_dispatch();
    Tensor::from_dispatch(burn_dispatch::Dispatch::float_reshape(one, Shape::new([])))
}

#[test]
fn should_combine_an_unmapped_rank0_argument_with_mapped_scalars() {
    let device = Device::default();
    let ys = Tensor::<1>::from_floats([1.0, 10.0], &device);
    // Unmapped rank 0 on either side of a mapped rank-0 example: the result is rank 0 per
    // example (`[2]`, not `[2, 1]`).
    let left: Tensor<1> = vmap(|(x, y): (Tensor<0>, Tensor<0>)| x * y)
        .in_axes([None, Some(0)])
        .call((rank0(3.0), ys.clone()))
        .unwrap();
    assert_eq!(values(left), vec![3.0, 30.0]);
    let right: Tensor<1> = vmap(|(y, x): (Tensor<0>, Tensor<0>)| y - x)
        .in_axes([Some(0), None])
        .call((ys.clone(), rank0(3.0)))
        .unwrap();
    assert_eq!(values(right), vec![-2.0, 7.0]);
    // Returned unchanged, it is broadcast to the batch.
    let same: Tensor<1> = vmap(|(_, x): (Tensor<0>, Tensor<0>)| x)
        .in_axes([Some(0), None])
        .call((ys.clone(), rank0(3.0)))
        .unwrap();
    assert_eq!(values(same), vec![3.0, 3.0]);
    // Nested: the inner vmap sees the outer example's scalar as an unmapped rank-0 argument.
    let xs = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &device);
    let outer = |(x, ys): (Tensor<0>, Tensor<1>)| -> Tensor<1> {
        vmap(|(x, y): (Tensor<0>, Tensor<0>)| x * y)
            .in_axes([None, Some(0)])
            .call((x, ys))
            .unwrap()
    };
    let out: Tensor<2> = vmap(outer).in_axes([Some(0), None]).call((xs, ys)).unwrap();
    assert_eq!(out.dims(), [3, 2]);
    assert_eq!(values(out), vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0]);
}

/// Burn code often creates tensors on a device it holds (`&device`, `&self.device`): inside a
/// transform that is the user's device, not the recording's, and every way of doing it is
/// refused by name with the fix, which works.
#[test]
fn should_refuse_a_tensor_created_on_a_device_the_function_closes_over() {
    let device = Device::default();
    let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
    let refused = |err: VmapError| {
        assert!(matches!(err, VmapError::ForeignTensor { .. }), "{err}");
        assert!(err.to_string().contains("`&x.device()`"), "{err}");
    };
    let d = device.clone();
    refused(
        vmap(move |x: Tensor<1>| x + Tensor::<1>::ones([2], &d))
            .call(xs.clone())
            .unwrap_err(),
    );
    let d = device.clone();
    let arange = move |x: Tensor<1>| x + Tensor::<1, Int>::arange(0..2, &d).float();
    refused(vmap(arange).call(xs.clone()).unwrap_err());
    let d = device.clone();
    let constant = move |x: Tensor<1>| x + Tensor::<1>::from_floats([10.0, 20.0], &d);
    refused(vmap(constant).call(xs.clone()).unwrap_err());
    let d = device.clone();
    refused(
        vmap(move |x: Tensor<1>| x.to_device(&d))
            .call(xs.clone())
            .unwrap_err(),
    );
    // On the argument's device.
    let out: Tensor<2> = vmap(|x: Tensor<1>| {
        let device = x.device();
        x + Tensor::<1>::from_floats([10.0, 20.0], &device)
    })
    .call(xs)
    .unwrap();
    assert_eq!(values(out), vec![11.0, 22.0, 13.0, 24.0, 15.0, 26.0]);
}
