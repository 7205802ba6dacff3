use burn::tensor::{Tensor, TensorData};
use burn_vmap::testing::TestBackend;
use burn_vmap::{Vmap, vmap};

type V = Vmap<TestBackend>;

#[test]
fn should_vmap_elementwise_and_reduce() {
    let device = Default::default();
    let xs = Tensor::<V, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
    let ys: Tensor<V, 2> = vmap(|v: Tensor<V, 1>| v.clone() * v.sum())
        .call(xs)
        .unwrap();
    ys.into_data()
        .assert_eq(&TensorData::from([[3.0f32, 6.0], [21.0, 28.0]]), false);
}
