//! `scan`, `sliced_scan`, `checkpoint_chunked_scan` and `chunked_vmap` against independent
//! oracles: hand-written loops, scan-then-slice, plain-scan gradients, `vmap`, Burn's own
//! backward per example.

use std::collections::BTreeMap;

use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::transform::{scan, sliced_scan, vmap};
use burn_vmap::{Static, VmapError};
use proptest::prelude::*;

#[path = "scan/checkpoint.rs"]
mod checkpoint;
#[path = "scan/chunked.rs"]
mod chunked;

fn dev() -> Device {
    Device::default()
}

fn vec1<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// A rank-0 float tensor (Burn's `Tensor` API refuses to create one; its backends hold them).
fn rank0(v: f32, device: &Device) -> Tensor<0> {
    use burn_backend::Shape;
    use burn_backend::ops::FloatTensorOps;
    let one = Tensor::<1>::from_floats([v], device).into_dispatch();
    Tensor::from_dispatch(burn_dispatch::Dispatch::float_reshape(one, Shape::new([])))
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: lengths differ: {got:?} vs {want:?}"
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "{what}: index {i}: got {g}, want {w} ({got:?} vs {want:?})"
        );
    }
}

/// Deterministic pseudo-random floats in [-1, 1).
fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn tensor_on<const D: usize>(seed: u64, shape: [usize; D], device: &Device) -> Tensor<D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(data(seed, n), shape), device)
}

fn tensor<const D: usize>(seed: u64, shape: [usize; D]) -> Tensor<D> {
    tensor_on(seed, shape, &dev())
}

/// The sincos body of the reference vectors: `c' = sin(c) cos(x) + 0.5 c x`, `y = sum(c'^2)`.
fn sincos(c: Tensor<1>, x: Tensor<1>) -> (Tensor<1>, Tensor<1>) {
    let c2 = c.clone().sin() * x.clone().cos() + c * x * 0.5;
    let y = c2.clone().powi_scalar(2).sum();
    (c2, y)
}

/// Hand loop over the rows of `xs` (host values): the oracle for `sincos`.
fn sincos_loop(init: &[f32], xs: &[f32], n: usize, reverse: bool) -> (Vec<f32>, Vec<f32>) {
    let d = init.len();
    let mut c = init.to_vec();
    let mut ys = vec![0.0; n];
    let order: Vec<usize> = if reverse {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    for t in order {
        let x = &xs[t * d..(t + 1) * d];
        c = c
            .iter()
            .zip(x)
            .map(|(c, x)| c.sin() * x.cos() + 0.5 * c * x)
            .collect();
        ys[t] = c.iter().map(|v| v * v).sum();
    }
    (c, ys)
}

// =================================================================================================
// scan
// =================================================================================================

#[test]
fn should_scan_like_a_hand_loop_both_directions() {
    for reverse in [false, true] {
        let (n, d) = (6, 3);
        let init = tensor::<1>(1, [d]);
        let xs = tensor::<2>(2, [n, d]);
        let (c, ys) = scan(sincos, init.clone(), xs.clone())
            .reverse(reverse)
            .unroll(2)
            .call()
            .unwrap();
        let (want_c, want_ys) = sincos_loop(&vec1(init), &vec1(xs), n, reverse);
        assert_close(&vec1(c), &want_c, "carry");
        assert_eq!(ys.dims(), [n, 1]);
        assert_close(&vec1(ys), &want_ys, "ys");
    }
}

#[test]
fn should_scan_trees_with_static_values_and_int_leaves() {
    // Carry: (sum, count, Static tag); xs: a map of a float tensor.
    type C = (Tensor<1>, Tensor<1, Int>, Static<&'static str>);
    type X = BTreeMap<String, Tensor<1>>;
    let device = dev();
    let xs_f = tensor::<2>(3, [4, 2]);
    let xs: BTreeMap<String, Tensor<2>> = BTreeMap::from([("a".to_string(), xs_f.clone())]);
    let init: C = (
        Tensor::zeros([2], &device),
        Tensor::zeros([1], &device),
        Static("tag"),
    );
    let step = |(s, k, tag): C, x: X| -> (C, (Tensor<1>, Static<usize>)) {
        assert_eq!(tag.0, "tag");
        let s = s + x["a"].clone();
        ((s.clone(), k + 1, tag), (s * 2.0, Static(7)))
    };
    let ((s, k, tag), (ys, seven)) = scan(step, init, xs).call().unwrap();
    assert_eq!(tag, Static("tag"));
    assert_eq!(seven, Static(7));
    assert_eq!(k.into_data().try_into_vec_as::<i64>().unwrap(), vec![4]);
    let rows = vec1(xs_f);
    let mut acc = [0.0f32; 2];
    let mut want = vec![];
    for t in 0..4 {
        acc[0] += rows[2 * t];
        acc[1] += rows[2 * t + 1];
        want.extend([acc[0] * 2.0, acc[1] * 2.0]);
    }
    assert_close(&vec1(s), &acc, "carry");
    assert_close(&vec1(ys), &want, "ys");
}

#[test]
fn should_scan_with_length_and_no_xs() {
    let step = |c: Tensor<1>, (): ()| (c.clone() * 2.0, c);
    let (c, ys) = scan(step, Tensor::<1>::ones([1], &dev()), ())
        .length(4)
        .call()
        .unwrap();
    assert_eq!(vec1(c), vec![16.0]);
    assert_eq!(vec1(ys), vec![1.0, 2.0, 4.0, 8.0]);
}

#[test]
fn should_scan_zero_steps_with_empty_outputs() {
    let xs = Tensor::<2>::zeros([0, 3], &dev());
    let init = Tensor::<1>::ones([3], &dev());
    let (c, ys) = scan(sincos, init, xs).call().unwrap();
    assert_eq!(vec1(c), vec![1.0; 3]);
    assert_eq!(ys.dims(), [0, 1]);
}

#[test]
fn should_scan_rank0_steps() {
    // xs (5,) -> x is rank 0; the carry is rank 0.
    let xs = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0, 5.0], &dev());
    let step = |c: Tensor<0>, x: Tensor<0>| {
        let c = c + x;
        (c.clone(), c)
    };
    let (c, ys) = scan(step, rank0(0.0, &dev()), xs)
        .reverse(true)
        .call()
        .unwrap();
    assert_eq!(vec1(c), vec![15.0]);
    assert_eq!(vec1(ys), vec![15.0, 14.0, 12.0, 9.0, 5.0]);
}

#[test]
fn should_report_scan_errors_naming_the_argument() {
    let device = dev();
    let step = |c: Tensor<1>, (a, b): (Tensor<1>, Tensor<1>)| (c + a + b.clone(), b);
    let init = Tensor::<1>::zeros([2], &device);
    let xs = (
        Tensor::<2>::zeros([5, 2], &device),
        Tensor::<2>::zeros([4, 2], &device),
    );
    let err = scan(step, init.clone(), xs).call().unwrap_err();
    assert!(matches!(err, VmapError::ScanLengths { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("xs[0]") && msg.contains("xs[1]") && msg.contains('5') && msg.contains('4'),
        "{msg}"
    );

    let xs = (
        Tensor::<2>::zeros([5, 2], &device),
        Tensor::<2>::zeros([5, 2], &device),
    );
    let err = scan(step, init.clone(), xs).length(3).call().unwrap_err();
    assert!(err.to_string().contains("length = 3"), "{err}");

    let err = scan(|c: Tensor<1>, (): ()| (c.clone(), c), init.clone(), ())
        .call()
        .unwrap_err();
    assert!(matches!(err, VmapError::ScanNoLength { .. }), "{err:?}");

    let err = scan(
        step,
        init.clone(),
        (rank0(1.0, &device), rank0(1.0, &device)),
    )
    .call_as::<(Tensor<1>, Tensor<1>), Tensor<1>, Tensor<2>>()
    .unwrap_err();
    assert!(
        matches!(&err, VmapError::NoLeadingAxis { argument, .. } if argument == "xs[0]"),
        "{err:?}"
    );

    // A carry that changes shape.
    let grow = |c: Tensor<1>, x: Tensor<1>| (Tensor::cat(vec![c, x.clone()], 0), x);
    let err = scan(grow, init, Tensor::<2>::zeros([3, 2], &device))
        .call()
        .unwrap_err();
    assert!(
        matches!(err, VmapError::ScanShapeMismatch { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("[4]") && err.to_string().contains("[2]"),
        "{err}"
    );
}

#[test]
fn should_differentiate_through_a_scan_on_an_autodiff_device() {
    // The steps run on the user's tensors: Burn's own backward goes through the loop.
    let device = dev().autodiff();
    let init = tensor_on::<1>(61, [3], &device).require_grad();
    let xs = tensor_on::<2>(62, [4, 3], &device);
    let (c, _) = scan(sincos, init.clone(), xs.clone()).call().unwrap();
    let g = init.grad(&c.sum().backward()).unwrap();
    // Finite differences of sum(final carry) w.r.t. init.
    let (i0, xd) = (vec1(init.inner()), vec1(xs.inner()));
    let f = |i: &[f32]| sincos_loop(i, &xd, 4, false).0.iter().sum::<f32>();
    let want: Vec<f32> = (0..3)
        .map(|k| {
            let (mut a, mut b) = (i0.clone(), i0.clone());
            a[k] += 1e-2;
            b[k] -= 1e-2;
            (f(&a) - f(&b)) / 2e-2
        })
        .collect();
    let got = vec1(g);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-2, "{got:?} vs {want:?}");
    }
}

#[test]
fn should_scan_inside_vmap() {
    // vmap over the initial carries: each example runs the loop; the steps are recorded once
    // each, inside the vmapped function, and batched.
    let (n, d) = (5, 3);
    let inits = tensor::<2>(71, [4, d]);
    let xs = tensor::<2>(72, [n, d]);
    let f = |(init, xs): (Tensor<1>, Tensor<2>)| {
        let (c, ys) = scan(sincos, init, xs).reverse(true).call().unwrap();
        (c, ys)
    };
    let (cs, ys): (Tensor<2>, Tensor<3>) = vmap(f)
        .in_axes([Some(0), None])
        .call((inits.clone(), xs.clone()))
        .unwrap();
    let (id, xd) = (vec1(inits), vec1(xs));
    let (mut want_c, mut want_ys) = (Vec::new(), Vec::new());
    for i in 0..4 {
        let (c, y) = sincos_loop(&id[i * d..(i + 1) * d], &xd, n, true);
        want_c.extend(c);
        want_ys.extend(y);
    }
    assert_eq!(ys.dims(), [4, n, 1]);
    assert_close(&vec1(cs), &want_c, "carry");
    assert_close(&vec1(ys), &want_ys, "ys");
}

// =================================================================================================
// sliced_scan
// =================================================================================================

/// Python's `range(*slice(start, stop, step).indices(n))`, written independently.
fn python_slice(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<usize> {
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let mut out = vec![];
    if step > 0 {
        let s = start.map(norm).unwrap_or(0).clamp(0, n);
        let e = stop.map(norm).unwrap_or(n).clamp(0, n);
        let mut i = s;
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        let s = start.map(norm).unwrap_or(n - 1).clamp(-1, n - 1);
        let e = stop.map(norm).unwrap_or(-1).clamp(-1, n - 1);
        let mut i = s;
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn should_slice_like_scan_then_slice(
        n in 0usize..9,
        start in proptest::option::of(-11isize..11),
        stop in proptest::option::of(-11isize..11),
        step in prop_oneof![-4isize..0, 1isize..5],
        reverse in any::<bool>(),
    ) {
        let d = 2;
        let init = tensor::<1>(5, [d]);
        let xs = tensor::<2>(6, [n, d]);
        let (c, ys) = sliced_scan(sincos, init.clone(), xs.clone())
            .slice(start, stop, Some(step))
            .reverse(reverse)
            .call()
            .unwrap();
        let (want_c, all_ys) = sincos_loop(&vec1(init), &vec1(xs), n, reverse);
        let idx = python_slice(n as i64, start.map(|v| v as i64), stop.map(|v| v as i64), step as i64);
        let want_ys: Vec<f32> = idx.iter().map(|&t| all_ys[t]).collect();
        assert_close(&vec1(c), &want_c, "carry");
        prop_assert_eq!(ys.dims(), [idx.len(), 1]);
        assert_close(&vec1(ys), &want_ys, "ys");
    }
}

#[test]
fn should_reject_a_zero_slice_step() {
    let err = sliced_scan(
        sincos,
        Tensor::<1>::zeros([2], &dev()),
        tensor::<2>(1, [3, 2]),
    )
    .step(0)
    .call()
    .unwrap_err();
    assert_eq!(err, VmapError::SliceStepZero);
}

#[test]
fn should_keep_only_the_selected_outputs() {
    // Every step runs (the carry goes through all of them); only the selected outputs are kept.
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let step = |c: Tensor<1>, x: Tensor<1>| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        let c = c + x;
        (c.clone(), c)
    };
    let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]], &dev());
    let (c, ys) = sliced_scan(step, Tensor::<1>::zeros([1], &dev()), xs)
        .start(-1)
        .step(-4)
        .reverse(true)
        .call()
        .unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 6);
    // Reverse running sums: ys[t] = sum(xs[t..]) = [21, 20, 18, 15, 11, 6]; [-1::-4] = t 5, 1.
    assert_eq!(vec1(c), vec![21.0]);
    assert_eq!(vec1(ys), vec![6.0, 20.0]);
}

#[test]
fn should_slice_inside_vmap() {
    let xs = tensor::<3>(81, [3, 6, 2]);
    let init = Tensor::<1>::zeros([2], &dev());
    let f = |(init, xs): (Tensor<1>, Tensor<2>)| {
        sliced_scan(sincos, init, xs)
            .start(1)
            .step(2)
            .call()
            .unwrap()
    };
    let (cs, ys): (Tensor<2>, Tensor<3>) = vmap(f)
        .in_axes([None, Some(0)])
        .call((init.clone(), xs.clone()))
        .unwrap();
    assert_eq!(ys.dims(), [3, 3, 1]);
    let xd = vec1(xs);
    let (mut want_c, mut want_ys) = (Vec::new(), Vec::new());
    for i in 0..3 {
        let (c, y) = sincos_loop(&[0.0, 0.0], &xd[i * 12..(i + 1) * 12], 6, false);
        want_c.extend(c);
        want_ys.extend([y[1], y[3], y[5]]);
    }
    assert_close(&vec1(cs), &want_c, "carry");
    assert_close(&vec1(ys), &want_ys, "ys");
}
