//! Random draws repeated: a function run with the device's generator seeded, so that a second
//! run draws what the first drew. `checkpoint_chunked_scan` reruns a chunk in the backward pass;
//! `chunked_vmap` and `micro_vmap` run one recording per chunk or microbatch, and under
//! [`Randomness::Same`](crate::Randomness::Same) every one of them must share the first one's
//! draws.
//!
//! Burn's generators are one per backend and process, and can be seeded but not read: a seed
//! drawn from the generator itself (a seeded run stays reproducible) is installed before each
//! run, and the generator goes on from another seed drawn before (a rerun does not draw the
//! first run's stream again).

use std::cell::Cell;
use std::sync::{Mutex, PoisonError};

use burn::tensor::{Device, Distribution, Int, Tensor};

/// `f` run with the generator of `device`'s backend seeded with `seed`, or with a seed drawn
/// from it, returned with `f`'s result; the generator then goes on from a seed drawn before.
/// `f`'s draws run before the section ends (a lazy backend, Burn's fusion, draws when it runs
/// its queue). The sections of every thread run one at a time, so that transforms on several
/// threads do not draw from each other's seeds; a section nested in `f` runs inside its
/// enclosing one. Another thread that draws from the same generator outside burn-vmap while
/// `f` runs makes the runs' draws differ.
///
/// Cost: a read of four integers from the device and a wait for `f`'s work.
///
/// # Panics
/// When the device fails while `f`'s work runs (`transform` names the caller).
pub(crate) fn seeded<R>(
    device: &Device,
    seed: Option<u64>,
    transform: &str,
    f: impl FnOnce() -> R,
) -> (R, u64) {
    static SECTION: Mutex<()> = Mutex::new(());
    thread_local! {
        static INSIDE: Cell<bool> = const { Cell::new(false) };
    }
    /// Marks this thread inside a section until dropped (a panic included).
    struct Inside;
    impl Drop for Inside {
        fn drop(&mut self) {
            INSIDE.set(false);
        }
    }
    let _guard = (!INSIDE.get()).then(|| {
        let guard = SECTION.lock().unwrap_or_else(PoisonError::into_inner);
        INSIDE.set(true);
        (guard, Inside)
    });
    let next = draw_seed(device);
    let seed = seed.unwrap_or_else(|| draw_seed(device));
    device.seed(seed);
    let out = f();
    device
        .sync()
        .unwrap_or_else(|e| panic!("vmap: {transform}: the device failed while it drew: {e:?}"));
    device.seed(next);
    (out, seed)
}

/// A seed drawn from the generator of `device`'s backend.
pub(crate) fn draw_seed(device: &Device) -> u64 {
    let words = Tensor::<1, Int>::random(
        [2],
        Distribution::Uniform(0.0, 2f64.powi(30)),
        &device.clone().inner(),
    );
    let words = words
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .expect("two integers");
    // 60 bits (an i32 holds 30 of them a word).
    ((words[0] as u64) << 30) ^ words[1] as u64
}
