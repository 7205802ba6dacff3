use burn::tensor::Tensor;
use burn_vmap::Tree;

#[derive(Tree)]
enum Layer {
    Dense(Tensor<2>),
    Identity,
}

fn main() {}
