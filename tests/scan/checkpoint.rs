//! `checkpoint_chunked_scan`: values and gradients against the plain scan, on autodiff devices
//! and inside a recorded per-example loss.

use burn::module::{Module, Param};
use burn::tensor::Tensor;
use burn_vmap::transform::{checkpoint_chunked_scan, scan};
use burn_vmap::{Static, VmapError, per_example_grads};

use super::{assert_close, dev, rank0, sincos, tensor, tensor_on, vec1};

// =================================================================================================

/// Values and gradients (w.r.t. init and xs, of sum(carry) + sum(ys * w)) of a plain scan and
/// of a checkpointed one, on an autodiff device.
fn grads_of(
    chunk: Option<isize>,
    checkpointed: bool,
    reverse: bool,
    n: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let device = dev().autodiff();
    let d = 3;
    let init = tensor_on::<1>(11, [d], &device).require_grad();
    let xs = tensor_on::<2>(12, [n, d], &device).require_grad();
    let w = tensor_on::<2>(13, [n, 1], &device);
    let (c, ys) = if checkpointed {
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
        let err = checkpoint_chunked_scan(sincos, tensor::<1>(1, [3]), tensor::<2>(2, [4, 3]))
            .chunk_size(Some(k))
            .call()
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
fn should_checkpoint_with_constants_statics_and_rank0_carries() {
    // A captured constant (no gradient) is fine; a Static rides in the carry; the carry is
    // rank 0 and xs is (n,): every step sees scalars.
    let device = dev().autodiff();
    let scale = rank0(1.5, &device);
    let step = move |(c, tag): (Tensor<0>, Static<u8>), x: Tensor<0>| {
        assert_eq!(tag.0, 3);
        let c = (c * x.clone()).sin() + scale.clone() * x;
        let y = c.clone() * c.clone();
        ((c, tag), y)
    };
    let xs = Tensor::<1>::from_floats([0.3, -0.2, 0.8, 0.1, -0.6], &device).require_grad();
    let init = rank0(0.7, &device).require_grad();

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

    for chunk in [Some(1), Some(2), None] {
        let ((c, tag), ys) =
            checkpoint_chunked_scan(step.clone(), (init.clone(), Static(3u8)), xs.clone())
                .chunk_size(chunk)
                .call()
                .unwrap();
        assert_eq!(tag, Static(3));
        assert_close(&vec1(c.clone().inner()), &[cs[5]], "carry");
        let want_ys: Vec<f32> = cs[1..].iter().map(|c| c * c).collect();
        assert_close(&vec1(ys.clone().inner()), &want_ys, "ys");
        let g = (c.reshape([1]) + ys.sum()).backward();
        assert_close(&vec1(init.grad(&g).unwrap()), &[gc], "d init");
        assert_close(&vec1(xs.grad(&g).unwrap()), &gx, "d xs");
    }
}

#[test]
fn should_recompute_each_chunk_in_the_backward_pass() {
    // The body runs once per step forward and once more per step backward (the recomputation),
    // where a plain scan runs it once.
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let step = |c: Tensor<1>, x: Tensor<1>| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        sincos(c, x)
    };
    let device = dev().autodiff();
    let init = tensor_on::<1>(14, [3], &device).require_grad();
    let xs = tensor_on::<2>(15, [6, 3], &device);
    let (c, _) = checkpoint_chunked_scan(step, init.clone(), xs.clone())
        .chunk_size(Some(2))
        .call()
        .unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 6);
    let g = init.grad(&c.sum().backward()).unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 12);
    let (c, _) = scan(sincos, init.clone(), xs).call().unwrap();
    let want = init.grad(&c.sum().backward()).unwrap();
    assert_close(&vec1(g), &vec1(want), "d init");
}

#[test]
fn should_checkpoint_on_a_device_with_burns_gradient_checkpointing() {
    // Burn's own (balanced) gradient checkpointing on the device: the chunks' nodes follow it.
    let device = dev().autodiff().gradient_checkpointing();
    let init = tensor_on::<1>(16, [3], &device).require_grad();
    let xs = tensor_on::<2>(17, [5, 3], &device).require_grad();
    let run = |checkpointed: bool| {
        let (c, ys) = if checkpointed {
            checkpoint_chunked_scan(sincos, init.clone(), xs.clone())
                .chunk_size(Some(2))
                .call()
                .unwrap()
        } else {
            scan(sincos, init.clone(), xs.clone()).call().unwrap()
        };
        let g = (c.sum() + ys.sum()).backward();
        (vec1(init.grad(&g).unwrap()), vec1(xs.grad(&g).unwrap()))
    };
    let (want_init, want_xs) = run(false);
    let (got_init, got_xs) = run(true);
    assert_close(&got_init, &want_init, "d init");
    assert_close(&got_xs, &want_xs, "d xs");
}

#[test]
fn should_refuse_a_captured_tracked_parameter_and_differentiate_a_carried_one() {
    let device = dev().autodiff();
    let n = 6;
    let w = tensor_on::<1>(21, [3], &device).require_grad();
    let xs = tensor_on::<2>(22, [n, 3], &device);
    let init = tensor_on::<1>(23, [3], &device);

    // Captured: refused (its gradient could not be recomputed per chunk).
    let wc = w.clone();
    let captured = move |c: Tensor<1>, x: Tensor<1>| sincos(c * wc.clone(), x);
    let err = checkpoint_chunked_scan(captured.clone(), init.clone(), xs.clone())
        .chunk_size(Some(2))
        .call()
        .unwrap_err();
    assert!(
        matches!(err, VmapError::CapturedTrackedTensor { .. }),
        "{err:?}"
    );

    // Oracle: a plain scan with the captured parameter.
    let (c, ys) = scan(captured, init.clone(), xs.clone()).call().unwrap();
    let want = w.grad(&(c.sum() + ys.sum()).backward()).unwrap();

    // The parameter carried through the loop, returned unchanged.
    let carried = |(w, c): (Tensor<1>, Tensor<1>), x: Tensor<1>| {
        let (c, y) = sincos(c * w.clone(), x);
        ((w, c), y)
    };
    for chunk in [Some(1), Some(4), None] {
        let ((_, c), ys) = checkpoint_chunked_scan(carried, (w.clone(), init.clone()), xs.clone())
            .chunk_size(chunk)
            .call()
            .unwrap();
        let got = w.grad(&(c.sum() + ys.sum()).backward()).unwrap();
        assert_close(&vec1(got), &vec1(want.clone()), &format!("chunk {chunk:?}"));
    }
}

/// A per-example scale of the initial carry: the parameter per-example gradients are taken of.
#[derive(Module, Debug)]
struct Scale {
    p: Param<Tensor<1>>,
}

#[test]
fn should_give_per_example_gradients_through_a_checkpointed_scan() {
    // Per example i: d sum(final carry) / d p for the loop from init_i * p over xs_i, inside a
    // recorded loss (per_example_grads), against Burn's own backward on each example.
    let (b, n, d) = (4, 5, 3);
    let p = tensor::<1>(30, [d]);
    let model = Scale {
        p: Param::from_tensor(p.clone()),
    };
    let inits = tensor::<2>(31, [b, d]);
    let xs = tensor::<3>(32, [b, n, d]);
    let loss = |chunk: Option<isize>| {
        move |m: &Scale, (init, xs): (Tensor<1>, Tensor<2>)| {
            let init = init * m.p.val();
            let (c, _ys) = match chunk {
                Some(_) => checkpoint_chunked_scan(sincos, init, xs)
                    .chunk_size(chunk)
                    .call()
                    .unwrap(),
                None => scan(sincos, init, xs).call().unwrap(),
            };
            c.sum()
        }
    };
    let got = per_example_grads(&model, (inits.clone(), xs.clone()), loss(Some(2))).unwrap();
    let plain = per_example_grads(&model, (inits.clone(), xs.clone()), loss(None)).unwrap();
    let got = vec1(got.get::<2>("p").unwrap());
    assert_close(&got, &vec1(plain.get::<2>("p").unwrap()), "plain scan");

    // The loop of Burn's own backward, one example at a time.
    let ad = dev().autodiff();
    let mut want = Vec::new();
    for i in 0..b {
        let p = Tensor::<1>::from_data(p.to_data(), &ad).require_grad();
        let init =
            Tensor::<1>::from_data(inits.clone().slice(i..i + 1).reshape([d]).to_data(), &ad);
        let x = Tensor::<2>::from_data(xs.clone().slice(i..i + 1).reshape([n, d]).to_data(), &ad);
        let (c, _) = scan(sincos, init * p.clone(), x).call().unwrap();
        want.extend(vec1(p.grad(&c.sum().backward()).unwrap()));
    }
    assert_close(&got, &want, "per-example d p");
}

/// A body that draws (a `Dropout` in training mode, which acts only on an autodiff device):
/// the forward pass applies it as the plain scan does, and the recomputation in the backward
/// pass draws the same mask, so the gradient is that of the values returned. `y_t =
/// dropout(x_t)`: `d sum(ys) / d x` is `1 / keep` where `y` kept `x`, 0 where it dropped it.
#[test]
fn should_draw_the_same_dropout_mask_forward_and_in_the_recomputation() {
    use burn::nn::DropoutConfig;
    let device = dev().autodiff();
    let (n, d) = (8, 64);
    let dropout = DropoutConfig::new(0.5).init();
    let body = move |h: Tensor<1>, x: Tensor<1>| (h, dropout.forward(x));
    let init = Tensor::<1>::zeros([d], &device);
    for chunk in [None, Some(1), Some(3)] {
        let xs = Tensor::<2>::ones([n, d], &device).require_grad();
        let (_, ys) = checkpoint_chunked_scan(body.clone(), init.clone(), xs.clone())
            .chunk_size(chunk)
            .call()
            .unwrap();
        let grad = xs.grad(&ys.clone().sum().backward()).unwrap();
        let ys = vec1(ys.reshape([n * d]));
        let grad: Vec<f32> = grad.into_data().try_to_vec().unwrap();
        let dropped = ys.iter().filter(|&&y| y == 0.0).count();
        assert!(
            (n * d / 4..3 * n * d / 4).contains(&dropped),
            "chunk {chunk:?}: {dropped} of {} dropped (p = 0.5)",
            n * d
        );
        for (i, (y, g)) in ys.iter().zip(&grad).enumerate() {
            assert_eq!(*g, *y, "chunk {chunk:?}, value {i}: y {y}, gradient {g}");
        }
    }
}
