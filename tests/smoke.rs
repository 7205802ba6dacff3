//! The first thing a user tries: a function of one example, mapped over rows.

use burn::tensor::{Device, Tensor, TensorData};
use burn_vmap::vmap;

#[test]
fn should_vmap_elementwise_and_reduce() {
    let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &Device::default());
    // `sum()` has shape [1] in Burn 0.22: it broadcasts against the row.
    let ys: Tensor<2> = vmap(|v: Tensor<1>| v.clone() * v.sum()).call(xs).unwrap();
    ys.into_data()
        .assert_eq(&TensorData::from([[3.0f32, 6.0], [21.0, 28.0]]), false);
}
