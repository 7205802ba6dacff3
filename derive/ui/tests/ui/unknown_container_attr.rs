use burn::tensor::Tensor;
use burn_vmap::Tree;

#[derive(Tree)]
#[tree(skip)]
struct Model {
    weight: Tensor<2>,
}

fn main() {}
