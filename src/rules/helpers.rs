//! Shared moves of the batching rules (functorch's `BatchRulesHelper.h`).
//!
//! Every rule sees physical tensors whose leading dims are batch dims sorted by level. The
//! helpers here do the moves that rules share: find the physical dim of a logical dim, align an
//! operand to a set of batch dims by inserting size-1 dims (cheap, relies on broadcasting), or
//! materialize missing batch dims with `expand`.

use burn_backend::backend::Backend;
use burn_backend::tensor::{Bool, Float, Int};
use burn_backend::{Shape, Slice, TensorMetadata};

use crate::tensor::{BatchDims, VmapTensor};

/// Physical (inner backend) ops a rule needs, for each tensor kind.
pub(crate) trait Kind<B: Backend>: 'static {
    /// The inner primitive of this kind.
    type P: TensorMetadata + 'static;
    fn reshape(t: Self::P, shape: Shape) -> Self::P;
    fn permute(t: Self::P, axes: &[usize]) -> Self::P;
    fn expand(t: Self::P, shape: Shape) -> Self::P;
    fn slice(t: Self::P, slices: &[Slice]) -> Self::P;
    fn gather(dim: usize, t: Self::P, indices: B::IntTensorPrimitive) -> Self::P;
    fn select(t: Self::P, dim: usize, indices: B::IntTensorPrimitive) -> Self::P;
    fn cat(ts: Vec<Self::P>, dim: usize) -> Self::P;
    /// The one element of `t` as a rank-0 tensor. Burn 0.21's NdArray cannot reshape to rank 0
    /// but creates rank-0 tensors from data: the value is read back and re-created.
    fn to_rank0(t: Self::P) -> Self::P;
}

macro_rules! impl_kind {
    ($kind:ty, $prim:ident, $reshape:ident, $permute:ident, $expand:ident, $slice:ident, $gather:ident, $select:ident, $cat:ident, $into_data:ident, $from_data:ident, $device:ident) => {
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
            fn to_rank0(t: Self::P) -> Self::P {
                let device = B::$device(&t);
                let mut data = burn::tensor::try_read_sync(B::$into_data(t))
                    .expect("vmap: reshape to rank 0: the backend cannot read data synchronously")
                    .expect("vmap: reshape to rank 0: reading the value failed");
                data.shape = Shape::from(Vec::<usize>::new());
                B::$from_data(data, &device)
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
    float_into_data,
    float_from_data,
    float_device
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
    int_into_data,
    int_from_data,
    int_device
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
    bool_into_data,
    bool_from_data,
    bool_device
);

/// Physical dim of logical dim `dim` (batch dims come first).
#[inline]
pub(crate) fn physical_dim(bdims: &BatchDims, dim: usize) -> usize {
    bdims.len() + dim
}

/// Shape `batch sizes ++ logical`.
pub(crate) fn with_batch_sizes(bdims: &BatchDims, logical: &[usize]) -> Shape {
    bdims.sizes().chain(logical.iter().copied()).collect()
}

/// Reshapes `t` so that its batch dims line up with `target` (a superset of its own), inserting
/// size-1 dims at the levels it lacks. No data moves; the backend's broadcasting does the rest.
pub(crate) fn align<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, target: &BatchDims) -> K::P {
    let (inner, bdims) = t.into_parts();
    if &bdims == target {
        return inner;
    }
    let shape = inner.shape();
    let logical = &shape[bdims.len()..];
    let dims: Shape = target
        .as_slice()
        .iter()
        .map(|d| {
            if bdims.position(d.level).is_some() {
                d.size
            } else {
                1
            }
        })
        .chain(logical.iter().copied())
        .collect();
    debug_assert!(bdims
        .as_slice()
        .iter()
        .all(|d| target.position(d.level).is_some()));
    K::reshape(inner, dims)
}

/// Like [`align`], then expands the inserted size-1 dims to the full batch sizes, for ops whose
/// backends do not broadcast.
pub(crate) fn materialize<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, target: &BatchDims) -> K::P {
    let missing = target.len() != t.bdims.len();
    let inner = align::<B, K>(t, target);
    if !missing {
        return inner;
    }
    let shape = inner.shape();
    let full = with_batch_sizes(target, &shape[target.len()..]);
    K::expand(inner, full)
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

/// Full slices for the batch dims, followed by the logical slices.
pub(crate) fn batch_slices(bdims: &BatchDims, slices: &[Slice]) -> Vec<Slice> {
    let mut out = Vec::with_capacity(bdims.len() + slices.len());
    out.extend(bdims.sizes().map(|_| Slice::new(0, None, 1)));
    out.extend_from_slice(slices);
    out
}

/// Axes `0..nb` followed by `axes + nb`.
pub(crate) fn batch_axes(bdims: &BatchDims, axes: &[usize]) -> Vec<usize> {
    let nb = bdims.len();
    (0..nb).chain(axes.iter().map(|a| a + nb)).collect()
}

/// Panic message prefix for a rule that cannot proceed.
#[track_caller]
pub(crate) fn vmap_panic(op: &str, why: &str, todo: &str) -> ! {
    panic!("vmap: {op}: {why}; {todo}")
}
