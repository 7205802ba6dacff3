use burn_vmap::Tree;

#[derive(Tree)]
union Bits {
    a: u32,
    b: f32,
}

fn main() {}
