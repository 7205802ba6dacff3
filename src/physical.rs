//! The physical ops of each tensor kind: what batching needs from the inner backend.
//!
//! Rules and level moves work on inner (physical) tensors of three kinds, float, int and bool,
//! whose backend methods have different names (`float_reshape`, `int_reshape`, ...). [`Kind`]
//! gives them one name per op, so a rule is written once, generic over the kind. The layout
//! helpers here ([`with_batch_sizes`], [`move_dim`]) are the moves that both the rules and the
//! level moves of [`BatchOps`](crate::BatchOps) make.

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use crate::tensor::BatchDims;

/// The float tensor kind (Burn 0.22's backend crate has no kind markers: `burn::tensor`'s
/// `Float` belongs to the typed API).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Float;
/// The int tensor kind.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Int;
/// The bool tensor kind.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bool;

/// Physical (inner backend) ops a rule needs, for each tensor kind.
pub(crate) trait Kind<B: Backend>: 'static {
    /// The inner primitive of this kind.
    type P: TensorMetadata<Device = B::Device> + 'static;
    fn reshape(t: Self::P, shape: Shape) -> Self::P;
    fn permute(t: Self::P, axes: &[usize]) -> Self::P;
    fn expand(t: Self::P, shape: Shape) -> Self::P;
    fn slice(t: Self::P, slices: &[Slice]) -> Self::P;
    fn gather(dim: usize, t: Self::P, indices: B::IntTensorPrimitive) -> Self::P;
    fn select(t: Self::P, dim: usize, indices: B::IntTensorPrimitive) -> Self::P;
    fn cat(ts: Vec<Self::P>, dim: usize) -> Self::P;
    fn repeat_dim(t: Self::P, dim: usize, times: usize) -> Self::P;
}

macro_rules! impl_kind {
    ($kind:ty, $prim:ident, $reshape:ident, $permute:ident, $expand:ident, $slice:ident, $gather:ident, $select:ident, $cat:ident, $repeat:ident) => {
        impl<B: Backend> Kind<B> for $kind {
            type P = B::$prim;
            #[inline]
            fn reshape(t: Self::P, shape: Shape) -> Self::P {
                B::$reshape(t, shape)
            }
            #[inline]
            fn permute(t: Self::P, axes: &[usize]) -> Self::P {
                B::$permute(t, axes)
            }
            #[inline]
            fn expand(t: Self::P, shape: Shape) -> Self::P {
                B::$expand(t, shape)
            }
            #[inline]
            fn slice(t: Self::P, slices: &[Slice]) -> Self::P {
                B::$slice(t, slices)
            }
            #[inline]
            fn gather(dim: usize, t: Self::P, indices: B::IntTensorPrimitive) -> Self::P {
                B::$gather(dim, t, indices)
            }
            #[inline]
            fn select(t: Self::P, dim: usize, indices: B::IntTensorPrimitive) -> Self::P {
                B::$select(t, dim, indices)
            }
            #[inline]
            fn cat(ts: Vec<Self::P>, dim: usize) -> Self::P {
                B::$cat(ts, dim)
            }
            #[inline]
            fn repeat_dim(t: Self::P, dim: usize, times: usize) -> Self::P {
                B::$repeat(t, dim, times)
            }
        }
    };
}

impl_kind!(
    Float,
    FloatTensorPrimitive,
    float_reshape,
    float_permute,
    float_expand,
    float_slice,
    float_gather,
    float_select,
    float_cat,
    float_repeat_dim
);
impl_kind!(
    Int,
    IntTensorPrimitive,
    int_reshape,
    int_permute,
    int_expand,
    int_slice,
    int_gather,
    int_select,
    int_cat,
    int_repeat_dim
);
impl_kind!(
    Bool,
    BoolTensorPrimitive,
    bool_reshape,
    bool_permute,
    bool_expand,
    bool_slice,
    bool_gather,
    bool_select,
    bool_cat,
    bool_repeat_dim
);

/// Physical shape `batch sizes ++ logical`, with a unit dim for logical rank 0 (see
/// [`VmapTensor`](crate::tensor::VmapTensor)'s physical layout).
pub(crate) fn with_batch_sizes(bdims: &BatchDims, logical: &[usize]) -> Shape {
    let unit: &[usize] = if logical.is_empty() { &[1] } else { &[] };
    bdims
        .sizes()
        .chain(logical.iter().copied())
        .chain(unit.iter().copied())
        .collect()
}

/// Moves physical dim `from` to position `to`, shifting the dims in between.
pub(crate) fn move_dim<B: Backend, K: Kind<B>>(t: K::P, from: usize, to: usize) -> K::P {
    if from == to {
        return t;
    }
    let rank = t.shape().num_dims();
    let mut axes: Vec<usize> = (0..rank).filter(|&d| d != from).collect();
    axes.insert(to, from);
    K::permute(t, &axes)
}
