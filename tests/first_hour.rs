//! What a Burn user meets in the first hour: modules that mix examples (BatchNorm) are refused
//! and left intact, empty batches give optax's results, non-finite per-example gradients can be
//! zeroed and counted, results infer, and errors name the transform and the mistake.

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_vmap::accumulate::{Concat, Mean, Sum};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::micro::{clip_by_global_norm_finite, non_finite};
use burn_vmap::{
    ParamGrads, Randomness, Vmap, VmapError, clip_by_global_norm, global_norm, micro_grad,
    micro_grad_module, micro_vmap, per_example_grads, vmap,
};

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;

fn dev() -> burn::tensor::Device<TestBackend> {
    Default::default()
}

#[derive(Module, Debug)]
struct Net<B: Backend> {
    fc: Linear<B>,
    norm: BatchNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Net<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc: LinearConfig::new(3, 4).init(device),
            norm: BatchNormConfig::new(4).init(device),
            head: LinearConfig::new(4, 1).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.fc.forward(x);
        let h: Tensor<B, 3> = self.norm.forward(h.unsqueeze_dim(2));
        self.head.forward(h.squeeze_dim(2))
    }
}

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap()
}

// ---------------------------------------------------------------------------------------------
// 5. BatchNorm: refused, with the module path, before anything runs; the module is intact.
// ---------------------------------------------------------------------------------------------

#[test]
fn should_refuse_batch_norm_in_micro_grad_module_and_leave_the_module_intact() {
    let net = Net::<AD>::new(&dev());
    let mean_before = values(net.norm.running_mean.value());
    let x = Tensor::<AD, 2>::ones([6, 3], &dev());
    let err = micro_grad_module(|m: &Net<AD>, (x,): (Tensor<AD, 2>,)| m.forward(x).sum())
        .transform_fn(|g| clip_by_global_norm(g, 1.0))
        .call(&net, (x.clone(),))
        .map(|_| ())
        .unwrap_err();
    match &err {
        VmapError::MixesExamples {
            transform,
            path,
            layer,
        } => assert_eq!(
            (*transform, path.as_str(), *layer),
            ("micro_grad_module", "norm", "BatchNorm")
        ),
        other => panic!("expected MixesExamples, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("GroupNorm") && msg.contains("LayerNorm"),
        "{msg}"
    );

    // The running statistics are as they were, and eval mode still runs.
    assert_eq!(values(net.norm.running_mean.value()), mean_before);
    let out = net.valid().forward(Tensor::ones([2, 3], &dev()));
    assert_eq!(out.dims(), [2, 1]);
}

#[test]
fn should_refuse_batch_norm_in_per_example_grads() {
    let net = Net::<AD>::new(&dev());
    let xs = Tensor::<AD, 2>::ones([5, 3], &dev());
    let err = per_example_grads(&net, xs, |m: &Net<AD>, x: Tensor<AD, 1>| {
        m.forward(x.unsqueeze()).sum()
    })
    .unwrap_err();
    assert!(
        matches!(&err, VmapError::MixesExamples { transform: "per_example_grads", path, .. } if path == "norm"),
        "{err}"
    );
    let out = net.valid().forward(Tensor::ones([2, 3], &dev()));
    assert_eq!(out.dims(), [2, 1]);
}

// ---------------------------------------------------------------------------------------------
// 6. Empty batches: optax's results (zeros for Sum and Mean, empty Concat), never a panic.
// ---------------------------------------------------------------------------------------------

fn linear() -> Linear<AD> {
    LinearConfig::new(3, 2).init(&dev())
}

fn mse(m: &Linear<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 2>)) -> Tensor<AD, 1> {
    (m.forward(x) - y).powi_scalar(2).sum()
}

fn empty_batch() -> (Tensor<AD, 2>, Tensor<AD, 2>) {
    (Tensor::zeros([0, 3], &dev()), Tensor::zeros([0, 2], &dev()))
}

#[test]
fn should_sum_an_empty_batch_to_zeros_in_micro_grad_module() {
    let model = linear();
    for microbatch in [None, Some(4)] {
        let (sum, aux) = micro_grad_module(mse)
            .microbatch_size(microbatch)
            .transform_fn(|g| clip_by_global_norm(g, 1.0))
            .metrics_fn(|g| global_norm(&g))
            .call(&model, empty_batch())
            .unwrap();
        let w: Tensor<I, 2> = sum.get("weight").unwrap();
        assert_eq!(w.dims(), [3, 2]);
        assert_eq!(values(w), vec![0.0; 6]);
        assert_eq!(aux.values.dims(), [0]);
        assert_eq!(aux.metrics.dims(), [0, 1]);
    }
}

#[test]
fn should_concat_an_empty_batch_to_empty_gradients() {
    let model = linear();
    let (per, _) = micro_grad_module(mse)
        .accumulator(Concat)
        .call(&model, empty_batch())
        .unwrap();
    let w: Tensor<I, 3> = per.get("weight").unwrap();
    assert_eq!(w.dims(), [0, 3, 2]);

    let per = per_example_grads(
        &model,
        empty_batch(),
        |m: &Linear<AD>, (x, y): (Tensor<AD, 1>, Tensor<AD, 1>)| {
            (m.forward(x.unsqueeze::<2>()) - y.unsqueeze())
                .powi_scalar(2)
                .sum()
        },
    )
    .unwrap();
    let w: Tensor<I, 3> = per.get("weight").unwrap();
    assert_eq!(w.dims(), [0, 3, 2]);
}

#[test]
fn should_give_nan_for_mean_of_an_empty_batch_and_empty_vmaps() {
    // The mean of no example is 0 / 0, as optax's (and `jnp.mean`'s).
    let model = linear();
    let (mean, _) = micro_grad_module(mse)
        .accumulator(Mean)
        .call(&model, empty_batch())
        .unwrap();
    let b: Tensor<I, 1> = mean.get("bias").unwrap();
    assert!(values(b).iter().all(|v| v.is_nan()));

    let xs = Tensor::<I, 2>::zeros([0, 3], &dev());
    let ys = vmap(|x: Tensor<I, 1>| x.clone() * x.sum())
        .call(xs.clone())
        .unwrap();
    assert_eq!(ys.dims(), [0, 3]);
    let total = micro_vmap(|x: Tensor<I, 1>| x * 2.0)
        .microbatch_size(2)
        .accumulator(Sum)
        .call(xs.clone())
        .unwrap();
    assert_eq!(values(total), vec![0.0; 3]);

    let p = Tensor::<AD, 1>::ones([3], &dev());
    let (g, aux) =
        micro_grad(|(p, x): (Tensor<AD, 1>, Tensor<AD, 2>)| (x.squeeze_dim::<1>(0) * p).sum())
            .transform_fn(|g: Tensor<I, 1>| g)
            .call((p, Tensor::<AD, 2>::zeros([0, 3], &dev())))
            .unwrap();
    assert_eq!(values(g), vec![0.0; 3]);
    assert_eq!(aux.values.dims(), [0]);
}

// ---------------------------------------------------------------------------------------------
// 7. Non-finite per-example gradients: zeroed and counted on request; the default propagates.
// ---------------------------------------------------------------------------------------------

#[test]
fn should_zero_and_count_non_finite_per_example_gradients() {
    let model = linear();
    let mut x = vec![0.5f32; 12];
    x[3] = f32::NAN; // example 1
    x[9] = f32::INFINITY; // example 3
    let x = Tensor::<AD, 2>::from_data(TensorData::new(x, [4, 3]), &dev());
    let y = Tensor::<AD, 2>::zeros([4, 2], &dev());

    // The default (optax's): the non-finite examples make the clipped sum non-finite.
    let (sum, _) = micro_grad_module(mse)
        .transform_fn(|g| clip_by_global_norm(g, 1.0))
        .call(&model, (x.clone(), y.clone()))
        .unwrap();
    let w: Tensor<I, 2> = sum.get("weight").unwrap();
    assert!(values(w).iter().any(|v| !v.is_finite()));

    // Zeroed and counted: the sum equals the sum over the finite examples alone.
    let (sum, aux) = micro_grad_module(mse)
        .microbatch_size(2)
        .transform_fn(|g| clip_by_global_norm_finite(g, 1.0))
        .metrics_fn(|g| non_finite(&g))
        .call(&model, (x.clone(), y.clone()))
        .unwrap();
    assert_eq!(values(aux.metrics.sum()), vec![2.0]);
    let keep = Tensor::<AD, 1, burn::tensor::Int>::from_ints([0, 2], &dev());
    let (finite_sum, _) = micro_grad_module(mse)
        .transform_fn(|g| clip_by_global_norm(g, 1.0))
        .call(&model, (x.select(0, keep.clone()), y.select(0, keep)))
        .unwrap();
    for path in ["weight", "bias"] {
        let a: Tensor<I, 1> = flat(&sum, path);
        let b: Tensor<I, 1> = flat(&finite_sum, path);
        a.into_data()
            .assert_approx_eq::<f32>(&b.into_data(), Tolerance::default());
    }
}

fn flat(g: &ParamGrads<I>, path: &str) -> Tensor<I, 1> {
    match path {
        "weight" => g.get::<2>(path).unwrap().flatten(0, 1),
        _ => g.get::<1>(path).unwrap(),
    }
}

// ---------------------------------------------------------------------------------------------
// 3, 4, 10: results infer; one builder serves a training loop; randomness named per transform.
// ---------------------------------------------------------------------------------------------

#[test]
fn should_reuse_one_builder_across_optimizer_steps() {
    use burn::optim::{GradientsParams, Optimizer, SgdConfig};
    let mut model = linear();
    let mut optim = SgdConfig::new().init::<AD, Linear<AD>>();
    let step = micro_grad_module(mse)
        .accumulator(Mean)
        .transform_fn(|g| clip_by_global_norm(g, 1.0));
    let x = Tensor::<AD, 2>::ones([4, 3], &dev());
    let y = Tensor::<AD, 2>::zeros([4, 2], &dev());
    let mut losses = Vec::new();
    for _ in 0..3 {
        let (grads, aux) = step.call(&model, (x.clone(), y.clone())).unwrap();
        losses.push(values(aux.values.mean())[0]);
        let grads: GradientsParams = grads.into_gradients_params();
        model = optim.step(0.1, model, grads);
    }
    assert!(losses[2] < losses[0], "{losses:?}");
}

#[derive(Module, Debug)]
struct Noisy<B: Backend> {
    fc: Linear<B>,
    drop: Dropout,
}

#[test]
fn should_name_the_transform_and_its_randomness_setting() {
    let model = Noisy::<AD> {
        fc: LinearConfig::new(3, 2).init(&dev()),
        drop: DropoutConfig::new(0.5).init(),
    };
    let loss = |m: &Noisy<AD>, (x,): (Tensor<AD, 2>,)| m.drop.forward(m.fc.forward(x)).sum();
    let x = Tensor::<AD, 2>::ones([4, 3], &dev());
    let err = micro_grad_module(loss)
        .call(&model, (x.clone(),))
        .map(|_| ())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            VmapError::Randomness {
                transform: "micro_grad_module",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("micro_grad_module(f).randomness(Randomness::Different)"),
        "{msg}"
    );
    let (grads, _) = micro_grad_module(loss)
        .randomness(Randomness::Different)
        .call(&model, (x,))
        .unwrap();
    assert_eq!(grads.len(), 2);
}
