//! [`sliced_scan`]: a scan that keeps only the outputs `ys[start:stop:step]`.

use super::run::Step;
use super::{LoopOptions, loop_options};
use crate::VmapError;
use crate::transform::transform_call;

/// Python's `slice(start, stop, step)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SliceSpec {
    start: Option<isize>,
    stop: Option<isize>,
    step: Option<isize>,
}

/// The indices `range(*slice(start, stop, step).indices(n))` selects, in order.
pub(super) fn slice_indices(n: usize, s: SliceSpec) -> Result<Vec<usize>, VmapError> {
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

/// A [`scan`](super::scan) that keeps only the outputs `ys[start:stop:step]`: powerpax's `sliced_scan`.
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
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::sliced_scan;
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
/// As [`scan`](super::scan), and [`VmapError::SliceStepZero`] for `step(0)`.
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

    transform_call! {
        scan;
        /// Runs the loop; returns the final carry and the kept outputs. Type parameters as in
        /// [`Scan::call`](super::Scan::call).
        ///
        /// # Errors
        /// See [`sliced_scan`].
        pub fn call(self) -> Result<(C, YS), VmapError> {
            Step::new("sliced_scan", &self.f).sliced(self.init, self.xs, self.opts, self.slice)
        }
    }
}
