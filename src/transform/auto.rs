//! [`auto_vmap`]: broadcast a function written for inputs of fixed ranks over any leading batch
//! dims (jax_autovmap).

use burn_backend::Shape;

use crate::Vmap;
use crate::VmapError;
use crate::graph::Program;
use crate::graph::TensorSig;
use crate::guard;
use crate::level::{Level, Randomness, VmapScope};
use crate::runtime::{Job, UserBackend, on_backend};
use crate::transform::run::{
    Cache, any_autodiff, batch, common_device, lift, lower, record_on, unbatch,
};
use crate::tree::{Leaf, Spec, Tree};

/// The transform's name in errors.
const NAME: &str = "auto_vmap";

/// Base ranks: per argument (a tree prefix of the arguments) `Some(rank)`, the rank the function
/// expects, or `None`, passed whole (never mapped).
pub type Ranks = Spec<Option<usize>>;

impl From<usize> for Ranks {
    fn from(rank: usize) -> Self {
        Spec::Leaf(Some(rank))
    }
}

impl<const N: usize> From<[usize; N]> for Ranks {
    fn from(ranks: [usize; N]) -> Self {
        Spec::Seq(ranks.into_iter().map(|r| Spec::Leaf(Some(r))).collect())
    }
}

/// Broadcasts `f`, written for inputs of fixed *base ranks*, over any leading batch dims:
/// jax_autovmap's `auto_vmap`.
///
/// Every leaf with base rank `r` and shape `[b_1, .., b_k, c_1, .., c_r]` has the batch shape
/// `[b_1, .., b_k]` (its leading `ndim - r` dims). The batch shapes of all leaves are aligned
/// from the right and broadcast like numpy (a size-1 batch dim, or a missing one, broadcasts);
/// `f` runs on the core parts and the result has the shape `batch + core output shape`:
///
/// ```text
/// batch = broadcast(batch shape of every leaf)               # right-aligned, numpy rules
/// for idx in ndindex(batch):
///     out[idx] = f(leaf[idx broadcast to the leaf's batch shape] for every leaf)
/// ```
///
/// It runs as one batched call of `f`, one vmap level per batch dim (the outermost level maps
/// only the leaves that have that many batch dims): `f` is recorded once for one example (and
/// kept for later calls with the same per-example signature) and the recording runs on the
/// batch. A size-1 batch dim that broadcasts is not mapped: it is dropped by a reshape (a
/// view), never copied. Leaves with rank `None`, or with exactly their base rank, are passed
/// whole to every example. With no batch dim at all, `f` is simply called.
///
/// Ranks are a tree prefix of the arguments ([`Ranks`]): one rank for every leaf (`1`), one per
/// argument (`[0, 1, 2]`, `[Some(1), None]`), or nested [`Spec`]s for structs and maps
/// (`Spec::fields([("a", 1.into()), ("b", 0.into())])`). The default is `None` for every leaf.
///
/// # Example
/// jax_autovmap's README: `foo(s, v, m) = v·m·v + s·|v|` for a scalar `s`, a vector `v` and a
/// matrix `m`, i.e. ranks `(0, 1, 2)`, called with one scalar per example, 2 vectors and one
/// shared matrix:
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::auto_vmap;
/// let device = Device::default();
///
/// // Burn's scalars are one-element vectors here: `s` has base rank 1 with shape [1].
/// let foo = |(s, v, m): (Tensor<1>, Tensor<1>, Tensor<2>)| -> Tensor<1> {
///     let n = v.dims()[0] as f32; // |v|, the element count of one example's v
///     let mv = m.matmul(v.clone().unsqueeze_dim::<2>(1)).squeeze_dim::<1>(1);
///     (v * mv).sum() + s.mul_scalar(n)
/// };
/// let s = Tensor::<2>::from_floats([[2.0], [0.0]], &device); // batch shape [2]
/// let v = Tensor::<2>::ones([2, 3], &device); //                batch shape [2]
/// let m = Tensor::<2>::ones([3, 3], &device); //                batch shape []
///
/// let out: Tensor<2> = auto_vmap(foo).ranks([1, 1, 2]).call((s, v, m.clone())).unwrap();
/// assert_eq!(out.into_data().to_vec::<f32>().unwrap(), vec![15.0, 9.0]);
///
/// // Batch shapes broadcast from the right: [2, 1] x [4] -> [2, 4].
/// let s = Tensor::<3>::from_floats([[[1.0]], [[2.0]]], &device);
/// let v = Tensor::<2>::ones([4, 3], &device);
/// let out: Tensor<3> = auto_vmap(foo).ranks([1, 1, 2]).call((s, v, m)).unwrap();
/// assert_eq!(out.dims(), [2, 4, 1]);
/// ```
///
/// # Gradients
/// Like [`vmap`](crate::vmap), `auto_vmap` takes its arguments without their autodiff graph:
/// differentiate through it from a loss that calls it, under
/// [`per_example_grads`](crate::per_example_grads) (a parameter used by every example then gets
/// one gradient per example; the batch gradient is their sum).
///
/// # Shapes
/// Output leaf = broadcast batch shape + the shape `f` returns for one example.
///
/// # Errors
/// - [`VmapError::RankTooSmall`]: a leaf has fewer dims than its base rank;
/// - [`VmapError::IncompatibleBatchShapes`]: batch shapes that do not broadcast;
/// - [`VmapError::TreeMismatch`]: ranks that do not fit the arguments;
/// - [`VmapError::LeafMismatch`]: argument or result types whose ranks do not match;
/// - the recording errors of [`vmap`](crate::vmap) ([`VmapError::ForeignTensor`],
///   [`VmapError::ValueRead`], [`VmapError::Randomness`], ...).
pub fn auto_vmap<F>(f: F) -> AutoVmapped<F> {
    AutoVmapped {
        f,
        ranks: Spec::Leaf(None),
        randomness: Randomness::Error,
        cache: Cache::default(),
    }
}

/// A function broadcast by [`auto_vmap`].
#[derive(Debug, Clone)]
pub struct AutoVmapped<F> {
    f: F,
    ranks: Ranks,
    randomness: Randomness,
    cache: Cache,
}

/// How one leaf enters the batched call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeafPlan {
    /// Position of the leaf's first batch dim in the broadcast batch shape.
    first_pos: usize,
    /// For each batch dim of the leaf: mapped at its level (`true`) or dropped (`false`).
    mapped: Vec<bool>,
    /// The batch dim expanded to the broadcast size instead of dropped (see [`plan_leaf`]).
    expanded: Option<usize>,
}

impl<F> AutoVmapped<F> {
    /// Sets the base ranks (a tree prefix of the arguments, see [`auto_vmap`]).
    ///
    /// ```
    /// use burn_vmap::transform::auto_vmap;
    /// use burn_vmap::tree::Spec;
    /// let f = |x: ()| x;
    /// let _ = auto_vmap(f).ranks([Some(1), None]);
    /// let _ = auto_vmap(f).ranks(Spec::fields([("a", 1.into()), ("b", Spec::Leaf(None))]));
    /// ```
    pub fn ranks(mut self, ranks: impl Into<Ranks>) -> Self {
        self.ranks = ranks.into();
        self
    }

    /// What random ops inside `f` do, for every batch dim, as
    /// [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness) (default
    /// [`Randomness::Error`]).
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// The broadcast batch shape that calling with `inputs` would have, without calling `f`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::transform::auto_vmap;
    /// let d = Device::default();
    /// let f = |(v, m): (Tensor<1>, Tensor<2>)| m.matmul(v.unsqueeze_dim(1));
    /// let inputs = (Tensor::<3>::zeros([2, 1, 3], &d), Tensor::<3>::zeros([4, 3, 3], &d));
    /// assert_eq!(auto_vmap(f).ranks([1, 2]).batch_shape(inputs).unwrap(), vec![2, 4]);
    /// ```
    ///
    /// # Errors
    /// As [`call`](Self::call), for the checks that do not need `f`.
    pub fn batch_shape<I: Tree>(&self, inputs: I) -> Result<Vec<usize>, VmapError> {
        let (leaves, def) = inputs.flatten();
        let ranks = self.ranks.broadcast_to(&def, "ranks", "args")?;
        let paths = def.leaf_paths("args");
        let shapes: Vec<Vec<usize>> = leaves.iter().map(|l| l.shape().to_vec()).collect();
        let batch = batch_shapes(&shapes, &ranks, &paths)?;
        broadcast(&batch, &paths)
    }

    /// Applies the broadcast function to `inputs`.
    ///
    /// `I` is the argument tree with batch dims, `A` what `f` takes (base ranks), `R` what `f`
    /// returns and `O` the result (the broadcast batch dims in front of every leaf of `R`),
    /// named by the caller: its rank depends on the inputs' batch dims.
    ///
    /// # Errors
    /// See [`auto_vmap`].
    pub fn call<I, A, R, O>(&self, inputs: I) -> Result<O, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        O: Tree,
    {
        let (leaves, def) = inputs.flatten();
        let ranks = self.ranks.broadcast_to(&def, "ranks", "args")?;
        let paths = def.leaf_paths("args");
        let shapes: Vec<Vec<usize>> = leaves.iter().map(|l| l.shape().to_vec()).collect();
        let batch = batch_shapes(&shapes, &ranks, &paths)?;
        let target = broadcast(&batch, &paths)?;
        if target.is_empty() {
            // No batch dim: the unbatched fast path.
            let (out, out_def) = (self.f)(A::unflatten_named(&def, leaves, "args")?).flatten();
            return O::unflatten_named(&out_def, out, "out");
        }

        // Each leaf with its dropped dims reshaped away (a view), and the broadcast positions of
        // the batch dims it keeps, which lead its shape.
        let mut entered = Vec::with_capacity(leaves.len());
        let mut positions = Vec::with_capacity(leaves.len());
        for ((leaf, b), rank) in leaves.into_iter().zip(&batch).zip(&ranks) {
            match b {
                Some(b) if !b.is_empty() => {
                    let plan = plan_leaf(b, rank.unwrap_or(0), &target);
                    positions.push(
                        (0..b.len())
                            .filter(|&j| plan.mapped[j])
                            .map(|j| plan.first_pos + j)
                            .collect::<Vec<_>>(),
                    );
                    entered.push(enter(leaf, b, &plan, &target));
                }
                _ => {
                    positions.push(Vec::new());
                    entered.push(leaf);
                }
            }
        }
        let sigs: Vec<TensorSig> = entered
            .iter()
            .zip(&positions)
            .map(|(leaf, pos)| TensorSig {
                shape: Shape::from(leaf.shape().as_slice()[pos.len()..].to_vec()),
                dtype: leaf.dtype(),
            })
            .collect();
        let device = common_device(NAME, &entered)?;
        let autodiff = any_autodiff(&entered);
        let recorded = self.cache.get_or_record(&def, &sigs, autodiff, || {
            record_on::<A, R>(NAME, &self.f, &def, &sigs, autodiff, &device)
        })?;
        let job = Broadcast {
            program: &recorded.program,
            leaves: entered,
            positions,
            target,
            randomness: self.randomness,
        };
        let out = on_backend(NAME, &device, job)??;
        O::unflatten_named(&recorded.out_def, out, "out")
    }
}

/// A recorded program run with one vmap level per broadcast batch dim.
struct Broadcast<'a> {
    program: &'a Program,
    leaves: Vec<Leaf>,
    /// Per leaf: the broadcast positions of its leading (mapped) batch dims, outermost first.
    positions: Vec<Vec<usize>>,
    /// The broadcast batch shape.
    target: Vec<usize>,
    randomness: Randomness,
}

impl Job for Broadcast<'_> {
    type Output = Result<Vec<Leaf>, VmapError>;

    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output {
        let op = |message| VmapError::Op {
            transform: NAME,
            message,
        };
        // One level per broadcast batch dim, outermost first (levels increase inwards).
        let levels: Vec<Level> = self.target.iter().map(|_| Level::fresh()).collect();
        let mut inputs = Vec::with_capacity(self.leaves.len());
        for (leaf, pos) in self.leaves.into_iter().zip(&self.positions) {
            // Each batched dim in turn is the leaf's logical axis 0.
            let value = pos.iter().fold(lift::<B>(NAME, leaf)?, |v, &p| {
                batch::<Vmap<B>>(v, 0, levels[p])
            });
            inputs.push(value);
        }
        let scopes: Vec<VmapScope> = levels
            .iter()
            .zip(&self.target)
            .map(|(&level, &size)| VmapScope::enter(level, size, self.randomness))
            .collect();
        let outputs =
            guard::catch(|| self.program.run::<Vmap<B>>(inputs, &device)).map_err(op)??;
        if let Some(refused) = scopes.iter().find_map(VmapScope::take_refused) {
            return Err(VmapError::Randomness {
                transform: NAME,
                op: refused.op.into(),
                size: refused.size,
            });
        }
        drop(scopes);
        let mut result = Vec::with_capacity(outputs.len());
        for out in outputs {
            // Innermost level first: each one becomes logical axis 0, pushing the previous.
            let out = guard::catch(|| {
                levels
                    .iter()
                    .zip(&self.target)
                    .rev()
                    .fold(out, |v, (&level, &size)| {
                        unbatch::<Vmap<B>>(v, level, size, 0)
                    })
            })
            .map_err(op)?;
            result.push(Leaf(B::tensor(lower::<B>(out))));
        }
        Ok(result)
    }
}

/// The batch shape of every leaf (`None` for leaves passed whole).
fn batch_shapes(
    shapes: &[Vec<usize>],
    ranks: &[Option<usize>],
    paths: &[String],
) -> Result<Vec<Option<Vec<usize>>>, VmapError> {
    shapes
        .iter()
        .zip(ranks)
        .zip(paths)
        .map(|((shape, rank), path)| match rank {
            None => Ok(None),
            Some(r) if shape.len() < *r => Err(VmapError::RankTooSmall {
                argument: path.clone(),
                shape: shape.clone(),
                min_rank: *r,
            }),
            Some(r) => Ok(Some(shape[..shape.len() - r].to_vec())),
        })
        .collect()
}

/// numpy broadcasting of the batch shapes, aligned from the right.
fn broadcast(batch: &[Option<Vec<usize>>], paths: &[String]) -> Result<Vec<usize>, VmapError> {
    let n = batch.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let mut target: Vec<Option<usize>> = vec![None; n];
    for b in batch.iter().flatten() {
        for (j, &size) in b.iter().enumerate() {
            let t = &mut target[n - b.len() + j];
            match *t {
                _ if size == 1 => {}
                None | Some(1) => *t = Some(size),
                Some(s) if s == size => {}
                Some(_) => {
                    let (arguments, batch_shapes) = paths
                        .iter()
                        .zip(batch)
                        .filter_map(|(p, b)| match b {
                            Some(b) if !b.is_empty() => Some((p.clone(), b.clone())),
                            _ => None,
                        })
                        .unzip();
                    return Err(VmapError::IncompatibleBatchShapes {
                        arguments,
                        batch_shapes,
                    });
                }
            }
        }
    }
    Ok(target.into_iter().map(|s| s.unwrap_or(1)).collect())
}

/// Which batch dims of a leaf are mapped. A dim is mapped when its size is the broadcast size;
/// a size-1 dim that broadcasts is dropped (the leaf is shared along that level). Dropping every
/// batch dim of a rank-0 leaf would leave an unbatched rank-0 tensor, which some backends
/// cannot allocate (cubecl, see `compat.rs`): then its innermost batch dim is expanded (a view)
/// and mapped instead.
fn plan_leaf(b: &[usize], rank: usize, target: &[usize]) -> LeafPlan {
    let first_pos = target.len() - b.len();
    let mut mapped: Vec<bool> = b
        .iter()
        .enumerate()
        .map(|(j, &size)| size == target[first_pos + j])
        .collect();
    let mut expanded = None;
    if rank == 0 && !mapped.iter().any(|&m| m) {
        let j = b.len() - 1;
        mapped[j] = true;
        expanded = Some(j);
    }
    LeafPlan {
        first_pos,
        mapped,
        expanded,
    }
}

/// The leaf with its dropped batch dims reshaped away and the chosen one expanded: its mapped
/// batch dims lead its shape.
fn enter(leaf: Leaf, b: &[usize], plan: &LeafPlan, target: &[usize]) -> Leaf {
    let shape = leaf.shape().to_vec();
    let core = &shape[b.len()..];
    let mut leaf = leaf;
    if plan.mapped.iter().any(|&m| !m) {
        let kept: Vec<usize> = b
            .iter()
            .zip(&plan.mapped)
            .filter(|&(_, &m)| m)
            .map(|(&s, _)| s)
            .chain(core.iter().copied())
            .collect();
        leaf = leaf.reshape(Shape::from(kept));
    }
    if let Some(j) = plan.expanded {
        // The leaf keeps only this batch dim (size 1): expand it to the broadcast size.
        let mut dims = vec![target[plan.first_pos + j]];
        dims.extend_from_slice(core);
        leaf = leaf.expand(Shape::from(dims));
    }
    leaf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("args[{i}]")).collect()
    }

    #[test]
    fn should_broadcast_from_the_right() {
        let b = vec![Some(vec![2, 1, 1]), Some(vec![4]), Some(vec![3, 1]), None];
        assert_eq!(broadcast(&b, &paths(4)).unwrap(), vec![2, 3, 4]);
        let b = vec![Some(vec![]), Some(vec![1])];
        assert_eq!(broadcast(&b, &paths(2)).unwrap(), vec![1]);
        let b = vec![Some(vec![0]), Some(vec![1])];
        assert_eq!(broadcast(&b, &paths(2)).unwrap(), vec![0]);
    }

    #[test]
    fn should_name_every_batched_argument_when_shapes_conflict() {
        let b = vec![Some(vec![]), Some(vec![5]), Some(vec![4])];
        let e = broadcast(&b, &paths(3)).unwrap_err();
        assert_eq!(
            e,
            VmapError::IncompatibleBatchShapes {
                arguments: vec!["args[1]".into(), "args[2]".into()],
                batch_shapes: vec![vec![5], vec![4]],
            }
        );
    }

    #[test]
    fn should_drop_broadcast_dims_and_expand_only_rank0_leaves() {
        let p = plan_leaf(&[2, 1, 1], 0, &[2, 3, 4]);
        assert_eq!(p.mapped, vec![true, false, false]);
        assert_eq!(p.expanded, None);
        let p = plan_leaf(&[1], 1, &[4]);
        assert_eq!(p.mapped, vec![false]);
        let p = plan_leaf(&[1, 1], 0, &[3, 4]);
        assert_eq!((p.mapped, p.expanded), (vec![false, true], Some(1)));
    }
}
