//! `ModuleOperationIr`: the layers' ops (linear, convolutions, pools, attention, norms).

use burn_backend::backend::Backend;
use burn_backend::ops::UnfoldOptions;
use burn_ir::ModuleOperationIr as Module;

use super::super::env::Env;
use crate::VmapError;

/// `Some(read)` of an optional operand.
macro_rules! opt {
    ($env:ident, $t:expr) => {
        $t.as_ref().map(|t| $env.f(t))
    };
}

pub(super) fn module<B: Backend>(e: &mut Env<B>, op: &Module) -> Result<(), VmapError> {
    match op {
        Module::Embedding(d) => {
            let (w, i) = (e.f(&d.weights), e.i(&d.indices));
            e.put_f(&d.out, B::embedding(w, i))
        }
        Module::EmbeddingBackward(d) => {
            let (w, g, i) = (e.f(&d.weights), e.f(&d.out_grad), e.i(&d.indices));
            e.put_f(&d.out, B::embedding_backward(w, g, i))
        }
        Module::Linear(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::linear(x, w, b))
        }
        Module::LinearXBackward(d) => {
            let (w, g) = (e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(&d.out, B::linear_x_backward(w, g))
        }
        Module::LinearWeightBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.output_grad));
            e.put_f(&d.out, B::linear_weight_backward(x, g))
        }
        Module::LinearBiasBackward(d) => {
            let g = e.f(&d.output_grad);
            e.put_f(&d.out, B::linear_bias_backward(g))
        }
        Module::Conv1d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::conv1d(x, w, b, d.options.clone().into()))
        }
        Module::Conv1dXBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv1d_x_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv1dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv1d_weight_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv1dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv1d_bias_backward(x, b, g))
        }
        Module::Conv2d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::conv2d(x, w, b, d.options.clone().into()))
        }
        Module::Conv2dXBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv2d_x_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv2dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv2d_weight_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv2dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv2d_bias_backward(x, b, g))
        }
        Module::Conv3d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(&d.out, B::conv3d(x, w, b, d.options.clone().into()))
        }
        Module::Conv3dXBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv3d_x_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv3dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            e.put_f(
                &d.out,
                B::conv3d_weight_backward(x, w, g, d.options.clone().into()),
            )
        }
        Module::Conv3dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv3d_bias_backward(x, b, g))
        }
        Module::DeformableConv2d(d) => {
            let (x, off, w) = (e.f(&d.x), e.f(&d.offset), e.f(&d.weight));
            let (m, b) = (opt!(e, d.mask), opt!(e, d.bias));
            let t = B::deform_conv2d(x, off, w, m, b, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::DeformableConv2dBackward(d) => {
            let (x, off, w) = (e.f(&d.x), e.f(&d.offset), e.f(&d.weight));
            let (m, b, g) = (opt!(e, d.mask), opt!(e, d.bias), e.f(&d.out_grad));
            let out = B::deform_conv2d_backward(x, off, w, m, b, g, d.options.clone().into());
            e.put_f(&d.input_grad, out.x_grad);
            e.put_f(&d.offset_grad, out.offset_grad);
            e.put_f(&d.weight_grad, out.weight_grad);
            if let (Some(g), Some(t)) = (out.mask_grad, d.mask_grad.as_ref()) {
                e.put_f(t, g)
            }
            if let (Some(g), Some(t)) = (out.bias_grad, d.bias_grad.as_ref()) {
                e.put_f(t, g)
            }
        }
        Module::ConvTranspose1d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(
                &d.out,
                B::conv_transpose1d(x, w, b, d.options.clone().into()),
            )
        }
        Module::ConvTranspose2d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(
                &d.out,
                B::conv_transpose2d(x, w, b, d.options.clone().into()),
            )
        }
        Module::ConvTranspose3d(d) => {
            let (x, w, b) = (e.f(&d.x), e.f(&d.weight), opt!(e, d.bias));
            e.put_f(
                &d.out,
                B::conv_transpose3d(x, w, b, d.options.clone().into()),
            )
        }
        Module::ConvTranspose1dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            let t = B::conv_transpose1d_weight_backward(x, w, g, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::ConvTranspose1dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv_transpose1d_bias_backward(x, b, g))
        }
        Module::ConvTranspose2dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            let t = B::conv_transpose2d_weight_backward(x, w, g, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::ConvTranspose2dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv_transpose2d_bias_backward(x, b, g))
        }
        Module::ConvTranspose3dWeightBackward(d) => {
            let (x, w, g) = (e.f(&d.x), e.f(&d.weight), e.f(&d.output_grad));
            let t = B::conv_transpose3d_weight_backward(x, w, g, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::ConvTranspose3dBiasBackward(d) => {
            let (x, b, g) = (e.f(&d.x), e.f(&d.bias), e.f(&d.output_grad));
            e.put_f(&d.out, B::conv_transpose3d_bias_backward(x, b, g))
        }
        Module::AvgPool1d(d) => {
            let x = e.f(&d.x);
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool1d(x, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AvgPool2d(d) => {
            let x = e.f(&d.x);
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool2d(x, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AvgPool1dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool1d_backward(x, g, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AvgPool2dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            let (k, s, p) = (d.kernel_size, d.stride, d.padding);
            let t = B::avg_pool2d_backward(x, g, k, s, p, d.count_include_pad, d.ceil_mode);
            e.put_f(&d.out, t)
        }
        Module::AdaptiveAvgPool1d(d) => {
            let x = e.f(&d.x);
            e.put_f(&d.out, B::adaptive_avg_pool1d(x, d.output_size))
        }
        Module::AdaptiveAvgPool2d(d) => {
            let x = e.f(&d.x);
            e.put_f(&d.out, B::adaptive_avg_pool2d(x, d.output_size))
        }
        Module::AdaptiveAvgPool3d(d) => {
            let x = e.f(&d.x);
            e.put_f(&d.out, B::adaptive_avg_pool3d(x, d.output_size))
        }
        Module::AdaptiveAvgPool1dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            e.put_f(&d.out, B::adaptive_avg_pool1d_backward(x, g))
        }
        Module::AdaptiveAvgPool2dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            e.put_f(&d.out, B::adaptive_avg_pool2d_backward(x, g))
        }
        Module::AdaptiveAvgPool3dBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            e.put_f(&d.out, B::adaptive_avg_pool3d_backward(x, g))
        }
        Module::MaxPool1d(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            e.put_f(&d.out, B::max_pool1d(x, k, s, p, dil, d.ceil_mode))
        }
        Module::MaxPool2d(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            e.put_f(&d.out, B::max_pool2d(x, k, s, p, dil, d.ceil_mode))
        }
        Module::MaxPool1dWithIndices(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let dtype = d.out_indices.dtype.into();
            let out = B::max_pool1d_with_indices(x, k, s, p, dil, d.ceil_mode, dtype);
            e.put_f(&d.out, out.output);
            e.put_i(&d.out_indices, out.indices)
        }
        Module::MaxPool2dWithIndices(d) => {
            let x = e.f(&d.x);
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let dtype = d.out_indices.dtype.into();
            let out = B::max_pool2d_with_indices(x, k, s, p, dil, d.ceil_mode, dtype);
            e.put_f(&d.out, out.output);
            e.put_i(&d.out_indices, out.indices)
        }
        Module::MaxPool1dWithIndicesBackward(d) => {
            let (x, g, i) = (e.f(&d.x), e.f(&d.grad), e.i(&d.indices));
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let out = B::max_pool1d_with_indices_backward(x, k, s, p, dil, d.ceil_mode, g, i);
            e.put_f(&d.out, out.x_grad)
        }
        Module::MaxPool2dWithIndicesBackward(d) => {
            let (x, g, i) = (e.f(&d.x), e.f(&d.grad), e.i(&d.indices));
            let (k, s, p, dil) = (d.kernel_size, d.stride, d.padding, d.dilation);
            let out = B::max_pool2d_with_indices_backward(x, k, s, p, dil, d.ceil_mode, g, i);
            e.put_f(&d.out, out.x_grad)
        }
        Module::Interpolate(d) => {
            let x = e.f(&d.x);
            e.put_f(
                &d.out,
                B::interpolate(x, d.output_size, d.options.clone().into()),
            )
        }
        Module::InterpolateBackward(d) => {
            let (x, g) = (e.f(&d.x), e.f(&d.grad));
            let t = B::interpolate_backward(x, g, d.output_size, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::Attention(d) => {
            let (q, k, v) = (e.f(&d.query), e.f(&d.key), e.f(&d.value));
            let mask = d.mask.as_ref().map(|m| e.b(m));
            let bias = opt!(e, d.attn_bias);
            let t = B::attention(q, k, v, mask, bias, d.options.clone().into());
            e.put_f(&d.out, t)
        }
        Module::LayerNorm(d) => {
            let (x, gamma, beta) = (e.f(&d.input), e.f(&d.gamma), opt!(e, d.beta));
            e.put_f(&d.out, B::layer_norm(x, gamma, beta, d.epsilon.elem()))
        }
        Module::BatchNorm(d) => {
            let (x, gamma, beta) = (e.f(&d.x), e.f(&d.gamma), e.f(&d.beta));
            let (mean, var) = (e.f(&d.mean), e.f(&d.variance));
            e.put_f(
                &d.out,
                B::batch_norm(x, gamma, beta, mean, var, d.epsilon.elem()),
            )
        }
        Module::Unfold4d(d) => {
            let o = &d.options;
            let options = UnfoldOptions::new(o.stride, o.padding, o.dilation);
            let x = e.f(&d.x);
            e.put_f(&d.out, B::unfold4d(x, d.kernel_size, options))
        }
        Module::CtcLoss(d) => {
            let (lp, t) = (e.f(&d.log_probs), e.i(&d.targets));
            let (il, tl) = (e.i(&d.input_lengths), e.i(&d.target_lengths));
            e.put_f(&d.out, B::ctc_loss(lp, t, il, tl, d.blank))
        }
        Module::CtcLossBackward(d) => {
            let (lp, t) = (e.f(&d.log_probs), e.i(&d.targets));
            let (il, tl, g) = (
                e.i(&d.input_lengths),
                e.i(&d.target_lengths),
                e.f(&d.grad_loss),
            );
            e.put_f(&d.out, B::ctc_loss_backward(lp, t, il, tl, g, d.blank))
        }
    }
    Ok(())
}
