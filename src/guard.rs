//! Panics turned into typed errors at a transform's boundary.
//!
//! Two things can panic under a transform: the user's function while it is recorded (Burn
//! panics when it reads a recorded tensor's values or mixes devices), and a backend op while
//! the batched function runs (backend ops cannot return errors, so batching rules panic with
//! `vmap: <op>: <why>; <what to do>`). [`catch`] runs such work, keeps Rust's panic message
//! off stderr while it does (the panic becomes the error the transform returns), and hands the
//! message back.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// How many [`catch`] calls are running on this thread.
    static CATCHING: Cell<usize> = const { Cell::new(0) };
}

static HOOK: Once = Once::new();

/// Installs (once) a panic hook that stays silent on threads inside [`catch`] and defers to
/// the previous hook elsewhere.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) == 0 {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it is returned as its message instead of unwinding further.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    CATCHING.with(|c| c.set(c.get() + 1));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get() - 1));
    result.map_err(message)
}

/// The text of a panic payload.
fn message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => s.to_string(),
            Err(_) => "a panic without a message".to_string(),
        },
    }
}
