//! `ModuleOps` for `Vmap<B>`.
//!
//! A batched input with unbatched weights folds the vmap batch into `N` (one large op);
//! convolutions (deformable ones included) with batched (per-example) weights become grouped
//! convolutions. `linear` and its backward ops fold a batched input into rows (one inner
//! `linear`). Burn's default methods (conv1d, the conv backward ops, pool1d, embedding,
//! layer_norm, batch_norm_train and its backward, ctc_loss) decompose into these rules and the
//! tensor ops.
//!
//! Default methods overridden here, and why: `linear` and its three backward ops (speed: one
//! inner op on the folded rows), `conv1d_weight_backward` / `conv2d_weight_backward` and
//! `embedding_backward` (per-example gradients held factored), `batch_norm` (speed: one inner
//! op when the statistics are shared), `unfold4d` and `fold4d` (speed: the batch folded into
//! `N`, one inner op).

use burn_backend::IntDType;
use burn_backend::TensorMetadata;
use burn_backend::backend::Backend;
use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward,
    DeformConvOptions, InterpolateOptions, MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps,
    UnfoldOptions,
};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};

use crate::Vmap;
use crate::physical::{Bool, Float, Int};
use crate::rules::module::{self as deform, DeformArgs, Fold, fold_all};
use crate::rules::{factored, linalg};
use crate::tensor::{BatchDims, VmapTensor};

/// Ops of one input `x` whose first dim is the batch `N` (pools, interpolation): the vmap
/// batch folds into `N`, one inner op.
macro_rules! fold_x_ops {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?)),* $(,)?) => {
        $(
            fn $name(x: FloatTensor<Self> $(, $arg: $ty)*) -> FloatTensor<Self> {
                let (fold, [x]) = fold_all::<B, Float, 1>([x]);
                fold.unfold::<B, Float>(B::$name(x $(, $arg)*))
            }
        )*
    };
}

/// Backward ops of `x` and its gradient, both with a leading `N`: both fold.
macro_rules! fold_x_grad_ops {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?)),* $(,)?) => {
        $(
            fn $name(x: FloatTensor<Self>, grad: FloatTensor<Self> $(, $arg: $ty)*) -> FloatTensor<Self> {
                let (fold, [x, grad]) = fold_all::<B, Float, 2>([x, grad]);
                fold.unfold::<B, Float>(B::$name(x, grad $(, $arg)*))
            }
        )*
    };
}

/// Convolutions (plain or transposed) by the rule `rules::module::conv`: the vmap examples fold
/// into `N`, or, with per-example kernels, become `groups` (the factor the rule passes).
macro_rules! conv_ops {
    ($($name:ident: $options:ty),* $(,)?) => {
        $(
            fn $name(
                x: FloatTensor<Self>,
                weight: FloatTensor<Self>,
                bias: Option<FloatTensor<Self>>,
                options: $options,
            ) -> FloatTensor<Self> {
                crate::rules::module::conv::<B>(x, weight, bias, |x, w, b, factor| {
                    let mut options = options;
                    options.groups *= factor;
                    B::$name(x, w, b, options)
                })
            }
        )*
    };
}

/// A convolution's weight gradient (`rules::factored::conv_weight` when an operand is batched).
macro_rules! conv_weight_ops {
    ($($name:ident: $options:ty),* $(,)?) => {
        $(
            fn $name(
                x: FloatTensor<Self>,
                weight: FloatTensor<Self>,
                output_grad: FloatTensor<Self>,
                options: $options,
            ) -> FloatTensor<Self> {
                if !(x.is_batched() || weight.is_batched() || output_grad.is_batched()) {
                    let out = B::$name(x.inner(), weight.inner(), output_grad.inner(), options);
                    return VmapTensor::unbatched(out);
                }
                factored::conv_weight::<B>(x, output_grad, weight.shape(), options.into())
            }
        )*
    };
}

impl<B: Backend> ModuleOps<Self> for Vmap<B> {
    // Overridden (speed): the default reshapes and calls matmul; the rules fold a batched input
    // into rows and call the inner backend's `linear` once, reading pending reshapes in place.
    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        linalg::linear::<B>(x, weight, bias)
    }

    fn linear_x_backward(
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        linalg::linear_x_backward::<B>(weight, output_grad)
    }

    fn linear_weight_backward(
        x: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        linalg::linear_weight_backward::<B>(x, output_grad)
    }

    fn linear_bias_backward(output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        linalg::linear_bias_backward::<B>(output_grad)
    }

    // Overridden (per-example gradients): with a batched input or output gradient, the weight
    // gradient of every example is held factored (`rules::factored`), the output gradients
    // against the unfolded input patches; the default would run a grouped convolution per
    // example.
    conv_weight_ops!(
        conv1d_weight_backward: ConvOptions<1>,
        conv2d_weight_backward: ConvOptions<2>,
    );

    // Overridden (per-example gradients): with batched tokens or output gradient, every
    // example's table gradient is held factored (`rules::factored`): its tokens as one-hot rows
    // against the output gradient; the default would write a `[vocabulary, d]` table per example.
    fn embedding_backward(
        weights: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        if !(output_grad.is_batched() || indices.is_batched()) {
            // The table only gives its shape: a batched one (per-example tables, shared tokens)
            // stands in as zeros of its logical shape.
            let table = if weights.is_batched() {
                let (stored, shape) = (weights.stored(), weights.shape());
                B::float_zeros(shape, &stored.device(), stored.dtype().into())
            } else {
                weights.inner()
            };
            let out = B::embedding_backward(table, output_grad.inner(), indices.inner());
            return VmapTensor::unbatched(out);
        }
        factored::embedding_weight::<B>(weights.shape()[0], output_grad, indices)
    }

    // Overridden (speed): with shared parameters and statistics, the vmap batch folds into `N`
    // and the inner backend's own batch norm runs once; otherwise the default's elementwise
    // ops, whose rules broadcast per-example statistics.
    fn batch_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        let shared = [&gamma, &beta, &mean, &variance]
            .iter()
            .all(|t| !t.is_batched());
        if shared {
            let (fold, [x]) = fold_all::<B, Float, 1>([x]);
            let (gamma, beta) = (gamma.inner(), beta.inner());
            let out = B::batch_norm(x, gamma, beta, mean.inner(), variance.inner(), epsilon);
            return fold.unfold::<B, Float>(out);
        }
        crate::rules::module::batch_norm_default::<B>(x, gamma, beta, mean, variance, epsilon)
    }

    conv_ops!(
        conv2d: ConvOptions<2>,
        conv3d: ConvOptions<3>,
        conv_transpose2d: ConvTransposeOptions<2>,
        conv_transpose3d: ConvTransposeOptions<3>,
    );

    fn deform_conv2d(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        let args = DeformArgs::new(x, offset, weight, mask, bias);
        deform::deform_conv2d::<B>(args, |g| {
            let mut options = options;
            options.weight_groups *= g.factor;
            options.offset_groups *= g.factor;
            B::deform_conv2d(g.x, g.offset, g.weight, g.mask, g.bias, options)
        })
    }

    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let args = DeformArgs::new(x, offset, weight, mask, bias);
        let grads = deform::deform_conv2d_backward::<B>(args, output_grad, |g, og| {
            let mut options = options.clone();
            options.weight_groups *= g.factor;
            options.offset_groups *= g.factor;
            let out =
                B::deform_conv2d_backward(g.x, g.offset, g.weight, g.mask, g.bias, og, options);
            (
                out.x_grad,
                out.offset_grad,
                out.weight_grad,
                out.mask_grad,
                out.bias_grad,
            )
        });
        DeformConv2dBackward::new(grads.x, grads.offset, grads.weight, grads.mask, grads.bias)
    }

    fold_x_ops!(
        avg_pool2d(
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            count_include_pad: bool,
            ceil_mode: bool
        ),
        adaptive_avg_pool2d(output_size: [usize; 2]),
        adaptive_avg_pool3d(output_size: [usize; 3]),
        max_pool2d(
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            dilation: [usize; 2],
            ceil_mode: bool
        ),
        interpolate(output_size: [usize; 2], options: InterpolateOptions),
        // Overridden (speed): the defaults unfold through `float_unfold` (`unfold4d`) and fold
        // through a grouped `conv_transpose2d` (`fold4d`) of the logical tensor; one inner op.
        unfold4d(kernel_size: [usize; 2], options: UnfoldOptions),
        fold4d(output_size: [usize; 2], kernel_size: [usize; 2], options: UnfoldOptions),
    );

    fold_x_grad_ops!(
        avg_pool2d_backward(
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            count_include_pad: bool,
            ceil_mode: bool
        ),
        adaptive_avg_pool2d_backward(),
        adaptive_avg_pool3d_backward(),
        interpolate_backward(output_size: [usize; 2], options: InterpolateOptions),
    );

    fn max_pool2d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        indices_dtype: IntDType,
    ) -> MaxPool2dWithIndices<Self> {
        let (fold, [x]) = fold_all::<B, Float, 1>([x]);
        let out = B::max_pool2d_with_indices(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            indices_dtype,
        );
        MaxPool2dWithIndices::new(
            fold.unfold::<B, Float>(out.output),
            fold.unfold::<B, Int>(out.indices),
        )
    }

    fn max_pool2d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        // Indices address positions inside one (n, c) plane, so folding the batch into N keeps
        // them valid.
        let bdims = BatchDims::union([&x.bdims, &output_grad.bdims, &indices.bdims]);
        let fold = Fold::new(bdims, x.shape()[0]);
        let out = B::max_pool2d_with_indices_backward(
            fold.fold::<B, Float>(x),
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            fold.fold::<B, Float>(output_grad),
            fold.fold::<B, Int>(indices),
        );
        MaxPool2dBackward::new(fold.unfold::<B, Float>(out.x_grad))
    }

    fn attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        let batched = query.is_batched()
            || key.is_batched()
            || value.is_batched()
            || mask.as_ref().is_some_and(|m| m.is_batched())
            || attn_bias.as_ref().is_some_and(|b| b.is_batched());
        if !batched {
            return VmapTensor::unbatched(B::attention(
                query.inner(),
                key.inner(),
                value.inner(),
                mask.map(|m| m.inner()),
                attn_bias.map(|b| b.inner()),
                options,
            ));
        }
        let bdims = BatchDims::union(
            [
                Some(&query.bdims),
                Some(&key.bdims),
                Some(&value.bdims),
                mask.as_ref().map(|m| &m.bdims),
                attn_bias.as_ref().map(|b| &b.bdims),
            ]
            .into_iter()
            .flatten(),
        );
        let folding = Fold::new(bdims, query.shape()[0]);
        let fold = |t: FloatTensor<Self>| folding.fold::<B, Float>(t);
        let (q, k, v) = (fold(query), fold(key), fold(value));
        let bias = attn_bias.map(fold);
        let mask = mask.map(|m| folding.fold::<B, Bool>(m));
        folding.unfold::<B, Float>(B::attention(q, k, v, mask, bias, options))
    }
}
