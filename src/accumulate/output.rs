//! [`AccOutput`]: the type an accumulator tree makes of a transform's per-example output type.

use super::{Concat, Mean, RunningMean, Sum, WideSum};
use crate::tree::{Lift, Tree};

/// The result type of accumulating per-example outputs of type `T` with the accumulator tree
/// `Self`, so that a microbatched transform's result needs no annotation.
///
/// [`Sum`], [`Mean`] and [`RunningMean`] keep `T` (an int output under `Mean` is averaged as
/// floats: name that result with `call_as`); [`Concat`] gives `T` with the batch axis
/// ([`Lift`]); a tuple of accumulators maps a tuple output element by element, and a struct
/// deriving [`Tree`](crate::Tree) whose tree fields are bare type parameters maps the same
/// struct field by field. Accumulator trees given another way (a [`Spec`](crate::tree::Spec),
/// a [`Custom`](super::Custom) accumulator) name the result at the call: `let out: O =
/// micro_vmap(f).accumulator(acc).call_as(xs)?`.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::{AccOutput, Concat, Sum};
/// fn result<S: AccOutput<T>, T>() -> std::marker::PhantomData<S::Output> {
///     std::marker::PhantomData
/// }
/// let _: std::marker::PhantomData<(Tensor<2>, Tensor<1>)> =
///     result::<(Concat, Sum), (Tensor<1>, Tensor<1>)>();
/// ```
#[diagnostic::on_unimplemented(
    message = "the result type of accumulating `{T}` with `{Self}` is not known from the types",
    note = "name the result with `call_as`: `let out: MyType = micro_vmap(f).accumulator(acc).call_as(xs)?`"
)]
pub trait AccOutput<T> {
    /// The accumulated result.
    type Output: Tree;
}

/// `AccOutput` of a reducing accumulator: the output's own type.
macro_rules! reducing_output {
    ($($acc:ty),*) => {$(
        impl<T: Tree> AccOutput<T> for $acc {
            type Output = T;
        }
    )*};
}
reducing_output!(Sum, WideSum, Mean, RunningMean);

impl<T: Lift> AccOutput<T> for Concat {
    type Output = T::Lifted;
}

/// `AccOutput` of a tuple of accumulators over a tuple output, element by element.
macro_rules! tuple_output {
    ($($a:ident $t:ident),+) => {
        impl<$($a: AccOutput<$t>, $t),+> AccOutput<($($t,)+)> for ($($a,)+) {
            type Output = ($($a::Output,)+);
        }
    };
}
tuple_output!(A0 T0);
tuple_output!(A0 T0, A1 T1);
tuple_output!(A0 T0, A1 T1, A2 T2);
tuple_output!(A0 T0, A1 T1, A2 T2, A3 T3);
tuple_output!(A0 T0, A1 T1, A2 T2, A3 T3, A4 T4);
tuple_output!(A0 T0, A1 T1, A2 T2, A3 T3, A4 T4, A5 T5);
tuple_output!(A0 T0, A1 T1, A2 T2, A3 T3, A4 T4, A5 T5, A6 T6);
tuple_output!(A0 T0, A1 T1, A2 T2, A3 T3, A4 T4, A5 T5, A6 T6, A7 T7);
