//! Which type parameter is the backend, and which field types mention type parameters.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{GenericParam, Generics, Ident, Type, TypeParamBound, WherePredicate};

/// Whether a bound's path ends in `Backend` (`Backend`, `burn::tensor::backend::Backend`).
fn is_backend_bound(bound: &TypeParamBound) -> bool {
    match bound {
        TypeParamBound::Trait(t) => t.path.segments.last().is_some_and(|s| s.ident == "Backend"),
        _ => false,
    }
}

/// The type parameter that is the backend: the one named by `#[tree(backend = B)]`, else the
/// one bounded by `Backend` (inline or in the where clause), else `None` (a fresh one is added).
pub(crate) fn backend_param(
    generics: &Generics,
    named: Option<&Ident>,
    type_name: &Ident,
) -> syn::Result<Option<Ident>> {
    let params: Vec<&Ident> = generics.type_params().map(|p| &p.ident).collect();
    if let Some(named) = named {
        if !params.contains(&named) {
            return Err(syn::Error::new(
                named.span(),
                format!("`#[tree(backend = {named})]`: `{named}` is not a type parameter of `{type_name}`"),
            ));
        }
        return Ok(Some(named.clone()));
    }
    let mut found: Vec<&Ident> = Vec::new();
    for param in generics.type_params() {
        if param.bounds.iter().any(is_backend_bound) && !found.contains(&&param.ident) {
            found.push(&param.ident);
        }
    }
    if let Some(wc) = &generics.where_clause {
        for pred in &wc.predicates {
            if let WherePredicate::Type(p) = pred {
                if let Type::Path(tp) = &p.bounded_ty {
                    if let Some(id) = tp.path.get_ident() {
                        if params.contains(&id)
                            && p.bounds.iter().any(is_backend_bound)
                            && !found.contains(&id)
                        {
                            found.push(id);
                        }
                    }
                }
            }
        }
    }
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some((*one).clone())),
        [_, second, ..] => Err(syn::Error::new(
            second.span(),
            format!(
                "`{type_name}` has several type parameters bounded by `Backend`; name the one \
                 the tree lives on with `#[tree(backend = {second})]`"
            ),
        )),
    }
}

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

/// The type parameters of `generics` other than `backend`.
pub(crate) fn leaf_params(generics: &Generics, backend: Option<&Ident>) -> Vec<Ident> {
    generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Type(t) if Some(&t.ident) != backend => Some(t.ident.clone()),
            _ => None,
        })
        .collect()
}
