//! Shared moves of the batching rules (functorch's `BatchRulesHelper.h`).
//!
//! Every rule sees physical tensors whose leading dims are batch dims sorted by level. The
//! helpers here do the moves that rules share: find the physical dim of a logical dim, align an
//! operand to a set of batch dims by inserting size-1 dims (cheap, relies on broadcasting), or
//! materialize missing batch dims with `expand`.

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use crate::compat;
use crate::physical::{Kind, with_batch_sizes};
use crate::tensor::{BatchDims, VmapTensor};

/// The inner `cat` of float tensors along `dim`; of one tensor, that tensor (a cat of one is a
/// copy: a launch on a GPU).
pub(crate) fn cat_floats<B: Backend>(
    mut tensors: Vec<B::FloatTensorPrimitive>,
    dim: usize,
) -> B::FloatTensorPrimitive {
    if tensors.len() == 1 {
        return tensors.pop().expect("one tensor");
    }
    B::float_cat(tensors, dim)
}

/// Physical dim of logical dim `dim` (batch dims come first).
#[inline]
pub(crate) fn physical_dim(bdims: &BatchDims, dim: usize) -> usize {
    bdims.len() + dim
}

/// `t` reduced along physical `dim` by `along` (a keep-dim reduction: sum, mean, product,
/// max, min, any, all), or `t` itself when that dim has size 1, where each of them is the
/// identity: a per-example squared norm from factors (`[b, 1, 1]`) is a reshape, not two ops.
#[inline]
pub(crate) fn reduce_unless_unit<P: TensorMetadata>(
    t: P,
    dim: usize,
    along: impl FnOnce(P, usize) -> P,
) -> P {
    if t.shape()[dim] == 1 {
        return t;
    }
    along(t, dim)
}

/// Reshapes `t` so that its batch dims line up with `target` (a superset of its own), inserting
/// size-1 dims at the levels it lacks. No data moves; the backend's broadcasting does the rest.
/// With an empty batch in `target` the inserted dims are expanded (to nothing, a view; see
/// [`compat::expand_empty_batch`]).
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
    debug_assert!(
        bdims
            .as_slice()
            .iter()
            .all(|d| target.position(d.level).is_some())
    );
    let aligned = K::reshape(inner, dims);
    compat::expand_empty_batch::<B, K>(aligned, target, logical)
}

/// Like [`align`], then expands the inserted size-1 dims to the full batch sizes, for ops whose
/// backends do not broadcast; the result is laid out for the backend's kernels (see
/// [`compat::kernel_layout`]).
pub(crate) fn materialize<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, target: &BatchDims) -> K::P {
    compat::kernel_layout::<B, K>(expanded::<B, K>(t, target, K::expand))
}

/// Like [`materialize`], for the operands of kernels that read every operand through its
/// strides, on every backend: an expanded or permuted view is passed as it is, not copied.
/// burn-cubecl 0.22.1's `scatter` kernels (`kernel/index/scatter.rs`, serial and atomic) read
/// their indices and values so.
pub(crate) fn materialize_view<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    target: &BatchDims,
) -> K::P {
    expanded::<B, K>(t, target, K::expand)
}

/// Like [`materialize`], for the tensor an op writes into (`slice_assign`, `scatter`,
/// `select_assign`), which the backend copies first: see [`compat::write_target`].
pub(crate) fn write_target<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    target: &BatchDims,
) -> K::P {
    // A constant (Burn's backward of `gather` scatters into zeros) is made at the batch shape.
    t.into_filled(target).unwrap_or_else(|t| {
        compat::kernel_layout::<B, K>(expanded::<B, K>(t, target, compat::write_target::<B, K>))
    })
}

/// [`align`], then `expand` of the inserted size-1 dims to the full batch sizes.
fn expanded<B: Backend, K: Kind<B>>(
    t: VmapTensor<K::P>,
    target: &BatchDims,
    expand: impl FnOnce(K::P, Shape) -> K::P,
) -> K::P {
    let missing = target.len() != t.bdims.len();
    let inner = align::<B, K>(t, target);
    if !missing {
        return inner;
    }
    let shape = inner.shape();
    let full = with_batch_sizes(target, &shape[target.len()..]);
    expand(inner, full)
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
