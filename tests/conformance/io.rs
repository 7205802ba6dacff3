//! Building a case's inputs and reading a run's outputs.

use crate::*;

/// A tensor leaf on `B` holding `a` (float32 -> float, int32 -> int, bool -> bool; shape `[]` is
/// a rank-0 tensor).
pub(crate) fn input_leaf<B: Backend>(a: &Array, device: &B::Device) -> Leaf<B> {
    let data = match a.dtype {
        DType::F32 => TensorData::new(
            a.data.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            a.shape.clone(),
        ),
        DType::I32 => TensorData::new(
            a.data.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            a.shape.clone(),
        ),
        DType::Bool => TensorData::new(
            a.data.iter().map(|&x| x != 0.0).collect::<Vec<_>>(),
            a.shape.clone(),
        ),
    };
    match (a.dtype, a.shape.len()) {
        (DType::F32, 0) => pt(rank0::<B, Float>(data, device)),
        (DType::I32, 0) => pt(rank0::<B, Int>(data, device)),
        (DType::Bool, 0) => pt(rank0::<B, Bool>(data, device)),
        (DType::F32, r) => with_rank!(r, D => pt(Tensor::<B, D>::from_data(data, device))),
        (DType::I32, r) => with_rank!(r, D => pt(Tensor::<B, D, Int>::from_data(data, device))),
        (DType::Bool, r) => with_rank!(r, D => pt(Tensor::<B, D, Bool>::from_data(data, device))),
    }
    .leaf()
    .clone()
}

/// A rank-0 tensor holding the one value of `data`. `Tensor::from_data` refuses rank 0 and
/// NdArray cannot reshape to rank 0, but the backends accept rank-0 data: create it at the
/// dtype `from_data` picks for this kind.
pub(crate) fn rank0<B: Backend, K: BasicOps<B>>(
    data: TensorData,
    device: &B::Device,
) -> Tensor<B, 0, K> {
    let mut one = data.clone();
    one.shape = Shape::from(vec![1]);
    let dtype = Tensor::<B, 1, K>::from_data(one, device).dtype();
    Tensor::from_primitive(K::from_data(data, device, dtype))
}

pub(crate) fn build_arg<B: Backend>(
    case: &Case,
    spec: &ArgSpec,
    device: &B::Device,
) -> Result<Pt<B>, String> {
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

/// The positional arguments of the program, as listed by `args`.
pub(crate) fn build_args<B: Backend>(case: &Case) -> Result<Vec<Pt<B>>, String> {
    let device = Default::default();
    case.args
        .iter()
        .map(|s| build_arg(case, s, &device))
        .collect()
}

/// An output array read back from a tensor.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f64>,
}

pub(crate) fn read_leaf<B: Backend>(leaf: Leaf<B>) -> Got {
    let shape = leaf.shape().to_vec();
    let (dtype, data): (DType, TensorData) = match leaf {
        Leaf::Float(_) => (
            DType::F32,
            with_rank!(shape.len(), D => Pt::Leaf(leaf).f::<D>().into_data()),
        ),
        Leaf::Int(_) => (
            DType::I32,
            with_rank!(shape.len(), D => Pt::Leaf(leaf).i::<D>().into_data()),
        ),
        Leaf::Bool(_) => (
            DType::Bool,
            with_rank!(shape.len(), D => Pt::Leaf(leaf).get::<Tensor<B, D, Bool>>().int().into_data()),
        ),
    };
    Got {
        dtype,
        shape,
        data: data.iter::<f64>().collect(),
    }
}

/// Outputs of a transformed call, keyed as `expected` is: `out`, `out['p']`, `grads[1]`, ...
/// `None`: the output is None (absent).
pub(crate) type Outputs = BTreeMap<String, Option<Got>>;

/// Adds the leaves of the output `pt` named `name`, keyed by their JAX `keystr` paths.
pub(crate) fn collect_outputs<B: Backend>(name: &str, pt: Pt<B>, out: &mut Outputs) {
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
