//! The expansion of `#[derive(Tree)]`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Member, Type, parse_quote};

use crate::attr::{self, Mode};
use crate::bounds;

/// One field of the struct.
struct Field<'a> {
    member: Member,
    ty: &'a Type,
    mode: Mode,
}

pub(crate) fn derive_tree(input: &DeriveInput) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let data = match &input.data {
        Data::Struct(s) => s,
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                format!(
                    "#[derive(Tree)] supports structs, not enums: the leaves of a tree must not \
                     depend on a runtime variant; make `{name}` a struct (with `Option` fields) \
                     or implement `burn_vmap::Tree` by hand"
                ),
            ));
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "#[derive(Tree)] supports structs, not unions",
            ));
        }
    };
    attr::container(&input.attrs)?;

    let named = matches!(data.fields, Fields::Named(_));
    let fields = data
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            Ok(Field {
                member: match &f.ident {
                    Some(id) => Member::Named(id.clone()),
                    None => Member::Unnamed(i.into()),
                },
                ty: &f.ty,
                mode: attr::field(&f.attrs)?,
            })
        })
        .collect::<syn::Result<Vec<_>>>()?;

    let leaf_params = bounds::type_params(&input.generics);
    let private = quote!(::burn_vmap::tree::__private);

    let mut generics = input.generics.clone();
    {
        let wc = generics.make_where_clause();
        for f in &fields {
            if !bounds::mentions(f.ty, &leaf_params) {
                continue;
            }
            let ty = f.ty;
            wc.predicates.push(match f.mode {
                Mode::Tree => parse_quote!(#ty: ::burn_vmap::Tree),
                Mode::Static => parse_quote!(::burn_vmap::Static<#ty>: ::burn_vmap::Tree),
                Mode::Skip => parse_quote!(#ty: ::core::default::Default),
            });
        }
    }
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, ty_generics, _) = input.generics.split_for_impl();

    let name_str = name.to_string();
    let key = |m: &Member| match m {
        Member::Named(id) => {
            let s = id.to_string();
            quote!(::burn_vmap::tree::Key::Field(::std::string::String::from(#s)))
        }
        Member::Unnamed(i) => {
            let i = i.index as usize;
            quote!(::burn_vmap::tree::Key::Index(#i))
        }
    };

    // flatten_into: one (key, child) per field in the tree, in declaration order.
    let children = fields.iter().filter(|f| f.mode != Mode::Skip).map(|f| {
        let member = &f.member;
        let ty = f.ty;
        let key = key(member);
        let span = ty.span();
        match f.mode {
            Mode::Static => quote_spanned! {span=>
                (#key, <::burn_vmap::Static<#ty> as ::burn_vmap::Tree>::flatten_into(
                    ::burn_vmap::Static(self.#member), leaves))
            },
            _ => quote_spanned! {span=>
                (#key, <#ty as ::burn_vmap::Tree>::flatten_into(self.#member, leaves))
            },
        }
    });

    // unflatten_from: check the node, then rebuild every field from its child.
    let in_tree: Vec<&Field> = fields.iter().filter(|f| f.mode != Mode::Skip).collect();
    let check = if named {
        let names = in_tree.iter().map(|f| match &f.member {
            Member::Named(id) => id.to_string(),
            Member::Unnamed(i) => i.index.to_string(),
        });
        quote!(#private::named_children(def, #name_str, &[#(#names),*], leaves)?)
    } else {
        let indices = in_tree.iter().map(|f| match &f.member {
            Member::Unnamed(i) => i.index as usize,
            Member::Named(_) => 0,
        });
        quote!(#private::tuple_children(def, #name_str, &[#(#indices),*], leaves)?)
    };
    let mut child = 0usize;
    let inits = fields.iter().map(|f| {
        let member = &f.member;
        let ty = f.ty;
        let span = ty.span();
        let init = match f.mode {
            Mode::Skip => quote_spanned! {span=> <#ty as ::core::default::Default>::default() },
            Mode::Tree | Mode::Static => {
                let i = child;
                child += 1;
                let key = key(member);
                let rebuild = if f.mode == Mode::Static {
                    quote_spanned! {span=>
                        <::burn_vmap::Static<#ty> as ::burn_vmap::Tree>::unflatten_from(
                            &__children[#i], __leaves).map(|s| s.0)
                    }
                } else {
                    quote_spanned! {span=>
                        <#ty as ::burn_vmap::Tree>::unflatten_from(&__children[#i], __leaves)
                    }
                };
                quote!(leaves.with_key(#key, |__leaves| #rebuild)?)
            }
        };
        quote!(#member: #init)
    });
    let inits: Vec<TokenStream> = inits.collect();

    let leaves_ty = quote!(::std::vec::Vec<::burn_vmap::tree::Leaf>);
    let flatten_body = quote! {
        #private::struct_def(#name_str, ::std::vec![#(#children),*])
    };
    // `leaves` is unused for a struct without tree fields.
    let allow_unused = quote_spanned!(Span::call_site()=> #[allow(unused_variables)]);
    let type_maps = type_maps(input, &fields, &leaf_params);
    Ok(quote! {
        #type_maps

        #[automatically_derived]
        impl #impl_generics ::burn_vmap::Tree for #name #ty_generics #where_clause {
            #allow_unused
            fn flatten_into(self, leaves: &mut #leaves_ty) -> ::burn_vmap::tree::TreeDef {
                #flatten_body
            }

            #allow_unused
            fn unflatten_from(
                def: &::burn_vmap::tree::TreeDef,
                leaves: &mut ::burn_vmap::tree::Leaves,
            ) -> ::core::result::Result<Self, ::burn_vmap::VmapError> {
                let __children = #check;
                ::core::result::Result::Ok(Self { #(#inits),* })
            }
        }
    })
}

/// `Lift` and `AccOutput` for a struct whose tree fields are bare type parameters
/// (`struct Stats<P, T> { per_example: P, total: T }`), so a transform returning it, or
/// accumulating with it, needs no annotation: `Stats<P, T>` lifts to `Stats<P::Lifted,
/// T::Lifted>`, and as an accumulator tree maps `Stats<O0, O1>` to `Stats<P::Output,
/// T::Output>`. Other structs get neither (their callers name results with `call_as`).
fn type_maps(input: &DeriveInput, fields: &[Field], leaf_params: &[syn::Ident]) -> TokenStream {
    let name = &input.ident;
    let bare = |ty: &Type| match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .filter(|id| leaf_params.contains(id))
            .cloned(),
        _ => None,
    };
    let eligible = input.generics.lifetimes().next().is_none()
        && input.generics.const_params().next().is_none()
        && input
            .generics
            .type_params()
            .all(|p| p.bounds.is_empty() && p.default.is_none())
        && fields.iter().all(|f| match f.mode {
            Mode::Tree => bare(f.ty).is_some(),
            _ => !bounds::mentions(f.ty, leaf_params),
        })
        && leaf_params.iter().all(|p| {
            fields
                .iter()
                .any(|f| f.mode == Mode::Tree && bare(f.ty).as_ref() == Some(p))
        });
    if !eligible || leaf_params.is_empty() {
        return TokenStream::new();
    }
    let params = leaf_params;
    let outs: Vec<syn::Ident> = params.iter().map(|p| format_ident!("__Out{}", p)).collect();
    let where_extra = input
        .generics
        .where_clause
        .as_ref()
        .map(|w| {
            let preds = &w.predicates;
            quote!(#preds,)
        })
        .unwrap_or_default();
    quote! {
        #[automatically_derived]
        impl<#(#params),*> ::burn_vmap::tree::Lift for #name<#(#params),*>
        where
            #where_extra
            #(#params: ::burn_vmap::tree::Lift,)*
            #name<#(<#params as ::burn_vmap::tree::Lift>::Lifted),*>: ::burn_vmap::Tree,
        {
            type Lifted = #name<#(<#params as ::burn_vmap::tree::Lift>::Lifted),*>;
        }

        #[automatically_derived]
        impl<#(#params,)* #(#outs),*>
            ::burn_vmap::accumulate::AccOutput<#name<#(#outs),*>> for #name<#(#params),*>
        where
            #where_extra
            #(#params: ::burn_vmap::accumulate::AccOutput<#outs>,)*
            #name<#(<#params as ::burn_vmap::accumulate::AccOutput<#outs>>::Output),*>:
                ::burn_vmap::Tree,
        {
            type Output = #name<#(<#params as ::burn_vmap::accumulate::AccOutput<#outs>>::Output),*>;
        }
    }
}
