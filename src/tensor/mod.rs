//! The batched tensor primitive of [`Vmap`](crate::Vmap): an inner primitive plus level-tagged
//! batch dimensions.
//!
//! # Physical layout
//!
//! A [`VmapTensor`] is batched at zero or more vmap *levels*. Its inner (physical) tensor holds
//! one dimension per level, **in front of** the logical dimensions and **sorted by level**
//! (outermost vmap first):
//!
//! ```text
//! physical shape = [size(level_0), size(level_1), ..., logical dims...]
//! ```
//!
//! Burn and `burn-autodiff` only ever see the logical shape (through [`TensorMetadata`]); every
//! op of [`Vmap`](crate::Vmap) applies a batching rule that works on the physical tensor. Because
//! the batch dims have a fixed physical place, a rule never needs to know which vmap is the
//! current one: it treats the leading `batch_dims().len()` dims as independent batch indices.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use burn_backend::{DType, Scalar, Shape, TensorMetadata};
use smallvec::SmallVec;

use crate::level::Level;

mod factored;
pub(crate) use factored::{Factors, Left, Part, Tag};

/// One batch dimension: the vmap level it belongs to and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchDim {
    /// The vmap level that created this dimension.
    pub level: Level,
    /// The number of examples along this dimension.
    pub size: usize,
}

/// The batch dimensions of a tensor, sorted by level (physical dims `0..len()`).
///
/// Up to two dims (a `vmap` in a `vmap`) are held inline: building, cloning and dropping a
/// set allocates nothing, so the bookkeeping of a batched op costs no heap traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct BatchDims(SmallVec<[BatchDim; 2]>);

impl BatchDims {
    /// No batch dimension.
    pub const fn none() -> Self {
        BatchDims(SmallVec::new_const())
    }

    /// Builds from dims that are already sorted by strictly increasing level.
    ///
    /// # Panics
    /// If the levels are not strictly increasing.
    pub fn from_sorted(dims: Vec<BatchDim>) -> Self {
        assert!(
            dims.windows(2).all(|w| w[0].level < w[1].level),
            "vmap: batch dims must be sorted by strictly increasing level: {dims:?}"
        );
        BatchDims(SmallVec::from_vec(dims))
    }

    /// Whether there is no batch dimension.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of batch dimensions (= number of leading physical dims they take).
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The dims, outermost level first.
    pub fn as_slice(&self) -> &[BatchDim] {
        &self.0
    }

    /// The sizes, outermost level first.
    pub fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|d| d.size)
    }

    /// Product of the sizes.
    pub fn num_examples(&self) -> usize {
        self.sizes().product()
    }

    /// Physical position of `level`, if batched at it.
    pub fn position(&self, level: Level) -> Option<usize> {
        self.0.iter().position(|d| d.level == level)
    }

    /// Size at `level`, if batched at it.
    pub fn size_at(&self, level: Level) -> Option<usize> {
        self.0.iter().find(|d| d.level == level).map(|d| d.size)
    }

    /// Position at which `level` would be inserted to keep the order.
    pub fn insertion_point(&self, level: Level) -> usize {
        self.0.iter().take_while(|d| d.level < level).count()
    }

    /// Inserts a dim (keeping the order) and returns its physical position.
    ///
    /// # Panics
    /// If already batched at that level.
    pub fn insert(&mut self, dim: BatchDim) -> usize {
        assert!(
            self.position(dim.level).is_none(),
            "vmap: tensor already batched at level {}",
            dim.level.id()
        );
        let pos = self.insertion_point(dim.level);
        self.0.insert(pos, dim);
        pos
    }

    /// Removes `level` and returns its former position and size.
    pub fn remove(&mut self, level: Level) -> Option<(usize, usize)> {
        let pos = self.position(level)?;
        let d = self.0.remove(pos);
        Some((pos, d.size))
    }

    /// The sorted union of several sets of batch dims.
    ///
    /// # Panics
    /// If two operands are batched at the same level with different sizes (an internal
    /// invariant: one vmap level has one size).
    pub fn union<'a>(sets: impl IntoIterator<Item = &'a BatchDims>) -> BatchDims {
        let mut out: SmallVec<[BatchDim; 2]> = SmallVec::new();
        for set in sets {
            for d in &set.0 {
                match out.iter().find(|o| o.level == d.level) {
                    Some(o) => assert_eq!(
                        o.size,
                        d.size,
                        "vmap: operands batched at level {} with different sizes",
                        d.level.id()
                    ),
                    None => out.push(*d),
                }
            }
        }
        out.sort_by_key(|d| d.level);
        BatchDims(out)
    }
}

/// The tensor primitive of [`Vmap<B>`](crate::Vmap): an inner backend primitive whose leading
/// dims are the batch dims listed in [`batch_dims`](Self::batch_dims).
///
/// [`TensorMetadata::shape`] reports the **logical** shape (without batch dims), which is what
/// Burn's default op implementations and `burn-autodiff` rely on.
///
/// # Pending reshapes
///
/// A reshape of a batched tensor is recorded, not run: the tensor keeps its data and the
/// physical shape it should have (with the backend's reshape function). Reading the physical
/// tensor ([`into_parts`](Self::into_parts), and every batching rule) runs the reshape once;
/// a second reshape replaces the first, and a reshape back to the data's own shape cancels it.
/// Rules that fold every leading dim into rows (`linear` and its backward ops) read the data
/// as it is. This removes the copies of Burn's `linear` on a single example (it inserts and
/// removes a leading size-1 dim), which some backends make on every reshape (see
/// `crate::compat`).
///
/// # Factored products
///
/// The per-example weight gradient of a layer that multiplies its input by a weight matrix
/// (`Linear` on a vector or a sequence, a convolution, an embedding) is a matrix product over
/// the example's rows, `Xᵢᵀ Gᵢ` (an outer product `xᵢ ⊗ gᵢ` for one row). It is held as its
/// factors until an op needs it dense: the ops that DP-SGD and gradient statistics apply to
/// per-example gradients have exact factored forms (per-example scalings, `sum`, the squared
/// norm `sum(g * g)` from Gram matrices, and the sum over examples, which becomes one matrix
/// product over every example's rows), so a clipped sum never writes the
/// `batch x d_in x d_out` tensor. Any other read multiplies the factors out once (memoized
/// across clones); see `rules::factored`.
#[derive(Clone, Debug)]
pub struct VmapTensor<P> {
    data: P,
    pub(crate) bdims: BatchDims,
    lazy: Lazy<P>,
    /// Logical rank 0, held with one trailing unit dim after the batch dims.
    scalar: bool,
    /// Which value this is: shared by clones, fresh for every tensor an op makes.
    origin: Origin,
}

/// The identity of a [`VmapTensor`]'s value: clones share it, a reshape keeps it, and every
/// other tensor a rule makes gets a fresh one (never reused in the process). Two tensors with
/// the same origin hold the same elements in the same order, at the same batch dims (perhaps in
/// another shape: compare shapes too), so work derived from one value can be shared: the Gram
/// matrices of a layer input that several layers read (an LSTM's four gates), a layer's output
/// gradient's squared norms for its weight and its bias (see `rules::factored`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Origin(u64);

static NEXT_ORIGIN: AtomicU64 = AtomicU64::new(0);

impl Origin {
    fn fresh() -> Self {
        Origin(NEXT_ORIGIN.fetch_add(1, Ordering::Relaxed))
    }
}

/// What `data` still needs to become the physical tensor.
#[derive(Clone, Debug)]
enum Lazy<P> {
    /// `data` is the physical tensor.
    Ready,
    /// A reshape not run yet: the physical shape and the backend function that makes it.
    Reshape {
        shape: Shape,
        reshape: fn(P, Shape) -> P,
    },
    /// A factored product; `data` is one of its factors (for device and dtype queries).
    Factored {
        factors: Box<Factors<P>>,
        multiply: fn(Factors<P>) -> P,
        memo: Memo<P>,
    },
    /// The elementwise product of two factored tensors of the same shape (a squared norm's
    /// `g * g`), or of a dense tensor with itself (a bias's `g * g`), each operand multiplied
    /// out (through its own memo) only if the product is read: its sum is computed from the
    /// operands (Gram matrices; one inner product per example).
    Hadamard {
        operands: Box<[VmapTensor<P>; 2]>,
        multiply: fn([VmapTensor<P>; 2]) -> P,
        memo: Memo<P>,
    },
    /// A constant not written yet (`zeros`, `ones`, `full`): `value` at the physical shape
    /// `shape`, made by `fill` (with the device and dtype of `data`, a one-element tensor that is
    /// never written) when an op reads it, once for all clones. A scatter into it (Burn's
    /// backward of `gather` scatters into zeros) gets it made at the batch shape at once, not
    /// broadcast and copied ([`into_filled`](VmapTensor::into_filled)); a constant nothing reads
    /// costs nothing.
    Fill {
        constant: Box<Constant<P>>,
        memo: Memo<P>,
    },
}

/// A constant not written yet (see `Lazy::Fill`; boxed there to keep tensors small).
#[derive(Clone, Debug)]
struct Constant<P> {
    shape: Shape,
    value: Scalar,
    fill: FillFn<P>,
}

/// Makes `value` at `shape` on the device and with the dtype of the tensor given.
pub(crate) type FillFn<P> = fn(Shape, Scalar, &P) -> P;

/// A lazily computed physical tensor, shared by clones.
type Memo<P> = Arc<OnceLock<P>>;

/// `compute(value)`, memoized in `memo` when a clone may read it too.
fn memoized<T: Clone, P: Clone>(memo: Memo<P>, value: T, compute: fn(T) -> P) -> P {
    match Arc::try_unwrap(memo) {
        // No clone left: nothing to share the product with.
        Ok(cell) => cell.into_inner().unwrap_or_else(|| compute(value)),
        Err(shared) => shared.get_or_init(|| compute(value.clone())).clone(),
    }
}

impl<P: TensorMetadata> VmapTensor<P> {
    /// Wraps an unbatched inner primitive (zero cost).
    #[inline]
    pub fn unbatched(inner: P) -> Self {
        Self::new(inner, BatchDims::none())
    }

    /// Wraps an inner primitive whose leading `bdims.len()` dims are the given batch dims and
    /// whose other dims (at least one) are the logical dims. A logical rank-0 tensor is held
    /// as `[batch sizes.., 1]`: wrap it with [`from_physical_scalar`](Self::from_physical_scalar).
    ///
    /// # Panics
    /// If the physical rank is not above `bdims.len()` or the leading sizes do not match
    /// `bdims`.
    pub fn from_physical(inner: P, bdims: BatchDims) -> Self {
        let shape = inner.shape();
        assert!(
            shape.num_dims() > bdims.len() && bdims.sizes().zip(shape.iter()).all(|(a, b)| a == *b),
            "vmap: physical shape {shape:?} is not the batch sizes {:?} followed by at least \
             one logical dim (a logical rank-0 tensor is held as [batch sizes.., 1]: see \
             VmapTensor::from_physical_scalar)",
            bdims.sizes().collect::<Vec<_>>()
        );
        Self::new(inner, bdims)
    }

    /// Wraps an inner primitive of shape `[batch sizes.., 1]` as a tensor of logical rank 0
    /// batched at `bdims` (`[1]` when `bdims` is empty).
    ///
    /// ```
    /// use burn_backend::{TensorData, TensorMetadata};
    /// use burn_backend::ops::FloatTensorOps;
    /// use burn_flex::Flex;
    /// use burn_vmap::tensor::{BatchDims, VmapTensor};
    /// let one = Flex::float_from_data(TensorData::from([2.0f32]), &Default::default());
    /// let t = VmapTensor::from_physical_scalar(one, BatchDims::none());
    /// assert_eq!(t.shape().num_dims(), 0);
    /// ```
    ///
    /// # Panics
    /// If the physical shape is not `[batch sizes.., 1]`.
    pub fn from_physical_scalar(inner: P, bdims: BatchDims) -> Self {
        let shape = inner.shape();
        assert!(
            shape.num_dims() == bdims.len() + 1
                && shape[bdims.len()] == 1
                && bdims.sizes().zip(shape.iter()).all(|(a, b)| a == *b),
            "vmap: a logical rank-0 tensor batched at {:?} is held as [batch sizes.., 1], not \
             {shape:?}",
            bdims.sizes().collect::<Vec<_>>()
        );
        Self::new(inner, bdims).with_scalar(true)
    }

    /// A batched tensor whose physical shape is `shape`, holding `data` (same elements in
    /// row-major order, another shape) until the physical tensor is read.
    pub(crate) fn reshaped(
        data: P,
        bdims: BatchDims,
        shape: Shape,
        reshape: fn(P, Shape) -> P,
    ) -> Self {
        debug_assert_eq!(data.shape().num_elements(), shape.num_elements());
        if data.shape() == shape {
            return Self::new(data, bdims);
        }
        Self {
            data,
            bdims,
            lazy: Lazy::Reshape { shape, reshape },
            scalar: false,
            origin: Origin::fresh(),
        }
    }

    /// A factored product (see [`Factors`]) batched at `bdims`; `multiply` computes its
    /// physical tensor when an op reads it.
    pub(crate) fn factored(
        factors: Factors<P>,
        bdims: BatchDims,
        multiply: fn(Factors<P>) -> P,
    ) -> Self
    where
        P: Clone,
    {
        let data = factors.parts[0].right.clone();
        Self {
            data,
            bdims,
            lazy: Lazy::Factored {
                factors: Box::new(factors),
                multiply,
                memo: Arc::default(),
            },
            scalar: false,
            origin: Origin::fresh(),
        }
    }

    /// The elementwise product of two factored tensors of the same physical shape and batch
    /// dims, or of a dense tensor with itself, held unmultiplied; `multiply` computes it when an
    /// op reads it.
    pub(crate) fn hadamard(operands: [Self; 2], multiply: fn([Self; 2]) -> P) -> Self
    where
        P: Clone,
    {
        let data = operands[0].data.clone();
        let bdims = operands[0].bdims.clone();
        Self {
            data,
            bdims,
            lazy: Lazy::Hadamard {
                operands: Box::new(operands),
                multiply,
                memo: Arc::default(),
            },
            scalar: false,
            origin: Origin::fresh(),
        }
    }

    /// An unbatched constant, `value` at the physical shape `shape`, made by `fill` when an op
    /// reads it; `like` is a one-element tensor of its device and dtype, never read or written
    /// (`Lazy::Fill`).
    pub(crate) fn fill(like: P, shape: Shape, value: Scalar, fill: FillFn<P>) -> Self {
        Self {
            data: like,
            bdims: BatchDims::none(),
            lazy: Lazy::Fill {
                constant: Box::new(Constant { shape, value, fill }),
                memo: Arc::default(),
            },
            scalar: false,
            origin: Origin::fresh(),
        }
    }

    /// An unbatched constant's physical tensor made at the batch sizes of `bdims` in front of
    /// its own shape (what aligning it to `bdims` and expanding gives, written once instead of
    /// broadcast and copied); any other tensor back.
    pub(crate) fn into_filled(self, bdims: &BatchDims) -> Result<P, Self> {
        match self.lazy {
            Lazy::Fill { constant, .. } if self.bdims.is_empty() => {
                let full = crate::physical::with_batch_sizes(bdims, &constant.shape);
                Ok((constant.fill)(full, constant.value, &self.data))
            }
            lazy => Err(Self { lazy, ..self }),
        }
    }

    /// The value of a constant not written yet (`Lazy::Fill`; unbatched).
    pub(crate) fn constant(&self) -> Option<Scalar> {
        match &self.lazy {
            Lazy::Fill { constant, .. } => Some(constant.value),
            _ => None,
        }
    }

    /// The constant `value` at the physical shape `shape`, on the device and with the dtype of
    /// the constant `self`; `self` back if it is not a constant.
    pub(crate) fn refilled(self, shape: Shape, value: Scalar) -> Result<Self, Self> {
        match self.lazy {
            Lazy::Fill { constant, .. } => Ok(Self::fill(self.data, shape, value, constant.fill)),
            lazy => Err(Self { lazy, ..self }),
        }
    }

    /// Shape of the physical tensor, batch dims included.
    pub fn physical_shape(&self) -> Shape {
        match &self.lazy {
            Lazy::Ready => self.data.shape(),
            Lazy::Reshape { shape, .. } => shape.clone(),
            Lazy::Fill { constant, .. } => constant.shape.clone(),
            Lazy::Factored { factors, .. } => factors.shape.clone(),
            Lazy::Hadamard { operands, .. } => operands[0].physical_shape(),
        }
    }

    /// The data as stored and its physical shape: the data has that shape or, when a reshape is
    /// pending, the same elements in row-major order in another shape. For rules that only
    /// need the row-major order (folding leading dims into rows). A factored product is
    /// multiplied out.
    #[inline]
    pub(crate) fn into_stored(self) -> (P, Shape, BatchDims)
    where
        P: Clone,
    {
        let shape = self.physical_shape();
        if !matches!(self.lazy, Lazy::Ready | Lazy::Reshape { .. }) {
            let (inner, bdims) = self.into_parts();
            return (inner, shape, bdims);
        }
        (self.data, shape, self.bdims)
    }
}

impl<P> VmapTensor<P> {
    /// Wraps an inner primitive whose leading `bdims.len()` dims are the batch dims, without
    /// checking (rules keep the invariant; see [`from_physical`](Self::from_physical)).
    #[inline]
    pub(crate) fn new(inner: P, bdims: BatchDims) -> Self {
        Self {
            data: inner,
            bdims,
            lazy: Lazy::Ready,
            scalar: false,
            origin: Origin::fresh(),
        }
    }

    /// Whether this is a factored product (a per-example weight gradient of a dense layer,
    /// a convolution or an embedding, the elementwise product of two, or a dense tensor's
    /// square held for its sum) whose physical value
    /// has not been needed yet. Such a tensor is read like any other; this says whether the ops
    /// applied so far kept it factored (see "Factored products" above).
    ///
    /// ```
    /// use burn_backend::ops::{FloatTensorOps, ModuleOps};
    /// use burn_backend::TensorData;
    /// use burn_flex::Flex;
    /// use burn_vmap::level::Level;
    /// use burn_vmap::{BatchOps, Vmap};
    /// type V = Vmap<Flex>;
    /// let device = Default::default();
    /// let level = Level::fresh();
    /// let rows = |n: usize| TensorData::new(vec![0.5f32; 4 * n], [4, 1, n]);
    /// // Four examples of one row each: the input `x` and the output gradient `g` of a layer.
    /// let x = V::float_batch(V::float_from_data(rows(6), &device), 0, level);
    /// let g = V::float_batch(V::float_from_data(rows(5), &device), 0, level);
    /// let w = V::linear_weight_backward(x, g); // per example `xᵀ g`, [6, 5]
    /// assert!(w.is_factored());
    /// let squared_norms = V::float_sum(V::float_mul(w.clone(), w)); // from the factors
    /// assert!(!squared_norms.is_factored());
    /// ```
    pub fn is_factored(&self) -> bool {
        matches!(self.lazy, Lazy::Factored { .. } | Lazy::Hadamard { .. })
    }

    /// The factors and batch dims of a factored product, or the tensor back.
    pub(crate) fn into_factors(self) -> Result<(Factors<P>, BatchDims), Self> {
        match self.lazy {
            Lazy::Factored { factors, .. } => Ok((*factors, self.bdims)),
            lazy => Err(Self { lazy, ..self }),
        }
    }

    /// Whether `self` and `other` are clones of one factored product (they share its memo):
    /// the two operands of a squared norm's `g * g`.
    pub(crate) fn same_product(&self, other: &Self) -> bool {
        match (&self.lazy, &other.lazy) {
            (Lazy::Factored { memo: a, .. }, Lazy::Factored { memo: b, .. }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether this is a factored product (not the elementwise product of two).
    pub(crate) fn has_factors(&self) -> bool {
        matches!(self.lazy, Lazy::Factored { .. })
    }

    /// The factors of a factored product.
    pub(crate) fn factors_ref(&self) -> Option<&Factors<P>> {
        match &self.lazy {
            Lazy::Factored { factors, .. } => Some(factors),
            _ => None,
        }
    }

    /// The two operands of an unmultiplied elementwise product of factored tensors.
    pub(crate) fn hadamard_ref(&self) -> Option<&[Self; 2]> {
        match &self.lazy {
            Lazy::Hadamard { operands, .. } => Some(operands),
            _ => None,
        }
    }

    /// The two operands of an unmultiplied elementwise product of factored tensors, or the
    /// tensor back.
    pub(crate) fn into_hadamard(self) -> Result<[Self; 2], Self> {
        match self.lazy {
            Lazy::Hadamard { operands, .. } => Ok(*operands),
            lazy => Err(Self { lazy, ..self }),
        }
    }

    /// Marks the tensor as logical rank 0 (or not): its physical tensor must then be
    /// `[batch sizes.., 1]`.
    #[inline]
    pub(crate) fn with_scalar(mut self, scalar: bool) -> Self {
        self.scalar = scalar;
        self
    }

    /// The same tensor, as holding the value of `origin` (a reshape: the same elements in
    /// another shape; see [`Origin`]).
    #[inline]
    pub(crate) fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }

    /// The identity of the value (see [`Origin`]).
    #[inline]
    pub(crate) fn origin(&self) -> Origin {
        self.origin
    }

    /// Whether the tensor has logical rank 0 (held as `[batch sizes.., 1]`).
    #[inline]
    pub(crate) fn is_scalar(&self) -> bool {
        self.scalar
    }

    /// The stored data, for device and dtype queries only (its shape may not be the physical
    /// shape while a reshape is pending).
    #[inline]
    pub(crate) fn stored(&self) -> &P {
        &self.data
    }

    /// The batch dims (outermost level first).
    #[inline]
    pub fn batch_dims(&self) -> &BatchDims {
        &self.bdims
    }

    /// Whether batched at any level.
    #[inline]
    pub fn is_batched(&self) -> bool {
        !self.bdims.is_empty()
    }
}

impl<P: Clone> VmapTensor<P> {
    /// The physical tensor (batch dims first), running a pending reshape.
    #[inline]
    pub(crate) fn inner(self) -> P {
        self.into_parts().0
    }

    /// Applies `f` to the physical tensor (running a pending reshape), keeping the batch dims
    /// and the logical rank (for ops that keep the shape, or act on logical dims only).
    #[inline]
    pub(crate) fn map<Q>(self, f: impl FnOnce(P) -> Q) -> VmapTensor<Q> {
        let scalar = self.scalar;
        let (inner, bdims) = self.into_parts();
        VmapTensor::new(f(inner), bdims).with_scalar(scalar)
    }

    /// The physical tensor (batch dims first; a logical rank-0 tensor as `[batch sizes.., 1]`)
    /// and its batch dims. Runs a pending reshape, or multiplies a factored product out (once
    /// for all clones).
    #[inline]
    pub fn into_parts(self) -> (P, BatchDims) {
        let inner = match self.lazy {
            Lazy::Ready => self.data,
            Lazy::Reshape { shape, reshape } => reshape(self.data, shape),
            Lazy::Factored {
                factors,
                multiply,
                memo,
            } => memoized(memo, *factors, multiply),
            Lazy::Hadamard {
                operands,
                multiply,
                memo,
            } => memoized(memo, *operands, multiply),
            Lazy::Fill { constant, memo } => memoized(memo, (*constant, self.data), |(c, like)| {
                (c.fill)(c.shape, c.value, &like)
            }),
        };
        (inner, self.bdims)
    }
}

impl<P: TensorMetadata> TensorMetadata for VmapTensor<P> {
    type Device = P::Device;

    fn dtype(&self) -> DType {
        self.data.dtype()
    }

    fn shape(&self) -> Shape {
        if self.scalar {
            return Shape::from(Vec::<usize>::new());
        }
        if self.bdims.is_empty() && matches!(self.lazy, Lazy::Ready) {
            return self.data.shape();
        }
        self.physical_shape()
            .iter()
            .skip(self.bdims.len())
            .copied()
            .collect()
    }

    fn rank(&self) -> usize {
        if self.scalar {
            return 0;
        }
        match &self.lazy {
            Lazy::Ready => self.data.rank() - self.bdims.len(),
            Lazy::Reshape { shape, .. } => shape.num_dims() - self.bdims.len(),
            Lazy::Fill { constant, .. } => constant.shape.num_dims() - self.bdims.len(),
            Lazy::Factored { factors, .. } => factors.shape.num_dims() - self.bdims.len(),
            Lazy::Hadamard { operands, .. } => operands[0].rank(),
        }
    }

    fn device(&self) -> Self::Device {
        self.data.device()
    }

    /// Only a tensor held as its physical tensor may be written in place: a lazy form's stored
    /// data is a factor or the source of a pending reshape, shared with what it stands for.
    fn can_mut(&self) -> bool {
        matches!(self.lazy, Lazy::Ready) && self.data.can_mut()
    }
}
