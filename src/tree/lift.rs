//! [`Lift`]: the type a tree has once every tensor in it gains a leading (batch) axis, so that
//! a transform's result type follows from its function's output type.

use std::collections::BTreeMap;

use burn::tensor::{Bool, Float, Int, Tensor};
use burn_backend::backend::Backend;

use super::{DynTree, Static, Tree};
use crate::transform::grad::ParamGrads;

/// The tree `Self` with one more leading axis on every tensor, on the backend `B`: what a
/// vectorizing transform returns when its function returns `Self` (`Tensor<B, D>` becomes
/// `Tensor<B, D + 1>`).
///
/// Implemented for Burn's tensors of every kind up to rank [`MAX_RANK`](super::MAX_RANK) - 1,
/// `()`, tuples (up to 8), arrays, `Vec`, `Option`, `Box`, `BTreeMap<String, _>`; [`Static`],
/// [`DynTree`] and [`ParamGrads`] keep their type (their ranks live at run time); and structs
/// with `#[derive(Tree)]` whose tensor fields have generic types (`struct Stats<M, V> { mean:
/// M, var: V }` lifts to `Stats<M::Lifted, V::Lifted>`).
///
/// A type without a lifted form (a struct with concrete tensor fields, or an output some of
/// whose leaves are not mapped, `out_axes` `None`) is named at the call instead:
/// `let out: MyStats<B> = vmap(f).call_as(xs)?`.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::tree::Lift;
/// use burn_vmap::Vmap;
/// type B = Vmap<TestBackend>;
/// fn lifted<T: Lift<B>>(_: T) -> std::marker::PhantomData<T::Lifted> {
///     std::marker::PhantomData
/// }
/// let device = Default::default();
/// let _: std::marker::PhantomData<(Tensor<B, 2>, Vec<Tensor<B, 3>>)> =
///     lifted((Tensor::<B, 1>::zeros([3], &device), vec![Tensor::<B, 2>::zeros([2, 2], &device)]));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no rank-lifted type, so the transform's result type cannot be inferred",
    note = "name the result type with `call_as`: `let out: MyType = vmap(f).call_as(xs)?`",
    note = "or make the struct generic in its tensor types and `#[derive(Tree)]` it"
)]
pub trait Lift<B: Backend> {
    /// `Self` with one more leading axis on every tensor, on `B`.
    type Lifted: Tree<B>;
}

macro_rules! lift_tensor {
    ($($d:literal => $e:literal),*) => {$(
        impl<B0: Backend, B: Backend> Lift<B> for Tensor<B0, $d, Float> {
            type Lifted = Tensor<B, $e, Float>;
        }
        impl<B0: Backend, B: Backend> Lift<B> for Tensor<B0, $d, Int> {
            type Lifted = Tensor<B, $e, Int>;
        }
        impl<B0: Backend, B: Backend> Lift<B> for Tensor<B0, $d, Bool> {
            type Lifted = Tensor<B, $e, Bool>;
        }
    )*};
}
lift_tensor!(0 => 1, 1 => 2, 2 => 3, 3 => 4, 4 => 5, 5 => 6, 6 => 7, 7 => 8);

impl<B: Backend> Lift<B> for () {
    type Lifted = ();
}

macro_rules! lift_tuple {
    ($($t:ident),+) => {
        impl<B: Backend, $($t: Lift<B>),+> Lift<B> for ($($t,)+) {
            type Lifted = ($($t::Lifted,)+);
        }
    };
}
lift_tuple!(T0);
lift_tuple!(T0, T1);
lift_tuple!(T0, T1, T2);
lift_tuple!(T0, T1, T2, T3);
lift_tuple!(T0, T1, T2, T3, T4);
lift_tuple!(T0, T1, T2, T3, T4, T5);
lift_tuple!(T0, T1, T2, T3, T4, T5, T6);
lift_tuple!(T0, T1, T2, T3, T4, T5, T6, T7);

impl<B: Backend, T: Lift<B>> Lift<B> for Vec<T> {
    type Lifted = Vec<T::Lifted>;
}
impl<B: Backend, T: Lift<B>, const N: usize> Lift<B> for [T; N] {
    type Lifted = [T::Lifted; N];
}
impl<B: Backend, T: Lift<B>> Lift<B> for Option<T> {
    type Lifted = Option<T::Lifted>;
}
impl<B: Backend, T: Lift<B>> Lift<B> for Box<T> {
    type Lifted = Box<T::Lifted>;
}
impl<B: Backend, T: Lift<B>> Lift<B> for BTreeMap<String, T> {
    type Lifted = BTreeMap<String, T::Lifted>;
}
impl<B: Backend, T: Clone + PartialEq + Send + Sync + 'static> Lift<B> for Static<T> {
    type Lifted = Static<T>;
}
impl<B0: Backend, B: Backend> Lift<B> for DynTree<B0> {
    type Lifted = DynTree<B>;
}
impl<B0: Backend, B: Backend> Lift<B> for ParamGrads<B0> {
    type Lifted = ParamGrads<B>;
}
