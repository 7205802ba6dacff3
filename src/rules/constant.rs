//! Float constants folded without kernels: what Burn's backward makes of its seed and of its
//! broadcasts.
//!
//! `Vmap`'s float `zeros`, `ones` and `full` are held unwritten (`VmapTensor`'s `Lazy::Fill`)
//! until an op reads them. Burn's backward builds short chains of constants: the seed `ones`, a
//! `neg`'s backward of it, a mean's backward `ones * (1 / n)`, a sum's backward `ones * grad`
//! (the gradient broadcast to the summed shape). Each link is a kernel on a tiny unbatched
//! tensor, or a full-size product by a constant, counted per step by
//! [`transform::operations`](crate::transform::operations). Here:
//!
//! - `neg`, `mul_scalar`, `expand` and `reshape` of a constant, and the product of two, are
//!   constants (no kernel);
//! - the product of a tensor `x` by a constant `c` is `x` broadcast to the product's shape (a
//!   view) when `c` is 1, else one `mul_scalar` of that view by `c` (one kernel instead of
//!   writing the constant and multiplying); through a broadcast view only on the backends whose
//!   kernels read one at full speed (`compat::scales_broadcast_views`).
//!
//! Folded values are exactly what the kernels give: they are computed in the tensor's dtype
//! (`f32` or `f64`; a constant of another dtype is not folded), `x * 1` is `x` in IEEE
//! arithmetic (NaN and -0 included) and `x * c` stays a product, so NaN and infinities propagate
//! as in the unfolded ops.
//!
//! A fold that does not apply gives its operand back, moved (not boxed): hence the
//! `result_large_err` allowance, as in `rules::factored`.
#![allow(clippy::result_large_err)]

use burn_backend::{DType, Scalar, Shape, TensorMetadata};

use crate::physical::with_batch_sizes;
use crate::tensor::{BatchDims, VmapTensor};

/// What a product with a constant operand folds to.
pub(crate) enum Product<P> {
    /// A constant (both operands were).
    Constant(VmapTensor<P>),
    /// `x`, expanded to the logical `shape` where it is smaller, times `by` (the identity when
    /// `by` is 1: see `float_mul_scalar`).
    Scaled {
        x: VmapTensor<P>,
        shape: Shape,
        by: Scalar,
    },
    /// Neither operand is a foldable constant: the operands back.
    Neither(VmapTensor<P>, VmapTensor<P>),
}

/// `-t` when `t` is a foldable constant, else `t` back.
pub(crate) fn neg<P: TensorMetadata + Clone>(
    t: VmapTensor<P>,
) -> Result<VmapTensor<P>, VmapTensor<P>> {
    map(t, |v, _| Some(-v))
}

/// `t * by` when `t` is a foldable constant, else `t` back.
pub(crate) fn mul_scalar<P: TensorMetadata + Clone>(
    t: VmapTensor<P>,
    by: Scalar,
) -> Result<VmapTensor<P>, VmapTensor<P>> {
    map(t, |v, dtype| product(dtype, v, float(by)?))
}

/// `t` at the logical `shape` (an `expand` or a `reshape` of it: the same value) when `t` is a
/// foldable constant, else `t` back.
pub(crate) fn at_shape<P: TensorMetadata + Clone>(
    t: VmapTensor<P>,
    shape: &Shape,
) -> Result<VmapTensor<P>, VmapTensor<P>> {
    match value(&t) {
        Some(v) => constant_like(t, shape, v),
        None => Err(t),
    }
}

/// `lhs * rhs` folded where either is a foldable constant of the other's dtype and rank; a
/// tensor times a constant of more elements (the product a broadcast of the tensor) only where
/// `broadcast_views()` says so (see `compat::scales_broadcast_views`; asked only then).
pub(crate) fn mul<P: TensorMetadata + Clone>(
    lhs: VmapTensor<P>,
    rhs: VmapTensor<P>,
    broadcast_views: impl FnOnce() -> bool,
) -> Product<P> {
    let (lc, rc) = (value(&lhs), value(&rhs));
    if (lc.is_none() && rc.is_none()) || lhs.dtype() != rhs.dtype() {
        return Product::Neither(lhs, rhs);
    }
    let Some(shape) = broadcast(&lhs.shape(), &rhs.shape()) else {
        return Product::Neither(lhs, rhs);
    };
    let x_shape = match (lc, rc) {
        (Some(_), None) => Some(rhs.shape()),
        (None, Some(_)) => Some(lhs.shape()),
        _ => None,
    };
    if x_shape.is_some_and(|x| x != shape) && !broadcast_views() {
        return Product::Neither(lhs, rhs);
    }
    match (lc, rc) {
        (Some(a), Some(b)) => match product(lhs.dtype(), a, b) {
            Some(v) => match constant_like(lhs, &shape, v) {
                Ok(t) => Product::Constant(t),
                Err(lhs) => Product::Neither(lhs, rhs),
            },
            None => Product::Neither(lhs, rhs),
        },
        (Some(c), None) => Product::Scaled {
            x: rhs,
            shape,
            by: Scalar::Float(c),
        },
        (None, Some(c)) => Product::Scaled {
            x: lhs,
            shape,
            by: Scalar::Float(c),
        },
        (None, None) => Product::Neither(lhs, rhs),
    }
}

/// The value of `t` if it is a constant folded here: a float of dtype `f32` or `f64`.
fn value<P: TensorMetadata + Clone>(t: &VmapTensor<P>) -> Option<f64> {
    let c = t.constant()?;
    match t.dtype() {
        DType::F32 | DType::F64 => float(c),
        _ => None,
    }
}

/// A float scalar's value (the constants Burn's backward makes are float scalars).
fn float(s: Scalar) -> Option<f64> {
    match s {
        Scalar::Float(v) => Some(v),
        _ => None,
    }
}

/// `a * b` as a kernel of `dtype` computes it.
fn product(dtype: DType, a: f64, b: f64) -> Option<f64> {
    match dtype {
        DType::F32 => Some(f64::from(a as f32 * b as f32)),
        DType::F64 => Some(a * b),
        _ => None,
    }
}

/// The constant `t` with its value mapped by `f` (given the dtype).
fn map<P: TensorMetadata + Clone>(
    t: VmapTensor<P>,
    f: impl FnOnce(f64, DType) -> Option<f64>,
) -> Result<VmapTensor<P>, VmapTensor<P>> {
    let Some(v) = value(&t).and_then(|v| f(v, t.dtype())) else {
        return Err(t);
    };
    let shape = t.shape();
    constant_like(t, &shape, v)
}

/// The constant `v` at the logical `shape`, with the device and dtype of the constant `like`.
fn constant_like<P: TensorMetadata + Clone>(
    like: VmapTensor<P>,
    shape: &Shape,
    v: f64,
) -> Result<VmapTensor<P>, VmapTensor<P>> {
    let scalar = shape.num_dims() == 0;
    let physical = with_batch_sizes(&BatchDims::none(), shape);
    like.refilled(physical, Scalar::Float(v))
        .map(|t| t.with_scalar(scalar))
}

/// The shape two operands of one rank broadcast to (sizes equal, or one of them 1).
fn broadcast(a: &Shape, b: &Shape) -> Option<Shape> {
    if a.num_dims() != b.num_dims() {
        return None;
    }
    a.iter()
        .zip(b.iter())
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .map(Shape::from)
}
