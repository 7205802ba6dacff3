//! Indexing ops: gather, scatter, select, select_assign, slice_assign, mask_where, mask_fill,
//! gather_nd, scatter_nd.
//!
//! Batched or unbatched tensors, indices and values in any mix. Indexing happens independently
//! per example, so every operand that the op reads per example is materialized over the union of
//! the batch dims; a batched index for `select` becomes a `gather` along the same dim. The ops'
//! no-batched-operand fast path (`unbatched!` in `ops/macros.rs`) runs first, so the rules that
//! take several operands see at least one batched.

use burn_backend::backend::Backend;
use burn_backend::{Shape, Slice, TensorMetadata};

use super::helpers::{batch_slices, materialize, materialize_view, write_target};
use crate::compat;
use crate::physical::{Bool, Int, Kind};
use crate::tensor::{BatchDims, VmapTensor};

type IntP<B> = <B as burn_backend::backend::BackendTypes>::IntTensorPrimitive;

/// `gather(dim, tensor, indices)`: the output has the shape of the indices.
pub(crate) fn gather<B: Backend, K: Kind<B>>(
    dim: usize,
    tensor: VmapTensor<K::P>,
    indices: VmapTensor<IntP<B>>,
) -> VmapTensor<K::P> {
    let bdims = BatchDims::union([&tensor.bdims, &indices.bdims]);
    let t = materialize::<B, K>(tensor, &bdims);
    let i = materialize::<B, Int>(indices, &bdims);
    let nb = bdims.len();
    VmapTensor::new(K::gather(dim + nb, t, i), bdims)
}

/// `scatter(dim, tensor, indices, value, update)` and `bool_scatter_or`.
pub(crate) fn scatter<B: Backend, K: Kind<B>>(
    dim: usize,
    tensor: VmapTensor<K::P>,
    indices: VmapTensor<IntP<B>>,
    value: VmapTensor<K::P>,
    f: impl FnOnce(usize, K::P, IntP<B>, K::P) -> K::P,
) -> VmapTensor<K::P> {
    let bdims = BatchDims::union([&tensor.bdims, &indices.bdims, &value.bdims]);
    let t = write_target::<B, K>(tensor, &bdims);
    let i = materialize_view::<B, Int>(indices, &bdims);
    let v = materialize_view::<B, K>(value, &bdims);
    let nb = bdims.len();
    VmapTensor::new(f(dim + nb, t, i, v), bdims)
}

/// Turns a batched 1-D index `[batch.., k]` into gather/scatter indices of shape `target`
/// (the physical shape of the output, batch dims first) along physical dim `pdim`.
fn index_to_gather<B: Backend>(
    indices: IntP<B>,
    bdims: &BatchDims,
    pdim: usize,
    target: &Shape,
) -> IntP<B> {
    let nb = bdims.len();
    let k = indices.shape()[nb];
    let rank = target.num_dims();
    let mut dims: Vec<usize> = bdims.sizes().collect();
    dims.extend((nb..rank).map(|d| if d == pdim { k } else { 1 }));
    let reshaped = <Int as Kind<B>>::reshape(indices, Shape::from(dims));
    B::int_expand(reshaped, target.clone())
}

/// `select(tensor, dim, indices)` with a 1-D index.
pub(crate) fn select<B: Backend, K: Kind<B>>(
    tensor: VmapTensor<K::P>,
    dim: usize,
    indices: VmapTensor<IntP<B>>,
) -> VmapTensor<K::P> {
    if indices.bdims.is_empty() {
        let pdim = dim + tensor.bdims.len();
        return tensor.map(|inner| K::select(inner, pdim, indices.inner()));
    }
    if tensor.bdims.is_empty() {
        // Per-example indices into a shared tensor (an embedding table): one select with every
        // example's indices, not a copy of the table per example.
        let (t, (i, bdims)) = (tensor.inner(), indices.into_parts());
        let nb = bdims.len();
        let ishape = i.shape();
        let flat = <Int as Kind<B>>::reshape(i, Shape::from(vec![ishape.num_elements()]));
        let out = K::select(t, dim, flat);
        // `[.., E.. * n, ..]` -> `[.., E.., n, ..]` -> batch dims in front.
        let mut dims = out.shape().to_vec();
        dims.splice(dim..=dim, ishape.iter().copied());
        let out = K::reshape(out, Shape::from(dims));
        let rank = out.shape().num_dims();
        let axes: Vec<usize> = (dim..dim + nb)
            .chain((0..rank).filter(|d| !(dim..dim + nb).contains(d)))
            .collect();
        return VmapTensor::new(K::permute(out, &axes), bdims);
    }
    // Per-example indices: a gather along the same dim.
    let bdims = BatchDims::union([&tensor.bdims, &indices.bdims]);
    let t = materialize::<B, K>(tensor, &bdims);
    let i = materialize::<B, Int>(indices, &bdims);
    let pdim = dim + bdims.len();
    let mut out_shape = t.shape();
    out_shape[pdim] = i.shape()[bdims.len()];
    let i = index_to_gather::<B>(i, &bdims, pdim, &out_shape);
    VmapTensor::new(K::gather(pdim, t, i), bdims)
}

/// `select_assign(tensor, dim, indices, value, update)` (and `bool_select_or`); a batched index
/// becomes a scatter with the same update along the same dim (`scatter_f`).
pub(crate) fn select_assign<B: Backend, K: Kind<B>>(
    tensor: VmapTensor<K::P>,
    dim: usize,
    indices: VmapTensor<IntP<B>>,
    value: VmapTensor<K::P>,
    select_f: impl FnOnce(K::P, usize, IntP<B>, K::P) -> K::P,
    scatter_f: impl FnOnce(usize, K::P, IntP<B>, K::P) -> K::P,
) -> VmapTensor<K::P> {
    if indices.bdims.is_empty() {
        let bdims = BatchDims::union([&tensor.bdims, &value.bdims]);
        let t = write_target::<B, K>(tensor, &bdims);
        let v = materialize::<B, K>(value, &bdims);
        let pdim = dim + bdims.len();
        return VmapTensor::new(select_f(t, pdim, indices.inner(), v), bdims);
    }
    let bdims = BatchDims::union([&tensor.bdims, &indices.bdims, &value.bdims]);
    let t = write_target::<B, K>(tensor, &bdims);
    let v = materialize::<B, K>(value, &bdims);
    let i = materialize::<B, Int>(indices, &bdims);
    let pdim = dim + bdims.len();
    let i = index_to_gather::<B>(i, &bdims, pdim, &v.shape());
    VmapTensor::new(scatter_f(pdim, t, i, v), bdims)
}

/// `slice_assign(tensor, slices, value)`.
pub(crate) fn slice_assign<B: Backend, K: Kind<B>>(
    tensor: VmapTensor<K::P>,
    slices: &[Slice],
    value: VmapTensor<K::P>,
    f: impl FnOnce(K::P, &[Slice], K::P) -> K::P,
) -> VmapTensor<K::P> {
    let bdims = BatchDims::union([&tensor.bdims, &value.bdims]);
    let t = write_target::<B, K>(tensor, &bdims);
    let v = materialize::<B, K>(value, &bdims);
    let slices = batch_slices(&bdims, slices);
    VmapTensor::new(f(t, &slices, v), bdims)
}

/// `mask_where(tensor, mask, value)`.
pub(crate) fn mask_where<B: Backend, K: Kind<B>>(
    tensor: VmapTensor<K::P>,
    mask: VmapTensor<B::BoolTensorPrimitive>,
    value: VmapTensor<K::P>,
    f: impl FnOnce(K::P, B::BoolTensorPrimitive, K::P) -> K::P,
) -> VmapTensor<K::P> {
    let scalar = tensor.is_scalar();
    let bdims = BatchDims::union([&tensor.bdims, &mask.bdims, &value.bdims]);
    let t = materialize::<B, K>(tensor, &bdims);
    let m = materialize::<B, Bool>(mask, &bdims);
    let v = materialize::<B, K>(value, &bdims);
    let t = compat::mask_target::<B, K>(t, &[m.shape(), v.shape()]);
    VmapTensor::new(f(t, m, v), bdims).with_scalar(scalar)
}

/// `mask_fill(tensor, mask, scalar)`.
pub(crate) fn mask_fill<B: Backend, K: Kind<B>>(
    tensor: VmapTensor<K::P>,
    mask: VmapTensor<B::BoolTensorPrimitive>,
    f: impl FnOnce(K::P, B::BoolTensorPrimitive) -> K::P,
) -> VmapTensor<K::P> {
    let scalar = tensor.is_scalar();
    let bdims = BatchDims::union([&tensor.bdims, &mask.bdims]);
    let t = materialize::<B, K>(tensor, &bdims);
    let m = materialize::<B, Bool>(mask, &bdims);
    let t = compat::mask_target::<B, K>(t, &[m.shape()]);
    VmapTensor::new(f(t, m), bdims).with_scalar(scalar)
}

/// `[E, M.., K]` indices (batch dims flattened to `E`) with the example number prepended to
/// every index tuple: `[E, M.., 1 + K]`, for `gather_nd`/`scatter_nd` on data of shape
/// `[E, D..]`.
fn prepend_example_index<B: Backend>(indices: IntP<B>) -> IntP<B> {
    let shape = indices.shape();
    let rank = shape.num_dims();
    let e = shape[0];
    let device = indices.device();
    let dtype = indices.dtype().into();
    let ids = B::int_arange(0..e as i64, &device, dtype);
    let mut col: Vec<usize> = vec![e];
    col.extend(core::iter::repeat_n(1, rank - 1));
    let ids = <Int as Kind<B>>::reshape(ids, Shape::from(col));
    let mut full: Vec<usize> = shape[..rank - 1].to_vec();
    full.push(1);
    let ids = B::int_expand(ids, Shape::from(full));
    B::int_cat(vec![ids, indices], rank - 1)
}

/// `[b.., rest..] -> [E, rest..]`.
fn flatten_batch<B: Backend, K: Kind<B>>(t: K::P, bdims: &BatchDims) -> K::P {
    let shape = t.shape();
    let dims: Shape = core::iter::once(bdims.num_examples())
        .chain(shape[bdims.len()..].iter().copied())
        .collect();
    K::reshape(t, dims)
}

/// `[E, rest..] -> [b.., rest..]`.
fn unflatten_batch<B: Backend, K: Kind<B>>(t: K::P, bdims: &BatchDims) -> K::P {
    let shape = t.shape();
    K::reshape(t, crate::physical::with_batch_sizes(bdims, &shape[1..]))
}

/// `gather_nd(data, indices)`: `out[m..] = data[indices[m.., :]]`, shape `[M.., D_K..]`.
///
/// Unbatched data with batched indices needs nothing (the batch dims are leading index dims).
/// Batched data is flattened to `[E, D..]` and every index tuple gains its example number.
pub(crate) fn gather_nd<B: Backend, K: Kind<B>>(
    data: VmapTensor<K::P>,
    indices: VmapTensor<IntP<B>>,
    f: impl FnOnce(K::P, IntP<B>) -> K::P,
) -> VmapTensor<K::P> {
    if data.bdims.is_empty() {
        return indices.map(|inner| f(data.inner(), inner));
    }
    let bdims = BatchDims::union([&data.bdims, &indices.bdims]);
    let d = flatten_batch::<B, K>(materialize::<B, K>(data, &bdims), &bdims);
    let i = flatten_batch::<B, Int>(materialize::<B, Int>(indices, &bdims), &bdims);
    let out = f(d, prepend_example_index::<B>(i));
    VmapTensor::new(unflatten_batch::<B, K>(out, &bdims), bdims)
}

/// `scatter_nd(data, indices, values, reduction)`: every operand is materialized over the
/// union of the batch dims and flattened to `E` examples; index tuples gain their example
/// number, so one `scatter_nd` on `[E, D..]` updates each example independently.
///
/// The inner op always gets one flat dim of index tuples ([`compat::flat_tuples`]).
pub(crate) fn scatter_nd<B: Backend, K: Kind<B>>(
    data: VmapTensor<K::P>,
    indices: VmapTensor<IntP<B>>,
    values: VmapTensor<K::P>,
    f: impl FnOnce(K::P, IntP<B>, K::P) -> K::P,
) -> VmapTensor<K::P> {
    let bdims = BatchDims::union([&data.bdims, &indices.bdims, &values.bdims]);
    let d = flatten_batch::<B, K>(materialize::<B, K>(data, &bdims), &bdims);
    let i = flatten_batch::<B, Int>(materialize::<B, Int>(indices, &bdims), &bdims);
    let v = flatten_batch::<B, K>(materialize::<B, K>(values, &bdims), &bdims);
    let (i, v) = compat::flat_tuples::<B, K>(prepend_example_index::<B>(i), v);
    let out = f(d, i, v);
    VmapTensor::new(unflatten_batch::<B, K>(out, &bdims), bdims)
}
