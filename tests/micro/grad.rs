//! `micro_grad` against the loop of Burn's own backward, one example at a time: several
//! differentiated and batched arguments, every accumulator, `transform_fn` / `metrics_fn`,
//! `has_aux`, `keep_batch_dim`, struct arguments; the optax cases of the reference vectors;
//! errors.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::accumulate::{Concat, Mean, RunningMean, Sum};
use burn_vmap::{MicroAux, Tree, VmapError, clip_by_global_norm, global_norm, micro_grad};

use super::common::{close, close_tol, data, dev, floats, matrix, tolerance};

/// `0.5 (x·w + b − y)²` per example, with x `[1, 3]` under keep_batch_dim.
fn linreg((w, b, x, y): (Tensor<1>, Tensor<1>, Tensor<2>, Tensor<1>)) -> Tensor<1> {
    let pred = x.matmul(w.unsqueeze_dim(1)).reshape([-1]) + b;
    let d = pred - y;
    (d.clone() * d).mean() * 0.5
}

/// Single-example gradients by a loop of Burn's own backward passes: `[B·3]`, `[B]`.
fn loop_grads(w: &[f32], b: f32, x: &[f32], y: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let ad = Device::default().autodiff();
    let (mut gw, mut gb) = (Vec::new(), Vec::new());
    for i in 0..y.len() {
        let wt = Tensor::<1>::from_floats(w, &ad).require_grad();
        let bt = Tensor::<1>::from_floats([b], &ad).require_grad();
        let xt = Tensor::<1>::from_floats(&x[i * 3..i * 3 + 3], &ad);
        let d = (xt * wt.clone()).sum() + bt.clone() - y[i];
        let loss = (d.clone() * d) * 0.5;
        let g = loss.backward();
        gw.extend(floats(wt.grad(&g).unwrap()));
        gb.extend(floats(bt.grad(&g).unwrap()));
    }
    (gw, gb)
}

/// `linreg`'s arguments `(w, b, x, y)` on the device, `x` as `[n, 3]`.
fn linreg_args(
    w: &[f32],
    b: f32,
    x: &[f32],
    y: &[f32],
) -> (Tensor<1>, Tensor<1>, Tensor<2>, Tensor<1>) {
    (
        Tensor::<1>::from_floats(w, &dev()),
        Tensor::<1>::from_floats([b], &dev()),
        Tensor::<2>::from_data(TensorData::new(x.to_vec(), [y.len(), 3]), &dev()),
        Tensor::<1>::from_floats(y, &dev()),
    )
}

type Pair<const D: usize> = (Tensor<D>, Tensor<D>);

/// An argument listed twice in `argnums` gets its gradient twice (as `jax.grad` with
/// `argnums=(1, 1)`), whatever the step does with the first copy.
#[test]
fn should_give_an_argument_listed_twice_its_gradient_twice() {
    let (n, w, b) = (4, data(1, 3, 7), 0.3f32);
    let x = data(n, 3, 8);
    let y = data(n, 1, 9);
    let (gw, gb) = loop_grads(&w, b, &x, &y);
    let args = linreg_args(&w, b, &x, &y);
    let ((b1, w1, b2), _): ((Tensor<2>, Tensor<2>, Tensor<2>), MicroAux) = micro_grad(linreg)
        .argnums([1, 0, 1])
        .batch_argnums([2, 3])
        .accumulator(Concat)
        .call_as(args)
        .unwrap();
    let gb = || Tensor::from_data(TensorData::new(gb.clone(), [n, 1]), &dev());
    close(b1, gb());
    close(w1, Tensor::from_data(TensorData::new(gw, [n, 3]), &dev()));
    close(b2, gb());
}

#[test]
fn should_give_per_example_gradients_of_several_arguments() {
    let (n, w, b) = (8, data(1, 3, 7), 0.3f32);
    let x = data(n, 3, 8);
    let y = data(n, 1, 9);
    let (gw, gb) = loop_grads(&w, b, &x, &y);
    let args = || linreg_args(&w, b, &x, &y);
    for m in [None, Some(1), Some(2), Some(4), Some(8)] {
        let ((pw, pb), aux): (Pair<2>, MicroAux) = micro_grad(linreg)
            .argnums([0, 1])
            .batch_argnums([2, 3])
            .microbatch_size(m)
            .accumulator(Concat)
            .call_as(args())
            .unwrap();
        close(
            pw,
            Tensor::from_data(TensorData::new(gw.clone(), [n, 3]), &dev()),
        );
        close(
            pb,
            Tensor::from_data(TensorData::new(gb.clone(), [n, 1]), &dev()),
        );
        assert_eq!(aux.values.dims(), [n]);

        // Sum with a transform and metrics: the sum of clipped gradients, the raw norms.
        let ((sw, sb), aux) = micro_grad(linreg)
            .argnums([0, 1])
            .batch_argnums([2, 3])
            .microbatch_size(m)
            .transform_fn(|g: Pair<1>| clip_by_global_norm(g, 0.5))
            .metrics_fn(|g: Pair<1>| global_norm(&g))
            .call(args())
            .unwrap();
        let (mut want_w, mut want_b) = ([0.0f32; 3], 0.0f32);
        let norms = floats(aux.metrics);
        for i in 0..n {
            let norm =
                (gw[i * 3..i * 3 + 3].iter().map(|v| v * v).sum::<f32>() + gb[i] * gb[i]).sqrt();
            let s = 0.5 / norm.max(0.5);
            for j in 0..3 {
                want_w[j] += gw[i * 3 + j] * s;
            }
            want_b += gb[i] * s;
            assert!(
                (norms[i] - norm).abs() < tolerance::device_tol(1e-4),
                "{} vs {norm}",
                norms[i]
            );
        }
        close(sw, Tensor::from_floats(want_w, &dev()));
        close(sb, Tensor::from_floats([want_b], &dev()));
    }
}

#[test]
fn should_match_the_loop_for_every_accumulator_and_num_real() {
    let (n, m) = (8, 2);
    let (w, b) = (data(1, 3, 1), -0.2f32);
    let (x, y) = (data(n, 3, 2), data(n, 1, 3));
    let (gw, _) = loop_grads(&w, b, &x, &y);
    let args = || linreg_args(&w, b, &x, &y);
    let per = Tensor::<2>::from_data(TensorData::new(gw, [n, 3]), &dev());
    let nmb = n / m;
    for real in 0..=nmb {
        let ran: Vec<usize> = (0..real)
            .flat_map(|k| (0..m).map(move |j| k + j * nmb))
            .collect();
        let mask: Vec<f32> = (0..n)
            .map(|i| if ran.contains(&i) { 1.0 } else { 0.0 })
            .collect();
        let mask = Tensor::<1>::from_floats(mask.as_slice(), &dev()).reshape([n, 1]);
        let kept = per.clone() * mask.clone();
        let grad = micro_grad(linreg)
            .batch_argnums([2, 3])
            .microbatch_size(m)
            .num_real_microbatches(Some(real))
            .transform_fn(|g: Tensor<1>| g);
        let (s, aux) = grad.clone().accumulator(Sum).call(args()).unwrap();
        close(s.unsqueeze(), kept.clone().sum_dim(0));
        // Rows of microbatches not run are zero in the aux.
        let values = floats(aux.values);
        for (i, v) in values.iter().enumerate() {
            if !ran.contains(&i) {
                assert_eq!(*v, 0.0, "example {i} did not run");
            }
        }
        let (mean, _) = grad.clone().accumulator(Mean).call(args()).unwrap();
        close(mean.unsqueeze(), kept.clone().sum_dim(0) / n as f32);
        let (rmean, _) = grad.clone().accumulator(RunningMean).call(args()).unwrap();
        let want = if real == 0 {
            kept.clone().sum_dim(0)
        } else {
            kept.clone().sum_dim(0) / (real * m) as f32
        };
        close(rmean.unsqueeze(), want);
        let (all, _) = grad.accumulator(Concat).call(args()).unwrap();
        close(all, kept);
    }
}

#[test]
fn should_return_aux_and_see_the_bare_example_without_keep_batch_dim() {
    let n = 4;
    let x = matrix(n, 3, 11);
    let w = Tensor::<1>::from_floats([0.5, -1.0, 2.0], &dev());
    // Without keep_batch_dim the function sees x as [3]; with it, [1, 3].
    let loss_bare = |(w, x): (Tensor<1>, Tensor<1>)| {
        let p = (x * w).sum();
        (p.clone(), p)
    };
    let (g, aux) = micro_grad(loss_bare)
        .keep_batch_dim(false)
        .transform_fn(|g: Tensor<1>| g)
        .call((w.clone(), x.clone()))
        .unwrap();
    // d/dw sum_i x_i·w = sum_i x_i
    close(g.clone().unsqueeze(), x.clone().sum_dim(0));
    let aux_values: Tensor<2> = aux.aux;
    close(aux_values.reshape([n]), aux.values.clone());

    let loss_kept = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    let (g2, _): (Tensor<1>, MicroAux) = micro_grad(loss_kept).call_as((w, x)).unwrap();
    close(g, g2);
}

/// optax's `sum_matvec_times_ndim`: `keep_batch_dim` is visible in the rank the function sees.
#[test]
fn should_show_keep_batch_dim_in_the_rank_the_function_sees() {
    let x = matrix(4, 3, 12);
    let w = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &dev());
    let want_g = x.clone().sum_dim(0).reshape([3]);
    let kept = |(w, x): (Tensor<1>, Tensor<2>)| x.matmul(w.unsqueeze_dim(1)).sum() * 2.0;
    let (g, aux) = micro_grad(kept)
        .transform_fn(|g: Tensor<1>| g)
        .call((w.clone(), x.clone()))
        .unwrap();
    close(g, want_g.clone() * 2.0);
    let vals = (x.clone().matmul(w.clone().unsqueeze_dim(1)) * 2.0).reshape([4]);
    close(aux.values, vals);
    let bare = |(w, x): (Tensor<1>, Tensor<1>)| (x * w).sum();
    let (g, _) = micro_grad(bare)
        .keep_batch_dim(false)
        .transform_fn(|g: Tensor<1>| g)
        .call((w, x))
        .unwrap();
    close(g, want_g);
}

/// optax's `mlp_tanh_xent` with a struct of parameters (`grads['W1']`, ...), clipped, Sum and
/// Mean, microbatched and not, against the loop.
#[derive(Tree, Clone, Debug)]
struct Mlp<W, B> {
    w1: W,
    b1: B,
    w2: W,
    b2: B,
}
type Params = Mlp<Tensor<2>, Tensor<1>>;

fn mlp_loss((p, x, labels): (Params, Tensor<2>, Tensor<1, Int>)) -> Tensor<1> {
    let h = (x.matmul(p.w1) + p.b1.unsqueeze()).tanh();
    let logits = h.matmul(p.w2) + p.b2.unsqueeze();
    let [rows, _] = logits.dims();
    let picked = log_softmax(logits, 1).gather(1, labels.reshape([rows, 1]));
    picked.neg().mean()
}

fn mlp_params(device: &Device) -> Params {
    let t = |r: usize, c: usize, seed: u64| {
        Tensor::<2>::from_data(TensorData::new(data(r, c, seed), [r, c]), device) * 0.3
    };
    Mlp {
        w1: t(5, 7, 31),
        b1: t(1, 7, 32).reshape([7]),
        w2: t(7, 3, 33),
        b2: t(1, 3, 34).reshape([3]),
    }
}

/// The flattened gradient of example `i` by Burn's own backward.
fn mlp_loop_grad(x: &Tensor<2>, labels: &Tensor<1, Int>, i: usize) -> Vec<Vec<f32>> {
    let ad = Device::default().autodiff();
    let p = mlp_params(&ad);
    let p = Mlp {
        w1: p.w1.require_grad(),
        b1: p.b1.require_grad(),
        w2: p.w2.require_grad(),
        b2: p.b2.require_grad(),
    };
    let xi = x.clone().narrow(0, i, 1).to_device(&ad);
    let yi = labels.clone().narrow(0, i, 1).to_device(&ad);
    let g = mlp_loss((p.clone(), xi, yi)).backward();
    vec![
        floats(p.w1.grad(&g).unwrap()),
        floats(p.b1.grad(&g).unwrap()),
        floats(p.w2.grad(&g).unwrap()),
        floats(p.b2.grad(&g).unwrap()),
    ]
}

#[test]
fn should_clip_a_struct_of_parameters_like_the_loop() {
    let n = 8;
    let x = matrix(n, 5, 40);
    let labels = Tensor::<1, Int>::from_ints([0, 1, 2, 1, 0, 2, 2, 1], &dev());
    let per: Vec<Vec<Vec<f32>>> = (0..n).map(|i| mlp_loop_grad(&x, &labels, i)).collect();
    for c in [0.5f32, 1.0] {
        let mut want: Vec<Vec<f32>> = per[0].iter().map(|g| vec![0.0; g.len()]).collect();
        for g in &per {
            let norm = g.iter().flatten().map(|v| v * v).sum::<f32>().sqrt();
            let s = c / norm.max(c);
            for (acc, leaf) in want.iter_mut().zip(g) {
                for (a, v) in acc.iter_mut().zip(leaf) {
                    *a += v * s;
                }
            }
        }
        for m in [None, Some(4)] {
            let clipped = micro_grad(mlp_loss)
                .argnums(0)
                .batch_argnums([1, 2])
                .microbatch_size(m)
                .transform_fn(|g: Params| clip_by_global_norm(g, c as f64));
            let (sum, aux) = clipped
                .clone()
                .metrics_fn(|g: Params| global_norm(&g))
                .call((mlp_params(&dev()), x.clone(), labels.clone()))
                .unwrap();
            let got = [
                floats(sum.w1),
                floats(sum.b1),
                floats(sum.w2),
                floats(sum.b2),
            ];
            for (g, w) in got.iter().zip(&want) {
                close_tol(
                    Tensor::<1>::from_floats(g.as_slice(), &dev()),
                    Tensor::<1>::from_floats(w.as_slice(), &dev()),
                    1e-5,
                );
            }
            assert_eq!(aux.metrics.dims(), [n, 1]);
            let (mean, _) = clipped
                .accumulator(Mean)
                .call((mlp_params(&dev()), x.clone(), labels.clone()))
                .unwrap();
            let w1 = Tensor::<1>::from_floats(want[0].as_slice(), &dev()) / n as f32;
            close(mean.w1.reshape([35]), w1);
        }
    }
}

/// optax's `mse_linreg_aux`: `has_aux` with a dict of per-example values.
#[test]
fn should_stack_a_struct_of_aux_values() {
    #[derive(Tree, Clone, Debug)]
    struct Aux<T> {
        preds: T,
        abs_err: T,
    }
    let n = 6;
    let x = matrix(n, 3, 50);
    let y = Tensor::<1>::from_floats(data(n, 1, 51).as_slice(), &dev());
    let w = Tensor::<1>::from_floats([0.1, -0.4, 0.7], &dev());
    let loss = |(w, x, y): (Tensor<1>, Tensor<2>, Tensor<1>)| {
        let pred = x.matmul(w.unsqueeze_dim(1)).reshape([-1]);
        let d = pred.clone() - y;
        let loss = (d.clone() * d.clone()).mean() * 0.5;
        (
            loss,
            Aux {
                preds: pred,
                abs_err: d.abs(),
            },
        )
    };
    for m in [None, Some(2)] {
        let (_, aux) = micro_grad(loss)
            .batch_argnums([1, 2])
            .microbatch_size(m)
            .transform_fn(|g: Tensor<1>| g)
            .call((w.clone(), x.clone(), y.clone()))
            .unwrap();
        let preds = x.clone().matmul(w.clone().unsqueeze_dim(1));
        let aux: Aux<Tensor<2>> = aux.aux; // [B, 1]: keep_batch_dim keeps the unit dim
        close(aux.preds.clone(), preds.clone());
        close(aux.abs_err, (preds - y.clone().reshape([n, 1])).abs());
    }
}

#[test]
fn should_return_micro_grad_errors() {
    let n = 6;
    let args = || {
        (
            Tensor::<1>::zeros([3], &dev()),
            Tensor::<1>::zeros([1], &dev()),
            Tensor::<2>::ones([n, 3], &dev()),
            Tensor::<1>::ones([n], &dev()),
        )
    };
    let call = |e: Result<(Tensor<1>, MicroAux), VmapError>| e.unwrap_err();
    let e = call(
        micro_grad(linreg)
            .batch_argnums([2, 3])
            .microbatch_size(4)
            .call_as(args()),
    );
    assert!(matches!(
        e,
        VmapError::NonDividingMicrobatchSize {
            batch_size: 6,
            microbatch_size: 4
        }
    ));
    let e = call(micro_grad(linreg).batch_argnums([2, 7]).call_as(args()));
    assert!(
        matches!(
            &e,
            VmapError::ArgumentIndex {
                index: 7,
                num_arguments: 4,
                ..
            }
        ),
        "{e}"
    );
    let e = call(
        micro_grad(linreg)
            .argnums(9)
            .batch_argnums([2, 3])
            .call_as(args()),
    );
    assert!(
        matches!(&e, VmapError::ArgumentIndex { index: 9, .. }),
        "{e}"
    );

    // A loss with more than one element.
    let e = call(
        micro_grad(|(w, x): (Tensor<1>, Tensor<3>)| {
            x.matmul(w.unsqueeze_dim::<2>(1).unsqueeze::<3>())
                .reshape([-1])
        })
        .call_as((
            Tensor::<1>::zeros([3], &dev()),
            Tensor::<3>::ones([n, 2, 3], &dev()),
        )),
    );
    assert!(
        matches!(&e, VmapError::LossNotScalar { shape, .. } if shape == &vec![2]),
        "{e}"
    );

    // An int argument cannot be differentiated.
    let e = micro_grad(|(_w, x): (Tensor<1, Int>, Tensor<1>)| x.sum())
        .call_as::<_, _, Tensor<1, Int>, (), ()>((
            Tensor::<1, Int>::zeros([3], &dev()),
            Tensor::<2>::ones([n, 3], &dev()),
        ))
        .unwrap_err();
    assert!(
        matches!(&e, VmapError::NotDifferentiable { kind: "int", .. }),
        "{e}"
    );
}

/// A batched argument differentiated: every example's gradient with respect to its own row,
/// with the unit dim `keep_batch_dim` gave it.
#[test]
fn should_differentiate_a_batched_argument() {
    let (n, d) = (6, 3);
    let xs = matrix(n, d, 60);
    let w = Tensor::<1>::from_floats([1.0, -2.0, 0.5], &dev());
    let loss = |(w, x): (Tensor<1>, Tensor<2>)| (x.clone() * x * w.unsqueeze()).sum();
    for m in [None, Some(2)] {
        let (per, _) = micro_grad(loss)
            .argnums(1)
            .batch_argnums(1)
            .microbatch_size(m)
            .accumulator(Concat)
            .transform_fn(|g: Tensor<2>| g)
            .call((w.clone(), xs.clone()))
            .unwrap();
        let want = xs.clone() * w.clone().unsqueeze::<2>() * 2.0;
        close(per, want.clone().reshape([n, 1, d]));
        let (sum, _) = micro_grad(loss)
            .argnums(1)
            .batch_argnums(1)
            .microbatch_size(m)
            .transform_fn(|g: Tensor<2>| g)
            .call((w.clone(), xs.clone()))
            .unwrap();
        close(sum, want.sum_dim(0));
    }
}
