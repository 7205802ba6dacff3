use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

#[derive(Tree)]
enum Layer<B: Backend> {
    Dense(Tensor<B, 2>),
    Identity,
}

fn main() {}
