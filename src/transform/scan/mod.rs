//! Loops over the leading axis: [`scan`](fn@scan), [`sliced_scan`] and
//! [`checkpoint_chunked_scan`] (JAX's `lax.scan` and powerpax's sliced and checkpointed
//! variants).
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
//! Burn executes eagerly, so the loop is a Rust loop calling `f` once per step on the user's
//! own tensors: on their device, with Burn's autodiff when they are on an autodiff device, and
//! recorded into the enclosing function when a transform records it (a scan inside a `vmap` or
//! a per-example loss: the steps are recorded one after the other and batched with the rest).
//! Carries, `xs` and outputs are any [`Tree`] (tensors of any kind and rank, tuples, `Vec`,
//! maps, [`Static`](crate::Static) values that pass through untouched).
//!
//! One builder, [`Scan`], serves the three; its last type parameter says which loop it runs
//! ([`Full`], [`Sliced`], [`Checkpointed`]) and which options it has.
//!
//! - `builder.rs`: the builder, [`Scan`], and the options every scan shares;
//! - `mod.rs`: [`scan`](fn@scan) and [`sliced_scan`];
//! - `run.rs`: the loop itself, its checks and the stacking of the outputs;
//! - `slice.rs`: Python's slice semantics, for [`sliced_scan`];
//! - `checkpoint/`: [`checkpoint_chunked_scan`] (the chunked forward pass, and the custom
//!   autodiff nodes that recompute each chunk in the backward pass).

mod builder;
mod checkpoint;
mod run;
mod slice;

use crate::VmapError;
use crate::tree::{Lift, Tree};

use run::{Body, Xs, order, stack_ys};
use slice::{SliceSpec, slice_indices};

pub use builder::{CheckpointChunkedScan, Checkpointed, Full, Scan, Sliced, SlicedScan};
pub use checkpoint::checkpoint_chunked_scan;

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
/// `f` is called once per step on the user's tensors (see the [module](self) docs): on an
/// autodiff device gradients flow through the whole loop with Burn's own `backward` (every
/// step's intermediates are kept for the backward pass: see [`checkpoint_chunked_scan`] to trade
/// them for recomputation); inside a function that a transform records, the steps are recorded
/// with it.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::scan;
/// let device = Device::default();
///
/// // Running sum of the rows of xs.
/// let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let init = Tensor::<1>::zeros([2], &device);
/// let step = |c: Tensor<1>, x: Tensor<1>| {
///     let c = c + x;
///     (c.clone(), c)
/// };
/// let (carry, ys) = scan(step, init, xs).call().unwrap();
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
    Scan::with_mode(f, init, xs, Full)
}

/// A [`scan`](fn@scan) that keeps only the outputs `ys[start:stop:step]`: powerpax's
/// `sliced_scan`.
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
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::sliced_scan;
/// let device = Device::default();
///
/// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0], [5.0]], &device);
/// let init = Tensor::<1>::zeros([1], &device);
/// let step = |c: Tensor<1>, x: Tensor<1>| {
///     let c = c + x;
///     (c.clone(), c)
/// };
/// // Running sums 1, 3, 6, 10, 15; keep ys[4:0:-2] = [15, 6].
/// let (carry, ys) = sliced_scan(step, init, xs).start(4).stop(0).step(-2).call().unwrap();
/// assert_eq!(carry.into_data().to_vec::<f32>().unwrap(), vec![15.0]);
/// assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![15.0, 6.0]);
/// ```
///
/// # Errors
/// As [`scan`](fn@scan), and [`VmapError::SliceStepZero`] for `step(0)`.
pub fn sliced_scan<F, C, XS>(f: F, init: C, xs: XS) -> SlicedScan<F, C, XS> {
    Scan::with_mode(f, init, xs, Sliced::default())
}

impl<F, C, XS> Scan<F, C, XS, Full> {
    /// Runs the loop; returns the final carry and the stacked outputs, whose type follows from
    /// `f`'s output ([`Lift`]: `Tensor<D>` becomes `Tensor<D + 1>`).
    ///
    /// `C` is the carry, `XS` the scanned tree, `X` one step of it (leading axis removed), `Y`
    /// one step's output.
    ///
    /// # Errors
    /// See [`scan`](fn@scan).
    pub fn call<X, Y>(self) -> Result<(C, Y::Lifted), VmapError>
    where
        F: Fn(C, X) -> (C, Y),
        C: Tree,
        XS: Tree,
        X: Tree,
        Y: Tree + Lift,
        Y::Lifted: Tree,
    {
        self.call_as::<X, Y, Y::Lifted>()
    }

    /// As [`call`](Self::call), with the type `YS` of the stacked outputs named by the caller.
    ///
    /// # Errors
    /// See [`scan`](fn@scan).
    pub fn call_as<X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        F: Fn(C, X) -> (C, Y),
        C: Tree,
        XS: Tree,
        X: Tree,
        Y: Tree,
        YS: Tree,
    {
        let Self {
            f,
            init,
            xs,
            length,
            reverse,
            ..
        } = self;
        sliced("scan", &f, init, xs, length, reverse, SliceSpec::default())
    }
}

impl<F, C, XS> Scan<F, C, XS, Sliced> {
    /// First kept index (Python `start`; negative counts from the end).
    pub fn start(mut self, start: isize) -> Self {
        self.mode.0.start = Some(start);
        self
    }

    /// Index the selection stops before (Python `stop`; negative counts from the end).
    pub fn stop(mut self, stop: isize) -> Self {
        self.mode.0.stop = Some(stop);
        self
    }

    /// Distance between kept indices (Python `step`, nonzero, may be negative).
    pub fn step(mut self, step: isize) -> Self {
        self.mode.0.step = Some(step);
        self
    }

    /// Sets all three at once, `None` meaning Python's default (as in `ys[start:stop:step]`).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::transform::sliced_scan;
    /// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0]], &Device::default());
    /// let id = |c: Tensor<1>, x: Tensor<1>| (c, x);
    /// let (_, ys) = sliced_scan(id, Tensor::zeros([1], &Device::default()), xs)
    ///     .slice(None, None, Some(-1))
    ///     .call()
    ///     .unwrap();
    /// assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![3.0, 2.0, 1.0]);
    /// ```
    pub fn slice(mut self, start: Option<isize>, stop: Option<isize>, step: Option<isize>) -> Self {
        self.mode.0 = SliceSpec { start, stop, step };
        self
    }

    /// Runs the loop; returns the final carry and the kept outputs. Type parameters as in
    /// [`Scan::call`].
    ///
    /// # Errors
    /// See [`sliced_scan`].
    pub fn call<X, Y>(self) -> Result<(C, Y::Lifted), VmapError>
    where
        F: Fn(C, X) -> (C, Y),
        C: Tree,
        XS: Tree,
        X: Tree,
        Y: Tree + Lift,
        Y::Lifted: Tree,
    {
        self.call_as::<X, Y, Y::Lifted>()
    }

    /// As [`call`](Self::call), with the type `YS` of the kept outputs named by the caller.
    ///
    /// # Errors
    /// See [`sliced_scan`].
    pub fn call_as<X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        F: Fn(C, X) -> (C, Y),
        C: Tree,
        XS: Tree,
        X: Tree,
        Y: Tree,
        YS: Tree,
    {
        let Self {
            f,
            init,
            xs,
            length,
            reverse,
            mode,
        } = self;
        sliced("sliced_scan", &f, init, xs, length, reverse, mode.0)
    }
}

/// The loop with only the outputs `ys[slice]` kept (every output for the default slice):
/// `scan` and `sliced_scan`.
fn sliced<F, C, XS, X, Y, YS>(
    transform: &'static str,
    f: &F,
    init: C,
    xs: XS,
    length: Option<usize>,
    reverse: bool,
    slice: SliceSpec,
) -> Result<(C, YS), VmapError>
where
    F: Fn(C, X) -> (C, Y),
    C: Tree,
    XS: Tree,
    X: Tree,
    Y: Tree,
    YS: Tree,
{
    let xs = Xs::new(transform, xs, length)?;
    let n = xs.length;
    let selected = slice_indices(n, slice)?;
    let body = Body::<F, C, X, Y>::new(transform, f);
    if n == 0 {
        let (leaves, def) = init.flatten();
        let (y_def, examples) =
            body.dry_run(C::unflatten_named(&def, leaves.clone(), "init")?, &xs)?;
        let carry = C::unflatten_named(&def, leaves, "init")?;
        return Ok((carry, stack_ys(Vec::new(), &y_def, &examples)?));
    }
    // Position of step t in the output, for the selected steps.
    let mut slot: Vec<Option<usize>> = vec![None; n];
    for (j, &t) in selected.iter().enumerate() {
        slot[t] = Some(j);
    }
    let looped = body.run(
        init,
        order(n, reverse),
        &xs.def,
        |t| xs.row(t),
        |t| slot[t].is_some(),
    )?;
    let (y_def, examples) = looped.y.expect("at least one step ran");
    let mut kept: Vec<(usize, Vec<_>)> = looped
        .kept
        .into_iter()
        .map(|(t, y)| (slot[t].expect("kept steps are selected"), y))
        .collect();
    kept.sort_by_key(|(j, _)| *j);
    let ys = stack_ys(
        kept.into_iter().map(|(_, y)| y).collect(),
        &y_def,
        &examples,
    )?;
    Ok((looped.carry, ys))
}
