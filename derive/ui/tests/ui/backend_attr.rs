use burn::tensor::Tensor;
use burn_vmap::Tree;

// Burn 0.21's `#[tree(backend = B)]`: Burn 0.22 tensors carry no backend.
#[derive(Tree)]
#[tree(backend = B)]
struct Model {
    weight: Tensor<2>,
}

fn main() {}
