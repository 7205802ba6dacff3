//! The layers' weight gradients as factors: `linear_weight_backward`, the convolutions'
//! `conv*d_weight_backward` and `embedding_backward` with a batched operand.

use burn_backend::backend::Backend;
use burn_backend::ops::UnfoldOptions;
use burn_backend::tensor::Float;
use burn_backend::{FloatDType, Shape, Slice, TensorMetadata};

use super::{make, multiply, reshape, FP, IT, VT};
use crate::physical::{with_batch_sizes, Kind};
use crate::rules::helpers::align;
use crate::rules::module::fold_n;
use crate::tensor::{BatchDims, Factors, Left, Part, VmapTensor};

/// `t` (physical, batch dims `own`) as `[own.., rows, width]`, then aligned to `target`.
fn as_rows<B: Backend>(
    data: FP<B>,
    own: BatchDims,
    rows: usize,
    width: usize,
    target: &BatchDims,
) -> FP<B> {
    let data = reshape::<B>(data, with_batch_sizes(&own, &[rows, width]).to_vec());
    align::<B, Float>(VmapTensor::new(data, own), target)
}

/// `linear_weight_backward(x, g) = Xᵀ G` summed over the leading dims (`x: [.., d_in]`,
/// `g: [.., d_out]`) with at least one side batched: per example, the product of its `k` rows
/// (the product of its leading dims; one for a vector, `T` for a sequence), held factored.
/// Otherwise the operands come back.
pub(crate) fn linear_weight<B: Backend>(x: VT<B>, g: VT<B>) -> Result<VT<B>, (VT<B>, VT<B>)> {
    let (xs, gs) = (x.shape(), g.shape());
    let rank = xs.num_dims();
    if !(x.is_batched() || g.is_batched())
        || rank == 0
        || gs.num_dims() != rank
        || xs[..rank - 1] != gs[..rank - 1]
    {
        return Err((x, g));
    }
    let (d_in, d_out) = (xs[rank - 1], gs[rank - 1]);
    let k: usize = xs[..rank - 1].iter().product();
    let bdims = BatchDims::union([&x.bdims, &g.bdims]);
    let rows = |t: VT<B>, width: usize| {
        let (data, _, own) = t.into_stored();
        as_rows::<B>(data, own, k, width, &bdims)
    };
    let left = rows(x, d_in);
    let right = rows(g, d_out);
    let f = Factors {
        parts: vec![Part {
            left: Left::Dense(left),
            right,
        }],
        shape: with_batch_sizes(&bdims, &[d_in, d_out]),
        cols: 1,
    };
    Ok(make::<B>(f, bdims))
}

/// `embedding_backward(weights, g, indices)`: per example, the right rows `g: [N, T, d]`
/// scattered to the rows of its tokens `indices: [N, T]` of a `[m, d]` table, held as one-hot
/// rows (their indices) and `g`. `weights` gives the table's shape only.
pub(crate) fn embedding_weight<B: Backend>(m: usize, g: VT<B>, indices: IT<B>) -> VT<B> {
    let gs = g.shape();
    let d = gs[gs.num_dims() - 1];
    let k = gs.num_elements().checked_div(d).unwrap_or(0);
    let bdims = BatchDims::union([&g.bdims, &indices.bdims]);
    let dtype = FloatDType::from(g.dtype());
    let (index, own) = indices.into_parts();
    let index = B::int_into_float(index, dtype);
    let left = as_rows::<B>(index, own, k, 1, &bdims);
    let (g, _, own) = g.into_stored();
    let right = as_rows::<B>(g, own, k, d, &bdims);
    let f = Factors {
        parts: vec![Part {
            left: Left::OneHot(left),
            right,
        }],
        shape: with_batch_sizes(&bdims, &[m, d]),
        cols: 1,
    };
    make::<B>(f, bdims)
}

/// A convolution's weight gradient, `Σ_positions g ⊗ patch` per example, for `x: [N, c_in, s..]`
/// and `g: [N, c_out, s'..]` with one or two spatial dims (a 1-d convolution is a 2-d one of
/// height 1) and the weight's logical shape `[c_out, c_in / groups, k..]`: the output gradients
/// (left, `m = c_out`) against the unfolded input patches (right, `n = c_in / groups · k..`),
/// over `N ·` output positions rows. With `groups > 1` every group is such a product, and the
/// result is multiplied out.
pub(crate) fn conv_weight<B: Backend>(
    x: VT<B>,
    g: VT<B>,
    weight_shape: Shape,
    options: Conv2d,
) -> VT<B> {
    let bdims = BatchDims::union([&x.bdims, &g.bdims]);
    let spatial = x.shape().num_dims() - 2;
    let groups = options.groups;
    let (c_out, c_in_group) = (weight_shape[0], weight_shape[1]);
    let kernel_width = weight_shape[weight_shape.num_dims() - 1];
    let kernel = if spatial == 1 {
        [1, kernel_width]
    } else {
        [weight_shape[2], kernel_width]
    };

    // Patches `[own.., N·L, c_in·kh·kw]`.
    let xs = x.shape();
    let (n_x, c_in) = (xs[0], xs[1]);
    let (xin, own_x) = x.into_parts();
    let folded = as_4d::<B>(fold_n::<B, Float>(xin, &own_x), spatial);
    let patches = unfold::<B>(folded, kernel, &options); // [E·N, L, c_in·kh·kw]
    let positions = patches.shape()[1];
    let width = c_in * kernel[0] * kernel[1];
    let right = as_rows::<B>(patches, own_x, n_x * positions, width, &bdims);

    // Output gradients `[own.., N·L, c_out]`.
    let (gin, own_g) = g.into_parts();
    let nb = own_g.len();
    let gs = gin.shape();
    let n_g = gs[nb];
    let per_sample: Vec<usize> = own_g.sizes().chain([n_g, c_out, positions]).collect();
    let gin = reshape::<B>(gin, per_sample);
    let gin = B::float_swap_dims(gin, nb + 1, nb + 2); // [own.., N, L, c_out]
    let left = as_rows::<B>(gin, own_g, n_g * positions, c_out, &bdims);

    let group_factors = |left: FP<B>, right: FP<B>, c_out: usize| Factors {
        parts: vec![Part {
            left: Left::Dense(left),
            right,
        }],
        shape: with_batch_sizes(
            &bdims,
            &[c_out]
                .into_iter()
                .chain(weight_shape.iter().skip(1).copied())
                .collect::<Vec<_>>(),
        ),
        cols: weight_shape.num_dims() - 1,
    };
    if groups == 1 {
        return make::<B>(group_factors(left, right, c_out), bdims);
    }
    // Block-diagonal: each group's outputs against its own input channels, multiplied out.
    let (out_g, in_g) = (c_out / groups, c_in_group * kernel[0] * kernel[1]);
    let last = |t: &FP<B>| t.shape().num_dims() - 1;
    let columns = |t: FP<B>, from: usize, len: usize| {
        let rank = last(&t) + 1;
        let mut slices = vec![Slice::full(); rank];
        slices[rank - 1] = Slice::from(from..from + len);
        B::float_slice(t, &slices)
    };
    let blocks: Vec<FP<B>> = (0..groups)
        .map(|i| {
            let l = columns(left.clone(), i * out_g, out_g);
            let r = columns(right.clone(), i * in_g, in_g);
            multiply::<B>(group_factors(l, r, out_g))
        })
        .collect();
    VmapTensor::new(B::float_cat(blocks, bdims.len()), bdims)
}

/// The options of a convolution as a 2-d one (a 1-d convolution has height 1).
#[derive(Clone, Debug)]
pub(crate) struct Conv2d {
    pub(crate) stride: [usize; 2],
    pub(crate) padding: [usize; 2],
    pub(crate) dilation: [usize; 2],
    pub(crate) groups: usize,
}

impl From<burn_backend::ops::ConvOptions<2>> for Conv2d {
    fn from(o: burn_backend::ops::ConvOptions<2>) -> Self {
        Self {
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
        }
    }
}

impl From<burn_backend::ops::ConvOptions<1>> for Conv2d {
    fn from(o: burn_backend::ops::ConvOptions<1>) -> Self {
        Self {
            stride: [1, o.stride[0]],
            padding: [0, o.padding[0]],
            dilation: [1, o.dilation[0]],
            groups: o.groups,
        }
    }
}

/// `[N, c, l]` as `[N, c, 1, l]`; a 2-d input as it is.
fn as_4d<B: Backend>(x: FP<B>, spatial: usize) -> FP<B> {
    if spatial == 2 {
        return x;
    }
    let s = x.shape();
    reshape::<B>(x, vec![s[0], s[1], 1, s[2]])
}

/// The input patches of a 2-d convolution, one row per output position: `[N, c, h, w] ->
/// [N, L, c·kh·kw]` (channel-major within a row, as the weight `[c_out, c, kh, kw]` is laid out).
fn unfold<B: Backend>(x: FP<B>, kernel: [usize; 2], o: &Conv2d) -> FP<B> {
    let s = x.shape();
    let (n, c) = (s[0], s[1]);
    if o.dilation != [1, 1] {
        // Burn's unfold4d `[N, c·kh·kw, L]`, transposed.
        let options = UnfoldOptions::new(o.stride, o.padding, o.dilation);
        return B::float_swap_dims(B::unfold4d(x, kernel, options), 1, 2);
    }
    let x = if o.padding == [0, 0] {
        x
    } else {
        let [ph, pw] = o.padding;
        let padded = Shape::from(vec![n, c, s[2] + 2 * ph, s[3] + 2 * pw]);
        let zeros = B::float_zeros(padded, &B::float_device(&x), x.dtype().into());
        let inner = [
            Slice::full(),
            Slice::full(),
            Slice::from(ph..ph + s[2]),
            Slice::from(pw..pw + s[3]),
        ];
        B::float_slice_assign(zeros, &inner, x)
    };
    // `[N, c, hb, wb, kh, kw]` windows (views), then one copy into rows.
    let blocks = B::float_unfold(x, 2, kernel[0], o.stride[0]);
    let blocks = B::float_unfold(blocks, 3, kernel[1], o.stride[1]);
    let b = blocks.shape();
    let blocks = B::float_permute(blocks, &[0, 2, 3, 1, 4, 5]);
    <Float as Kind<B>>::reshape(blocks, Shape::from(vec![n, b[2] * b[3], c * b[4] * b[5]]))
}
