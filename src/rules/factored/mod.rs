//! Factored per-example weight gradients: the rules that keep them factored.
//!
//! Under `vmap`, the weight gradient of a layer that multiplies its input by a weight matrix is,
//! per example, a matrix product over the example's rows (`crate::tensor`'s `Factors`: a
//! `Linear` on a vector or a sequence, a convolution through its unfolded input, an embedding
//! through its one-hot tokens). [`layers`] builds them from the layers' backward ops. The ops
//! that DP-SGD and per-example gradient statistics apply to such gradients have exact factored
//! forms, implemented in [`ops`] (Goodfellow's trick, ghost clipping and its mixed form, Bu, Mao
//! & Xu 2022; BackPACK's second moments for one row):
//!
//! | op | factored |
//! |---|---|
//! | `g + g'` (a parameter used twice: an LSTM's time steps) | the parts of both, one sum |
//! | `g * g'` | held as the pair; `sum(g * g')` is `⟨X X'ᵀ, G G'ᵀ⟩`, from `k × k'` Gram matrices (for one row each, the rows' inner products), one per equal set of factors while a vmap level runs |
//! | `g * g'`, read by another rule (one row each) | `(x x') ⊗ (g g')`, one row |
//! | `g * g` of a dense `g` (a bias's squared norm) | held as the pair; its `sum` one inner product per example (a batched matrix product of the flattened examples: one launch) |
//! | `g * c`, `g / c` (`c` constant over the matrix dims: a per-example factor), scalars | scale one factor |
//! | `sum(g)` | `Σ_t sum(x_t) sum(g_t)` per example |
//! | `sum_dim`/`mean_dim` over the matrix dims | reduce one factor |
//! | `sum_dim`/`mean_dim` over a leading dim (the examples, once unbatched) | one matrix product over every example's rows (`Xᵀ G`), or a scatter-add of rows for an embedding |
//! | leaving a vmap level | the same move on both factors |
//! | `cat`, `select` (shared indices) along a leading dim | the same op on both factors |
//! | `cast` to another float dtype | every factor cast (`WideSum`'s `f64` sum over the examples); a per-example scaling of a dense `g` (a clipped bias) casts `g` and the factors, still one product over the examples |
//!
//! Equal factors: a layer rule tags each factor with the value it read (`crate::tensor::Tag`),
//! and the Gram matrices of tagged factors are memoized at the current vmap level
//! (`crate::level::memoized`), so layers that read one input share them ([`gram`]: the squared
//! norms).
//!
//! Every other op reads the physical tensor, which multiplies the factors out once
//! ([`VmapTensor::into_parts`]). A product is only kept factored while its factors are smaller
//! than it ([`Factors::worth_keeping`], which is also when its squared norm costs less from Gram
//! matrices): a layer with many rows per example and a small weight (an early convolution) is
//! multiplied out at once, as mixed ghost clipping does. The oracle tests (the 0.21 crate's
//! `tests/factored.rs` and `tests/outer.rs`; here `tests/engine/grad.rs` and the capture test)
//! check each form against the multiplied-out product.
//!
//! **No factored form**: the elementwise square of a product of several rows (`(Xᵀ G)²`, a
//! second moment of a sequence layer's gradient) and anything that mixes its entries; they are
//! multiplied out, one microbatch at a time under `micro_grad`.

#![allow(clippy::result_large_err)] // See `Declined`.

mod gram;
mod layers;
mod ops;

pub(crate) use layers::{conv_weight, embedding_weight, linear_weight};
pub(crate) use ops::{add, cast, cat, div, mul, scalar, select, sum, sum_dim, unbatch};

use burn_backend::backend::Backend;
use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{FloatDType, Scalar, Shape, TensorMetadata, get_or_init_device_settings};

use super::helpers::{align, cat_floats};
use crate::physical::{Float, Kind};
use crate::tensor::{BatchDims, Factors, Left, Part, VmapTensor};

type FP<B> = <B as burn_backend::backend::BackendTypes>::FloatTensorPrimitive;
type VT<B> = VmapTensor<FP<B>>;
type IT<B> = VmapTensor<<B as burn_backend::backend::BackendTypes>::IntTensorPrimitive>;
type F<B> = Factors<FP<B>>;

/// A factored rule's result: the result, or the operands given back untouched for the general
/// rule. They are moved, not boxed (hence the module's `result_large_err` allowance): a few
/// hundred bytes of memcpy beside a tensor op, where a box would allocate on every float mul.
type Declined<T> = Result<T, T>;

/// Wraps factors as a tensor batched at `bdims`: factored while worth keeping, otherwise (and
/// for an empty product) multiplied out at once.
fn make<B: Backend>(f: F<B>, bdims: BatchDims) -> VT<B> {
    if f.shape.num_elements() == 0 || f.k() == 0 || !f.worth_keeping() {
        return VmapTensor::new(multiply::<B>(f), bdims);
    }
    VmapTensor::factored(f, bdims, multiply::<B>)
}

/// The physical product of `f`: `Σ_parts leftᵀ right`, broadcast to the product's leading dims,
/// its columns split as the shape says. The parts are joined first (one product over all their
/// rows); one row is a broadcast multiply, several a matrix product, one-hot rows a
/// scatter-add of the right rows.
fn multiply<B: Backend>(f: F<B>) -> FP<B> {
    let (lead, m, n) = (f.lead(), f.m(), f.n());
    let lead_dims: Vec<usize> = f.shape.iter().take(lead).copied().collect();
    let matrix: Vec<usize> = lead_dims.iter().copied().chain([m, n]).collect();
    let shape = f.shape.to_vec();
    let f = single_part::<B>(f);
    let part = f.parts.into_iter().next().expect("one part");
    let k = part.right.shape()[lead];
    if k == 0 || shape.iter().product::<usize>() == 0 {
        return zeros::<B>(&part.right, shape);
    }
    let product = match part.left {
        Left::Dense(left) if k == 1 => {
            // `[.., m, 1] ⊗ [.., 1, n]`: outer products, a broadcast multiply (on Flex 0.21 a
            // matmul was faster; no longer on 0.22.1: see `crate::compat`).
            let mut dims = left.shape().to_vec();
            dims.swap(lead, lead + 1);
            B::float_mul(reshape::<B>(left, dims), part.right)
        }
        Left::Dense(left) => matmul::<B>(B::float_swap_dims(left, lead, lead + 1), part.right),
        Left::OneHot(index) => {
            let right = expand_lead::<B>(part.right, &lead_dims);
            let device = index.device();
            let int = get_or_init_device_settings::<B>(&device).int_dtype;
            let index = expand_to::<B>(expand_lead::<B>(index, &lead_dims), &right.shape());
            let index = B::float_into_int(index, int);
            let target = zeros::<B>(&right, matrix.clone());
            B::float_scatter(lead, target, index, right, IndexingUpdateOp::Add)
        }
    };
    reshape::<B>(expand_to::<B>(product, &matrix), shape)
}

/// The multiplied-out elementwise product of two factored tensors, or of a dense tensor with
/// itself (each through its memo).
fn multiply_pair<B: Backend>([a, b]: [VT<B>; 2]) -> FP<B> {
    B::float_mul(a.inner(), b.inner())
}

/// Dense rows `[lead.., k, m]` of a left factor (one-hot rows written out).
fn dense_left<B: Backend>(left: Left<FP<B>>, m: usize) -> FP<B> {
    match left {
        Left::Dense(t) => t,
        Left::OneHot(index) => {
            let rank = index.shape().num_dims();
            let device = index.device();
            let int = get_or_init_device_settings::<B>(&device).int_dtype;
            let cols = B::int_arange(0..m as i64, &device, int);
            let cols = B::int_into_float(cols, FloatDType::from(index.dtype()));
            let mut dims = vec![1; rank];
            dims[rank - 1] = m;
            equal::<B>(index, reshape::<B>(cols, dims))
        }
    }
}

/// `1.0` where `a == b` (broadcast), else `0.0`, for tensors of whole numbers: `1 - min(|a - b|, 1)`.
fn equal<B: Backend>(a: FP<B>, b: FP<B>) -> FP<B> {
    let distance = B::float_clamp_max(B::float_abs(B::float_sub(a, b)), Scalar::Float(1.0));
    B::float_add_scalar(B::float_neg(distance), Scalar::Float(1.0))
}

/// `a @ b` over the last two dims (leading dims broadcast). The operands go to the backend as
/// they are (a transposed factor is a view): Burn's matrix products take strided operands, as
/// its own backward passes give them (`linear_weight_backward`'s transposed input); made
/// contiguous first, a transposed factor was a copy, a launch on a GPU.
fn matmul<B: Backend>(a: FP<B>, b: FP<B>) -> FP<B> {
    B::float_matmul(a, b)
}

fn reshape<B: Backend>(t: FP<B>, dims: Vec<usize>) -> FP<B> {
    if t.shape().as_slice() == dims.as_slice() {
        return t;
    }
    <Float as Kind<B>>::reshape(t, Shape::from(dims))
}

/// `t` broadcast (a view) to `dims`.
fn expand_to<B: Backend>(t: FP<B>, dims: &[usize]) -> FP<B> {
    if t.shape().as_slice() == dims {
        return t;
    }
    B::float_expand(t, Shape::from(dims.to_vec()))
}

/// `t` with its leading dims (all but the last two) broadcast to `lead`.
fn expand_lead<B: Backend>(t: FP<B>, lead: &[usize]) -> FP<B> {
    let s = t.shape();
    let r = s.num_dims();
    let dims: Vec<usize> = lead.iter().copied().chain([s[r - 2], s[r - 1]]).collect();
    expand_to::<B>(t, &dims)
}

fn zeros<B: Backend>(like: &FP<B>, dims: Vec<usize>) -> FP<B> {
    B::float_zeros(Shape::from(dims), &like.device(), like.dtype().into())
}

/// Applies `f` to every factor tensor (dense rows, one-hot indices and right factors alike).
fn map_factors<B: Backend>(f: F<B>, mut g: impl FnMut(FP<B>) -> FP<B>) -> F<B> {
    let parts = f
        .parts
        .into_iter()
        .map(|p| {
            let left = match p.left {
                Left::Dense(t) => Left::Dense(g(t)),
                Left::OneHot(t) => Left::OneHot(g(t)),
            };
            Part::new(left, g(p.right))
        })
        .collect();
    Factors { parts, ..f }
}

/// Scales every part by `op(., s)` (`s` broadcasting against `[lead.., k, _]`): see
/// [`scale_part`].
fn scale_parts<B: Backend>(f: F<B>, mut op: impl FnMut(FP<B>) -> FP<B>) -> F<B> {
    let parts = f
        .parts
        .into_iter()
        .map(|p| scale_part::<B>(p, &mut op))
        .collect();
    Factors { parts, ..f }
}

/// A part scaled through one factor, the other left as it was (and keeping its tag): where
/// both are dense and have the same leading dims and rows, the output gradients `[k, n]` if
/// there are several rows and they are no wider than the inputs (a `Linear` to 10 classes
/// scales its `[k, 10]` output gradients, not its `[k, 512]` inputs; at equal widths the input,
/// which a layer's query, key and value weights share, stays as it was); with one row the
/// inputs, whose scaling costs as little, so that the output gradients stay the value the
/// bias's gradient holds (a wide sum casts it once for both). Otherwise the dense left one, or
/// the right one where the rows are one-hot.
fn scale_part<B: Backend>(p: Part<FP<B>>, op: impl FnOnce(FP<B>) -> FP<B>) -> Part<FP<B>> {
    match p.left {
        Left::Dense(l) if !right_no_wider(&l, &p.right) => Part {
            left: Left::Dense(op(l)),
            left_tag: None,
            ..p
        },
        left => Part {
            left,
            right: op(p.right),
            right_tag: None,
            ..p
        },
    }
}

/// Whether a dense left factor's right one holds the same rows, more than one of them, and is
/// no wider: then it is the one to scale.
fn right_no_wider<P: burn_backend::TensorMetadata>(l: &P, right: &P) -> bool {
    let (ls, rs) = (l.shape(), right.shape());
    let r = ls.num_dims();
    let rows_match = r >= 2 && r == rs.num_dims() && ls[..r - 1] == rs[..r - 1];
    rows_match && rs[r - 1] <= ls[r - 1] && ls[r - 2] > 1
}

/// The factors moved to the batch dims `target` (a superset of `own`), with size-1 dims for
/// the levels they lack.
fn realign<B: Backend>(f: F<B>, own: &BatchDims, target: &BatchDims) -> F<B> {
    if own == target {
        return f;
    }
    let shape: Shape = target
        .sizes()
        .chain(f.shape.iter().skip(own.len()).copied())
        .collect();
    let f = map_factors::<B>(f, |t| {
        align::<B, Float>(VmapTensor::new(t, own.clone()), target)
    });
    Factors { shape, ..f }
}

/// One part holding every part's rows: the factors broadcast to the product's leading dims and
/// concatenated along the rows (one-hot rows stay one-hot when every part's are).
fn single_part<B: Backend>(f: F<B>) -> F<B> {
    if f.parts.len() == 1 {
        return f;
    }
    let part = Part::new(joined_left::<B>(&f), joined_right::<B>(&f));
    Factors {
        parts: vec![part],
        ..f
    }
}

/// The left factors of every part as one: a single part's as it is; several broadcast to the
/// product's leading dims and concatenated along the rows (one-hot rows stay one-hot when every
/// part's are).
fn joined_left<B: Backend>(f: &F<B>) -> Left<FP<B>> {
    if let [part] = f.parts.as_slice() {
        return part.left.clone();
    }
    let (lead, m) = (f.lead(), f.m());
    let lead_dims = &f.shape[..lead];
    let one_hot = f.parts.iter().all(|p| p.left.is_one_hot());
    let lefts = f
        .parts
        .iter()
        .map(|p| {
            let left = match &p.left {
                Left::OneHot(i) if one_hot => i.clone(),
                left => dense_left::<B>(left.clone(), m),
            };
            expand_lead::<B>(left, lead_dims)
        })
        .collect();
    Left::new(one_hot, cat_floats::<B>(lefts, lead))
}

/// The right factors of every part as one, as [`joined_left`] joins the left ones.
fn joined_right<B: Backend>(f: &F<B>) -> FP<B> {
    if let [part] = f.parts.as_slice() {
        return part.right.clone();
    }
    let lead = f.lead();
    let lead_dims = &f.shape[..lead];
    let rights = f
        .parts
        .iter()
        .map(|p| expand_lead::<B>(p.right.clone(), lead_dims))
        .collect();
    cat_floats::<B>(rights, lead)
}

/// The factors of a tensor already checked to hold them.
#[track_caller]
fn factors<B: Backend>(t: VT<B>) -> (F<B>, BatchDims) {
    match t.into_factors() {
        Ok(f) => f,
        Err(_) => unreachable!("checked to hold factors"),
    }
}
