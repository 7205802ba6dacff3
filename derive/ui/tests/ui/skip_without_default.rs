use burn::tensor::Tensor;
use burn_vmap::Tree;

struct Handle(u32);

#[derive(Tree)]
struct Model {
    weight: Tensor<2>,
    #[tree(skip)]
    handle: Handle,
}

fn main() {}
