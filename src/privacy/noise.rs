//! Gaussian noise for DP-SGD, drawn on the host from the [`PrivacyRng`] and uploaded.

use burn::tensor::{Tensor, TensorData};
use rand_distr::{Distribution, Normal, StandardNormal};

use super::{PrivacyError, PrivacyRng};
use crate::transform::grad::ParamGrads;
use crate::tree::Leaf;

/// Adds independent Gaussian noise `N(0, std²)` to every coordinate of every gradient in
/// `grads`, drawn from `rng` on the host (never from Burn's tensor RNG, which is process-global
/// and seedable) and uploaded to each gradient's device.
///
/// For DP-SGD the noise goes on the SUM of the clipped per-example gradients, whose sensitivity
/// to one example is the clipping norm `C`: `std = σ · C` ([`DpSgd`](super::DpSgd) does this).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::per_example_grads;
/// use burn_vmap::privacy::{add_gaussian_noise, PrivacyRng};
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let xs = Tensor::<2>::ones([4, 3], &device);
/// let grads = per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
///     .unwrap()
///     .sum_batch();
/// let noisy = add_gaussian_noise(grads.clone(), 0.5, &mut PrivacyRng::seeded(1)).unwrap();
/// let (a, b): (Tensor<2>, Tensor<2>) = (grads.get("weight").unwrap(), noisy.get("weight").unwrap());
/// assert_ne!(a.into_data(), b.into_data());
/// ```
///
/// # Errors
/// [`PrivacyError::Argument`] for a negative or non-finite `std`.
pub fn add_gaussian_noise(
    grads: ParamGrads,
    std: f64,
    rng: &mut PrivacyRng,
) -> Result<ParamGrads, PrivacyError> {
    Normal::new(0.0, std)
        .ok()
        .filter(|_| std.is_finite())
        .ok_or_else(|| PrivacyError::Argument {
            argument: "std",
            expected: "a finite standard deviation >= 0",
            got: std.to_string(),
        })?;
    let std = std as f32;
    Ok(grads.map(|_, g| {
        let shape = g.shape();
        // Standard normals (ziggurat) scaled: f32, as the gradients are.
        let values: Vec<f32> = (0..shape.num_elements())
            .map(|_| {
                let z: f32 = StandardNormal.sample(rng.rng());
                z * std
            })
            .collect();
        let data = TensorData::new(values, [shape.num_elements()]).convert_dtype(g.dtype());
        let flat = |leaf: Leaf| -> Tensor<1> {
            let n = leaf.shape().num_elements();
            leaf.reshape([n].into())
                .into_tensor()
                .expect("a float gradient")
        };
        let noise = Tensor::<1>::from_data(data, &g.device());
        Leaf::new(flat(g) + noise).reshape(shape)
    }))
}
