//! `#[derive(Tree)]` for [burn-vmap](https://docs.rs/burn-vmap): user structs as pytrees of Burn
//! tensors.
//!
//! Use it through the main crate (`use burn_vmap::Tree;` brings both the trait and the derive);
//! the trait's documentation holds the worked example. This crate only parses and dispatches:
//! the expansion lives in `expand`, attributes in `attr`, generic bounds in `bounds`. Every
//! error becomes a `compile_error!` at the span of the offending code.

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

mod attr;
mod bounds;
mod expand;

/// Derives `burn_vmap::Tree<B>` for a struct (named fields, tuple fields, or unit).
///
/// Leaves are the fields in declaration order; the structure is
/// `TreeDef::Node { kind: NodeKind::Struct("Name"), keys, .. }` with `Key::Field(name)` (or
/// `Key::Index(i)` for tuple structs), so errors name paths such as `args.layer1.weight`.
///
/// - The backend is the type parameter bounded by `Backend` (`struct Mlp<B: Backend>`), the one
///   named by `#[tree(backend = B)]`, or else a fresh parameter: `struct Pair<T> { a: T, b: T }`
///   is a `Tree<B>` for every backend `B` for which `T: Tree<B>`.
/// - Field types that mention a type parameter other than the backend get a `Tree<B>` bound, so
///   the same struct holds tensors in one place and accumulators (leaf-less trees) in another.
/// - `#[tree(skip)]`: the field is not part of the tree and is rebuilt with `Default::default()`.
/// - `#[tree(static)]`: the field is carried in the structure as a static value, like
///   `burn_vmap::Static<T>` (needs `Clone + PartialEq + Send + Sync + 'static`).
///
/// Enums and unions are rejected with a compile error. See `burn_vmap::Tree` for a worked
/// example (per-example gradient clipping over a derived struct under `vmap`).
///
/// ```
/// use burn::tensor::{backend::Backend, Int, Tensor};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::Tree;
///
/// #[derive(Tree)]
/// struct Batch<B: Backend> {
///     images: Tensor<B, 3>,
///     labels: Tensor<B, 1, Int>,
///     #[tree(static)]
///     split: String,
///     #[tree(skip)]
///     cache: Vec<u8>,
/// }
///
/// let device = Default::default();
/// let batch = Batch::<TestBackend> {
///     images: Tensor::zeros([2, 4, 4], &device),
///     labels: Tensor::from_ints([1, 0], &device),
///     split: "train".into(),
///     cache: vec![1, 2, 3],
/// };
/// let (leaves, def) = batch.flatten();
/// assert_eq!(def.leaf_paths("batch"), ["batch.images", "batch.labels"]);
/// let back: Batch<TestBackend> = Tree::unflatten(&def, leaves).unwrap();
/// assert_eq!((back.split.as_str(), back.cache.len()), ("train", 0));
/// ```
#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_tree(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
