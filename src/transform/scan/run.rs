//! The loop every scan runs ([`Step`]): checking `xs`, calling the step, checking what it
//! returns, and stacking the kept outputs.

use core::marker::PhantomData;

use burn_backend::backend::Backend;
use burn_backend::{DType, Shape};

use super::LoopOptions;
use super::sliced::{SliceSpec, slice_indices};
use crate::VmapError;
use crate::transform::columns;
use crate::tree::{Leaf, Tree, TreeDef};

/// Kind, shape, dtype and device of a leaf: enough to make an empty stack or a zero-filled one.
#[derive(Debug, Clone)]
pub(super) struct LeafSpec<B: Backend> {
    pub(super) kind: &'static str,
    pub(super) shape: Vec<usize>,
    pub(super) dtype: DType,
    pub(super) device: B::Device,
}

impl<B: Backend> LeafSpec<B> {
    pub(super) fn of(leaf: &Leaf<B>) -> Self {
        Self {
            kind: leaf.kind_name(),
            shape: leaf.shape().to_vec(),
            dtype: leaf.dtype(),
            device: leaf.device(),
        }
    }

    /// A zero-filled (false) leaf of shape `shape`.
    pub(super) fn zeros(&self, shape: Vec<usize>) -> Leaf<B> {
        Leaf::zeros(self.kind, Shape::from(shape), self.dtype, &self.device)
    }

    /// The leaf stacked zero times: shape `[0, ..shape]`.
    pub(super) fn empty_stack(&self) -> Leaf<B> {
        let mut shape = self.shape.clone();
        shape.insert(0, 0);
        self.zeros(shape)
    }
}

/// `xs` checked and flattened: its leaves (each with a leading axis of size `length`).
pub(super) struct Xs<B: Backend> {
    pub(super) leaves: Vec<Leaf<B>>,
    pub(super) def: TreeDef,
    pub(super) length: usize,
}

/// Flattens `xs` and checks every leaf has a leading axis of the same size, equal to `length`
/// when it is given.
pub(super) fn check_xs<B: Backend, XS: Tree<B>>(
    transform: &'static str,
    xs: XS,
    length: Option<usize>,
) -> Result<Xs<B>, VmapError> {
    let (leaves, def) = xs.flatten();
    let paths = def.leaf_paths("xs");
    let mut sizes = Vec::with_capacity(leaves.len());
    for (leaf, path) in leaves.iter().zip(&paths) {
        let shape = leaf.shape();
        if shape.num_dims() == 0 {
            return Err(VmapError::NoLeadingAxis {
                transform,
                argument: path.clone(),
            });
        }
        sizes.push((path.clone(), shape[0]));
    }
    let n = match (sizes.first(), length) {
        (None, None) => return Err(VmapError::ScanNoLength { transform }),
        (None, Some(n)) => n,
        (Some(&(_, first)), _) => {
            let n = length.unwrap_or(first);
            if sizes.iter().any(|(_, s)| *s != n) {
                return Err(VmapError::ScanLengths {
                    transform,
                    arguments: sizes,
                    length,
                });
            }
            n
        }
    };
    Ok(Xs {
        leaves,
        def,
        length: n,
    })
}

/// Kind and shape of every leaf of a carry, to check each step returns the same.
pub(super) fn carry_signature<B: Backend>(leaves: &[Leaf<B>]) -> Vec<(&'static str, Vec<usize>)> {
    leaves
        .iter()
        .map(|l| (l.kind_name(), l.shape().to_vec()))
        .collect()
}

pub(super) fn check_signature<B: Backend>(
    transform: &'static str,
    what: &str,
    root: &str,
    def: &TreeDef,
    leaves: &[Leaf<B>],
    expected: &[(&'static str, Vec<usize>)],
    step: usize,
) -> Result<(), VmapError> {
    let got = carry_signature(leaves);
    if got.len() != expected.len() {
        return Err(VmapError::ScanShapeMismatch {
            transform,
            what: what.into(),
            path: root.into(),
            step,
            expected: format!("{} leaves", expected.len()),
            got: format!("{} leaves", got.len()),
        });
    }
    for ((g, e), path) in got.iter().zip(expected).zip(def.leaf_paths(root)) {
        if g != e {
            return Err(VmapError::ScanShapeMismatch {
                transform,
                what: what.into(),
                path,
                step,
                expected: format!("a {} tensor of shape {:?}", e.0, e.1),
                got: format!("a {} tensor of shape {:?}", g.0, g.1),
            });
        }
    }
    Ok(())
}

/// What the loop gives back: the final carry, the kept outputs (by step index, leaves of `y`),
/// and the structure of `y` with a spec per leaf (from the first step; `None` with no step).
pub(super) struct Looped<B: Backend, C> {
    pub(super) carry: C,
    pub(super) kept: Vec<(usize, Vec<Leaf<B>>)>,
    pub(super) y: Option<(TreeDef, Vec<LeafSpec<B>>)>,
}

/// A scan's step function `f` with the types it works on (the backend `B`, the carry `C`, one
/// row `X` of `xs`, one output `Y`): the loop and its variants are its methods.
pub(super) struct Step<'a, B, C, X, Y, F> {
    transform: &'static str,
    f: &'a F,
    types: PhantomData<StepTypes<B, C, X, Y>>,
}

/// The types a [`Step`] works on (`f: Fn(C, X) -> (C, Y)` on backend `B`).
type StepTypes<B, C, X, Y> = fn(C, X) -> (C, Y, B);

/// What running some steps gives: the final carry's leaves, every step's output leaves (in the
/// order the steps were given), and the structure of one output with a spec per leaf.
pub(super) struct Ran<B: Backend> {
    pub(super) carry: Vec<Leaf<B>>,
    pub(super) ys: Vec<Vec<Leaf<B>>>,
    pub(super) y_def: TreeDef,
    pub(super) y_specs: Vec<LeafSpec<B>>,
}

impl<'a, B, C, X, Y, F> Step<'a, B, C, X, Y, F>
where
    B: Backend,
    C: Tree<B>,
    X: Tree<B>,
    Y: Tree<B>,
    F: Fn(C, X) -> (C, Y),
{
    /// `f` as the step of `transform` (named in errors).
    pub(super) fn new(transform: &'static str, f: &'a F) -> Self {
        Self {
            transform,
            f,
            types: PhantomData,
        }
    }

    /// The loop with only the outputs `ys[start:stop:step]` kept (every output for the default
    /// slice): `scan` and `sliced_scan`.
    pub(super) fn sliced<XS: Tree<B>, YS: Tree<B>>(
        &self,
        init: C,
        xs: XS,
        opts: LoopOptions,
        slice: SliceSpec,
    ) -> Result<(C, YS), VmapError> {
        let xs = check_xs(self.transform, xs, opts.length)?;
        let n = xs.length;
        let selected = slice_indices(n, slice)?;
        // Position of step t in the output, for the selected steps.
        let mut slot: Vec<Option<usize>> = vec![None; n];
        for (j, &t) in selected.iter().enumerate() {
            slot[t] = Some(j);
        }
        if n == 0 {
            return self.empty(init, &xs);
        }
        let looped = self.run_loop(
            init,
            order(n, opts.reverse),
            &xs.def,
            |t| xs.leaves.iter().map(|l| l.index(t)).collect(),
            |t| slot[t].is_some(),
        )?;
        let (y_def, specs) = looped.y.expect("at least one step ran");
        let mut kept: Vec<(usize, Vec<Leaf<B>>)> = looped
            .kept
            .into_iter()
            .map(|(t, y)| (slot[t].expect("kept steps are selected"), y))
            .collect();
        kept.sort_by_key(|(j, _)| *j);
        let ys = stack_ys(kept.into_iter().map(|(_, y)| y).collect(), &y_def, &specs)?;
        Ok((looped.carry, ys))
    }

    /// The scan of no step: the carry is `init`, and the outputs have a zero-length leading
    /// axis (their structure from a [`dry_run`](Self::dry_run)).
    pub(super) fn empty<YS: Tree<B>>(&self, init: C, xs: &Xs<B>) -> Result<(C, YS), VmapError> {
        let (leaves, def) = init.flatten();
        let (y_def, specs) = self.dry_run(leaves.clone(), &def, xs)?;
        let carry = C::unflatten_named(&def, leaves, "init")?;
        Ok((carry, stack_ys(Vec::new(), &y_def, &specs)?))
    }

    /// Runs `steps` (step indices, in that order) from the carry `carry` (leaves of the
    /// structure `carry_def`), step `steps[i]` reading the row `xs_steps[i]`; keeps every
    /// output. A chunk of `checkpoint_chunked_scan`.
    pub(super) fn run_steps(
        &self,
        carry_def: &TreeDef,
        carry: Vec<Leaf<B>>,
        steps: &[usize],
        x_def: &TreeDef,
        xs_steps: Vec<Vec<Leaf<B>>>,
    ) -> Result<Ran<B>, VmapError> {
        let init = C::unflatten_named(carry_def, carry, "carry")?;
        let mut xs_steps: Vec<Option<Vec<Leaf<B>>>> = xs_steps.into_iter().map(Some).collect();
        let position = |t: usize| steps.iter().position(|&s| s == t).expect("a chunk step");
        let looped = self.run_loop(
            init,
            steps.iter().copied(),
            x_def,
            |t| {
                xs_steps[position(t)]
                    .take()
                    .expect("each step reads its row once")
            },
            |_| true,
        )?;
        let (y_def, y_specs) = looped.y.expect("a chunk has at least one step");
        let mut ys: Vec<Option<Vec<Leaf<B>>>> = steps.iter().map(|_| None).collect();
        for (t, y) in looped.kept {
            ys[position(t)] = Some(y);
        }
        Ok(Ran {
            carry: looped.carry.flatten().0,
            ys: ys
                .into_iter()
                .map(|y| y.expect("every step kept"))
                .collect(),
            y_def,
            y_specs,
        })
    }

    /// Runs `f` over `steps` (step indices, in execution order), reading `x_t` with `x_at(t)`;
    /// keeps the outputs of the steps for which `keep(t)` holds.
    fn run_loop(
        &self,
        init: C,
        steps: impl Iterator<Item = usize>,
        x_def: &TreeDef,
        mut x_at: impl FnMut(usize) -> Vec<Leaf<B>>,
        mut keep: impl FnMut(usize) -> bool,
    ) -> Result<Looped<B, C>, VmapError> {
        let (leaves, def) = init.flatten();
        let signature = carry_signature(&leaves);
        let mut carry = C::unflatten_named(&def, leaves, "init")?;
        let mut kept = Vec::new();
        let mut y_info: Option<(TreeDef, Vec<LeafSpec<B>>)> = None;
        for t in steps {
            let x = X::unflatten_named(x_def, x_at(t), "xs")?;
            let (c, y) = (self.f)(carry, x);
            let (c_leaves, c_def) = c.flatten();
            check_signature(
                self.transform,
                "carry",
                "carry",
                &c_def,
                &c_leaves,
                &signature,
                t,
            )?;
            carry = C::unflatten_named(&c_def, c_leaves, "carry")?;
            let (y_leaves, y_def) = y.flatten();
            match &y_info {
                None => {
                    y_info = Some((y_def, y_leaves.iter().map(LeafSpec::of).collect()));
                }
                Some((def0, specs)) => {
                    let expected: Vec<_> =
                        specs.iter().map(|s| (s.kind, s.shape.clone())).collect();
                    check_signature(self.transform, "ys", "y", def0, &y_leaves, &expected, t)?;
                }
            }
            if keep(t) {
                kept.push((t, y_leaves));
            }
        }
        Ok(Looped {
            carry,
            kept,
            y: y_info,
        })
    }

    /// The structure of `y` when no step runs: `f` is called once on `init` and a zero-filled
    /// `x` (its carry is dropped), the way JAX evaluates the shapes of an empty scan.
    fn dry_run(
        &self,
        init_leaves: Vec<Leaf<B>>,
        init_def: &TreeDef,
        xs: &Xs<B>,
    ) -> Result<(TreeDef, Vec<LeafSpec<B>>), VmapError> {
        let carry = C::unflatten_named(init_def, init_leaves, "init")?;
        let x_leaves = xs
            .leaves
            .iter()
            .map(|l| {
                let spec = LeafSpec::of(l);
                spec.zeros(spec.shape[1..].to_vec())
            })
            .collect();
        let x = X::unflatten_named(&xs.def, x_leaves, "xs")?;
        let (_, y) = (self.f)(carry, x);
        let (leaves, def) = y.flatten();
        Ok((def, leaves.iter().map(LeafSpec::of).collect()))
    }
}

/// Stacks the kept outputs, in the order given, into `YS`.
pub(super) fn stack_ys<B: Backend, YS: Tree<B>>(
    kept: Vec<Vec<Leaf<B>>>,
    def: &TreeDef,
    specs: &[LeafSpec<B>],
) -> Result<YS, VmapError> {
    let stacked = columns(kept, specs.len())
        .into_iter()
        .zip(specs)
        .map(|(col, spec)| {
            if col.is_empty() {
                spec.empty_stack()
            } else {
                Leaf::stack(col)
            }
        })
        .collect();
    YS::unflatten_named(def, stacked, "ys")
}

/// Step indices in execution order.
pub(super) fn order(n: usize, reverse: bool) -> Box<dyn Iterator<Item = usize>> {
    if reverse {
        Box::new((0..n).rev())
    } else {
        Box::new(0..n)
    }
}
