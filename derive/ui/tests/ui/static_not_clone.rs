use burn::tensor::Tensor;
use burn_vmap::Tree;

#[derive(PartialEq)]
struct Config(u32);

#[derive(Tree)]
struct Model {
    weight: Tensor<2>,
    #[tree(static)]
    config: Config,
}

fn main() {}
