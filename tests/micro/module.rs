//! `micro_grad_module` on unmodified burn-nn 0.22 modules against the loop of Burn's own
//! backward; BatchNorm refused in training mode; dropout drawn per example; one recording per
//! module and signature.

use std::cell::Cell;

use burn::module::{Module, ParamId};
use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn_vmap::accumulate::{Concat, Mean};
use burn_vmap::tree::Leaf;
use burn_vmap::{MicroAux, ParamGrads, VmapError, clip_by_global_norm, micro_grad_module};

use super::common::{close, dev, floats, matrix, tolerance};

#[derive(Module, Debug)]
struct Net {
    a: Linear,
    b: Linear,
}

impl Net {
    fn new() -> Self {
        Net {
            a: LinearConfig::new(4, 5).init(&dev()),
            b: LinearConfig::new(5, 2).init(&dev()),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.b.forward(self.a.forward(x).tanh())
    }
}

fn loss(m: &Net, (x, y): (Tensor<2>, Tensor<2>)) -> Tensor<1> {
    (m.forward(x) - y).powi_scalar(2).mean()
}

/// Burn's own gradient of parameter `id` (rank `rank`) for example `i`.
fn burn_grad(net: &Net, x: &Tensor<2>, y: &Tensor<2>, i: usize) -> GradientsParams {
    let trained = net.clone().train();
    let xi = x.clone().narrow(0, i, 1);
    let yi = y.clone().narrow(0, i, 1);
    GradientsParams::from_grads(loss(&trained, (xi, yi)).backward(), &trained)
}

/// A leaf's values.
fn values(leaf: &Leaf) -> Vec<f32> {
    leaf.to_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn get(grads: &GradientsParams, id: ParamId, rank: usize) -> Vec<f32> {
    match rank {
        1 => floats(grads.get::<1>(id).unwrap()),
        2 => floats(grads.get::<2>(id).unwrap()),
        r => panic!("rank {r}"),
    }
}

#[test]
fn should_give_module_gradients_equal_to_the_loop() {
    let n = 6;
    let net = Net::new();
    let x = matrix(n, 4, 12);
    let y = matrix(n, 2, 13);
    let (per, _): (ParamGrads, MicroAux) = micro_grad_module(loss)
        .microbatch_size(3)
        .accumulator(Concat)
        .call(&net, (x.clone(), y.clone()))
        .unwrap();
    assert_eq!(per.len(), 4);
    let (sum, _) = micro_grad_module(loss)
        .microbatch_size(2)
        .call(&net, (x.clone(), y.clone()))
        .unwrap();
    let (clipped, _) = micro_grad_module(loss)
        .transform_fn(|g| clip_by_global_norm(g, 0.1))
        .call(&net, (x.clone(), y.clone()))
        .unwrap();
    // Summed in f64 as the DP mechanism sums (a clipped bias is its rows times the clip
    // factors, cast and summed as one product; a weight's factors cast), also across
    // microbatches.
    let (wide, _) = micro_grad_module(loss)
        .accumulator(burn_vmap::accumulate::WideSum)
        .microbatch_size(3)
        .transform_fn(|g| clip_by_global_norm(g, 0.1))
        .call(&net, (x.clone(), y.clone()))
        .unwrap();
    let mut want_sum: Vec<Vec<f32>> = Vec::new();
    let mut want_clipped: Vec<Vec<f32>> = Vec::new();
    for i in 0..n {
        let theirs = burn_grad(&net, &x, &y, i);
        let mut example = Vec::new();
        for (path, id, g) in per.iter() {
            let rank = g.shape().num_dims() - 1;
            let want = get(&theirs, id, rank);
            let all = values(g);
            let len = want.len();
            let mine = &all[i * len..(i + 1) * len];
            for (a, b) in mine.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= tolerance::device_tol(1e-5) * (1.0 + b.abs()),
                    "{path} example {i}: {a} vs {b}"
                );
            }
            example.push(want);
        }
        let norm = example.iter().flatten().map(|v| v * v).sum::<f32>().sqrt();
        let s = 0.1 / norm.max(0.1);
        if want_sum.is_empty() {
            want_sum = example.iter().map(|g| vec![0.0; g.len()]).collect();
            want_clipped = want_sum.clone();
        }
        for ((ws, wc), g) in want_sum.iter_mut().zip(&mut want_clipped).zip(&example) {
            for ((a, c), v) in ws.iter_mut().zip(wc.iter_mut()).zip(g) {
                *a += v;
                *c += v * s;
            }
        }
    }
    for (grads, want) in [
        (&sum, &want_sum),
        (&clipped, &want_clipped),
        (&wide, &want_clipped),
    ] {
        for ((path, _, g), w) in grads.iter().zip(want) {
            let got = values(g);
            for (a, b) in got.iter().zip(w) {
                assert!(
                    (a - b).abs() <= tolerance::device_tol(1e-5) * (1.0 + b.abs()),
                    "{path}: {a} vs {b}"
                );
            }
        }
    }
    // The sum is the per-example gradients summed, and it feeds an optimizer.
    let summed = per.sum_batch();
    for path in ["a.bias", "b.bias"] {
        close(summed.get::<1>(path).unwrap(), sum.get::<1>(path).unwrap());
    }
    let _ = sum.into_gradients_params();
}

#[test]
fn should_record_the_loss_once_per_module_and_signature() {
    let calls = Cell::new(0);
    let counted = |m: &Net, args: (Tensor<2>, Tensor<2>)| {
        calls.set(calls.get() + 1);
        loss(m, args)
    };
    let net = Net::new();
    let step = micro_grad_module(counted)
        .microbatch_size(2)
        .accumulator(Mean);
    for b in [4, 6, 2] {
        let (g, _) = step
            .call(&net, (matrix(b, 4, b as u64), matrix(b, 2, 1)))
            .unwrap();
        assert_eq!(g.len(), 4);
    }
    assert_eq!(calls.get(), 1);
    // Another module (other parameters): recorded again.
    let other = Net::new();
    let _ = step
        .call(&other, (matrix(2, 4, 0), matrix(2, 2, 1)))
        .unwrap();
    assert_eq!(calls.get(), 2);
}

#[derive(Module, Debug)]
struct Normed {
    fc: Linear,
    norm: BatchNorm,
}

#[test]
fn should_refuse_batch_norm_in_training_mode_and_run_it_in_eval_mode() {
    let net = Normed {
        fc: LinearConfig::new(3, 4).init(&dev()),
        norm: BatchNormConfig::new(4).init(&dev()),
    };
    let loss = |m: &Normed, (x,): (Tensor<2>,)| {
        let h: Tensor<3> = m.norm.forward(m.fc.forward(x).unsqueeze_dim(2));
        h.sum()
    };
    let x = matrix(8, 3, 3);
    let err = micro_grad_module(loss)
        .call(&net, (x.clone(),))
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::MixesExamples { path, layer: "BatchNorm", .. } if path == "norm"),
        "{err}"
    );
    // In eval mode every example is normalized by the running statistics: allowed, and the
    // module's state is unchanged.
    let eval = net.valid();
    let before = floats(eval.norm.running_mean.value());
    let (g, _) = micro_grad_module(loss)
        .microbatch_size(4)
        .call(&eval, (x,))
        .unwrap();
    assert_eq!(g.get::<2>("fc.weight").unwrap().dims(), [3, 4]);
    assert_eq!(floats(eval.norm.running_mean.value()), before);
}

#[derive(Module, Debug)]
struct Dropped {
    l1: Linear,
    dropout: Dropout,
    l2: Linear,
}

#[test]
fn should_draw_dropout_per_example() {
    let (n, d_h) = (8, 64);
    let model = Dropped {
        l1: LinearConfig::new(5, d_h).init(&dev()),
        dropout: DropoutConfig::new(0.5).init(),
        l2: LinearConfig::new(d_h, 1).init(&dev()),
    };
    let xs = matrix(n, 5, 7);
    // The gradient of l2.weight is the dropped hidden layer: its zeros show each mask.
    let loss = |m: &Dropped, (x,): (Tensor<2>,)| {
        let h = m.l1.forward(x).abs() + 1.0;
        m.l2.forward(m.dropout.forward(h)).sum()
    };
    for mb in [None, Some(4)] {
        let (per, _) = micro_grad_module(loss)
            .microbatch_size(mb)
            .accumulator(Concat)
            .call(&model, (xs.clone(),))
            .unwrap();
        let w2 = floats(per.get::<3>("l2.weight").unwrap());
        let masks: Vec<Vec<bool>> = w2
            .chunks(d_h)
            .map(|c| c.iter().map(|v| *v != 0.0).collect())
            .collect();
        for (i, m) in masks.iter().enumerate() {
            let kept = m.iter().filter(|k| **k).count();
            assert!(
                (10..=54).contains(&kept),
                "example {i} kept {kept} of {d_h}"
            );
            for other in &masks[..i] {
                assert_ne!(m, other, "two examples drew the same mask");
            }
        }
    }
}

/// An empty batch (Poisson sampling can draw one) never panics: zero gradients, no values.
#[test]
fn should_give_zero_gradients_for_an_empty_batch() {
    let net = Net::new();
    let (x, y) = (matrix(0, 4, 1), matrix(0, 2, 2));
    for mb in [None, Some(2)] {
        let (g, aux) = micro_grad_module(loss)
            .microbatch_size(mb)
            .transform_fn(|g| clip_by_global_norm(g, 1.0))
            .call(&net, (x.clone(), y.clone()))
            .unwrap();
        assert_eq!(aux.values.dims(), [0]);
        assert_eq!(g.len(), 4);
        for (path, _, leaf) in g.iter() {
            assert!(values(leaf).iter().all(|v| *v == 0.0), "{path}");
        }
        let (per, _) = micro_grad_module(loss)
            .microbatch_size(mb)
            .accumulator(Concat)
            .call(&net, (x.clone(), y.clone()))
            .unwrap();
        assert_eq!(per.get::<3>("a.weight").unwrap().dims(), [0, 4, 5]);
    }
}

/// `WideSum` sums the examples' gradients in `f64` on Flex: a sum whose `f32` rounding loses
/// the small examples (`1e8 + 1 + 1 + ...`: `f32` steps by 8 there) is exact, and a dense
/// layer's factored gradient is summed from its cast factors (every product `x·g` exact in
/// `f64`), also across microbatches.
#[test]
fn should_sum_in_f64_with_wide_sum() {
    use burn::tensor::DType;
    use burn_vmap::accumulate::{Sum, WideSum};
    let n = 1001;
    let mut x = vec![1.0f32; n * 2];
    x[0] = 1e8;
    x[1] = 3e-9;
    let x = Tensor::<2>::from_data(burn::tensor::TensorData::new(x, [n, 2]), &dev());
    let model: Linear = LinearConfig::new(2, 1).init(&dev());
    // d(sum(W x + b))/dW = x: the weight's gradient summed over the examples is Σ x.
    let loss = |m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sum();
    for mb in [None, Some(7)] {
        let wide = micro_grad_module(loss)
            .microbatch_size(mb)
            .accumulator(WideSum);
        let (g, _) = wide.call(&model, (x.clone(),)).unwrap();
        let w: Tensor<2> = g.get("weight").unwrap();
        if !dev().supports_dtype(DType::F64) {
            // wgpu (WGSL has no f64): the widest float is f32.
            assert_eq!(w.dtype(), DType::F32);
            return;
        }
        assert_eq!(w.dtype(), DType::F64);
        let w = w.into_data().try_to_vec::<f64>().unwrap();
        assert_eq!(
            w,
            vec![1e8 + 1000.0, f64::from(3e-9f32) + 1000.0],
            "microbatch {mb:?}"
        );
        let (g, _) = micro_grad_module(loss)
            .microbatch_size(mb)
            .accumulator(Sum)
            .call(&model, (x.clone(),))
            .unwrap();
        let narrow = floats(g.get::<2>("weight").unwrap());
        assert_ne!(f64::from(narrow[0]), 1e8 + 1000.0, "f32 rounds the sum");
    }
}
