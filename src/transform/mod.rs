//! The transforms, one module each; the transform functions are re-exported here
//! (`burn_vmap::transform::scan`), their builders and helper types stay in their module
//! (`burn_vmap::transform::scan::Scan`).
//!
//! | module | transforms |
//! |---|---|
//! | [`vmap`](mod@vmap) | [`vmap`](fn@vmap) (JAX's `jax.vmap`) and its builder [`Vmapped`](vmap::Vmapped) |
//! | [`chunked`] | [`chunked_vmap`]: vmap over at most `chunk_size` examples at a time |
//! | [`auto`] | [`auto_vmap`]: broadcast over leading batch dims by base ranks |
//! | [`custom`] | [`custom_vmap`] (a user batching rule) and [`sequential_vmap`] (the loop as the rule) |
//! | [`scan`](mod@scan) | [`scan`](fn@scan), [`sliced_scan`], [`checkpoint_chunked_scan`] |
//! | [`micro`] | [`micro_vmap`](micro::micro_vmap), [`micro_grad`](micro::micro_grad), [`micro_grad_module`](micro::micro_grad_module), the vectorizers they run and the per-example gradient functions |
//! | [`grad`] | [`per_example_grads`](grad::per_example_grads) and [`ParamGrads`](grad::ParamGrads) |
//!
//! [`Axes`] is the type of `in_axes` / `out_axes`.

pub mod auto;
mod axes;
pub mod chunked;
pub mod custom;
pub mod grad;
pub mod micro;
pub mod scan;
pub mod vmap;

pub use auto::auto_vmap;
pub use axes::Axes;
pub use chunked::chunked_vmap;
pub use custom::{custom_vmap, sequential_vmap};
pub use scan::{checkpoint_chunked_scan, scan, sliced_scan};
pub use vmap::vmap;

/// Declares a transform's call with the generic signature of its family, written once here
/// (Rust has no trait aliases, and these bound lists are long). `transform_call! { family; item }`
/// gives the item the family's type parameters and bounds, then the item's own (`fn apply<F>`);
/// extra bounds go in brackets before `fn`. The families:
///
/// - `vectorized`: `vmap`, `chunked_vmap`, `auto_vmap`, `micro_vmap` and the
///   [`VmapFn`](micro::VmapFn) vectorizers. `BI`, `BO`: the backends of the arguments and of
///   the results; `I`: the argument tree of the call (with its batch axes); `A`: what the mapped
///   `f: F` takes (the mapped axes removed); `R`: what `f` returns; `O`: the result of the call
///   (the batch axes inserted).
/// - `lifted`: the inferring `call` of `vmap`, `chunked_vmap` and `micro_vmap`: as `vectorized`
///   without `O`, which the item names from `R` (`<R as Lift<BO>>::Lifted`; see
///   [`Lift`](crate::tree::Lift)).
/// - `scan`: `scan` and `sliced_scan` over the builder's `F`, `C`, `XS`. `B`: the backend; `X`:
///   one row of `XS`; `Y`: one step's output; `YS`: the stacked outputs.
/// - `micro_grad`: `micro_grad`'s calls over the builder's parts (`S`, `T`, `M`, `V`). `AB`: the
///   autodiff backend; `I`: the argument tuple; `A`: what `f` takes; `Out`: what `f` returns;
///   `G`: one example's raw gradient tree (the item adds `MO`, `XO` or the result types).
/// - `micro_grad_module`: the same for `micro_grad_module`, whose `f` takes the module `Mod`
///   first.
/// - `custom`: `custom_vmap` and its call. `B`: the backend; `A`, `R`: what `f` takes and
///   returns; `RO`, `OB`: what the rule returns (outputs, which are batched).
///
/// ```text
/// transform_call! {
///     vectorized;
///     /// Docs.
///     [S: Tree<BO> + Clone]
///     pub fn call(&self, inputs: I) -> Result<O, VmapError> { .. }
/// }
/// ```
macro_rules! transform_call {
    ($family:ident; $(#[$attr:meta])* $([$($bound:tt)*])? pub fn $($rest:tt)*) => {
        transform_call!(@parse $family [pub] [$(#[$attr])*] [$($($bound)*)?] $($rest)*);
    };
    ($family:ident; $(#[$attr:meta])* $([$($bound:tt)*])? fn $($rest:tt)*) => {
        transform_call!(@parse $family [] [$(#[$attr])*] [$($($bound)*)?] $($rest)*);
    };
    (@parse $family:ident $vis:tt $attr:tt $bound:tt
        $name:ident $(<$($param:ident),*>)? ($($args:tt)*) -> $ret:ty;) => {
        transform_call!(@$family $vis $attr $bound $name [$($($param)*)?] [$($args)*] [$ret] [;]);
    };
    (@parse $family:ident $vis:tt $attr:tt $bound:tt
        $name:ident $(<$($param:ident),*>)? ($($args:tt)*) -> $ret:ty $body:block) => {
        transform_call!(@$family $vis $attr $bound $name [$($($param)*)?] [$($args)*] [$ret] [$body]);
    };
    (@vectorized $($item:tt)*) => {
        transform_call!(@mapped [BI, BO, I, A, R, O] [O: $crate::tree::Tree<BO>,] $($item)*);
    };
    (@lifted $($item:tt)*) => {
        transform_call!(@mapped [BI, BO, I, A, R] [] $($item)*);
    };
    (@mapped [$($generic:ident),*] [$($extra:tt)*] $($item:tt)*) => {
        transform_call!(@emit [$($generic),*] [
            BI: $crate::BatchOps,
            BO: $crate::BatchOps,
            F: Fn(A) -> R,
            I: $crate::tree::Tree<BI>,
            A: $crate::tree::Tree<BI>,
            R: $crate::tree::Tree<BO>,
            $($extra)*
        ] $($item)*);
    };
    (@scan $($item:tt)*) => {
        transform_call!(@emit [B, X, Y, YS] [
            B: burn_backend::backend::Backend,
            C: $crate::tree::Tree<B>,
            XS: $crate::tree::Tree<B>,
            X: $crate::tree::Tree<B>,
            Y: $crate::tree::Tree<B>,
            YS: $crate::tree::Tree<B>,
            F: Fn(C, X) -> (C, Y),
        ] $($item)*);
    };
    (@micro_grad $($item:tt)*) => {
        transform_call!(@micro [AB, I, A, Out, G] [F: Fn(A) -> Out,] $($item)*);
    };
    (@micro_grad_module $($item:tt)*) => {
        transform_call!(@micro [AB, Mod, I, A, Out] [
            Mod: burn::module::AutodiffModule<AB>,
            F: Fn(&Mod, A) -> Out,
        ] $($item)*);
    };
    (@micro [$($generic:ident),*] [$($f_bound:tt)*] $($item:tt)*) => {
        transform_call!(@emit [$($generic),*] [
            AB: burn::tensor::backend::AutodiffBackend + $crate::BatchOps,
            AB::InnerBackend: $crate::BatchOps,
            $($f_bound)*
            I: $crate::tree::Tree<AB>,
            A: $crate::tree::Tree<AB>,
            Out: $crate::transform::micro::LossOutput<AB>,
            S: $crate::tree::Tree<AB::InnerBackend> + Clone,
            T: $crate::transform::micro::GradFn<AB::InnerBackend>,
            M: $crate::transform::micro::GradFn<AB::InnerBackend>,
            V: $crate::transform::micro::VmapFn,
        ] $($item)*);
    };
    (@custom $($item:tt)*) => {
        transform_call!(@emit [B, A, R, RO, OB] [
            B: $crate::BatchOps,
            A: $crate::tree::Tree<B>,
            R: $crate::tree::Tree<B>,
            RO: $crate::tree::Tree<B>,
            OB: Into<$crate::tree::Spec<bool>>,
            F: Fn(A) -> R,
            Rule: Fn(usize, &[bool], $crate::tree::DynTree<B>)
                -> Result<(RO, OB), $crate::VmapError>,
        ] $($item)*);
    };
    (@emit [$($generic:ident),*] [$($family_bound:tt)*] [$($vis:tt)*] [$($attr:tt)*]
        [$($bound:tt)*] $name:ident [$($param:ident)*] [$($args:tt)*] [$ret:ty] [$($body:tt)*]) => {
        $($attr)*
        $($vis)* fn $name<$($generic,)* $($param),*>($($args)*) -> $ret
        where
            $($family_bound)*
            $($bound)*
        $($body)*
    };
}
pub(crate) use transform_call;

/// Rows of values (one row per step, chunk or example, each with one value per output leaf) as
/// columns (one per output leaf), each in row order.
pub(crate) fn columns<T>(rows: impl IntoIterator<Item = Vec<T>>, width: usize) -> Vec<Vec<T>> {
    let mut columns: Vec<Vec<T>> = (0..width).map(|_| Vec::new()).collect();
    for row in rows {
        for (col, value) in columns.iter_mut().zip(row) {
            col.push(value);
        }
    }
    columns
}
