use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

#[derive(Tree)]
struct Model<B: Backend, C: Backend> {
    weight: Tensor<B, 2>,
    other: Tensor<C, 2>,
}

fn main() {}
