use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

#[derive(Tree)]
#[tree(backend = C)]
struct Model<B: Backend> {
    weight: Tensor<B, 2>,
}

fn main() {}
