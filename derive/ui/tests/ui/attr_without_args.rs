use burn::tensor::Tensor;
use burn_vmap::Tree;

#[derive(Tree)]
struct Model {
    #[tree]
    weight: Tensor<2>,
}

fn main() {}
