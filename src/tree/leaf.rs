//! [`Leaf`]: one tensor of a flattened tree, of any rank and kind, and the shape moves the
//! transforms make on leaves (slices, concatenation, stacking, zeros), all on the user's device.

use burn::tensor::kind::{Kind, TensorKind};
use burn::tensor::{Device, Tensor};
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::{DType, Shape, Slice, TensorData, TensorMetadata};
use burn_dispatch::{Dispatch, DispatchTensor};

use super::Key;
use crate::VmapError;

/// One leaf of a flattened tree: a Burn tensor of any rank and kind (float, int or bool), on
/// the user's device.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::tree::Leaf;
/// let t = Tensor::<2>::zeros([2, 3], &Device::default());
/// let leaf = Leaf::new(t);
/// assert_eq!((leaf.kind_name(), leaf.shape().to_vec()), ("float", vec![2, 3]));
/// let back: Tensor<2> = leaf.into_tensor().unwrap();
/// assert_eq!(back.dims(), [2, 3]);
/// ```
#[derive(Debug, Clone)]
pub struct Leaf(pub(crate) DispatchTensor);

/// Calls the backend method of the leaf's kind.
macro_rules! by_kind {
    ($leaf:expr, $float:ident, $int:ident, $bool:ident ($($arg:expr),*)) => {{
        let t = $leaf.0;
        Leaf(match kind_of(t.dtype()) {
            Kind::Float => Dispatch::$float(t, $($arg),*),
            Kind::Int => Dispatch::$int(t, $($arg),*),
            Kind::Bool => Dispatch::$bool(t, $($arg),*),
        })
    }};
}

/// `"float"`, `"int"` or `"bool"`.
pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Float => "float",
        Kind::Int => "int",
        Kind::Bool => "bool",
    }
}

fn kind_of(dtype: DType) -> Kind {
    if dtype.is_float() || matches!(dtype, DType::QFloat(_)) {
        Kind::Float
    } else if dtype.is_bool() {
        Kind::Bool
    } else {
        Kind::Int
    }
}

impl Leaf {
    /// The leaf holding `tensor`.
    pub fn new<const D: usize, K: TensorKind + burn::tensor::kind::Basic>(
        tensor: Tensor<D, K>,
    ) -> Self {
        Leaf(tensor.into_dispatch())
    }

    /// The tensor, as a `Tensor<D, K>`.
    ///
    /// # Errors
    /// [`VmapError::LeafMismatch`] (at path `leaf`) when the leaf's kind or rank is not `K`'s
    /// and `D`.
    pub fn into_tensor<const D: usize, K: TensorKind + burn::tensor::kind::Basic>(
        self,
    ) -> Result<Tensor<D, K>, VmapError> {
        self.into_tensor_at("leaf")
    }

    /// As [`into_tensor`](Self::into_tensor), naming the leaf `path` in errors.
    pub(crate) fn into_tensor_at<const D: usize, K: TensorKind + burn::tensor::kind::Basic>(
        self,
        path: &str,
    ) -> Result<Tensor<D, K>, VmapError> {
        let shape = self.shape();
        if self.kind() != K::KIND || shape.num_dims() != D {
            return Err(VmapError::LeafMismatch {
                path: path.to_string(),
                expected: kind_name(K::KIND),
                expected_rank: D,
                got: self.kind_name(),
                got_rank: shape.num_dims(),
                shape: shape.to_vec(),
            });
        }
        Ok(Tensor::from_dispatch(self.0))
    }

    /// The tensor kind.
    pub(crate) fn kind(&self) -> Kind {
        kind_of(self.dtype())
    }

    /// `"float"`, `"int"` or `"bool"`.
    pub fn kind_name(&self) -> &'static str {
        kind_name(self.kind())
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.0.shape()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype()
    }

    /// The device the tensor is on.
    pub fn device(&self) -> Device {
        Device::new(self.0.device())
    }

    /// The underlying dispatch tensor.
    pub(crate) fn into_dispatch(self) -> DispatchTensor {
        self.0
    }

    /// The values, read back (for tests and messages).
    pub fn to_data(&self) -> TensorData {
        let shape = self.shape();
        if shape.num_dims() == 0 {
            // Read a scalar as `[1]` and give it back its shape: cubecl-wgpu 0.11.3's read of a
            // rank-0 tensor indexes its strides at `rank - 1` and panics.
            let data = self.clone().reshape([1].into()).to_data();
            let dtype = data.dtype();
            return TensorData::from_bytes(data.into_bytes(), shape, dtype);
        }
        let t = self.0.clone();
        let read = match self.kind() {
            Kind::Float => burn_backend::read_sync(Dispatch::float_into_data(t)),
            Kind::Int => burn_backend::read_sync(Dispatch::int_into_data(t)),
            Kind::Bool => burn_backend::read_sync(Dispatch::bool_into_data(t)),
        };
        read.expect("vmap: reading a leaf's values")
    }

    // ---------------------------------------------------------------------------------------------
    // Shape moves
    // ---------------------------------------------------------------------------------------------

    /// Reshapes the leaf.
    pub(crate) fn reshape(self, shape: Shape) -> Self {
        by_kind!(self, float_reshape, int_reshape, bool_reshape(shape))
    }

    /// The leaf on `device` (a copy when it is on another).
    pub(crate) fn into_device(self, device: &Device) -> Self {
        by_kind!(
            self,
            float_to_device,
            int_to_device,
            bool_to_device(device.as_dispatch())
        )
    }

    /// Expands the leaf to `shape` (a broadcast view).
    pub(crate) fn expand(self, shape: Shape) -> Self {
        by_kind!(self, float_expand, int_expand, bool_expand(shape))
    }

    /// Permutes the leaf's axes.
    pub(crate) fn permute(self, axes: &[usize]) -> Self {
        by_kind!(self, float_permute, int_permute, bool_permute(axes))
    }

    /// Slices the leaf.
    pub(crate) fn slice(self, slices: &[Slice]) -> Self {
        by_kind!(self, float_slice, int_slice, bool_slice(slices))
    }

    /// The part `slice` of `axis` (every element of the other dims), keeping the rank.
    pub(crate) fn slice_axis(self, axis: usize, slice: Slice) -> Self {
        let mut slices = vec![Slice::full(); self.shape().num_dims()];
        slices[axis] = slice;
        self.slice(&slices)
    }

    /// The rows `indices` (a rank-1 int tensor) of `axis`, in their order.
    pub(crate) fn select(self, axis: usize, indices: DispatchTensor) -> Self {
        by_kind!(
            self,
            float_select,
            int_select,
            bool_select(axis, indices.clone())
        )
    }

    /// Row `t` of `axis`, without that axis (rank one less).
    pub(crate) fn index(&self, axis: usize, t: usize) -> Self {
        let mut shape = self.shape();
        shape.remove(axis);
        self.clone().slice_axis(axis, rows(t..t + 1)).reshape(shape)
    }

    /// Moves `axis` to position `to`, shifting the axes in between.
    pub(crate) fn move_axis(self, axis: usize, to: usize) -> Self {
        if axis == to {
            return self;
        }
        let rank = self.shape().num_dims();
        let mut axes: Vec<usize> = (0..rank).filter(|&d| d != axis).collect();
        axes.insert(to, axis);
        self.permute(&axes)
    }

    /// Inserts an axis of size `size` at `axis`, broadcasting the leaf along it.
    pub(crate) fn broadcast_axis(self, axis: usize, size: usize) -> Self {
        let mut unit = self.shape();
        unit.insert(axis, 1);
        let mut full = unit.clone();
        full[axis] = size;
        self.reshape(unit).expand(full)
    }

    /// Concatenates leaves of one kind along `axis`.
    ///
    /// # Panics
    /// If `leaves` is empty.
    pub(crate) fn cat(leaves: Vec<Self>, axis: usize) -> Self {
        let kind = leaves
            .first()
            .expect("vmap: internal: cat of no leaves")
            .kind();
        let ts: Vec<DispatchTensor> = leaves.into_iter().map(|l| l.0).collect();
        Leaf(match kind {
            Kind::Float => Dispatch::float_cat(ts, axis),
            Kind::Int => Dispatch::int_cat(ts, axis),
            Kind::Bool => Dispatch::bool_cat(ts, axis),
        })
    }

    /// Stacks leaves of one kind and shape along a new leading axis.
    pub(crate) fn stack(leaves: Vec<Self>, axis: usize) -> Self {
        let leaves = leaves
            .into_iter()
            .map(|l| {
                let mut shape = l.shape();
                shape.insert(axis, 1);
                l.reshape(shape)
            })
            .collect();
        Self::cat(leaves, axis)
    }

    /// Zeros of `shape`, with the kind and dtype of `self`, on its device.
    pub(crate) fn zeros_like(&self, shape: Shape) -> Self {
        if shape.num_dims() == 0 {
            // Made as `[1]` and reshaped: cubecl-server 0.11.3 allocates a rank-0 tensor with
            // strides indexed at `rank - 1` (out of bounds; see `to_data`).
            return self.zeros_like([1].into()).reshape(shape);
        }
        let device = self.0.device();
        let dtype = self.dtype();
        Leaf(match self.kind() {
            Kind::Float => Dispatch::float_zeros(shape, &device, dtype.into()),
            Kind::Int => Dispatch::int_zeros(shape, &device, dtype.into()),
            Kind::Bool => Dispatch::bool_zeros(shape, &device, dtype.into()),
        })
    }
}

/// The slice of rows `range` of an axis.
pub(crate) fn rows(range: std::ops::Range<usize>) -> Slice {
    Slice::new(range.start as isize, Some(range.end as isize), 1)
}

/// A cursor over the leaves of a tree being rebuilt, which knows the path of the leaf it is at
/// (for error messages).
pub struct Leaves {
    leaves: std::vec::IntoIter<Leaf>,
    root: String,
    keys: Vec<Key>,
}

impl Leaves {
    /// A cursor over `leaves`, naming the tree's root `root` in paths.
    pub fn new(leaves: Vec<Leaf>, root: impl Into<String>) -> Self {
        Self {
            leaves: leaves.into_iter(),
            root: root.into(),
            keys: Vec::new(),
        }
    }

    /// The next leaf.
    ///
    /// # Errors
    /// [`VmapError::LeafCount`] naming the path when the leaves run out.
    pub fn next_leaf(&mut self) -> Result<Leaf, VmapError> {
        self.leaves.next().ok_or_else(|| VmapError::LeafCount {
            path: self.path(),
            expected: 1,
            got: 0,
        })
    }

    /// Runs `f` with `key` appended to the current path.
    pub fn with_key<T>(&mut self, key: Key, f: impl FnOnce(&mut Self) -> T) -> T {
        self.keys.push(key);
        let out = f(self);
        self.keys.pop();
        out
    }

    /// The path of the current position (`args[0].weight`).
    pub fn path(&self) -> String {
        let mut path = self.root.clone();
        for key in &self.keys {
            path.push_str(&key.to_string());
        }
        path
    }

    /// How many leaves are left.
    pub fn remaining(&self) -> usize {
        self.leaves.len()
    }
}
