//! Per-example gradients on `Autodiff<Vmap<B>>` against a loop of single-example backward passes.

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData, Tolerance};
use burn_vmap::testing::TestBackend;
use burn_vmap::{ParamGrads, Vmap, per_example_grads, vmap};

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    fc1: Linear<B>,
    act: Relu,
    fc2: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(6, 8).init(device),
            act: Relu::new(),
            fc2: LinearConfig::new(8, 3).init(device),
        }
    }

    /// Cross-entropy of a batch (rows of `x`) against integer labels, averaged.
    fn loss<const D: usize>(&self, x: Tensor<B, D>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = self.fc2.forward(self.act.forward(self.fc1.forward(x)));
        let logits: Tensor<B, 2> = logits.reshape([-1, 3]);
        let logp = burn::tensor::activation::log_softmax(logits, 1);
        let picked = logp.gather(1, y.unsqueeze_dim(1));
        picked.mean().neg()
    }
}

#[test]
fn should_reproduce_optax_docs_example() {
    let device = Default::default();
    let params = Tensor::<AD, 1>::zeros([1], &device).require_grad();
    let features = Tensor::<AD, 2>::ones([4, 1], &device);
    let targets = Tensor::<AD, 1>::from_floats([0.0, 2.0, 4.0, 6.0], &device);
    let grads: Tensor<V, 2> = vmap(|(x, y): (Tensor<AD, 1>, Tensor<AD, 0>)| {
        let diff = (x * params.clone()).sum() - y.reshape([1]);
        let loss = (diff.clone() * diff).mul_scalar(0.5).mean();
        params.grad(&loss.backward()).unwrap()
    })
    .call((features, targets))
    .unwrap();
    let tol = Tolerance::<f32>::default();
    grads
        .clone()
        .into_data()
        .assert_approx_eq::<f32>(&TensorData::from([[0.0f32], [-2.0], [-4.0], [-6.0]]), tol);
    grads
        .clone()
        .mean()
        .into_data()
        .assert_approx_eq::<f32>(&TensorData::from([-3.0f32]), tol);
    (grads.clone() * grads.clone())
        .mean()
        .into_data()
        .assert_approx_eq::<f32>(&TensorData::from([14.0f32]), tol);
    let norms = (grads.clone() * grads)
        .sum_dim(1)
        .sqrt()
        .squeeze_dim::<1>(1);
    norms
        .into_data()
        .assert_approx_eq::<f32>(&TensorData::from([0.0f32, 2.0, 4.0, 6.0]), tol);
}

fn loop_grads(model: &Mlp<AD>, x: &Tensor<AD, 2>, y: &Tensor<AD, 1, Int>) -> Vec<ParamGrads<V>> {
    (0..x.dims()[0])
        .map(|i| {
            let xi = x.clone().narrow(0, i, 1);
            let yi = y.clone().narrow(0, i, 1);
            let mut g = model.loss(xi, yi).backward();
            ParamGrads::from_module(&mut g, model)
        })
        .collect()
}

#[test]
fn should_match_loop_for_burn_nn_mlp() {
    let device = Default::default();
    let model = Mlp::<AD>::new(&device);
    let b = 5;
    let x = Tensor::<AD, 2>::random([b, 6], Distribution::Normal(0.0, 1.0), &device);
    let y = Tensor::<AD, 1, Int>::from_ints([0, 2, 1, 1, 0], &device);

    // keep_batch_dim style: each example as a batch of one.
    let pe = per_example_grads(
        &model,
        (x.clone(), y.clone()),
        |m: &Mlp<AD>, (xi, yi): (Tensor<AD, 1>, Tensor<AD, 0, Int>)| {
            m.loss(xi.unsqueeze::<2>(), yi.reshape([1]))
        },
    )
    .unwrap();
    let reference = loop_grads(&model, &x, &y);
    assert_eq!(
        pe.paths().collect::<Vec<_>>(),
        vec!["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    );
    for path in ["fc1.weight", "fc2.weight"] {
        let got: Tensor<V, 3> = pe.get(path).unwrap();
        let want = Tensor::stack::<3>(
            reference
                .iter()
                .map(|g| g.get::<2>(path).unwrap())
                .collect(),
            0,
        );
        got.into_data()
            .assert_approx_eq::<f32>(&want.into_data(), Tolerance::default());
    }
    for path in ["fc1.bias", "fc2.bias"] {
        let got: Tensor<V, 2> = pe.get(path).unwrap();
        let want = Tensor::stack::<2>(
            reference
                .iter()
                .map(|g| g.get::<1>(path).unwrap())
                .collect(),
            0,
        );
        got.into_data()
            .assert_approx_eq::<f32>(&want.into_data(), Tolerance::default());
    }

    // The mean of the per-example gradients is the batch gradient of the mean loss.
    let mean = pe.mean_batch();
    let mut g = model.loss(x, y).backward();
    let batch = ParamGrads::from_module(&mut g, &model);
    for path in ["fc1.weight", "fc2.weight"] {
        let got: Tensor<V, 2> = mean.get(path).unwrap();
        got.into_data().assert_approx_eq::<f32>(
            &batch.get::<2>(path).unwrap().into_data(),
            Tolerance::default(),
        );
    }
}

#[test]
fn should_handle_parameter_used_batched_and_unbatched() {
    let device = Default::default();
    let w = Tensor::<AD, 1>::random([3], Distribution::Normal(0.0, 1.0), &device).require_grad();
    let c = Tensor::<AD, 1>::from_floats([0.5, -1.0, 2.0], &device);
    let xs = Tensor::<AD, 2>::random([4, 3], Distribution::Normal(0.0, 1.0), &device);
    // w meets the batched x once and the unbatched c once.
    let f = |x: Tensor<AD, 1>| {
        ((x * w.clone()).tanh().sum() + (w.clone() * c.clone()).exp().sum())
            * (w.clone() * w.clone()).sum()
    };
    let got: Tensor<V, 2> = vmap(|x: Tensor<AD, 1>| w.grad(&f(x).backward()).unwrap())
        .call(xs.clone())
        .unwrap();
    let want: Vec<Tensor<V, 1>> = (0..4)
        .map(|i| {
            let xi = xs.clone().narrow(0, i, 1).reshape([3]);
            w.grad(&f(xi).backward()).unwrap()
        })
        .collect();
    got.into_data().assert_approx_eq::<f32>(
        &Tensor::stack::<2>(want, 0).into_data(),
        Tolerance::default(),
    );
}

#[test]
fn should_differentiate_through_vmap_itself() {
    // Gradient of sum(vmap(f)(xs)) with respect to xs: the batch/unbatch moves are differentiable.
    let device = Default::default();
    let xs =
        Tensor::<AD, 2>::random([3, 4], Distribution::Normal(0.0, 1.0), &device).require_grad();
    let ys: Tensor<AD, 2> = vmap(|v: Tensor<AD, 1>| v.clone().sin() * v.sum())
        .in_axes(1isize)
        .out_axes(1isize)
        .call(xs.clone().swap_dims(0, 1))
        .unwrap();
    let g = ys.sum().backward();
    let got = xs.grad(&g).unwrap();
    // Loop: d/dx_ij sum_k sin(x_ik) * S_i = cos(x_ij) S_i + sum_k sin(x_ik)
    let x = xs.clone().inner();
    let s = x.clone().sum_dim(1);
    let want = x.clone().cos() * s + x.sin().sum_dim(1);
    got.into_data()
        .assert_approx_eq::<f32>(&want.into_data(), Tolerance::default());
}

/// Grad of vmap: an unmapped argument's gradient from a backward pass outside the vmap is the
/// sum over the examples (as JAX's).
#[test]
fn should_sum_the_gradient_of_an_unmapped_argument_over_the_batch() {
    type AD = burn::backend::Autodiff<burn_vmap::Vmap<burn_vmap::testing::TestBackend>>;
    let device = Default::default();
    let w = burn::tensor::Tensor::<AD, 1>::from_floats([1.0, 2.0, 3.0], &device).require_grad();
    let xs = burn::tensor::Tensor::<AD, 1>::from_floats(
        [1.0, 0.0, 2.0, -1.0, 3.0, 1.0, 0.5, 0.5, 0.5, 2.0, 2.0, 2.0],
        &device,
    )
    .reshape([4, 3]);
    let f = |(x, w): (burn::tensor::Tensor<AD, 1>, burn::tensor::Tensor<AD, 1>)| {
        (x * w.clone() * w).sum()
    };
    let out: burn::tensor::Tensor<AD, 2> = burn_vmap::vmap(f)
        .in_axes([Some(0), None])
        .call((xs.clone(), w.clone()))
        .unwrap();
    let grads = out.sum().backward();
    let g = w.grad(&grads).unwrap();
    // d/dw sum_i x_i · w² = 2 w · sum_i x_i
    let want = xs.inner().sum_dim(0).reshape([3]) * w.inner() * 2.0;
    g.into_data()
        .assert_approx_eq::<f32>(&want.into_data(), burn::tensor::Tolerance::absolute(1e-5));
}

/// The documented difference from JAX: a captured (not passed) tensor's gradient from a backward
/// pass after vmap returned is not summed over the batch; reading it panics with a message that
/// names the cause and the fix, never a silently wrong value.
#[test]
fn should_explain_the_gradient_of_a_captured_tensor_taken_after_vmap() {
    let device = Default::default();
    let w = Tensor::<AD, 1>::from_floats([1.0, 2.0, 3.0], &device).require_grad();
    let xs = Tensor::<AD, 2>::ones([4, 3], &device);
    let out: Tensor<AD, 2> = vmap(|x: Tensor<AD, 1>| (x * w.clone()).sum())
        .call(xs)
        .unwrap();
    let grads = out.sum().backward();
    let g = w.grad(&grads).unwrap();
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.into_data()))
        .err()
        .and_then(|e| e.downcast_ref::<String>().cloned())
        .expect("reading the gradient must panic");
    assert!(
        msg.contains("captured")
            && msg.contains("unmapped arguments")
            && msg.contains("per_example_grads"),
        "{msg}"
    );
}
