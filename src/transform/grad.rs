//! Per-example gradients of a Burn module: [`ParamGrads`] and [`per_example_grads`].
//!
//! The design choice: models are **built on `Autodiff<Vmap<B>>`** (every Burn model is generic
//! over `B: Backend`, so this is a type parameter, not a code change). With no batched tensor
//! in play `Vmap<B>` passes every op straight to `B` (about 1.0x, see the `passthrough` bench),
//! so the same model instance trains normally and yields per-example gradients on demand, with
//! no per-step copy of its parameters.

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::TensorMetadata;

use crate::VmapError;
use crate::batching::BatchOps;
use crate::transform::vmap::vmap;
use crate::tree::{Key, Leaf, Leaves, NodeKind, Tree, TreeDef};

/// Gradients of a module's float parameters, keyed by parameter path (`"fc1.weight"`), in the
/// module's visiting order. A [`Tree`], so it can be returned from [`vmap`] (each gradient then
/// gains the batch dim: per-example gradients), and it converts to Burn's [`GradientsParams`]
/// for `optimizer.step`.
#[derive(Debug, Clone)]
pub struct ParamGrads<B: Backend> {
    entries: Vec<(String, ParamId, TensorPrimitive<B>)>,
}

struct Collect<'a, AB: AutodiffBackend> {
    grads: &'a mut AB::Gradients,
    path: Vec<String>,
    out: Vec<(String, ParamId, TensorPrimitive<AB::InnerBackend>)>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for Collect<'_, AB> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if let Some(g) = param.grad_remove(self.grads) {
            self.out.push((
                self.path.join("."),
                param.id,
                TensorPrimitive::Float(g.into_primitive().tensor()),
            ));
        }
    }
}

struct Zeros<AB: AutodiffBackend> {
    path: Vec<String>,
    out: Vec<(String, ParamId, TensorPrimitive<AB::InnerBackend>)>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for Zeros<AB> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        let value = param.val();
        if value.is_require_grad() {
            let zeros = Tensor::<AB::InnerBackend, D>::zeros(value.shape(), &value.device());
            self.out.push((
                self.path.join("."),
                param.id,
                TensorPrimitive::Float(zeros.into_primitive().tensor()),
            ));
        }
    }
}

impl<B: Backend> ParamGrads<B> {
    /// Takes the gradients of `module`'s parameters out of `grads` (parameters without a
    /// gradient are skipped).
    pub fn from_module<AB, M>(grads: &mut AB::Gradients, module: &M) -> Self
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let mut visitor = Collect::<AB> {
            grads,
            path: Vec::new(),
            out: Vec::new(),
        };
        module.visit(&mut visitor);
        Self {
            entries: visitor.out,
        }
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

    /// The gradient of the parameter at `path`, as a rank-`D` tensor.
    ///
    /// # Panics
    /// If the gradient's rank is not `D`.
    pub fn get<const D: usize>(&self, path: &str) -> Option<Tensor<B, D>> {
        let (_, _, g) = self.entries.iter().find(|(p, _, _)| p == path)?;
        assert_eq!(
            g.rank(),
            D,
            "ParamGrads::get: `{path}` has rank {}, not {D}",
            g.rank()
        );
        Some(Tensor::from_primitive(g.clone()))
    }

    /// The gradient of parameter `id`, as a rank-`D` tensor.
    pub fn get_by_id<const D: usize>(&self, id: ParamId) -> Option<Tensor<B, D>> {
        let (_, _, g) = self.entries.iter().find(|(_, i, _)| *i == id)?;
        (g.rank() == D).then(|| Tensor::from_primitive(g.clone()))
    }

    /// Applies `f` to every gradient primitive.
    pub fn map(self, mut f: impl FnMut(&str, TensorPrimitive<B>) -> TensorPrimitive<B>) -> Self {
        Self {
            entries: self
                .entries
                .into_iter()
                .map(|(p, i, g)| {
                    let g = f(&p, g);
                    (p, i, g)
                })
                .collect(),
        }
    }

    /// Applies `f` to every gradient seen as one flat vector, then restores the gradient's
    /// shape: the map for elementwise work on a whole gradient tree (adding noise, squaring,
    /// taking signs), whatever the parameters' ranks.
    ///
    /// ```
    /// use burn::backend::Autodiff;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::Tensor;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::{ParamGrads, Vmap};
    /// type I = Vmap<TestBackend>;
    /// type AD = Autodiff<I>;
    /// let device = Default::default();
    /// let model: Linear<AD> = LinearConfig::new(3, 2).init(&device);
    /// let loss = model.forward(Tensor::<AD, 2>::ones([1, 3], &device)).sum();
    /// let grads = ParamGrads::<I>::from_module(&mut loss.backward(), &model);
    ///
    /// let doubled = grads.clone().map_flat(|g| g * 2.0);
    /// let w: Tensor<I, 2> = doubled.get("weight").unwrap();
    /// assert_eq!(w.dims(), [3, 2]);
    /// assert_eq!(w.into_data().to_vec::<f32>().unwrap(), vec![2.0; 6]);
    /// ```
    ///
    /// # Panics
    /// If `f` returns a vector of another length than it was given (a bug in `f`: the map is
    /// for elementwise functions).
    pub fn map_flat(self, f: impl Fn(Tensor<B, 1>) -> Tensor<B, 1>) -> Self {
        self.map(|path, g| {
            let shape = g.shape();
            let n = shape.num_elements();
            let flat = Tensor::<B, 1>::from_primitive(g).reshape([n]);
            let out = f(flat);
            assert_eq!(
                out.dims()[0],
                n,
                "ParamGrads::map_flat: the function returned {} values for `{path}`, which has {n}; \
                 map_flat is for elementwise functions",
                out.dims()[0]
            );
            TensorPrimitive::Float(B::float_reshape(out.into_primitive().tensor(), shape))
        })
    }

    /// Per-example gradients (leading batch dim) averaged over the batch: the batch gradient of
    /// a mean loss.
    pub fn mean_batch(self) -> Self {
        self.map(|_, g| TensorPrimitive::Float(reduce_first::<B>(g.tensor(), true)))
    }

    /// Per-example gradients summed over the batch.
    pub fn sum_batch(self) -> Self {
        self.map(|_, g| TensorPrimitive::Float(reduce_first::<B>(g.tensor(), false)))
    }

    /// Per-example global L2 norms over all parameters: shape `[batch]`.
    ///
    /// # Panics
    /// If there is no gradient.
    pub fn per_example_norms(&self) -> Tensor<B, 1> {
        let mut total: Option<Tensor<B, 1>> = None;
        for (_, _, g) in &self.entries {
            let shape = g.shape();
            let rows = shape[0];
            let cols = shape.num_elements() / rows.max(1);
            let flat = B::float_reshape(g.clone().tensor(), [rows, cols].into());
            let t: Tensor<B, 2> = Tensor::from_primitive(TensorPrimitive::Float(flat));
            let sq = (t.clone() * t).sum_dim(1).squeeze_dim::<1>(1);
            total = Some(match total {
                Some(acc) => acc + sq,
                None => sq,
            });
        }
        total.expect("per_example_norms: no gradient").sqrt()
    }

    /// Zeros in the shape of every trainable parameter of `module`, keyed as
    /// [`from_module`](Self::from_module) keys them: the gradient of an empty batch.
    pub fn zeros_like<AB, M>(module: &M) -> Self
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let mut zeros = Zeros::<AB> {
            path: Vec::new(),
            out: Vec::new(),
        };
        module.visit(&mut zeros);
        Self { entries: zeros.out }
    }

    /// The entrywise sum of two gradient trees of one module (the same parameters in the same
    /// order, as two calls on one model give).
    pub(crate) fn sum_with(self, other: Self) -> Self {
        debug_assert_eq!(self.entries.len(), other.entries.len());
        Self {
            entries: self
                .entries
                .into_iter()
                .zip(other.entries)
                .map(|((p, i, a), (_, _, b))| {
                    (
                        p,
                        i,
                        TensorPrimitive::Float(B::float_add(a.tensor(), b.tensor())),
                    )
                })
                .collect(),
        }
    }

    /// Converts to Burn's [`GradientsParams`] for `optimizer.step(lr, model, grads)`.
    pub fn into_gradients_params(self) -> GradientsParams {
        let mut out = GradientsParams::new();
        for (_, id, g) in self.entries {
            register::<B>(&mut out, id, g);
        }
        out
    }
}

fn register<B: Backend>(out: &mut GradientsParams, id: ParamId, g: TensorPrimitive<B>) {
    macro_rules! by_rank {
        ($($d:literal),*) => {
            match g.rank() {
                $($d => out.register::<B, $d>(id, Tensor::from_primitive(g)),)*
                r => panic!("ParamGrads: parameters of rank {r} are not supported"),
            }
        };
    }
    by_rank!(1, 2, 3, 4, 5, 6, 7, 8)
}

/// Sums (or averages) over the leading dim and drops it.
fn reduce_first<B: Backend>(t: B::FloatTensorPrimitive, mean: bool) -> B::FloatTensorPrimitive {
    let shape = t.shape();
    let r = if mean {
        B::float_mean_dim(t, 0)
    } else {
        B::float_sum_dim(t, 0)
    };
    B::float_reshape(r, shape.iter().skip(1).copied().collect())
}

impl<B: Backend> Tree<B> for ParamGrads<B> {
    fn flatten_into(self, leaves: &mut Vec<Leaf<B>>) -> TreeDef {
        let mut keys = Vec::with_capacity(self.entries.len() + 1);
        let mut children = Vec::with_capacity(self.entries.len() + 1);
        let ids: Vec<(String, ParamId)> = self
            .entries
            .iter()
            .map(|(p, i, _)| (p.clone(), *i))
            .collect();
        keys.push(Key::Field("#ids".into()));
        children.push(TreeDef::Static(std::sync::Arc::new(ids)));
        for (p, _, g) in self.entries {
            keys.push(Key::Field(p));
            leaves.push(Leaf::Float(g));
            children.push(TreeDef::Leaf);
        }
        TreeDef::Node {
            kind: NodeKind::Struct("ParamGrads"),
            keys,
            children,
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
        let bad = |leaves: &Leaves<B>| VmapError::TreeMismatch {
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
        let Some(TreeDef::Static(ids)) = children.first() else {
            return Err(bad(leaves));
        };
        let ids = ids
            .downcast_ref::<Vec<(String, ParamId)>>()
            .ok_or_else(|| bad(leaves))?;
        let mut entries = Vec::with_capacity(ids.len());
        for (path, id) in ids {
            match leaves.with_key(Key::Field(path.clone()), |l| l.next_leaf())? {
                Leaf::Float(g) => entries.push((path.clone(), *id, g)),
                other => {
                    return Err(VmapError::TreeMismatch {
                        what: "tree".into(),
                        path: path.clone(),
                        why: format!(
                            "expected a float gradient, found a {} tensor",
                            other.kind_name()
                        ),
                    });
                }
            }
        }
        Ok(Self { entries })
    }
}

/// Makes `module` ready for a per-example transform, or says why it cannot be: every
/// parameter is read once (Burn initializes parameters lazily, on first use, and that random
/// draw must not happen inside vmap), and a module that mixes the examples of a batch is refused
/// before anything runs, so its state is left as it was.
///
/// The refused layers are those whose training-mode forward pass computes statistics over the
/// batch: Burn's `BatchNorm` (on an autodiff backend it normalizes with the batch's mean and
/// variance and overwrites its running statistics). A per-example gradient through it is not
/// the gradient of one example, and under vmap its running statistics would become batched
/// tensors that outlive the call.
///
/// # Errors
/// [`VmapError::MixesExamples`] naming the module's path and the fix.
pub(crate) fn prepare_module<B: Backend, M: burn::module::Module<B>>(
    module: &M,
    transform: &'static str,
) -> Result<(), VmapError> {
    let mut check = CheckModule {
        path: Vec::new(),
        found: None,
    };
    module.visit(&mut check);
    if let Some((path, layer)) = check.found {
        return Err(VmapError::MixesExamples {
            transform,
            path,
            layer,
        });
    }
    module.visit(&mut InitParams);
    Ok(())
}

/// The layers whose training-mode forward pass mixes the examples of a batch, by the type name
/// Burn's `#[derive(Module)]` reports for the fields they own (`"Struct:BatchNorm"`).
const MIXES_EXAMPLES: &[&str] = &["BatchNorm"];

/// Finds the first layer of [`MIXES_EXAMPLES`] and its path (`""` for the module itself).
struct CheckModule {
    path: Vec<String>,
    found: Option<(String, &'static str)>,
}

impl<B: Backend> ModuleVisitor<B> for CheckModule {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        let owner = container_type.strip_prefix("Struct:").unwrap_or("");
        if self.found.is_none()
            && let Some(layer) = MIXES_EXAMPLES.iter().find(|l| **l == owner)
        {
            // `name` is a field of the layer: the layer's own path is the enclosing one.
            self.found = Some((self.path.join("."), layer));
        }
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
}

/// Initializes every parameter of `module` now: reads each once, which runs Burn's lazy
/// initialization.
///
/// Burn draws a parameter's initial values on first use, and each clone of a parameter that was
/// never read draws its own: two clones of a fresh model (say, one per optimizer, or a
/// baseline and a DP run) start from different weights. Call this once after `init` to fix the
/// weights. The transforms that take a module ([`per_example_grads`],
/// [`micro_grad_module`](crate::micro_grad_module)) call it themselves (a draw inside vmap would
/// need a [`Randomness`](crate::Randomness) choice).
///
/// ```
/// use burn::module::Module;
/// use burn::nn::{Linear, LinearConfig};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::grad::init_params;
/// let model: Linear<TestBackend> = LinearConfig::new(3, 2).init(&Default::default());
/// init_params(&model);
/// let (a, b) = (model.clone(), model);
/// assert_eq!(a.weight.val().into_data(), b.weight.val().into_data());
/// ```
pub fn init_params<B: Backend, M: burn::module::Module<B>>(module: &M) {
    module.visit(&mut InitParams);
}

/// Reads every parameter once, which runs Burn's lazy initialization.
struct InitParams;

impl<B: Backend> ModuleVisitor<B> for InitParams {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

/// Per-example gradients of `module`'s parameters: JAX's `vmap(grad(loss))`.
///
/// `loss_fn(module, example)` computes the loss of ONE example (the batch axis of every input
/// leaf, axis 0, is removed); it runs once, on the whole batch, and one backward pass gives
/// every example's gradient. Returns [`ParamGrads`] whose tensors have a leading batch dim.
///
/// The module lives on `Autodiff<V>` with `V` = [`Vmap<B>`](crate::Vmap): build it there once
/// (it trains normally on that backend) — no parameter copy per step.
///
/// ```
/// use burn::backend::Autodiff;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{per_example_grads, Vmap};
/// type AD = Autodiff<Vmap<TestBackend>>;
/// let device = Default::default();
/// let model: Linear<AD> = LinearConfig::new(3, 1).init(&device);
/// let xs = Tensor::<AD, 2>::ones([5, 3], &device);
/// let grads = per_example_grads(&model, xs, |m: &Linear<AD>, x: Tensor<AD, 1>| {
///     m.forward(x).powi_scalar(2).sum()
/// })
/// .unwrap();
/// let w: Tensor<Vmap<TestBackend>, 3> = grads.get("weight").unwrap();
/// assert_eq!(w.dims(), [5, 3, 1]);
/// ```
///
/// # Errors
/// As [`vmap`]: inconsistent batch sizes, or inputs whose ranks do not fit `loss_fn`; and
/// [`VmapError::MixesExamples`] for a module containing a layer that mixes the examples of a
/// batch (`BatchNorm` in training mode), refused before anything runs.
pub fn per_example_grads<AB, M, I, A, F>(
    module: &M,
    inputs: I,
    loss_fn: F,
) -> Result<ParamGrads<AB::InnerBackend>, VmapError>
where
    AB: AutodiffBackend + BatchOps,
    AB::InnerBackend: BatchOps,
    M: AutodiffModule<AB>,
    I: Tree<AB>,
    A: Tree<AB>,
    F: Fn(&M, A) -> Tensor<AB, 1>,
{
    prepare_module(module, "per_example_grads")?;
    let grads: ParamGrads<AB::InnerBackend> = vmap(|args: A| {
        let loss = loss_fn(module, args);
        let mut grads = loss.backward();
        ParamGrads::<AB::InnerBackend>::from_module::<AB, M>(&mut grads, module)
    })
    .call(inputs)?;
    // Physical `[batch, ..]` tensors, as promised (layers' weight gradients are factored
    // products until read; `micro_grad_module` keeps them factored through clipping and sums).
    Ok(grads.map(|_, g| {
        TensorPrimitive::Float(<AB::InnerBackend as BatchOps>::float_materialize(
            g.tensor(),
        ))
    }))
}
