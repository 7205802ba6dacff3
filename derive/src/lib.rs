//! `#[derive(Tree)]` for burn-vmap on Burn 0.22: user structs as pytrees of Burn tensors.
//!
//! Use it through the main crate (`use burn_vmap::Tree;` brings both the trait and the derive);
//! the trait's documentation holds the worked example. This crate only parses and dispatches:
//! the expansion lives in `expand`, attributes in `attr`, generic bounds in `bounds`. Every
//! error becomes a `compile_error!` at the span of the offending code.

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod attr;
mod bounds;
mod expand;

/// Derives `burn_vmap::Tree` for a struct (named fields, tuple fields, or unit).
///
/// Leaves are the fields in declaration order; the structure is
/// `TreeDef::Node { kind: NodeKind::Struct("Name"), keys, .. }` with `Key::Field(name)` (or
/// `Key::Index(i)` for tuple structs), so errors name paths such as `args.layer1.weight`.
///
/// - Burn 0.22 tensors carry no backend, so neither does the tree: the struct implements
///   `Tree` (no type parameter); `#[tree(backend = B)]` is a compile error.
/// - Field types that mention a type parameter get a `Tree` bound, so the same struct holds
///   tensors in one place and leaf-less trees (accumulators) in another. A struct whose tree
///   fields are all bare type parameters (`struct Stats<P, T> { a: P, b: T }`) also gets
///   `burn_vmap::tree::Lift` (`Stats<P::Lifted, T::Lifted>`).
/// - `#[tree(skip)]`: the field is not part of the tree and is rebuilt with `Default::default()`.
/// - `#[tree(static)]`: the field is carried in the structure as a static value, like
///   `burn_vmap::Static<T>` (needs `Clone + PartialEq + Send + Sync + 'static`).
///
/// Enums and unions are rejected with a compile error. See `burn_vmap::Tree` for a worked
/// example (global-norm clipping over a derived struct).
///
/// ```
/// use burn::tensor::{Device, Int, Tensor};
/// use burn_vmap::Tree;
///
/// #[derive(Tree)]
/// struct Batch {
///     images: Tensor<3>,
///     labels: Tensor<1, Int>,
///     #[tree(static)]
///     split: String,
///     #[tree(skip)]
///     cache: Vec<u8>,
/// }
///
/// let device = Device::default();
/// let batch = Batch {
///     images: Tensor::zeros([2, 4, 4], &device),
///     labels: Tensor::from_ints([1, 0], &device),
///     split: "train".into(),
///     cache: vec![1, 2, 3],
/// };
/// let (leaves, def) = batch.flatten();
/// assert_eq!(def.leaf_paths("batch"), ["batch.images", "batch.labels"]);
/// let back: Batch = Tree::unflatten(&def, leaves).unwrap();
/// assert_eq!((back.split.as_str(), back.cache.len()), ("train", 0));
/// ```
#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_tree(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
