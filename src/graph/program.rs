//! [`Program`]: a captured function as a list of operations over tensor ids, run on any backend.

use std::collections::HashMap;

use burn_backend::backend::Backend;
use burn_backend::{DType, Shape, TensorData};
use burn_ir::{OperationIr, TensorId, TensorIr};

use super::custom::Customs;
use super::env::Env;
use super::ops::execute;
use crate::VmapError;
use crate::value::Value;

/// A function recorded once on Burn's capture device: its operations, its inputs (in the order
/// the caller declared them, each with the shape and dtype of one example), its outputs (in the
/// caller's order, possibly repeated, possibly an input), and the constants it created.
///
/// Running it on a backend `B` calls `B`'s op for every recorded operation: on `Vmap<B>` with
/// batched inputs, that is the batched function; on `Autodiff<Vmap<B>>`, its per-example
/// gradients follow from one backward pass.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    ops: Vec<OperationIr>,
    inputs: Vec<TensorIr>,
    outputs: Vec<TensorIr>,
    constants: Vec<(TensorId, TensorData)>,
    /// How many times each tensor is read (by ops, and once per output position).
    uses: HashMap<TensorId, usize>,
    /// The handlers of its custom operations (`custom_vmap`), by operation id.
    customs: Customs,
}

/// The signature of one tensor of a program: its shape and dtype for one example.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TensorSig {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
}

impl Program {
    /// Builds the program from a captured graph: `inputs` and `outputs` are the graph's
    /// boundary as the caller declared it (outputs may repeat), `values` the captured tensor
    /// data (the inputs' placeholders among them, which are dropped), `customs` the handlers of
    /// its custom operations.
    pub(crate) fn new(
        operations: Vec<OperationIr>,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        mut values: std::collections::BTreeMap<TensorId, TensorData>,
        customs: Customs,
    ) -> Self {
        let mut irs: HashMap<TensorId, TensorIr> = HashMap::new();
        for op in &operations {
            for t in op.nodes() {
                irs.entry(t.id).or_insert_with(|| t.clone());
            }
        }
        let ir = |id: &TensorId| {
            irs.get(id)
                .cloned()
                .unwrap_or_else(|| panic!("vmap: internal: boundary tensor {id} not in the graph"))
        };
        let inputs: Vec<TensorIr> = inputs.iter().map(ir).collect();
        let outputs: Vec<TensorIr> = outputs.iter().map(ir).collect();
        for input in &inputs {
            values.remove(&input.id);
        }
        // An op producing an input is a placeholder's view (`capture::placeholder`): the input
        // is bound directly.
        let is_input = |op: &OperationIr| op.outputs().any(|t| inputs.iter().any(|i| i.id == t.id));
        let ops: Vec<OperationIr> = operations
            .into_iter()
            .filter(|op| !matches!(op, OperationIr::Init(_) | OperationIr::Drop(_)))
            .filter(|op| !is_input(op))
            .collect();
        let ops = super::rewrite::restore_linear(ops);
        let ops = super::rewrite::fuse_linear_bias(ops, &outputs);
        let mut uses: HashMap<TensorId, usize> = HashMap::new();
        for op in &ops {
            for t in op.inputs() {
                *uses.entry(t.id).or_default() += 1;
            }
        }
        for t in &outputs {
            *uses.entry(t.id).or_default() += 1;
        }
        // Constants nothing reads (placeholders of unused tensors) are not uploaded.
        let constants = values
            .into_iter()
            .filter(|(id, _)| uses.contains_key(id))
            .collect();
        Self {
            ops,
            inputs,
            outputs,
            constants,
            uses,
            customs,
        }
    }

    /// The outputs' signatures, in order.
    pub(crate) fn output_sigs(&self) -> impl Iterator<Item = TensorSig> + '_ {
        self.outputs.iter().map(|t| TensorSig {
            shape: t.shape.clone(),
            dtype: t.dtype,
        })
    }

    /// The recorded operations (for tests).
    #[cfg(test)]
    pub(crate) fn ops(&self) -> &[OperationIr] {
        &self.ops
    }

    /// Runs the program on backend `B`: binds `inputs` (in order) and the constants (uploaded to
    /// `device`), runs every operation, and returns the outputs in order.
    ///
    /// # Errors
    /// [`VmapError::UnsupportedOp`] at the first operation the interpreter does not run.
    ///
    /// # Panics
    /// If `inputs` does not match the program's inputs in number (an internal error: callers
    /// build the inputs from the program's signature).
    pub(crate) fn run<B: Backend>(
        &self,
        inputs: Vec<Value<B>>,
        device: &B::Device,
    ) -> Result<Vec<Value<B>>, VmapError> {
        assert_eq!(
            inputs.len(),
            self.inputs.len(),
            "vmap: internal: a program of {} inputs run with {}",
            self.inputs.len(),
            inputs.len()
        );
        let mut env = Env::new(device.clone(), self.uses.clone(), self.customs.clone());
        for (t, value) in self.inputs.iter().zip(inputs) {
            env.bind(t.id, value);
        }
        for (id, data) in &self.constants {
            env.bind(*id, constant::<B>(data.clone(), device));
        }
        for op in &self.ops {
            execute(&mut env, op)?;
        }
        Ok(self.outputs.iter().map(|t| env.read(t.id)).collect())
    }
}

/// A captured constant on `device`, as a tensor of its kind.
fn constant<B: Backend>(data: TensorData, device: &B::Device) -> Value<B> {
    let dtype = data.dtype();
    if dtype.is_float() {
        Value::Float(B::float_from_data(data, device))
    } else if dtype.is_bool() {
        Value::Bool(B::bool_from_data(data, device))
    } else {
        Value::Int(B::int_from_data(data, device))
    }
}
