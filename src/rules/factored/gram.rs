//! Squared norms of factored and paired tensors from Gram matrices: `sum(g * g')` of factored
//! products as `⟨X X'ᵀ, G G'ᵀ⟩`, and of a dense tensor with itself as one inner product per
//! example. The Gram matrices of tagged factors are memoized while a vmap level runs
//! ([`memoized`]), so layers that read one value share them.

use burn_backend::TensorMetadata;
use burn_backend::backend::Backend;

use super::{
    FP, VT, dense_left, equal, expand_lead, factors, joined_left, joined_right, matmul, reshape,
};
use crate::level::memoized;
use crate::physical::Float;
use crate::tensor::{BatchDims, Left, Tag, VmapTensor};

/// `[lead.., 1, 1]` per-leading-index sums, summed over the logical leading dims: `[1]` per
/// example.
pub(super) fn per_lead_sum<B: Backend>(per: FP<B>, bdims: BatchDims) -> VT<B> {
    super::super::reduce::all::<B, Float>(
        VmapTensor::new(per, bdims),
        B::float_sum,
        B::float_sum_dim,
        0.0,
    )
}

/// `sum(a ⊙ b)` per example of two dense tensors of one shape and batch dims (a squared norm's
/// `g * g`), as `[1]` per example: one batched product of the examples' flattened elements (one
/// launch, where the product and the sums take two or more).
///
/// Its value is the Gram matrix of the tensor as one row per example: a layer's output gradient
/// laid out as its weight's right factor has that memo ([`gram`]), so a bias whose gradient is
/// that output gradient (a `Linear` on one vector) takes its squared norm from there.
pub(super) fn dense_dot<B: Backend>(a: VT<B>, b: VT<B>) -> VT<B> {
    let shape = a.physical_shape();
    let nb = a.bdims.len();
    let batch = shape.as_slice()[..nb].to_vec();
    let m: usize = batch.iter().product();
    let n: usize = shape.as_slice()[nb..].iter().product();
    let with = |tail: [usize; 2]| batch.iter().copied().chain(tail).collect::<Vec<usize>>();
    let key = GramKey {
        side: Side::Right,
        lead: batch.clone(),
        a: vec![Tag {
            origin: a.origin(),
            bdims: a.bdims.clone(),
            shape: with([1, n]).into(),
        }],
        b: None,
    };
    let (a, bdims) = a.into_parts();
    let (b, _) = b.into_parts();
    let dots = memoized(key, || {
        let a = reshape::<B>(a, vec![m, 1, n]);
        let b = reshape::<B>(b, vec![m, n, 1]);
        reshape::<B>(B::float_matmul(a, b), with([1, 1]))
    });
    let out: Vec<usize> = batch.iter().copied().chain([1]).collect();
    VmapTensor::new(reshape::<B>(dots, out), bdims)
}

/// `sum(a ⊙ b)` of two factored products of the same shape, from Gram matrices.
pub(super) fn gram_sum<B: Backend>(a: VT<B>, b: VT<B>) -> VT<B> {
    // `g * g` (a squared norm): one Gram matrix per side serves both operands.
    let same = a.same_product(&b);
    let (fa, bdims) = factors::<B>(a);
    let fb = (!same).then(|| canonical::<B>(factors::<B>(b).0));
    let fa = canonical::<B>(fa);
    let lead = fa.lead();
    let lead_dims: Vec<usize> = fa.shape.iter().take(lead).copied().collect();
    let left_gram = gram::<B>(&fa, fb.as_ref(), Side::Left);
    let right_gram = gram::<B>(&fa, fb.as_ref(), Side::Right);
    let per = frobenius::<B>(left_gram, right_gram);
    per_lead_sum::<B>(expand_lead::<B>(per, &lead_dims), bdims)
}

/// `⟨a, b⟩` over the last two dims of two `[.., k, k']` tensors, as `[.., 1, 1]`: one batched
/// matrix product of the flattened matrices (one launch, where a product and two sums take
/// three); one row each (`k = k' = 1`), their product.
fn frobenius<B: Backend>(a: FP<B>, b: FP<B>) -> FP<B> {
    let dims = a.shape().to_vec();
    let r = dims.len();
    let (k, kk) = (dims[r - 2], dims[r - 1]);
    if k * kk == 1 {
        return B::float_mul(a, b);
    }
    let row = |t: FP<B>, last: [usize; 2]| {
        let mut to = dims[..r - 2].to_vec();
        to.extend(last);
        B::float_reshape(t, to.into())
    };
    let a = row(a, [1, k * kk]);
    let b = row(b, [k * kk, 1]);
    B::float_matmul(a, b)
}

/// The parts in the order of their tags' origins (untagged ones first): a sum of products
/// does not depend on the order of its parts, and two sums of the same products accumulated in
/// different orders (an LSTM's input and hidden weights meet their gates' output gradients in
/// opposite orders) then share the Gram matrices of [`gram`].
fn canonical<B: Backend>(mut f: super::F<B>) -> super::F<B> {
    let origin = |t: &Option<Tag>| t.as_ref().map(|t| t.origin);
    f.parts
        .sort_by_key(|p| (origin(&p.left_tag), origin(&p.right_tag)));
    f
}

/// A side of the parts of factored products.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Left,
    Right,
}

/// What a Gram matrix of [`gram`] is computed from: the tags of every part of both operands on
/// one side (equal tags, equal factors), and the product's leading dims the rows are broadcast
/// to.
#[derive(PartialEq)]
struct GramKey {
    side: Side,
    lead: Vec<usize>,
    a: Vec<Tag>,
    b: Option<Vec<Tag>>,
}

/// `[lead.., k, k']`: the inner product of every row of `a`'s factors on `side` with every row
/// of `b`'s (of `a`'s own with `b` `None`); one-hot rows compare their indices.
///
/// Where every part of both is tagged on that side, and the matrix is no larger than the rows
/// it comes from, it is computed once while the current vmap level runs ([`memoized`]): the
/// factors of an LSTM's four gates read the same inputs `x_t` and `h_{t-1}`, and a gate's two
/// weights the same output gradients, so the clipping norms of its eight weights need six Gram
/// matrices (and six joins of its time steps), not sixteen.
fn gram<B: Backend>(a: &super::F<B>, b: Option<&super::F<B>>, side: Side) -> FP<B> {
    let tags = |f: &super::F<B>| -> Option<Vec<Tag>> {
        f.parts
            .iter()
            .map(|p| match side {
                Side::Left => p.left_tag.clone(),
                Side::Right => p.right_tag.clone(),
            })
            .collect()
    };
    let lead = a.lead();
    let compute = || {
        let transpose = |t: FP<B>| B::float_swap_dims(t, lead, lead + 1);
        match side {
            Side::Left => {
                let m = a.m();
                let x = joined_left::<B>(a);
                let y = b.map_or_else(|| x.clone(), joined_left::<B>);
                match (x, y) {
                    (Left::OneHot(i), Left::OneHot(j)) => equal::<B>(i, transpose(j)),
                    (x, y) => matmul::<B>(dense_left::<B>(x, m), transpose(dense_left::<B>(y, m))),
                }
            }
            Side::Right => {
                let x = joined_right::<B>(a);
                let y = b.map_or_else(|| x.clone(), joined_right::<B>);
                matmul::<B>(x, transpose(y))
            }
        }
    };
    let key = || {
        // Kept only when no larger than the rows it comes from (held anyway, as the gradient):
        // the memos then hold at most as much again as the factors.
        let width = match side {
            Side::Left => a.m(),
            Side::Right => a.n(),
        };
        if a.k().max(b.map_or(0, |b| b.k())) > width {
            return None;
        }
        Some(GramKey {
            side,
            lead: a.shape[..lead].to_vec(),
            a: tags(a)?,
            b: match b {
                Some(b) => Some(tags(b)?),
                None => None,
            },
        })
    };
    match key() {
        Some(key) => memoized(key, compute),
        None => compute(),
    }
}
