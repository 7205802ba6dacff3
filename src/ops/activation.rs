//! `ActivationOps` for `Vmap<B>`.
//!
//! Elementwise activations and their backward ops go to the inner backend's own kernels (which
//! `Autodiff<B>` calls too), batched or not: they act on each element, so the batch dims pass
//! through. Activations along a dim (softmax, ...) and `prelu` keep Burn's defaults, which
//! decompose into float ops whose batching rules apply.

use burn_backend::Scalar;
use burn_backend::backend::Backend;
use burn_backend::ops::ActivationOps;
use burn_backend::tensor::FloatTensor;

use super::macros::*;
use crate::Vmap;
use crate::physical::Float;
use crate::rules::elementwise;

/// Backward ops of two operands of the logical shape: an operand missing a batch level is
/// expanded, since backends need not broadcast here.
macro_rules! activation_backward_ops {
    ($($name:ident),* $(,)?) => {
        $(
            fn $name(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
                unbatched!(x, grad => B::$name(x, grad));
                elementwise::binary_materialized::<B, Float, Float, _>(x, grad, |x, g, _| B::$name(x, g))
            }
        )*
    };
}

impl<B: Backend> ActivationOps<Self> for Vmap<B> {
    unary_ops!(FloatTensor; relu, gelu, sigmoid, log_sigmoid);
    activation_backward_ops!(
        relu_backward,
        gelu_backward,
        sigmoid_backward,
        log_sigmoid_backward
    );

    fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::leaky_relu(t, negative_slope))
    }

    fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self> {
        elementwise::unary(tensor, |t| B::hard_sigmoid(t, alpha, beta))
    }
}
