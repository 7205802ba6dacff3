//! Per-example gradients of a Burn module: [`ParamGrads`] and [`per_example_grads`].
//!
//! The user's loss is recorded once for one example, with the module's parameters as inputs
//! (`transform/module.rs`), and run on `Autodiff<Vmap<B>>`: parameters unbatched and tracked,
//! the example inputs batched at a fresh level. One backward pass of the batched loss gives
//! every parameter a gradient batched at that level: the per-example gradients (vmap of grad,
//! never a loop of size-1 passes).

use burn::module::{Module, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn_autodiff::Autodiff;
use burn_backend::TensorMetadata;
use burn_backend::backend::AutodiffBackend;
use burn_backend::ops::FloatTensorOps;

use crate::Vmap;
use crate::VmapError;
use crate::graph::Program;
use crate::guard;
use crate::level::{Level, Randomness, VmapScope};
use crate::runtime::{Job, UserBackend, on_backend};
use crate::transform::axes::{Axes, map_inputs};
use crate::transform::module::{ModuleParams, record_module_fn};
use crate::transform::run::{batch, common_device, example_sigs, lift, lower, unbatch};
use crate::tree::{Key, Leaf, Leaves, Lift, NodeKind, Tree, TreeDef};
use crate::value::Value;

/// Gradients of a module's float parameters, keyed by parameter path (`"fc1.weight"`) and
/// [`ParamId`], in the module's visiting order. Per-example gradients carry the batch as their
/// leading axis. Converts to Burn's [`GradientsParams`] for `optimizer.step`.
#[derive(Debug, Clone)]
pub struct ParamGrads {
    entries: Vec<(String, ParamId, Leaf)>,
}

impl ParamGrads {
    pub(crate) fn new(entries: Vec<(String, ParamId, Leaf)>) -> Self {
        Self { entries }
    }

    /// Zeros in the shape of every trainable float parameter of `module`, keyed as the
    /// module transforms key their gradients: the gradient sum of an empty batch.
    ///
    /// # Errors
    /// [`VmapError::MixesExamples`] for a layer that mixes the examples of a batch (BatchNorm
    /// in training mode), and [`VmapError::SharedParameter`], as a batch would be refused.
    pub(crate) fn zeros<M: Module>(transform: &'static str, module: &M) -> Result<Self, VmapError> {
        let (params, _) = ModuleParams::of(transform, module)?;
        let entries = params
            .paths
            .into_iter()
            .zip(params.ids)
            .zip(params.tensors)
            .zip(params.trainable)
            .filter(|(_, trainable)| *trainable)
            .map(|(((p, i), t), _)| {
                let zeros = t.zeros_like(t.shape());
                (p, i, zeros)
            })
            .collect();
        Ok(Self { entries })
    }

    /// The number of coordinates of every trainable float parameter of `module`: those of
    /// [`zeros`](Self::zeros), and of every gradient sum the module transforms give it.
    ///
    /// # Errors
    /// As [`zeros`](Self::zeros).
    pub(crate) fn trainable_dims<M: Module>(
        transform: &'static str,
        module: &M,
    ) -> Result<usize, VmapError> {
        let (params, _) = ModuleParams::of(transform, module)?;
        Ok(params
            .tensors
            .iter()
            .zip(params.trainable)
            .filter(|(_, trainable)| *trainable)
            .map(|(t, _)| t.shape().num_elements())
            .sum())
    }

    /// The gradients cast to the dtypes of their parameters in `module` (a sum taken in a wider
    /// float, `WideSum`, returned in the parameters' own for an optimizer); gradients of
    /// parameters `module` does not hold keep theirs.
    ///
    /// # Errors
    /// As [`zeros`](Self::zeros).
    pub(crate) fn cast_like<M: Module>(
        self,
        transform: &'static str,
        module: &M,
    ) -> Result<Self, VmapError> {
        let (params, _) = ModuleParams::of(transform, module)?;
        let entries = self
            .entries
            .into_iter()
            .map(|(path, id, g)| {
                let target = params
                    .ids
                    .iter()
                    .position(|p| *p == id)
                    .map(|i| params.tensors[i].dtype());
                let g = match target {
                    Some(dtype) if dtype != g.dtype() && dtype.is_float() => Leaf(
                        burn_dispatch::Dispatch::float_cast(g.into_dispatch(), dtype.into()),
                    ),
                    _ => g,
                };
                (path, id, g)
            })
            .collect();
        Ok(Self { entries })
    }

    /// Number of parameters with a gradient.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no gradient.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parameter paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(p, _, _)| p.as_str())
    }

    /// The gradient of the parameter at `path`, as a rank-`D` tensor (`None` when there is no
    /// such parameter or its gradient has another rank).
    pub fn get<const D: usize>(&self, path: &str) -> Option<Tensor<D>> {
        let (_, _, g) = self.entries.iter().find(|(p, _, _)| p == path)?;
        g.clone().into_tensor().ok()
    }

    /// The gradient of parameter `id`, as a rank-`D` tensor.
    pub fn get_by_id<const D: usize>(&self, id: ParamId) -> Option<Tensor<D>> {
        let (_, _, g) = self.entries.iter().find(|(_, i, _)| *i == id)?;
        g.clone().into_tensor().ok()
    }

    /// The gradients as tensors of any rank: `(path, id, gradient)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, ParamId, &Leaf)> {
        self.entries.iter().map(|(p, i, g)| (p.as_str(), *i, g))
    }

    /// Applies `f(path, gradient)` to every gradient.
    pub fn map(self, mut f: impl FnMut(&str, Leaf) -> Leaf) -> Self {
        let entries = self
            .entries
            .into_iter()
            .map(|(p, i, g)| {
                let g = f(&p, g);
                (p, i, g)
            })
            .collect();
        Self { entries }
    }

    /// Each example's global L2 norm over every parameter: per-example gradients in, `[batch]`
    /// out.
    ///
    /// # Panics
    /// If there is no gradient.
    pub fn per_example_norms(&self) -> Tensor<1> {
        let mut total: Option<Tensor<1>> = None;
        for (_, _, g) in &self.entries {
            let shape = g.shape();
            let rows = shape[0];
            let flat: Tensor<2> = g
                .clone()
                .reshape([rows, shape.num_elements() / rows.max(1)].into())
                .into_tensor()
                .expect("a float gradient");
            let sq = flat.powi_scalar(2).sum_dim(1).squeeze_dim::<1>(1);
            total = Some(match total {
                Some(acc) => acc + sq,
                None => sq,
            });
        }
        total.expect("per_example_norms: no gradient").sqrt()
    }

    /// Sums per-example gradients over the batch (the leading axis).
    pub fn sum_batch(self) -> Self {
        self.reduce_batch(false)
    }

    /// Averages per-example gradients over the batch (the leading axis).
    pub fn mean_batch(self) -> Self {
        self.reduce_batch(true)
    }

    fn reduce_batch(self, mean: bool) -> Self {
        let entries = self
            .entries
            .into_iter()
            .map(|(p, i, g)| {
                let shape = g.shape();
                let t = g.into_dispatch();
                let t = if mean {
                    burn_dispatch::Dispatch::float_mean_dim(t, 0)
                } else {
                    burn_dispatch::Dispatch::float_sum_dim(t, 0)
                };
                let g = Leaf(t).reshape(shape.as_slice()[1..].to_vec().into());
                (p, i, g)
            })
            .collect();
        Self { entries }
    }

    /// The gradients as Burn's [`GradientsParams`], for `optimizer.step` (of summed or
    /// averaged gradients: see [`sum_batch`](Self::sum_batch)).
    ///
    /// # Panics
    /// For a parameter of rank above 8.
    pub fn into_gradients_params(self) -> GradientsParams {
        let mut out = GradientsParams::new();
        for (_, id, g) in self.entries {
            register(&mut out, id, g);
        }
        out
    }
}

/// Registers a gradient of any rank.
pub(crate) fn register(out: &mut GradientsParams, id: ParamId, g: Leaf) {
    macro_rules! by_rank {
        ($($d:literal),*) => {
            match g.shape().num_dims() {
                $($d => out.register::<$d>(id, g.into_tensor().expect("a float gradient")),)*
                r => panic!("ParamGrads: parameters of rank {r} are not supported"),
            }
        };
    }
    by_rank!(1, 2, 3, 4, 5, 6, 7, 8)
}

impl Tree for ParamGrads {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        let mut keys = Vec::with_capacity(self.entries.len() + 1);
        let mut children = Vec::with_capacity(self.entries.len() + 1);
        let ids: Vec<(String, ParamId)> = self
            .entries
            .iter()
            .map(|(p, i, _)| (p.clone(), *i))
            .collect();
        // The ids are compared with the structure: a recording of another model instance (the
        // same paths and shapes, other ids) is not reused, so what it returns carries this
        // model's ids, the ones `into_gradients_params` registers the gradients under.
        keys.push(Key::Field("#ids".into()));
        children.push(TreeDef::static_value(ids));
        for (p, _, g) in self.entries {
            keys.push(Key::Field(p));
            leaves.push(g);
            children.push(TreeDef::Leaf);
        }
        TreeDef::Node {
            kind: NodeKind::Struct("ParamGrads"),
            keys,
            children,
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        let bad = |leaves: &Leaves| VmapError::TreeMismatch {
            what: "tree".into(),
            path: leaves.path(),
            why: format!("expected ParamGrads, found {def:?}"),
        };
        let TreeDef::Node {
            kind: NodeKind::Struct("ParamGrads"),
            children,
            ..
        } = def
        else {
            return Err(bad(leaves));
        };
        let ids = children
            .first()
            .and_then(|d| d.static_ref::<Vec<(String, ParamId)>>())
            .ok_or_else(|| bad(leaves))?;
        let mut entries = Vec::with_capacity(ids.len());
        for (path, id) in ids {
            let g = leaves.with_key(Key::Field(path.clone()), |l| l.next_leaf())?;
            entries.push((path.clone(), *id, g));
        }
        Ok(Self { entries })
    }
}

/// Per-example gradients are `ParamGrads` too (their ranks live at run time), so a transform
/// returning `ParamGrads` for one example returns `ParamGrads` for the batch.
impl Lift for ParamGrads {
    type Lifted = ParamGrads;
}

/// Per-example gradients of `loss_fn` with respect to every trainable float parameter of
/// `module`, in one batched backward pass.
///
/// ```text
/// for every example i (row i of every tensor of `inputs`):
///     grads_i = grad(loss_fn(module, inputs_i)) w.r.t. the module's parameters
/// return stack(grads_i)   # each parameter's gradient gains a leading batch axis
/// ```
///
/// `loss_fn` is written for one example and returns its loss as a one-element tensor
/// (`Tensor<1>` of shape `[1]`, what `mean()` gives). The module is unmodified Burn 0.22 code;
/// it is recorded once with its parameters as inputs and run on the batch (see
/// [`vmap`](crate::vmap) for what a recording implies). `Dropout` layers in training mode draw
/// an independent mask per example, as the loop over examples would.
///
/// # Example
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::per_example_grads;
///
/// let device = Device::default();
/// let model: Linear = LinearConfig::new(3, 2).init(&device);
/// let xs = Tensor::<2>::ones([5, 3], &device);
/// let ys = Tensor::<2>::zeros([5, 2], &device);
/// let loss = |m: &Linear, (x, y): (Tensor<1>, Tensor<1>)| (m.forward(x) - y).powi_scalar(2).mean();
/// let grads = per_example_grads(&model, (xs, ys), loss).unwrap();
/// assert_eq!(grads.get::<3>("weight").unwrap().dims(), [5, 3, 2]); // [batch, d_in, d_out]
/// assert_eq!(grads.get::<2>("bias").unwrap().dims(), [5, 2]);
/// ```
///
/// # Errors
/// The errors of [`vmap`](crate::vmap) (batch sizes, axes, recording),
/// [`VmapError::LossNotScalar`] when the loss of one example has more than one element,
/// [`VmapError::MixesExamples`] and [`VmapError::SharedParameter`] (a tied parameter).
pub fn per_example_grads<M, I, A, F>(
    module: &M,
    inputs: I,
    loss_fn: F,
) -> Result<ParamGrads, VmapError>
where
    M: Module,
    I: Tree,
    A: Tree,
    F: Fn(&M, A) -> Tensor<1>,
{
    const T: &str = "per_example_grads";
    let (leaves, def) = inputs.flatten();
    let mapped = map_inputs(T, leaves, def, &Axes::from(0))?;
    let (params, _) = ModuleParams::of(T, module)?;
    let sigs = example_sigs(&mapped.leaves, &mapped.axes);
    let device = common_device(T, &mapped.leaves)?;
    let recorded = record_module_fn(T, module, &loss_fn, &mapped.def, &sigs, device.settings())?;
    let grads = ExampleGrads {
        transform: T,
        program: &recorded.program,
        params: params.tensors,
        trainable: params.trainable.clone(),
        inputs: mapped.leaves,
        axes: mapped.axes,
        size: mapped.size,
        randomness: Randomness::Different,
    };
    let grads = on_backend(T, &device, grads)??;
    let entries = params
        .paths
        .into_iter()
        .zip(params.ids)
        .zip(grads)
        .filter_map(|((p, i), g)| g.map(|g| (p, i, g)))
        .collect();
    Ok(ParamGrads::new(entries))
}

/// Per-example gradients of a recorded loss (the program's first output; its first inputs are
/// the module's parameters): one gradient per parameter, batch first, `None` for a frozen one.
pub(crate) struct ExampleGrads<'a> {
    pub(crate) transform: &'static str,
    pub(crate) program: &'a Program,
    pub(crate) params: Vec<Leaf>,
    pub(crate) trainable: Vec<bool>,
    pub(crate) inputs: Vec<Leaf>,
    pub(crate) axes: Vec<Option<usize>>,
    pub(crate) size: usize,
    pub(crate) randomness: Randomness,
}

impl Job for ExampleGrads<'_> {
    type Output = Result<Vec<Option<Leaf>>, VmapError>;

    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output {
        type AD<B> = Autodiff<Vmap<B>>;
        let transform = self.transform;
        let level = Level::fresh();
        let mut tracked = Vec::with_capacity(self.params.len());
        let mut inputs: Vec<Value<AD<B>>> = Vec::with_capacity(self.program_inputs());
        for (leaf, trainable) in self.params.into_iter().zip(&self.trainable) {
            let t = AD::<B>::from_inner(lift::<B>(transform, leaf)?.float());
            let t = if *trainable {
                AD::<B>::float_set_require_grad(t, true)
            } else {
                t
            };
            tracked.push(t.clone());
            inputs.push(Value::Float(t));
        }
        for (leaf, axis) in self.inputs.into_iter().zip(&self.axes) {
            let v = lift::<B>(transform, leaf)?;
            let v = match axis {
                Some(a) => batch::<Vmap<B>>(v, *a, level),
                None => v,
            };
            inputs.push(into_autodiff::<B>(v));
        }
        let scope = VmapScope::enter(level, self.size, self.randomness);
        let grads = guard::catch(|| -> Result<_, VmapError> {
            let loss = self
                .program
                .run::<AD<B>>(inputs, &device)?
                .into_iter()
                .next()
                .expect("a loss output")
                .float();
            let numel = loss.shape().num_elements();
            if numel != 1 {
                return Err(VmapError::LossNotScalar {
                    transform,
                    shape: loss.shape().to_vec(),
                });
            }
            Ok(AD::<B>::backward(loss))
        })
        .map_err(|message| VmapError::Op { transform, message })??;
        if let Some(refused) = scope.take_refused() {
            return Err(VmapError::Randomness {
                transform,
                op: refused.op.into(),
                size: refused.size,
            });
        }
        let size = self.size;
        let mut out = Vec::with_capacity(tracked.len());
        for (t, trainable) in tracked.iter().zip(&self.trainable) {
            if !trainable {
                out.push(None);
                continue;
            }
            let g = match AD::<B>::grad(t, &grads) {
                Some(g) => g,
                // Not reached by the loss: a zero gradient for every example.
                None => Vmap::<B>::float_zeros(t.shape(), &device, t.dtype().into()),
            };
            let g = guard::catch(|| unbatch::<Vmap<B>>(Value::Float(g), level, size, 0))
                .map_err(|message| VmapError::Op { transform, message })?;
            out.push(Some(Leaf(B::tensor(lower::<B>(g)))));
        }
        drop(scope);
        Ok(out)
    }
}

impl ExampleGrads<'_> {
    fn program_inputs(&self) -> usize {
        self.params.len() + self.inputs.len()
    }
}

/// A value of `Vmap<B>` as a value of `Autodiff<Vmap<B>>` (float tensors untracked).
pub(crate) fn into_autodiff<B: UserBackend>(v: Value<Vmap<B>>) -> Value<Autodiff<Vmap<B>>> {
    match v {
        Value::Float(t) => Value::Float(Autodiff::<Vmap<B>>::from_inner(t)),
        Value::Int(t) => Value::Int(t),
        Value::Bool(t) => Value::Bool(t),
    }
}
