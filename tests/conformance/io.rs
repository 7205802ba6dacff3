//! Building a case's inputs and reading a run's outputs.

use burn::tensor::kind::Kind;
use burn_backend::Shape;
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_dispatch::Dispatch;

use crate::*;

/// A tensor leaf on `device` holding `a` (float32 -> float, int32 -> int, bool -> bool, at the
/// device's default dtype of the kind; shape `[]` is a rank-0 tensor).
pub(crate) fn input_leaf(a: &Array, device: &Device) -> Leaf {
    // A rank-0 array is created as `[1]` and reshaped (see `rank0`).
    let shape = if a.shape.is_empty() {
        vec![1]
    } else {
        a.shape.clone()
    };
    let data = match a.dtype {
        DType::F32 => TensorData::new(
            a.data.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            shape.clone(),
        ),
        DType::I32 => TensorData::new(
            a.data.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            shape.clone(),
        ),
        DType::Bool => TensorData::new(
            a.data.iter().map(|&x| x != 0.0).collect::<Vec<_>>(),
            shape.clone(),
        ),
    };
    match (a.dtype, a.shape.len()) {
        (DType::F32, 0) => rank0(Tensor::<1>::from_data(data, device)),
        (DType::I32, 0) => rank0(Tensor::<1, Int>::from_data(data, device)),
        (DType::Bool, 0) => rank0(Tensor::<1, Bool>::from_data(data, device)),
        (DType::F32, r) => with_rank!(r, D => Leaf::new(Tensor::<D>::from_data(data, device))),
        (DType::I32, r) => with_rank!(r, D => Leaf::new(Tensor::<D, Int>::from_data(data, device))),
        (DType::Bool, r) => {
            with_rank!(r, D => Leaf::new(Tensor::<D, Bool>::from_data(data, device)))
        }
    }
}

/// The one value of a `[1]` tensor as a rank-0 tensor. Burn 0.22's `Tensor::from_data` refuses
/// rank 0, but its backends hold rank-0 tensors: reshape the primitive.
pub(crate) fn rank0<K: TensorKind + Basic>(one: Tensor<1, K>) -> Leaf {
    let t = one.into_dispatch();
    let scalar = Shape::new([]);
    let t = match K::KIND {
        Kind::Float => Dispatch::float_reshape(t, scalar),
        Kind::Int => Dispatch::int_reshape(t, scalar),
        Kind::Bool => Dispatch::bool_reshape(t, scalar),
    };
    Leaf::new(Tensor::<0, K>::from_dispatch(t))
}

pub(crate) fn build_arg(case: &Case, spec: &ArgSpec, device: &Device) -> Result<Pt, String> {
    match spec {
        ArgSpec::Input(name) => Ok(Pt::Leaf(input_leaf(case.input(name)?, device))),
        ArgSpec::Struct(fields) => Ok(Pt::Dict(
            fields
                .iter()
                .map(|(k, s)| Ok((k.clone(), build_arg(case, s, device)?)))
                .collect::<Result<_, String>>()?,
        )),
    }
}

/// The positional arguments of the program, as listed by `args`, on `device`.
pub(crate) fn build_args_on(case: &Case, device: &Device) -> Result<Vec<Pt>, String> {
    case.args
        .iter()
        .map(|s| build_arg(case, s, device))
        .collect()
}

/// The positional arguments of the program, on the default device.
pub(crate) fn build_args(case: &Case) -> Result<Vec<Pt>, String> {
    build_args_on(case, &Device::default())
}

/// An output array read back from a tensor.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f64>,
}

pub(crate) fn read_leaf(leaf: Leaf) -> Got {
    let dtype = match leaf.kind_name() {
        "float" => DType::F32,
        "int" => DType::I32,
        _ => DType::Bool,
    };
    let data = leaf.to_data();
    Got {
        dtype,
        shape: leaf.shape().to_vec(),
        data: data.iter::<f64>().collect(),
    }
}

/// Outputs of a transformed call, keyed as `expected` is: `out`, `out['p']`, `grads[1]`, ...
/// `None`: the output is None (absent).
pub(crate) type Outputs = BTreeMap<String, Option<Got>>;

/// Adds the leaves of the output `pt` named `name`, keyed by their JAX `keystr` paths.
pub(crate) fn collect_outputs(name: &str, pt: Pt, out: &mut Outputs) {
    match pt {
        Pt::Leaf(l) => {
            out.insert(name.to_owned(), Some(read_leaf(l)));
        }
        Pt::Dict(m) => m
            .into_iter()
            .for_each(|(k, v)| collect_outputs(&format!("{name}['{k}']"), v, out)),
        Pt::Tuple(v) => v
            .into_iter()
            .enumerate()
            .for_each(|(i, x)| collect_outputs(&format!("{name}[{i}]"), x, out)),
    }
}

/// What a transformed call gave: outputs, or the library's error.
pub(crate) enum Run {
    Outputs(Outputs),
    Error(VmapError),
}
