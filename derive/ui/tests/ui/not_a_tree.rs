use burn::tensor::Tensor;
use burn_vmap::Tree;

#[derive(Tree)]
struct Model {
    weight: Tensor<2>,
    name: String,
}

fn main() {}
