//! What a Burn user meets in the first hour with `vmap` and `per_example_grads`: modules that
//! mix examples (BatchNorm) are refused and left intact, models stay usable after a recording,
//! empty batches give empty results, a non-finite example stays in its own gradients, results
//! infer, and errors name the transform and the mistake.

mod support;

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::tensor::{Tensor, TensorData};
use burn_vmap::{VmapError, per_example_grads, vmap};
use support::{assert_close, check_grads, dev, example, values};

#[derive(Module, Debug)]
struct Net {
    fc: Linear,
    norm: BatchNorm,
    head: Linear,
}

impl Net {
    fn new() -> Self {
        Self {
            fc: LinearConfig::new(3, 4).init(&dev()),
            norm: BatchNormConfig::new(4).init(&dev()),
            head: LinearConfig::new(4, 1).init(&dev()),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h: Tensor<3> = self.norm.forward(self.fc.forward(x).unsqueeze_dim(2));
        self.head.forward(h.squeeze_dim(2))
    }
}

fn net_loss(m: &Net, x: Tensor<1>) -> Tensor<1> {
    m.forward(x.unsqueeze()).sum()
}

/// In training mode BatchNorm's statistics mix the examples: refused with its path, before
/// anything runs; the module is intact (same running statistics, still runs).
#[test]
fn should_refuse_batch_norm_in_training_mode_and_leave_the_module_intact() {
    let net = Net::new().train();
    let before = values(net.norm.running_mean.value());
    let xs = Tensor::<2>::ones([5, 3], &dev());
    let err = per_example_grads(&net, xs, net_loss).unwrap_err();
    assert!(
        matches!(&err, VmapError::MixesExamples { transform: "per_example_grads", path, .. } if path == "norm"),
        "{err}"
    );
    assert_eq!(values(net.norm.running_mean.value()), before);
    let out = net.valid().forward(Tensor::ones([2, 3], &dev()));
    assert_eq!(out.dims(), [2, 1]);
}

/// In eval mode it is per example (its running statistics): the loop's gradients, and the
/// model is still the user's afterwards (a recording moves a clone of it, whose running
/// statistics Burn shares with the original).
#[test]
fn should_take_batch_norm_in_eval_mode_and_leave_the_model_usable() {
    let net = Net::new().valid();
    let before = values(net.norm.running_var.value());
    let xs = Tensor::<2>::random([4, 3], burn::tensor::Distribution::Default, &dev());
    let grads = per_example_grads(&net, xs.clone(), net_loss).unwrap();
    assert_eq!(grads.get::<3>("fc.weight").unwrap().dims(), [4, 3, 4]);
    assert_eq!(values(net.norm.running_var.value()), before);
    let out = net.forward(xs);
    assert_eq!(out.dims(), [4, 1]);
}

/// No example: `vmap` gives a 0-sized batch axis with the example's shape.
#[test]
fn should_map_an_empty_batch_to_an_empty_result() {
    let xs = Tensor::<2>::zeros([0, 3], &dev());
    let ys = vmap(|x: Tensor<1>| x.clone() * x.sum()).call(xs).unwrap();
    assert_eq!(ys.dims(), [0, 3]);
}

/// A NaN or infinite example poisons its own gradients only: the others are the loop's.
#[test]
fn should_keep_a_non_finite_example_in_its_own_gradients() {
    let model: Linear = LinearConfig::new(3, 2).init(&dev());
    let mut x = vec![0.5f32; 12];
    x[3] = f32::NAN; // example 1
    x[9] = f32::INFINITY; // example 3
    let xs = Tensor::<2>::from_data(TensorData::new(x, [4, 3]), &dev());
    let loss = |m: &Linear, x: Tensor<1>| m.forward(x).powi_scalar(2).sum();
    let grads = check_grads(
        &model,
        xs.clone(),
        |i| example::<2, 1, _>(&xs, i),
        loss,
        "non-finite",
    );
    let norms = values(grads.per_example_norms());
    assert!(norms[0].is_finite() && norms[2].is_finite(), "{norms:?}");
    assert!(!norms[1].is_finite() && !norms[3].is_finite(), "{norms:?}");
}

/// `call` needs no annotation: the result is the function's output with one more axis.
#[test]
fn should_infer_the_result_type() {
    let xs = Tensor::<2>::ones([4, 3], &dev());
    let (sums, scaled) = vmap(|x: Tensor<1>| (x.clone().sum(), x * 2.0))
        .call(xs)
        .unwrap();
    assert_eq!(sums.dims(), [4, 1]);
    assert_close(&values(scaled), &[2.0; 12], "scaled");
}

#[test]
fn should_name_the_transform_and_the_mistake() {
    let model: Linear = LinearConfig::new(3, 2).init(&dev());
    let xs = Tensor::<2>::ones([4, 3], &dev());
    // A loss of two elements per example.
    let err =
        per_example_grads(&model, xs.clone(), |m: &Linear, x: Tensor<1>| m.forward(x)).unwrap_err();
    assert!(matches!(err, VmapError::LossNotScalar { .. }), "{err}");
    // Arguments of different batch sizes.
    let ys = Tensor::<2>::ones([5, 2], &dev());
    let err = per_example_grads(
        &model,
        (xs.clone(), ys),
        |m: &Linear, (x, y): (Tensor<1>, Tensor<1>)| (m.forward(x) - y).powi_scalar(2).sum(),
    )
    .unwrap_err();
    assert!(
        matches!(err, VmapError::InconsistentBatchSizes { .. }),
        "{err}"
    );
    // A loss written for a batch (rank 2) where it sees one example (rank 1): the message
    // names the argument, not a transform the user did not call.
    let err = per_example_grads(&model, xs.clone(), |m: &Linear, x: Tensor<2>| {
        m.forward(x).sum()
    })
    .unwrap_err();
    assert!(
        matches!(
            &err,
            VmapError::LeafMismatch {
                expected_rank: 2,
                got_rank: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with("args"), "{err}");
    // Nothing mapped, under a transform other than `vmap`.
    let err = burn_vmap::transform::chunked_vmap(|x: Tensor<2>| x, 2)
        .unwrap()
        .in_axes(Option::<isize>::None)
        .call(xs.clone())
        .unwrap_err();
    assert!(
        matches!(
            err,
            VmapError::NothingMapped {
                transform: "chunked_vmap"
            }
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with("chunked_vmap: "), "{err}");
    // A tensor the loss closes over instead of taking it as an argument.
    let target = Tensor::<1>::ones([2], &dev());
    let err = per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| {
        (m.forward(x) - target.clone()).powi_scalar(2).sum()
    })
    .unwrap_err();
    assert!(
        matches!(
            err,
            VmapError::ForeignTensor {
                transform: "per_example_grads",
                ..
            }
        ),
        "{err}"
    );
}
