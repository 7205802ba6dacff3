//! The ops with factored forms (the table in [`super`]).

use burn_backend::backend::Backend;
use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{Scalar, TensorMetadata, get_or_init_device_settings};

use super::{
    Declined, FP, IT, VT, dense_left, expand_lead, factors, gram, joined_left, joined_right, make,
    map_factors, matmul, multiply_pair, realign, reshape, scale_part, scale_parts, single_part,
    zeros,
};
use crate::level::Level;
use crate::physical::{Float, move_dim, with_batch_sizes};
use crate::rules::helpers::{align, cat_floats, reduce_unless_unit};
use crate::tensor::{BatchDims, Factors, Left, Origin, Part, Tag, VmapTensor};

/// `lhs + rhs` of two factored products of the same shape (a parameter used twice: the
/// gradients of its uses add up): one sum holding the parts of both.
pub(crate) fn add<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> Result<VT<B>, (VT<B>, VT<B>)> {
    let (lhs, rhs) = (factored::<B>(lhs), factored::<B>(rhs));
    if !(lhs.has_factors() && rhs.has_factors())
        || lhs.bdims != rhs.bdims
        || lhs.physical_shape() != rhs.physical_shape()
        || lhs.factors_ref().map(|f| f.cols) != rhs.factors_ref().map(|f| f.cols)
    {
        return Err((lhs, rhs));
    }
    let (mut f, bdims) = factors::<B>(lhs);
    let (g, _) = factors::<B>(rhs);
    f.parts.extend(g.parts);
    Ok(make::<B>(f, bdims))
}

/// `lhs * rhs` with a factored form (see the module table), or the operands back.
pub(crate) fn mul<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> Result<VT<B>, (VT<B>, VT<B>)> {
    let (lhs, rhs) = (factored::<B>(lhs), factored::<B>(rhs));
    match (lhs.has_factors(), rhs.has_factors()) {
        (true, true) => Ok(product::<B>(lhs, rhs)),
        (true, false) => scaled::<B>(lhs, rhs, B::float_mul),
        // Multiplication commutes: `s * (Xᵀ G) = (s X)ᵀ G`.
        (false, true) => scaled::<B>(rhs, lhs, B::float_mul).map_err(|(o, s)| (s, o)),
        // `g * g` of a dense tensor (a squared norm's, `global_norm` on a bias): held as the
        // pair, so that its sum is one inner product per example (see [`sum`]).
        (false, false)
            if !lhs.is_factored()
                && !rhs.is_factored()
                && lhs.origin() == rhs.origin()
                && lhs.physical_shape() == rhs.physical_shape()
                && !lhs.is_scalar()
                && lhs.shape().num_elements() > 0 =>
        {
            Ok(VmapTensor::hadamard([lhs, rhs], multiply_pair::<B>))
        }
        // A dense tensor times a per-example factor (a clipped bias's `g * c`): held as the pair,
        // so that its sum over the examples is one matrix product (see [`sum_dim`]).
        (false, false) if per_example_factor::<B>(&lhs, &rhs) => Ok(scaled_pair::<B>(lhs, rhs)),
        (false, false) if per_example_factor::<B>(&rhs, &lhs) => Ok(scaled_pair::<B>(rhs, lhs)),
        (false, false) => Err((lhs, rhs)),
    }
}

/// Whether `s` is one value per example of `g`'s examples (`g`'s batch dims, one element), `g`
/// a dense batched tensor of more than one element per example.
fn per_example_factor<B: Backend>(g: &VT<B>, s: &VT<B>) -> bool {
    !g.is_factored()
        && !s.is_factored()
        && g.is_batched()
        && !g.is_scalar()
        && g.bdims == s.bdims
        && s.shape().num_elements() == 1
        && g.shape().num_elements() > 1
        && s.shape().num_dims() <= g.shape().num_dims()
}

/// `g * s` held as the pair `[g, s]`, `s` laid out as `[batch.., 1, ..]` of `g`'s rank.
fn scaled_pair<B: Backend>(g: VT<B>, s: VT<B>) -> VT<B> {
    let dims = with_batch_sizes(&s.bdims, &vec![1; g.shape().num_dims()]);
    let origin = s.origin();
    let (s, bdims) = s.into_parts();
    // A reshape: the same value (the clip factors every clipped bias holds are cast once).
    let s = VmapTensor::new(reshape::<B>(s, dims.to_vec()), bdims).with_origin(origin);
    VmapTensor::hadamard([g, s], multiply_pair::<B>)
}

/// The operands of a pair [`scaled_pair`] holds: a dense tensor and a factor of other shape.
fn scaled_operands<B: Backend>(t: &VT<B>) -> Option<&[VT<B>; 2]> {
    t.hadamard_ref()
        .filter(|[g, s]| !g.has_factors() && g.physical_shape() != s.physical_shape())
}

/// `lhs / rhs` with a factored form (a product divided by a per-example factor), or the
/// operands back.
pub(crate) fn div<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> Result<VT<B>, (VT<B>, VT<B>)> {
    let (lhs, rhs) = (factored::<B>(lhs), factored::<B>(rhs));
    if !lhs.has_factors() || rhs.is_factored() {
        return Err((lhs, rhs));
    }
    scaled::<B>(lhs, rhs, B::float_div)
}

/// The elementwise product of two factored products of the same shape, held as the pair until
/// read: its sum is a Gram product (see [`sum`]); every other rule takes it as [`factored`]
/// makes it (for one row each, `(x x') ⊗ (g g')`, still factored).
fn product<B: Backend>(lhs: VT<B>, rhs: VT<B>) -> VT<B> {
    let same = lhs.bdims == rhs.bdims
        && lhs.physical_shape() == rhs.physical_shape()
        && lhs.factors_ref().map(|f| f.cols) == rhs.factors_ref().map(|f| f.cols);
    if same && one_row::<B>(&lhs) && one_row::<B>(&rhs) {
        return VmapTensor::hadamard([lhs, rhs], one_row_pair::<B>);
    }
    if same {
        return VmapTensor::hadamard([lhs, rhs], multiply_pair::<B>);
    }
    // Broadcasting products of factored tensors of different shapes: multiplied out.
    let bdims = BatchDims::union([&lhs.bdims, &rhs.bdims]);
    let l = align::<B, Float>(lhs, &bdims);
    let r = align::<B, Float>(rhs, &bdims);
    VmapTensor::new(B::float_mul(l, r), bdims)
}

/// Whether `t` is a factored product of one dense row per example (a `Linear` on a vector).
fn one_row<B: Backend>(t: &VT<B>) -> bool {
    t.factors_ref()
        .is_some_and(|f| f.parts.len() == 1 && f.k() == 1 && !f.parts[0].left.is_one_hot())
}

/// `g * g'` of two one-row products as one factored product: `(x x') ⊗ (g g')`, one row.
fn one_row_product<B: Backend>([lhs, rhs]: [VT<B>; 2]) -> VT<B> {
    let (mut f, bdims) = factors::<B>(lhs);
    let (g, _) = factors::<B>(rhs);
    let (p, q) = (
        f.parts.remove(0),
        g.parts.into_iter().next().expect("one part"),
    );
    let (Left::Dense(x), Left::Dense(y)) = (p.left, q.left) else {
        unreachable!("checked to be dense")
    };
    f.parts = vec![Part::new(
        Left::Dense(B::float_mul(x, y)),
        B::float_mul(p.right, q.right),
    )];
    make::<B>(f, bdims)
}

/// The multiplied-out pair of one-row products (through their factored product).
fn one_row_pair<B: Backend>(pair: [VT<B>; 2]) -> FP<B> {
    one_row_product::<B>(pair).inner()
}

/// `t` as the factored rules take it: the pair of one-row products [`product`] holds (for
/// [`sum`]'s inner products of rows, which read each row once instead of writing their squares
/// and summing those) as its factored product; any other tensor as it is.
fn factored<B: Backend>(t: VT<B>) -> VT<B> {
    if !t
        .hadamard_ref()
        .is_some_and(|[a, b]| one_row::<B>(a) && one_row::<B>(b))
    {
        return t;
    }
    match t.into_hadamard() {
        Ok(pair) => one_row_product::<B>(pair),
        Err(_) => unreachable!("checked to be a pair"),
    }
}

/// `op(Xᵀ G, s)` for `s` constant over the product's matrix dims (a per-example factor):
/// `op` applied to one factor of every part.
fn scaled<B: Backend>(
    o: VT<B>,
    s: VT<B>,
    op: fn(FP<B>, FP<B>) -> FP<B>,
) -> Result<VT<B>, (VT<B>, VT<B>)> {
    let Some(f) = o.factors_ref() else {
        return Err((o, s));
    };
    let shape = s.shape();
    let rank = shape.num_dims();
    let matrix_dims = 1 + f.cols;
    let logical_lead = f.lead() - o.bdims.len();
    if rank != logical_lead + matrix_dims || shape.iter().skip(logical_lead).any(|&d| d != 1) {
        return Err((o, s));
    }
    let bdims = BatchDims::union([&o.bdims, &s.bdims]);
    let (f, own) = factors::<B>(o);
    let mut f = realign::<B>(f, &own, &bdims);
    // `s` as `[lead.., 1, 1]`, broadcasting against `[lead.., k, _]`.
    let s = align::<B, Float>(s, &bdims);
    let lead = f.lead();
    let dims: Vec<usize> = s.shape().iter().take(lead).copied().chain([1, 1]).collect();
    // The product's leading dims broadcast against the factor's (one example scaled by many).
    let mut shape = f.shape.to_vec();
    for (d, &size) in shape.iter_mut().zip(&dims).take(lead) {
        *d = (*d).max(size);
    }
    f.shape = shape.into();
    let s = reshape::<B>(s, dims);
    let f = scale_parts::<B>(f, |t| op(t, s.clone()));
    Ok(make::<B>(f, bdims))
}

/// `Xᵀ G` times (`divide` false) or divided by a scalar: one factor of every part scaled.
pub(crate) fn scalar<B: Backend>(t: VT<B>, s: Scalar, divide: bool) -> Declined<VT<B>> {
    let (f, bdims) = factored::<B>(t).into_factors()?;
    let f = scale_parts::<B>(f, |x| {
        if divide {
            B::float_div_scalar(x, s)
        } else {
            B::float_mul_scalar(x, s)
        }
    });
    Ok(make::<B>(f, bdims))
}

/// `Xᵀ G` cast to `dtype`: every factor cast (the product of the cast factors is the cast
/// product of exact values; one-hot indices stay exact in any float dtype). A wide sum over the
/// examples (`accumulate::WideSum`) casts the per-example gradients to `f64` this way before
/// its matrix product. A pair `[g, s]` ([`scaled_pair`]: a clipped bias) casts both operands
/// and stays a pair, so that its sum over the examples is still one matrix product
/// ([`scaled_sum_dim`]) and not a reduction of the multiplied-out rows; in `f64` the product
/// of two `f32` values is exact, so the wide sum is, if anything, closer to the exact one.
///
/// A value cast once is not cast again while the vmap level runs, if among its last few casts
/// ([`cast_once`]): the clip factors every clipped bias holds, the input that a layer's query,
/// key and value weights read. Several parts (an LSTM's weight, a part per time step) are
/// joined first where launches count (`compat::joins_parts_to_cast`).
pub(crate) fn cast<B: Backend>(t: VT<B>, dtype: burn_backend::FloatDType) -> Declined<VT<B>> {
    if scaled_operands::<B>(&t).is_some() {
        let Ok(pair) = t.into_hadamard() else {
            unreachable!("checked to be a pair")
        };
        let pair = pair.map(|x| {
            let tag = Tag {
                origin: x.origin(),
                bdims: x.bdims.clone(),
                shape: x.physical_shape(),
            };
            let (x, bdims) = x.into_parts();
            VmapTensor::new(cast_once::<B>(x, Some(tag), false, dtype), bdims)
        });
        return Ok(VmapTensor::hadamard(pair, multiply_pair::<B>));
    }
    let (f, bdims) = factored::<B>(t).into_factors()?;
    let join =
        f.parts.len() > 1 && crate::compat::joins_parts_to_cast::<B>(&f.parts[0].right.device());
    let f = match join {
        true => single_part::<B>(f),
        false => f,
    };
    let parts = f
        .parts
        .into_iter()
        .map(|p| {
            let left = match p.left {
                Left::Dense(x) => Left::Dense(cast_once::<B>(x, p.left_tag, false, dtype)),
                Left::OneHot(x) => Left::OneHot(cast_once::<B>(x, p.left_tag, true, dtype)),
            };
            Part::new(left, cast_once::<B>(p.right, p.right_tag, false, dtype))
        })
        .collect();
    Ok(make::<B>(Factors { parts, ..f }, bdims))
}

/// What [`cast_once`] keys a cast by: the value (equal origins at equal batch dims hold the
/// same elements in the same order, perhaps in other shapes: a bias's output gradient `[n, d]`
/// and the same rows as a weight's factor `[n, 1, d]`), whether it is a one-hot factor's
/// indices, and the dtype.
#[derive(PartialEq)]
struct CastKey {
    origin: Origin,
    bdims: BatchDims,
    elements: usize,
    one_hot: bool,
    dtype: burn_backend::FloatDType,
}

/// `x` (the value `tag` names, if any) cast to `dtype`, once while the current vmap level
/// runs, among its last few casts ([`memoized_recent`](crate::level::memoized_recent): the
/// equal values a wide sum casts are handed back one after the other, and a layer input in
/// `f64` can be large), reshaped to `x`'s shape; the cast is untagged (a tag names an `f32`
/// value, whose Gram matrices are memoized by it).
fn cast_once<B: Backend>(
    x: FP<B>,
    tag: Option<Tag>,
    one_hot: bool,
    dtype: burn_backend::FloatDType,
) -> FP<B> {
    let Some(tag) = tag else {
        return B::float_cast(x, dtype);
    };
    let key = CastKey {
        origin: tag.origin,
        bdims: tag.bdims,
        elements: tag.shape.num_elements(),
        one_hot,
        dtype,
    };
    let shape = x.shape();
    let cast = crate::level::memoized_recent(key, || B::float_cast(x, dtype));
    reshape::<B>(cast, shape.to_vec())
}

/// `sum` over every logical element, as `[1]` per example.
///
/// Of `Xᵀ G`: `Σ_t sum(x_t) sum(g_t)` (a one-hot row sums to 1). Of the elementwise product
/// of two factored products (a squared norm's `g * g`): `⟨X X'ᵀ, G G'ᵀ⟩`, from the `k × k'`
/// Gram matrices of the rows, never the `m × n` products; one-hot rows compare their indices.
pub(crate) fn sum<B: Backend>(t: VT<B>) -> Declined<VT<B>> {
    if scaled_operands::<B>(&t).is_some() {
        return Err(t);
    }
    let t = match t.into_hadamard() {
        Ok([a, b]) if a.has_factors() => return Ok(gram::gram_sum::<B>(a, b)),
        Ok([a, b]) => return Ok(gram::dense_dot::<B>(a, b)),
        Err(t) => t,
    };
    let (f, bdims) = t.into_factors()?;
    let lead = f.lead();
    let lead_dims: Vec<usize> = f.shape.iter().take(lead).copied().collect();
    let mut total: Option<FP<B>> = None;
    for part in f.parts {
        let rows = B::float_sum_dim(part.right, lead + 1); // [lead.., k, 1]
        let rows = match part.left {
            Left::Dense(x) => B::float_mul(B::float_sum_dim(x, lead + 1), rows),
            Left::OneHot(_) => rows,
        };
        let per = reduce_unless_unit(rows, lead, B::float_sum_dim); // [lead.., 1, 1]
        total = Some(match total {
            Some(t) => B::float_add(t, per),
            None => per,
        });
    }
    let per = expand_lead::<B>(total.expect("at least one part"), &lead_dims);
    Ok(gram::per_lead_sum::<B>(per, bdims))
}

/// `sum_dim` (or `mean_dim`) of `Xᵀ G` along logical `dim`.
///
/// Along the row dim `m` it reduces `X`, along the (single) column dim it reduces `G`. Along a
/// leading dim: with both factors constant along it, a scaling; with one constant, the other
/// reduced; otherwise the sum over that dim of every product, `Σ_b X_bᵀ G_b`: one matrix
/// product over the rows of every `b` (Goodfellow's trick: the sum over examples of their
/// weight gradients), or, for one-hot rows, one scatter-add of the right rows.
pub(crate) fn sum_dim<B: Backend>(t: VT<B>, dim: usize, mean: bool) -> Declined<VT<B>> {
    if scaled_operands::<B>(&t).is_some() {
        return scaled_sum_dim::<B>(t, dim, mean);
    }
    let t = factored::<B>(t);
    let Some(f) = t.factors_ref() else {
        return Err(t);
    };
    let pd = t.bdims.len() + dim;
    let lead = f.lead();
    if pd > lead + 1 || (pd == lead + 1 && f.cols != 1) {
        // A column dim of a convolution's `[c_in, k..]`: multiplied out.
        return Err(t);
    }
    let (f, bdims) = factors::<B>(t);
    let size = f.shape[pd];
    let reduce = |x: FP<B>, d: usize| {
        if mean {
            B::float_mean_dim(x, d)
        } else {
            B::float_sum_dim(x, d)
        }
    };
    let mut shape = f.shape.to_vec();
    shape[pd] = 1;
    if pd == lead || pd == lead + 1 {
        // The row dim reduces the left factor, the column dim the right one.
        let m = f.m();
        let row = |left: Left<FP<B>>| match left {
            Left::Dense(x) => reduce(x, lead + 1),
            // A one-hot row sums to 1.
            Left::OneHot(i) => {
                let ones = B::float_add_scalar(B::float_mul_scalar(i, 0.0.into()), 1.0.into());
                if mean {
                    B::float_div_scalar(ones, Scalar::Float(m as f64))
                } else {
                    ones
                }
            }
        };
        let parts = f
            .parts
            .into_iter()
            .map(|p| match pd == lead {
                true => Part::new(Left::Dense(row(p.left)), p.right),
                false => Part::new(p.left, reduce(p.right, lead + 1)),
            })
            .collect();
        let shape = shape.into();
        return Ok(make::<B>(Factors { parts, shape, ..f }, bdims));
    }
    // A leading dim.
    let varies = |t: &FP<B>| t.shape()[pd] != 1;
    let contract = f
        .parts
        .iter()
        .any(|p| varies(p.left.tensor()) && varies(&p.right));
    if contract {
        return Ok(contract_lead::<B>(f, bdims, pd, mean));
    }
    let m = f.m();
    let parts = f
        .parts
        .into_iter()
        .map(|p| {
            if varies(&p.right) {
                // `Σ_b xᵀ g_b = xᵀ Σ_b g_b`.
                Part::new(p.left, reduce(p.right, pd))
            } else if varies(p.left.tensor()) {
                let x = dense_left::<B>(p.left, m);
                Part::new(Left::Dense(reduce(x, pd)), p.right)
            } else if mean {
                p
            } else {
                // Constant along `pd`: `size` equal terms.
                scale_part::<B>(p, |x| B::float_mul_scalar(x, Scalar::Float(size as f64)))
            }
        })
        .collect();
    let f = Factors {
        parts,
        shape: shape.into(),
        cols: f.cols,
    };
    Ok(make::<B>(f, bdims))
}

/// `Σ_b X_bᵀ G_b` along leading dim `pd` (mean: divided by its size), multiplied out: the rows
/// of every `b` joined into one contraction, one per part where the parts are all dense.
fn contract_lead<B: Backend>(f: super::F<B>, bdims: BatchDims, pd: usize, mean: bool) -> VT<B> {
    let (lead, m, n) = (f.lead(), f.m(), f.n());
    let size = f.shape[pd];
    let mut out_shape = f.shape.to_vec();
    out_shape[pd] = 1;
    let lead_dims: Vec<usize> = f.shape.iter().take(lead).copied().collect();
    // `[rest.., pd, k, w] -> [rest.., size·k, w]`.
    let join = |t: FP<B>| {
        let t = move_dim::<B, Float>(expand_lead::<B>(t, &lead_dims), pd, lead - 1);
        let s = t.shape();
        let dims: Vec<usize> = s
            .iter()
            .take(lead - 1)
            .copied()
            .chain([s[lead - 1] * s[lead], s[lead + 1]])
            .collect();
        reshape::<B>(t, dims)
    };
    let transposed = |t: FP<B>| B::float_swap_dims(join(t), lead - 1, lead);
    let out = if f.parts.len() > 1 && f.parts.iter().all(|p| !p.left.is_one_hot()) {
        // Dense parts (a parameter used several times: an LSTM's, once per time step): one
        // product per part, summed, as Burn's own backward accumulates them; joining the parts
        // first would copy every row once more (and fault fresh pages in for the copy).
        f.parts
            .into_iter()
            .map(|p| matmul::<B>(transposed(dense_left::<B>(p.left, m)), join(p.right)))
            .reduce(B::float_add)
            .expect("several parts")
    } else {
        let f = single_part::<B>(f);
        let part = f.parts.into_iter().next().expect("one part");
        let right = join(part.right);
        match part.left {
            Left::OneHot(index) if lead == 1 => {
                // `[rows, 1]` indices: scatter-add the right rows into `[m, n]`.
                let rows = right.shape()[0];
                let device = index.device();
                let int = get_or_init_device_settings::<B>(&device).int_dtype;
                let index = B::float_into_int(reshape::<B>(join(index), vec![rows]), int);
                let target = zeros::<B>(&right, vec![m, n]);
                B::float_select_assign(target, 0, index, right, IndexingUpdateOp::Add)
            }
            left => matmul::<B>(transposed(dense_left::<B>(left, m)), right),
        }
    };
    let out = if mean {
        B::float_div_scalar(out, Scalar::Float(size as f64))
    } else {
        out
    };
    VmapTensor::new(reshape::<B>(out, out_shape), bdims)
}

/// `cat` along a leading logical dim of factored products with the same batch dims and the same
/// shape but along `dim`, and the same number of rows: the factors are concatenated, the
/// result stays factored (what the `Concat` accumulator does with the
/// microbatches' per-example gradients).
pub(crate) fn cat<B: Backend>(tensors: Vec<VT<B>>, dim: usize) -> Result<VT<B>, Vec<VT<B>>> {
    let tensors: Vec<VT<B>> = tensors.into_iter().map(factored::<B>).collect();
    let Some(first) = tensors.first().and_then(|t| t.factors_ref()) else {
        return Err(tensors);
    };
    let bdims = tensors[0].bdims.clone();
    let pd = bdims.len() + dim;
    let (shape, cols, k) = (first.shape.clone(), first.cols, first.k());
    let lead = first.lead();
    let one_hot = |f: &super::F<B>| f.parts.iter().all(|p| p.left.is_one_hot());
    let kind = one_hot(first);
    let same = |t: &VT<B>| {
        t.factors_ref().is_some_and(|f| {
            let s = &f.shape;
            t.bdims == bdims
                && f.cols == cols
                && f.k() == k
                && one_hot(f) == kind
                && s.num_dims() == shape.num_dims()
                && (0..s.num_dims()).all(|d| d == pd || s[d] == shape[d])
        })
    };
    if tensors.len() < 2 || pd >= lead || !tensors.iter().all(same) {
        return Err(tensors);
    }
    let mut total = 0;
    let (lefts, rights): (Vec<_>, Vec<_>) = tensors
        .into_iter()
        .map(|t| {
            let (f, _) = factors::<B>(t);
            let lead_dims: Vec<usize> = f.shape.iter().take(lead).copied().collect();
            total += f.shape[pd];
            (
                expand_lead::<B>(joined_left::<B>(&f).into_tensor(), &lead_dims),
                expand_lead::<B>(joined_right::<B>(&f), &lead_dims),
            )
        })
        .unzip();
    let left = cat_floats::<B>(lefts, pd);
    let mut shape = shape.to_vec();
    shape[pd] = total;
    let f = Factors::single(
        Part::new(Left::new(kind, left), cat_floats::<B>(rights, pd)),
        shape.into(),
        cols,
    );
    Ok(make::<B>(f, bdims))
}

/// `select` along a leading logical dim of `Xᵀ G` with shared (unbatched) indices: the same
/// select on both factors (the reordering of the `Concat` accumulator's
/// microbatch rows); a factor constant along that dim stays as it is.
pub(crate) fn select<B: Backend>(
    t: VT<B>,
    dim: usize,
    indices: IT<B>,
) -> Result<VT<B>, (VT<B>, IT<B>)> {
    let t = factored::<B>(t);
    let pd = t.bdims.len() + dim;
    if indices.is_batched() || t.factors_ref().is_none_or(|f| pd >= f.lead()) {
        return Err((t, indices));
    }
    let (f, bdims) = factors::<B>(t);
    let idx = indices.inner();
    let count = idx.shape().num_elements();
    let mut shape = f.shape.to_vec();
    shape[pd] = count;
    let f = map_factors::<B>(f, |x| {
        if x.shape()[pd] == 1 {
            x
        } else {
            B::float_select(x, pd, idx.clone())
        }
    });
    Ok(make::<B>(
        Factors {
            shape: shape.into(),
            ..f
        },
        bdims,
    ))
}

/// `sum_dim` of a pair `[g, s]` ([`scaled_pair`]) over logical `dim` 0 where `s` varies (the
/// examples, once unbatched: a clipped bias summed over the batch): `Σ_e s_e g_e` as one
/// matrix product `sᵀ g`, where the product and the sum take two launches. Otherwise the pair
/// is multiplied out (declined).
fn scaled_sum_dim<B: Backend>(t: VT<B>, dim: usize, mean: bool) -> Declined<VT<B>> {
    let [g, s] = scaled_operands::<B>(&t).expect("a scaled pair");
    let pd = t.bdims.len() + dim;
    let (gs, ss) = (g.physical_shape(), s.physical_shape());
    let m = gs[pd];
    let varies_only_here = ss[pd] == m
        && ss
            .iter()
            .enumerate()
            .skip(t.bdims.len())
            .all(|(d, &n)| d == pd || n == 1);
    if mean || dim != 0 || m < 2 || !varies_only_here {
        return Err(t);
    }
    let Ok([g, s]) = t.into_hadamard() else {
        unreachable!("checked to be a pair")
    };
    let nb = g.bdims.len();
    let batch: Vec<usize> = gs.as_slice()[..nb].to_vec();
    let rest: Vec<usize> = gs.as_slice()[nb + 1..].to_vec();
    let n: usize = rest.iter().product();
    let (g, bdims) = g.into_parts();
    let (s, _) = s.into_parts();
    let with = |tail: &[usize]| batch.iter().chain(tail).copied().collect::<Vec<usize>>();
    let g = reshape::<B>(g, with(&[m, n]));
    let s = reshape::<B>(s, with(&[1, m]));
    let out = B::float_matmul(s, g); // [batch.., 1, n]
    let mut dims = with(&[1]);
    dims.extend(rest);
    Ok(VmapTensor::new(reshape::<B>(out, dims), bdims))
}

/// `unbatch` of `Xᵀ G` at `level` into logical `axis` (`BatchOps::float_unbatch`): the same
/// move on both factors, which stay factored.
pub(crate) fn unbatch<B: Backend>(
    t: VT<B>,
    level: Level,
    size: usize,
    axis: usize,
) -> Declined<VT<B>> {
    if scaled_operands::<B>(&t).is_some() {
        let Ok(pair) = t.into_hadamard() else {
            unreachable!("checked to be a pair")
        };
        let [g, s] = pair.map(|x| super::super::batch::unbatch::<B, Float>(x, level, size, axis));
        return Ok(VmapTensor::hadamard([g, s], multiply_pair::<B>));
    }
    let t = factored::<B>(t);
    let Some(f) = t.factors_ref() else {
        return Err(t);
    };
    // The factored layout keeps the matrix dims last: an axis that lands among them (an
    // `out_axes` of -1 or -2 on a weight gradient) leaves the factored form, multiplied out by
    // the general rule.
    let present = t.bdims.position(level);
    let lead_after = f.lead() - usize::from(present.is_some());
    let to = t.bdims.len() - usize::from(present.is_some()) + axis;
    if to > lead_after {
        return Err(t);
    }
    let (f, mut bdims) = factors::<B>(t);
    let mut shape = f.shape.to_vec();
    let f = match bdims.remove(level) {
        Some((pos, _)) => {
            let moved = shape.remove(pos);
            shape.insert(to, moved);
            map_factors::<B>(f, |x| move_dim::<B, Float>(x, pos, to))
        }
        None => {
            // The same for every example: a new leading dim along which both factors are
            // constant (size 1, broadcast).
            shape.insert(to, size);
            map_factors::<B>(f, |x| {
                let mut dims = x.shape().to_vec();
                dims.insert(to, 1);
                reshape::<B>(x, dims)
            })
        }
    };
    Ok(make::<B>(
        Factors {
            shape: shape.into(),
            ..f
        },
        bdims,
    ))
}
