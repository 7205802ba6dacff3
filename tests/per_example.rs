//! `per_example_grads` of unmodified Burn 0.22 modules against a loop of single-example
//! backward passes, and what its `ParamGrads` give: batch sums and means, per-example norms,
//! frozen parameters, an optimizer step, and `vmap` over the gradients themselves.

mod support;

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_vmap::tree::{TensorMapper, TensorVisitor};
use burn_vmap::{ParamGrads, Tree, per_example_grads, vmap};
use support::{assert_close, check_grads, dev, example, values};

#[derive(Module, Debug)]
struct Mlp {
    fc1: Linear,
    act: Relu,
    fc2: Linear,
}

impl Mlp {
    fn new() -> Self {
        Self {
            fc1: LinearConfig::new(6, 8).init(&dev()),
            act: Relu::new(),
            fc2: LinearConfig::new(8, 3).init(&dev()),
        }
    }

    /// Cross-entropy of a batch (rows of `x`) against integer labels, averaged.
    fn loss(&self, x: Tensor<2>, y: Tensor<1, Int>) -> Tensor<1> {
        let logits = self.fc2.forward(self.act.forward(self.fc1.forward(x)));
        log_softmax(logits, 1)
            .gather(1, y.unsqueeze_dim(1))
            .mean()
            .neg()
    }
}

/// One example as a batch of one (optax's `keep_batch_dim`).
fn mlp_loss(m: &Mlp, (x, y): (Tensor<1>, Tensor<1, Int>)) -> Tensor<1> {
    m.loss(x.unsqueeze::<2>(), y)
}

#[derive(Module, Debug)]
struct Params {
    p: Param<Tensor<1>>,
}

/// optax's per-example gradients example: `loss = (x . p - y)^2 / 2` at `p = 0`.
#[test]
fn should_reproduce_the_optax_docs_example() {
    let model = Params {
        p: Param::from_tensor(Tensor::zeros([1], &dev())),
    };
    let features = Tensor::<2>::ones([4, 1], &dev());
    let targets = Tensor::<1>::from_floats([0.0, 2.0, 4.0, 6.0], &dev());
    let loss = |m: &Params, (x, y): (Tensor<1>, Tensor<0>)| {
        let diff = (x * m.p.val()).sum() - y.reshape([1]);
        (diff.clone() * diff).mul_scalar(0.5).mean()
    };
    let grads = per_example_grads(&model, (features, targets), loss).unwrap();
    let g: Tensor<2> = grads.get("p").unwrap();
    assert_eq!(values(g), vec![0.0, -2.0, -4.0, -6.0]);
    assert_eq!(values(grads.per_example_norms()), vec![0.0, 2.0, 4.0, 6.0]);
    assert_eq!(
        values(grads.clone().mean_batch().get::<1>("p").unwrap()),
        vec![-3.0]
    );
    assert_eq!(
        values(grads.sum_batch().get::<1>("p").unwrap()),
        vec![-12.0]
    );
}

#[test]
fn should_match_the_loop_for_a_burn_nn_mlp_and_average_to_the_batch_gradient() {
    let model = Mlp::new();
    let x = Tensor::<2>::random([5, 6], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [2], [1], [1], [0]], &dev());
    let grads = check_grads(
        &model,
        (x.clone(), y.clone()),
        |i| (example::<2, 1, _>(&x, i), example::<2, 1, Int>(&y, i)),
        mlp_loss,
        "mlp",
    );
    assert_eq!(
        grads.paths().collect::<Vec<_>>(),
        ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    );
    // The mean of the per-example gradients is the gradient of the batch's mean loss.
    let mean = grads.clone().mean_batch();
    let trained = model.clone().train();
    let batch = GradientsParams::from_grads(trained.loss(x, y.reshape([5])).backward(), &trained);
    for (path, id, g) in mean.iter() {
        let want = support::burn_grad(&batch, id, g.shape().num_dims()).unwrap();
        assert_close(&leaf_values(g), &want, path);
    }
}

#[derive(Module, Debug)]
struct Shared {
    w: Param<Tensor<1>>,
}

/// A parameter that meets the batched input once and a constant (created inside the loss) once.
#[test]
fn should_handle_a_parameter_used_batched_and_unbatched() {
    let model = Shared {
        w: Param::from_tensor(Tensor::random([3], Distribution::Normal(0.0, 1.0), &dev())),
    };
    let xs = Tensor::<2>::random([4, 3], Distribution::Normal(0.0, 1.0), &dev());
    let loss = |m: &Shared, x: Tensor<1>| {
        let w = m.w.val();
        let c = Tensor::<1>::from_data(TensorData::from([0.5f32, -1.0, 2.0]), &x.device());
        ((x * w.clone()).tanh().sum() + (w.clone() * c).exp().sum()) * (w.clone() * w).sum()
    };
    check_grads(
        &model,
        xs.clone(),
        |i| example::<2, 1, _>(&xs, i),
        loss,
        "shared",
    );
}

/// A frozen parameter gets no gradient (as Burn's own backward); the others are the loop's.
#[test]
fn should_leave_frozen_parameters_out() {
    let mut model = Mlp::new();
    model.fc1 = model.fc1.freeze();
    let x = Tensor::<2>::random([3, 6], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [2], [1]], &dev());
    let grads = check_grads(
        &model,
        (x.clone(), y.clone()),
        |i| (example::<2, 1, _>(&x, i), example::<2, 1, Int>(&y, i)),
        mlp_loss,
        "frozen",
    );
    assert_eq!(
        grads.paths().collect::<Vec<_>>(),
        ["fc2.weight", "fc2.bias"]
    );
    assert!(grads.get::<3>("fc1.weight").is_none());
}

/// A model in training mode (on an autodiff device, as an optimizer holds it) gives the same
/// per-example gradients.
#[test]
fn should_take_a_model_in_training_mode() {
    let model = Mlp::new().train();
    let x = Tensor::<2>::random([3, 6], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[2], [0], [1]], &dev());
    check_grads(
        &model,
        (x.clone(), y.clone()),
        |i| (example::<2, 1, _>(&x, i), example::<2, 1, Int>(&y, i)),
        mlp_loss,
        "training mode",
    );
}

/// In training mode, trainability is read from the parameters themselves: frozen before or
/// after entering training mode, a parameter gets no gradient (as Burn's own backward).
#[test]
fn should_leave_frozen_parameters_out_in_training_mode() {
    let x = Tensor::<2>::random([3, 6], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[1], [0], [2]], &dev());
    let mut before = Mlp::new();
    before.fc1 = before.fc1.freeze();
    let mut after = Mlp::new().train();
    after.fc2 = after.fc2.freeze();
    for (model, trained) in [(before.train(), "fc2"), (after, "fc1")] {
        let grads = check_grads(
            &model,
            (x.clone(), y.clone()),
            |i| (example::<2, 1, _>(&x, i), example::<2, 1, Int>(&y, i)),
            mlp_loss,
            "frozen in training mode",
        );
        let expected = [format!("{trained}.weight"), format!("{trained}.bias")];
        assert_eq!(grads.paths().collect::<Vec<_>>(), expected);
    }
}

/// Averaged per-example gradients drive Burn's optimizer: the loss goes down.
#[test]
fn should_train_with_an_optimizer_step_on_summed_gradients() {
    let mut model = Mlp::new().train();
    let mut optim = SgdConfig::new().init();
    let x = Tensor::<2>::random([8, 6], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [1], [2], [0], [1], [2], [0], [1]], &dev());
    let mut losses = Vec::new();
    for _ in 0..5 {
        losses.push(values(model.valid().loss(x.clone(), y.clone().reshape([8])))[0]);
        let grads = per_example_grads(&model, (x.clone(), y.clone()), mlp_loss).unwrap();
        model = optim.step(0.5, model, grads.mean_batch().into_gradients_params());
    }
    assert!(losses[4] < losses[0], "{losses:?}");
}

fn leaf_values(l: &burn_vmap::tree::Leaf) -> Vec<f32> {
    l.to_data().convert::<f32>().try_to_vec().unwrap()
}

/// Multiplies every float leaf by a one-element tensor.
struct Scale(Tensor<1>);

impl TensorMapper for Scale {
    fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<D>) -> Tensor<D> {
        t * self.0.clone().reshape([1; D])
    }
}

/// Sum of the squares of every float leaf.
struct SumSquares(Vec<Tensor<1>>);

impl TensorVisitor for SumSquares {
    fn visit_float<const D: usize>(&mut self, _path: &str, t: &Tensor<D>) {
        self.0.push(t.clone().powi_scalar(2).sum());
    }
}

/// `ParamGrads` is a tree: DP-SGD's clipping runs under `vmap`, one example's gradients at a
/// time, and equals clipping the loop's gradients.
#[test]
fn should_clip_per_example_gradients_under_vmap() {
    let model = Mlp::new();
    let x = Tensor::<2>::random([6, 6], Distribution::Normal(0.0, 3.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [1], [2], [0], [1], [2]], &dev());
    let grads = per_example_grads(&model, (x, y), mlp_loss).unwrap();
    let norms = values(grads.per_example_norms());
    let c = 0.5;
    let clip = |g: ParamGrads| -> ParamGrads {
        let mut squares = SumSquares(Vec::new());
        g.visit_tensors(&mut squares).unwrap();
        let norm = Tensor::cat(squares.0, 0).sum().sqrt();
        g.map_tensors(&mut Scale(norm.clamp_min(c).recip() * c))
            .unwrap()
    };
    let clipped: ParamGrads = vmap(clip).call_as(grads.clone()).unwrap();
    for ((path, _, g), (_, _, orig)) in clipped.iter().zip(grads.iter()) {
        let orig = leaf_values(orig);
        let per = orig.len() / norms.len();
        let want: Vec<f32> = orig
            .iter()
            .enumerate()
            .map(|(k, v)| v * (c / norms[k / per].max(c)))
            .collect();
        assert_close(&leaf_values(g), &want, path);
    }
}
