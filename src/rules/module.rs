//! Batching for module ops (conv, pool, interpolate, attention) whose first dim is the batch `N`:
//! the vmap batch dims fold into `N`, so a batched input with unbatched weights runs as one
//! large op (`[b.., N, ...] -> [b*...*N, ...]`), not a loop.

use burn_backend::backend::Backend;
use burn_backend::{Shape, TensorMetadata};

use super::helpers::{materialize, with_batch_sizes, Kind};
use crate::tensor::{BatchDims, VmapTensor};

/// `[b.., N, rest..] -> [b*..*N, rest..]`.
pub(crate) fn fold_n<B: Backend, K: Kind<B>>(t: K::P, bdims: &BatchDims) -> K::P {
    let shape = t.shape();
    let nb = bdims.len();
    let dims: Shape = core::iter::once(shape[..=nb].iter().product())
        .chain(shape[nb + 1..].iter().copied())
        .collect();
    K::reshape(t, dims)
}

/// `[b*..*N, rest..] -> [b.., N, rest..]`.
pub(crate) fn unfold_n<B: Backend, K: Kind<B>>(t: K::P, bdims: &BatchDims) -> K::P {
    let shape = t.shape();
    let n = shape[0] / bdims.num_examples().max(1);
    let mut logical = vec![n];
    logical.extend_from_slice(&shape[1..]);
    K::reshape(t, with_batch_sizes(bdims, &logical))
}

/// Materializes `t` over `bdims` and folds them into `N`; unbatched `bdims` leave `t` as is.
pub(crate) fn fold_to<B: Backend, K: Kind<B>>(t: VmapTensor<K::P>, bdims: &BatchDims) -> K::P {
    if bdims.is_empty() {
        return t.inner;
    }
    fold_n::<B, K>(materialize::<B, K>(t, bdims), bdims)
}

/// Runs `f` on operands whose batch dims are folded into `N` (materialized over their union);
/// returns the union batch dims with the folded operands. With no batched operand, `f` runs
/// on the inner tensors directly.
pub(crate) fn fold_all<B: Backend, K: Kind<B>, const N: usize>(
    xs: [VmapTensor<K::P>; N],
) -> (BatchDims, [K::P; N]) {
    let bdims = BatchDims::union(xs.iter().map(|x| &x.bdims));
    if bdims.is_empty() {
        return (bdims, xs.map(|x| x.inner));
    }
    let folded = xs.map(|x| fold_n::<B, K>(materialize::<B, K>(x, &bdims), &bdims));
    (bdims, folded)
}

/// Rewraps an output computed on folded operands.
pub(crate) fn unfold_out<B: Backend, K: Kind<B>>(out: K::P, bdims: &BatchDims) -> VmapTensor<K::P> {
    if bdims.is_empty() {
        return VmapTensor::unbatched(out);
    }
    VmapTensor {
        inner: unfold_n::<B, K>(out, bdims),
        bdims: bdims.clone(),
    }
}

type FP<B> = <B as burn_backend::backend::BackendTypes>::FloatTensorPrimitive;

/// Convolution (plain or transposed) under vmap.
///
/// - Unbatched weights and bias: the batch folds into `N`, one large convolution.
/// - Batched (per-example) weights or bias, as functorch does: the `E` examples become `E`
///   times as many groups. `x: [E.., N, C, s..] -> [N, E*C, s..]`, `weight: [E.., O, I, k..] ->
///   [E*O, I, k..]`, `bias: [E.., O] -> [E*O]`, `groups -> E*groups`, and the output
///   `[N, E*O', s'..]` is split back into `[E.., N, O', s'..]`. The same layout works for
///   transposed convolutions, whose weights are `[C_in, C_out/groups, k..]`.
///
/// `f(x, weight, bias, group_factor)` runs the inner convolution with `groups * group_factor`.
pub(crate) fn conv<B: Backend>(
    x: VmapTensor<FP<B>>,
    weight: VmapTensor<FP<B>>,
    bias: Option<VmapTensor<FP<B>>>,
    f: impl FnOnce(FP<B>, FP<B>, Option<FP<B>>, usize) -> FP<B>,
) -> VmapTensor<FP<B>> {
    use burn_backend::tensor::Float;
    let weights_batched = weight.is_batched() || bias.as_ref().is_some_and(|b| b.is_batched());
    if !weights_batched {
        let (bdims, [x]) = fold_all::<B, Float, 1>([x]);
        return unfold_out::<B, Float>(f(x, weight.inner, bias.map(|b| b.inner), 1), &bdims);
    }
    let bdims = BatchDims::union(
        [
            Some(&x.bdims),
            Some(&weight.bdims),
            bias.as_ref().map(|b| &b.bdims),
        ]
        .into_iter()
        .flatten(),
    );
    let nb = bdims.len();
    let e = bdims.num_examples();

    // x: [E.., N, C, s..] -> [N, E.., C, s..] -> [N, E*C, s..]
    let x = materialize::<B, Float>(x, &bdims);
    let xs = x.shape();
    let rank = xs.num_dims();
    let mut axes = vec![nb];
    axes.extend(0..nb);
    axes.extend(nb + 1..rank);
    let x = B::float_permute(x, &axes);
    let mut dims = vec![xs[nb], e * xs[nb + 1]];
    dims.extend_from_slice(&xs[nb + 2..]);
    let x = B::float_reshape(x, Shape::from(dims));

    // weight: [E.., O, I, k..] -> [E*O, I, k..]
    let w = materialize::<B, Float>(weight, &bdims);
    let ws = w.shape();
    let mut dims = vec![e * ws[nb]];
    dims.extend_from_slice(&ws[nb + 1..]);
    let w = B::float_reshape(w, Shape::from(dims));

    // bias: [E.., O] -> [E*O]
    let b = bias.map(|b| {
        let b = materialize::<B, Float>(b, &bdims);
        let o = b.shape()[nb];
        B::float_reshape(b, Shape::from(vec![e * o]))
    });

    // out: [N, E*O', s'..] -> [N, E.., O', s'..] -> [E.., N, O', s'..]
    let out = f(x, w, b, e);
    let os = out.shape();
    let o = os[1] / e.max(1);
    let mut dims = vec![os[0]];
    dims.extend(bdims.sizes());
    dims.push(o);
    dims.extend_from_slice(&os[2..]);
    let out = B::float_reshape(out, Shape::from(dims));
    let rank = out.shape().num_dims();
    let mut axes: Vec<usize> = (1..=nb).collect();
    axes.push(0);
    axes.extend(nb + 1..rank);
    VmapTensor {
        inner: B::float_permute(out, &axes),
        bdims,
    }
}
