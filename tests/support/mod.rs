//! What the loop-oracle test files share: values, examples of a batch, and per-example
//! gradients against Burn's own backward of each example alone.
#![allow(dead_code)]

#[path = "../shared/tolerance.rs"]
mod tolerance;

use burn::module::{Module, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::kind::{Basic, TensorKind};
use burn::tensor::{Device, Tensor};
use burn_vmap::{ParamGrads, Tree, per_example_grads};

pub fn dev() -> Device {
    Device::default()
}

/// A tensor's values as `f32`, whatever its kind.
pub fn values<const D: usize, K: Basic + TensorKind>(t: Tensor<D, K>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// Example `i` of a batch (axis 0 removed).
pub fn example<const DB: usize, const D: usize, K: Basic + TensorKind>(
    xs: &Tensor<DB, K>,
    i: usize,
) -> Tensor<D, K> {
    let shape: [usize; D] = xs.dims()[1..].try_into().unwrap();
    xs.clone().narrow(0, i, 1).reshape(shape)
}

/// `|a - b| <= 1e-4 * max(1, max |b|)` elementwise (at least TF32's tolerance on CUDA), NaN
/// equal to NaN.
pub fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: sizes");
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(1f32, |m, v| m.max(v.abs()));
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        let same = (a.is_nan() && b.is_nan())
            || a == b
            || (a - b).abs() <= tolerance::device_tol(1e-4) * scale;
        assert!(same, "{what}: at {k}: {a} vs {b}");
    }
}

/// A parameter's gradient in Burn's own `GradientsParams`, as flat values.
pub fn burn_grad(grads: &GradientsParams, id: ParamId, rank: usize) -> Option<Vec<f32>> {
    match rank {
        1 => grads.get::<1>(id).map(values),
        2 => grads.get::<2>(id).map(values),
        3 => grads.get::<3>(id).map(values),
        4 => grads.get::<4>(id).map(values),
        5 => grads.get::<5>(id).map(values),
        r => panic!("rank {r}"),
    }
}

/// The loop: Burn's backward of `loss(model, example)` on the model in training mode, as
/// `GradientsParams`.
pub fn loop_grads<M: Module, A>(
    model: &M,
    example: A,
    loss: impl Fn(&M, A) -> Tensor<1>,
) -> GradientsParams {
    let trained = model.clone().train();
    GradientsParams::from_grads(loss(&trained, example).backward(), &trained)
}

/// `per_example_grads` against the loop, for every parameter and example; returns the
/// per-example gradients.
pub fn check_grads<M: Module, I: Tree, A: Tree>(
    model: &M,
    inputs: I,
    example: impl Fn(usize) -> A,
    loss: impl Fn(&M, A) -> Tensor<1> + Copy,
    what: &str,
) -> ParamGrads {
    let grads = per_example_grads(model, inputs, loss).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(!grads.is_empty(), "{what}: no parameter gradient");
    let batch = grads.iter().next().unwrap().2.shape()[0];
    for i in 0..batch {
        let theirs = loop_grads(model, example(i), loss);
        for (path, id, g) in grads.iter() {
            let all: Vec<f32> = g.to_data().convert::<f32>().try_to_vec().unwrap();
            let per = all.len() / batch;
            let want =
                burn_grad(&theirs, id, g.shape().num_dims() - 1).unwrap_or_else(|| vec![0.0; per]);
            assert_close(
                &all[i * per..(i + 1) * per],
                &want,
                &format!("{what}: {path}, example {i}"),
            );
        }
    }
    grads
}
