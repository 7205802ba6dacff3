//! Oracle cases for Burn's module ops (`burn::tensor::module`): convolutions, transposed and
//! deformable convolutions, pools, interpolation, grid sampling, attention, normalization,
//! embedding, unfold/fold and the CTC loss. Every operand (input, weights, bias, indices,
//! lengths) may be batched or shared, at any level.

use burn::tensor::module as m;
use burn::tensor::ops::{
    AttentionModuleOptions, AvgPoolOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions,
    GridSampleOptions, GridSamplePaddingMode, InterpolateMode, InterpolateOptions, MaxPoolOptions,
    UnfoldOptions,
};

use crate::harness::{Gen, P, T, bo, fl, idx, op};
use crate::run::{OpCase, case};

/// Parameters of an `N`-d convolution drawn from `p`: batch, groups, channels per group in
/// and out, kernel, stride, padding, dilation, and an input size the kernel fits.
#[derive(Clone, Debug)]
pub struct Conv<const N: usize> {
    pub n: usize,
    pub groups: usize,
    pub ci: usize,
    pub co: usize,
    pub k: [usize; N],
    pub stride: [usize; N],
    pub pad: [usize; N],
    pub dil: [usize; N],
    pub size: [usize; N],
}

impl<const N: usize> Conv<N> {
    pub fn draw(p: &P, small: bool) -> Self {
        let kmax = if small { 2 } else { 3 };
        let k: [usize; N] = core::array::from_fn(|i| 1 + p.pick(10 + i as u64, kmax));
        let dil: [usize; N] = core::array::from_fn(|i| 1 + p.pick(20 + i as u64, 2));
        let pad: [usize; N] = core::array::from_fn(|i| p.pick(30 + i as u64, 2));
        let stride: [usize; N] = core::array::from_fn(|i| 1 + p.pick(40 + i as u64, 2));
        let size: [usize; N] =
            core::array::from_fn(|i| dil[i] * (k[i] - 1) + 1 + p.pick(50 + i as u64, 3));
        Conv {
            n: 1 + p.pick(1, 2),
            groups: 1 + p.pick(2, 2),
            ci: 1 + p.pick(3, 2),
            co: 1 + p.pick(4, 2),
            k,
            stride,
            pad,
            dil,
            size,
        }
    }
    pub fn cin(&self) -> usize {
        self.groups * self.ci
    }
    pub fn cout(&self) -> usize {
        self.groups * self.co
    }
    pub fn x(&self) -> Vec<usize> {
        [vec![self.n, self.cin()], self.size.to_vec()].concat()
    }
    /// `[cout, ci, k..]`.
    pub fn w(&self) -> Vec<usize> {
        [vec![self.cout(), self.ci], self.k.to_vec()].concat()
    }
    /// A transposed convolution's weight: `[cin, co, k..]`.
    pub fn wt(&self) -> Vec<usize> {
        [vec![self.cin(), self.co], self.k.to_vec()].concat()
    }
    pub fn options(&self) -> ConvOptions<N> {
        ConvOptions::new(self.stride, self.pad, self.dil, self.groups)
    }
    /// Transposed: padding only where the kernel is larger than 1 (positive output sizes),
    /// output padding below `max(stride, dilation)`.
    pub fn transpose_options(&self, p: &P) -> ConvTransposeOptions<N> {
        let pad = core::array::from_fn(|i| if self.k[i] > 1 { self.pad[i] } else { 0 });
        let out = core::array::from_fn(|i| p.pick(60 + i as u64, self.stride[i].max(self.dil[i])));
        ConvTransposeOptions::new(self.stride, pad, out, self.dil, self.groups)
    }
}

/// Pool parameters: kernel, stride, padding (at most half the kernel), dilation, ceil mode, and
/// an input size the kernel fits.
#[derive(Clone, Debug)]
pub struct Pool<const N: usize> {
    pub n: usize,
    pub c: usize,
    pub k: [usize; N],
    pub stride: [usize; N],
    pub pad: [usize; N],
    pub dil: [usize; N],
    pub ceil: bool,
    pub size: [usize; N],
}

impl<const N: usize> Pool<N> {
    pub fn draw(p: &P) -> Self {
        let k: [usize; N] = core::array::from_fn(|i| 1 + p.pick(10 + i as u64, 3));
        let dil: [usize; N] = core::array::from_fn(|i| 1 + p.pick(20 + i as u64, 2));
        Pool {
            n: 1 + p.pick(1, 2),
            c: 1 + p.pick(2, 3),
            k,
            stride: core::array::from_fn(|i| 1 + p.pick(40 + i as u64, 2)),
            pad: core::array::from_fn(|i| p.pick(30 + i as u64, k[i] / 2 + 1)),
            dil,
            ceil: p.pick(5, 2) == 0,
            size: core::array::from_fn(|i| dil[i] * (k[i] - 1) + 1 + p.pick(50 + i as u64, 3)),
        }
    }
    pub fn x(&self) -> Vec<usize> {
        [vec![self.n, self.c], self.size.to_vec()].concat()
    }
    pub fn max(&self) -> MaxPoolOptions<N> {
        MaxPoolOptions::new(self.k)
            .with_stride(self.stride)
            .with_padding(self.pad)
            .with_dilation(self.dil)
            .with_ceil_mode(self.ceil)
    }
    pub fn avg(&self, count_include_pad: bool) -> AvgPoolOptions<N> {
        let mut o = AvgPoolOptions::new(self.k)
            .with_stride(self.stride)
            .with_padding(self.pad)
            .with_ceil_mode(self.ceil);
        o.count_include_pad = count_include_pad;
        o
    }
}

/// Flex 0.22.1 has no `NearestExact` or `Lanczos3` interpolation (the loop itself refuses).
const MODES: [InterpolateMode; 3] = [
    InterpolateMode::Nearest,
    InterpolateMode::Bilinear,
    InterpolateMode::Bicubic,
];

/// Attention shapes: `[b, h, sq, d]`, `[b, h, sk, d]`, `[b, h, sk, dv]`.
fn attn(p: &P) -> ([usize; 4], [usize; 4], [usize; 4]) {
    let (b, h) = (1 + p.pick(1, 2), 1 + p.pick(2, 2));
    let (sq, sk) = (1 + p.pick(3, 3), 1 + p.pick(4, 3));
    let (d, dv) = (1 + p.pick(5, 3), 1 + p.pick(6, 3));
    ([b, h, sq, d], [b, h, sk, d], [b, h, sk, dv])
}

/// CTC sizes: time steps, batch, classes (blank 0), target length.
fn ctc(p: &P) -> (usize, usize, usize, usize) {
    let s = 1 + p.pick(1, 2);
    (
        2 * s + 1 + p.pick(2, 2),
        1 + p.pick(3, 2),
        2 + p.pick(4, 3),
        s,
    )
}

pub fn cases() -> Vec<OpCase> {
    vec![
        case(
            "conv1d",
            1..=1,
            |p| {
                let c = Conv::<1>::draw(p, false);
                vec![fl(&c.x()), fl(&c.w()), fl(&[c.cout()])]
            },
            |p, a| {
                let c = Conv::<1>::draw(p, false);
                let (x, w, b) = (a[0].f::<3>(), a[1].f::<3>(), a[2].f::<1>());
                vec![
                    T::from(m::conv1d(x.clone(), w.clone(), Some(b), c.options())),
                    T::from(m::conv1d(x, w, None, c.options())),
                ]
            },
        ),
        case(
            "conv2d",
            1..=1,
            |p| {
                let c = Conv::<2>::draw(p, false);
                vec![fl(&c.x()), fl(&c.w()), fl(&[c.cout()])]
            },
            |p, a| {
                let c = Conv::<2>::draw(p, false);
                let (x, w, b) = (a[0].f::<4>(), a[1].f::<4>(), a[2].f::<1>());
                vec![T::from(m::conv2d(x, w, Some(b), c.options()))]
            },
        ),
        case(
            "conv3d",
            1..=1,
            |p| {
                let c = Conv::<3>::draw(p, true);
                vec![fl(&c.x()), fl(&c.w()), fl(&[c.cout()])]
            },
            |p, a| {
                let c = Conv::<3>::draw(p, true);
                let (x, w, b) = (a[0].f::<5>(), a[1].f::<5>(), a[2].f::<1>());
                vec![T::from(m::conv3d(x, w, Some(b), c.options()))]
            },
        )
        .flat(),
        case(
            "conv_transpose1d",
            1..=1,
            |p| {
                let c = Conv::<1>::draw(p, false);
                vec![fl(&c.x()), fl(&c.wt()), fl(&[c.cout()])]
            },
            |p, a| {
                let c = Conv::<1>::draw(p, false);
                let (x, w, b) = (a[0].f::<3>(), a[1].f::<3>(), a[2].f::<1>());
                let o = c.transpose_options(p);
                vec![
                    T::from(m::conv_transpose1d(
                        x.clone(),
                        w.clone(),
                        Some(b),
                        o.clone(),
                    )),
                    T::from(m::conv_transpose1d(x, w, None, o)),
                ]
            },
        ),
        case(
            "conv_transpose2d",
            1..=1,
            |p| {
                let c = Conv::<2>::draw(p, false);
                vec![fl(&c.x()), fl(&c.wt()), fl(&[c.cout()])]
            },
            |p, a| {
                let c = Conv::<2>::draw(p, false);
                let (x, w, b) = (a[0].f::<4>(), a[1].f::<4>(), a[2].f::<1>());
                vec![T::from(m::conv_transpose2d(
                    x,
                    w,
                    Some(b),
                    c.transpose_options(p),
                ))]
            },
        ),
        case(
            "conv_transpose3d",
            1..=1,
            |p| {
                let c = Conv::<3>::draw(p, true);
                vec![fl(&c.x()), fl(&c.wt()), fl(&[c.cout()])]
            },
            |p, a| {
                let c = Conv::<3>::draw(p, true);
                let (x, w, b) = (a[0].f::<5>(), a[1].f::<5>(), a[2].f::<1>());
                vec![T::from(m::conv_transpose3d(
                    x,
                    w,
                    Some(b),
                    c.transpose_options(p),
                ))]
            },
        )
        .flat(),
        // x [1, wg*ci, H, W], offset [1, 2*og*kh*kw, oh, ow], weight [co, ci, kh, kw],
        // mask [1, og*kh*kw, oh, ow]; stride 1, no padding.
        case(
            "deform_conv2d",
            1..=1,
            |p| {
                let (c, og) = (Conv::<2>::draw(p, true), 1 + p.pick(70, 2));
                let cin = c.ci * og; // offset groups divide the input channels
                let (oh, ow) = (
                    c.size[0] - c.dil[0] * (c.k[0] - 1),
                    c.size[1] - c.dil[1] * (c.k[1] - 1),
                );
                let kk = c.k[0] * c.k[1];
                vec![
                    fl(&[1, cin, c.size[0], c.size[1]]),
                    op(&[1, 2 * og * kk, oh, ow], Gen::F(-1.0, 1.0)),
                    fl(&[c.co, c.ci, c.k[0], c.k[1]]),
                    op(&[1, og * kk, oh, ow], Gen::F(0.0, 1.0)),
                    fl(&[c.co]),
                ]
            },
            |p, a| {
                let (c, og) = (Conv::<2>::draw(p, true), 1 + p.pick(70, 2));
                let o = DeformConvOptions::new([1, 1], [0, 0], c.dil, og, og);
                let (x, off, w) = (a[0].f::<4>(), a[1].f::<4>(), a[2].f::<4>());
                let (mask, b) = (a[3].f::<4>(), a[4].f::<1>());
                vec![
                    T::from(m::deform_conv2d(
                        x.clone(),
                        off.clone(),
                        w.clone(),
                        Some(mask),
                        Some(b),
                        o.clone(),
                    )),
                    T::from(m::deform_conv2d(x, off, w, None, None, o)),
                ]
            },
        )
        .flat()
        .tol(1e-3, 1e-4),
        case(
            "max_pool1d",
            1..=1,
            |p| vec![fl(&Pool::<1>::draw(p).x())],
            |p, a| {
                let o = Pool::<1>::draw(p).max();
                let (y, i) = m::max_pool1d_with_indices(a[0].f::<3>(), o.clone());
                vec![
                    T::from(m::max_pool1d(a[0].f::<3>(), o)),
                    T::from(y),
                    T::from(i),
                ]
            },
        ),
        case(
            "max_pool2d",
            1..=1,
            |p| vec![fl(&Pool::<2>::draw(p).x())],
            |p, a| {
                let o = Pool::<2>::draw(p).max();
                let (y, i) = m::max_pool2d_with_indices(a[0].f::<4>(), o.clone());
                vec![
                    T::from(m::max_pool2d(a[0].f::<4>(), o)),
                    T::from(y),
                    T::from(i),
                ]
            },
        ),
        case(
            "avg_pool1d",
            1..=1,
            |p| vec![fl(&Pool::<1>::draw(p).x())],
            |p, a| {
                let pool = Pool::<1>::draw(p);
                vec![
                    T::from(m::avg_pool1d(a[0].f::<3>(), pool.avg(true))),
                    T::from(m::avg_pool1d(a[0].f::<3>(), pool.avg(false))),
                ]
            },
        ),
        case(
            "avg_pool2d",
            1..=1,
            |p| vec![fl(&Pool::<2>::draw(p).x())],
            |p, a| {
                let pool = Pool::<2>::draw(p);
                vec![
                    T::from(m::avg_pool2d(a[0].f::<4>(), pool.avg(true))),
                    T::from(m::avg_pool2d(a[0].f::<4>(), pool.avg(false))),
                ]
            },
        ),
        case(
            "adaptive_avg_pool",
            1..=1,
            |p| vec![fl(&[1 + p.pick(1, 2), 2, p.d[0] + 1, p.d[1], p.d[2]])],
            |p, a| {
                let x = a[0].f::<5>();
                let [n, c, d, h, w] = x.dims();
                let out = [
                    1 + p.pick(3, d + 1),
                    1 + p.pick(4, h + 1),
                    1 + p.pick(5, w + 1),
                ];
                vec![
                    T::from(m::adaptive_avg_pool3d(x.clone(), out)),
                    T::from(m::adaptive_avg_pool2d(
                        x.clone().reshape([n, c * d, h, w]),
                        [out[1], out[2]],
                    )),
                    T::from(m::adaptive_avg_pool1d(x.reshape([n, c * d * h, w]), out[2])),
                ]
            },
        )
        .flat(),
        case(
            "interpolate",
            1..=1,
            |p| {
                vec![fl(&[
                    1 + p.pick(1, 2),
                    1 + p.pick(2, 2),
                    p.d[0] + 1,
                    p.d[1] + 1,
                ])]
            },
            |p, a| {
                let mode = MODES[p.pick(3, MODES.len())].clone();
                let o = InterpolateOptions::new(mode)
                    .with_align_corners(p.pick(4, 2) == 0)
                    .with_output_size([1 + p.pick(5, 6), 1 + p.pick(6, 6)]);
                vec![T::from(m::interpolate(a[0].f::<4>(), o))]
            },
        )
        .tol(1e-4, 1e-4),
        case(
            "grid_sample_2d",
            1..=1,
            |p| {
                let (n, c) = (1 + p.pick(1, 2), 1 + p.pick(2, 2));
                vec![
                    fl(&[n, c, p.d[0] + 1, p.d[1] + 1]),
                    op(&[n, p.d[2], p.d[3], 2], Gen::F(-1.2, 1.2)),
                ]
            },
            |p, a| {
                let modes = [InterpolateMode::Bilinear, InterpolateMode::Nearest];
                let paddings = [
                    GridSamplePaddingMode::Zeros,
                    GridSamplePaddingMode::Border,
                    GridSamplePaddingMode::Reflection,
                ];
                let mut o = GridSampleOptions::new(modes[p.pick(3, 2)].clone());
                o.padding_mode = paddings[p.pick(4, 3)];
                o.align_corners = p.pick(5, 2) == 0;
                vec![T::from(a[0].f::<4>().grid_sample_2d(a[1].f::<4>(), o))]
            },
        ),
        case(
            "attention",
            1..=1,
            |p| {
                let (q, k, v) = attn(p);
                let s = [q[0], q[1], q[2], k[2]];
                vec![fl(&q), fl(&k), fl(&v), bo(&s), fl(&s)]
            },
            |p, a| {
                let (q, k, v) = (a[0].f::<4>(), a[1].f::<4>(), a[2].f::<4>());
                let (mask, bias) = (a[3].b::<4>(), a[4].f::<4>());
                let o = AttentionModuleOptions {
                    scale: (p.pick(7, 2) == 0).then_some(0.7),
                    softcap: (p.pick(8, 3) == 0).then_some(2.0),
                    is_causal: p.pick(9, 2) == 0,
                };
                vec![
                    T::from(m::attention(q.clone(), k.clone(), v.clone(), None, None, o)),
                    T::from(m::attention(q, k, v, Some(mask), Some(bias), o)),
                ]
            },
        )
        .tol(1e-4, 1e-4),
        case(
            "layer_norm",
            1..=3,
            |p| {
                let d = *p.shape().last().expect("rank >= 1");
                vec![fl(&p.shape()), fl(&[d]), fl(&[d])]
            },
            |_p, a| {
                let (g, b) = (a[1].f::<1>(), a[2].f::<1>());
                vec![
                    ranked!(a[0], f, |x| m::layer_norm(
                        x,
                        g.clone(),
                        Some(b.clone()),
                        1e-5
                    )),
                    ranked!(a[0], f, |x| m::layer_norm(x, g.clone(), None, 1e-5)),
                ]
            },
        )
        .tol(1e-4, 1e-4),
        case(
            "batch_norm_eval",
            1..=1,
            |p| {
                let c = 1 + p.pick(1, 3);
                vec![
                    fl(&[1 + p.pick(2, 2), c, p.d[0]]),
                    fl(&[c]),
                    fl(&[c]),
                    fl(&[c]),
                    op(&[c], Gen::F(0.2, 2.0)),
                ]
            },
            |_p, a| {
                let (g, b, mean, var) =
                    (a[1].f::<1>(), a[2].f::<1>(), a[3].f::<1>(), a[4].f::<1>());
                vec![T::from(m::batch_norm(a[0].f::<3>(), g, b, mean, var, 1e-5))]
            },
        ),
        case(
            "embedding",
            1..=1,
            |p| {
                let v = 1 + p.d[0];
                vec![fl(&[v, p.d[1]]), idx(&[p.d[2], p.d[3]], v)]
            },
            |_p, a| vec![T::from(m::embedding(a[0].f::<2>(), a[1].i::<2>()))],
        ),
        case(
            "unfold4d_fold4d",
            1..=1,
            |p| {
                vec![fl(&[
                    1 + p.pick(1, 2),
                    1 + p.pick(2, 2),
                    p.d[0] + 1,
                    p.d[1] + 1,
                ])]
            },
            |p, a| {
                let x = a[0].f::<4>();
                let [_, _, h, w] = x.dims();
                let k = [1 + p.pick(3, 2), 1 + p.pick(4, 2)];
                let o = UnfoldOptions::new([1 + p.pick(5, 2), 1], [p.pick(6, 2), 0], [1, 1]);
                let cols = m::unfold4d(x, k, o.clone());
                vec![
                    T::from(cols.clone()),
                    T::from(m::fold4d(cols, [h, w], k, o)),
                ]
            },
        ),
        case(
            "ctc_loss",
            1..=1,
            |p| {
                let (t, n, c, s) = ctc(p);
                vec![
                    fl(&[t, n, c]),
                    op(&[n, s], Gen::I(1, c as i64 - 1)),
                    op(&[n], Gen::I(2 * s as i64 + 1, t as i64)),
                    op(&[n], Gen::I(1, s as i64)),
                ]
            },
            |_p, a| {
                let lp = burn::tensor::activation::log_softmax(a[0].f::<3>(), 2);
                vec![T::from(m::ctc_loss(
                    lp,
                    a[1].i::<2>(),
                    a[2].i::<1>(),
                    a[3].i::<1>(),
                    0,
                ))]
            },
        )
        .tol(1e-4, 1e-4),
    ]
}
