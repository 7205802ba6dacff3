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
/// Enums and unions are rejected with a compile error. The examples run as doctests of the
/// main crate (this one has no dev-dependency on it: see `Cargo.toml`): on the derive's
/// re-export `burn_vmap::Tree` (the attributes above), and on the trait of that name
/// (global-norm clipping over a derived struct).
#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_tree(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
