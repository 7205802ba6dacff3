//! A small model of burn-nn's gated and normalized layers after a `Linear`: `PRelu` (a weight
//! per channel), `SwiGlu` (two linear maps, one gating the other), `RmsNorm` and the
//! transformer's `PositionWiseFeedForward`. Shared by the layer tests (`nn_layers.rs`,
//! `factored/layers.rs`).

use burn::module::Module;
use burn::nn::transformer::{PositionWiseFeedForward, PositionWiseFeedForwardConfig};
use burn::nn::{
    Linear, LinearConfig, PRelu, PReluConfig, RmsNorm, RmsNormConfig, SwiGlu, SwiGluConfig,
};
use burn::tensor::{Device, Tensor};

/// `[rows, 5]` in, `[rows, 4]` out.
#[derive(Module, Debug)]
pub struct Gated {
    fc: Linear,
    prelu: PRelu,
    swiglu: SwiGlu,
    rms: RmsNorm,
    ff: PositionWiseFeedForward,
}

impl Gated {
    pub fn new(device: &Device) -> Self {
        Self {
            fc: LinearConfig::new(5, 6).init(device),
            prelu: PReluConfig::new().with_num_parameters(6).init(device),
            swiglu: SwiGluConfig::new(6, 4).with_bias(true).init(device),
            rms: RmsNormConfig::new(4).init(device),
            ff: PositionWiseFeedForwardConfig::new(4, 8)
                .with_dropout(0.0)
                .init(device),
        }
    }

    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h = self.prelu.forward(self.fc.forward(x));
        self.ff.forward(self.rms.forward(self.swiglu.forward(h)))
    }
}
