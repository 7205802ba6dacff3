use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

#[derive(PartialEq)]
struct Config(u32);

#[derive(Tree)]
struct Model<B: Backend> {
    weight: Tensor<B, 2>,
    #[tree(static)]
    config: Config,
}

fn main() {}
