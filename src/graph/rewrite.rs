//! Rewrites of a captured graph before it runs: where Burn's recording of an operation is a
//! decomposition whose batched replay would lose what the engine does for the whole.
//!
//! **`linear`.** burn-dispatch 0.22.1 does not dispatch `ModuleOps::linear` (its
//! `src/ops/module.rs` leaves it as a TODO), so a recorded `nn::Linear` is Burn's default
//! decomposition: `matmul(x, weight)`, the weight first reshaped to `[1, .., 1, d_in, d_out]`
//! when `x` has more than two dims, then the bias added. Replayed under autodiff, that matmul
//! differentiates the weight through a batched matmul, which builds every example's
//! `d_in × d_out` gradient; replayed as Burn's `linear`, the weight's gradient is
//! `linear_weight_backward`, which the engine holds factored (a clipped sum of per-example
//! gradients then never builds them). So a float matmul whose right operand is a matrix, or a
//! matrix given leading unit dims by a reshape, runs as `linear` of that matrix: the same
//! product, forward and backward.

use std::collections::HashMap;

use burn_ir::{
    BaseOperationIr, FloatOperationIr, LinearOpIr, ModuleOperationIr, OperationIr, TensorId,
    TensorIr,
};

/// `ops` with every float matmul of a matrix (see the module docs) as a `linear`.
pub(super) fn restore_linear(ops: Vec<OperationIr>) -> Vec<OperationIr> {
    // Matrices reshaped to leading unit dims: the reshape's output id -> the matrix.
    let mut lifted: HashMap<TensorId, TensorIr> = HashMap::new();
    ops.into_iter()
        .map(|op| {
            match &op {
                OperationIr::BaseFloat(BaseOperationIr::Reshape(r))
                    if r.input.shape.num_dims() == 2
                        && r.out.shape.num_dims() > 2
                        && leading_units(&r.out, &r.input) =>
                {
                    lifted.insert(r.out.id, r.input.clone());
                }
                OperationIr::Float(_, FloatOperationIr::Matmul(m)) => {
                    let weight = if m.rhs.shape.num_dims() == 2 {
                        Some(m.rhs.clone())
                    } else {
                        lifted.get(&m.rhs.id).cloned()
                    };
                    let rank = m.lhs.shape.num_dims();
                    if let Some(weight) = weight
                        && rank >= 2
                        && rank == m.rhs.shape.num_dims()
                        && m.lhs.shape[rank - 1] == weight.shape[0]
                    {
                        return OperationIr::Module(ModuleOperationIr::Linear(LinearOpIr {
                            x: m.lhs.clone(),
                            weight,
                            bias: None,
                            out: m.out.clone(),
                        }));
                    }
                }
                _ => {}
            }
            op
        })
        .collect()
}

/// Whether `out` is `input` (a matrix) with leading unit dims.
fn leading_units(out: &TensorIr, input: &TensorIr) -> bool {
    let o = out.shape.as_slice();
    let lead = o.len() - 2;
    o[..lead].iter().all(|&d| d == 1) && o[lead..] == *input.shape.as_slice()
}
