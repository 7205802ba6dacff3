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
//! and outputs are any [`Tree`](crate::Tree) (tensors of any kind and rank, tuples, `Vec`, maps,
//! [`Static`](crate::Static) values that pass through untouched).
//!
//! - `mod.rs`: [`scan`] and the options every scan shares (`length`, `reverse`, `unroll`);
//! - `run.rs`: the loop itself, its checks and the stacking of the outputs;
//! - `sliced.rs`: [`sliced_scan`];
//! - `checkpoint/`: [`checkpoint_chunked_scan`] (the chunked forward pass, the custom autodiff
//!   nodes of each chunk, and its recomputation in the backward pass).

mod checkpoint;
mod run;
mod sliced;

use crate::VmapError;
use crate::transform::transform_call;

pub use checkpoint::{CheckpointChunkedScan, checkpoint_chunked_scan};
pub use sliced::{SlicedScan, sliced_scan};

use run::Step;
use sliced::SliceSpec;

/// Loops `f` over the leading axis of `xs`, threading a carry: JAX's `lax.scan`.
///
/// ```text
/// carry = init
/// for t in 0..n (n-1 down to 0 with .reverse(true)):
///     carry, ys[t] = f(carry, xs[t])
/// return (carry, stack(ys))
/// ```
///
/// `xs` is any [`Tree`](crate::Tree) whose leaves share their leading size `n` (each step sees every leaf
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
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::scan;
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
pub(crate) use loop_options;

impl<F, C, XS> Scan<F, C, XS> {
    loop_options!();

    transform_call! {
        scan;
        /// Runs the loop; returns the final carry and the stacked outputs.
        ///
        /// `C` is the carry, `XS` the scanned tree, `X` one step of it (leading axis removed), `Y`
        /// one step's output and `YS` the stacked outputs (a leading axis added to every leaf).
        ///
        /// # Errors
        /// See [`scan`].
        pub fn call(self) -> Result<(C, YS), VmapError> {
            let all = SliceSpec::default();
            Step::new("scan", &self.f).sliced(self.init, self.xs, self.opts, all)
        }
    }
}
