//! Batching for module ops (conv, pool, interpolate, attention) whose first dim is the batch `N`:
//! the vmap batch dims fold into `N`, so a batched input with unbatched weights runs as one
//! large op (`[b.., N, ...] -> [b*...*N, ...]`), not a loop.

use burn_backend::Scalar;
use burn_backend::backend::Backend;
use burn_backend::ops::FloatTensorOps;
use burn_backend::{Shape, TensorMetadata};

use super::helpers::materialize;
use super::reduce::Fill;
use crate::physical::{Float, Kind, with_batch_sizes};
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

/// How a module op's output gets its batch dims back: the batch dims folded into `N` and the
/// per-example `N`, which the folded dim cannot give back when there is no example (`0 * N`).
pub(crate) struct Fold {
    bdims: BatchDims,
    n: usize,
}

impl Fold {
    /// The batch dims `bdims` folded into the per-example batch `n` (the first dim of the op's
    /// logical input).
    pub(crate) fn new(bdims: BatchDims, n: usize) -> Self {
        Self { bdims, n }
    }

    /// Rewraps an output computed on folded operands: `[b*..*N, rest..] -> [b.., N, rest..]`.
    pub(crate) fn unfold<B: Backend, K: Kind<B>>(&self, out: K::P) -> VmapTensor<K::P> {
        if self.bdims.is_empty() {
            return VmapTensor::unbatched(out);
        }
        let shape = out.shape();
        debug_assert_eq!(shape[0], self.n * self.bdims.num_examples());
        let mut logical = vec![self.n];
        logical.extend_from_slice(&shape[1..]);
        let out = K::reshape(out, with_batch_sizes(&self.bdims, &logical));
        VmapTensor::new(out, self.bdims.clone())
    }

    /// Materializes `t` over the batch dims and folds them into `N`; unbatched batch dims leave
    /// `t` as is.
    pub(crate) fn fold<B: Backend, K: Kind<B>>(&self, t: VmapTensor<K::P>) -> K::P {
        if self.bdims.is_empty() {
            return t.inner();
        }
        fold_n::<B, K>(materialize::<B, K>(t, &self.bdims), &self.bdims)
    }
}

/// The operands with their batch dims folded into `N` (materialized over their union), and how
/// to unfold an output computed on them. With no batched operand, the operands are the inner
/// tensors.
pub(crate) fn fold_all<B: Backend, K: Kind<B>, const N: usize>(
    xs: [VmapTensor<K::P>; N],
) -> (Fold, [K::P; N]) {
    let n = xs.first().map_or(0, |x| x.shape()[0]);
    let fold = Fold::new(BatchDims::union(xs.iter().map(|x| &x.bdims)), n);
    let folded = xs.map(|x| fold.fold::<B, K>(x));
    (fold, folded)
}

type FP<B> = <B as burn_backend::backend::BackendTypes>::FloatTensorPrimitive;

/// The union of the batch dims of some optional operands.
fn union_of<'a, P: 'a>(ts: impl IntoIterator<Item = Option<&'a VmapTensor<P>>>) -> BatchDims {
    BatchDims::union(ts.into_iter().flatten().map(|t| &t.bdims))
}

/// Examples as channel groups: `[E.., N, C, s..] -> [N, E*C, s..]` (materialized over `bdims`).
fn examples_into_channels<B: Backend>(t: VmapTensor<FP<B>>, bdims: &BatchDims) -> FP<B> {
    let nb = bdims.len();
    let e = bdims.num_examples();
    let t = materialize::<B, Float>(t, bdims);
    let shape = t.shape();
    let rank = shape.num_dims();
    let mut axes = vec![nb];
    axes.extend(0..nb);
    axes.extend(nb + 1..rank);
    let t = B::float_permute(t, &axes);
    let mut dims = vec![shape[nb], e * shape[nb + 1]];
    dims.extend_from_slice(&shape[nb + 2..]);
    <Float as Kind<B>>::reshape(t, Shape::from(dims))
}

/// Inverse of [`examples_into_channels`]: `[N, E*C, s..] -> [E.., N, C, s..]`.
fn channels_into_examples<B: Backend>(t: FP<B>, bdims: &BatchDims) -> VmapTensor<FP<B>> {
    let nb = bdims.len();
    let e = bdims.num_examples();
    let shape = t.shape();
    let c = shape[1] / e.max(1);
    let mut dims = vec![shape[0]];
    dims.extend(bdims.sizes());
    dims.push(c);
    dims.extend_from_slice(&shape[2..]);
    let t = <Float as Kind<B>>::reshape(t, Shape::from(dims));
    let rank = t.shape().num_dims();
    let mut axes: Vec<usize> = (1..=nb).collect();
    axes.push(0);
    axes.extend(nb + 1..rank);
    VmapTensor::new(B::float_permute(t, &axes), bdims.clone())
}

/// Per-example weights stacked along their first dim: `[E.., O, r..] -> [E*O, r..]`.
fn examples_into_rows<B: Backend>(t: VmapTensor<FP<B>>, bdims: &BatchDims) -> FP<B> {
    let t = materialize::<B, Float>(t, bdims);
    let shape = t.shape();
    let nb = bdims.len();
    let mut dims = vec![bdims.num_examples() * shape[nb]];
    dims.extend_from_slice(&shape[nb + 1..]);
    <Float as Kind<B>>::reshape(t, Shape::from(dims))
}

/// Inverse of [`examples_into_rows`]: `[E*O, r..] -> [E.., O, r..]`.
fn rows_into_examples<B: Backend>(t: FP<B>, bdims: &BatchDims) -> VmapTensor<FP<B>> {
    let shape = t.shape();
    let o = shape[0] / bdims.num_examples().max(1);
    let mut logical = vec![o];
    logical.extend_from_slice(&shape[1..]);
    VmapTensor::new(
        <Float as Kind<B>>::reshape(t, with_batch_sizes(bdims, &logical)),
        bdims.clone(),
    )
}

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
    let weights_batched = weight.is_batched() || bias.as_ref().is_some_and(|b| b.is_batched());
    if !weights_batched {
        let (fold, [x]) = fold_all::<B, Float, 1>([x]);
        return fold.unfold::<B, Float>(f(x, weight.inner(), bias.map(|b| b.inner()), 1));
    }
    let bdims = union_of([Some(&x), Some(&weight), bias.as_ref()]);
    let e = bdims.num_examples();
    if e == 0 {
        return empty_batch_conv::<B>(x, weight, bias, &bdims, f);
    }
    let x = examples_into_channels::<B>(x, &bdims);
    let w = examples_into_rows::<B>(weight, &bdims);
    let b = bias.map(|b| examples_into_rows::<B>(b, &bdims));
    channels_into_examples::<B>(f(x, w, b, e), &bdims)
}

/// [`conv`] with per-example weights at batch size 0, where `E` groups would be 0 groups: the
/// convolution of one example of zeros gives the per-example output shape ([`no_example`]).
fn empty_batch_conv<B: Backend>(
    x: VmapTensor<FP<B>>,
    weight: VmapTensor<FP<B>>,
    bias: Option<VmapTensor<FP<B>>>,
    bdims: &BatchDims,
    f: impl FnOnce(FP<B>, FP<B>, Option<FP<B>>, usize) -> FP<B>,
) -> VmapTensor<FP<B>> {
    let z = zeros_like_example::<B>;
    no_example::<B>(f(z(x), z(weight), bias.map(z), 1), bdims)
}

/// Zeros of the shape of one example of `t`.
fn zeros_like_example<B: Backend>(t: VmapTensor<FP<B>>) -> FP<B> {
    <Float as Fill<B>>::fill(t.shape(), 0.0, t.stored())
}

/// A batched tensor of `bdims` (with no example) whose examples are shaped like `example`.
fn no_example<B: Backend>(example: FP<B>, bdims: &BatchDims) -> VmapTensor<FP<B>> {
    let shape = with_batch_sizes(bdims, &example.shape());
    VmapTensor::new(
        <Float as Fill<B>>::fill(shape, 0.0, &example),
        bdims.clone(),
    )
}

/// The operands of a deformable convolution (and, as [`DeformGrads`], their gradients).
pub(crate) struct DeformArgs<P> {
    pub(crate) x: VmapTensor<P>,
    pub(crate) offset: VmapTensor<P>,
    pub(crate) weight: VmapTensor<P>,
    pub(crate) mask: Option<VmapTensor<P>>,
    pub(crate) bias: Option<VmapTensor<P>>,
}

impl<P> DeformArgs<P> {
    pub(crate) fn new(
        x: VmapTensor<P>,
        offset: VmapTensor<P>,
        weight: VmapTensor<P>,
        mask: Option<VmapTensor<P>>,
        bias: Option<VmapTensor<P>>,
    ) -> Self {
        Self {
            x,
            offset,
            weight,
            mask,
            bias,
        }
    }

    fn bdims(&self) -> BatchDims {
        union_of([
            Some(&self.x),
            Some(&self.offset),
            Some(&self.weight),
            self.mask.as_ref(),
            self.bias.as_ref(),
        ])
    }
}

/// Inner operands of a deformable convolution in the grouped layout, with the factor by which
/// both `weight_groups` and `offset_groups` grow.
pub(crate) struct DeformGrouped<P> {
    pub(crate) x: P,
    pub(crate) offset: P,
    pub(crate) weight: P,
    pub(crate) mask: Option<P>,
    pub(crate) bias: Option<P>,
    pub(crate) factor: usize,
}

/// Deformable convolution under vmap, like [`conv`]: the examples become channel groups.
///
/// The offset channels are laid out `[offset_groups, kh, kw, 2]` and the mask channels
/// `[offset_groups, kh, kw]` (torchvision's layout, which Burn follows), group-major like the
/// input channels, so stacking the examples along channels and multiplying **both**
/// `offset_groups` and `weight_groups` by `E` keeps every example on its own input channels,
/// offsets, mask and kernels. Unbatched weights and bias take the cheaper path that folds the
/// batch into `N`.
pub(crate) fn deform_conv2d<B: Backend>(
    args: DeformArgs<FP<B>>,
    f: impl FnOnce(DeformGrouped<FP<B>>) -> FP<B>,
) -> VmapTensor<FP<B>> {
    let bdims = args.bdims();
    let weights_batched =
        args.weight.is_batched() || args.bias.as_ref().is_some_and(|b| b.is_batched());
    if !weights_batched {
        // Fold into N (a no-op when nothing is batched).
        let folding = Fold::new(bdims, args.x.shape()[0]);
        let fold = |t: VmapTensor<FP<B>>| folding.fold::<B, Float>(t);
        let out = f(DeformGrouped {
            x: fold(args.x),
            offset: fold(args.offset),
            weight: args.weight.inner(),
            mask: args.mask.map(fold),
            bias: args.bias.map(|b| b.inner()),
            factor: 1,
        });
        return folding.unfold::<B, Float>(out);
    }
    if bdims.num_examples() == 0 {
        // `E` groups would be 0 groups (as in `empty_batch_conv`).
        let z = zeros_like_example::<B>;
        let out = f(DeformGrouped {
            x: z(args.x),
            offset: z(args.offset),
            weight: z(args.weight),
            mask: args.mask.map(z),
            bias: args.bias.map(z),
            factor: 1,
        });
        return no_example::<B>(out, &bdims);
    }
    let out = f(group_deform::<B>(args, &bdims));
    channels_into_examples::<B>(out, &bdims)
}

fn group_deform<B: Backend>(args: DeformArgs<FP<B>>, bdims: &BatchDims) -> DeformGrouped<FP<B>> {
    DeformGrouped {
        x: examples_into_channels::<B>(args.x, bdims),
        offset: examples_into_channels::<B>(args.offset, bdims),
        weight: examples_into_rows::<B>(args.weight, bdims),
        mask: args.mask.map(|m| examples_into_channels::<B>(m, bdims)),
        bias: args.bias.map(|b| examples_into_rows::<B>(b, bdims)),
        factor: bdims.num_examples(),
    }
}

/// Gradients of a deformable convolution (batched), one per operand.
pub(crate) type DeformGrads<P> = DeformArgs<P>;

/// Backward of a deformable convolution under vmap. Every gradient is per example (the
/// gradient of each example's output).
///
/// - Unbatched weights and bias: the gradients of `x`, `offset` and `mask` are local to each
///   sample of `N`, so they come from one backward pass with the batch folded into `N`; the
///   weight and bias gradients, which would sum over that fold, come from the grouped layout of
///   [`deform_conv2d`] (examples as channel groups), which keeps them per example.
/// - Batched weights or bias: one backward pass in the grouped layout gives every gradient.
///
/// `f(operands, output gradient)` runs the inner backward and returns the inner gradients
/// `(x, offset, weight, mask, bias)`.
#[allow(clippy::type_complexity)]
pub(crate) fn deform_conv2d_backward<B: Backend>(
    args: DeformArgs<FP<B>>,
    output_grad: VmapTensor<FP<B>>,
    f: impl Fn(DeformGrouped<FP<B>>, FP<B>) -> (FP<B>, FP<B>, FP<B>, Option<FP<B>>, Option<FP<B>>),
) -> DeformGrads<FP<B>> {
    let bdims = BatchDims::union([&args.bdims(), &output_grad.bdims]);
    if bdims.is_empty() {
        let (x, offset, weight, mask, bias) = f(
            DeformGrouped {
                x: args.x.inner(),
                offset: args.offset.inner(),
                weight: args.weight.inner(),
                mask: args.mask.map(|m| m.inner()),
                bias: args.bias.map(|b| b.inner()),
                factor: 1,
            },
            output_grad.inner(),
        );
        return DeformGrads {
            x: VmapTensor::unbatched(x),
            offset: VmapTensor::unbatched(offset),
            weight: VmapTensor::unbatched(weight),
            mask: mask.map(VmapTensor::unbatched),
            bias: bias.map(VmapTensor::unbatched),
        };
    }
    let weights_batched =
        args.weight.is_batched() || args.bias.as_ref().is_some_and(|b| b.is_batched());
    if !weights_batched {
        let folding = Fold::new(bdims.clone(), args.x.shape()[0]);
        let fold = |t: VmapTensor<FP<B>>| folding.fold::<B, Float>(t);
        let folded = DeformGrouped {
            x: fold(args.x.clone()),
            offset: fold(args.offset.clone()),
            weight: args.weight.clone().inner(),
            mask: args.mask.clone().map(fold),
            bias: args.bias.as_ref().map(|b| b.clone().inner()),
            factor: 1,
        };
        let (x, offset, _, mask, _) = f(folded, fold(output_grad.clone()));
        let grouped = group_deform::<B>(args, &bdims);
        let og = examples_into_channels::<B>(output_grad, &bdims);
        let (_, _, weight, _, bias) = f(grouped, og);
        return DeformGrads {
            x: folding.unfold::<B, Float>(x),
            offset: folding.unfold::<B, Float>(offset),
            weight: rows_into_examples::<B>(weight, &bdims),
            mask: mask.map(|m| folding.unfold::<B, Float>(m)),
            bias: bias.map(|b| rows_into_examples::<B>(b, &bdims)),
        };
    }
    let grouped = group_deform::<B>(args, &bdims);
    let og = examples_into_channels::<B>(output_grad, &bdims);
    let (x, offset, weight, mask, bias) = f(grouped, og);
    DeformGrads {
        x: channels_into_examples::<B>(x, &bdims),
        offset: channels_into_examples::<B>(offset, &bdims),
        weight: rows_into_examples::<B>(weight, &bdims),
        mask: mask.map(|m| channels_into_examples::<B>(m, &bdims)),
        bias: bias.map(|b| rows_into_examples::<B>(b, &bdims)),
    }
}

/// Burn's default `batch_norm` (`(x - mean) / sqrt(variance + ε) · γ + β`, the `[C]` parameters
/// broadcast along dim 1), through the rules of `Vmap<B>`'s ops: the path of per-example
/// parameters or statistics (the op's override takes the shared ones).
pub(crate) fn batch_norm_default<B: Backend>(
    x: VmapTensor<FP<B>>,
    gamma: VmapTensor<FP<B>>,
    beta: VmapTensor<FP<B>>,
    mean: VmapTensor<FP<B>>,
    variance: VmapTensor<FP<B>>,
    epsilon: f64,
) -> VmapTensor<FP<B>> {
    type V<B> = crate::Vmap<B>;
    let shape = x.shape();
    let mut dims = vec![1; shape.num_dims()];
    dims[1] = shape[1];
    let per_channel = |t| V::<B>::float_reshape(t, Shape::from(dims.clone()));
    let variance = V::<B>::float_add_scalar(per_channel(variance), Scalar::Float(epsilon));
    let normalized = V::<B>::float_div(
        V::<B>::float_sub(x, per_channel(mean)),
        V::<B>::float_sqrt(variance),
    );
    V::<B>::float_add(
        V::<B>::float_mul(normalized, per_channel(gamma)),
        per_channel(beta),
    )
}
