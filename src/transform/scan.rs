//! Loops over the leading axis: [`scan`], [`sliced_scan`] and [`checkpoint_chunked_scan`]
//! (JAX's `lax.scan` and powerpax's sliced and checkpointed variants).
//!
//! All three run the same loop, written for one step:
//!
//! ```text
//! carry = init
//! for t in (0..n) or (0..n).rev() if reverse:
//!     carry, ys[t] = f(carry, xs[t])        # xs[t]: leaf[t] of every leaf of the xs tree
//! return carry, stack(ys)                   # ys[t] is always the output of the step that read xs[t]
//! ```
//!
//! Burn executes eagerly, so the loop is a Rust loop calling `f` once per step; carries, `xs`
//! and outputs are any [`Tree`] (tensors of any kind and rank, tuples, `Vec`, maps,
//! [`Static`](crate::Static) values that pass through untouched).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_autodiff::Autodiff;
use burn_backend::backend::Backend;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape, TensorMetadata};

use crate::tree::{rows, Leaf, Tree, TreeDef};
use crate::VmapError;

// =================================================================================================
// Type-erased leaf moves
// =================================================================================================

/// Kind, shape, dtype and device of a leaf: enough to make an empty stack or a zero-filled one.
#[derive(Debug, Clone)]
pub(crate) struct LeafSpec<B: Backend> {
    kind: &'static str,
    shape: Vec<usize>,
    dtype: DType,
    device: B::Device,
}

impl<B: Backend> LeafSpec<B> {
    pub(crate) fn of(leaf: &Leaf<B>) -> Self {
        Self {
            kind: leaf.kind_name(),
            shape: leaf.shape().to_vec(),
            dtype: leaf.dtype(),
            device: leaf.device(),
        }
    }

    /// A zero-filled (false) leaf of shape `shape`.
    fn zeros(&self, shape: Vec<usize>) -> Leaf<B> {
        Leaf::zeros(self.kind, Shape::from(shape), self.dtype, &self.device)
    }

    /// The leaf stacked zero times: shape `[0, ..shape]`.
    fn empty_stack(&self) -> Leaf<B> {
        let mut shape = self.shape.clone();
        shape.insert(0, 0);
        self.zeros(shape)
    }
}

// =================================================================================================
// The loop
// =================================================================================================

/// `xs` checked and flattened: its leaves (each with a leading axis of size `length`).
struct Xs<B: Backend> {
    leaves: Vec<Leaf<B>>,
    def: TreeDef,
    length: usize,
}

/// Flattens `xs` and checks every leaf has a leading axis of the same size, equal to `length`
/// when it is given.
fn check_xs<B: Backend, XS: Tree<B>>(
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
fn carry_signature<B: Backend>(leaves: &[Leaf<B>]) -> Vec<(&'static str, Vec<usize>)> {
    leaves
        .iter()
        .map(|l| (l.kind_name(), l.shape().to_vec()))
        .collect()
}

fn check_signature<B: Backend>(
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
struct Looped<B: Backend, C> {
    carry: C,
    kept: Vec<(usize, Vec<Leaf<B>>)>,
    y: Option<(TreeDef, Vec<LeafSpec<B>>)>,
}

/// Runs `f` over `steps` (step indices, in execution order), reading `x_t` with `x_at(t)`;
/// keeps the outputs of the steps for which `keep(t)` holds.
fn run_loop<B, C, X, Y, F>(
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
fn dry_run<B, C, X, Y, F>(
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
fn stack_ys<B: Backend, YS: Tree<B>>(
    kept: Vec<Vec<Leaf<B>>>,
    def: &TreeDef,
    specs: &[LeafSpec<B>],
) -> Result<YS, VmapError> {
    let mut columns: Vec<Vec<Leaf<B>>> = specs.iter().map(|_| Vec::new()).collect();
    for row in kept {
        for (col, leaf) in columns.iter_mut().zip(row) {
            col.push(leaf);
        }
    }
    let stacked = columns
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
fn order(n: usize, reverse: bool) -> Box<dyn Iterator<Item = usize>> {
    if reverse {
        Box::new((0..n).rev())
    } else {
        Box::new(0..n)
    }
}

// =================================================================================================
// scan
// =================================================================================================

/// Loops `f` over the leading axis of `xs`, threading a carry: JAX's `lax.scan`.
///
/// ```text
/// carry = init
/// for t in 0..n (n-1 down to 0 with .reverse(true)):
///     carry, ys[t] = f(carry, xs[t])
/// return (carry, stack(ys))
/// ```
///
/// `xs` is any [`Tree`] whose leaves share their leading size `n` (each step sees every leaf
/// without that axis); it may be `()` with [`length`](Scan::length). `ys[t]` is always the
/// output of the step that read `xs[t]`, also in reverse. `f` must return a carry of the same
/// structure, kinds and shapes as `init`, and outputs of the same shapes at every step.
///
/// Works on every backend; under `Autodiff<_>` gradients flow through the whole loop (every
/// step's intermediates are kept for the backward pass: see [`checkpoint_chunked_scan`] to
/// trade them for recomputation).
///
/// # Example
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{scan, TestBackend};
/// type B = TestBackend;
/// let device = Default::default();
///
/// // Running sum of the rows of xs.
/// let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let init = Tensor::<B, 1>::zeros([2], &device);
/// let step = |c: Tensor<B, 1>, x: Tensor<B, 1>| {
///     let c = c + x;
///     (c.clone(), c)
/// };
/// let (carry, ys): (Tensor<B, 1>, Tensor<B, 2>) = scan(step, init, xs).call().unwrap();
/// assert_eq!(carry.into_data().to_vec::<f32>().unwrap(), vec![9.0, 12.0]);
/// assert_eq!(ys.dims(), [3, 2]);
/// ```
///
/// # Shapes
/// `xs` leaves `(n, ...)`, `ys` leaves `(n, ...)` (a zero-length leading axis when `n = 0`; then
/// `f` is called once on `init` and a zero-filled `x` to learn the output shapes, and the carry
/// is `init`).
///
/// # Errors
/// - [`VmapError::NoLeadingAxis`]: a rank-0 leaf in `xs`;
/// - [`VmapError::ScanLengths`]: leaves of `xs` with different leading sizes, or a leading size
///   that differs from [`length`](Scan::length);
/// - [`VmapError::ScanNoLength`]: `xs` has no tensor and no length was given;
/// - [`VmapError::ScanShapeMismatch`]: a step returned a carry that does not match `init`, or an
///   output that does not match the first step's;
/// - [`VmapError::TreeMismatch`], [`VmapError::LeafMismatch`]: the types of `f` do not fit the
///   trees (e.g. `x`'s rank is not one less than `xs`'s).
pub fn scan<F, C, XS>(f: F, init: C, xs: XS) -> Scan<F, C, XS> {
    Scan {
        f,
        init,
        xs,
        opts: LoopOptions::default(),
    }
}

/// Options shared by the scans.
#[derive(Debug, Clone, Copy, Default)]
struct LoopOptions {
    length: Option<usize>,
    reverse: bool,
}

/// A scan being configured: see [`scan`].
pub struct Scan<F, C, XS> {
    f: F,
    init: C,
    xs: XS,
    opts: LoopOptions,
}

macro_rules! loop_options {
    () => {
        /// Sets the number of steps: required when `xs` has no tensor (`()`), checked against
        /// the leading size of `xs` otherwise.
        pub fn length(mut self, n: usize) -> Self {
            self.opts.length = Some(n);
            self
        }

        /// Runs the steps from the last element of `xs` to the first. `ys[t]` stays the output
        /// of the step that read `xs[t]`.
        pub fn reverse(mut self, reverse: bool) -> Self {
            self.opts.reverse = reverse;
            self
        }

        /// `lax.scan`'s unrolling factor (steps per iteration of a compiled loop), accepted for
        /// parity and ignored: Burn runs eagerly, every step is one call of `f` whatever the
        /// factor, so it changes neither the values nor the work done.
        pub fn unroll(self, _steps_per_iteration: usize) -> Self {
            self
        }
    };
}

impl<F, C, XS> Scan<F, C, XS> {
    loop_options!();

    /// Runs the loop; returns the final carry and the stacked outputs.
    ///
    /// `C` is the carry, `XS` the scanned tree, `X` one step of it (leading axis removed), `Y`
    /// one step's output and `YS` the stacked outputs (a leading axis added to every leaf).
    ///
    /// # Errors
    /// See [`scan`].
    pub fn call<B, X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        B: Backend,
        C: Tree<B>,
        XS: Tree<B>,
        X: Tree<B>,
        Y: Tree<B>,
        YS: Tree<B>,
        F: Fn(C, X) -> (C, Y),
    {
        let all = SliceSpec::default();
        sliced::<B, C, XS, X, Y, YS, F>("scan", &self.f, self.init, self.xs, self.opts, all)
    }
}

// =================================================================================================
// sliced_scan
// =================================================================================================

/// Python's `slice(start, stop, step)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SliceSpec {
    start: Option<isize>,
    stop: Option<isize>,
    step: Option<isize>,
}

/// The indices `range(*slice(start, stop, step).indices(n))` selects, in order.
fn slice_indices(n: usize, s: SliceSpec) -> Result<Vec<usize>, VmapError> {
    let step = s.step.unwrap_or(1);
    if step == 0 {
        return Err(VmapError::SliceStepZero);
    }
    let n = n as isize;
    let (lower, upper) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let clamp = |v: isize| {
        if v < 0 {
            (v + n).max(lower)
        } else {
            v.min(upper)
        }
    };
    let start = s.start.map_or(if step > 0 { lower } else { upper }, clamp);
    let stop = s.stop.map_or(if step > 0 { upper } else { lower }, clamp);
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(i as usize);
        i += step;
    }
    Ok(out)
}

/// The loop with only the outputs `ys[start:stop:step]` kept.
fn sliced<B, C, XS, X, Y, YS, F>(
    transform: &'static str,
    f: &F,
    init: C,
    xs: XS,
    opts: LoopOptions,
    slice: SliceSpec,
) -> Result<(C, YS), VmapError>
where
    B: Backend,
    C: Tree<B>,
    XS: Tree<B>,
    X: Tree<B>,
    Y: Tree<B>,
    YS: Tree<B>,
    F: Fn(C, X) -> (C, Y),
{
    let xs = check_xs(transform, xs, opts.length)?;
    let n = xs.length;
    let selected = slice_indices(n, slice)?;
    // Position of step t in the output, for the selected steps.
    let mut slot: Vec<Option<usize>> = vec![None; n];
    for (j, &t) in selected.iter().enumerate() {
        slot[t] = Some(j);
    }
    if n == 0 {
        let (leaves, def) = init.flatten();
        let (y_def, specs) = dry_run::<B, C, X, Y, F>(f, leaves.clone(), &def, &xs)?;
        let carry = C::unflatten_named(&def, leaves, "init")?;
        return Ok((carry, stack_ys(Vec::new(), &y_def, &specs)?));
    }
    let looped = run_loop::<B, C, X, Y, F>(
        transform,
        f,
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

/// A [`scan`] that keeps only the outputs `ys[start:stop:step]`: powerpax's `sliced_scan`.
///
/// ```text
/// carry = init
/// keep = range(*slice(start, stop, step).indices(n))      # Python slice semantics
/// for t in 0..n (n-1 down to 0 with .reverse(true)):
///     carry, y = f(carry, xs[t])
///     if t in keep: ys[position of t in keep] = y          # other outputs are dropped at once
/// return (carry, stack(ys))
/// ```
///
/// Equal to `scan` followed by `ys[start:stop:step]` along the leading axis, but only the
/// selected outputs are ever stacked: the skipped steps update the carry and their outputs are
/// dropped as soon as `f` returns. The carry is the final carry after **all** `n` steps.
/// `start`, `stop` and `step` follow Python: negative `start`/`stop` count from the end, out of
/// range values are clamped, `step` may be negative (the kept outputs then come in decreasing
/// `t`), and an empty selection gives outputs with a zero-length leading axis.
///
/// # Example
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::{sliced_scan, TestBackend};
/// type B = TestBackend;
/// let device = Default::default();
///
/// let xs = Tensor::<B, 2>::from_floats([[1.0], [2.0], [3.0], [4.0], [5.0]], &device);
/// let init = Tensor::<B, 1>::zeros([1], &device);
/// let step = |c: Tensor<B, 1>, x: Tensor<B, 1>| {
///     let c = c + x;
///     (c.clone(), c)
/// };
/// // Running sums 1, 3, 6, 10, 15; keep ys[4:0:-2] = [15, 6].
/// let (carry, ys): (Tensor<B, 1>, Tensor<B, 2>) =
///     sliced_scan(step, init, xs).start(4).stop(0).step(-2).call().unwrap();
/// assert_eq!(carry.into_data().to_vec::<f32>().unwrap(), vec![15.0]);
/// assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![15.0, 6.0]);
/// ```
///
/// # Errors
/// As [`scan`], and [`VmapError::SliceStepZero`] for `step(0)`.
pub fn sliced_scan<F, C, XS>(f: F, init: C, xs: XS) -> SlicedScan<F, C, XS> {
    SlicedScan {
        f,
        init,
        xs,
        opts: LoopOptions::default(),
        slice: SliceSpec::default(),
    }
}

/// A sliced scan being configured: see [`sliced_scan`].
pub struct SlicedScan<F, C, XS> {
    f: F,
    init: C,
    xs: XS,
    opts: LoopOptions,
    slice: SliceSpec,
}

impl<F, C, XS> SlicedScan<F, C, XS> {
    loop_options!();

    /// First kept index (Python `start`; negative counts from the end).
    pub fn start(mut self, start: isize) -> Self {
        self.slice.start = Some(start);
        self
    }

    /// Index the selection stops before (Python `stop`; negative counts from the end).
    pub fn stop(mut self, stop: isize) -> Self {
        self.slice.stop = Some(stop);
        self
    }

    /// Distance between kept indices (Python `step`, nonzero, may be negative).
    pub fn step(mut self, step: isize) -> Self {
        self.slice.step = Some(step);
        self
    }

    /// Sets all three at once, `None` meaning Python's default (as in `ys[start:stop:step]`).
    pub fn slice(mut self, start: Option<isize>, stop: Option<isize>, step: Option<isize>) -> Self {
        self.slice = SliceSpec { start, stop, step };
        self
    }

    /// Runs the loop; returns the final carry and the kept outputs. Type parameters as in
    /// [`Scan::call`].
    ///
    /// # Errors
    /// See [`sliced_scan`].
    pub fn call<B, X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        B: Backend,
        C: Tree<B>,
        XS: Tree<B>,
        X: Tree<B>,
        Y: Tree<B>,
        YS: Tree<B>,
        F: Fn(C, X) -> (C, Y),
    {
        sliced::<B, C, XS, X, Y, YS, F>(
            "sliced_scan",
            &self.f,
            self.init,
            self.xs,
            self.opts,
            self.slice,
        )
    }
}

// =================================================================================================
// checkpoint_chunked_scan
// =================================================================================================

/// A [`scan`] whose backward pass recomputes each chunk of `chunk_size` steps instead of keeping
/// every step's intermediates: powerpax's `checkpoint_chunked_scan`.
///
/// ```text
/// carry = init
/// for chunk in steps split every chunk_size steps (in execution order):
///     checkpoint(carry)                       # the only thing kept for the backward pass
///     for t in chunk:
///         carry, ys[t] = f(carry, xs[t])      # run without recording a graph
/// return (carry, stack(ys))
///
/// backward, chunk by chunk from the last:
///     rerun the chunk from its checkpoint, recording a graph; back-propagate the incoming
///     cotangents of its carry and ys into its input carry and its xs rows; drop that graph
/// ```
///
/// Values and gradients equal those of [`scan`] under `Autodiff<_>`; only the memory held
/// between the forward and the backward pass changes: about `n / chunk_size` carries (plus
/// `xs` and `ys`) instead of every step's intermediates, for one extra forward pass. Gradients
/// flow to `init`, to `xs` and through the returned carry and outputs. `chunk_size(None)` (the
/// default) checkpoints only at the start: one chunk of the whole length.
///
/// Runs on `Autodiff<B, _>` for any inner backend `B` (including `Vmap<_>`, for per-example
/// gradients through a checkpointed loop).
///
/// # Tensors the body captures
/// The recomputation rebuilds the graph of each chunk from its checkpoint alone, so a tensor
/// that requires gradients and that `f` **captures** (instead of receiving it through the carry
/// or `xs`) cannot get its gradient: the call fails with
/// [`VmapError::CapturedTrackedTensor`] rather than return a silently wrong gradient. Pass such
/// parameters in the carry and return them unchanged (their gradient is then computed, and is
/// the same as a plain scan's for a captured parameter). Captured tensors that do not require
/// gradients (constants) are fine. (A tracked tensor that `f` uses only in a detached way is
/// not detected and must not be captured either.)
///
/// # Implementation
/// burn-autodiff runs a backward pass while holding its graph's lock, so the reverse pass of a
/// recomputed chunk (a separate small graph) runs on a short-lived helper thread; its results
/// come back to the outer backward step before it continues. `f` must therefore be
/// `Send + Sync + 'static` (a `move` closure over owned values). Each such thread finishes when
/// the outer backward pass does, holding until then a copy of burn-autodiff's node table (its
/// size is that of the largest graph the process has built), so the backward pass costs about
/// `n / chunk_size` such copies on top of the carries: with a large plain graph built earlier
/// in the same process this can outweigh the savings of a small carry.
///
/// Measured (`cargo bench --bench scan`, fresh processes, NdArray): a 4,096-step scan with a
/// 256-float carry, forward + backward, peaks at 55.6 MiB as a plain scan and 12.7 MiB with
/// `chunk_size(Some(64))` (4.4x less), for about 1.1x the time.
///
/// # Example
/// ```
/// use burn::backend::Autodiff;
/// use burn::tensor::Tensor;
/// use burn_vmap::{checkpoint_chunked_scan, scan, TestBackend};
/// type B = Autodiff<TestBackend>;
/// let device = Default::default();
///
/// let step = |c: Tensor<B, 1>, x: Tensor<B, 1>| {
///     let c = (c * x).sin();
///     (c.clone(), c.sum())
/// };
/// let xs = Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let init = Tensor::<B, 1>::from_floats([0.5, -0.5], &device).require_grad();
///
/// let (c, _ys): (Tensor<B, 1>, Tensor<B, 2>) =
///     checkpoint_chunked_scan(step, init.clone(), xs.clone()).chunk_size(Some(2)).call().unwrap();
/// let g = init.grad(&c.sum().backward()).unwrap();
///
/// let (c, _ys): (Tensor<B, 1>, Tensor<B, 2>) = scan(step, init.clone(), xs).call().unwrap();
/// let expected = init.grad(&c.sum().backward()).unwrap();
/// g.into_data().assert_approx_eq::<f32>(&expected.into_data(), Default::default());
/// ```
///
/// # Errors
/// As [`scan`], and
/// - [`VmapError::ChunkSizeNotPositive`]: `chunk_size(Some(k))` with `k <= 0`;
/// - [`VmapError::CapturedTrackedTensor`]: `f` captures a tensor that requires gradients.
///
/// # Panics
/// If `f` panics during the recomputation (in the backward pass).
pub fn checkpoint_chunked_scan<F, C, XS>(f: F, init: C, xs: XS) -> CheckpointChunkedScan<F, C, XS> {
    CheckpointChunkedScan {
        f,
        init,
        xs,
        opts: LoopOptions::default(),
        chunk_size: None,
    }
}

/// A checkpointed scan being configured: see [`checkpoint_chunked_scan`].
pub struct CheckpointChunkedScan<F, C, XS> {
    f: F,
    init: C,
    xs: XS,
    opts: LoopOptions,
    chunk_size: Option<isize>,
}

type Ad<B, CS> = Autodiff<B, CS>;
/// Leaves of one chunk's outputs, keyed by the chunk's first step index.
type Parts<B, CS> = Vec<(usize, Vec<Leaf<Ad<B, CS>>>)>;
/// The structure of one step's output and a spec per leaf.
type YInfo<B> = Option<(TreeDef, Vec<LeafSpec<B>>)>;
/// `(target, cotangent)` links of a recomputed chunk's root chain.
type Sinks<B, CS> = Vec<(FloatTensor<Ad<B, CS>>, FloatTensor<B>)>;

fn to_inner<B: Backend, CS: CheckpointStrategy>(leaf: Leaf<Ad<B, CS>>) -> Leaf<B> {
    match leaf {
        Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(t.tensor().primitive)),
        Leaf::Int(t) => Leaf::Int(t),
        Leaf::Bool(t) => Leaf::Bool(t),
    }
}

fn from_inner<B: Backend, CS: CheckpointStrategy>(leaf: Leaf<B>) -> Leaf<Ad<B, CS>> {
    match leaf {
        Leaf::Float(t) => Leaf::Float(TensorPrimitive::Float(
            <Ad<B, CS> as AutodiffBackend>::from_inner(t.tensor()),
        )),
        Leaf::Int(t) => Leaf::Int(t),
        Leaf::Bool(t) => Leaf::Bool(t),
    }
}

fn float_of<B: Backend>(leaf: &Leaf<B>) -> Option<FloatTensor<B>> {
    match leaf {
        Leaf::Float(t) => Some(t.clone().tensor()),
        _ => None,
    }
}

/// One chunk of the loop: what is needed to run it (forward) and to rerun it (backward).
struct ChunkBody<F> {
    f: Arc<F>,
    carry_def: TreeDef,
    x_def: TreeDef,
    /// Step indices in execution order.
    steps: Vec<usize>,
    /// Smallest step index (row 0 of the chunk's slab of `xs`).
    lo: usize,
}

/// Outputs of one run of a chunk: carry leaves, per-step outputs (aligned with the steps) and
/// the structure of one output.
struct ChunkOut<B: Backend> {
    carry: Vec<Leaf<B>>,
    ys: Vec<Vec<Leaf<B>>>,
    y_def: TreeDef,
    y_specs: Vec<LeafSpec<B>>,
}

impl<F> ChunkBody<F> {
    fn run<B, C, X, Y>(
        &self,
        carry: Vec<Leaf<B>>,
        xs_steps: Vec<Vec<Leaf<B>>>,
    ) -> Result<ChunkOut<B>, VmapError>
    where
        B: Backend,
        C: Tree<B>,
        X: Tree<B>,
        Y: Tree<B>,
        F: Fn(C, X) -> (C, Y),
    {
        let init = C::unflatten_named(&self.carry_def, carry, "carry")?;
        let mut xs_steps: Vec<Option<Vec<Leaf<B>>>> = xs_steps.into_iter().map(Some).collect();
        let position = |t: usize| {
            self.steps
                .iter()
                .position(|&s| s == t)
                .expect("a chunk step")
        };
        let looped = run_loop::<B, C, X, Y, F>(
            "checkpoint_chunked_scan",
            &*self.f,
            init,
            self.steps.iter().copied(),
            &self.x_def,
            |t| {
                xs_steps[position(t)]
                    .take()
                    .expect("each step reads its row once")
            },
            |_| true,
        )?;
        let (y_def, y_specs) = looped.y.expect("a chunk has at least one step");
        let mut ys: Vec<Option<Vec<Leaf<B>>>> = self.steps.iter().map(|_| None).collect();
        for (t, y) in looped.kept {
            ys[position(t)] = Some(y);
        }
        Ok(ChunkOut {
            carry: looped.carry.flatten().0,
            ys: ys
                .into_iter()
                .map(|y| y.expect("every step kept"))
                .collect(),
            y_def,
            y_specs,
        })
    }

    /// Row `t` of every leaf of the chunk's slab of `xs` (inner backend).
    fn x_inner<B: Backend>(&self, slab: &[Leaf<B>], t: usize) -> Vec<Leaf<B>> {
        slab.iter().map(|l| l.index(t - self.lo)).collect()
    }
}

/// Which input of a chunk a tracked tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// Leaf `i` of the carry.
    Carry(usize),
    /// Leaf `j` of the chunk's slab of `xs`.
    Xs(usize),
}

/// Recomputes a chunk and back-propagates its output cotangents (one per float output, `None`
/// when no gradient reached it) into the gradients of its tracked inputs.
type Recompute<B> =
    Box<dyn FnOnce(Vec<Option<FloatTensor<B>>>) -> Vec<FloatTensor<B>> + Send + 'static>;

/// The backward state shared by the nodes of one chunk.
struct ChunkTape<B: Backend> {
    state: Mutex<TapeState<B>>,
}

struct TapeState<B: Backend> {
    cotangents: Vec<Option<FloatTensor<B>>>,
    recompute: Option<Recompute<B>>,
    grads: Vec<Option<FloatTensor<B>>>,
}

impl<B: Backend> core::fmt::Debug for ChunkTape<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ChunkTape")
    }
}

impl<B: Backend> ChunkTape<B> {
    fn set_cotangent(&self, output: usize, grad: FloatTensor<B>) {
        let mut state = self.state.lock().expect("chunk tape lock");
        let slot = &mut state.cotangents[output];
        *slot = Some(match slot.take() {
            Some(old) => B::float_add(old, grad),
            None => grad,
        });
    }

    /// The gradient of tracked input `k`, recomputing the chunk on the first call.
    fn input_grad(&self, k: usize) -> Option<FloatTensor<B>> {
        let pending = {
            let mut state = self.state.lock().expect("chunk tape lock");
            state.recompute.take().map(|r| {
                let cots = core::mem::take(&mut state.cotangents);
                (r, cots)
            })
        };
        if let Some((recompute, cots)) = pending {
            let was = IN_BACKWARD.with(|f| f.replace(true));
            let grads = recompute(cots);
            IN_BACKWARD.with(|f| f.set(was));
            let mut state = self.state.lock().expect("chunk tape lock");
            state.grads = grads.into_iter().map(Some).collect();
        }
        let mut state = self.state.lock().expect("chunk tape lock");
        state.grads.get_mut(k).and_then(Option::take)
    }
}

/// Steps of a chunk's forward pass between two releases of untracked-op records.
const RELEASE_EVERY: usize = 32;

thread_local! {
    /// Set while this thread recomputes a chunk inside a backward pass (it may hold a graph's
    /// lock then: no backward pass may start on it).
    static IN_BACKWARD: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// burn-autodiff registers every op, tracked or not, and frees the records of dropped tensors
/// only when a backward pass ends. The forward pass of a chunk runs untracked ops whose
/// records would pile up until the user's backward pass (more than the intermediates a plain
/// scan keeps): a backward pass of a one-element leaf releases them after each chunk.
fn release_dropped_records<B: Backend, CS: CheckpointStrategy>(device: &B::Device, dtype: DType) {
    if IN_BACKWARD.with(|f| f.get()) {
        return;
    }
    let leaf = <Ad<B, CS> as AutodiffBackend>::from_inner(zeros1::<B>(device, dtype));
    let leaf = Tensor::<Ad<B, CS>, 1>::from_primitive(TensorPrimitive::Float(leaf)).require_grad();
    let _ = leaf.backward();
}

fn zeros1<B: Backend>(device: &B::Device, dtype: DType) -> FloatTensor<B> {
    B::float_zeros(Shape::from(vec![1]), device, dtype.into())
}

/// Link `k` of a chunk's gate chain (parents: the previous link, tracked input `k`). The last
/// link is the first to run backward: it recomputes the chunk; each link hands its input its
/// gradient and keeps the chain below it alive with a dummy gradient.
#[derive(Debug)]
struct GateLink;

impl<B: Backend> Backward<B, 2> for GateLink {
    type State = (Arc<ChunkTape<B>>, usize, DType);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _c: &mut Checkpointer) {
        let (tape, k, dtype) = ops.state;
        let own = grads.consume::<B>(&ops.node);
        let device = B::float_device(&own);
        let [prev, input] = ops.parents;
        if let Some(node) = input {
            if let Some(g) = tape.input_grad(k) {
                grads.register::<B>(node.id, g);
            }
        }
        if let Some(node) = prev {
            grads.register::<B>(node.id, zeros1::<B>(&device, dtype));
        }
    }
}

/// Float output `i` of a chunk (parent: the gate). Stores its cotangent for the recomputation.
#[derive(Debug)]
struct ChunkOutput;

impl<B: Backend> Backward<B, 1> for ChunkOutput {
    type State = (Arc<ChunkTape<B>>, usize, DType);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _c: &mut Checkpointer) {
        let (tape, i, dtype) = ops.state;
        let g = grads.consume::<B>(&ops.node);
        let device = B::float_device(&g);
        tape.set_cotangent(i, g);
        let [gate] = ops.parents;
        if let Some(node) = gate {
            grads.register::<B>(node.id, zeros1::<B>(&device, dtype));
        }
    }
}

/// In a recomputed chunk's graph: reports the gradient of input leaf `id` through a channel
/// (the graph's backward pass runs on a helper thread and its result is never returned), or
/// drops it for an input whose gradient is not needed. Every float input is tracked and tapped
/// so that the recomputation records no untracked ops (burn-autodiff keeps the records of
/// untracked ops until a backward pass ends, which the helper thread cannot do before the
/// outer backward pass has finished).
#[derive(Debug)]
struct Tap;

impl<B: Backend> Backward<B, 1> for Tap {
    type State = Option<(usize, mpsc::Sender<(usize, FloatTensor<B>)>)>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _c: &mut Checkpointer) {
        let g = grads.consume::<B>(&ops.node);
        if let Some((id, sender)) = ops.state {
            // The receiver only goes away if the outer backward step panicked.
            let _ = sender.send((id, g));
        }
    }
}

/// In a recomputed chunk's graph: a link of the root chain (parents: the previous link, a
/// target); gives the target its cotangent.
#[derive(Debug)]
struct Sink;

impl<B: Backend> Backward<B, 2> for Sink {
    type State = (FloatTensor<B>, DType);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _c: &mut Checkpointer) {
        let (cotangent, dtype) = ops.state;
        let own = grads.consume::<B>(&ops.node);
        let device = B::float_device(&own);
        let [prev, target] = ops.parents;
        if let Some(node) = target {
            grads.register::<B>(node.id, cotangent);
        }
        if let Some(node) = prev {
            grads.register::<B>(node.id, zeros1::<B>(&device, dtype));
        }
    }
}

/// A tracked `[1]` node with parents `[prev, other]` (the links of the chains above).
fn link<B, CS, BO>(
    op: BO,
    state: BO::State,
    prev: &FloatTensor<Ad<B, CS>>,
    other: &FloatTensor<Ad<B, CS>>,
    value: FloatTensor<B>,
) -> FloatTensor<Ad<B, CS>>
where
    B: Backend,
    CS: CheckpointStrategy,
    BO: Backward<B, 2>,
{
    match op
        .prepare::<CS>([prev.node.clone(), other.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(state, value),
        OpsKind::UnTracked(prep) => prep.finish(value),
    }
}

impl<F, C, XS> CheckpointChunkedScan<F, C, XS> {
    loop_options!();

    /// Checkpoints every `chunk_size` steps (`None`: only at the start). Must be positive; need
    /// not divide the length.
    pub fn chunk_size(mut self, chunk_size: Option<isize>) -> Self {
        self.chunk_size = chunk_size;
        self
    }

    /// Runs the loop on `Autodiff<B, CS>`; returns the final carry and the stacked outputs.
    /// Type parameters as in [`Scan::call`].
    ///
    /// # Errors
    /// See [`checkpoint_chunked_scan`].
    pub fn call<B, CS, X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        B: Backend,
        CS: CheckpointStrategy,
        C: Tree<Ad<B, CS>> + 'static,
        XS: Tree<Ad<B, CS>>,
        X: Tree<Ad<B, CS>> + 'static,
        Y: Tree<Ad<B, CS>> + 'static,
        YS: Tree<Ad<B, CS>>,
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
    {
        const NAME: &str = "checkpoint_chunked_scan";
        if let Some(k) = self.chunk_size.filter(|&k| k <= 0) {
            return Err(VmapError::ChunkSizeNotPositive {
                transform: NAME,
                chunk_size: k,
            });
        }
        let xs = check_xs::<Ad<B, CS>, XS>(NAME, self.xs, self.opts.length)?;
        let n = xs.length;
        let (carry_leaves, carry_def) = self.init.flatten();
        if n == 0 {
            let (y_def, specs) =
                dry_run::<Ad<B, CS>, C, X, Y, F>(&self.f, carry_leaves.clone(), &carry_def, &xs)?;
            let carry = C::unflatten_named(&carry_def, carry_leaves, "init")?;
            return Ok((carry, stack_ys(Vec::new(), &y_def, &specs)?));
        }
        let chunk = self.chunk_size.map_or(n, |k| k as usize);
        let f = Arc::new(self.f);
        let steps: Vec<usize> = order(n, self.opts.reverse).collect();
        let mut carry = carry_leaves;
        let mut parts: Parts<B, CS> = Vec::new();
        let mut y_info: YInfo<Ad<B, CS>> = None;
        for chunk_steps in steps.chunks(chunk) {
            let lo = *chunk_steps.iter().min().expect("non-empty chunk");
            let hi = *chunk_steps.iter().max().expect("non-empty chunk") + 1;
            let body = Arc::new(ChunkBody {
                f: f.clone(),
                carry_def: carry_def.clone(),
                x_def: xs.def.clone(),
                steps: chunk_steps.to_vec(),
                lo,
            });
            let slab: Vec<Leaf<Ad<B, CS>>> = xs
                .leaves
                .iter()
                .map(|l| l.clone().slice_axis(0, rows(lo..hi)))
                .collect();
            let slab_inner: Vec<Leaf<B>> = slab.iter().cloned().map(to_inner).collect();
            let carry_inner: Vec<Leaf<B>> = carry.iter().cloned().map(to_inner).collect();

            // Forward, recording no graph: the inputs are fresh untracked tensors. In blocks of
            // at most RELEASE_EVERY steps, releasing the records of the untracked ops between.
            let mut out: Option<ChunkOut<Ad<B, CS>>> = None;
            for block in chunk_steps.chunks(RELEASE_EVERY) {
                let sub = ChunkBody {
                    f: f.clone(),
                    carry_def: carry_def.clone(),
                    x_def: xs.def.clone(),
                    steps: block.to_vec(),
                    lo,
                };
                let carry_in: Vec<Leaf<Ad<B, CS>>> = match &out {
                    None => carry_inner.iter().cloned().map(from_inner).collect(),
                    Some(o) => o
                        .carry
                        .iter()
                        .cloned()
                        .map(to_inner)
                        .map(from_inner)
                        .collect(),
                };
                let part = sub.run::<Ad<B, CS>, C, X, Y>(
                    carry_in,
                    block
                        .iter()
                        .map(|&t| {
                            sub.x_inner(&slab_inner, t)
                                .into_iter()
                                .map(from_inner)
                                .collect()
                        })
                        .collect(),
                )?;
                if part
                    .carry
                    .iter()
                    .chain(part.ys.iter().flatten())
                    .filter_map(float_of)
                    .any(|t| t.is_tracked())
                {
                    return Err(VmapError::CapturedTrackedTensor { transform: NAME });
                }
                let part = ChunkOut {
                    carry: part
                        .carry
                        .into_iter()
                        .map(to_inner)
                        .map(from_inner)
                        .collect(),
                    ys: part
                        .ys
                        .into_iter()
                        .map(|y| y.into_iter().map(to_inner).map(from_inner).collect())
                        .collect(),
                    y_def: part.y_def,
                    y_specs: part.y_specs,
                };
                if let Some(first) = part
                    .carry
                    .iter()
                    .chain(part.ys.iter().flatten())
                    .find_map(float_of)
                {
                    release_dropped_records::<B, CS>(
                        &B::float_device(&first.primitive),
                        first.primitive.dtype(),
                    );
                }
                out = Some(match out {
                    None => part,
                    Some(mut o) => {
                        o.carry = part.carry;
                        o.ys.extend(part.ys);
                        o
                    }
                });
            }
            let out = out.expect("a chunk has at least one step");
            let carry_out: Vec<Leaf<B>> = out.carry.into_iter().map(to_inner).collect();
            // This chunk's outputs stacked by increasing step index.
            let mut rows: Vec<(usize, Vec<Leaf<B>>)> = body
                .steps
                .iter()
                .copied()
                .zip(out.ys)
                .map(|(t, y)| (t, y.into_iter().map(to_inner).collect()))
                .collect();
            rows.sort_by_key(|(t, _)| *t);
            let y_specs_inner: Vec<LeafSpec<B>> = rows[0].1.iter().map(LeafSpec::of).collect();
            let ys_inner: Vec<Leaf<B>> = {
                let mut columns: Vec<Vec<Leaf<B>>> = y_specs_inner.iter().map(|_| vec![]).collect();
                for (_, row) in rows {
                    for (col, leaf) in columns.iter_mut().zip(row) {
                        col.push(leaf);
                    }
                }
                columns.into_iter().map(Leaf::stack).collect()
            };
            if y_info.is_none() {
                y_info = Some((out.y_def.clone(), out.y_specs.clone()));
            }

            // The tracked float inputs, in chain order.
            let mut inputs: Vec<(Input, FloatTensor<Ad<B, CS>>)> = Vec::new();
            for (i, leaf) in carry.iter().enumerate() {
                if let Some(t) = float_of(leaf).filter(|t| t.is_tracked()) {
                    inputs.push((Input::Carry(i), t));
                }
            }
            for (j, leaf) in slab.iter().enumerate() {
                if let Some(t) = float_of(leaf).filter(|t| t.is_tracked()) {
                    inputs.push((Input::Xs(j), t));
                }
            }
            if inputs.is_empty() {
                carry = carry_out.into_iter().map(from_inner).collect();
                parts.push((lo, ys_inner.into_iter().map(from_inner).collect()));
                continue;
            }

            // Float outputs: carry leaves, then ys leaves.
            let float_outputs: Vec<(bool, usize)> = carry_out
                .iter()
                .enumerate()
                .filter(|(_, l)| matches!(l, Leaf::Float(_)))
                .map(|(i, _)| (true, i))
                .chain(
                    ys_inner
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| matches!(l, Leaf::Float(_)))
                        .map(|(i, _)| (false, i)),
                )
                .collect();
            let first = &inputs[0].1.primitive;
            let (device, dtype) = (B::float_device(first), first.dtype());
            let recompute = recompute_chunk::<B, CS, C, X, Y, F>(
                body.clone(),
                carry_inner,
                slab_inner,
                inputs.iter().map(|(r, _)| *r).collect(),
                float_outputs.clone(),
                (device.clone(), dtype),
            );
            let tape = Arc::new(ChunkTape {
                state: Mutex::new(TapeState {
                    cotangents: vec![None; float_outputs.len()],
                    recompute: Some(recompute),
                    grads: Vec::new(),
                }),
            });
            let mut gate = <Ad<B, CS> as AutodiffBackend>::from_inner(zeros1::<B>(&device, dtype));
            for (k, (_, input)) in inputs.iter().enumerate() {
                gate = link::<B, CS, _>(
                    GateLink,
                    (tape.clone(), k, dtype),
                    &gate,
                    input,
                    zeros1::<B>(&device, dtype),
                );
            }
            let output = |i: usize, value: FloatTensor<B>| -> Leaf<Ad<B, CS>> {
                let t = match ChunkOutput
                    .prepare::<CS>([gate.node.clone()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish((tape.clone(), i, dtype), value),
                    OpsKind::UnTracked(prep) => prep.finish(value),
                };
                Leaf::Float(TensorPrimitive::Float(t))
            };
            let mut next = 0;
            let mut wrap = |leaf: Leaf<B>| match leaf {
                Leaf::Float(t) => {
                    next += 1;
                    output(next - 1, t.tensor())
                }
                other => from_inner(other),
            };
            carry = carry_out.into_iter().map(&mut wrap).collect();
            parts.push((lo, ys_inner.into_iter().map(&mut wrap).collect()));
        }

        let (y_def, _) = y_info.expect("at least one chunk ran");
        parts.sort_by_key(|(lo, _)| *lo);
        let ys_leaves: Vec<Leaf<Ad<B, CS>>> = if parts.len() == 1 {
            parts.pop().expect("one part").1
        } else {
            let mut columns: Vec<Vec<Leaf<Ad<B, CS>>>> =
                parts[0].1.iter().map(|_| vec![]).collect();
            for (_, part) in parts {
                for (col, leaf) in columns.iter_mut().zip(part) {
                    col.push(leaf);
                }
            }
            columns.into_iter().map(|c| Leaf::cat(c, 0)).collect()
        };
        let carry = C::unflatten_named(&carry_def, carry, "carry")?;
        Ok((carry, YS::unflatten_named(&y_def, ys_leaves, "ys")?))
    }
}

/// The backward of one chunk: rebuilds its inputs as fresh leaves (tapped where the outer
/// input is tracked), reruns it recording a graph, gives every float output its cotangent
/// through a chain of [`Sink`]s, runs that graph's backward pass on a helper thread and
/// collects the inputs' gradients from the [`Tap`]s.
fn recompute_chunk<B, CS, C, X, Y, F>(
    body: Arc<ChunkBody<F>>,
    carry_inner: Vec<Leaf<B>>,
    slab_inner: Vec<Leaf<B>>,
    inputs: Vec<Input>,
    float_outputs: Vec<(bool, usize)>,
    (device, dtype): (B::Device, DType),
) -> Recompute<B>
where
    B: Backend,
    CS: CheckpointStrategy,
    C: Tree<Ad<B, CS>> + 'static,
    X: Tree<Ad<B, CS>> + 'static,
    Y: Tree<Ad<B, CS>> + 'static,
    F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
{
    Box::new(move |cotangents: Vec<Option<FloatTensor<B>>>| {
        let (sender, receiver) = mpsc::channel::<(usize, FloatTensor<B>)>();
        // (input, step) of every tap, by tap id.
        let mut taps: Vec<(Input, usize)> = Vec::new();
        let mut sinks: Sinks<B, CS> = Vec::new();
        let mut fresh = |leaf: Leaf<B>, input: Input, step: usize| -> Leaf<Ad<B, CS>> {
            let p = match &leaf {
                Leaf::Float(t) => t.clone().tensor(),
                _ => return from_inner(leaf),
            };
            let report = inputs.contains(&input);
            let zeros = B::float_zeros(p.shape(), &B::float_device(&p), p.dtype().into());
            let leaf_ad = <Ad<B, CS> as AutodiffBackend>::from_inner(p.clone());
            let leaf_ad =
                <Ad<B, CS> as burn_backend::ops::FloatTensorOps<Ad<B, CS>>>::float_set_require_grad(
                    leaf_ad, true,
                );
            let tapped = match Tap
                .prepare::<CS>([leaf_ad.node.clone()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => {
                    prep.finish(report.then(|| (taps.len(), sender.clone())), p)
                }
                OpsKind::UnTracked(prep) => prep.finish(p),
            };
            if report {
                taps.push((input, step));
            }
            // A zero cotangent makes every tap part of the backward pass, so that each reports.
            sinks.push((tapped.clone(), zeros));
            Leaf::Float(TensorPrimitive::Float(tapped))
        };
        let carry: Vec<Leaf<Ad<B, CS>>> = carry_inner
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, l)| fresh(l, Input::Carry(i), 0))
            .collect();
        let xs_steps: Vec<Vec<Leaf<Ad<B, CS>>>> = body
            .steps
            .iter()
            .map(|&t| {
                body.x_inner(&slab_inner, t)
                    .into_iter()
                    .enumerate()
                    .map(|(j, l)| fresh(l, Input::Xs(j), t))
                    .collect()
            })
            .collect();
        let out = body
            .run::<Ad<B, CS>, C, X, Y>(carry, xs_steps)
            .unwrap_or_else(|e| panic!("vmap: checkpoint_chunked_scan: recomputing a chunk: {e}"));
        let mut cotangents = cotangents.into_iter();
        for (is_carry, i) in &float_outputs {
            let Some(cot) = cotangents.next().flatten() else {
                continue;
            };
            if *is_carry {
                if let Some(t) = float_of(&out.carry[*i]) {
                    sinks.push((t, cot));
                }
            } else {
                let cot = Leaf::<B>::Float(TensorPrimitive::Float(cot));
                for (&t, y) in body.steps.iter().zip(&out.ys) {
                    if let (Some(y), Some(c)) =
                        (float_of(&y[*i]), float_of(&cot.index(t - body.lo)))
                    {
                        sinks.push((y, c));
                    }
                }
            }
        }
        let mut root = <Ad<B, CS> as AutodiffBackend>::from_inner(zeros1::<B>(&device, dtype));
        for (target, cot) in sinks {
            if target.is_tracked() {
                root = link::<B, CS, _>(
                    Sink,
                    (cot, dtype),
                    &root,
                    &target,
                    zeros1::<B>(&device, dtype),
                );
            }
        }
        drop(sender);
        let n_taps = taps.len();
        let root = Tensor::<Ad<B, CS>, 1>::from_primitive(TensorPrimitive::Float(root));
        // burn-autodiff holds the outer graph's lock during this backward step, and a backward
        // pass ends by visiting every graph: run this one on a thread that may finish later.
        // Burn's GPU backends queue work per thread ("stream"): the helper queues on this
        // thread's stream, so its kernels are ordered with the ones before and after this step
        // (on its own stream, tensors crossed between queues with no ordering: wrong gradients).
        let stream = burn_std::id::StreamId::current();
        std::thread::Builder::new()
            .name("burn-vmap-chunk-backward".into())
            .spawn(move || {
                stream.executes(|| {
                    let _ = root.backward();
                })
            })
            .expect("vmap: checkpoint_chunked_scan: cannot start the recomputation thread");
        let mut got: Vec<Option<FloatTensor<B>>> = vec![None; n_taps];
        for _ in 0..n_taps {
            let (id, g) = receiver.recv().unwrap_or_else(|_| {
                panic!("vmap: checkpoint_chunked_scan: the backward pass of a recomputed chunk failed (see the panic above)")
            });
            got[id] = Some(g);
        }
        inputs
            .iter()
            .map(|input| {
                let mut rows: Vec<(usize, FloatTensor<B>)> = taps
                    .iter()
                    .zip(got.iter_mut())
                    .filter(|((r, _), _)| r == input)
                    .map(|((_, t), g)| (*t, g.take().expect("every tap reported")))
                    .collect();
                match input {
                    Input::Carry(_) => rows.pop().expect("one tap per carry leaf").1,
                    Input::Xs(_) => {
                        rows.sort_by_key(|(t, _)| *t);
                        let leaves = rows
                            .into_iter()
                            .map(|(_, g)| Leaf::Float(TensorPrimitive::Float(g)))
                            .collect();
                        match Leaf::<B>::stack(leaves) {
                            Leaf::Float(t) => t.tensor(),
                            _ => unreachable!("gradients are float leaves"),
                        }
                    }
                }
            })
            .collect()
    })
}
