use burn::tensor::{Device, Tensor};
use burn_vmap::Tree;

#[derive(Tree)]
struct Stats<P, T> {
    per_example: P,
    total: T,
}

fn flatten<T: Tree>(t: T) -> usize {
    t.num_leaves()
}

fn main() {
    let device = Device::default();
    let s = Stats { per_example: Tensor::<1>::zeros([2], &device), total: 3_u32 };
    flatten(s);
}
