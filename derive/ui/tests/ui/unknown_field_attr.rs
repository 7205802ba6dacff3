use burn::tensor::Tensor;
use burn_vmap::Tree;

#[derive(Tree)]
struct Model {
    #[tree(flatten)]
    weight: Tensor<2>,
}

fn main() {}
