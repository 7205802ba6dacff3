//! Matrix products (JAX's `dot_general` batching rule).

use burn_backend::backend::Backend;
use burn_backend::ops::FloatTensorOps;
use burn_backend::{Shape, TensorMetadata};

use super::helpers::align;
use crate::compat;
use crate::physical::{Float, Kind};
use crate::tensor::{BatchDims, VmapTensor};

/// `matmul(lhs, rhs)` over the last two logical dims, broadcasting the leading ones.
///
/// A batched `lhs` times an unbatched `rhs` whose leading logical dims are all 1 (a weight
/// matrix) folds every batch and leading dim into the rows: one large `[rows, k] x [k, n]`
/// product instead of many small ones. A contraction of size 1 (the outer products of
/// per-example weight gradients, `x^T g` for one example) is a broadcasting multiply `mul`,
/// which avoids one tiny GEMM call per example. Other mixes use the backend's broadcasting
/// batched matmul, with size-1 dims for missing levels. At least one operand is batched (the
/// ops' fast path runs first).
pub(crate) fn matmul<B: Backend, K: Kind<B>>(
    lhs: VmapTensor<K::P>,
    rhs: VmapTensor<K::P>,
    f: impl FnOnce(K::P, K::P) -> K::P,
    mul: impl FnOnce(K::P, K::P) -> K::P,
) -> VmapTensor<K::P> {
    let lshape = lhs.physical_shape();
    if lshape.num_dims() >= 2
        && lshape[lshape.num_dims() - 1] == 1
        && lhs.physical_shape().num_dims() - lhs.bdims.len() >= 2
    {
        // [.., m, 1] x [.., 1, n] = [.., m, 1] * [.., 1, n] (broadcast).
        return super::elementwise::binary::<B, K, K, _>(lhs, rhs, mul);
    }
    if rhs.bdims.is_empty() {
        let rshape = rhs.physical_shape();
        let rrank = rshape.num_dims();
        let lshape = lhs.physical_shape();
        let lrank = lshape.num_dims() - lhs.bdims.len();
        let rows: usize = lshape[..lshape.num_dims() - 1].iter().product();
        // A batch of size 0 (or an empty leading dim) takes the broadcasting path below.
        if rrank >= 2
            && lrank >= 2
            && compat::can_fold_rows(rows)
            && rshape[..rrank - 2].iter().all(|&d| d == 1)
        {
            let (k, n) = (rshape[rrank - 2], rshape[rrank - 1]);
            let (l, _, bdims) = lhs.into_stored();
            let l2 = rows_of::<B, K>(l, rows, k);
            let (r, _, _) = rhs.into_stored();
            let r2 = rows_of::<B, K>(r, k, n);
            let out = f(l2, r2);
            let mut out_dims = lshape.to_vec();
            *out_dims.last_mut().expect("rank >= 2") = n;
            return VmapTensor::reshaped(out, bdims, Shape::from(out_dims), K::reshape);
        }
    }
    let bdims = BatchDims::union([&lhs.bdims, &rhs.bdims]);
    let l = align::<B, K>(lhs, &bdims);
    let r = align::<B, K>(rhs, &bdims);
    VmapTensor::new(f(l, r), bdims)
}

/// Stored data (any shape, row-major order) as a `[rows, cols]` matrix: no copy when it has
/// that shape already.
pub(crate) fn rows_of<B: Backend, K: Kind<B>>(data: K::P, rows: usize, cols: usize) -> K::P {
    let shape = data.shape();
    if shape.num_dims() == 2 && shape[0] == rows && shape[1] == cols {
        data
    } else {
        K::reshape(data, Shape::from(vec![rows, cols]))
    }
}

type FP<B> = <B as burn_backend::backend::BackendTypes>::FloatTensorPrimitive;
type VT<B> = VmapTensor<FP<B>>;
type Ops<B> = crate::Vmap<B>;

/// `[.., d]` (logical) as `[m, d]`, `m` the product of the leading logical dims (1 for rank 1):
/// a pending reshape, no copy.
fn as_matrix<B: Backend>(t: VT<B>) -> VT<B> {
    let shape = t.shape();
    let d = shape[shape.num_dims() - 1];
    let m = shape.num_elements().checked_div(d).unwrap_or(0);
    <Ops<B> as FloatTensorOps<Ops<B>>>::float_reshape(t, Shape::from(vec![m, d]))
}

/// `[rows, width]` of a physical tensor `[.., width]` with every batch and leading dim folded
/// into the rows, when it has an element (an empty fold takes the general path).
fn rows_and_width<B: Backend>(t: &VT<B>) -> Option<(usize, usize)> {
    let shape = t.physical_shape();
    let width = shape[shape.num_dims() - 1];
    let rows = shape.num_elements().checked_div(width).unwrap_or(0);
    (rows > 0 && width > 0).then_some((rows, width))
}

/// `f` on `t` as its `[rows, width]` matrix (a pending reshape read in place), its
/// `[rows, d_out]` result as `[.., d_out]` with `t`'s batch and leading dims (a pending
/// reshape).
fn on_rows<B: Backend>(
    t: VT<B>,
    (rows, width): (usize, usize),
    d_out: usize,
    f: impl FnOnce(FP<B>) -> FP<B>,
) -> VT<B> {
    let mut out_dims = t.physical_shape().to_vec();
    *out_dims.last_mut().expect("rank >= 1") = d_out;
    let (data, _, bdims) = t.into_stored();
    let out = f(rows_of::<B, Float>(data, rows, width));
    VmapTensor::reshaped(
        out,
        bdims,
        Shape::from(out_dims),
        <Float as Kind<B>>::reshape,
    )
}

/// Burn's `ModuleOps::linear` (`x @ weight + bias`, `x: [.., d_in]`).
///
/// A batched `x` with unbatched parameters folds every batch and leading dim into the rows and
/// calls the inner backend's `linear` once on `[rows, d_in]`; with a pending reshape of `x`
/// (Burn's `linear` on one example inserts a leading size-1 dim) nothing is copied. Batched
/// parameters (per-example weights) use the matmul and add rules.
pub(crate) fn linear<B: Backend>(x: VT<B>, weight: VT<B>, bias: Option<VT<B>>) -> VT<B> {
    let params_unbatched = !weight.is_batched() && bias.as_ref().is_none_or(|b| !b.is_batched());
    if params_unbatched {
        if !x.is_batched() {
            return VmapTensor::unbatched(B::linear(
                x.inner(),
                weight.inner(),
                bias.map(VmapTensor::inner),
            ));
        }
        if let Some(matrix) = rows_and_width::<B>(&x) {
            let d_out = weight.physical_shape()[1];
            return on_rows::<B>(x, matrix, d_out, |x| {
                B::linear(x, weight.inner(), bias.map(VmapTensor::inner))
            });
        }
    }
    // Burn's default: `x @ weight` (weight with leading size-1 dims) `+ bias`.
    let rank = x.shape().num_dims();
    let lead = |t: VT<B>| {
        let s = t.shape();
        let dims: Vec<usize> = core::iter::repeat_n(1, rank.saturating_sub(s.num_dims()))
            .chain(s.iter().copied())
            .collect();
        <Ops<B> as FloatTensorOps<Ops<B>>>::float_reshape(t, Shape::from(dims))
    };
    let out = <Ops<B> as FloatTensorOps<Ops<B>>>::float_matmul(x, lead(weight));
    match bias {
        Some(b) => <Ops<B> as FloatTensorOps<Ops<B>>>::float_add(out, lead(b)),
        None => out,
    }
}

/// Burn's `ModuleOps::linear_x_backward`: `output_grad @ weight^T`, folded into rows as
/// [`linear`] when the weight is unbatched.
pub(crate) fn linear_x_backward<B: Backend>(weight: VT<B>, output_grad: VT<B>) -> VT<B> {
    if !weight.is_batched() {
        if !output_grad.is_batched() {
            return VmapTensor::unbatched(B::linear_x_backward(
                weight.inner(),
                output_grad.inner(),
            ));
        }
        if let Some(matrix) = rows_and_width::<B>(&output_grad) {
            let d_in = weight.physical_shape()[0];
            return on_rows::<B>(output_grad, matrix, d_in, |g| {
                B::linear_x_backward(weight.inner(), g)
            });
        }
    }
    let rank = output_grad.shape().num_dims();
    let wt = <Ops<B> as FloatTensorOps<Ops<B>>>::float_swap_dims(weight, 0, 1);
    let s = wt.shape();
    let dims: Vec<usize> = core::iter::repeat_n(1, rank.saturating_sub(2))
        .chain(s.iter().copied())
        .collect();
    let wt = <Ops<B> as FloatTensorOps<Ops<B>>>::float_reshape(wt, Shape::from(dims));
    <Ops<B> as FloatTensorOps<Ops<B>>>::float_matmul(output_grad, wt)
}

/// Burn's `ModuleOps::linear_weight_backward`: `x^T @ output_grad` summed over the leading
/// dims, as `[m, d_in]^T x [m, d_out]` with `m` the product of the leading dims. With a batched
/// operand the result is per example, `X_iᵀ G_i` over each example's rows, held factored until
/// read ([`super::factored`]).
pub(crate) fn linear_weight_backward<B: Backend>(x: VT<B>, output_grad: VT<B>) -> VT<B> {
    if !x.is_batched() && !output_grad.is_batched() {
        return VmapTensor::unbatched(B::linear_weight_backward(x.inner(), output_grad.inner()));
    }
    // Per example `X_iᵀ G_i`, held factored (see `rules::factored`).
    let (x, output_grad) = match super::factored::linear_weight::<B>(x, output_grad) {
        Ok(lazy) => return lazy,
        Err(operands) => operands,
    };
    let xt = <Ops<B> as FloatTensorOps<Ops<B>>>::float_swap_dims(as_matrix::<B>(x), 0, 1);
    <Ops<B> as FloatTensorOps<Ops<B>>>::float_matmul(xt, as_matrix::<B>(output_grad))
}

/// Burn's `ModuleOps::linear_bias_backward`: `output_grad` summed over every dim but the last.
pub(crate) fn linear_bias_backward<B: Backend>(output_grad: VT<B>) -> VT<B> {
    if !output_grad.is_batched() {
        return VmapTensor::unbatched(B::linear_bias_backward(output_grad.inner()));
    }
    let g = as_matrix::<B>(output_grad);
    let s = g.shape();
    let g = if s[0] == 1 {
        g
    } else {
        <Ops<B> as FloatTensorOps<Ops<B>>>::float_sum_dim(g, 0)
    };
    <Ops<B> as FloatTensorOps<Ops<B>>>::float_reshape(g, Shape::from(vec![s[1]]))
}
