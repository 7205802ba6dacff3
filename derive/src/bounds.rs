//! Which field types mention type parameters.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Generics, Ident, Type};

/// Whether `ty` mentions one of `params` (by identifier, anywhere in its tokens).
///
/// A false positive (a path segment that happens to share a parameter's name) only adds a
/// bound that holds anyway.
pub(crate) fn mentions(ty: &Type, params: &[Ident]) -> bool {
    fn go(tokens: TokenStream, params: &[Ident]) -> bool {
        tokens.into_iter().any(|tt| match tt {
            TokenTree::Ident(id) => params.contains(&id),
            TokenTree::Group(g) => go(g.stream(), params),
            _ => false,
        })
    }
    go(ty.to_token_stream(), params)
}

/// The type parameters of `generics`.
pub(crate) fn type_params(generics: &Generics) -> Vec<Ident> {
    generics.type_params().map(|t| t.ident.clone()).collect()
}
