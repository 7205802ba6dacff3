//! Strict mode: whether an op without a batching rule may run the loop fallback.
//!
//! The loop fallback runs such an op once per example and stacks the results (slow, and loud:
//! a one-time warning per op). In strict mode it panics instead, so a test suite run in strict
//! mode proves that every op it touches has a real batching rule. Strict mode is on when the
//! environment variable `BURN_VMAP_STRICT` is `1` (or `true`), or after [`set_strict`]`(true)`;
//! [`with_strict`] overrides it on the current thread for the duration of a closure.

use core::cell::Cell;
use core::sync::atomic::{AtomicU8, Ordering};

/// 0: not decided yet (read the environment), 1: off, 2: on.
static STRICT: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static OVERRIDE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Turns strict mode on or off for the whole process (overrides `BURN_VMAP_STRICT`).
///
/// In strict mode an op without a batching rule panics inside vmap instead of running the loop
/// fallback (one op per example, with a one-time warning).
///
/// ```
/// burn_vmap::strict::set_strict(true);
/// assert!(burn_vmap::strict::is_strict());
/// burn_vmap::strict::set_strict(false);
/// assert!(!burn_vmap::strict::is_strict());
/// ```
pub fn set_strict(on: bool) {
    STRICT.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether strict mode is on for the current thread: a [`with_strict`] override, else
/// [`set_strict`], else the environment variable `BURN_VMAP_STRICT` (`1` or `true`).
///
/// ```
/// let outer = burn_vmap::strict::is_strict();
/// burn_vmap::strict::with_strict(true, || assert!(burn_vmap::strict::is_strict()));
/// assert_eq!(burn_vmap::strict::is_strict(), outer);
/// ```
pub fn is_strict() -> bool {
    if let Some(on) = OVERRIDE.with(Cell::get) {
        return on;
    }
    match STRICT.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var("BURN_VMAP_STRICT")
                .map(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "on"))
                .unwrap_or(false);
            // Only the first reader decides; a concurrent `set_strict` wins.
            let _ = STRICT.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            on
        }
    }
}

/// Runs `f` with strict mode set to `on` on the current thread (restored afterwards, also on
/// panic).
///
/// ```
/// let r = burn_vmap::strict::with_strict(false, || burn_vmap::strict::is_strict());
/// assert!(!r);
/// ```
pub fn with_strict<R>(on: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<bool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(on))));
    f()
}
