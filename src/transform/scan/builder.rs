//! [`Scan`]: the builder the three scans share, its loop modes and common options.

use super::slice::SliceSpec;

/// A scan being configured: made by [`scan`](fn@super::scan), [`sliced_scan`](super::sliced_scan) or
/// [`checkpoint_chunked_scan`](super::checkpoint_chunked_scan); `M` is the loop it runs ([`Full`], [`Sliced`],
/// [`Checkpointed`]).
#[derive(Debug, Clone)]
pub struct Scan<F, C, XS, M = Full> {
    pub(super) f: F,
    pub(super) init: C,
    pub(super) xs: XS,
    pub(super) length: Option<usize>,
    pub(super) reverse: bool,
    pub(super) mode: M,
}

/// [`Scan`]'s plain loop: every output kept ([`scan`](fn@super::scan)).
#[derive(Debug, Clone, Copy, Default)]
pub struct Full;

/// [`Scan`]'s sliced loop: the outputs `ys[start:stop:step]` kept ([`sliced_scan`](super::sliced_scan)).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sliced(pub(super) SliceSpec);

/// [`Scan`]'s checkpointed loop ([`checkpoint_chunked_scan`](super::checkpoint_chunked_scan)): its chunk size.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checkpointed {
    pub(super) chunk_size: Option<isize>,
}

/// A sliced scan being configured: see [`sliced_scan`](super::sliced_scan).
pub type SlicedScan<F, C, XS> = Scan<F, C, XS, Sliced>;

/// A checkpointed scan being configured: see [`checkpoint_chunked_scan`](super::checkpoint_chunked_scan).
pub type CheckpointChunkedScan<F, C, XS> = Scan<F, C, XS, Checkpointed>;

impl<F, C, XS, M> Scan<F, C, XS, M> {
    pub(super) fn with_mode(f: F, init: C, xs: XS, mode: M) -> Self {
        Self {
            f,
            init,
            xs,
            length: None,
            reverse: false,
            mode,
        }
    }

    /// Sets the number of steps: required when `xs` has no tensor (`()`), checked against
    /// the leading size of `xs` otherwise.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::transform::scan;
    /// let init = Tensor::<1>::ones([1], &Device::default());
    /// let double = |c: Tensor<1>, (): ()| (c.clone() * 2.0, c);
    /// let (c, ys) = scan(double, init, ()).length(3).call().unwrap();
    /// assert_eq!(c.into_data().to_vec::<f32>().unwrap(), vec![8.0]);
    /// assert_eq!(ys.into_data().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 4.0]);
    /// ```
    pub fn length(mut self, n: usize) -> Self {
        self.length = Some(n);
        self
    }

    /// Runs the steps from the last element of `xs` to the first. `ys[t]` stays the output
    /// of the step that read `xs[t]`.
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    /// `lax.scan`'s unrolling factor (steps per iteration of a compiled loop), accepted for
    /// parity and ignored: Burn runs eagerly, every step is one call of `f` whatever the
    /// factor, so it changes neither the values nor the work done.
    pub fn unroll(self, _steps_per_iteration: usize) -> Self {
        self
    }
}
