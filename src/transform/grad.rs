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

use crate::batching::BatchOps;
use crate::transform::vmap::vmap;
use crate::tree::{Key, Leaf, Leaves, NodeKind, Tree, TreeDef};
use crate::VmapError;

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
                    })
                }
            }
        }
        Ok(Self { entries })
    }
}

/// Reads every parameter once, which runs Burn's lazy initialization (its random draw must not
/// happen inside vmap, where random ops need a `Randomness` choice).
pub(crate) fn init_params<B: Backend, M: burn::module::Module<B>>(module: &M) {
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
/// As [`vmap`]: inconsistent batch sizes, or inputs whose ranks do not fit `loss_fn`.
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
    // Burn initializes parameters lazily, on first use; the random draw must not happen inside
    // vmap (where random ops need a `Randomness` choice and would otherwise be refused).
    module.visit(&mut InitParams);
    let grads: ParamGrads<AB::InnerBackend> = vmap(|args: A| {
        let loss = loss_fn(module, args);
        let mut grads = loss.backward();
        ParamGrads::<AB::InnerBackend>::from_module::<AB, M>(&mut grads, module)
    })
    .call(inputs)?;
    // Physical `[batch, ..]` tensors, as promised (dense layers' weight gradients are lazy outer
    // products until read; `micro_grad_module` keeps them factored through clipping and sums).
    Ok(grads.map(|_, g| {
        TensorPrimitive::Float(<AB::InnerBackend as BatchOps>::float_materialize(
            g.tensor(),
        ))
    }))
}
