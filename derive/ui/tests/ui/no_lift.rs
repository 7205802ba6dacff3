use burn::tensor::Tensor;
use burn_vmap::Tree;
use burn_vmap::tree::Lift;

// Concrete tensor fields: no lifted type is derived.
#[derive(Tree)]
struct Linear {
    weight: Tensor<2>,
    bias: Tensor<1>,
}

fn lifted<T: Lift>() {}

fn main() {
    lifted::<Linear>();
}
