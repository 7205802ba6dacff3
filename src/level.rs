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
//! - **Level memos**: values that rules compute once while the innermost active level runs and
//!   drop when it returns (`memoized`): the Gram matrices of a layer input that several layers
//!   read (`rules::factored`).

use core::any::Any;
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

/// What random ops do inside `vmap`: torch.func's `randomness` argument.
///
/// The `vmap` transform sets it per call. Random ops are `float_random`, `int_random` and what
/// is built on them (`Tensor::random`, `random_like`, `burn::nn::Dropout` in training mode).
/// A draw inside a level in `Different` mode gets a batch dim at that level; in `Same` mode
/// it does not; in `Error` mode it is refused, and the refusal is reported by the level's
/// `vmap` call when the mapped function returns.
///
/// ```
/// use burn_vmap::Randomness;
/// assert_eq!(Randomness::default(), Randomness::Error);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Randomness {
    /// Random ops inside the mapped function make the `vmap` call fail with the error of a
    /// refused draw (the default).
    #[default]
    Error,
    /// Every example gets its own, independent random numbers (as the loop over examples would).
    Different,
    /// One draw is shared by all examples of this `vmap`; under `chunked_vmap` and a
    /// microbatched `micro_vmap`, by the examples of every chunk or microbatch (each runs with
    /// the device's generator seeded alike: `transform::draws`).
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
///
/// Hidden from the docs: public for the engine's integration tests, which run random ops under
/// a [`VmapScope`] without the `vmap` transform.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Refused {
    /// The random op (`float_random`, `int_random`).
    pub op: &'static str,
    /// The level in `Randomness::Error` mode that refused it.
    pub level: Level,
    /// That level's size.
    pub size: usize,
}

thread_local! {
    static ACTIVE: RefCell<Vec<Active>> = const { RefCell::new(Vec::new()) };
    static REFUSED: RefCell<Vec<Refused>> = const { RefCell::new(Vec::new()) };
    /// Recently finished levels (bounded), to name tensors that escaped their vmap.
    static FINISHED: RefCell<VecDeque<Level>> = const { RefCell::new(VecDeque::new()) };
    static MEMOS: RefCell<Vec<Memo>> = const { RefCell::new(Vec::new()) };
}

/// A value computed under `level`, found again by its key.
struct Memo {
    level: Level,
    key: Box<dyn Any>,
    value: Box<dyn Any>,
    /// Held only while among the [`RECENT_CAP`] last used ([`memoized_recent`]).
    recent: bool,
}

/// How many values [`memoized_recent`] holds per level.
const RECENT_CAP: usize = 4;

/// How many finished levels are remembered per thread.
const FINISHED_CAP: usize = 4096;

/// Marks a vmap level active on this thread while it lives (panic-safe: dropping pops it and
/// records the level as finished).
///
/// Hidden from the docs: the `vmap` transform enters it; public for the engine's integration
/// tests.
#[doc(hidden)]
pub struct VmapScope {
    level: Level,
}

impl VmapScope {
    /// Pushes `level` (with its size and randomness mode) on this thread's stack.
    pub fn enter(level: Level, size: usize, mode: Randomness) -> Self {
        ACTIVE.with(|a| a.borrow_mut().push(Active { level, size, mode }));
        VmapScope { level }
    }

    /// The first draw refused at this level, if any (consumes the records of this level).
    pub fn take_refused(&self) -> Option<Refused> {
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
        // Dropped outside the borrow: a value's drop runs backend code.
        let memos: Vec<Memo> = MEMOS.with(|m| {
            let mut m = m.borrow_mut();
            let (gone, kept) = m.drain(..).partition(|x| x.level == self.level);
            *m = kept;
            gone
        });
        drop(memos);
        FINISHED.with(|f| {
            let mut f = f.borrow_mut();
            if f.len() == FINISHED_CAP {
                f.pop_front();
            }
            f.push_back(self.level);
        });
    }
}

/// `compute()`, or the value it gave for an equal `key` earlier under the innermost active
/// level, which holds it until its vmap call returns. With no active level, `compute()`.
///
/// The key must determine the value: rules build it from [`Origin`](crate::tensor::Origin)s, which
/// name one value each and are never reused.
pub(crate) fn memoized<K, V>(key: K, compute: impl FnOnce() -> V) -> V
where
    K: PartialEq + 'static,
    V: Clone + 'static,
{
    memo(key, compute, false)
}

/// [`memoized`] for large values: only the [`RECENT_CAP`] last used under the level are
/// held (a hit makes a value the last used), so that memory stays bounded however many values
/// a call computes (a wide sum's casts of layer inputs: equal ones are handed back one after
/// the other).
pub(crate) fn memoized_recent<K, V>(key: K, compute: impl FnOnce() -> V) -> V
where
    K: PartialEq + 'static,
    V: Clone + 'static,
{
    memo(key, compute, true)
}

/// [`memoized`] (`recent` false) and [`memoized_recent`] (true): each kind looks up and evicts
/// its own values.
fn memo<K, V>(key: K, compute: impl FnOnce() -> V, recent: bool) -> V
where
    K: PartialEq + 'static,
    V: Clone + 'static,
{
    let Some(level) = with_active(|a| a.last().map(|x| x.level)) else {
        return compute();
    };
    let mine = |x: &Memo| x.level == level && x.recent == recent;
    let hit = MEMOS.with(|m| {
        let mut m = m.borrow_mut();
        let pos = m
            .iter()
            .position(|x| mine(x) && x.key.downcast_ref::<K>() == Some(&key))?;
        let value = m[pos].value.downcast_ref::<V>()?.clone();
        if recent {
            let memo = m.remove(pos);
            m.push(memo); // the last used
        }
        Some(value)
    });
    if let Some(value) = hit {
        return value;
    }
    let value = compute();
    let memo = Memo {
        level,
        key: Box::new(key),
        value: Box::new(value.clone()),
        recent,
    };
    // Dropped outside the borrow: a value's drop runs backend code.
    let evicted = MEMOS.with(|m| {
        let mut m = m.borrow_mut();
        let full = recent && m.iter().filter(|x| mine(x)).count() >= RECENT_CAP;
        let evicted = full.then(|| m.iter().position(mine).map(|pos| m.remove(pos)));
        m.push(memo);
        evicted.flatten()
    });
    drop(evicted);
    value
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

/// Levels that `sequential_vmap` uses to hold one example (size 1):
/// invisible to custom rules, so that calling the function on one example does not start the
/// rule again at that level.
static PRIVATE_LEVELS: Mutex<Vec<Level>> = Mutex::new(Vec::new());

fn private_levels() -> MutexGuard<'static, Vec<Level>> {
    PRIVATE_LEVELS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `level` is a [`PrivateLevel`].
#[allow(dead_code)] // For `sequential_vmap` and `custom_vmap` (the transforms), not the engine.
pub(crate) fn is_private(level: Level) -> bool {
    private_levels().contains(&level)
}

/// A fresh private level, unregistered on drop (also when unwinding).
#[allow(dead_code)] // For `sequential_vmap` (the transforms), not the engine.
pub(crate) struct PrivateLevel(pub(crate) Level);

impl PrivateLevel {
    #[allow(dead_code)] // For `sequential_vmap` (the transforms), not the engine.
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

#[cfg(test)]
mod tests {
    use core::cell::Cell;

    use super::*;

    #[test]
    fn should_compute_a_memo_once_per_key_while_its_level_runs() {
        let calls = Cell::new(0);
        let count = |v: i32| {
            calls.set(calls.get() + 1);
            v
        };
        // No active level: computed every time.
        assert_eq!(memoized(1u8, || count(10)), 10);
        assert_eq!(memoized(1u8, || count(11)), 11);
        let outer = VmapScope::enter(Level::fresh(), 2, Randomness::Error);
        assert_eq!(memoized(1u8, || count(20)), 20);
        assert_eq!(memoized(1u8, || count(21)), 20);
        assert_eq!(memoized(2u8, || count(30)), 30);
        assert_eq!(memoized(1u16, || count(40)), 40);
        // An inner level has memos of its own, dropped when it returns.
        let inner = VmapScope::enter(Level::fresh(), 3, Randomness::Error);
        assert_eq!(memoized(1u8, || count(50)), 50);
        drop(inner);
        assert_eq!(memoized(1u8, || count(60)), 20);
        assert_eq!(calls.get(), 6);
        drop(outer);
        assert!(MEMOS.with(|m| m.borrow().is_empty()));
        assert_eq!(memoized(1u8, || count(70)), 70);
    }

    #[test]
    fn should_hold_only_the_last_used_recent_memos() {
        let calls = Cell::new(0);
        let count = |v: usize| {
            calls.set(calls.get() + 1);
            v
        };
        assert_eq!(memoized_recent(0usize, || count(1)), 1);
        assert_eq!(
            memoized_recent(0usize, || count(2)),
            2,
            "no level: computed"
        );
        let scope = VmapScope::enter(Level::fresh(), 2, Randomness::Error);
        for k in 0..RECENT_CAP {
            assert_eq!(memoized_recent(k, || count(k)), k);
        }
        // A hit makes key 0 the last used; key 1 is then the first evicted.
        assert_eq!(memoized_recent(0usize, || count(100)), 0);
        assert_eq!(
            memoized_recent(RECENT_CAP, || count(RECENT_CAP)),
            RECENT_CAP
        );
        assert_eq!(memoized_recent(0usize, || count(100)), 0);
        assert_eq!(memoized_recent(1usize, || count(101)), 101, "evicted");
        assert_eq!(calls.get(), 2 + RECENT_CAP + 2);
        // Plain memos are not evicted by recent ones, nor counted among them.
        assert_eq!(memoized(7u8, || count(7)), 7);
        for k in 10..20usize {
            memoized_recent(k, || count(k));
        }
        assert_eq!(memoized(7u8, || count(8)), 7);
        let recent = MEMOS.with(|m| m.borrow().iter().filter(|x| x.recent).count());
        assert_eq!(recent, RECENT_CAP);
        drop(scope);
        assert!(MEMOS.with(|m| m.borrow().is_empty()));
    }
}
