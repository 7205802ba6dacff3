use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

#[derive(Tree)]
struct Model<B: Backend> {
    weight: Tensor<B, 2>,
    #[tree(skip, static)]
    name: String,
}

fn main() {}
