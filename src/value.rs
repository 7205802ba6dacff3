//! [`Value`]: one tensor primitive of a backend, of any kind and rank. What the interpreter keeps
//! per tensor id, and what the transforms move between the user's tensors and the engine.

use burn_backend::backend::BackendTypes;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{DType, Shape, TensorMetadata};

/// One tensor primitive of backend `B`: float, int or bool, any rank.
#[derive(Debug)]
pub(crate) enum Value<B: BackendTypes> {
    Float(FloatTensor<B>),
    Int(IntTensor<B>),
    Bool(BoolTensor<B>),
}

impl<B: BackendTypes> Clone for Value<B> {
    fn clone(&self) -> Self {
        match self {
            Value::Float(t) => Value::Float(t.clone()),
            Value::Int(t) => Value::Int(t.clone()),
            Value::Bool(t) => Value::Bool(t.clone()),
        }
    }
}

impl<B: BackendTypes> Value<B> {
    /// `"float"`, `"int"` or `"bool"`.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            Value::Float(_) => "float",
            Value::Int(_) => "int",
            Value::Bool(_) => "bool",
        }
    }

    /// The shape (logical, on a batching backend).
    pub(crate) fn shape(&self) -> Shape {
        match self {
            Value::Float(t) => t.shape(),
            Value::Int(t) => t.shape(),
            Value::Bool(t) => t.shape(),
        }
    }

    /// The element type.
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Value::Float(t) => t.dtype(),
            Value::Int(t) => t.dtype(),
            Value::Bool(t) => t.dtype(),
        }
    }

    /// The float primitive.
    ///
    /// # Panics
    /// If the value is not a float tensor (an internal error: programs are typed at capture).
    pub(crate) fn float(self) -> FloatTensor<B> {
        match self {
            Value::Float(t) => t,
            other => panic!(
                "vmap: internal: expected a float tensor, got {}",
                other.kind_name()
            ),
        }
    }

    /// The int primitive (see [`float`](Self::float)).
    pub(crate) fn int(self) -> IntTensor<B> {
        match self {
            Value::Int(t) => t,
            other => panic!(
                "vmap: internal: expected an int tensor, got {}",
                other.kind_name()
            ),
        }
    }

    /// The bool primitive (see [`float`](Self::float)).
    pub(crate) fn bool(self) -> BoolTensor<B> {
        match self {
            Value::Bool(t) => t,
            other => panic!(
                "vmap: internal: expected a bool tensor, got {}",
                other.kind_name()
            ),
        }
    }
}
