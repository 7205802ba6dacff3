//! [`Lift`]: the type a tree has once every tensor in it gains a leading (batch) axis, so that
//! a transform's result type follows from its function's output type.

use std::collections::BTreeMap;

use burn::tensor::Tensor;
use burn::tensor::kind::{Basic, TensorKind};

use super::{DynTree, Static, Tree};

/// The tree `Self` with one more leading axis on every tensor: what a vectorizing transform
/// returns when its function returns `Self` (`Tensor<D, K>` becomes `Tensor<D + 1, K>`).
///
/// Implemented for Burn's tensors of every kind up to rank [`MAX_RANK`](super::MAX_RANK) - 1,
/// `()`, tuples (up to 8), arrays, `Vec`, `Option`, `Box`, `BTreeMap<String, _>`; [`Static`]
/// and [`DynTree`] keep their type (their ranks live at run time); and structs with
/// `#[derive(Tree)]` whose tree fields have generic types (`struct Stats<M, V> { mean: M, var:
/// V }` lifts to `Stats<M::Lifted, V::Lifted>`).
///
/// A type without a lifted form (a struct with concrete tensor fields) has its batched type
/// named where it is used instead.
///
/// ```
/// use burn::tensor::{Device, Int, Tensor};
/// use burn_vmap::tree::Lift;
/// use burn_vmap::Tree;
///
/// #[derive(Tree)]
/// struct Stats<M, V> {
///     mean: M,
///     count: V,
/// }
///
/// fn lifted<T: Lift>(_: T) -> std::marker::PhantomData<T::Lifted> {
///     std::marker::PhantomData
/// }
/// let device = Device::default();
/// let _: std::marker::PhantomData<(Tensor<2>, Vec<Tensor<3, Int>>)> =
///     lifted((Tensor::<1>::zeros([3], &device), vec![Tensor::<2, Int>::zeros([2, 2], &device)]));
/// let stats = Stats { mean: Tensor::<1>::zeros([3], &device), count: Tensor::<1, Int>::zeros([1], &device) };
/// let _: std::marker::PhantomData<Stats<Tensor<2>, Tensor<2, Int>>> = lifted(stats);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no rank-lifted type, so the transform's result type cannot be inferred",
    note = "name the result type at the transform's call instead of inferring it",
    note = "or make the struct generic in its tensor types and `#[derive(Tree)]` it"
)]
pub trait Lift {
    /// `Self` with one more leading axis on every tensor.
    type Lifted: Tree;
}

macro_rules! lift_tensor {
    ($($d:literal => $e:literal),*) => {$(
        impl<K: TensorKind + Basic> Lift for Tensor<$d, K> {
            type Lifted = Tensor<$e, K>;
        }
    )*};
}
lift_tensor!(0 => 1, 1 => 2, 2 => 3, 3 => 4, 4 => 5, 5 => 6, 6 => 7, 7 => 8);

impl Lift for () {
    type Lifted = ();
}

macro_rules! lift_tuple {
    ($($t:ident),+) => {
        impl<$($t: Lift),+> Lift for ($($t,)+) {
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

impl<T: Lift> Lift for Vec<T> {
    type Lifted = Vec<T::Lifted>;
}
impl<T: Lift, const N: usize> Lift for [T; N] {
    type Lifted = [T::Lifted; N];
}
impl<T: Lift> Lift for Option<T> {
    type Lifted = Option<T::Lifted>;
}
impl<T: Lift> Lift for Box<T> {
    type Lifted = Box<T::Lifted>;
}
impl<T: Lift> Lift for BTreeMap<String, T> {
    type Lifted = BTreeMap<String, T::Lifted>;
}
impl<T: Clone + PartialEq + Send + Sync + 'static> Lift for Static<T> {
    type Lifted = Static<T>;
}
impl Lift for DynTree {
    type Lifted = DynTree;
}
