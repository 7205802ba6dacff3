//! `scan`, `sliced_scan`, `checkpoint_chunked_scan` and `chunked_vmap` against independent
//! oracles: hand-written loops, scan-then-slice, plain-scan gradients, `vmap`.

use std::collections::BTreeMap;

use burn::backend::Autodiff;
use burn::tensor::{Int, Tensor, TensorData};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::{checkpoint_chunked_scan, chunked_vmap, scan, sliced_scan};
use burn_vmap::{Static, Vmap, VmapError, vmap};
use proptest::prelude::*;

type B = TestBackend;
type AD = Autodiff<TestBackend>;
type V = Vmap<TestBackend>;

fn dev() -> burn::tensor::Device<B> {
    Default::default()
}

fn vec1<Bk: burn::tensor::backend::Backend, const D: usize>(t: Tensor<Bk, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

/// A rank-0 tensor (`Tensor::from_data` refuses rank 0; the backends accept rank-0 data).
fn scalar<Bk: burn::tensor::backend::Backend>(v: f32) -> Tensor<Bk, 0> {
    let data = TensorData::new(vec![v], [0usize; 0]);
    Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(Bk::float_from_data(
        data,
        &Default::default(),
    )))
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

fn tensor<Bk: burn::tensor::backend::Backend, const D: usize>(
    seed: u64,
    shape: [usize; D],
) -> Tensor<Bk, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(data(seed, n), shape), &Default::default())
}

/// The sincos body of the reference vectors: `c' = sin(c) cos(x) + 0.5 c x`, `y = sum(c'^2)`.
fn sincos<Bk: burn::tensor::backend::Backend>(
    c: Tensor<Bk, 1>,
    x: Tensor<Bk, 1>,
) -> (Tensor<Bk, 1>, Tensor<Bk, 1>) {
    let c2 = c.clone().sin() * x.clone().cos() + c * x * 0.5;
    let y = c2.clone().powi_scalar(2).sum();
    (c2.clone(), y)
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
        let init = tensor::<B, 1>(1, [d]);
        let xs = tensor::<B, 2>(2, [n, d]);
        let (c, ys): (Tensor<B, 1>, Tensor<B, 2>) = scan(sincos, init.clone(), xs.clone())
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
    // Carry: (sum, count, Static tag); xs: a map of a float and an int tensor.
    type C = (Tensor<B, 1>, Tensor<B, 1, Int>, Static<&'static str>);
    type X = BTreeMap<String, Tensor<B, 1>>;
    let device = dev();
    let xs_f = tensor::<B, 2>(3, [4, 2]);
    let xs: BTreeMap<String, Tensor<B, 2>> = BTreeMap::from([("a".to_string(), xs_f.clone())]);
    let init: C = (
        Tensor::zeros([2], &device),
        Tensor::zeros([1], &device),
        Static("tag"),
    );
    let step = |(s, k, tag): C, x: X| -> (C, (Tensor<B, 1>, Static<usize>)) {
        assert_eq!(tag.0, "tag");
        let s = s + x["a"].clone();
        ((s.clone(), k + 1, tag), (s * 2.0, Static(7)))
    };
    let ((s, k, tag), (ys, seven)): (C, (Tensor<B, 2>, Static<usize>)) =
        scan(step, init, xs).call().unwrap();
    assert_eq!(tag, Static("tag"));
    assert_eq!(seven, Static(7));
    assert_eq!(
        k.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![4]
    );
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
    let device = dev();
    let step = |c: Tensor<B, 1>, (): ()| (c.clone() * 2.0, c);
    let (c, ys): (Tensor<B, 1>, Tensor<B, 2>) = scan(step, Tensor::ones([1], &device), ())
        .length(4)
        .call()
        .unwrap();
    assert_eq!(vec1(c), vec![16.0]);
    assert_eq!(vec1(ys), vec![1.0, 2.0, 4.0, 8.0]);
}

#[test]
fn should_scan_zero_steps_with_empty_outputs() {
    let device = dev();
    let xs = Tensor::<B, 2>::zeros([0, 3], &device);
    let init = Tensor::<B, 1>::ones([3], &device);
    let (c, ys): (Tensor<B, 1>, Tensor<B, 2>) = scan(sincos, init, xs).call().unwrap();
    assert_eq!(vec1(c), vec![1.0; 3]);
    assert_eq!(ys.dims(), [0, 1]);
}

#[test]
fn should_scan_rank0_steps_on_the_default_backend() {
    // xs (5,) -> x is rank 0; carry rank 0. On the plain inner backend where it holds rank-0
    // tensors (Burn 0.21's cubecl backends cannot allocate one), and on `Vmap` everywhere.
    fn run<Bk: burn::tensor::backend::Backend>() {
        let xs = Tensor::<Bk, 1>::from_floats([1.0, 2.0, 3.0, 4.0, 5.0], &Default::default());
        let init: Tensor<Bk, 0> = scalar(0.0);
        let step = |c: Tensor<Bk, 0>, x: Tensor<Bk, 0>| {
            let c = c + x;
            (c.clone(), c)
        };
        let (c, ys): (Tensor<Bk, 0>, Tensor<Bk, 1>) =
            scan(step, init, xs).reverse(true).call().unwrap();
        assert_eq!(vec1(c), vec![15.0]);
        assert_eq!(vec1(ys), vec![15.0, 14.0, 12.0, 9.0, 5.0]);
    }
    run::<V>();
    if cfg!(not(any(feature = "wgpu", feature = "cuda"))) {
        run::<B>();
    }
}

#[test]
fn should_report_scan_errors_naming_the_argument() {
    let device = dev();
    let step = |c: Tensor<B, 1>, (a, b): (Tensor<B, 1>, Tensor<B, 1>)| (c + a + b.clone(), b);
    let init = Tensor::<B, 1>::zeros([2], &device);
    let xs = (
        Tensor::<B, 2>::zeros([5, 2], &device),
        Tensor::<B, 2>::zeros([4, 2], &device),
    );
    let err = scan(step, init.clone(), xs)
        .call::<B, _, Tensor<B, 1>, Tensor<B, 2>>()
        .unwrap_err();
    assert!(matches!(err, VmapError::ScanLengths { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("xs[0]") && msg.contains("xs[1]") && msg.contains('5') && msg.contains('4'),
        "{msg}"
    );

    let xs = (
        Tensor::<B, 2>::zeros([5, 2], &device),
        Tensor::<B, 2>::zeros([5, 2], &device),
    );
    let err = scan(step, init.clone(), xs)
        .length(3)
        .call::<B, _, Tensor<B, 1>, Tensor<B, 2>>()
        .unwrap_err();
    assert!(err.to_string().contains("length = 3"), "{err}");

    let err = scan(|c: Tensor<B, 1>, (): ()| (c.clone(), c), init.clone(), ())
        .call::<B, _, Tensor<B, 1>, Tensor<B, 2>>()
        .unwrap_err();
    assert!(matches!(err, VmapError::ScanNoLength { .. }), "{err:?}");

    // A carry that changes shape.
    let grow = |c: Tensor<B, 1>, x: Tensor<B, 1>| (Tensor::cat(vec![c, x.clone()], 0), x);
    let err = scan(grow, init, Tensor::<B, 2>::zeros([3, 2], &device))
        .call::<B, _, Tensor<B, 1>, Tensor<B, 2>>()
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

// =================================================================================================
// sliced_scan
// =================================================================================================

/// Python's `range(*slice(start, stop, step).indices(n))`, written independently.
fn python_slice(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<usize> {
    let all: Vec<i64> = (0..n).collect();
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let mut out = vec![];
    if step > 0 {
        let s = start.map(norm).unwrap_or(0).clamp(0, n);
        let e = stop.map(norm).unwrap_or(n).clamp(0, n);
        let mut i = s;
        while i < e {
            out.push(all[i as usize] as usize);
            i += step;
        }
    } else {
        let s = start.map(norm).unwrap_or(n - 1).clamp(-1, n - 1);
        let e = stop.map(norm).unwrap_or(-1).clamp(-1, n - 1);
        let mut i = s;
        while i > e {
            out.push(all[i as usize] as usize);
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
        let init = tensor::<B, 1>(5, [d]);
        let xs = tensor::<B, 2>(6, [n, d]);
        let (c, ys): (Tensor<B, 1>, Tensor<B, 2>) = sliced_scan(sincos, init.clone(), xs.clone())
            .slice(start, stop, Some(step))
            .reverse(reverse)
            .call()
            .unwrap();
        let (want_c, all_ys) = sincos_loop(&vec1(init), &vec1(xs), n, reverse);
        let idx = python_slice(n as i64, start.map(|v| v as i64), stop.map(|v| v as i64), step as i64);
        let want_ys: Vec<f32> = idx.iter().map(|&t| all_ys[t]).collect();
        if n > 0 { assert_close(&vec1(c), &want_c, "carry"); }
        prop_assert_eq!(ys.dims(), [idx.len(), 1]);
        assert_close(&vec1(ys), &want_ys, "ys");
    }
}

#[test]
fn should_reject_a_zero_slice_step() {
    let device = dev();
    let err = sliced_scan(
        sincos,
        Tensor::<B, 1>::zeros([2], &device),
        tensor::<B, 2>(1, [3, 2]),
    )
    .step(0)
    .call::<B, _, Tensor<B, 1>, Tensor<B, 2>>()
    .unwrap_err();
    assert_eq!(err, VmapError::SliceStepZero);
}

#[test]
fn should_keep_only_the_selected_outputs() {
    // Count the outputs that are stacked: only the selected ones reach the result, and a body
    // that records which steps ran shows every step runs (carry-only for the skipped ones).
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let step = |c: Tensor<B, 1>, x: Tensor<B, 1>| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        let c = c + x;
        (c.clone(), c)
    };
    let device = dev();
    let xs = Tensor::<B, 2>::from_floats([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]], &device);
    let (c, ys): (Tensor<B, 1>, Tensor<B, 2>) = sliced_scan(step, Tensor::zeros([1], &device), xs)
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

// =================================================================================================
// checkpoint_chunked_scan
// =================================================================================================

/// Values and gradients (w.r.t. init and xs, of sum(carry) + sum(ys * w)) of a plain scan and of
/// a checkpointed one.
fn grads_of(
    chunk: Option<isize>,
    checkpointed: bool,
    reverse: bool,
    n: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = 3;
    let init = tensor::<AD, 1>(11, [d]).require_grad();
    let xs = tensor::<AD, 2>(12, [n, d]).require_grad();
    let w = tensor::<AD, 2>(13, [n, 1]);
    let (c, ys): (Tensor<AD, 1>, Tensor<AD, 2>) = if checkpointed {
        checkpoint_chunked_scan(sincos, init.clone(), xs.clone())
            .chunk_size(chunk)
            .reverse(reverse)
            .call()
            .unwrap()
    } else {
        scan(sincos, init.clone(), xs.clone())
            .reverse(reverse)
            .call()
            .unwrap()
    };
    let loss = c.clone().sum() + (ys.clone() * w).sum();
    let g = loss.backward();
    (
        vec1(c.inner()),
        vec1(ys.inner()),
        vec1(init.grad(&g).unwrap()),
        vec1(xs.grad(&g).unwrap()),
    )
}

#[test]
fn should_match_plain_scan_values_and_gradients_for_every_chunk_size() {
    let n = 7;
    for reverse in [false, true] {
        let want = grads_of(None, false, reverse, n);
        for chunk in [None, Some(1), Some(2), Some(3), Some(7), Some(10)] {
            let got = grads_of(chunk, true, reverse, n);
            let what = format!("chunk {chunk:?} reverse {reverse}");
            assert_close(&got.0, &want.0, &format!("{what}: carry"));
            assert_close(&got.1, &want.1, &format!("{what}: ys"));
            assert_close(&got.2, &want.2, &format!("{what}: d init"));
            assert_close(&got.3, &want.3, &format!("{what}: d xs"));
        }
    }
}

#[test]
fn should_reject_non_positive_chunk_sizes() {
    for k in [0isize, -2] {
        let err =
            checkpoint_chunked_scan(sincos, tensor::<AD, 1>(1, [3]), tensor::<AD, 2>(2, [4, 3]))
                .chunk_size(Some(k))
                .call::<TestBackend, _, _, _, Tensor<AD, 2>>()
                .unwrap_err();
        assert_eq!(
            err,
            VmapError::ChunkSizeNotPositive {
                transform: "checkpoint_chunked_scan",
                chunk_size: k
            }
        );
        assert!(err.to_string().contains(&k.to_string()));
    }
}

#[test]
fn should_refuse_a_captured_tracked_parameter_and_differentiate_a_carried_one() {
    let n = 6;
    let w = tensor::<AD, 1>(21, [3]).require_grad();
    let xs = tensor::<AD, 2>(22, [n, 3]);
    let init = tensor::<AD, 1>(23, [3]);

    // Captured: refused (its gradient could not be recomputed per chunk).
    let wc = w.clone();
    let captured = move |c: Tensor<AD, 1>, x: Tensor<AD, 1>| sincos(c * wc.clone(), x);
    let err = checkpoint_chunked_scan(captured, init.clone(), xs.clone())
        .chunk_size(Some(2))
        .call::<TestBackend, _, _, _, Tensor<AD, 2>>()
        .unwrap_err();
    assert!(
        matches!(err, VmapError::CapturedTrackedTensor { .. }),
        "{err:?}"
    );

    // Oracle: a plain scan with the captured parameter.
    let wc = w.clone();
    let captured = move |c: Tensor<AD, 1>, x: Tensor<AD, 1>| sincos(c * wc.clone(), x);
    let (c, ys): (Tensor<AD, 1>, Tensor<AD, 2>) =
        scan(captured, init.clone(), xs.clone()).call().unwrap();
    let want = w.grad(&(c.sum() + ys.sum()).backward()).unwrap();

    // The parameter carried through the loop, returned unchanged.
    let carried = |(w, c): (Tensor<AD, 1>, Tensor<AD, 1>), x: Tensor<AD, 1>| {
        let (c, y) = sincos(c * w.clone(), x);
        ((w, c), y)
    };
    for chunk in [Some(1), Some(4), None] {
        let ((_, c), ys): ((Tensor<AD, 1>, Tensor<AD, 1>), Tensor<AD, 2>) =
            checkpoint_chunked_scan(carried, (w.clone(), init.clone()), xs.clone())
                .chunk_size(chunk)
                .call()
                .unwrap();
        let got = w.grad(&(c.sum() + ys.sum()).backward()).unwrap();
        assert_close(&vec1(got), &vec1(want.clone()), &format!("chunk {chunk:?}"));
    }
}

#[test]
fn should_checkpoint_with_constants_statics_and_rank0_carries() {
    // A captured constant (no gradient) is fine; a Static rides in the carry; the carry is
    // rank 0 and xs is (n,): every step sees scalars. On `Vmap` with nothing batched, which
    // holds rank-0 tensors on every backend.
    type AdV = Autodiff<V>;
    let device = dev();
    let scale: Tensor<AdV, 0> = scalar(1.5);
    let step = move |(c, tag): (Tensor<AdV, 0>, Static<u8>), x: Tensor<AdV, 0>| {
        assert_eq!(tag.0, 3);
        let c = (c * x.clone()).sin() + scale.clone() * x;
        let y = c.clone() * c.clone();
        ((c, tag), y)
    };
    let xs = Tensor::<AdV, 1>::from_floats([0.3, -0.2, 0.8, 0.1, -0.6], &device).require_grad();
    let init: Tensor<AdV, 0> = scalar(0.7).require_grad();

    // Oracle on the host: the loop and its reverse-mode derivative written out.
    let xv = [0.3f32, -0.2, 0.8, 0.1, -0.6];
    let mut cs = vec![0.7f32];
    for &x in &xv {
        let c = *cs.last().unwrap();
        cs.push((c * x).sin() + 1.5 * x);
    }
    // loss = c_n + sum_t y_t, y_t = c_{t+1}^2
    let mut gc = 1.0f32; // d loss / d c_{t+1}, accumulated backwards
    let mut gx = [0.0f32; 5];
    for t in (0..5).rev() {
        gc += 2.0 * cs[t + 1];
        let (c, x) = (cs[t], xv[t]);
        gx[t] = gc * ((c * x).cos() * c + 1.5);
        gc *= (c * x).cos() * x;
    }

    // Back-propagate from the carry and from sum(ys) separately (two runs: a backward pass
    // consumes the graph) and add the gradients.
    let run = |chunk: Option<isize>| {
        checkpoint_chunked_scan(step.clone(), (init.clone(), Static(3u8)), xs.clone())
            .chunk_size(chunk)
            .call::<V, _, _, _, Tensor<AdV, 1>>()
            .unwrap()
    };
    for chunk in [Some(1), Some(2), None] {
        let ((c, tag), ys) = run(chunk);
        assert_eq!(tag, Static(3));
        assert_close(&vec1(c.clone().inner()), &[cs[5]], "carry");
        let want_ys: Vec<f32> = cs[1..].iter().map(|c| c * c).collect();
        assert_close(&vec1(ys.clone().inner()), &want_ys, "ys");
        let g1 = c.backward();
        let ((_, _), ys) = run(chunk);
        let g2 = ys.sum().backward();
        let d_init = init.grad(&g1).unwrap() + init.grad(&g2).unwrap();
        let d_xs = xs.grad(&g1).unwrap() + xs.grad(&g2).unwrap();
        assert_close(&vec1(d_init), &[gc], "d init");
        assert_close(&vec1(d_xs), &gx, "d xs");
    }
}

#[test]
fn should_give_per_example_gradients_through_a_checkpointed_scan_under_vmap() {
    type AV = Autodiff<V>;
    let n = 5;
    let inits = tensor::<AV, 2>(31, [4, 3]);
    let xs = tensor::<AV, 2>(32, [n, 3]);
    // Per example: d sum(final carry) / d init, with the loop checkpointed every 2 steps.
    let per_example = |chunk: Option<isize>| {
        let xs = xs.clone();
        let f = move |init: Tensor<AV, 1>| -> Tensor<V, 1> {
            let init = init.require_grad();
            let (c, _ys): (Tensor<AV, 1>, Tensor<AV, 2>) = match chunk {
                Some(_) => checkpoint_chunked_scan(sincos, init.clone(), xs.clone())
                    .chunk_size(chunk)
                    .call()
                    .unwrap(),
                None => scan(sincos, init.clone(), xs.clone()).call().unwrap(),
            };
            init.grad(&c.sum().backward()).unwrap()
        };
        let g: Tensor<V, 2> = vmap(f).call(inits.clone()).unwrap();
        vec1(g)
    };
    assert_close(
        &per_example(Some(2)),
        &per_example(None),
        "per-example d init",
    );
}

// =================================================================================================
// chunked_vmap
// =================================================================================================

#[test]
fn should_equal_vmap_for_every_chunk_size() {
    let batch = 7;
    let w = tensor::<V, 2>(41, [3, 2]);
    let xs = tensor::<V, 2>(42, [batch, 3]);
    let f = move |x: Tensor<V, 1>| -> BTreeMap<String, Tensor<V, 1>> {
        let y = x
            .clone()
            .unsqueeze::<2>()
            .matmul(w.clone())
            .squeeze_dim::<1>(0)
            .tanh();
        BTreeMap::from([("y".into(), y), ("n".into(), x.powi_scalar(2).sum())])
    };
    let want: BTreeMap<String, Tensor<V, 2>> = vmap(f.clone()).call(xs.clone()).unwrap();
    for chunk in 1..=(batch as isize + 1) {
        let got: BTreeMap<String, Tensor<V, 2>> = chunked_vmap(f.clone(), chunk)
            .unwrap()
            .call(xs.clone())
            .unwrap();
        for (k, v) in &want {
            assert_eq!(got[k].dims(), v.dims(), "chunk {chunk}: {k}");
            assert_close(
                &vec1(got[k].clone()),
                &vec1(v.clone()),
                &format!("chunk {chunk}: {k}"),
            );
        }
    }
}

#[test]
fn should_chunk_with_in_axes_out_axes_and_statics() {
    let xs = tensor::<V, 2>(51, [3, 5]); // mapped on axis 1: batch 5
    let b = tensor::<V, 1>(52, [3]); // unmapped
    let f = |(x, b, s): (Tensor<V, 1>, Tensor<V, 1>, Static<f32>)| (x * b).mul_scalar(s.0);
    let axes = burn_vmap::tree::Spec::Seq(vec![
        burn_vmap::tree::Spec::Leaf(Some(1)),
        burn_vmap::tree::Spec::Leaf(None),
        burn_vmap::tree::Spec::Leaf(None),
    ]);
    let want: Tensor<V, 2> = vmap(f)
        .in_axes(axes.clone())
        .out_axes(1)
        .call((xs.clone(), b.clone(), Static(2.0f32)))
        .unwrap();
    for chunk in [1, 2, 4, 5, 9] {
        let got: Tensor<V, 2> = chunked_vmap(f, chunk)
            .unwrap()
            .in_axes(axes.clone())
            .out_axes(1)
            .call((xs.clone(), b.clone(), Static(2.0f32)))
            .unwrap();
        assert_eq!(got.dims(), [3, 5]);
        assert_close(&vec1(got), &vec1(want.clone()), &format!("chunk {chunk}"));
    }
}

#[test]
fn should_report_chunked_vmap_errors() {
    let f = |(a, b): (Tensor<V, 1>, Tensor<V, 1>)| a.sum() + b.sum();
    let Err(err) = chunked_vmap(f, 0) else {
        panic!("chunk size 0 accepted")
    };
    assert_eq!(
        err,
        VmapError::ChunkSizeNotPositive {
            transform: "chunked_vmap",
            chunk_size: 0
        }
    );
    assert!(chunked_vmap(f, -3).is_err());

    let g = chunked_vmap(f, 3).unwrap();
    let err = g
        .call_as::<V, V, _, _, _, Tensor<V, 1>>((
            tensor::<V, 2>(1, [10, 3]),
            tensor::<V, 2>(2, [4, 3]),
        ))
        .unwrap_err();
    let VmapError::InconsistentBatchSizes { arguments } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        arguments.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        vec![10, 4]
    );
    let msg = err.to_string();
    assert!(msg.contains("args[0]") && msg.contains("args[1]"), "{msg}");

    // A zero-dimensional leaf cannot be mapped on axis 0: the argument is named.
    let h = |(a, b): (Tensor<V, 1>, Tensor<V, 0>)| a.sum() + b.reshape([1]);
    let scalar: Tensor<V, 0> = scalar(1.0);
    let err = chunked_vmap(h, 2)
        .unwrap()
        .call_as::<V, V, _, _, _, Tensor<V, 1>>((tensor::<V, 2>(3, [4, 3]), scalar))
        .unwrap_err();
    assert!(matches!(err, VmapError::AxisOutOfRange { .. }), "{err:?}");
    assert!(err.to_string().contains("args[1]"), "{err}");
}
