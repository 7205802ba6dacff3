use burn::tensor::{backend::Backend, Tensor};
use burn_vmap::Tree;

struct Handle(u32);

#[derive(Tree)]
struct Model<B: Backend> {
    weight: Tensor<B, 2>,
    #[tree(skip)]
    handle: Handle,
}

fn main() {}
