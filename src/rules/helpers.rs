//! Shared moves of the batching rules (functorch's `BatchRulesHelper.h`).
//!
//! Every rule sees physical tensors whose leading dims are batch dims sorted by level. The
//! helpers here do the moves that rules share: find the physical dim of a logical dim, align an
//! operand to a set of batch dims by inserting size-1 dims (cheap, relies on broadcasting), or
//! materialize missing batch dims with `expand`.

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use crate::physical::{with_batch_sizes, Kind};
use crate::tensor::{BatchDims, VmapTensor};

/// The backend's reshape, routed around a stride bug of Burn 0.21's cubecl backends (wgpu,
/// CUDA).
///
/// `burn_std::split_strides` never consumes the old shape's trailing size-1 dims, so a reshape
/// that raises the rank of a non-contiguous tensor whose last dim is 1 (other than prepending
/// unit dims) gets the strides of the wrong dims: `[1, 1, 2, 3]` permuted to `[3, 2, 1, 1]`
/// and reshaped to `[3, 2, 1, 1, 1]` reads `[1, 0, 0, 0, 0, 0]` instead of
/// `[1, 4, 2, 5, 3, 6]`. Batching rules make such tensors all the time (a batch dim moved to
/// the front, then size-1 dims inserted for missing levels), so every reshape of an inner
/// tensor goes through here:
///
/// - inserting size-1 dims (the aligning moves of the rules) prepends them, which cubecl does
///   correctly without a copy, then permutes them into place (a view on every backend);
/// - other rank-raising reshapes of a tensor ending in size-1 dims first permute those dims to
///   the front (a view), so the source no longer ends in 1;
/// - every other reshape is passed through.
pub(crate) fn reshape_with<P: TensorMetadata>(
    t: P,
    shape: Shape,
    reshape: impl Fn(P, Shape) -> P,
    permute: impl Fn(P, &[usize]) -> P,
) -> P {
    let old = t.shape();
    let (n_old, n_new) = (old.num_dims(), shape.num_dims());
    let ends_in_unit = old.iter().last() == Some(&1) && old.iter().any(|&d| d != 1);
    if n_new <= n_old || !ends_in_unit {
        return reshape(t, shape);
    }
    let added = n_new - n_old;
    if shape[added..] == old[..] && shape[..added].iter().all(|&d| d == 1) {
        return reshape(t, shape);
    }
    match unit_insertion(&old, &shape) {
        Some(axes) => {
            let prepended: Shape = core::iter::repeat_n(1, added)
                .chain(old.iter().copied())
                .collect();
            permute(reshape(t, prepended), &axes)
        }
        None => {
            let trailing = old.iter().rev().take_while(|&&d| d == 1).count();
            let axes: Vec<usize> = (n_old - trailing..n_old)
                .chain(0..n_old - trailing)
                .collect();
            reshape(permute(t, &axes), shape)
        }
    }
}

/// When `new` is `old` with size-1 dims inserted: the permutation that takes
/// `[1; added] ++ old` to `new`.
fn unit_insertion(old: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    let added = new.len() - old.len();
    let (mut next_old, mut next_unit) = (0, 0);
    let mut axes = Vec::with_capacity(new.len());
    for &d in new {
        if next_old < old.len() && old[next_old] == d {
            axes.push(added + next_old);
            next_old += 1;
        } else if d == 1 && next_unit < added {
            axes.push(next_unit);
            next_unit += 1;
        } else {
            return None;
        }
    }
    (next_old == old.len()).then_some(axes)
}

/// A physical tensor laid out so that every backend's kernels read it right: contiguous on
/// Burn 0.21's cubecl backends (wgpu, CUDA), unchanged elsewhere.
///
/// cubecl's reductions (`sum_dim`, `max_dim`, ...) return wrong values for some permuted
/// layouts: `[6, 2, 3]` with dims 1 and 2 swapped and a unit dim in front, summed over that
/// unit dim, does not give the tensor back. A loop over examples never builds such layouts, but
/// batched tensors are permuted views all the time (batch axes moved to the front, unit dims
/// permuted in by [`align`]), so reductions of batched tensors read them through this. The
/// flattening reshape copies only a tensor that is not contiguous already; the reshape back is
/// a view.
pub(crate) fn kernel_layout<B: Backend, K: Kind<B>>(t: K::P) -> K::P {
    let shape = t.shape();
    let n = shape.num_elements();
    if shape.num_dims() < 2 || n == 0 || !strided_kernels_unreliable::<B>(&K::device(&t)) {
        return t;
    }
    let flat = K::reshape(t, Shape::from(vec![n]));
    K::reshape(flat, shape)
}

/// Whether `B` is one of Burn 0.21's cubecl backends, whose kernels misread some strided
/// layouts (see [`kernel_layout`]). Read from the backend's name once per backend type.
fn strided_kernels_unreliable<B: Backend>(device: &B::Device) -> bool {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BY_BACKEND: OnceLock<Mutex<HashMap<TypeId, bool>>> = OnceLock::new();
    *BY_BACKEND
        .get_or_init(Default::default)
        .lock()
        .expect("backend cache")
        .entry(TypeId::of::<B>())
        .or_insert_with(|| B::name(device).contains("cubecl"))
}

/// Physical dim of logical dim `dim` (batch dims come first).
#[inline]
pub(crate) fn physical_dim(bdims: &BatchDims, dim: usize) -> usize {
    bdims.len() + dim
}

/// Reshapes `t` so that its batch dims line up with `target` (a superset of its own), inserting
/// size-1 dims at the levels it lacks. No data moves; the backend's broadcasting does the rest.
/// With an empty batch in `target` the inserted dims are expanded (to nothing, a view): Burn
/// 0.21's cubecl backends refuse to broadcast a size-1 dim against a size-0 one.
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
    let aligned = K::reshape(inner, dims);
    if target.sizes().any(|size| size == 0) {
        return K::expand(aligned, with_batch_sizes(target, logical));
    }
    aligned
}

/// Like [`align`], then expands the inserted size-1 dims to the full batch sizes, for ops whose
/// backends do not broadcast; the result is laid out for the backend's kernels (see
/// [`kernel_layout`]: cubecl's `scatter_nd`, for one, reads an expanded or permuted `values`
/// operand as if it were contiguous).
pub(crate) fn materialize<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, target: &BatchDims) -> K::P {
    let missing = target.len() != t.bdims.len();
    let inner = align::<B, K>(t, target);
    if !missing {
        return kernel_layout::<B, K>(inner);
    }
    let shape = inner.shape();
    let full = with_batch_sizes(target, &shape[target.len()..]);
    kernel_layout::<B, K>(K::expand(inner, full))
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

#[cfg(test)]
mod tests {
    use super::unit_insertion;

    #[test]
    fn should_find_the_permutation_of_inserted_unit_dims() {
        // [1, 1] ++ [3, 2, 1] -> [3, 1, 2, 1, 1]
        assert_eq!(
            unit_insertion(&[3, 2, 1], &[3, 1, 2, 1, 1]),
            Some(vec![2, 0, 3, 4, 1])
        );
        assert_eq!(unit_insertion(&[3, 1], &[1, 3, 1]), Some(vec![0, 1, 2]));
        assert_eq!(unit_insertion(&[6, 1], &[2, 3, 1]), None);
        assert_eq!(unit_insertion(&[3, 2, 1], &[3, 1, 1, 1]), None);
    }
}
