//! What the tree tests share: value helpers and the derived types under test.
#![allow(dead_code)]

use std::collections::BTreeMap;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_vmap::{Static, Tree};

pub fn dev() -> Device {
    Device::default()
}

/// A float tensor's values (a rank-0 one read as `[1]`: cubecl-wgpu 0.11.3 cannot read rank 0).
pub fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    if D == 0 {
        use burn_backend::ops::FloatTensorOps;
        let one = burn_dispatch::Dispatch::float_reshape(t.into_dispatch(), [1].into());
        return floats(Tensor::<1>::from_dispatch(one));
    }
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// An int tensor's values, whatever the device's int dtype.
pub fn ints<const D: usize>(t: Tensor<D, Int>) -> Vec<i64> {
    t.into_data().try_into_vec_as::<i64>().unwrap()
}

/// A bool tensor's values, whatever the device's bool storage.
pub fn bools<const D: usize>(t: Tensor<D, Bool>) -> Vec<bool> {
    t.into_data().try_into_vec_as::<bool>().unwrap()
}

/// A rank-0 float tensor. Burn 0.22's `Tensor` API refuses to create one (`from_data` of rank
/// 0 is an error); its backends hold them, so one is made by reshaping a primitive.
pub fn rank0(v: f32) -> Tensor<0> {
    use burn_backend::Shape;
    use burn_backend::ops::FloatTensorOps;
    let one = Tensor::<1>::from_floats([v], &dev()).into_dispatch();
    Tensor::from_dispatch(burn_dispatch::Dispatch::float_reshape(one, Shape::new([])))
}

pub fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// Deterministic data of a shape.
pub fn data<const D: usize>(shape: [usize; D], seed: f32) -> Tensor<D> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f32 + 1.0) * 0.37 + seed).sin())
        .collect();
    Tensor::from_data(TensorData::new(v, shape), &dev())
}

// ---------------------------------------------------------------------------------------------
// Types under test
// ---------------------------------------------------------------------------------------------

#[derive(Tree, Clone, Debug)]
pub struct Linear {
    pub weight: Tensor<2>,
    pub bias: Tensor<1>,
}

#[derive(Tree, Clone, Debug)]
pub struct Mlp {
    pub layer1: Linear,
    pub layer2: Linear,
}

#[derive(Tree, Clone, Debug)]
pub struct Pair(pub Tensor<1>, pub Tensor<2, Int>);

#[derive(Tree, Clone, Debug, PartialEq)]
pub struct Unit;

#[derive(Tree, Clone, Debug)]
pub struct Mixed {
    pub scalar: Tensor<0>,
    pub cube: Tensor<3>,
    pub ids: Tensor<1, Int>,
    pub mask: Tensor<2, Bool>,
    pub extra: Option<Vec<Tensor<1>>>,
    pub named: BTreeMap<String, Tensor<1>>,
    pub nested: (Pair, Unit),
}

#[derive(Tree, Clone, Debug)]
pub struct Configured {
    pub weight: Tensor<1>,
    #[tree(static)]
    pub activation: String,
    #[tree(skip)]
    pub calls: usize,
    pub flag: Static<bool>,
}

#[derive(Tree, Clone, Debug)]
pub struct Stats<P, T> {
    pub per_example: P,
    pub total: T,
}

#[derive(Tree, Clone, Debug)]
pub struct Tuple2<P, T>(pub P, #[tree(skip)] pub Vec<String>, pub T);

/// A skipped field of a generic type, and a where clause.
#[derive(Tree, Clone, Debug)]
pub struct Skipping<X, Y>
where
    X: Clone,
{
    pub x: X,
    #[tree(skip)]
    pub other: Option<Y>,
}

/// A static field of a generic type.
#[derive(Tree, Clone, Debug)]
pub struct Tagged<X, S> {
    pub x: X,
    #[tree(static)]
    pub tag: S,
}

/// Generic over the rank.
#[derive(Tree, Clone, Debug)]
pub struct Ranked<const D: usize> {
    pub x: Tensor<D>,
    pub ys: [Tensor<D, Int>; 2],
}

/// Rank 1 everywhere where `Mlp` has ranks 2 and 1: for rank-mismatch errors.
#[derive(Tree, Debug)]
pub struct FlatMlp {
    pub layer1: FlatLinear,
    pub layer2: FlatLinear,
}

#[derive(Tree, Debug)]
pub struct FlatLinear {
    pub weight: Tensor<1>,
    pub bias: Tensor<1>,
}

pub fn linear(o: usize, i: usize, seed: f32) -> Linear {
    Linear {
        weight: data([o, i], seed),
        bias: data([o], seed + 1.0),
    }
}

pub fn mlp() -> Mlp {
    Mlp {
        layer1: linear(3, 2, 0.0),
        layer2: linear(1, 3, 5.0),
    }
}

pub fn configured(act: &str, flag: bool) -> Configured {
    Configured {
        weight: data([2], 0.0),
        activation: act.into(),
        calls: 42,
        flag: Static(flag),
    }
}

pub fn mixed(extra: Option<Vec<Tensor<1>>>, named: BTreeMap<String, Tensor<1>>) -> Mixed {
    Mixed {
        scalar: rank0(0.25),
        cube: data([2, 1, 3], 1.0),
        ids: Tensor::from_ints([4, 5], &dev()),
        mask: Tensor::from_bool(TensorData::from([[true, false]]), &dev()),
        extra,
        named,
        nested: (Pair(data([1], 5.0), Tensor::from_ints([[7]], &dev())), Unit),
    }
}
