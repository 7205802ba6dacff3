use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_vmap::{vmap, TestBackend, Vmap};

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

#[test]
fn should_vmap_elementwise_and_reduce() {
    let device = Default::default();
    let xs = Tensor::<V, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
    let ys: Tensor<V, 2> = vmap(|v: Tensor<V, 1>| v.clone() * v.sum()).call(xs).unwrap();
    ys.into_data().assert_eq(&TensorData::from([[3.0f32, 6.0], [21.0, 28.0]]), false);
}

#[test]
fn should_give_optax_per_example_grads() {
    let device = Default::default();
    let params = Tensor::<AD, 1>::zeros([1], &device).require_grad();
    let features = Tensor::<AD, 2>::ones([4, 1], &device);
    let targets = Tensor::<AD, 1>::from_floats([0.0, 2.0, 4.0, 6.0], &device);
    let grads: Tensor<V, 2> = vmap(|(x, y): (Tensor<AD, 1>, Tensor<AD, 0>)| {
        let pred = (x * params.clone()).sum();
        let diff = pred - y.reshape([1]);
        let loss = (diff.clone() * diff).mul_scalar(0.5).mean();
        let g = loss.backward();
        params.grad(&g).unwrap()
    })
    .call((features, targets))
    .unwrap();
    grads.into_data().assert_approx_eq::<f32>(&TensorData::from([[0.0f32], [-2.0], [-4.0], [-6.0]]), Tolerance::default());
}
