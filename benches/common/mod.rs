//! The allocator the benches run on.
//!
//! By default the system allocator (glibc's malloc on Linux). With `--features bench-jemalloc`:
//! jemalloc configured to keep freed pages (no decay), as the caching allocators of deep-learning
//! runtimes do. Per-example gradients write `B x parameters` floats each step into fresh
//! buffers; glibc returns every buffer above 32 MiB to the kernel on free, so each step pays one
//! page fault per 4 KiB written (about 60% of a per-example gradient step of the 784-512-512-10
//! MLP at B = 64). A caching allocator reuses the pages.

// Each bench uses part of this module (the vmap bench only installs the allocator).
#![allow(dead_code)]

#[cfg(feature = "bench-jemalloc")]
pub type Inner = tikv_jemallocator::Jemalloc;
#[cfg(feature = "bench-jemalloc")]
pub const INNER: Inner = tikv_jemallocator::Jemalloc;

#[cfg(not(feature = "bench-jemalloc"))]
pub type Inner = std::alloc::System;
#[cfg(not(feature = "bench-jemalloc"))]
pub const INNER: Inner = std::alloc::System;

/// jemalloc's configuration (read at start-up): never return freed pages to the kernel.
#[cfg(feature = "bench-jemalloc")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"dirty_decay_ms:-1,muzzy_decay_ms:-1\0";

/// The allocator's name, for the printed ratios.
pub fn allocator_name() -> &'static str {
    if cfg!(feature = "bench-jemalloc") {
        "jemalloc (freed pages kept)"
    } else {
        "system (glibc malloc)"
    }
}
