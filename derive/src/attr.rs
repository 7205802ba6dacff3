//! The `#[tree(...)]` attributes.

use syn::Attribute;

/// How a field takes part in the tree.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A subtree (the default).
    Tree,
    /// `#[tree(skip)]`: not in the tree; rebuilt with `Default::default()`.
    Skip,
    /// `#[tree(static)]`: carried in the structure as a static value.
    Static,
}

/// Checks the container attributes: there are none any more. `#[tree(backend = B)]` (Burn
/// 0.21) is an error explaining why it went.
pub(crate) fn container(attrs: &[Attribute]) -> syn::Result<()> {
    for attr in attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("backend") {
                // Consume `= B` so that the error spans the whole `backend = B`.
                let _: syn::Type = meta.value()?.parse()?;
                Err(meta.error(
                    "`#[tree(backend = ...)]` is gone: Burn 0.22 tensors carry no backend \
                     (`Tensor<D, K>` dispatches on its device at run time), so a tree is not \
                     generic over one; remove the attribute",
                ))
            } else {
                Err(meta.error(
                    "unknown `tree` attribute on a struct; `#[tree(...)]` goes on fields \
                     (`#[tree(skip)]`, `#[tree(static)]`)",
                ))
            }
        })?;
    }
    Ok(())
}

pub(crate) fn field(attrs: &[Attribute]) -> syn::Result<Mode> {
    let mut mode = Mode::Tree;
    for attr in attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            let new = if meta.path.is_ident("skip") {
                Mode::Skip
            } else if meta.path.is_ident("static") {
                Mode::Static
            } else {
                return Err(meta.error(
                    "unknown `tree` attribute on a field; expected `#[tree(skip)]` or \
                     `#[tree(static)]`",
                ));
            };
            if mode != Mode::Tree {
                return Err(meta
                    .error("a field takes at most one of `#[tree(skip)]` and `#[tree(static)]`"));
            }
            mode = new;
            Ok(())
        })?;
    }
    Ok(mode)
}
