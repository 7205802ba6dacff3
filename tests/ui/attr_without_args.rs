use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

#[derive(Tree)]
struct Model<B: Backend> {
    #[tree]
    weight: Tensor<B, 2>,
}

fn main() {}
