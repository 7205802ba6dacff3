//! The loop every scan runs: checking `xs`, calling the step, checking what it returns, and
//! stacking the kept outputs.

use burn_backend::backend::Backend;
use burn_backend::{DType, Shape};

use crate::transform::columns;
use crate::tree::{Leaf, Tree, TreeDef};
use crate::VmapError;

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

/// Runs `f` over `steps` (step indices, in execution order), reading `x_t` with `x_at(t)`;
/// keeps the outputs of the steps for which `keep(t)` holds.
pub(super) fn run_loop<B, C, X, Y, F>(
    transform: &'static str,
    f: &F,
    init: C,
    steps: impl Iterator<Item = usize>,
    x_def: &TreeDef,
    mut x_at: impl FnMut(usize) -> Vec<Leaf<B>>,
    mut keep: impl FnMut(usize) -> bool,
) -> Result<Looped<B, C>, VmapError>
where
    B: Backend,
    C: Tree<B>,
    X: Tree<B>,
    Y: Tree<B>,
    F: Fn(C, X) -> (C, Y),
{
    let (leaves, def) = init.flatten();
    let signature = carry_signature(&leaves);
    let mut carry = C::unflatten_named(&def, leaves, "init")?;
    let mut kept = Vec::new();
    let mut y_info: Option<(TreeDef, Vec<LeafSpec<B>>)> = None;
    for t in steps {
        let x = X::unflatten_named(x_def, x_at(t), "xs")?;
        let (c, y) = f(carry, x);
        let (c_leaves, c_def) = c.flatten();
        check_signature(
            transform, "carry", "carry", &c_def, &c_leaves, &signature, t,
        )?;
        carry = C::unflatten_named(&c_def, c_leaves, "carry")?;
        let (y_leaves, y_def) = y.flatten();
        match &y_info {
            None => {
                y_info = Some((y_def, y_leaves.iter().map(LeafSpec::of).collect()));
            }
            Some((def0, specs)) => {
                let expected: Vec<_> = specs.iter().map(|s| (s.kind, s.shape.clone())).collect();
                check_signature(transform, "ys", "y", def0, &y_leaves, &expected, t)?;
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

/// The structure of `y` when no step runs: `f` is called once on `init` and a zero-filled `x`
/// (its carry is dropped), the way JAX evaluates the shapes of an empty scan.
pub(super) fn dry_run<B, C, X, Y, F>(
    f: &F,
    init_leaves: Vec<Leaf<B>>,
    init_def: &TreeDef,
    xs: &Xs<B>,
) -> Result<(TreeDef, Vec<LeafSpec<B>>), VmapError>
where
    B: Backend,
    C: Tree<B>,
    X: Tree<B>,
    Y: Tree<B>,
    F: Fn(C, X) -> (C, Y),
{
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
    let (_, y) = f(carry, x);
    let (leaves, def) = y.flatten();
    Ok((def, leaves.iter().map(LeafSpec::of).collect()))
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
