//! A whole gradient as one host buffer: [`flatten_grads`], [`unflatten_grads`], and
//! [`all_reduce_grads`] (the two around one collective).

use std::time::Duration;

use burn_backend::ops::FloatTensorOps;
use burn_backend::{TensorData, TensorMetadata};
use burn_dispatch::Dispatch;

use super::{Collective, CollectiveError};
use crate::ParamGrads;
use crate::tree::Leaf;

/// Every gradient of `grads`, flattened (row-major) and concatenated in the parameters' order,
/// read back as `f32` values: the buffer one collective sums over the ranks.
///
/// Gradients on one device with one dtype are concatenated there and read back once; others
/// are read one by one. `f16`/`bf16` values convert to `f32` exactly; `f64` values are rounded
/// to `f32`.
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::distributed::{flatten_grads, unflatten_grads};
/// use burn_vmap::per_example_grads;
///
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let xs = Tensor::<2>::ones([4, 3], &device);
/// let loss = |m: &Linear, x: Tensor<1>| m.forward(x).sum();
/// let sum = per_example_grads(&model, xs, loss).unwrap().sum_batch();
///
/// let flat = flatten_grads(&sum);
/// assert_eq!(flat.len(), 3 * 2 + 2); // weight, then bias
/// let back = unflatten_grads(sum.clone(), &flat).unwrap();
/// assert_eq!(flatten_grads(&back), flat);
/// assert_eq!(back.paths().collect::<Vec<_>>(), ["weight", "bias"]);
/// ```
pub fn flatten_grads(grads: &ParamGrads) -> Vec<f32> {
    let leaves: Vec<&Leaf> = grads.iter().map(|(_, _, g)| g).collect();
    let Some(first) = leaves.first() else {
        return Vec::new();
    };
    let (dtype, device) = (first.dtype(), first.0.device());
    let uniform = leaves
        .iter()
        .all(|g| g.dtype() == dtype && g.0.device() == device);
    let read = |leaf: Leaf| {
        leaf.to_data()
            .try_into_vec_as::<f32>()
            .expect("flatten_grads: gradients convert to f32")
    };
    if uniform {
        let flat = leaves
            .into_iter()
            .map(|g| {
                let n = g.shape().num_elements();
                g.clone().reshape([n].into())
            })
            .collect();
        read(Leaf::cat(flat, 0))
    } else {
        leaves.into_iter().flat_map(|g| read(g.clone())).collect()
    }
}

/// Gradients shaped like `template` (same paths, ids, shapes, dtypes and devices) holding the
/// values of `flat`, in the order [`flatten_grads`] writes them.
///
/// # Errors
/// [`CollectiveError::Mismatch`] when `flat` does not hold exactly as many values as the
/// template's gradients.
pub fn unflatten_grads(template: ParamGrads, flat: &[f32]) -> Result<ParamGrads, CollectiveError> {
    let expected: usize = template
        .iter()
        .map(|(_, _, g)| g.shape().num_elements())
        .sum();
    if flat.len() != expected {
        return Err(CollectiveError::Mismatch {
            operation: "unflatten_grads",
            expected,
            got: flat.len(),
            rank: None,
        });
    }
    let mut offset = 0;
    Ok(template.map(|_, g| {
        let shape = g.shape();
        let n = shape.num_elements();
        let values = flat[offset..offset + n].to_vec();
        offset += n;
        let data = TensorData::new(values, shape).convert_dtype(g.dtype());
        Leaf(Dispatch::float_from_data(data, &g.0.device()))
    }))
}

/// Sums `grads` over every rank of `engine` in one collective: [`flatten_grads`], then
/// [`Collective::all_reduce_sum`], then [`unflatten_grads`]. Every rank gets the same bits.
///
/// ```
/// use std::time::Duration;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::distributed::{Local, all_reduce_grads, flatten_grads};
/// use burn_vmap::per_example_grads;
///
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let xs = Tensor::<2>::ones([4, 3], &device);
/// let sum = per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
///     .unwrap()
///     .sum_batch();
/// let total = all_reduce_grads(&Local, sum.clone(), Duration::from_secs(10)).unwrap();
/// assert_eq!(flatten_grads(&total), flatten_grads(&sum)); // one rank: the identity
/// ```
///
/// # Errors
/// Those of [`Collective::all_reduce_sum`]: a rank whose gradients hold another number of
/// values gives [`CollectiveError::Mismatch`] on every rank.
pub fn all_reduce_grads<C: Collective + ?Sized>(
    engine: &C,
    grads: ParamGrads,
    timeout: Duration,
) -> Result<ParamGrads, CollectiveError> {
    let mut flat = flatten_grads(&grads);
    engine.all_reduce_sum(&mut flat, timeout)?;
    unflatten_grads(grads, &flat)
}
