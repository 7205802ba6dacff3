use burn::tensor::Tensor;
use burn_vmap::{testing::TestBackend, Tree};

#[derive(Tree)]
struct Stats<P, T> {
    per_example: P,
    total: T,
}

fn flatten<T: Tree<TestBackend>>(t: T) -> usize {
    t.num_leaves()
}

fn main() {
    let device = Default::default();
    let s = Stats { per_example: Tensor::<TestBackend, 1>::zeros([2], &device), total: 3_u32 };
    flatten(s);
}
