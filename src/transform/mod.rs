//! The transforms: [`vmap`] and per-example gradients.

pub mod auto;
mod axes;
pub mod chunked;
pub mod custom;
pub mod grad;
pub mod micro;
pub mod scan;
pub mod vmap;

pub use axes::Axes;

/// Declares a method with the signature that the calls of the vectorizing transforms share
/// (`vmap`, `chunked_vmap`, `auto_vmap`, `micro_vmap` and the [`VmapFn`](micro::VmapFn)
/// vectorizers), written once. The method gains the type parameters
///
/// - `BI`, `BO`: the backends of the arguments and of the results (`Vmap<_>`, or `Autodiff`
///   over it);
/// - `I`: the argument tree the call takes (its leaves with their batch axes);
/// - `A`: what the mapped function `f` takes (the mapped axes removed);
/// - `R`: what `f` returns;
/// - `O`: the result of the call (the batch axes inserted),
///
/// then its own (`fn apply<F>`), with `F: Fn(A) -> R` (`F` is the builder's function type, or
/// the method's own). Extra bounds go in brackets before `fn`:
///
/// ```text
/// vectorized! {
///     /// Docs.
///     [S: Tree<BO> + Clone]
///     pub fn call(&self, inputs: I) -> Result<O, VmapError> { .. }
/// }
/// ```
macro_rules! vectorized {
    ($(#[$attr:meta])* $([$($bound:tt)*])? pub fn $($rest:tt)*) => {
        vectorized!(@emit [pub] [$(#[$attr])*] [$($($bound)*)?] $($rest)*);
    };
    ($(#[$attr:meta])* $([$($bound:tt)*])? fn $($rest:tt)*) => {
        vectorized!(@emit [] [$(#[$attr])*] [$($($bound)*)?] $($rest)*);
    };
    (
        @emit [$($vis:tt)*] [$($attr:tt)*] [$($bound:tt)*]
        $name:ident $(<$($param:ident),*>)? (&$self:ident $(, $arg:ident: $ty:ty)* $(,)?)
            -> Result<O, VmapError>
        $body:tt
    ) => {
        $($attr)*
        $($vis)* fn $name<BI, BO, I, A, R, O $($(, $param)*)?>(&$self $(, $arg: $ty)*)
            -> Result<O, $crate::VmapError>
        where
            BI: $crate::BatchOps,
            BO: $crate::BatchOps,
            F: Fn(A) -> R,
            I: $crate::tree::Tree<BI>,
            A: $crate::tree::Tree<BI>,
            R: $crate::tree::Tree<BO>,
            O: $crate::tree::Tree<BO>,
            $($bound)*
        $body
    };
}
pub(crate) use vectorized;

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
