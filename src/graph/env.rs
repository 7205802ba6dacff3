//! [`Env`]: the values of a program's tensors while it runs, each freed after its last read.

use std::collections::HashMap;
use std::sync::Arc;

use burn_backend::backend::Backend;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{BoolDType, DType};
use burn_ir::{TensorId, TensorIr};

use super::custom::{CustomHandler, Customs};
use crate::value::Value;

/// The live tensors of one run of a program, keyed by their captured id. Each tensor knows how
/// many reads are left; the last read moves it out (so the backend may reuse its buffer), the
/// earlier ones clone it (a reference count, no copy).
pub(crate) struct Env<B: Backend> {
    values: HashMap<TensorId, Value<B>>,
    uses: HashMap<TensorId, usize>,
    /// The device every tensor created by the program goes to.
    pub(crate) device: B::Device,
    /// The dtype of every bool the program creates, when it is the device's rather than the
    /// recorded one ([`compat::replay_bool_dtype`](crate::compat::replay_bool_dtype)).
    bool_dtype: Option<BoolDType>,
    /// The handlers of the program's custom operations.
    customs: Customs,
}

impl<B: Backend> Env<B> {
    /// An empty environment whose tensors will be read `uses[id]` times, for a program whose
    /// custom operations run `customs`.
    pub(crate) fn new(device: B::Device, uses: HashMap<TensorId, usize>, customs: Customs) -> Self {
        Self {
            values: HashMap::with_capacity(uses.len()),
            uses,
            bool_dtype: crate::compat::replay_bool_dtype::<B>(&device),
            device,
            customs,
        }
    }

    /// The dtype of a bool the program creates, recorded as `recorded`.
    pub(crate) fn bool_out(&self, recorded: DType) -> BoolDType {
        self.bool_dtype.unwrap_or_else(|| recorded.into())
    }

    /// The handler of custom operation `id`.
    pub(crate) fn custom(&self, id: &str) -> Option<Arc<dyn CustomHandler>> {
        self.customs.get(id).cloned()
    }

    /// Binds `id` (a program input, a constant or an op's output). A tensor nothing reads is
    /// dropped at once.
    pub(crate) fn bind(&mut self, id: TensorId, value: Value<B>) {
        if self.uses.get(&id).copied().unwrap_or(0) > 0 {
            self.values.insert(id, value);
        }
    }

    /// Reads `id` once.
    ///
    /// # Panics
    /// If `id` is not bound: programs are checked at capture, so this is an internal error.
    pub(crate) fn read(&mut self, id: TensorId) -> Value<B> {
        let left = self
            .uses
            .get_mut(&id)
            .unwrap_or_else(|| panic!("vmap: internal: tensor {id} is read but never bound"));
        if *left <= 1 {
            *left = 0;
            self.values
                .remove(&id)
                .unwrap_or_else(|| panic!("vmap: internal: tensor {id} read after its last use"))
        } else {
            *left -= 1;
            self.values
                .get(&id)
                .unwrap_or_else(|| panic!("vmap: internal: tensor {id} is read before it is bound"))
                .clone()
        }
    }

    /// Reads a float tensor.
    pub(crate) fn f(&mut self, t: &TensorIr) -> FloatTensor<B> {
        self.read(t.id).float()
    }

    /// Reads an int tensor.
    pub(crate) fn i(&mut self, t: &TensorIr) -> IntTensor<B> {
        self.read(t.id).int()
    }

    /// Reads a bool tensor.
    pub(crate) fn b(&mut self, t: &TensorIr) -> BoolTensor<B> {
        self.read(t.id).bool()
    }

    /// Binds an op's float output.
    pub(crate) fn put_f(&mut self, t: &TensorIr, value: FloatTensor<B>) {
        self.bind(t.id, Value::Float(value));
    }

    /// Binds an op's int output.
    pub(crate) fn put_i(&mut self, t: &TensorIr, value: IntTensor<B>) {
        self.bind(t.id, Value::Int(value));
    }

    /// Binds an op's bool output.
    pub(crate) fn put_b(&mut self, t: &TensorIr, value: BoolTensor<B>) {
        self.bind(t.id, Value::Bool(value));
    }
}
