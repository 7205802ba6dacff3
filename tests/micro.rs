//! `micro_vmap` / `micro_grad` against the loop: stacking `f(x_i)` (or single-example
//! gradients) and reducing by hand, for every accumulator, microbatch size and
//! `num_real_microbatches`; error paths.

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, Tolerance};
use burn_vmap::accumulate::{
    Acc, AccContext, AccKind, Accumulator, Concat, Custom, Mean, RunningMean, Sum,
};
use burn_vmap::testing::TestBackend;
use burn_vmap::tree::Spec;
use burn_vmap::{
    MicroAux, ParamGrads, Vmap, VmapError, micro_grad, micro_grad_module, micro_vmap, vmap,
};
use proptest::prelude::*;

type I = Vmap<TestBackend>;
/// Gradients of two arguments of the same rank.
type Pair<const D: usize> = (Tensor<I, D>, Tensor<I, D>);
type AD = Autodiff<I>;

fn dev() -> burn::tensor::Device<TestBackend> {
    Default::default()
}

fn data(n: usize, d: usize, seed: u64) -> Vec<f32> {
    // A deterministic, irregular sequence.
    (0..n * d)
        .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 250.0) - 2.0)
        .collect()
}

fn close(a: Tensor<I, 2>, b: Tensor<I, 2>) {
    a.into_data()
        .assert_approx_eq::<f32>(&b.into_data(), Tolerance::absolute(1e-5));
}

/// The per-example function of the tests: `tanh(v) * sum(v²)`.
fn f(v: Tensor<I, 1>) -> Tensor<I, 1> {
    let s = (v.clone() * v.clone()).sum();
    v.tanh() * s
}

/// The loop: every row through `f`, stacked: `[B, d]`.
fn looped(xs: &Tensor<I, 2>) -> Tensor<I, 2> {
    let [b, d] = xs.dims();
    let rows: Vec<_> = (0..b)
        .map(|i| f(xs.clone().slice([i..i + 1, 0..d]).reshape([d])).unsqueeze::<2>())
        .collect();
    Tensor::cat(rows, 0)
}

/// Rows of microbatch `k` (strided: k, k+n, ...).
fn rows_of(k: usize, n: usize, m: usize) -> Vec<usize> {
    (0..m).map(|j| k + j * n).collect()
}

fn pick(t: &Tensor<I, 2>, rows: &[usize]) -> Tensor<I, 2> {
    let idx = Tensor::<I, 1, Int>::from_ints(
        rows.iter()
            .map(|&r| r as i32)
            .collect::<Vec<_>>()
            .as_slice(),
        &dev(),
    );
    t.clone().select(0, idx)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Every accumulator, every microbatch size dividing B, every num_real_microbatches.
    #[test]
    fn should_match_the_loop_for_every_accumulator(
        m in 1usize..4, n in 1usize..4, d in 1usize..4, seed in 0u64..100, real_frac in 0usize..5
    ) {
        let b = m * n;
        let xs = Tensor::<I, 1>::from_floats(data(b, d, seed).as_slice(), &dev()).reshape([b, d]);
        let ys = looped(&xs);
        let real = real_frac.min(n);

        // Concat: the original order, zeros in rows not run.
        let got: Tensor<I, 2> = micro_vmap(f).microbatch_size(m).num_real_microbatches(Some(real)).call(xs.clone()).unwrap();
        let mut want = Tensor::<I, 2>::zeros([b, d], &dev());
        for k in 0..real {
            let rows = rows_of(k, n, m);
            for &r in &rows {
                want = want.slice_assign([r..r + 1, 0..d], ys.clone().slice([r..r + 1, 0..d]));
            }
        }
        close(got, want);

        // Sum / Mean (divides by n) / RunningMean (mean of the run ones).
        let mut sum = Tensor::<I, 1>::zeros([d], &dev());
        let mut mean_of_means = Tensor::<I, 1>::zeros([d], &dev());
        for k in 0..real {
            let mb = pick(&ys, &rows_of(k, n, m));
            sum = sum + mb.clone().sum_dim(0).reshape([d]);
            mean_of_means = mean_of_means + mb.mean_dim(0).reshape([d]);
        }
        let s: Tensor<I, 1> = micro_vmap(f).microbatch_size(m).accumulator(Sum).num_real_microbatches(Some(real)).call(xs.clone()).unwrap();
        close(s.unsqueeze(), sum.unsqueeze());
        let mean: Tensor<I, 1> = micro_vmap(f).microbatch_size(m).accumulator(Mean).num_real_microbatches(Some(real)).call(xs.clone()).unwrap();
        close(mean.unsqueeze(), (mean_of_means.clone() / n as f32).unsqueeze());
        let rmean: Tensor<I, 1> = micro_vmap(f).microbatch_size(m).accumulator(RunningMean).num_real_microbatches(Some(real)).call(xs.clone()).unwrap();
        let want_rm = if real == 0 { mean_of_means } else { mean_of_means / real as f32 };
        close(rmean.unsqueeze(), want_rm.unsqueeze());
    }

    /// Without a microbatch size, num_real_microbatches is ignored and every row runs.
    #[test]
    fn should_ignore_num_real_without_microbatch_size(b in 1usize..6, seed in 0u64..100) {
        let xs = Tensor::<I, 1>::from_floats(data(b, 3, seed).as_slice(), &dev()).reshape([b, 3]);
        let got: Tensor<I, 1> = micro_vmap(f).accumulator(Sum).num_real_microbatches(Some(0)).call(xs.clone()).unwrap();
        close(got.unsqueeze(), looped(&xs).sum_dim(0));
    }
}

#[test]
fn should_apply_a_tree_prefix_of_accumulators() {
    let xs = Tensor::<I, 1>::from_floats(data(6, 3, 1).as_slice(), &dev()).reshape([6, 3]);
    // Output: (per-example, (total, square)); accumulate (Concat, Sum) — Sum applies to the pair.
    let g = |v: Tensor<I, 1>| (v.clone() * 2.0, (v.clone().sum(), v.clone() * v));
    type Out = (Tensor<I, 2>, (Tensor<I, 1>, Tensor<I, 1>));
    let (per, (total, sq)): Out = micro_vmap(g)
        .microbatch_size(3)
        .accumulator((Concat, Sum))
        .call(xs.clone())
        .unwrap();
    close(per, xs.clone() * 2.0);
    close(total.unsqueeze(), xs.clone().sum().reshape([1, 1]));
    close(sq.unsqueeze(), (xs.clone() * xs).sum_dim(0));
}

#[test]
fn should_accept_a_spec_of_erased_accumulators() {
    let xs = Tensor::<I, 1>::from_floats(data(4, 2, 2).as_slice(), &dev()).reshape([4, 2]);
    let spec: Spec<Acc<I>> = Spec::Seq(vec![
        Spec::Leaf(Acc::new(Mean)),
        Spec::Leaf(Acc::new(Concat)),
    ]);
    let (m, c): (Tensor<I, 1>, Tensor<I, 2>) = micro_vmap(|v: Tensor<I, 1>| (v.clone(), v))
        .microbatch_size(2)
        .accumulator(spec)
        .call_as(xs.clone())
        .unwrap();
    close(m.unsqueeze(), xs.clone().mean_dim(0));
    close(c, xs);
}

#[derive(Clone)]
struct Max;
impl Accumulator for Max {
    fn name(&self) -> String {
        "max".into()
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows.max_dim(0)
    }
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        Tensor::full(value.shape(), f32::NEG_INFINITY, &value.device())
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        _: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        carry.max_pair(value)
    }
}

#[test]
fn should_run_a_custom_accumulator() {
    let xs = Tensor::<I, 1>::from_floats(data(8, 3, 3).as_slice(), &dev()).reshape([8, 3]);
    for m in [None, Some(1), Some(2), Some(4), Some(8)] {
        let got: Tensor<I, 1> = micro_vmap(f)
            .microbatch_size(m)
            .accumulator(Custom(Max))
            .call_as(xs.clone())
            .unwrap();
        close(got.unsqueeze(), looped(&xs).max_dim(0));
    }
}

/// A custom accumulator that returns the wrong number of rows.
#[derive(Clone)]
struct Broken;
impl Accumulator for Broken {
    fn name(&self) -> String {
        "broken".into()
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows
    }
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        v: &Tensor<B, 2, K>,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        v.zeros_like()
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        c: Tensor<B, 2, K>,
        v: Tensor<B, 2, K>,
        _: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        c + v
    }
}

#[test]
fn should_report_a_custom_accumulator_with_the_wrong_rows() {
    let xs = Tensor::<I, 2>::ones([4, 3], &dev());
    let e = micro_vmap(f)
        .microbatch_size(2)
        .accumulator(Custom(Broken))
        .call_as::<I, I, _, _, _, Tensor<I, 1>>(xs)
        .unwrap_err();
    assert!(
        matches!(&e, VmapError::AccumulatorRows { accumulator, expected: 1, got: 2, .. } if accumulator == "broken"),
        "{e}"
    );
}

#[test]
fn should_keep_int_dtypes_and_promote_means() {
    let xs = Tensor::<I, 2, Int>::from_ints([[1], [2], [3], [4]], &dev());
    let sq = |x: Tensor<I, 1, Int>| x.clone() * x;
    let all: Tensor<I, 2, Int> = micro_vmap(sq).microbatch_size(2).call(xs.clone()).unwrap();
    assert_eq!(
        all.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![1, 4, 9, 16]
    );
    let s: Tensor<I, 1, Int> = micro_vmap(sq)
        .microbatch_size(2)
        .accumulator(Sum)
        .call(xs.clone())
        .unwrap();
    assert_eq!(
        s.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![30]
    );
    // Mean of ints is a float.
    let m: Tensor<I, 1> = micro_vmap(sq)
        .microbatch_size(2)
        .accumulator(Mean)
        .call_as(xs)
        .unwrap();
    assert_eq!(m.into_data().to_vec::<f32>().unwrap(), vec![7.5]);
}

#[test]
fn should_concat_bools() {
    let xs = Tensor::<I, 2>::from_floats([[1.0], [-2.0], [3.0], [-4.0]], &dev());
    let pos: Tensor<I, 2, burn::tensor::Bool> = micro_vmap(|x: Tensor<I, 1>| x.greater_elem(0.0))
        .microbatch_size(2)
        .call(xs)
        .unwrap();
    assert_eq!(
        pos.into_data().convert::<bool>().to_vec::<bool>().unwrap(),
        vec![true, false, true, false]
    );
}

#[test]
fn should_map_other_axes_and_pass_unmapped_arguments() {
    // xs batched on axis 1, w shared.
    let xs = Tensor::<I, 1>::from_floats(data(4, 3, 4).as_slice(), &dev()).reshape([3, 4]);
    let w = Tensor::<I, 1>::from_floats(data(3, 2, 5).as_slice(), &dev()).reshape([3, 2]);
    let g = |(v, w): (Tensor<I, 1>, Tensor<I, 2>)| v.unsqueeze::<2>().matmul(w).reshape([2]).tanh();
    let want: Tensor<I, 2> = vmap(g)
        .in_axes([Some(1), None])
        .call((xs.clone(), w.clone()))
        .unwrap();
    for m in [None, Some(1), Some(2), Some(4)] {
        let got: Tensor<I, 2> = micro_vmap(g)
            .in_axes([Some(1), None])
            .microbatch_size(m)
            .call((xs.clone(), w.clone()))
            .unwrap();
        close(got, want.clone());
    }
}

#[test]
fn should_handle_an_empty_batch() {
    let xs = Tensor::<I, 2>::zeros([0, 3], &dev());
    let c: Tensor<I, 2> = micro_vmap(f).microbatch_size(2).call(xs.clone()).unwrap();
    assert_eq!(c.dims(), [0, 3]);
    let s: Tensor<I, 1> = micro_vmap(f)
        .microbatch_size(2)
        .accumulator(Sum)
        .call(xs.clone())
        .unwrap();
    assert_eq!(s.into_data().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    let s: Tensor<I, 1> = micro_vmap(f).accumulator(Sum).call(xs).unwrap();
    assert_eq!(s.into_data().to_vec::<f32>().unwrap(), vec![0.0; 3]);
}

#[test]
fn should_run_inside_an_outer_vmap() {
    // vmap over groups, micro_vmap (Sum) over the examples of each group.
    let xs = Tensor::<I, 1>::from_floats(data(12, 2, 6).as_slice(), &dev()).reshape([3, 4, 2]);
    let inner = |g: Tensor<I, 2>| -> Tensor<I, 1> {
        micro_vmap(f)
            .microbatch_size(2)
            .accumulator(Sum)
            .call(g)
            .unwrap()
    };
    let got: Tensor<I, 2> = vmap(inner).call(xs.clone()).unwrap();
    for i in 0..3 {
        let group = xs.clone().slice([i..i + 1, 0..4, 0..2]).reshape([4, 2]);
        close(
            got.clone().slice([i..i + 1, 0..2]),
            looped(&group).sum_dim(0),
        );
    }
}

#[test]
fn should_return_typed_errors() {
    let xs = Tensor::<I, 2>::ones([6, 3], &dev());
    let e = micro_vmap(f)
        .microbatch_size(4)
        .call_as::<I, I, _, _, _, Tensor<I, 2>>(xs.clone())
        .unwrap_err();
    assert_eq!(
        e,
        VmapError::NonDividingMicrobatchSize {
            batch_size: 6,
            microbatch_size: 4
        }
    );
    assert!(e.to_string().contains("6") && e.to_string().contains("4"));

    let e = micro_vmap(f)
        .microbatch_size(0)
        .call_as::<I, I, _, _, _, Tensor<I, 2>>(xs.clone())
        .unwrap_err();
    assert!(matches!(
        e,
        VmapError::NonDividingMicrobatchSize {
            microbatch_size: 0,
            ..
        }
    ));

    let e = micro_vmap(f)
        .microbatch_size(3)
        .num_real_microbatches(Some(3))
        .call_as::<I, I, _, _, _, Tensor<I, 2>>(xs.clone())
        .unwrap_err();
    assert_eq!(
        e,
        VmapError::NumRealMicrobatchesOutOfRange {
            num_real_microbatches: 3,
            num_microbatches: 2
        }
    );

    let Err(e) = micro_vmap(f).out_axes(1) else {
        panic!("out_axes 1 must be rejected")
    };
    assert!(matches!(e, VmapError::UnsupportedOutAxes { .. }), "{e}");
    assert!(micro_vmap(f).out_axes(0).is_ok());

    let e = micro_vmap(|(a, b): (Tensor<I, 1>, Tensor<I, 1>)| a + b)
        .microbatch_size(2)
        .call_as::<I, I, _, _, _, Tensor<I, 2>>((xs.clone(), Tensor::<I, 2>::ones([4, 3], &dev())))
        .unwrap_err();
    assert!(
        matches!(&e, VmapError::InconsistentBatchSizes { arguments } if arguments.len() == 2),
        "{e}"
    );

    // An accumulator tree that does not fit the output names the path.
    let e = micro_vmap(f)
        .accumulator((Sum, Sum))
        .call_as::<I, I, _, _, _, Tensor<I, 1>>(xs)
        .unwrap_err();
    assert!(
        matches!(&e, VmapError::TreeMismatch { what, .. } if what == "accumulator"),
        "{e}"
    );
}

// ---- micro_grad ---------------------------------------------------------------------------------

/// `0.5 (x·w + b − y)²` per example, with X `[1, 3]` under keep_batch_dim.
fn linreg(
    (w, b, x, y): (Tensor<AD, 1>, Tensor<AD, 1>, Tensor<AD, 2>, Tensor<AD, 1>),
) -> Tensor<AD, 1> {
    let pred = x.matmul(w.unsqueeze_dim(1)).reshape([-1]) + b;
    let d = pred - y;
    (d.clone() * d).mean() * 0.5
}

/// Single-example gradients by a loop of backward passes on the plain backend: `[B, 3]`, `[B, 1]`.
fn loop_grads(w: &[f32], b: f32, x: &[f32], y: &[f32]) -> (Vec<f32>, Vec<f32>) {
    type P = Autodiff<TestBackend>;
    let n = y.len();
    let (mut gw, mut gb) = (Vec::new(), Vec::new());
    for i in 0..n {
        let wt = Tensor::<P, 1>::from_floats(w, &dev()).require_grad();
        let bt = Tensor::<P, 1>::from_floats([b], &dev()).require_grad();
        let xt = Tensor::<P, 1>::from_floats(&x[i * 3..i * 3 + 3], &dev());
        let d = (xt * wt.clone()).sum() + bt.clone() - y[i];
        let loss = (d.clone() * d) * 0.5;
        let g = loss.backward();
        gw.extend(wt.grad(&g).unwrap().into_data().to_vec::<f32>().unwrap());
        gb.extend(bt.grad(&g).unwrap().into_data().to_vec::<f32>().unwrap());
    }
    (gw, gb)
}

#[test]
fn should_give_per_example_gradients_of_several_arguments() {
    let (n, w, b) = (8, data(1, 3, 7), 0.3f32);
    let x = data(n, 3, 8);
    let y = data(n, 1, 9);
    let (gw, gb) = loop_grads(&w, b, &x, &y);
    let args = || {
        (
            Tensor::<AD, 1>::from_floats(w.as_slice(), &dev()),
            Tensor::<AD, 1>::from_floats([b], &dev()),
            Tensor::<AD, 1>::from_floats(x.as_slice(), &dev()).reshape([n, 3]),
            Tensor::<AD, 1>::from_floats(y.as_slice(), &dev()),
        )
    };
    for m in [None, Some(1), Some(2), Some(4), Some(8)] {
        let ((pw, pb), aux): (Pair<2>, MicroAux<I, (), ()>) = micro_grad(linreg)
            .argnums([0, 1])
            .batch_argnums([2, 3])
            .microbatch_size(m)
            .accumulator(Concat)
            .call_as(args())
            .unwrap();
        pw.into_data().assert_approx_eq::<f32>(
            &TensorData::new(gw.clone(), [n, 3]),
            Tolerance::absolute(1e-5),
        );
        pb.into_data().assert_approx_eq::<f32>(
            &TensorData::new(gb.clone(), [n, 1]),
            Tolerance::absolute(1e-5),
        );
        assert_eq!(aux.values.dims(), [n]);

        // Sum with a transform and metrics: sum of clipped gradients, raw norms.
        let ((sw, _sb), aux): (Pair<1>, MicroAux<I, Tensor<I, 2>, ()>) = micro_grad(linreg)
            .argnums([0, 1])
            .batch_argnums([2, 3])
            .microbatch_size(m)
            .transform_fn(|g: (Tensor<I, 1>, Tensor<I, 1>)| burn_vmap::clip_by_global_norm(g, 0.5))
            .metrics_fn(|g: (Tensor<I, 1>, Tensor<I, 1>)| burn_vmap::global_norm(&g))
            .call(args())
            .unwrap();
        let mut want = [0.0f32; 3];
        for i in 0..n {
            let norm =
                (gw[i * 3..i * 3 + 3].iter().map(|v| v * v).sum::<f32>() + gb[i] * gb[i]).sqrt();
            let s = 0.5 / norm.max(0.5);
            for j in 0..3 {
                want[j] += gw[i * 3 + j] * s;
            }
            let got_norm = aux.metrics.clone().slice([i..i + 1, 0..1]).into_scalar();
            assert!((got_norm - norm).abs() < 1e-4, "{got_norm} vs {norm}");
        }
        sw.into_data().assert_approx_eq::<f32>(
            &TensorData::new(want.to_vec(), [3]),
            Tolerance::absolute(1e-5),
        );
    }
}

#[test]
fn should_return_aux_and_see_the_bare_example_without_keep_batch_dim() {
    let n = 4;
    let x = Tensor::<AD, 1>::from_floats(data(n, 3, 11).as_slice(), &dev()).reshape([n, 3]);
    let w = Tensor::<AD, 1>::from_floats([0.5, -1.0, 2.0], &dev());
    // Without keep_batch_dim the function sees x as [3]; with it, [1, 3].
    let loss_bare = |(w, x): (Tensor<AD, 1>, Tensor<AD, 1>)| {
        let p = (x * w).sum();
        (p.clone(), p)
    };
    let (g, aux): (Tensor<I, 1>, MicroAux<I, (), Tensor<I, 2>>) = micro_grad(loss_bare)
        .keep_batch_dim(false)
        .call((w.clone(), x.clone()))
        .unwrap();
    // d/dw sum_i x_i·w = sum_i x_i
    close(g.clone().unsqueeze(), x.clone().inner().sum_dim(0));
    close(aux.aux.reshape([n, 1]), aux.values.clone().reshape([n, 1]));

    let loss_kept = |(w, x): (Tensor<AD, 1>, Tensor<AD, 2>)| x.matmul(w.unsqueeze_dim(1)).sum();
    let (g2, _): (Tensor<I, 1>, MicroAux<I, (), ()>) = micro_grad(loss_kept).call((w, x)).unwrap();
    close(g.unsqueeze(), g2.unsqueeze());
}

#[test]
fn should_return_micro_grad_errors() {
    let n = 6;
    let args = || {
        (
            Tensor::<AD, 1>::zeros([3], &dev()),
            Tensor::<AD, 1>::zeros([1], &dev()),
            Tensor::<AD, 2>::ones([n, 3], &dev()),
            Tensor::<AD, 1>::ones([n], &dev()),
        )
    };
    let call = |mg: burn_vmap::transform::micro::MicroGrad<_, _>| -> VmapError {
        mg.call_as::<AD, _, _, _, Tensor<I, 1>, (), ()>(args())
            .unwrap_err()
    };
    let e = call(micro_grad(linreg).batch_argnums([2, 3]).microbatch_size(4));
    assert!(matches!(
        e,
        VmapError::NonDividingMicrobatchSize {
            batch_size: 6,
            microbatch_size: 4
        }
    ));
    let e = call(micro_grad(linreg).batch_argnums([2, 7]));
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
    let e = call(micro_grad(linreg).argnums(9).batch_argnums([2, 3]));
    assert!(
        matches!(&e, VmapError::ArgumentIndex { index: 9, .. }),
        "{e}"
    );

    // A loss with more than one element.
    let e = micro_grad(|(w, x): (Tensor<AD, 1>, Tensor<AD, 3>)| {
        x.matmul(w.unsqueeze_dim::<2>(1).unsqueeze::<3>())
            .reshape([-1])
    })
    .call_as::<AD, _, _, _, Tensor<I, 1>, (), ()>((
        Tensor::<AD, 1>::zeros([3], &dev()),
        Tensor::<AD, 3>::ones([n, 2, 3], &dev()),
    ))
    .unwrap_err();
    assert!(
        matches!(&e, VmapError::LossNotScalar { shape } if shape == &vec![2]),
        "{e}"
    );

    // An int argument cannot be differentiated.
    let e = micro_grad(|(_w, x): (Tensor<AD, 1, Int>, Tensor<AD, 1>)| x.sum())
        .call_as::<AD, _, _, _, Tensor<I, 1, Int>, (), ()>((
            Tensor::<AD, 1, Int>::zeros([3], &dev()),
            Tensor::<AD, 2>::ones([n, 3], &dev()),
        ))
        .unwrap_err();
    assert!(
        matches!(&e, VmapError::NotDifferentiable { kind: "int", .. }),
        "{e}"
    );
}

#[derive(Module, Debug)]
struct Net<B: Backend> {
    a: Linear<B>,
    b: Linear<B>,
}

impl<B: Backend> Net<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.b.forward(self.a.forward(x).tanh())
    }
}

#[test]
fn should_give_module_gradients_equal_to_the_loop() {
    let n = 6;
    let net: Net<AD> = Net {
        a: LinearConfig::new(4, 5).init(&dev()),
        b: LinearConfig::new(5, 2).init(&dev()),
    };
    let xv = data(n, 4, 12);
    let yv = data(n, 2, 13);
    let x = Tensor::<AD, 1>::from_floats(xv.as_slice(), &dev()).reshape([n, 4]);
    let y = Tensor::<AD, 1>::from_floats(yv.as_slice(), &dev()).reshape([n, 2]);
    let loss = |m: &Net<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 2>)| {
        (m.forward(x) - y).powi_scalar(2).mean()
    };
    let (per, _): (ParamGrads<I>, MicroAux<I, (), ()>) = micro_grad_module(loss)
        .microbatch_size(3)
        .accumulator(Concat)
        .call(&net, (x.clone(), y.clone()))
        .unwrap();
    let (sum, _): (ParamGrads<I>, MicroAux<I, (), ()>) = micro_grad_module(loss)
        .microbatch_size(2)
        .call(&net, (x.clone(), y.clone()))
        .unwrap();
    for i in 0..n {
        let xi = x.clone().slice([i..i + 1, 0..4]);
        let yi = y.clone().slice([i..i + 1, 0..2]);
        let mut g = loss(&net, (xi, yi)).backward();
        let single = ParamGrads::<I>::from_module::<AD, _>(&mut g, &net);
        for path in single.paths() {
            let rank = if path.ends_with("weight") { 2 } else { 1 };
            if rank == 2 {
                let want: Tensor<I, 2> = single.get(path).unwrap();
                let got: Tensor<I, 3> = per.get(path).unwrap();
                let [_, r, c] = got.dims();
                close(got.slice([i..i + 1, 0..r, 0..c]).reshape([r, c]), want);
            } else {
                let want: Tensor<I, 1> = single.get(path).unwrap();
                let got: Tensor<I, 2> = per.get(path).unwrap();
                let c = got.dims()[1];
                close(got.slice([i..i + 1, 0..c]), want.unsqueeze());
            }
        }
    }
    // Sum = the per-example gradients summed.
    let summed = per.sum_batch();
    for path in ["a.bias", "b.bias"] {
        let a: Tensor<I, 1> = summed.get(path).unwrap();
        let b: Tensor<I, 1> = sum.get(path).unwrap();
        close(a.unsqueeze(), b.unsqueeze());
    }
    // And it feeds an optimizer.
    let _ = sum.into_gradients_params();
}

#[test]
fn should_give_the_same_result_with_every_vectorizer() {
    let xs = Tensor::<I, 1>::from_floats(data(12, 3, 21).as_slice(), &dev()).reshape([12, 3]);
    for m in [None, Some(3), Some(6)] {
        let plain: Tensor<I, 2> = micro_vmap(f).microbatch_size(m).call(xs.clone()).unwrap();
        for chunk in [1, 2, 5, 100] {
            let chunked: Tensor<I, 2> = micro_vmap(f)
                .microbatch_size(m)
                .vmap_fn(burn_vmap::transform::micro::ChunkedVmapFn::new(chunk).unwrap())
                .call(xs.clone())
                .unwrap();
            close(chunked, plain.clone());
        }
        let same: Tensor<I, 2> = micro_vmap(f)
            .microbatch_size(m)
            .vmap_fn(burn_vmap::Randomness::Same)
            .call(xs.clone())
            .unwrap();
        close(same, plain);
    }
    assert!(matches!(
        burn_vmap::transform::micro::ChunkedVmapFn::new(0),
        Err(VmapError::ChunkSizeNotPositive { .. })
    ));
}
