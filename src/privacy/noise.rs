//! Gaussian noise for DP-SGD, drawn on the host from the [`PrivacyRng`] and uploaded.

use burn::tensor::{TensorData, TensorPrimitive};
use burn_backend::TensorMetadata;
use burn_backend::backend::Backend;
use rand_distr::{Distribution, Normal, StandardNormal};

use super::{PrivacyError, PrivacyRng};
use crate::transform::grad::ParamGrads;

/// Adds independent Gaussian noise `N(0, std²)` to every coordinate of every gradient in
/// `grads`, drawn from `rng` on the host (never from Burn's tensor RNG, which is process-global
/// and seedable) and uploaded to each gradient's device.
///
/// For DP-SGD the noise goes on the SUM of the clipped per-example gradients, whose sensitivity
/// to one example is the clipping norm `C`: `std = σ · C` ([`DpSgd`](super::DpSgd) does this).
///
/// ```
/// use burn::backend::Autodiff;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_vmap::privacy::{add_gaussian_noise, PrivacyRng};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{ParamGrads, Vmap};
/// type I = Vmap<TestBackend>;
/// type AD = Autodiff<I>;
/// let device = Default::default();
/// let model: Linear<AD> = LinearConfig::new(3, 2).init(&device);
/// let loss = model.forward(Tensor::<AD, 2>::ones([1, 3], &device)).sum();
/// let grads = ParamGrads::<I>::from_module(&mut loss.backward(), &model);
/// let noisy = add_gaussian_noise(grads.clone(), 0.5, &mut PrivacyRng::seeded(1)).unwrap();
/// let (a, b): (Tensor<I, 2>, Tensor<I, 2>) = (grads.get("weight").unwrap(), noisy.get("weight").unwrap());
/// assert_ne!(a.into_data(), b.into_data());
/// ```
///
/// # Errors
/// [`PrivacyError::Argument`] for a negative or non-finite `std`.
pub fn add_gaussian_noise<B: Backend>(
    grads: ParamGrads<B>,
    std: f64,
    rng: &mut PrivacyRng,
) -> Result<ParamGrads<B>, PrivacyError> {
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
        let t = g.tensor();
        let shape = t.shape();
        // Standard normals (ziggurat) scaled: f32, as the gradients are.
        let values: Vec<f32> = (0..shape.num_elements())
            .map(|_| {
                let z: f32 = StandardNormal.sample(rng.rng());
                z * std
            })
            .collect();
        let data = TensorData::new(values, shape).convert_dtype(t.dtype());
        let noise = B::float_from_data(data, &B::float_device(&t));
        TensorPrimitive::Float(B::float_add(t, noise))
    }))
}
