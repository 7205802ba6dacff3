//! Per-example gradients: `backward()` inside `vmap` on `Autodiff<Vmap<TestBackend>>` must give,
//! for every example, the gradients of a single-example backward pass on
//! `Autodiff<TestBackend>`.
//!
//! Each case is a loss `l(x, w, i)` of one example `x: [m, k]`, a weight `w: [k, n]` and an
//! index vector `i: [m]` (values in `0..n`), written once, generic over the backend. The
//! weight is either an unbatched parameter captured by the closure (created with
//! `require_grad()` outside `vmap`: its gradient comes out per-example) or a mapped argument
//! made `require_grad()` inside; `x` is always mapped and made `require_grad()` inside; `i` is
//! mapped or shared. One or two vmap levels.

use burn::backend::Autodiff;
use burn::tensor::activation;
use burn::tensor::backend::Backend;
use burn::tensor::module::linear;
use burn::tensor::{Int, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::harness::{
    Gen, Host, Operand, Rng, T, TOL, V, diff, make_inputs, make_levels, oracle, quietly, vmapped_b,
};

type AD = Autodiff<V>;
type AdLoop = Autodiff<burn_vmap::testing::TestBackend>;

/// A loss of one example.
type Loss<B> = fn(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1, Int>) -> Tensor<B, 1>;

fn loss_matmul_tanh<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    _i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    x.matmul(w).tanh().sum()
}

fn loss_elementwise<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    _i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    // exp, log1p, sqrt, div, powf_scalar, mul, sub, abs.
    let y = x.clone().matmul(w.clone());
    let a = (y.clone().exp() + 1.0).log1p().sqrt();
    let b = (y.clone() * y.clone() + 1.0).recip() - y.abs().powf_scalar(1.5);
    (a + b).mean() + w.powf_scalar(2.0).sum().mul_scalar(0.1) + x.sin().sum()
}

fn loss_softmax_slice<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    _i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let y = activation::softmax(x.matmul(w), 1);
    let [m, n] = y.dims();
    let top = y.clone().slice([0..m, 0..n.div_ceil(2)]);
    let z = Tensor::cat(vec![top, y.clone()], 1);
    z.powf_scalar(2.0).sum() + activation::log_softmax(y, 0).mean()
}

fn loss_select_gather<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let y = x.matmul(w); // [m, n]
    let picked = y.clone().gather(1, i.clone().unsqueeze_dim::<2>(1)); // [m, 1]
    let rows = y.clone().swap_dims(0, 1).select(0, i.clone()); // [m', m]
    (picked.exp().sum() + rows.tanh().sum()).mul_scalar(0.5) + y.sum_dim(0).cumsum(1).sum()
}

fn loss_scatter_mask<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    use burn::tensor::IndexingUpdateOp::Add;
    let y = x.clone().matmul(w); // [m, n]
    let [m, n] = y.dims();
    let k = x.dims()[1];
    let device = x.device();
    // Unbatched zeros created inside vmap, updated with batched values at (maybe batched) indices.
    let sel = Tensor::<B, 2>::zeros([n, k], &device).select_assign(0, i.clone(), x.clone(), Add);
    let sc = Tensor::<B, 2>::zeros([m, n], &device).scatter(
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

/// Burn's `linear` module op (x rank 2) with a bias derived from `w`: the fold-into-rows rule
/// with a captured `w`, the matmul rules with a mapped one, and its three backward ops.
fn loss_linear<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    _i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let bias = w.clone().sum_dim(0).squeeze_dim::<1>(0).mul_scalar(0.5);
    let y = linear(x, w, Some(bias));
    (y.clone() * y.sin()).sum()
}

/// `linear` of a rank-1 input (Burn inserts and removes a leading size-1 dim: pending
/// reshapes) and of a rank-3 input.
fn loss_linear_ranks<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    _i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let row = x.clone().sum_dim(0).squeeze_dim::<1>(0); // [k]
    let y1 = linear(row.tanh(), w.clone(), None); // [n]
    let y3 = linear(x.unsqueeze_dim::<3>(0), w.clone(), Some(y1.clone().exp())); // [1, m, n]
    y1.powf_scalar(2.0).sum() + (y3.clone() * y3.cos()).mean()
}

/// The activations with backward ops of their own (relu, gelu, sigmoid, log_sigmoid) and the
/// elementwise ones (leaky_relu, hard_sigmoid), with a captured `w` mixing batched and unbatched
/// operands in the backward ops.
fn loss_activations<B: Backend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    _i: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let y = x.matmul(w.clone()); // [m, n]
    let a = activation::relu(y.clone()) + activation::gelu(y.clone()) * 0.5;
    let b = activation::sigmoid(y.clone()) + activation::log_sigmoid(y.clone() * 2.0);
    let c = activation::leaky_relu(y.clone(), 0.1) + activation::hard_sigmoid(y, 0.3, 0.5);
    (a * b + c).sum() + activation::relu(w).sum() * 0.25
}

struct GradCase {
    name: &'static str,
    loss_v: Loss<AD>,
    loss_l: Loss<AdLoop>,
}

fn grad_cases() -> Vec<GradCase> {
    vec![
        GradCase {
            name: "grad_matmul_tanh",
            loss_v: loss_matmul_tanh::<AD>,
            loss_l: loss_matmul_tanh::<AdLoop>,
        },
        GradCase {
            name: "grad_elementwise",
            loss_v: loss_elementwise::<AD>,
            loss_l: loss_elementwise::<AdLoop>,
        },
        GradCase {
            name: "grad_softmax_slice_cat",
            loss_v: loss_softmax_slice::<AD>,
            loss_l: loss_softmax_slice::<AdLoop>,
        },
        GradCase {
            name: "grad_select_gather",
            loss_v: loss_select_gather::<AD>,
            loss_l: loss_select_gather::<AdLoop>,
        },
        GradCase {
            name: "grad_linear",
            loss_v: loss_linear::<AD>,
            loss_l: loss_linear::<AdLoop>,
        },
        GradCase {
            name: "grad_linear_ranks",
            loss_v: loss_linear_ranks::<AD>,
            loss_l: loss_linear_ranks::<AdLoop>,
        },
        GradCase {
            name: "grad_activations",
            loss_v: loss_activations::<AD>,
            loss_l: loss_activations::<AdLoop>,
        },
        GradCase {
            name: "grad_scatter_mask",
            loss_v: loss_scatter_mask::<AD>,
            loss_l: loss_scatter_mask::<AdLoop>,
        },
    ]
}

/// Single-example gradients `(dl/dw, dl/dx)` on `Autodiff<TestBackend>`.
fn single(loss: Loss<AdLoop>, x: &Host, w: &Host, i: &Host) -> (Host, Host) {
    let x = x.to_tb::<AdLoop>().f::<2>().require_grad();
    let w = w.to_tb::<AdLoop>().f::<2>().require_grad();
    let i = i.to_tb::<AdLoop>().i::<1>();
    let g = loss(x.clone(), w.clone(), i).backward();
    (
        Host::from_t(T::from(w.grad(&g).unwrap())),
        Host::from_t(T::from(x.grad(&g).unwrap())),
    )
}

/// One configuration: operands `[x, i, w]`; `w_mapped` says whether `w` is mapped at any level
/// (else it is captured).
fn check_config(case: &GradCase, p: &[usize; 3], seed: u64) -> Result<(), String> {
    let [m, k, n] = *p;
    let mut rng = Rng::new(seed);
    let operands = vec![
        Operand {
            shape: vec![m, k],
            r#gen: Gen::F(-1.0, 1.0),
        },
        Operand {
            shape: vec![m],
            r#gen: Gen::I(0, n as i64 - 1),
        },
        Operand {
            shape: vec![k, n],
            r#gen: Gen::F(-1.0, 1.0),
        },
    ];
    let nlevels = 1 + rng.below(2);
    let w_mapped = rng.coin();
    // x mapped at every level; i and w at random levels (w at none when captured).
    let mapped: Vec<Vec<bool>> = (0..nlevels)
        .map(|_| vec![true, rng.coin(), w_mapped && rng.coin()])
        .collect();
    let sizes: Vec<usize> = (0..nlevels).map(|_| 1 + rng.below(3)).collect();
    let levels = make_levels(&mut rng, &[2, 1, 2], &[2, 2], &mapped, &sizes);
    let inputs = make_inputs(&mut rng, &operands, &levels);
    let w_is_mapped = mapped.iter().any(|l| l[2]);

    // Oracle: the loop of single-example backward passes.
    let loss_l = case.loss_l;
    let f_loop = move |a: Vec<T>| {
        let (gw, gx) = single(
            loss_l,
            &Host::from_t(a[0].clone()),
            &Host::from_t(a[2].clone()),
            &Host::from_t(a[1].clone()),
        );
        vec![gw.to_t(), gx.to_t()]
    };
    let out_example = vec![
        Host::zeros_like(&[k, n], crate::harness::K::F),
        Host::zeros_like(&[m, k], crate::harness::K::F),
    ];
    let expected = oracle(&f_loop, &inputs, &levels, &out_example);

    // vmap on Autodiff<Vmap<_>>: w captured (created outside, require_grad) or mapped.
    let w_captured = (!w_is_mapped).then(|| inputs[2].to_tb::<AD>().f::<2>().require_grad());
    let loss_v = case.loss_v;
    let body = |a: Vec<T<AD>>| -> Vec<T<V>> {
        let x = a[0].f::<2>().require_grad();
        let i = a[1].i::<1>();
        let w = match &w_captured {
            Some(w) => w.clone(),
            None => a[2].f::<2>().require_grad(),
        };
        let g = loss_v(x.clone(), w.clone(), i).backward();
        vec![
            T::from(w.grad(&g).expect("no grad for w")),
            T::from(x.grad(&g).expect("no grad for x")),
        ]
    };
    // A captured w is passed along unmapped (in_axes None) and ignored by the body.
    let args: Vec<T<AD>> = inputs.iter().map(|h| h.to_tb::<AD>()).collect();
    let got = match quietly(|| vmapped_b::<AD, V>(&body, args, &levels)) {
        Ok(Ok(outs)) => outs.into_iter().map(Host::from_t).collect::<Vec<_>>(),
        Ok(Err(e)) => return Err(format!("{}: vmap error {e}", case.name)),
        Err(msg) => {
            return Err(format!(
                "{}: vmap panicked: {msg}{}",
                case.name,
                crate::harness::describe(&operands, &levels, &inputs)
            ));
        }
    };
    for (name, e, g) in [
        ("dl/dw", &expected[0], &got[0]),
        ("dl/dx", &expected[1], &got[1]),
    ] {
        if let Some(d) = diff(e, g, TOL) {
            return Err(format!(
                "{}: {name} ({}): {d}{}",
                case.name,
                if w_is_mapped {
                    "w mapped"
                } else {
                    "w captured"
                },
                crate::harness::describe(&operands, &levels, &inputs)
            ));
        }
    }
    Ok(())
}

#[test]
fn oracle_per_example_grads() {
    let mut failures = Vec::new();
    for case in grad_cases() {
        let mut config = Config::with_cases(2 * crate::harness::num_cases());
        config.failure_persistence = None;
        config.max_shrink_iters = 128;
        let mut runner = TestRunner::new(config);
        let strategy = ([1usize..=3, 1usize..=3, 1usize..=3], any::<u64>());
        if let Err(e) = runner.run(&strategy, |(p, seed)| {
            check_config(&case, &p, seed).map_err(TestCaseError::fail)
        }) {
            failures.push(format!("[{}] {e}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} gradient cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The documented pattern, written out: per-example gradients of a captured parameter.
#[test]
fn per_example_grads_of_captured_weight() {
    let device = Default::default();
    let w =
        Tensor::<AD, 2>::from_floats([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]], &device).require_grad();
    let xs = Tensor::<AD, 3>::from_floats(
        [
            [[1.0, 2.0, 3.0]],
            [[0.0, -1.0, 1.0]],
            [[2.0, 0.0, 0.0]],
            [[-1.0, 1.0, 0.5]],
        ],
        &device,
    );
    let grads: Tensor<V, 3> = burn_vmap::vmap(|x: Tensor<AD, 2>| {
        let g = x.matmul(w.clone()).tanh().sum().backward();
        w.grad(&g).unwrap()
    })
    .call(xs.clone())
    .unwrap();
    let grads = Host::from_t(T::from(grads));
    let mut parts = Vec::new();
    for b in 0..4 {
        let x = Host::from_t(T::from(
            xs.clone().inner().slice(b..b + 1).squeeze_dim::<2>(0),
        ));
        let w0 = Host::from_t(T::from(w.clone().inner()));
        let (gw, _) = single(
            loss_matmul_tanh::<AdLoop>,
            &x,
            &w0,
            &Host {
                shape: vec![1],
                data: crate::harness::Data::I(vec![0]),
            },
        );
        parts.push(gw);
    }
    let expected = Host::stack(&parts, 0, &parts[0]);
    assert!(
        diff(&expected, &grads, TOL).is_none(),
        "{:?}",
        diff(&expected, &grads, TOL)
    );
}
