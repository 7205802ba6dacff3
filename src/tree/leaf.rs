//! [`Leaf`]: one type-erased tensor of a flattened tree, and the operations the transforms
//! apply to leaves of any kind and rank (shape moves, concatenation, zeros, level moves).

use core::ops::Range;

use burn_backend::backend::Backend;
use burn_backend::tensor::{Bool, Float, Int};
use burn_backend::{DType, Shape, Slice, TensorMetadata, TensorPrimitive};

use crate::VmapError;
use crate::batching::BatchOps;
use crate::compat;
use crate::level::Level;
use crate::physical::Kind;
use crate::tensor::BatchDims;

use super::Key;

/// One leaf of a flattened tree: a tensor primitive of any rank.
#[derive(Debug, Clone)]
pub enum Leaf<B: Backend> {
    /// A float tensor (possibly quantized).
    Float(TensorPrimitive<B>),
    /// An int tensor.
    Int(B::IntTensorPrimitive),
    /// A bool tensor.
    Bool(B::BoolTensorPrimitive),
}

impl<B: Backend> Leaf<B> {
    /// `"float"`, `"int"` or `"bool"`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Leaf::Float(_) => "float",
            Leaf::Int(_) => "int",
            Leaf::Bool(_) => "bool",
        }
    }

    /// The (logical) shape.
    pub fn shape(&self) -> Shape {
        match self {
            Leaf::Float(t) => t.shape(),
            Leaf::Int(t) => t.shape(),
            Leaf::Bool(t) => t.shape(),
        }
    }

    /// The device the tensor is on.
    pub fn device(&self) -> B::Device {
        match self {
            Leaf::Float(TensorPrimitive::Float(t)) => B::float_device(t),
            Leaf::Float(TensorPrimitive::QFloat(t)) => B::q_device(t),
            Leaf::Int(t) => B::int_device(t),
            Leaf::Bool(t) => B::bool_device(t),
        }
    }

    /// Maps the primitive, keeping the kind.
    pub fn map(
        self,
        float: impl FnOnce(TensorPrimitive<B>) -> TensorPrimitive<B>,
        int: impl FnOnce(B::IntTensorPrimitive) -> B::IntTensorPrimitive,
        bool_: impl FnOnce(B::BoolTensorPrimitive) -> B::BoolTensorPrimitive,
    ) -> Self {
        match self {
            Leaf::Float(t) => Leaf::Float(float(t)),
            Leaf::Int(t) => Leaf::Int(int(t)),
            Leaf::Bool(t) => Leaf::Bool(bool_(t)),
        }
    }

    /// The element type.
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Leaf::Float(t) => t.dtype(),
            Leaf::Int(t) => t.dtype(),
            Leaf::Bool(t) => t.dtype(),
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Shape moves (a quantized float is dequantized first)
    // ---------------------------------------------------------------------------------------------

    /// Reshapes the leaf (to rank 0 through its data where the backend cannot reshape to it:
    /// see [`compat::rank0_through_data`]).
    pub(crate) fn reshape(self, shape: Shape) -> Self {
        if shape.num_dims() == 0 && !compat::reshapes_to_rank0::<B>(&self.device()) {
            return compat::rank0_through_data(self);
        }
        self.view(View::Reshape(shape))
    }

    /// Expands the leaf to `shape` (a view).
    pub(crate) fn expand(self, shape: Shape) -> Self {
        self.view(View::Expand(shape))
    }

    /// Slices the leaf.
    pub(crate) fn slice(self, slices: &[Slice]) -> Self {
        self.view(View::Slice(slices))
    }

    /// The part `slice` of `axis` (every element of the other dims), keeping the rank.
    pub(crate) fn slice_axis(self, axis: usize, slice: Slice) -> Self {
        let mut slices = vec![Slice::full(); self.shape().num_dims()];
        slices[axis] = slice;
        self.slice(&slices)
    }

    /// Row `t` of the leading axis, without that axis (rank one less).
    pub(crate) fn index(&self, t: usize) -> Self {
        let shape = self.shape();
        self.clone()
            .slice_axis(0, rows(t..t + 1))
            .reshape(Shape::from(shape[1..].to_vec()))
    }

    /// The rows `indices` of `dim`, in that order.
    pub(crate) fn select(self, dim: usize, indices: B::IntTensorPrimitive) -> Self {
        self.view(View::Select(dim, indices))
    }

    fn view(self, op: View<'_, B>) -> Self {
        match self {
            Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(view::<B, Float>(t.tensor(), op))),
            Leaf::Int(t) => Leaf::Int(view::<B, Int>(t, op)),
            Leaf::Bool(t) => Leaf::Bool(view::<B, Bool>(t, op)),
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Several leaves
    // ---------------------------------------------------------------------------------------------

    /// Concatenates leaves of one kind along `axis`. One leaf is the result itself (some
    /// backends copy even a one-tensor `cat`: see [`crate::compat`]).
    ///
    /// # Panics
    /// With no leaf, or leaves of different kinds (callers check both).
    pub(crate) fn cat(mut leaves: Vec<Self>, axis: usize) -> Self {
        if leaves.len() == 1 {
            return leaves.pop().expect("one leaf");
        }
        let kind = leaves
            .first()
            .map(Leaf::kind_name)
            .expect("vmap: internal error: cat of no leaf");
        let (mut floats, mut ints, mut bools) = (Vec::new(), Vec::new(), Vec::new());
        for leaf in leaves {
            if leaf.kind_name() != kind {
                panic!(
                    "vmap: internal error: expected a {kind} leaf, got a {} leaf",
                    leaf.kind_name()
                );
            }
            match leaf {
                Leaf::Float(t) => floats.push(t.tensor()),
                Leaf::Int(t) => ints.push(t),
                Leaf::Bool(t) => bools.push(t),
            }
        }
        match kind {
            "float" => Leaf::Float(TensorPrimitive::Float(B::float_cat(floats, axis))),
            "int" => Leaf::Int(B::int_cat(ints, axis)),
            _ => Leaf::Bool(B::bool_cat(bools, axis)),
        }
    }

    /// Stacks leaves of equal shape along a new leading axis (at least one leaf).
    pub(crate) fn stack(leaves: Vec<Self>) -> Self {
        let leaves = leaves
            .into_iter()
            .map(|l| {
                let mut shape = l.shape().to_vec();
                shape.insert(0, 1);
                l.reshape(Shape::from(shape))
            })
            .collect();
        Self::cat(leaves, 0)
    }

    /// A zero-filled (false) leaf of kind `kind` (`"float"`, `"int"`, `"bool"`).
    pub(crate) fn zeros(kind: &str, shape: Shape, dtype: DType, device: &B::Device) -> Self {
        match kind {
            "float" => Leaf::Float(TensorPrimitive::Float(B::float_zeros(
                shape,
                device,
                dtype.into(),
            ))),
            "int" => Leaf::Int(B::int_zeros(shape, device, dtype.into())),
            _ => Leaf::Bool(B::bool_zeros(shape, device, dtype.into())),
        }
    }

    /// A zero-filled leaf of this one's kind, dtype and device, of shape `shape`.
    pub(crate) fn zeros_like(&self, shape: Shape) -> Self {
        Self::zeros(self.kind_name(), shape, self.dtype(), &self.device())
    }
}

/// The slice `range` (step 1).
pub(crate) fn rows(range: Range<usize>) -> Slice {
    Slice::new(range.start as isize, Some(range.end as isize), 1)
}

/// A shape move, written once for the three kinds.
enum View<'a, B: Backend> {
    Reshape(Shape),
    Expand(Shape),
    Slice(&'a [Slice]),
    Select(usize, B::IntTensorPrimitive),
}

fn view<B: Backend, K: Kind<B>>(t: K::P, op: View<'_, B>) -> K::P {
    match op {
        View::Reshape(shape) => K::reshape(t, shape),
        View::Expand(shape) => K::expand(t, shape),
        View::Slice(slices) => K::slice(t, slices),
        View::Select(dim, indices) => K::select(t, dim, indices),
    }
}

// -------------------------------------------------------------------------------------------------
// Level moves
// -------------------------------------------------------------------------------------------------

impl<B: BatchOps> Leaf<B> {
    /// Logical `axis` becomes a batch dim at `level`. A quantized input is dequantized: its
    /// scales are shared by the whole batch.
    pub(crate) fn batch(self, axis: usize, level: Level) -> Self {
        match self {
            Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(B::float_batch(
                t.tensor(),
                axis,
                level,
            ))),
            Leaf::Int(t) => Leaf::Int(B::int_batch(t, axis, level)),
            Leaf::Bool(t) => Leaf::Bool(B::bool_batch(t, axis, level)),
        }
    }

    /// The batch dim at `level` becomes logical `axis` (broadcast to `size` when the leaf is
    /// not batched there).
    pub(crate) fn unbatch(self, level: Level, size: usize, axis: usize) -> Self {
        match self {
            Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(B::float_unbatch(
                t.tensor(),
                level,
                size,
                axis,
            ))),
            Leaf::Int(t) => Leaf::Int(B::int_unbatch(t, level, size, axis)),
            Leaf::Bool(t) => Leaf::Bool(B::bool_unbatch(t, level, size, axis)),
        }
    }

    /// The batch dims (none for a quantized float).
    pub(crate) fn batch_dims(&self) -> BatchDims {
        match self {
            Leaf::Float(TensorPrimitive::Float(t)) => B::float_batch_dims(t),
            Leaf::Float(TensorPrimitive::QFloat(_)) => BatchDims::none(),
            Leaf::Int(t) => B::int_batch_dims(t),
            Leaf::Bool(t) => B::bool_batch_dims(t),
        }
    }

    /// Enters `level` unmapped, shared by every example ([`BatchOps::float_shared`]: a float
    /// gradient taken outside the vmap sums over the batch); int and bool leaves are unchanged.
    pub(crate) fn shared(self, level: Level) -> Self {
        match self {
            Leaf::Float(t) => {
                Leaf::Float(TensorPrimitive::Float(B::float_shared(t.tensor(), level)))
            }
            other => other,
        }
    }
}

// -------------------------------------------------------------------------------------------------
// A cursor over leaves
// -------------------------------------------------------------------------------------------------

/// A cursor over leaves, with the path of the current position for error messages.
pub struct Leaves<B: Backend> {
    iter: std::vec::IntoIter<Leaf<B>>,
    path: Vec<Key>,
    root: String,
}

impl<B: Backend> Leaves<B> {
    /// Starts a cursor named `root` (the first segment of every path in errors).
    pub fn new(leaves: Vec<Leaf<B>>, root: impl Into<String>) -> Self {
        Self {
            iter: leaves.into_iter(),
            path: Vec::new(),
            root: root.into(),
        }
    }

    /// The next leaf, or an error naming the current path.
    pub fn next_leaf(&mut self) -> Result<Leaf<B>, VmapError> {
        self.iter.next().ok_or_else(|| VmapError::LeafCount {
            path: self.path(),
            expected: 1,
            got: 0,
        })
    }

    /// Runs `f` one key deeper.
    pub fn with_key<T>(&mut self, key: Key, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(key);
        let out = f(self);
        self.path.pop();
        out
    }

    /// The current path, e.g. `args[1].weight`.
    pub fn path(&self) -> String {
        let mut s = self.root.clone();
        for k in &self.path {
            s.push_str(&k.to_string());
        }
        s
    }

    /// Leaves not consumed yet.
    pub fn remaining(&self) -> usize {
        self.iter.len()
    }
}
