//! Per-example gradients against the loop: `per_example_grads` of an unmodified Burn 0.22
//! module (one weight `w: [k, n]`) must give, for every example, the gradient Burn's own
//! backward computes for that example alone.
//!
//! Each case is a loss `l(x, w, i)` of one example `x: [m, k]` and an index vector `i: [m]`
//! (values in `0..n`), written once as plain Burn code; proptest draws the sizes, the values
//! and whether the indices are shared (every example the same) or per example. One loss nests a
//! `vmap` (its loop runs the same function written without it).

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::activation;
use burn::tensor::module::linear;
use burn::tensor::{Int, Tensor};
use burn_vmap::{per_example_grads, vmap};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

use crate::harness::{Gen, Rng};
use crate::host::{Host, TOL, diff};

/// A loss of one example.
type Loss = fn(Tensor<2>, Tensor<2>, Tensor<1, Int>) -> Tensor<1>;

fn loss_matmul_tanh(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    x.matmul(w).tanh().sum()
}

/// exp, log1p, sqrt, div, powf_scalar, mul, sub, abs.
fn loss_elementwise(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    let y = x.clone().matmul(w.clone());
    let a = (y.clone().exp() + 1.0).log1p().sqrt();
    let b = (y.clone() * y.clone() + 1.0).recip() - y.abs().powf_scalar(1.5);
    (a + b).mean() + w.powf_scalar(2.0).sum().mul_scalar(0.1) + x.sin().sum()
}

fn loss_softmax_slice(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    let y = activation::softmax(x.matmul(w), 1);
    let [m, n] = y.dims();
    let top = y.clone().slice([0..m, 0..n.div_ceil(2)]);
    let z = Tensor::cat(vec![top, y.clone()], 1);
    z.powf_scalar(2.0).sum() + activation::log_softmax(y, 0).mean()
}

fn loss_select_gather(x: Tensor<2>, w: Tensor<2>, i: Tensor<1, Int>) -> Tensor<1> {
    let y = x.matmul(w); // [m, n]
    let picked = y.clone().gather(1, i.clone().unsqueeze_dim::<2>(1)); // [m, 1]
    let rows = y.clone().swap_dims(0, 1).select(0, i); // [m', m]
    (picked.exp().sum() + rows.tanh().sum()).mul_scalar(0.5) + y.sum_dim(0).cumsum(1).sum()
}

/// Zeros created inside the recording, updated with batched values at batched indices.
pub(crate) fn loss_scatter_mask(x: Tensor<2>, w: Tensor<2>, i: Tensor<1, Int>) -> Tensor<1> {
    use burn::tensor::IndexingUpdateOp::Add;
    let y = x.clone().matmul(w); // [m, n]
    let [m, n] = y.dims();
    let k = x.dims()[1];
    let device = x.device();
    let sel = Tensor::<2>::zeros([n, k], &device).select_assign(0, i.clone(), x.clone(), Add);
    let sc = Tensor::<2>::zeros([m, n], &device).scatter(
        1,
        i.unsqueeze_dim::<2>(1),
        y.clone().slice([0..m, 0..1]),
        Add,
    );
    let masked = y
        .clone()
        .mask_where(y.clone().lower_elem(0.0), y.clone().mul_scalar(0.1));
    sel.powf_scalar(2.0).sum()
        + sc.exp().sum()
        + masked.sum()
        + x.max_dim(1).sum()
        + y.flip([0]).reshape([-1]).cumsum(0).mean()
}

/// `linear` with a bias derived from `w`, at input ranks 1, 2 and 3.
fn loss_linear(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    let bias = w.clone().sum_dim(0).squeeze_dim::<1>(0).mul_scalar(0.5);
    let y = linear(x.clone(), w.clone(), Some(bias));
    let row = x.clone().sum_dim(0).squeeze_dim::<1>(0);
    let y1 = linear(row.tanh(), w.clone(), None); // [n]
    let y3 = linear(x.unsqueeze_dim::<3>(0), w, Some(y1.clone().exp())); // [1, m, n]
    (y.clone() * y.sin()).sum() + y1.powf_scalar(2.0).sum() + (y3.clone() * y3.cos()).mean()
}

fn loss_activations(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    let y = x.matmul(w.clone()); // [m, n]
    let a = activation::relu(y.clone()) + activation::gelu(y.clone()) * 0.5;
    let b = activation::sigmoid(y.clone()) + activation::log_sigmoid(y.clone() * 2.0);
    let c = activation::leaky_relu(y.clone(), 0.1) + activation::hard_sigmoid(y, 0.3, 0.5);
    (a * b + c).sum() + activation::relu(w).sum() * 0.25
}

/// [`loss_nested_vmap`] without the `vmap`.
fn loss_nested_plain(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    let rows = x.matmul(w).tanh();
    (rows.clone() * rows).sum()
}

/// A `vmap` inside the recorded loss: the rows of `x` mapped, `w` shared.
fn loss_nested_vmap(x: Tensor<2>, w: Tensor<2>, _i: Tensor<1, Int>) -> Tensor<1> {
    let rows: Tensor<2> = vmap(|(r, w): (Tensor<1>, Tensor<2>)| {
        r.unsqueeze::<2>().matmul(w).squeeze_dim::<1>(0).tanh()
    })
    .in_axes([Some(0), None])
    .call((x, w))
    .unwrap_or_else(|e| panic!("{e}"));
    (rows.clone() * rows).sum()
}

const CASES: &[(&str, Loss)] = &[
    ("grad_matmul_tanh", loss_matmul_tanh),
    ("grad_elementwise", loss_elementwise),
    ("grad_softmax_slice_cat", loss_softmax_slice),
    ("grad_select_gather", loss_select_gather),
    ("grad_scatter_mask", loss_scatter_mask),
    ("grad_linear", loss_linear),
    ("grad_activations", loss_activations),
];

#[derive(Module, Debug)]
struct Weight {
    w: Param<Tensor<2>>,
}

/// One configuration: sizes `[m, k, n]`, a batch of 1..=3 examples, shared or per-example
/// indices.
fn check(name: &str, loss: Loss, p: [usize; 3], seed: u64) -> Result<(), String> {
    check_against(name, loss, loss, p, seed)
}

/// [`check`] with the loop running `reference` (the same function, written without a `vmap`:
/// a `vmap`'s results leave Burn's autodiff graph, so the loop cannot differentiate through
/// one).
fn check_against(
    name: &str,
    loss: Loss,
    reference: Loss,
    [m, k, n]: [usize; 3],
    seed: u64,
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let batch = 1 + rng.below(3);
    let shared = rng.coin();
    let w = Host::r#gen(&[k, n], &Gen::F(-1.0, 1.0), &mut rng);
    let model = Weight {
        w: Param::from_tensor(w.to_t().f::<2>()),
    };
    let xs = Host::r#gen(&[batch, m, k], &Gen::F(-1.0, 1.0), &mut rng);
    let mut is = Host::r#gen(&[batch, m], &Gen::I(0, n as i64 - 1), &mut rng);
    if shared {
        let first = is.take(0, 0);
        let parts = vec![first.clone(); batch];
        is = Host::stack(&parts, 0, &first);
    }
    let (xt, it) = (xs.to_t().f::<3>(), is.to_t().i::<2>());
    let f = |m: &Weight, (x, i): (Tensor<2>, Tensor<1, Int>)| loss(x, m.w.val(), i);
    let grads = crate::harness::quietly(|| per_example_grads(&model, (xt, it), f))
        .map_err(|msg| format!("{name}: per_example_grads panicked: {msg}"))?
        .map_err(|e| format!("{name}: per_example_grads failed: {e}"))?;
    let got = Host::from_t(crate::harness::T(grads.iter().next().expect("w").2.clone()));
    let parts: Vec<Host> = (0..batch)
        .map(|b| {
            let trained = model.clone().train();
            let (x, i) = (xs.take(0, b).to_t().f::<2>(), is.take(0, b).to_t().i::<1>());
            let l = reference(x, trained.w.val(), i);
            let g = GradientsParams::from_grads(l.backward(), &trained);
            let g: Tensor<2> = g.get(trained.w.id).expect("a gradient of w");
            Host::from_t(crate::harness::T::from(g))
        })
        .collect();
    let expected = Host::stack(&parts, 0, &parts[0]);
    match diff(&expected, &got, TOL) {
        None => Ok(()),
        Some(d) => Err(format!(
            "{name}: dl/dw: {d} (m {m}, k {k}, n {n}, batch {batch}, shared indices {shared})"
        )),
    }
}

#[test]
fn oracle_per_example_grads() {
    let mut failures = Vec::new();
    let filter = std::env::var("ORACLE_FILTER").ok();
    for (name, loss) in CASES {
        if let Some(f) = &filter
            && !name.contains(f.as_str())
        {
            continue;
        }
        if crate::run::FUSED
            && let Some((_, why)) = crate::run::FUSION_SKIPS.iter().find(|(n, _)| n == name)
        {
            println!("oracle: {name} skipped under fusion: {why}");
            continue;
        }
        let mut config = Config::with_cases(2 * crate::run::num_cases());
        config.failure_persistence = None;
        config.max_shrink_iters = 128;
        let mut runner = crate::run::runner(config);
        let strategy = ([1usize..=3, 1usize..=3, 1usize..=3], any::<u64>());
        if let Err(e) = runner.run(&strategy, |(p, seed)| {
            check(name, *loss, p, seed).map_err(TestCaseError::fail)
        }) {
            failures.push(format!("[{name}] {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} gradient cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A `vmap` inside a loss recorded for gradients (its arguments are autodiff tensors of the
/// capture device), and a `vmap` nested in a `vmap` of autodiff arguments.
#[test]
fn per_example_grads_of_a_loss_with_a_vmap_inside() {
    let mut config = Config::with_cases(crate::run::num_cases());
    config.failure_persistence = None;
    let strategy = ([1usize..=3, 1usize..=3, 1usize..=3], any::<u64>());
    crate::run::runner(config)
        .run(&strategy, |(p, seed)| {
            check_against(
                "grad_nested_vmap",
                loss_nested_vmap,
                loss_nested_plain,
                p,
                seed,
            )
            .map_err(TestCaseError::fail)
        })
        .unwrap();
    let xs = Tensor::<3>::ones([2, 3, 4], &burn::tensor::Device::default().autodiff());
    let out: Tensor<3> = vmap(|x: Tensor<2>| -> Tensor<2> {
        vmap(|r: Tensor<1>| r.tanh())
            .call(x)
            .unwrap_or_else(|e| panic!("{e}"))
    })
    .call(xs)
    .unwrap();
    let got = Host::from_t(crate::harness::T::from(out));
    let want = Host {
        shape: vec![2, 3, 4],
        data: crate::host::Data::F(vec![1f64.tanh(); 24]),
    };
    assert_eq!(diff(&want, &got, TOL), None);
}
