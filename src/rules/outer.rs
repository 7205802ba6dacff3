//! Lazy outer products: the per-example weight gradients of dense layers, held factored.
//!
//! Under `vmap`, `linear_weight_backward(x, g)` with one row per example is the outer product
//! `x_i ⊗ g_i` of each example's layer input and output gradient. [`weight_grad`] keeps it as
//! factors `a: [.., m, 1]` and `g: [.., 1, n]` (see [`VmapTensor`]'s "Lazy outer products").
//! The ops that DP-SGD and per-example gradient statistics apply to such gradients have exact
//! factored forms, implemented here (Goodfellow's trick, Opacus's ghost clipping, BackPACK's
//! second moments):
//!
//! | op | factored |
//! |---|---|
//! | `g * g'` (another outer product of the same shape) | `(a a') ⊗ (g g')` |
//! | `g * c`, `g / c` (`c` constant along the last two dims: a per-example factor) | `(a c) ⊗ g` |
//! | `g * s`, `g / s` (scalars) | `(a s) ⊗ g` |
//! | `sum(g)` | `sum(a) sum(g)` per example |
//! | `sum_dim`/`mean_dim` over the last two dims | reduce `a` or `g` |
//! | `sum_dim`/`mean_dim` over a leading dim (the examples, once unbatched) | `A^T G`: one matrix product |
//! | leaving a vmap level | the same move on both factors |
//! | `cat`, `select` (shared indices) along a leading dim | the same op on both factors |
//!
//! Every other op reads the physical tensor, which multiplies the factors out once
//! ([`VmapTensor::into_parts`]). The oracle tests (`tests/oracle/grads.rs`, `tests/outer.rs`)
//! check each form against the materialized product.

#![allow(clippy::result_large_err)] // See `Factored`.

use burn_backend::backend::Backend;
use burn_backend::tensor::Float;
use burn_backend::{Scalar, Shape, TensorMetadata};

use super::helpers::align;
use crate::compat::{self, kernel_layout};
use crate::level::Level;
use crate::physical::{move_dim, with_batch_sizes, Kind};
use crate::tensor::{BatchDims, VmapTensor};

type FP<B> = <B as burn_backend::backend::BackendTypes>::FloatTensorPrimitive;
type VT<B> = VmapTensor<FP<B>>;
type IT<B> = VmapTensor<<B as burn_backend::backend::BackendTypes>::IntTensorPrimitive>;

/// A factored rule's result: the product, or the operands given back untouched for the
/// general rule. They are moved, not boxed (hence the module's `result_large_err` allowance):
/// a few hundred bytes of memcpy beside a tensor op, where a box would allocate on every float
/// mul.
type Factored<B> = Result<VT<B>, Declined<B>>;
type Declined<B> = (VT<B>, VT<B>);

/// A lazy outer product of aligned factors; an empty one is formed at once (nothing to save;
/// see [`compat::empty_outer_product`]).
fn outer<B: Backend>(a: FP<B>, g: FP<B>, bdims: BatchDims) -> VT<B> {
    let t = VmapTensor::outer(a, g, bdims, B::float_mul);
    let shape = t.physical_shape();
    if shape.num_elements() > 0 {
        return t;
    }
    let (a, g, bdims) = factors::<B>(t);
    VmapTensor::new(compat::empty_outer_product::<B>(a, g, shape), bdims)
}

/// `linear_weight_backward(x, g) = x^T g` when every example has one row (`x: [.., d_in]`,
/// `g: [.., d_out]` with leading logical dims of size 1) and at least one side is batched:
/// the outer products `x_i ⊗ g_i`, held factored. Otherwise the operands come back.
pub(crate) fn weight_grad<B: Backend>(x: VT<B>, g: VT<B>) -> Factored<B> {
    let (xs, gs) = (x.shape(), g.shape());
    let one_row = |s: &Shape| s.num_dims() >= 1 && s.iter().rev().skip(1).all(|&d| d == 1);
    if !(x.is_batched() || g.is_batched()) || !one_row(&xs) || !one_row(&gs) {
        return Err((x, g));
    }
    let (d_in, d_out) = (xs[xs.num_dims() - 1], gs[gs.num_dims() - 1]);
    let bdims = BatchDims::union([&x.bdims, &g.bdims]);
    let factor = |t: VT<B>, logical: [usize; 2]| {
        let (data, _, own) = t.into_stored();
        let data = <Float as Kind<B>>::reshape(data, with_batch_sizes(&own, &logical));
        align::<B, Float>(VmapTensor::new(data, own), &bdims)
    };
    let a = factor(x, [d_in, 1]);
    let g = factor(g, [1, d_out]);
    Ok(outer::<B>(a, g, bdims))
}

/// `lhs * rhs` with a factored form (see the module table), or the operands back.
pub(crate) fn mul<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> Factored<B> {
    match (lhs.is_lazy_outer(), rhs.is_lazy_outer()) {
        (true, true) => products::<B>(lhs, rhs),
        (true, false) => scaled::<B>(lhs, rhs, B::float_mul),
        // Multiplication commutes: `s * (a ⊗ g) = (a s) ⊗ g`.
        (false, true) => scaled::<B>(rhs, lhs, B::float_mul).map_err(|(o, s)| (s, o)),
        (false, false) => Err((lhs, rhs)),
    }
}

/// `lhs / rhs` with a factored form (an outer product divided by a per-example factor), or
/// the operands back.
pub(crate) fn div<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> Factored<B> {
    if !lhs.is_lazy_outer() || rhs.is_lazy_outer() {
        return Err((lhs, rhs));
    }
    scaled::<B>(lhs, rhs, B::float_div)
}

/// The elementwise product of two outer products of the same shape: `(a a') ⊗ (g g')`.
fn products<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> Factored<B> {
    if lhs.bdims != rhs.bdims || lhs.physical_shape() != rhs.physical_shape() {
        return Err((lhs, rhs));
    }
    let (a1, g1, bdims) = factors::<B>(lhs);
    let (a2, g2, _) = factors::<B>(rhs);
    Ok(outer::<B>(
        B::float_mul(a1, a2),
        B::float_mul(g1, g2),
        bdims,
    ))
}

/// The factors of a tensor already checked to be a lazy outer product.
#[track_caller]
fn factors<B: Backend>(t: VT<B>) -> (FP<B>, FP<B>, BatchDims) {
    match t.into_outer() {
        Ok(f) => f,
        Err(_) => unreachable!("checked to be a lazy outer product"),
    }
}

/// `op(a ⊗ g, s)` for `s` constant along the last two logical dims: `op(a, s) ⊗ g`.
fn scaled<B: Backend>(o: VT<B>, s: VT<B>, op: fn(FP<B>, FP<B>) -> FP<B>) -> Factored<B> {
    let shape = s.shape();
    let rank = shape.num_dims();
    if rank < 2 || shape[rank - 1] != 1 || shape[rank - 2] != 1 {
        return Err((o, s));
    }
    let bdims = BatchDims::union([&o.bdims, &s.bdims]);
    let (a, g, own) = factors::<B>(o);
    let a = align::<B, Float>(VmapTensor::new(a, own.clone()), &bdims);
    let g = align::<B, Float>(VmapTensor::new(g, own), &bdims);
    let s = align::<B, Float>(s, &bdims);
    Ok(outer::<B>(op(a, s), g, bdims))
}

/// `a ⊗ g` times (`divide` false) or divided by a scalar: `(a s) ⊗ g`.
pub(crate) fn scalar<B: Backend>(t: VT<B>, s: Scalar, divide: bool) -> Result<VT<B>, VT<B>> {
    let (a, g, bdims) = t.into_outer()?;
    let a = if divide {
        B::float_div_scalar(a, s)
    } else {
        B::float_mul_scalar(a, s)
    };
    Ok(outer::<B>(a, g, bdims))
}

/// `sum(a ⊗ g)` over every logical element: `sum(a) sum(g)` for each leading index, summed
/// over the leading logical dims. Logical shape `[1]`.
pub(crate) fn sum<B: Backend>(t: VT<B>) -> Result<VT<B>, VT<B>> {
    let (a, g, bdims) = t.into_outer()?;
    let rank = a.shape().num_dims();
    let total = |x: FP<B>| B::float_sum_dim(B::float_sum_dim(x, rank - 1), rank - 2);
    // `[lead.., 1, 1]`: dense and small.
    let per_lead = VmapTensor::new(B::float_mul(total(a), total(g)), bdims);
    Ok(super::reduce::all::<B, Float>(
        per_lead,
        B::float_sum,
        B::float_sum_dim,
        0.0,
    ))
}

/// `sum_dim` (or `mean_dim`) of `a ⊗ g` along logical `dim`.
///
/// Along the last two dims it reduces one factor. Along a leading dim it is
/// `sum_k a_k ⊗ g_k`: with one factor constant along that dim, that factor times the other's
/// sum; otherwise `A^T G`, one matrix product per remaining leading index (Goodfellow's
/// trick: the sum over examples of their weight gradients).
pub(crate) fn sum_dim<B: Backend>(t: VT<B>, dim: usize, mean: bool) -> Result<VT<B>, VT<B>> {
    if !t.is_lazy_outer() {
        return Err(t);
    }
    let pd = t.bdims.len() + dim;
    let (a, g, bdims) = factors::<B>(t);
    let rank = a.shape().num_dims();
    let reduce = |x: FP<B>, d: usize| {
        if mean {
            B::float_mean_dim(x, d)
        } else {
            B::float_sum_dim(x, d)
        }
    };
    if pd == rank - 2 {
        return Ok(outer::<B>(reduce(a, pd), g, bdims));
    }
    if pd == rank - 1 {
        return Ok(outer::<B>(a, reduce(g, pd), bdims));
    }
    let (ka, kg) = (a.shape()[pd], g.shape()[pd]);
    if ka == 1 {
        return Ok(outer::<B>(a, reduce(g, pd), bdims));
    }
    if kg == 1 {
        return Ok(outer::<B>(reduce(a, pd), g, bdims));
    }
    // Both factors vary along `pd`: move it next to the matrix dims and contract.
    let k = ka;
    let a = move_dim::<B, Float>(a, pd, rank - 3); // [rest.., k, m, 1]
    let g = move_dim::<B, Float>(g, pd, rank - 3); // [rest.., k, 1, n]
    let (sa, sg) = (a.shape(), g.shape());
    let rest: Vec<usize> = (0..rank - 3).map(|d| sa[d].max(sg[d])).collect();
    let (m, n) = (sa[rank - 2], sg[rank - 1]);
    let matrix = |x: FP<B>, s: &Shape, dims: [usize; 2]| {
        // Broadcast the leading dims (views), then drop the unit dim of the factor.
        let full: Shape = rest
            .iter()
            .copied()
            .chain([k])
            .chain(s.iter().skip(rank - 2).copied())
            .collect();
        let x = if *s != full {
            B::float_expand(x, full)
        } else {
            x
        };
        let x = <Float as Kind<B>>::reshape(x, rest.iter().copied().chain(dims).collect());
        kernel_layout::<B, Float>(x)
    };
    let a = matrix(a, &sa, [k, m]);
    let g = matrix(g, &sg, [k, n]);
    let at = B::float_swap_dims(a, rank - 3, rank - 2); // [rest.., m, k]
    let mut out = B::float_matmul(kernel_layout::<B, Float>(at), g); // [rest.., m, n]
    if mean {
        out = B::float_div_scalar(out, Scalar::Float(k as f64));
    }
    // The reduced dim stays, with size 1, at `pd`.
    let mut dims = rest;
    dims.insert(pd, 1);
    dims.extend([m, n]);
    Ok(VmapTensor::new(
        <Float as Kind<B>>::reshape(out, Shape::from(dims)),
        bdims,
    ))
}

/// The factors of `t`, each expanded (a view) along the leading dims to the product's: the
/// factors then index like the product along any leading dim.
fn full_factors<B: Backend>(t: VT<B>) -> (FP<B>, FP<B>, BatchDims) {
    let shape = t.physical_shape();
    let rank = shape.num_dims();
    let (a, g, bdims) = factors::<B>(t);
    let expand = |x: FP<B>| {
        let s = x.shape();
        let full: Shape = (0..rank)
            .map(|d| if d < rank - 2 { shape[d] } else { s[d] })
            .collect();
        if s == full {
            x
        } else {
            B::float_expand(x, full)
        }
    };
    (expand(a), expand(g), bdims)
}

/// `cat` along a leading logical dim of outer products with the same batch dims and the same
/// shape but along `dim`: the factors are concatenated, the result stays factored (what
/// [`Concat`](crate::accumulate::Concat) does with the microbatches' per-example gradients).
pub(crate) fn cat<B: Backend>(tensors: Vec<VT<B>>, dim: usize) -> Result<VT<B>, Vec<VT<B>>> {
    let Some(first) = tensors.first() else {
        return Err(tensors);
    };
    let shape = first.physical_shape();
    let rank = shape.num_dims();
    let pd = first.bdims.len() + dim;
    let same = |t: &VT<B>| {
        let s = t.physical_shape();
        t.is_lazy_outer()
            && t.bdims == first.bdims
            && s.num_dims() == rank
            && (0..rank).all(|d| d == pd || s[d] == shape[d])
    };
    if tensors.len() < 2 || pd + 2 >= rank || !tensors.iter().all(same) {
        return Err(tensors);
    }
    let bdims = first.bdims.clone();
    let (a, g): (Vec<_>, Vec<_>) = tensors
        .into_iter()
        .map(|t| {
            let (a, g, _) = full_factors::<B>(t);
            (a, g)
        })
        .unzip();
    Ok(outer::<B>(B::float_cat(a, pd), B::float_cat(g, pd), bdims))
}

/// `select` along a leading logical dim of `a ⊗ g` with shared (unbatched) indices: the same
/// select on both factors (the reordering of [`Concat`](crate::accumulate::Concat)'s microbatch rows).
pub(crate) fn select<B: Backend>(
    t: VT<B>,
    dim: usize,
    indices: IT<B>,
) -> Result<VT<B>, (VT<B>, IT<B>)> {
    let rank = t.physical_shape().num_dims();
    let pd = t.bdims.len() + dim;
    if !t.is_lazy_outer() || indices.is_batched() || pd + 2 >= rank {
        return Err((t, indices));
    }
    let (a, g, bdims) = full_factors::<B>(t);
    let idx = indices.inner();
    Ok(outer::<B>(
        B::float_select(a, pd, idx.clone()),
        B::float_select(g, pd, idx),
        bdims,
    ))
}

/// `unbatch` of `a ⊗ g` at `level` into logical `axis` (`BatchOps::float_unbatch`): the same
/// move on both factors, which stay factored.
pub(crate) fn unbatch<B: Backend>(
    t: VT<B>,
    level: Level,
    size: usize,
    axis: usize,
) -> Result<VT<B>, VT<B>> {
    // The factored layout keeps the two matrix dims last: an axis that lands among them (an
    // `out_axes` of -1 or -2 on a weight gradient) leaves the factored form, multiplied out by
    // the general rule. Moving the factors there would put the batch inside the matrix dims,
    // where the sum and `sum_dim` rules would read the wrong dims.
    if t.is_lazy_outer() {
        let rank = t.physical_shape().num_dims();
        let lead = t.bdims.len() - usize::from(t.bdims.position(level).is_some());
        if lead + axis > rank.saturating_sub(2 + usize::from(t.bdims.position(level).is_some())) {
            return Err(t);
        }
    }
    let (a, g, mut bdims) = t.into_outer()?;
    match bdims.remove(level) {
        Some((pos, _)) => {
            let to = bdims.len() + axis;
            let a = move_dim::<B, Float>(a, pos, to);
            let g = move_dim::<B, Float>(g, pos, to);
            Ok(outer::<B>(a, g, bdims))
        }
        None => {
            // The same for every example: a new axis of `size`, broadcast from `a`.
            let at = bdims.len() + axis;
            let insert = |x: FP<B>| {
                let mut dims = x.shape().to_vec();
                dims.insert(at, 1);
                <Float as Kind<B>>::reshape(x, Shape::from(dims))
            };
            let (a, g) = (insert(a), insert(g));
            let mut full = a.shape().to_vec();
            full[at] = size;
            Ok(outer::<B>(B::float_expand(a, Shape::from(full)), g, bdims))
        }
    }
}
