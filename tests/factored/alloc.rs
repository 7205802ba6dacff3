//! The benches' counting allocator (one home: `benches/common/alloc.rs`) as this binary's
//! global allocator, and a lock that lets the memory tests run alone (every other test of this
//! binary holds it shared).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

#[path = "../../benches/common/alloc.rs"]
mod counting;

pub use counting::{Counting, peak_of};

#[global_allocator]
static ALLOC: Counting = Counting;

static EXCLUSIVE: RwLock<()> = RwLock::new(());

/// Held by every test that does not measure memory.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by a memory test: no other test of this binary runs meanwhile.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner())
}

pub const MIB: usize = 1 << 20;
