//! The loop every scan runs ([`Body`]): checking `xs`, calling the step on the user's tensors,
//! checking what it returns, and stacking the kept outputs.

use std::marker::PhantomData;

use burn_backend::Shape;

use crate::VmapError;
use crate::tree::{Leaf, Tree, TreeDef};

/// `xs` checked and flattened: its leaves (each with a leading axis of size `length`).
pub(super) struct Xs {
    pub(super) leaves: Vec<Leaf>,
    pub(super) def: TreeDef,
    pub(super) length: usize,
}

impl Xs {
    /// Flattens `xs` and checks every leaf has a leading axis of the same size, equal to
    /// `length` when it is given.
    ///
    /// # Errors
    /// [`VmapError::NoLeadingAxis`], [`VmapError::ScanLengths`], [`VmapError::ScanNoLength`].
    pub(super) fn new<XS: Tree>(
        transform: &'static str,
        xs: XS,
        length: Option<usize>,
    ) -> Result<Self, VmapError> {
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
        let length = match (sizes.first(), length) {
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
        Ok(Self {
            leaves,
            def,
            length,
        })
    }

    /// Row `t` of every leaf.
    pub(super) fn row(&self, t: usize) -> Vec<Leaf> {
        self.leaves.iter().map(|l| l.index(0, t)).collect()
    }
}

/// Kind and shape of every leaf: what every step must keep (the carry) or repeat (the outputs).
pub(super) fn signature(leaves: &[Leaf]) -> Vec<(&'static str, Vec<usize>)> {
    leaves
        .iter()
        .map(|l| (l.kind_name(), l.shape().to_vec()))
        .collect()
}

/// What running some steps gives: the final carry, the kept outputs (by step index) and the
/// structure of one output with one of its leaves per position (`None` when no step ran).
pub(super) struct Looped<C> {
    pub(super) carry: C,
    pub(super) kept: Vec<(usize, Vec<Leaf>)>,
    pub(super) y: Option<(TreeDef, Vec<Leaf>)>,
}

/// The signature of a scan's step function.
pub(super) type StepFn<C, X, Y> = fn(C, X) -> (C, Y);

/// A scan's step function `f: Fn(C, X) -> (C, Y)`, called on the user's tensors: the loop and
/// its variants are its methods.
pub(super) struct Body<'a, F, C, X, Y> {
    transform: &'static str,
    f: &'a F,
    types: PhantomData<StepFn<C, X, Y>>,
}

impl<'a, F, C, X, Y> Body<'a, F, C, X, Y>
where
    F: Fn(C, X) -> (C, Y),
    C: Tree,
    X: Tree,
    Y: Tree,
{
    /// `f` as the step of `transform` (named in errors).
    pub(super) fn new(transform: &'static str, f: &'a F) -> Self {
        Self {
            transform,
            f,
            types: PhantomData,
        }
    }

    /// Runs `f` over `steps` (step indices, in execution order) from `init`, step `t` reading
    /// `x_at(t)` (leaves of structure `x_def`); keeps the outputs of the steps for which
    /// `keep(t)` holds, and checks that every step keeps the carry's structure and shapes and
    /// repeats the first step's output shapes.
    ///
    /// # Errors
    /// [`VmapError::ScanShapeMismatch`], and the tree errors of `f`'s types.
    pub(super) fn run(
        &self,
        init: C,
        steps: impl Iterator<Item = usize>,
        x_def: &TreeDef,
        mut x_at: impl FnMut(usize) -> Vec<Leaf>,
        mut keep: impl FnMut(usize) -> bool,
    ) -> Result<Looped<C>, VmapError> {
        let (leaves, def) = init.flatten();
        let expected = signature(&leaves);
        let mut carry = C::unflatten_named(&def, leaves, "init")?;
        let mut kept = Vec::new();
        let mut y: Option<(TreeDef, Vec<Leaf>)> = None;
        for t in steps {
            let x = X::unflatten_named(x_def, x_at(t), "xs")?;
            let (c, out) = (self.f)(carry, x);
            let (c_leaves, c_def) = c.flatten();
            self.check("carry", "carry", &c_def, &c_leaves, &expected, t)?;
            carry = C::unflatten_named(&c_def, c_leaves, "carry")?;
            let (y_leaves, y_def) = out.flatten();
            match &y {
                None => y = Some((y_def, y_leaves.clone())),
                Some((def0, first)) => {
                    self.check("ys", "y", def0, &y_leaves, &signature(first), t)?;
                }
            }
            if keep(t) {
                kept.push((t, y_leaves));
            }
        }
        Ok(Looped { carry, kept, y })
    }

    /// The structure of one output when no step runs: `f` is called once on `init` and a
    /// zero-filled `x` (its carry is dropped), the way JAX evaluates the shapes of an empty scan.
    pub(super) fn dry_run(&self, init: C, xs: &Xs) -> Result<(TreeDef, Vec<Leaf>), VmapError> {
        let x_leaves = xs
            .leaves
            .iter()
            .map(|l| {
                let shape = l.shape();
                l.zeros_like(Shape::from(shape.as_slice()[1..].to_vec()))
            })
            .collect();
        let x = X::unflatten_named(&xs.def, x_leaves, "xs")?;
        let (_, y) = (self.f)(init, x);
        let (leaves, def) = y.flatten();
        Ok((def, leaves))
    }

    /// Checks the leaves a step returned against `expected`.
    fn check(
        &self,
        what: &str,
        root: &str,
        def: &TreeDef,
        leaves: &[Leaf],
        expected: &[(&'static str, Vec<usize>)],
        step: usize,
    ) -> Result<(), VmapError> {
        let mismatch = |path: String, expected: String, got: String| VmapError::ScanShapeMismatch {
            transform: self.transform,
            what: what.into(),
            path,
            step,
            expected,
            got,
        };
        let got = signature(leaves);
        if got.len() != expected.len() {
            return Err(mismatch(
                root.into(),
                format!("{} leaves", expected.len()),
                format!("{} leaves", got.len()),
            ));
        }
        for ((g, e), path) in got.iter().zip(expected).zip(def.leaf_paths(root)) {
            if g != e {
                return Err(mismatch(
                    path,
                    format!("a {} tensor of shape {:?}", e.0, e.1),
                    format!("a {} tensor of shape {:?}", g.0, g.1),
                ));
            }
        }
        Ok(())
    }
}

/// Stacks the kept outputs (rows of leaves, in the order given) along a new leading axis into
/// `YS`; with no row, every leaf is an empty stack shaped like `examples` (one output's leaves).
///
/// # Errors
/// The tree errors of `YS` against the outputs' structure `def`.
pub(super) fn stack_ys<YS: Tree>(
    rows: Vec<Vec<Leaf>>,
    def: &TreeDef,
    examples: &[Leaf],
) -> Result<YS, VmapError> {
    let mut columns: Vec<Vec<Leaf>> = examples.iter().map(|_| Vec::new()).collect();
    for row in rows {
        for (column, leaf) in columns.iter_mut().zip(row) {
            column.push(leaf);
        }
    }
    let stacked = columns
        .into_iter()
        .zip(examples)
        .map(|(column, example)| {
            if column.is_empty() {
                let mut shape = example.shape();
                shape.insert(0, 0);
                example.zeros_like(shape)
            } else {
                Leaf::stack(column, 0)
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
