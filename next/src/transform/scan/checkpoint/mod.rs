//! [`checkpoint_chunked_scan`]: a scan whose backward pass recomputes each chunk.

use super::run::{Body, Xs, order, stack_ys};
use super::{Checkpointed, Scan};
use crate::VmapError;
use crate::tree::{Lift, Tree};

/// The transform's name in errors.
const NAME: &str = "checkpoint_chunked_scan";

/// A [`scan`](fn@super::scan) that checkpoints its carry every `chunk_size` steps:
/// powerpax's `checkpoint_chunked_scan`.
///
/// ```text
/// carry = init
/// for chunk in steps split every chunk_size steps (in execution order):
///     checkpoint(carry)
///     for t in chunk:
///         carry, ys[t] = f(carry, xs[t])
/// return (carry, stack(ys))
/// ```
///
/// Values and gradients equal those of [`scan`](fn@super::scan). `chunk_size(None)` (the
/// default) checkpoints only at the start: one chunk of the whole length.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::{checkpoint_chunked_scan, scan};
/// let device = Device::default();
/// let step = |c: Tensor<1>, x: Tensor<1>| {
///     let c = (c * x).sin();
///     (c.clone(), c.sum())
/// };
/// let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let init = Tensor::<1>::from_floats([0.5, -0.5], &device);
/// let (c, ys) = checkpoint_chunked_scan(step, init.clone(), xs.clone())
///     .chunk_size(Some(2))
///     .call()
///     .unwrap();
/// let (c2, ys2) = scan(step, init, xs).call().unwrap();
/// assert_eq!(c.into_data(), c2.into_data());
/// assert_eq!(ys.into_data(), ys2.into_data());
/// ```
///
/// # Errors
/// As [`scan`](fn@super::scan), and [`VmapError::ChunkSizeNotPositive`] for
/// `chunk_size(Some(k))` with `k <= 0`.
pub fn checkpoint_chunked_scan<F, C, XS>(
    f: F,
    init: C,
    xs: XS,
) -> Scan<F, C, XS, Checkpointed> {
    Scan::with_mode(f, init, xs, Checkpointed::default())
}

impl<F, C, XS> Scan<F, C, XS, Checkpointed> {
    /// Checkpoints every `chunk_size` steps (`None`: only at the start). Must be positive; need
    /// not divide the length.
    pub fn chunk_size(mut self, chunk_size: Option<isize>) -> Self {
        self.mode.chunk_size = chunk_size;
        self
    }

    /// Runs the loop; returns the final carry and the stacked outputs. Type parameters as in
    /// [`Scan::call`](super::Scan::call).
    ///
    /// # Errors
    /// See [`checkpoint_chunked_scan`].
    pub fn call<X, Y>(self) -> Result<(C, Y::Lifted), VmapError>
    where
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
        C: Tree + 'static,
        XS: Tree,
        X: Tree + 'static,
        Y: Tree + Lift + 'static,
        Y::Lifted: Tree,
    {
        self.call_as::<X, Y, Y::Lifted>()
    }

    /// As [`call`](Self::call), with the type `YS` of the stacked outputs named by the caller.
    ///
    /// # Errors
    /// See [`checkpoint_chunked_scan`].
    pub fn call_as<X, Y, YS>(self) -> Result<(C, YS), VmapError>
    where
        F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
        C: Tree + 'static,
        XS: Tree,
        X: Tree + 'static,
        Y: Tree + 'static,
        YS: Tree,
    {
        if let Some(k) = self.mode.chunk_size.filter(|&k| k <= 0) {
            return Err(VmapError::ChunkSizeNotPositive {
                transform: NAME,
                chunk_size: k,
            });
        }
        let Self {
            f,
            init,
            xs,
            length,
            reverse,
            ..
        } = self;
        let xs = Xs::new(NAME, xs, length)?;
        let n = xs.length;
        let body = Body::<F, C, X, Y>::new(NAME, &f);
        if n == 0 {
            let (leaves, def) = init.flatten();
            let (y_def, examples) =
                body.dry_run(C::unflatten_named(&def, leaves.clone(), "init")?, &xs)?;
            let carry = C::unflatten_named(&def, leaves, "init")?;
            return Ok((carry, stack_ys(Vec::new(), &y_def, &examples)?));
        }
        let looped = body.run(init, order(n, reverse), &xs.def, |t| xs.row(t), |_| true)?;
        let (y_def, examples) = looped.y.expect("at least one step ran");
        let mut kept = looped.kept;
        kept.sort_by_key(|(t, _)| *t);
        let ys = stack_ys(kept.into_iter().map(|(_, y)| y).collect(), &y_def, &examples)?;
        Ok((looped.carry, ys))
    }
}
