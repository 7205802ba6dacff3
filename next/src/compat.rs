//! Every Burn 0.21 backend workaround, and the backend detection they use.
//!
//! Batched tensors are views that Burn's own code rarely builds (batch axes moved to the front,
//! unit dims for missing levels), and they exposed bugs in Burn 0.21.0's backends. Each
//! workaround below is a function that the rules call instead of the plain backend op, with a
//! comment naming the bug and the version. Moving to a later Burn touches this file: re-check
//! each entry, and where the bug is fixed, make the function the plain op. No other file of
//! `src/` names a backend.
//!
//! | Burn 0.21.0 bug or limit | backends | workaround |
//! |---|---|---|
//! | reshapes that raise the rank of a non-contiguous tensor ending in size-1 dims get wrong strides (`burn_std::split_strides`) | cubecl (wgpu, CUDA) | [`reshape`] |
//! | reductions, scans, sorts and `scatter_nd` misread some permuted or expanded layouts | cubecl | [`kernel_layout`] |
//! | `scatter_nd` pairs index tuples spanning several dims with the wrong value rows | cubecl | [`flat_tuples`] |
//! | `mask_where` / `mask_fill` leave part of a broadcast output unwritten when the masked tensor is the smaller operand | cubecl | [`mask_target`] |
//! | `float_unfold` windows permuted ahead of the kernel dims are misread when a dim has one window | cubecl | [`conv_patches`] |
//! | `unfold` to a single window shorter than its dim is read as if contiguous | cubecl | [`unfold`] |
//! | binary ops over expanded operands run element by element (slow outer products) | Flex | [`outer_product`] |
//! | copying a view broadcast along a leading dim writes one scattered element at a time | Flex | [`write_target`] |
//! | a pending reshape of a strided tensor is copied by each reader (Flex reshapes views as views) | Flex | [`reshapes_at_once`] |
//! | binary ops over a broadcast left operand run element by element | Flex | [`binary_lhs`] |
//! | broadcasting a size-1 dim against a size-0 one panics ("Broadcast dims must be size 1") | cubecl | [`expand_empty_batch`] |
//! | a folded `[0, k] x [k, n]` matmul divides by zero | ndarray | [`can_fold_rows`] |
//! | reshaping to rank 0 panics | ndarray | [`reshapes_to_rank0`], [`rank0_through_data`] |
//!
//! **Flex** (`burn-flex`, feature `flex`) needs none of the correctness workarounds above (the
//! rank-0 reshape goes straight to the backend: Flex reshapes to rank 0 and reshapes contiguous
//! tensors as zero-copy views); it takes four speed routes, [`outer_product`], [`write_target`], [`reshapes_at_once`] and [`binary_lhs`]. The one applied to every
//! backend, [`can_fold_rows`], only routes an empty batch (nothing to compute) and costs nothing.
//! The whole test suite (loop oracle, conformance vectors, layers, transforms) runs on Flex in CI.
//!
//! Limits that shaped the design itself, and stay right on any backend (nothing to change on
//! an upgrade):
//!
//! - rank-0 tensors cannot be allocated on cubecl, nor reached by a reshape on ndarray: a
//!   logical rank-0 tensor is held as `[batch sizes.., 1]` (`VmapTensor`'s physical layout,
//!   `rules::create`);
//! - reductions over a zero-length dim panic on cubecl: sums, products and means over an empty
//!   dim give 0, 1 and NaN on every backend (`rules::reduce::reduce_dim_or`, `reduce::all`);
//! - burn-ndarray copies on every reshape, even to the same shape, and on a one-tensor `cat`:
//!   reshapes of batched tensors are held pending (`VmapTensor`'s "Pending reshapes"), a
//!   reshape to the same shape is skipped (`rules::view::reshape`), whole-tensor reductions
//!   reduce one dim at a time (`rules::reduce::all`), and a cat of one leaf is that leaf
//!   (`Leaf::cat`);
//! - burn-cubecl's `is_nonoverlapping` overflows on zero-size tensors in debug builds: the
//!   `ci-wgpu` profile of `Cargo.toml` turns overflow checks off for dependencies.
//!
//! Not fixable from a decorator: cubecl's `scatter_nd` with `Add` and a repeated index tuple
//! loses updates at random (batched or not), and rank-0 tensors on a plain cubecl backend
//! (outside `Vmap`) still panic inside Burn.

use std::any::TypeId;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use burn::tensor::{Bool, Int, Tensor};
use burn_backend::backend::{Backend, BackendTypes};
use burn_backend::tensor::Int as IntKind;
use burn_backend::{Shape, TensorMetadata, TensorPrimitive};

use crate::physical::{Kind, with_batch_sizes};
use crate::tensor::BatchDims;
use crate::tree::Leaf;

// =================================================================================================
// Backend detection
// =================================================================================================

/// What the workarounds need to know about a backend type, read from its name once.
#[derive(Clone, Copy)]
struct Flavor {
    cubecl: bool,
    ndarray: bool,
    flex: bool,
}

/// `B`'s flavor: from a per-thread copy of the last backend asked about (the rules ask on every
/// binary op and reshape, almost always about the same backend), else from the process-wide
/// cache, else from the backend's name.
fn flavor<B: Backend>(device: &B::Device) -> Flavor {
    thread_local! {
        static LAST: Cell<Option<(TypeId, Flavor)>> = const { Cell::new(None) };
    }
    static BY_BACKEND: OnceLock<Mutex<HashMap<TypeId, Flavor>>> = OnceLock::new();
    let id = TypeId::of::<B>();
    if let Some((last, f)) = LAST.get()
        && last == id
    {
        return f;
    }
    let f = *BY_BACKEND
        .get_or_init(Default::default)
        .lock()
        .expect("backend cache")
        .entry(id)
        .or_insert_with(|| {
            let name = B::name(device);
            Flavor {
                cubecl: name.contains("cubecl"),
                ndarray: name == "ndarray",
                flex: name == "flex",
            }
        });
    LAST.set(Some((id, f)));
    f
}

/// Whether `B` is one of Burn 0.21's cubecl backends (wgpu, CUDA), read from its name once per
/// backend type.
pub(crate) fn is_cubecl<B: Backend>(device: &B::Device) -> bool {
    flavor::<B>(device).cubecl
}

/// Whether `B` is Burn 0.21's plain NdArray backend (not a decorator over it), read from its
/// name once per backend type.
pub(crate) fn is_ndarray<B: Backend>(device: &B::Device) -> bool {
    flavor::<B>(device).ndarray
}

// =================================================================================================
// Flex: broadcast products
// =================================================================================================

/// The outer products `col ⊗ row` of `col: [.., m, 1]` and `row: [.., 1, n]` (leading dims
/// broadcasting): a broadcast multiply, except on Burn 0.21's Flex backend, whose binary ops
/// over expanded operands run element by element while its batched matmul is one GEMM call per
/// leading index (multiplying out the MLP bench's per-example gradients: 535 ms as a broadcast
/// multiply, 132 ms as a matmul; on NdArray the reverse, 140 ms against 196 ms).
pub(crate) fn outer_product<B: Backend>(
    col: B::FloatTensorPrimitive,
    row: B::FloatTensorPrimitive,
) -> B::FloatTensorPrimitive {
    if flavor::<B>(&B::float_device(&col)).flex {
        return B::float_matmul(col, row);
    }
    B::float_mul(col, row)
}

/// `t`, aligned (a unit dim for each batch dim it lacks), broadcast to `full` as the tensor an
/// op writes into (`slice_assign`, `scatter`, `select_add`; the backend copies it first): an
/// expanded view, except on Burn 0.21's Flex backend where only leading dims are broadcast.
/// Flex copies a view with a stride-0 dim by walking that dim innermost (`copy_2d_tiled` puts
/// the smaller stride inside), one scattered write per element; an LSTM's states, slice-assigned
/// per time step into a tensor shared by every example, spent 15% of its clipped step there.
/// Repeating the rows instead is one memcpy per example.
pub(crate) fn write_target<B: Backend, K: Kind<B>>(t: K::P, full: Shape) -> K::P {
    let shape = t.shape();
    let lead = (0..shape.num_dims())
        .take_while(|&d| shape[d] != full[d])
        .count();
    let leading_only = lead > 0
        && shape[..lead].iter().all(|&s| s == 1)
        && shape[lead..] == full[lead..]
        && full.num_elements() > 0;
    if leading_only && flavor::<B>(&K::device(&t)).flex {
        let times = full[..lead].iter().product();
        let rows = K::reshape(t, Shape::from(vec![1, shape.num_elements()]));
        return K::reshape(K::repeat_dim(rows, 0, times), full);
    }
    K::expand(t, full)
}

/// The left operand `l` of a broadcasting binary op, aligned to the result's batch dims
/// `bdims` (a unit dim for each it lacks): as it is, except on Burn 0.21's Flex backend, whose
/// binary ops take their SIMD paths only with a contiguous left operand; a left operand
/// broadcast along a batch dim is walked element by element there, or copied through the slow
/// stride-0 copy of [`write_target`] (a layer's output shared by every example, times a
/// per-example scale). There it is repeated along the batch dims it lacks, one memcpy per
/// example.
pub(crate) fn binary_lhs<B: Backend, K: Kind<B>>(l: K::P, bdims: &BatchDims) -> K::P {
    if !flavor::<B>(&K::device(&l)).flex {
        return l;
    }
    let shape = l.shape();
    let full = with_batch_sizes(bdims, &shape[bdims.len()..]);
    if shape == full {
        return l;
    }
    write_target::<B, K>(l, full)
}

/// Whether a reshape of a batched tensor runs at once rather than being held pending
/// (`VmapTensor`'s "Pending reshapes"): on Burn 0.21's Flex backend. Flex reshapes a contiguous
/// tensor as a view and copies a strided one, once; held pending, the copy is made again by
/// every reader of every clone (a `Linear`'s three backward ops each copied the attention
/// heads' gradient back into rows: 13% of a transformer's clipped step). Pending reshapes pay
/// on burn-ndarray, which copies on every reshape.
pub(crate) fn reshapes_at_once<B: Backend>(device: &B::Device) -> bool {
    flavor::<B>(device).flex
}

// =================================================================================================
// cubecl: strides of rank-raising reshapes
// =================================================================================================

/// The backend's reshape, routed around a stride bug of Burn 0.21's cubecl backends (wgpu,
/// CUDA). [`Kind::reshape`] goes through here, so every reshape of an inner tensor does.
///
/// `burn_std::split_strides` never consumes the old shape's trailing size-1 dims, so a reshape
/// that raises the rank of a non-contiguous tensor whose last dim is 1 (other than prepending
/// unit dims) gets the strides of the wrong dims: `[1, 1, 2, 3]` permuted to `[3, 2, 1, 1]`
/// and reshaped to `[3, 2, 1, 1, 1]` reads `[1, 0, 0, 0, 0, 0]` instead of
/// `[1, 4, 2, 5, 3, 6]`. Batching rules make such tensors all the time (a batch dim moved to
/// the front, then size-1 dims inserted for missing levels), so:
///
/// - inserting size-1 dims (the aligning moves of the rules) prepends them, which cubecl does
///   correctly without a copy, then permutes them into place (a view on every backend);
/// - other rank-raising reshapes of a tensor ending in size-1 dims first permute those dims to
///   the front (a view), so the source no longer ends in 1;
/// - every other reshape is passed through.
pub(crate) fn reshape<P: TensorMetadata>(
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

// =================================================================================================
// cubecl: kernels that misread strided layouts
// =================================================================================================

/// A physical tensor laid out so that every backend's kernels read it right: contiguous on
/// Burn 0.21's cubecl backends (wgpu, CUDA), unchanged elsewhere.
///
/// cubecl's reductions (`sum_dim`, `max_dim`, ...) return wrong values for some permuted
/// layouts: `[6, 2, 3]` with dims 1 and 2 swapped and a unit dim in front, summed over that
/// unit dim, does not give the tensor back; its `scatter_nd` reads an expanded or permuted
/// `values` operand as if it were contiguous. A loop over examples never builds such layouts,
/// but batched tensors are permuted views all the time (batch axes moved to the front, unit
/// dims permuted in by `rules::helpers::align`), so reductions, scans and sorts of batched
/// tensors, and materialized operands, read them through this. The flattening reshape copies
/// only a tensor that is not contiguous already; the reshape back is a view.
pub(crate) fn kernel_layout<B: Backend, K: Kind<B>>(t: K::P) -> K::P {
    let shape = t.shape();
    let n = shape.num_elements();
    if shape.num_dims() < 2 || n == 0 || !is_cubecl::<B>(&K::device(&t)) {
        return t;
    }
    let flat = K::reshape(t, Shape::from(vec![n]));
    K::reshape(flat, shape)
}

// =================================================================================================
// cubecl: scatter_nd with several dims of index tuples
// =================================================================================================

type IntP<B> = <B as BackendTypes>::IntTensorPrimitive;

/// `scatter_nd`'s operands with their tuple dims `M..` flattened into one: indices
/// `[M.., K] -> [m, K]`, values `[M.., D..] -> [m, D..]` (the same updates). Burn 0.21's cubecl
/// `scatter_nd` pairs tuples with the wrong value rows when the tuples span several dims, so
/// the inner op always gets one flat dim of tuples (`rules::indexing::scatter_nd`).
pub(crate) fn flat_tuples<B: Backend, K: Kind<B>>(
    indices: IntP<B>,
    values: K::P,
) -> (IntP<B>, K::P) {
    let ishape = indices.shape();
    let tuple_dims = ishape.num_dims() - 1;
    if tuple_dims == 1 {
        return (indices, values);
    }
    let m: usize = ishape[..tuple_dims].iter().product();
    let vshape = values.shape();
    let indices = <IntKind as Kind<B>>::reshape(indices, Shape::from(vec![m, ishape[tuple_dims]]));
    let flat_values: Shape = core::iter::once(m)
        .chain(vshape[tuple_dims..].iter().copied())
        .collect();
    (indices, K::reshape(values, flat_values))
}

// =================================================================================================
// cubecl: mask ops on a smaller masked tensor
// =================================================================================================

/// The masked tensor expanded to the broadcast shape of the mask ops' operands (same rank):
/// Burn 0.21's cubecl `mask_where` / `mask_fill` run one unit per element of the tensor, so
/// output elements beyond a smaller tensor (`max_pair` of a `[1]` and a `[2]` tensor masks the
/// `[1]` one) were never written. A view; nothing when the shapes already agree.
pub(crate) fn mask_target<B: Backend, K: Kind<B>>(t: K::P, others: &[Shape]) -> K::P {
    let shape = t.shape();
    // Incompatible shapes are left to the backend's own error.
    let out =
        Shape::broadcast_many(core::iter::once(&shape).chain(others)).unwrap_or(shape.clone());
    if out == shape {
        return t;
    }
    K::expand(t, out)
}

// =================================================================================================
// cubecl: broadcasting against an empty batch
// =================================================================================================

/// An operand aligned to `target` (size-1 dims at the levels it lacks, then its `logical`
/// dims), expanded to the full batch when `target` has an empty batch dim (to nothing, a view):
/// Burn 0.21's cubecl backends refuse to broadcast a size-1 dim against a size-0 one
/// ("Broadcast dims must be size 1").
pub(crate) fn expand_empty_batch<B: Backend, K: Kind<B>>(
    aligned: K::P,
    target: &BatchDims,
    logical: &[usize],
) -> K::P {
    if target.sizes().any(|size| size == 0) {
        return K::expand(aligned, with_batch_sizes(target, logical));
    }
    aligned
}

// =================================================================================================
// cubecl: unfold to a single window
// =================================================================================================

/// `unfold(t, dim)` (windows of `size` every `step` along `dim`, as a new last dim), except on
/// Burn 0.21's cubecl backends when `dim` holds a single window shorter than it: there the view
/// `unfold` returns is read as if it were contiguous (`[2, 1, 3]` unfolded along its last dim
/// by 2 every 2 reads the second row from offset 2, not 3), so the window is sliced out, made
/// contiguous, and moved into place instead.
pub(crate) fn unfold<B: Backend, K: Kind<B>>(
    t: K::P,
    dim: usize,
    size: usize,
    step: usize,
    unfold: impl FnOnce(K::P, usize) -> K::P,
) -> K::P {
    let shape = t.shape();
    let len = shape[dim];
    let one_short_window = size < len && (len - size) / step.max(1) == 0;
    if !one_short_window || !is_cubecl::<B>(&K::device(&t)) {
        return unfold(t, dim);
    }
    let rank = shape.num_dims();
    let mut slices = vec![burn_backend::Slice::full(); rank];
    slices[dim] = burn_backend::Slice::from(0..size);
    let window = kernel_layout::<B, K>(K::slice(t, &slices));
    let window = crate::physical::move_dim::<B, K>(window, dim, rank - 1);
    let mut dims = window.shape().to_vec();
    dims.insert(dim, 1);
    K::reshape(window, Shape::from(dims))
}

// =================================================================================================
// cubecl: unfolded windows moved ahead of the kernel dims
// =================================================================================================

/// A convolution's input patches as rows, `[N, c, h, w] -> [N, L, c·kh·kw]` (`L` output
/// positions), for the factored weight gradients (`rules::factored`): `direct(x)` (windows as
/// views, one copy), except on Burn 0.21's cubecl backends, which misread `float_unfold`'s
/// windows permuted ahead of the kernel dims when a spatial dim has a single window (reads of
/// `[N, 1, 1, c, kh, kw]` return the wrong elements, even through an elementwise kernel). There
/// the backend's own `unfold4d` (windows kept last, `[N, c·kh·kw, L]`) is transposed and made
/// contiguous through a flat reshape.
pub(crate) fn conv_patches<B: Backend>(
    x: B::FloatTensorPrimitive,
    kernel: [usize; 2],
    options: burn_backend::ops::UnfoldOptions,
    direct: impl FnOnce(B::FloatTensorPrimitive) -> B::FloatTensorPrimitive,
) -> B::FloatTensorPrimitive {
    if !is_cubecl::<B>(&B::float_device(&x)) {
        return direct(x);
    }
    let patches = B::float_swap_dims(B::unfold4d(x, kernel, options), 1, 2);
    kernel_layout::<B, burn_backend::tensor::Float>(patches)
}

// =================================================================================================
// ndarray: an empty folded matmul
// =================================================================================================

/// Whether a batched matmul may fold its batch into `rows` rows of one `[rows, k] x [k, n]`
/// product (`rules::linalg::matmul`): not with no row, as the folded `[0, k] x [k, n]` product
/// divides by zero in burn-ndarray 0.21's matmul (found by the loop oracle,
/// tests/oracle/misc.rs `batch_size_zero`). An empty batch takes the broadcasting path instead.
pub(crate) fn can_fold_rows(rows: usize) -> bool {
    rows > 0
}

// =================================================================================================
// ndarray: reshapes to rank 0
// =================================================================================================

/// Whether a tensor of backend `B` can be reshaped to rank 0: not on Burn 0.21's plain NdArray
/// backend (see [`rank0_through_data`]).
pub(crate) fn reshapes_to_rank0<B: Backend>(device: &B::Device) -> bool {
    !is_ndarray::<B>(device)
}

/// A one-element `[1]` leaf as a rank-0 leaf, through its data: Burn 0.21's NdArray backend
/// cannot reshape to rank 0 (a host copy; NdArray lives on the host anyway).
pub(crate) fn rank0_through_data<B: Backend>(leaf: Leaf<B>) -> Leaf<B> {
    let device = leaf.device();
    let one = |mut data: burn::tensor::TensorData| {
        data.shape = Shape::from(Vec::<usize>::new());
        data
    };
    match leaf {
        Leaf::Float(t) => {
            let data = Tensor::<B, 1>::from_primitive(t).into_data();
            Leaf::Float(TensorPrimitive::Float(B::float_from_data(
                one(data),
                &device,
            )))
        }
        Leaf::Int(t) => {
            let data = Tensor::<B, 1, Int>::from_primitive(t).into_data();
            Leaf::Int(B::int_from_data(one(data), &device))
        }
        Leaf::Bool(t) => {
            let data = Tensor::<B, 1, Bool>::from_primitive(t).into_data();
            Leaf::Bool(B::bool_from_data(one(data), &device))
        }
    }
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
