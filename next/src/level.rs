//! Vmap levels and their lifetime: the one place that knows which levels exist.
//!
//! - A [`Level`] names one `vmap` call (one per batch dim for `auto_vmap`). Levels are allocated
//!   in increasing order, so an inner `vmap` always has a larger level than every enclosing one;
//!   a [`VmapTensor`](crate::tensor::VmapTensor) keeps its batch dims sorted by level.
//! - **Active levels**: a thread-local stack of the running `vmap` calls (outermost first) with
//!   their size and [`Randomness`] mode. `VmapScope` pushes one for the duration of the mapped
//!   function; random ops read the stack (`rules::random`).
//! - **Refused draws**: a random op at a level in `Randomness::Error` mode cannot return an
//!   error (backend ops return tensors), so the refusal is recorded here and the level's `vmap`
//!   call reports it (`VmapScope::take_refused`).
//! - **Finished levels**: a bounded per-thread record of levels whose `vmap` call has returned,
//!   to name a tensor that escaped its vmap (`is_finished`).
//! - **Private levels**: levels that `sequential_vmap` uses to hold one example, invisible to
//!   `custom_vmap` rules (`PrivateLevel`, `is_private`).

use core::cell::RefCell;
use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

/// A vmap level: one per active `vmap` call. Levels are allocated in increasing order, so an
/// inner `vmap` always has a larger level than every enclosing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Level(u64);

static NEXT_LEVEL: AtomicU64 = AtomicU64::new(1);

impl Level {
    /// Allocates a fresh level, larger than every level allocated before.
    ///
    /// ```
    /// use burn_vmap::level::Level;
    /// let a = Level::fresh();
    /// let b = Level::fresh();
    /// assert!(b > a);
    /// ```
    pub fn fresh() -> Self {
        Level(NEXT_LEVEL.fetch_add(1, Ordering::Relaxed))
    }

    /// The level's number (for messages and debugging).
    pub fn id(self) -> u64 {
        self.0
    }
}

/// What random ops do inside [`vmap`](crate::vmap): torch.func's `randomness` argument.
///
/// Set it with [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness). Random ops are
/// `Tensor::random`, `random_like` and what is built on them (`burn::nn::Dropout` in training
/// mode).
///
/// ```
/// use burn::tensor::{Distribution, Tensor};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{vmap, Randomness, Vmap, VmapError};
/// type B = Vmap<TestBackend>;
/// let device = Default::default();
/// let xs = Tensor::<B, 2>::zeros([4, 3], &device);
/// let noisy = |x: Tensor<B, 1>| x.clone() + x.random_like(Distribution::Default);
///
/// // Default: random numbers inside vmap are an error that explains the choice.
/// let err = vmap(noisy).call(xs.clone()).unwrap_err();
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

// =================================================================================================
// Active levels, refused draws and finished levels (per thread)
// =================================================================================================

/// A running `vmap` call: its level, size and randomness mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Active {
    pub(crate) level: Level,
    pub(crate) size: usize,
    pub(crate) mode: Randomness,
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

/// Marks a vmap level active on this thread while it lives (panic-safe: dropping pops it and
/// records the level as finished).
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

/// Calls `f` with this thread's active vmap calls, outermost first.
pub(crate) fn with_active<R>(f: impl FnOnce(&[Active]) -> R) -> R {
    ACTIVE.with(|a| f(&a.borrow()))
}

/// Records a refused random draw; the `vmap` call of its level reports it when the mapped
/// function returns.
pub(crate) fn refuse(refused: Refused) {
    REFUSED.with(|r| r.borrow_mut().push(refused));
}

/// Whether `level` belongs to a `vmap` call on this thread that has already returned: a tensor
/// batched there escaped its vmap.
pub(crate) fn is_finished(level: Level) -> bool {
    FINISHED.with(|f| f.borrow().contains(&level))
}

// =================================================================================================
// Private levels (process-wide)
// =================================================================================================

/// Levels that [`sequential_vmap`](crate::transform::sequential_vmap) uses to hold one example (size 1):
/// invisible to custom rules, so that calling the function on one example does not start the
/// rule again at that level.
static PRIVATE_LEVELS: Mutex<Vec<Level>> = Mutex::new(Vec::new());

fn private_levels() -> MutexGuard<'static, Vec<Level>> {
    PRIVATE_LEVELS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `level` is a [`PrivateLevel`].
pub(crate) fn is_private(level: Level) -> bool {
    private_levels().contains(&level)
}

/// A fresh private level, unregistered on drop (also when unwinding).
pub(crate) struct PrivateLevel(pub(crate) Level);

impl PrivateLevel {
    pub(crate) fn new() -> Self {
        let level = Level::fresh();
        private_levels().push(level);
        Self(level)
    }
}

impl Drop for PrivateLevel {
    fn drop(&mut self) {
        private_levels().retain(|&l| l != self.0);
    }
}
