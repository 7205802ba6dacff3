//! The backend operations of a step, recorded on Burn's capture backend instead of run: what a
//! step costs in launches, measurable on a CPU.
//!
//! At the sizes of a training step a GPU is bound by the number of kernels it launches more than
//! by arithmetic. Unfused, a cubecl backend (wgpu, CUDA) launches one kernel for each backend
//! operation but a view (a reshape, a permutation, an expansion, a slice: metadata only) and an
//! upload (a tensor made from host data); [`Operations::launches`] counts exactly those, with
//! the strides of every tensor followed as burn-cubecl lays them out, so that a reshape it must
//! copy (a permuted or broadcast view's) counts as the launch it is. The count is made by running
//! the step on Burn's capture device, which records every operation without computing it, from
//! tensors moved there from the step's own, with the engine on the paths it takes on a cubecl
//! backend (`compat::capture_as_cubecl`: the layouts its kernels need): the operations a cubecl
//! backend runs, in their order. Not counted: copies a backend makes inside one operation (an
//! operand its kernel cannot read as laid out). A step that reads a value on the host (a
//! synchronisation inside the step) cannot be recorded, and is refused with
//! [`VmapError::ValueRead`].
//!
//! - [`MicroGrad::operations`](crate::transform::micro::MicroGrad::operations): one call of a
//!   `micro_grad_module` builder (a clipped sum, moments).
//! - [`standard_step_operations`]: Burn's own standard step on the same batch, the loss's
//!   forward and Burn's backward (what `loss.backward()` runs), to compare against.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use burn_autodiff::Autodiff;
use burn_backend::DeviceSettings;
use burn_backend::backend::AutodiffBackend;
use burn_backend::ops::FloatTensorOps;
use burn_ir::{BaseOperationIr, OperationIr, TensorId, TensorIr};
use burn_std::{ReshapeAction, Strides, contiguous_strides, reshape_action};

use super::module::{ModuleParams, record_module_fn};
use super::run::{common_device, example_sigs};
use crate::VmapError;
use crate::graph::{Program, classify};
use crate::guard;
use crate::runtime::{Job, UserBackend, detach, on_backend};
use crate::tree::{Leaf, Tree};
use crate::value::Value;

/// The backend operations of one step, by kind (`"matmul"`, `"add"`, `"reshape"`, ...).
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::operations::standard_step_operations;
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let x = Tensor::<2>::ones([4, 3], &device);
/// let ops = standard_step_operations(&model, (x,), |m: &Linear, (x,): (Tensor<2>,)| {
///     m.forward(x).sum()
/// })
/// .unwrap();
/// assert_eq!(ops.of("linear"), 1); // the forward pass
/// assert_eq!(ops.of("linear_weight_backward"), 1); // the weight's gradient
/// assert!(ops.launches() <= ops.total());
/// println!("{ops}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operations {
    kinds: BTreeMap<String, usize>,
}

impl Operations {
    /// Every operation, views and uploads included; a concatenation counts once an input (the
    /// `slice_assign` a cubecl backend runs for each, see [`launches`](Self::launches)).
    pub fn total(&self) -> usize {
        self.kinds.values().sum()
    }

    /// The operations that launch a kernel on an unfused cubecl backend: every one but the
    /// views ([`is_view`](Self::is_view)), the uploads (`"init"`, a tensor made from host
    /// data: a copy, not a kernel) and the allocations (`"empty"`: burn-cubecl's `empty`
    /// reserves memory and writes nothing). A concatenation of `n` tensors is `n` launches:
    /// burn-cubecl 0.22.1 has no concatenation kernel, and Burn's default writes each input into
    /// the output with a `slice_assign`.
    pub fn launches(&self) -> usize {
        self.kinds
            .iter()
            .filter(|(k, _)| !Self::is_view(k) && !matches!(k.as_str(), "init" | "empty"))
            .map(|(_, n)| n)
            .sum()
    }

    /// The operations of kind `kind` (`"matmul"`; the names are Burn's operations in snake
    /// case).
    pub fn of(&self, kind: &str) -> usize {
        self.kinds.get(kind).copied().unwrap_or(0)
    }

    /// Every kind and its count, by name.
    pub fn by_kind(&self) -> impl Iterator<Item = (&str, usize)> {
        self.kinds.iter().map(|(k, n)| (k.as_str(), *n))
    }

    /// Whether operations of kind `kind` only change a tensor's metadata on a cubecl backend:
    /// `reshape`, `swap_dims`, `permute`, `expand`, `slice`, `unfold`. A reshape that a cubecl
    /// backend must copy (of a tensor whose strides cannot express the new shape: a permuted
    /// view, a broadcast) is counted as `reshape_copy`, a launch; so is a slice with a step.
    pub fn is_view(kind: &str) -> bool {
        matches!(
            kind,
            "reshape" | "swap_dims" | "permute" | "expand" | "slice" | "unfold"
        )
    }

    fn add(&mut self, op: &OperationIr, layouts: &mut Layouts) {
        let view = match op {
            OperationIr::BaseFloat(b) | OperationIr::BaseInt(b) | OperationIr::BaseBool(b) => {
                layouts.view(b)
            }
            _ => None,
        };
        // burn-cubecl 0.22.1 has no concatenation kernel: Burn's default writes each input into
        // the output with a `slice_assign`, a launch each.
        let launches = match op {
            OperationIr::BaseFloat(BaseOperationIr::Cat(c))
            | OperationIr::BaseInt(BaseOperationIr::Cat(c))
            | OperationIr::BaseBool(BaseOperationIr::Cat(c)) => c.tensors.len(),
            _ => 1,
        };
        if let Some(kind) = view.map(String::from).or_else(|| kind(op)) {
            *self.kinds.entry(kind).or_default() += launches;
        }
    }
}

impl fmt::Display for Operations {
    /// `"120 operations, 84 launches: add 12, matmul 9, ..."`, most frequent first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations, {} launches",
            self.total(),
            self.launches()
        )?;
        let mut kinds: Vec<_> = self.by_kind().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        for (i, (k, n)) in kinds.into_iter().enumerate() {
            write!(f, "{}{k} {n}", if i == 0 { ": " } else { ", " })?;
        }
        Ok(())
    }
}

/// The kind of a recorded operation in snake case (`Float(F32, Exp(..))` is `"exp"`); `None`
/// for a tensor being dropped, which is no operation.
fn kind(op: &OperationIr) -> Option<String> {
    let inner = match op {
        OperationIr::Drop(_) => return None,
        OperationIr::Init(_) => return Some("init".into()),
        OperationIr::Custom(c) => return Some(format!("custom {}", c.id)),
        OperationIr::BaseFloat(b) | OperationIr::BaseInt(b) | OperationIr::BaseBool(b) => {
            format!("{b:?}")
        }
        OperationIr::NumericFloat(_, n) | OperationIr::NumericInt(_, n) => format!("{n:?}"),
        OperationIr::Bool(b) => format!("{b:?}"),
        OperationIr::Int(i) => format!("{i:?}"),
        OperationIr::Float(_, f) => format!("{f:?}"),
        OperationIr::Module(m) => format!("{m:?}"),
        OperationIr::Distributed(d) => format!("{d:?}"),
        OperationIr::Activation(a) => format!("{a:?}"),
    };
    let name: String = inner
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let mut snake = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    Some(snake)
}

/// Runs `step` on a fresh capture device with the default dtypes of `settings`, given `leaves`
/// moved there (their uploads are not counted), and counts the operations it records.
///
/// # Errors
/// [`VmapError::ValueRead`] when the step reads a value on the host; the step's own errors.
pub(crate) fn count(
    transform: &'static str,
    settings: DeviceSettings,
    leaves: Vec<Leaf>,
    step: impl FnOnce(Vec<Leaf>) -> Result<(), VmapError>,
) -> Result<Operations, VmapError> {
    let device = Device::capture();
    let n = leaves.len();
    let mut outcome = None;
    let captured = device.capture_scope(|scope| {
        let configured = device
            .clone()
            .configure(burn::tensor::DeviceConfig::new(
                Some(settings.float_dtype),
                Some(settings.int_dtype),
                Some(settings.bool_dtype),
            ))
            .map_err(|e| VmapError::Device {
                transform,
                why: format!("the capture device refused the step's default dtypes: {e:?}"),
            });
        outcome = Some(configured.and_then(|()| {
            let moved = leaves.into_iter().map(|l| to_device(l, &device)).collect();
            guard::catch(|| crate::compat::capture_as_cubecl(|| step(moved)))
                .map_err(|message| classify(transform, message))?
        }));
        scope.complete([], [])
    });
    outcome.expect("the capture closure ran")?;
    let captured = captured.map_err(|e| VmapError::FunctionPanicked {
        transform,
        message: format!("Burn rejected the recorded step: {e}"),
    })?;
    let mut ops = Operations::default();
    let mut layouts = Layouts::default();
    // The first `n` operations are the uploads of the moved tensors: not the step's.
    for (i, op) in captured.graph.operations.iter().enumerate() {
        if i >= n || !matches!(op, OperationIr::Init(_)) {
            ops.add(op, &mut layouts);
        }
    }
    Ok(ops)
}

/// The strides of a recording's tensors as an unfused cubecl backend lays them out: a view
/// (`reshape`, `swap_dims`, `permute`, `expand`, a `slice` of step 1, `unfold`) changes strides
/// only, every other operation writes a contiguous tensor. A reshape the strides cannot express
/// is a copy there (`burn_std::reshape_action`, what burn-cubecl's `reshape` decides by): a
/// launch.
#[derive(Default)]
struct Layouts(HashMap<TensorId, Strides>);

impl Layouts {
    fn strides(&self, t: &TensorIr) -> Strides {
        self.0
            .get(&t.id)
            .cloned()
            .unwrap_or_else(|| contiguous_strides(t.shape.as_slice()))
    }

    /// The kind of a view `op` (its output's strides recorded), or of a view op that copies
    /// (`"reshape_copy"`, `"slice_copy"`); `None` for any other operation.
    fn view(&mut self, op: &BaseOperationIr) -> Option<&'static str> {
        let (out, strides, kind) = match op {
            BaseOperationIr::Reshape(r) => {
                let from = self.strides(&r.input);
                match reshape_action(&r.input.shape, &from, &r.out.shape) {
                    ReshapeAction::UpdateStrides { strides } => (&r.out, strides, "reshape"),
                    ReshapeAction::NoChange => (&r.out, from, "reshape"),
                    ReshapeAction::Recompute => return Some("reshape_copy"),
                }
            }
            BaseOperationIr::SwapDims(s) => {
                let mut strides = self.strides(&s.input).to_vec();
                strides.swap(s.dim1, s.dim2);
                (&s.out, Strides::new(&strides), "swap_dims")
            }
            BaseOperationIr::Permute(p) => {
                let from = self.strides(&p.input);
                let strides: Vec<usize> = p.axes.iter().map(|&a| from[a]).collect();
                (&p.out, Strides::new(&strides), "permute")
            }
            BaseOperationIr::Expand(e) => {
                let from = self.strides(&e.input);
                let (shape, target) = (e.input.shape.as_slice(), e.out.shape.as_slice());
                let lead = target.len() - shape.len();
                let strides: Vec<usize> = (0..target.len())
                    .map(|i| match i.checked_sub(lead) {
                        Some(j) if shape[j] == target[i] => from[j],
                        _ => 0,
                    })
                    .collect();
                (&e.out, Strides::new(&strides), "expand")
            }
            BaseOperationIr::Slice(s) if s.ranges.iter().all(|r| r.step == 1) => {
                (&s.out, self.strides(&s.tensor), "slice")
            }
            BaseOperationIr::Slice(_) => return Some("slice_copy"),
            BaseOperationIr::Unfold(u) => {
                let mut strides = self.strides(&u.input).to_vec();
                let d = strides[u.dim];
                strides[u.dim] = u.step * d;
                strides.push(d);
                (&u.out, Strides::new(&strides), "unfold")
            }
            _ => return None,
        };
        self.0.insert(out.id, strides);
        Some(kind)
    }
}

/// `leaf` (off any autodiff graph) on `device`.
fn to_device(leaf: Leaf, device: &Device) -> Leaf {
    Leaf(detach(leaf.into_dispatch())).into_device(device)
}

/// The backend operations of Burn's standard step on the batch `args`: `loss_fn(module, args)`
/// (the batch's loss, one element) and Burn's backward of it to every trainable parameter, what
/// `GradientsParams::from_grads(loss.backward(), &module)` runs. `args` is the whole batch,
/// given to `loss_fn` as it is; compare with
/// [`MicroGrad::operations`](crate::transform::micro::MicroGrad::operations) on the same batch.
///
/// See [`Operations`] for an example.
///
/// # Errors
/// [`VmapError::LossNotScalar`] when the loss has more than one element; the recording's errors
/// (as [`per_example_grads`](crate::per_example_grads)'); [`VmapError::ValueRead`] when the
/// step reads a value on the host.
pub fn standard_step_operations<M, I, A, F>(
    module: &M,
    args: I,
    loss_fn: F,
) -> Result<Operations, VmapError>
where
    M: Module,
    I: Tree,
    A: Tree,
    F: Fn(&M, A) -> Tensor<1>,
{
    const T: &str = "standard_step_operations";
    let (leaves, def) = args.flatten();
    let (params, _) = ModuleParams::of(T, module)?;
    let device = common_device(T, &leaves)?;
    let whole = vec![None; leaves.len()];
    let sigs = example_sigs(&leaves, &whole);
    let recorded = record_module_fn(T, module, &loss_fn, &def, &sigs, device.settings())?;
    let loss_sig = recorded
        .program
        .output_sigs()
        .next()
        .expect("the loss is the first output");
    if loss_sig.shape.num_elements() != 1 {
        return Err(VmapError::LossNotScalar {
            transform: T,
            shape: loss_sig.shape.to_vec(),
        });
    }
    let n_params = params.tensors.len();
    let trainable = params.trainable;
    let mut all = params.tensors;
    all.extend(leaves);
    count(T, device.settings(), all, |moved| {
        let device = moved[0].device();
        let (params, inputs) = (moved[..n_params].to_vec(), moved[n_params..].to_vec());
        let step = Standard {
            program: &recorded.program,
            params,
            trainable: &trainable,
            inputs,
        };
        on_backend(T, &device, step)?
    })
}

/// The recorded batch loss on `Autodiff<B>` and Burn's backward of it.
struct Standard<'a> {
    program: &'a Program,
    params: Vec<Leaf>,
    trainable: &'a [bool],
    inputs: Vec<Leaf>,
}

impl Job for Standard<'_> {
    type Output = Result<(), VmapError>;

    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output {
        type AD<B> = Autodiff<B>;
        let value = |leaf: Leaf| {
            B::value(leaf.into_dispatch()).map_err(|why| VmapError::Device {
                transform: "standard_step_operations",
                why,
            })
        };
        let mut tracked = Vec::new();
        let mut inputs: Vec<Value<AD<B>>> = Vec::new();
        for (leaf, trainable) in self.params.into_iter().zip(self.trainable) {
            let t = AD::<B>::from_inner(value(leaf)?.float());
            let t = if *trainable {
                let t = AD::<B>::float_set_require_grad(t, true);
                tracked.push(t.clone());
                t
            } else {
                t
            };
            inputs.push(Value::Float(t));
        }
        for leaf in self.inputs {
            inputs.push(match value(leaf)? {
                Value::Float(t) => Value::Float(AD::<B>::from_inner(t)),
                Value::Int(t) => Value::Int(t),
                Value::Bool(t) => Value::Bool(t),
            });
        }
        let loss = self
            .program
            .run::<AD<B>>(inputs, &device)?
            .into_iter()
            .next()
            .expect("the loss is the first output")
            .float();
        let grads = AD::<B>::backward(loss);
        for t in &tracked {
            let _ = AD::<B>::grad(t, &grads);
        }
        Ok(())
    }
}
