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
//!
//! **Its bias.** The bias added to such a `linear` (Burn's decomposition reshapes it to
//! `[1, .., 1, d_out]` and adds it) joins the `linear` when nothing else reads the product:
//! `linear(x, weight, bias)`, the same sum, one op instead of three on every replay, and under
//! autodiff one node whose bias gradient is `linear_bias_backward`.

use std::collections::HashMap;

use burn_ir::{
    BaseOperationIr, FloatOperationIr, LinearOpIr, ModuleOperationIr, NumericOperationIr,
    OperationIr, TensorId, TensorIr,
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

/// `ops` with the bias added to a bias-less `linear` joined to it (see the module docs), where
/// the product is read only by that addition (`outputs`: the program's outputs, which read it
/// too). The bias is a vector `[d_out]`, added as it is or reshaped to leading unit dims; its
/// reshape goes with the addition when nothing else reads it.
pub(super) fn fuse_linear_bias(ops: Vec<OperationIr>, outputs: &[TensorIr]) -> Vec<OperationIr> {
    let mut uses: HashMap<TensorId, usize> = HashMap::new();
    for t in ops.iter().flat_map(|op| op.inputs()).chain(outputs) {
        *uses.entry(t.id).or_default() += 1;
    }
    let read_once = |id: &TensorId| uses.get(id) == Some(&1);
    // Bias-less products read once: output id -> op index.
    let mut products: HashMap<TensorId, usize> = HashMap::new();
    // Vectors reshaped to leading unit dims: the reshape's output id -> (op index, the vector).
    let mut vectors: HashMap<TensorId, (usize, TensorIr)> = HashMap::new();
    let mut ops: Vec<Option<OperationIr>> = ops.into_iter().map(Some).collect();
    for i in 0..ops.len() {
        let fused = match &ops[i] {
            Some(OperationIr::Module(ModuleOperationIr::Linear(l)))
                if l.bias.is_none() && read_once(&l.out.id) =>
            {
                products.insert(l.out.id, i);
                None
            }
            Some(OperationIr::BaseFloat(BaseOperationIr::Reshape(r)))
                if r.input.shape.num_dims() == 1 && leading_units(&r.out, &r.input) =>
            {
                vectors.insert(r.out.id, (i, r.input.clone()));
                None
            }
            Some(OperationIr::NumericFloat(_, NumericOperationIr::Add(add))) => {
                [(&add.lhs, &add.rhs), (&add.rhs, &add.lhs)]
                    .into_iter()
                    .find_map(|(product, other)| {
                        let &at = products.get(&product.id)?;
                        let (reshape, bias) = match other.shape.num_dims() {
                            1 => (None, other.clone()),
                            _ => vectors.get(&other.id).map(|(j, v)| (Some(*j), v.clone()))?,
                        };
                        let d_out = product.shape.as_slice().last().copied();
                        let fits = add.out.shape == product.shape
                            && Some(bias.shape[0]) == d_out
                            && bias.dtype == product.dtype;
                        fits.then(|| (at, reshape.filter(|_| read_once(&other.id)), bias))
                    })
                    .map(|(at, reshape, bias)| (at, reshape, bias, add.out.clone()))
            }
            _ => None,
        };
        let Some((at, reshape, bias, out)) = fused else {
            continue;
        };
        let Some(OperationIr::Module(ModuleOperationIr::Linear(l))) = ops[at].take() else {
            unreachable!("a bias-less linear was recorded at this index")
        };
        products.remove(&l.out.id);
        if let Some(j) = reshape {
            ops[j] = None;
        }
        ops[i] = Some(OperationIr::Module(ModuleOperationIr::Linear(LinearOpIr {
            x: l.x,
            weight: l.weight,
            bias: Some(bias),
            out,
        })));
    }
    ops.into_iter().flatten().collect()
}

/// Whether `out` is `input` (a vector or a matrix) with leading unit dims: at least one more
/// dim, each of size 1, then `input`'s shape.
fn leading_units(out: &TensorIr, input: &TensorIr) -> bool {
    let (o, i) = (out.shape.as_slice(), input.shape.as_slice());
    o.len() > i.len() && o[..o.len() - i.len()].iter().all(|&d| d == 1) && o.ends_with(i)
}
