//! The layers' weight gradients as factors: `linear_weight_backward`, the convolutions'
//! `conv*d_weight_backward` and `embedding_backward` with a batched operand.

use burn_backend::backend::Backend;
use burn_backend::ops::{PadMode, UnfoldOptions};
use burn_backend::{FloatDType, Shape, Slice, TensorMetadata};

use super::{FP, IT, VT, make, reshape};
use crate::compat;
use crate::physical::{Float, Kind, with_batch_sizes};
use crate::rules::helpers::{align, cat_floats, materialize};
use crate::rules::module::fold_n;
use crate::tensor::{BatchDims, Factors, Left, Part, Tag, VmapTensor};

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
    // Each factor is tagged with the value it holds: layers that read one input share the Gram
    // matrices of its rows (see `Tag`).
    let rows = |t: VT<B>, width: usize| {
        let origin = t.origin();
        let (data, _, own) = t.into_stored();
        let rows = as_rows::<B>(data, own, k, width, &bdims);
        let tag = Tag {
            origin,
            bdims: bdims.clone(),
            shape: rows.shape(),
        };
        (rows, Some(tag))
    };
    let (left, left_tag) = rows(x, d_in);
    let (right, right_tag) = rows(g, d_out);
    let part = Part {
        left: Left::Dense(left),
        right,
        left_tag,
        right_tag,
    };
    let f = Factors::single(part, with_batch_sizes(&bdims, &[d_in, d_out]), 1);
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
    let part = Part::new(Left::OneHot(left), right);
    let f = Factors::single(part, with_batch_sizes(&bdims, &[m, d]), 1);
    make::<B>(f, bdims)
}

/// A convolution's weight gradient, `Σ_positions g ⊗ patch` per example, for `x: [N, c_in, s..]`
/// and `g: [N, c_out, s'..]` with one or two spatial dims (a 1-d convolution is a 2-d one of
/// height 1) and the weight's logical shape `[c_out, c_in / groups, k..]`: the output gradients
/// (left, `m = c_out`) against the unfolded input patches (right, `n = c_in / groups · k..`),
/// over `N ·` output positions rows. Kept factored when that is worth it (few positions, one
/// group); otherwise multiplied out at once, a slice of the examples at a time so that their
/// patches (`positions · n` floats per example, often far more than the gradient itself) never
/// exist for the whole batch.
pub(crate) fn conv_weight<B: Backend>(
    x: VT<B>,
    g: VT<B>,
    weight_shape: Shape,
    options: ConvGeometry,
) -> VT<B> {
    let bdims = BatchDims::union([&x.bdims, &g.bdims]);
    let spatial = x.shape().num_dims() - 2;
    let kernel_width = weight_shape[weight_shape.num_dims() - 1];
    let kernel = if spatial == 1 {
        [1, kernel_width]
    } else {
        [weight_shape[2], kernel_width]
    };
    let gs = g.shape();
    let positions: usize = gs.iter().skip(2).product();
    let (m, n) = (
        weight_shape[0],
        weight_shape.iter().skip(1).product::<usize>(),
    );
    let rows = gs[0] * positions;
    let shape = with_batch_sizes(&bdims, &weight_shape);
    let cols = weight_shape.num_dims() - 1;
    if options.groups == 1 && rows * (m + n) < m * n {
        let c_in = x.shape()[1];
        let (xin, own_x) = x.into_parts();
        let folded = as_4d::<B>(fold_n::<B, Float>(xin, &own_x), spatial);
        let examples = own_x.num_examples();
        let patches = unfold::<B>(folded, kernel, &options, [examples, rows]);
        let right = as_rows::<B>(patches, own_x, rows, c_in * kernel[0] * kernel[1], &bdims);
        let (gin, own_g) = g.into_parts();
        let left = as_rows::<B>(
            output_rows::<B>(gin, own_g.len(), m),
            own_g,
            rows,
            m,
            &bdims,
        );
        let f = Factors::single(Part::new(Left::Dense(left), right), shape, cols);
        return make::<B>(f, bdims);
    }
    // Multiplied out, `chunk` examples at a time: only a chunk's inputs are refolded and
    // unfolded (backends may copy on every reshape).
    let e = bdims.num_examples();
    let one_level = |t: FP<B>| {
        if bdims.len() == 1 {
            return t;
        }
        let s = t.shape();
        let dims: Vec<usize> = [e]
            .into_iter()
            .chain(s.iter().skip(bdims.len()).copied())
            .collect();
        reshape::<B>(t, dims)
    };
    let x = one_level(materialize::<B, Float>(x, &bdims)); // [E, N, c_in, s..]
    let g = one_level(materialize::<B, Float>(g, &bdims)); // [E, N, c_out, s'..]
    let chunk = (patch_budget::<B>(&x.device()) / (rows * n).max(1)).clamp(1, e.max(1));
    let (out_g, in_g) = (m / options.groups, n);
    let blocks: Vec<FP<B>> = (0..e)
        .step_by(chunk)
        .map(|start| {
            let c = chunk.min(e - start);
            let xc = slice0::<B>(x.clone(), start, c);
            let xs = xc.shape();
            let dims: Vec<usize> = [c * xs[1]]
                .into_iter()
                .chain(xs.iter().skip(2).copied())
                .collect();
            let xc = reshape::<B>(xc, dims);
            let patches = unfold::<B>(as_4d::<B>(xc, spatial), kernel, &options, [c, rows]);
            let gc = slice0::<B>(g.clone(), start, c);
            let gc = left_transposed::<B>(gc, c, m, positions);
            let per_group: Vec<FP<B>> = (0..options.groups)
                .map(|i| {
                    let l = slice_dim::<B>(gc.clone(), 1, i * out_g, out_g);
                    let r = slice_dim::<B>(patches.clone(), 2, i * in_g, in_g);
                    super::matmul::<B>(l, r) // [c, out_g, in_g]
                })
                .collect();
            cat_floats::<B>(per_group, 1)
        })
        .collect();
    let out = if blocks.is_empty() {
        B::float_zeros(shape.clone(), &x.device(), x.dtype().into())
    } else {
        cat_floats::<B>(blocks, 0)
    };
    VmapTensor::new(reshape::<B>(out, shape.to_vec()), bdims)
}

/// Output gradients `[c, N, c_out, s'..]` as `[c, c_out, N·L]` (the transposed left factor).
fn left_transposed<B: Backend>(g: FP<B>, c: usize, c_out: usize, positions: usize) -> FP<B> {
    let n = g.shape()[1];
    if n == 1 {
        return reshape::<B>(g, vec![c, c_out, positions]);
    }
    let g = reshape::<B>(g, vec![c, n, c_out, positions]);
    let g = B::float_swap_dims(g, 1, 2);
    reshape::<B>(g, vec![c, c_out, n * positions])
}

/// Floats of input patches a convolution's multiplied-out weight gradient holds at once, unless
/// one example needs more: 16 MiB of `f32`, 32 MiB on the cubecl backends, where each chunk is a
/// copy of its patches and a matrix product (two launches) and the chunks a concatenation (the
/// CNN bench model's second layer in one chunk there; on Flex its peak memory stays that of
/// Burn's step).
fn patch_budget<B: Backend>(device: &B::Device) -> usize {
    if compat::is_cubecl::<B>(device) {
        1 << 23
    } else {
        1 << 22
    }
}

/// Output gradients `[b.., N, c_out, s'..]` (`nb` batch dims) as `[b.., N, L, c_out]`.
fn output_rows<B: Backend>(g: FP<B>, nb: usize, c_out: usize) -> FP<B> {
    let s = g.shape();
    let positions: usize = s.iter().skip(nb + 2).product();
    let dims: Vec<usize> = s
        .iter()
        .take(nb + 1)
        .copied()
        .chain([c_out, positions])
        .collect();
    B::float_swap_dims(reshape::<B>(g, dims), nb + 1, nb + 2)
}

/// Rows `start..start + len` of dim 0.
fn slice0<B: Backend>(t: FP<B>, start: usize, len: usize) -> FP<B> {
    let rank = t.shape().num_dims();
    let mut slices = vec![Slice::full(); rank];
    slices[0] = Slice::from(start..start + len);
    B::float_slice(t, &slices)
}

/// `len` entries from `start` along `dim`.
fn slice_dim<B: Backend>(t: FP<B>, dim: usize, start: usize, len: usize) -> FP<B> {
    let rank = t.shape().num_dims();
    let mut slices = vec![Slice::full(); rank];
    slices[dim] = Slice::from(start..start + len);
    B::float_slice(t, &slices)
}

/// The options of a convolution as a 2-d one (a 1-d convolution has height 1).
#[derive(Clone, Debug)]
pub(crate) struct ConvGeometry {
    pub(crate) stride: [usize; 2],
    /// `(begin, end)` per spatial dim (Burn 0.22 convolutions may pad asymmetrically).
    pub(crate) padding: [(usize, usize); 2],
    pub(crate) dilation: [usize; 2],
    pub(crate) groups: usize,
}

impl From<burn_backend::ops::ConvOptions<2>> for ConvGeometry {
    fn from(o: burn_backend::ops::ConvOptions<2>) -> Self {
        Self {
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
        }
    }
}

impl From<burn_backend::ops::ConvOptions<1>> for ConvGeometry {
    fn from(o: burn_backend::ops::ConvOptions<1>) -> Self {
        Self {
            stride: [1, o.stride[0]],
            padding: [(0, 0), o.padding[0]],
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

/// The input patches of a 2-d convolution, one row per output position: `[E·N, c, h, w] ->
/// [E, N·L, c·kh·kw]` for `[E, N·L] = rows` (channel-major within a row, as the weight
/// `[c_out, c, kh, kw]` is laid out): the input padded (each side as the options say), windows
/// as views, then one copy (see [`compat::conv_patches`] for a backend bug).
fn unfold<B: Backend>(x: FP<B>, kernel: [usize; 2], o: &ConvGeometry, rows: [usize; 2]) -> FP<B> {
    let c = x.shape()[1];
    let width = c * kernel[0] * kernel[1];
    let out = vec![rows[0], rows[1], width];
    let x = if o.padding == [(0, 0); 2] {
        x
    } else {
        let padding = [(0, 0), (0, 0), o.padding[0], o.padding[1]];
        B::float_pad(x, &padding, PadMode::Constant(0.0))
    };
    let options = UnfoldOptions::new(o.stride, [0, 0], o.dilation);
    let patches = compat::conv_patches::<B>(x, kernel, options.clone(), |x| {
        if o.dilation != [1, 1] {
            // Burn's unfold4d `[N, c·kh·kw, L]`, transposed.
            return B::float_swap_dims(B::unfold4d(x, kernel, options), 1, 2);
        }
        // `[N, c, hb, wb, kh, kw]` windows (views), reordered to `[N, hb, wb, c, kh, kw]`.
        let blocks = B::float_unfold(x, 2, kernel[0], o.stride[0]);
        let blocks = B::float_unfold(blocks, 3, kernel[1], o.stride[1]);
        B::float_permute(blocks, &[0, 2, 3, 1, 4, 5])
    });
    <Float as Kind<B>>::reshape(patches, Shape::from(out))
}
