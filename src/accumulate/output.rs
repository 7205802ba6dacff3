//! [`AccOutput`]: the type an accumulator tree makes of a transform's per-example output type.

use burn_backend::backend::Backend;

use super::{Concat, Mean, RunningMean, Sum};
use crate::tree::{Lift, Tree};

/// The result type of accumulating per-example outputs of type `T` on the backend `B` with the
/// accumulator tree `Self`, so that a microbatched transform's result needs no annotation.
///
/// [`Sum`], [`Mean`] and [`RunningMean`] keep `T` (an int output under `Mean` is averaged as
/// floats: name that result with `call_as`); [`Concat`] gives `T` with the batch axis
/// ([`Lift`]); a tuple of accumulators maps a tuple output element by element. Accumulator trees
/// given another way (a [`Spec`](crate::tree::Spec), a [`Custom`](super::Custom) accumulator) name
/// the result at the call: `let out: O = micro_vmap(f).accumulator(acc).call_as(xs)?`.
#[diagnostic::on_unimplemented(
    message = "the result type of accumulating `{T}` with `{Self}` is not known from the types",
    note = "name the result with `call_as`: `let out: MyType = micro_vmap(f).accumulator(acc).call_as(xs)?`"
)]
pub trait AccOutput<B: Backend, T> {
    /// The accumulated result.
    type Output: Tree<B>;
}

macro_rules! reducing_output {
    ($($acc:ty),*) => {$(
        impl<B: Backend, T: Tree<B>> AccOutput<B, T> for $acc {
            type Output = T;
        }
    )*};
}
reducing_output!(Sum, Mean, RunningMean);

impl<B: Backend, T: Lift<B>> AccOutput<B, T> for Concat {
    type Output = T::Lifted;
}

macro_rules! tuple_output {
    ($($a:ident $t:ident),+) => {
        impl<B: Backend, $($a: AccOutput<B, $t>, $t),+> AccOutput<B, ($($t,)+)> for ($($a,)+) {
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
