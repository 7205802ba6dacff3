//! The `#[tree(...)]` attributes.

use syn::{Attribute, Ident};

/// Container attributes: `#[tree(backend = B)]`.
#[derive(Default)]
pub(crate) struct Container {
    /// The type parameter that is the backend.
    pub(crate) backend: Option<Ident>,
}

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

pub(crate) fn container(attrs: &[Attribute]) -> syn::Result<Container> {
    let mut out = Container::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("backend") {
                let ident: Ident = meta.value()?.parse()?;
                if out.backend.is_some() {
                    return Err(meta.error("duplicate `backend` in `#[tree(...)]`"));
                }
                out.backend = Some(ident);
                Ok(())
            } else {
                Err(meta.error(
                    "unknown `tree` attribute on a struct; expected `#[tree(backend = B)]` \
                     (`skip` and `static` go on fields)",
                ))
            }
        })?;
    }
    Ok(out)
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
