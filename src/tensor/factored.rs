//! The factored form of per-example weight gradients (the data; the rules that keep it factored
//! are in `rules::factored`).
//!
//! Under `vmap`, the weight gradient of a layer that multiplies its input by a weight matrix is,
//! for one example, a matrix product over that example's rows:
//!
//! | layer | rows `k` | left `[k, m]` | right `[k, n]` | product `leftᵀ right` |
//! |---|---|---|---|---|
//! | `Linear` on one vector | 1 | input | output gradient | the outer product `x ⊗ g` |
//! | `Linear` on a sequence (`T` rows) | `T` | inputs `X` | output gradients `G` | `Xᵀ G` |
//! | `Conv1d` / `Conv2d` | output positions | output gradients | unfolded input patches | `[c_out, c_in·kernel]` |
//! | `Embedding` | tokens | one-hot tokens (held as indices) | output gradients | rows scattered by token |
//!
//! A parameter used several times (an LSTM's gates, once per time step) sums such products:
//! [`Factors`] holds that sum as a list of [`Part`]s. The product is multiplied out only when an
//! op needs it dense.

use burn_backend::{Shape, TensorMetadata};

use super::{BatchDims, Origin};

/// `Σ_parts leftᵀ right` per leading index: the physical value of a factored tensor.
///
/// The product's physical shape is `shape`: its leading dims (the batch dims first, then any
/// leading logical dims), then `m`, then `cols` column dims whose product is `n` (one for a dense
/// layer's `[d_in, d_out]`, three for a 2-d convolution's `[c_out, c_in, kh, kw]`). Every part's
/// factors have the same leading dims as `shape`, each of them either that size or 1
/// (broadcast: a factor shared by every example).
#[derive(Clone, Debug)]
pub(crate) struct Factors<P> {
    /// The summands, at least one.
    pub(crate) parts: Vec<Part<P>>,
    /// The product's physical shape.
    pub(crate) shape: Shape,
    /// How many dims at the end of `shape` are column dims.
    pub(crate) cols: usize,
}

/// One summand `leftᵀ right`: `left: [lead.., k, m]`, `right: [lead.., k, n]`, `k` rows.
#[derive(Clone, Debug)]
pub(crate) struct Part<P> {
    pub(crate) left: Left<P>,
    pub(crate) right: P,
    /// Where `left` came from, while it is as a layer rule laid it out (see [`Tag`]).
    pub(crate) left_tag: Option<Tag>,
    /// Where `right` came from, likewise.
    pub(crate) right_tag: Option<Tag>,
}

/// The value a factor holds, named by where it came from: the tensor a layer rule read (its
/// [`Origin`]) laid out as rows at batch dims `bdims`, of physical shape `shape`. Equal tags
/// mean equal factors: layers that read one input (an LSTM's four gates read one `x_t` and one
/// `h_{t-1}`, a gate's two weights one output gradient) share the Gram matrices of their rows.
/// A rule that changes a factor drops its tag ([`Part::new`] makes untagged parts).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tag {
    pub(crate) origin: Origin,
    pub(crate) bdims: BatchDims,
    pub(crate) shape: Shape,
}

impl<P> Part<P> {
    /// An untagged part.
    pub(crate) fn new(left: Left<P>, right: P) -> Self {
        Part {
            left,
            right,
            left_tag: None,
            right_tag: None,
        }
    }
}

/// The left factor of a [`Part`].
#[derive(Clone, Debug)]
pub(crate) enum Left<P> {
    /// `[lead.., k, m]`.
    Dense(P),
    /// One-hot rows held as their indices: `[lead.., k, 1]`, a float tensor of row indices in
    /// `0..m` (exact for `m < 2^24`), each standing for the row `e_index` of width `m`.
    OneHot(P),
}

impl<P> Factors<P> {
    /// One product `leftᵀ right` of the given physical shape.
    pub(crate) fn single(part: Part<P>, shape: Shape, cols: usize) -> Self {
        Factors {
            parts: vec![part],
            shape,
            cols,
        }
    }
}

impl<P> Left<P> {
    /// `t` as one-hot rows (its indices) or dense rows.
    pub(crate) fn new(one_hot: bool, t: P) -> Self {
        if one_hot {
            Left::OneHot(t)
        } else {
            Left::Dense(t)
        }
    }

    /// The stored tensor (dense rows or indices), taken out.
    pub(crate) fn into_tensor(self) -> P {
        match self {
            Left::Dense(t) | Left::OneHot(t) => t,
        }
    }

    /// The stored tensor (dense rows or indices).
    pub(crate) fn tensor(&self) -> &P {
        match self {
            Left::Dense(t) | Left::OneHot(t) => t,
        }
    }

    /// Whether the rows are one-hot.
    pub(crate) fn is_one_hot(&self) -> bool {
        matches!(self, Left::OneHot(_))
    }
}

impl<P: TensorMetadata> Factors<P> {
    /// Number of leading dims (batch dims included).
    pub(crate) fn lead(&self) -> usize {
        self.shape.num_dims() - 1 - self.cols
    }

    /// Width of the left factors (the product's rows).
    pub(crate) fn m(&self) -> usize {
        self.shape[self.lead()]
    }

    /// Width of the right factors (the product of the column dims).
    pub(crate) fn n(&self) -> usize {
        self.shape.iter().skip(self.lead() + 1).product()
    }

    /// Total rows over the parts.
    pub(crate) fn k(&self) -> usize {
        let lead = self.lead();
        self.parts.iter().map(|p| p.right.shape()[lead]).sum()
    }

    /// Whether holding the factors costs less than the product, and computing the product's
    /// squared norm from Gram matrices (`k² (m + n)` per example) less than from the product
    /// (`k m n`): `k (m' + n) < m n`, with `m' = 1` for one-hot rows (their Gram matrix is a
    /// comparison of indices). The rule of "mixed ghost clipping" (Bu, Mao & Xu 2022).
    pub(crate) fn worth_keeping(&self) -> bool {
        let (m, n) = (self.m(), self.n());
        let left_width = |p: &Part<P>| if p.left.is_one_hot() { 1 } else { m };
        let lead = self.lead();
        let held: usize = self
            .parts
            .iter()
            .map(|p| p.right.shape()[lead] * (left_width(p) + n))
            .sum();
        held < m * n
    }
}
