//! Random numbers under vmap (torch.func's `randomness=` choice).
//!
//! A thread-local stack records the active `vmap` calls (outermost first) with their level, size
//! and [`Randomness`] mode; [`VmapScope`] pushes one for the duration of the mapped function.
//! `float_random` / `int_random` of [`Vmap`](crate::Vmap) read it:
//!
//! - no active vmap: an ordinary (unbatched) draw;
//! - [`Randomness::Different`] at a level: the draw gets a batch dim at that level, so every
//!   example receives independent numbers;
//! - [`Randomness::Same`] at a level: no batch dim there, one draw shared by the examples;
//! - [`Randomness::Error`] (the default) at a level: the draw is refused. Backend ops cannot
//!   return errors, so the refusal is recorded here and the enclosing `vmap` call returns
//!   [`VmapError::Randomness`](crate::VmapError::Randomness) once the function returns (the
//!   draw itself returns an unbatched placeholder so that the function can finish).

use core::cell::RefCell;
use std::collections::VecDeque;

use burn_backend::Shape;

use crate::tensor::{BatchDim, BatchDims, Level};

/// What random ops do inside [`vmap`](crate::vmap): torch.func's `randomness` argument.
///
/// Set it with [`Vmapped::randomness`](crate::Vmapped::randomness). Random ops are
/// `Tensor::random`, `random_like` and what is built on them (`burn::nn::Dropout` in training
/// mode).
///
/// ```
/// use burn::tensor::{Distribution, Tensor};
/// use burn_vmap::{vmap, Randomness, TestBackend, Vmap, VmapError};
/// type B = Vmap<TestBackend>;
/// let device = Default::default();
/// let xs = Tensor::<B, 2>::zeros([4, 3], &device);
/// let noisy = |x: Tensor<B, 1>| x.clone() + x.random_like(Distribution::Default);
///
/// // Default: random numbers inside vmap are an error that explains the choice.
/// let err = vmap(noisy).call::<B, B, _, _, _, Tensor<B, 2>>(xs.clone()).unwrap_err();
/// assert!(matches!(err, VmapError::Randomness { .. }));
///
/// // Different: one independent draw per example.
/// let ys: Tensor<B, 2> = vmap(noisy).randomness(Randomness::Different).call(xs.clone()).unwrap();
/// let rows = ys.into_data().to_vec::<f32>().unwrap();
/// assert_ne!(rows[0..3], rows[3..6]);
///
/// // Same: one draw shared by every example.
/// let ys: Tensor<B, 2> = vmap(noisy).randomness(Randomness::Same).call(xs).unwrap();
/// let rows = ys.into_data().to_vec::<f32>().unwrap();
/// assert_eq!(rows[0..3], rows[3..6]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Randomness {
    /// Random ops inside the mapped function make the `vmap` call fail with
    /// [`VmapError::Randomness`](crate::VmapError::Randomness) (the default).
    #[default]
    Error,
    /// Every example gets its own, independent random numbers (as the loop over examples would).
    Different,
    /// One draw is shared by all examples of this `vmap`.
    Same,
}

#[derive(Clone, Copy, Debug)]
struct Active {
    level: Level,
    size: usize,
    mode: Randomness,
}

/// A refused draw: the op and the level's size.
#[derive(Clone, Debug)]
pub(crate) struct Refused {
    pub(crate) op: &'static str,
    pub(crate) level: Level,
    pub(crate) size: usize,
}

thread_local! {
    static ACTIVE: RefCell<Vec<Active>> = const { RefCell::new(Vec::new()) };
    static REFUSED: RefCell<Vec<Refused>> = const { RefCell::new(Vec::new()) };
    /// Recently finished levels (bounded), to name tensors that escaped their vmap.
    static FINISHED: RefCell<VecDeque<Level>> = const { RefCell::new(VecDeque::new()) };
}

/// How many finished levels are remembered per thread.
const FINISHED_CAP: usize = 4096;

/// Marks a vmap level active on this thread while it lives (panic-safe: dropping pops it).
pub(crate) struct VmapScope {
    level: Level,
}

impl VmapScope {
    /// Pushes `level` (with its size and randomness mode) on this thread's stack.
    pub(crate) fn enter(level: Level, size: usize, mode: Randomness) -> Self {
        ACTIVE.with(|a| a.borrow_mut().push(Active { level, size, mode }));
        VmapScope { level }
    }

    /// The first draw refused at this level, if any (consumes the records of this level).
    pub(crate) fn take_refused(&self) -> Option<Refused> {
        REFUSED.with(|r| {
            let mut r = r.borrow_mut();
            let first = r.iter().find(|x| x.level == self.level).cloned();
            r.retain(|x| x.level != self.level);
            first
        })
    }
}

impl Drop for VmapScope {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            if let Some(pos) = a.iter().rposition(|x| x.level == self.level) {
                a.remove(pos);
            }
        });
        REFUSED.with(|r| r.borrow_mut().retain(|x| x.level != self.level));
        FINISHED.with(|f| {
            let mut f = f.borrow_mut();
            if f.len() == FINISHED_CAP {
                f.pop_front();
            }
            f.push_back(self.level);
        });
    }
}

/// Whether `level` belongs to a `vmap` call on this thread that has already returned: a tensor
/// batched there escaped its vmap.
pub(crate) fn is_finished(level: Level) -> bool {
    FINISHED.with(|f| f.borrow().contains(&level))
}

/// The batch dims a random draw of `op` gets: one per active level in `Different` mode. A level
/// in `Error` mode records a refusal (reported by its `vmap` call) and contributes no dim.
pub(crate) fn random_batch_dims(op: &'static str) -> BatchDims {
    ACTIVE.with(|a| {
        let a = a.borrow();
        let mut dims = Vec::new();
        for x in a.iter() {
            match x.mode {
                Randomness::Different => dims.push(BatchDim {
                    level: x.level,
                    size: x.size,
                }),
                Randomness::Same => {}
                Randomness::Error => REFUSED.with(|r| {
                    r.borrow_mut().push(Refused {
                        op,
                        level: x.level,
                        size: x.size,
                    })
                }),
            }
        }
        dims.sort_by_key(|d| d.level);
        BatchDims::from_sorted(dims)
    })
}

/// A random draw under vmap: `draw(physical shape)` with the batch sizes of
/// [`random_batch_dims`] in front of the logical `shape`.
pub(crate) fn random<P>(
    op: &'static str,
    shape: Shape,
    draw: impl FnOnce(Shape) -> P,
) -> crate::tensor::VmapTensor<P> {
    let bdims = random_batch_dims(op);
    let scalar = shape.num_dims() == 0;
    let physical = super::helpers::with_batch_sizes(&bdims, &shape);
    crate::tensor::VmapTensor::new(draw(physical), bdims).with_scalar(scalar)
}
