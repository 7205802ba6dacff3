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

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

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

/// A global allocator over [`INNER`] that counts the bytes held and their peak, for the memory
/// figures. A bench installs it with
/// `#[global_allocator] static ALLOC: common::Counting = common::Counting;`.
pub struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call forwards to the inner allocator with the caller's arguments; the counters
// only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { INNER.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { INNER.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { INNER.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { INNER.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

/// Bytes held now (through [`Counting`]).
pub fn current() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Restarts the peak at the bytes held now.
pub fn reset_peak() {
    PEAK.store(current(), Ordering::Relaxed);
}

/// The peak bytes held since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Peak bytes held above those held at the start, while `f` runs.
pub fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    reset_peak();
    let start = current();
    let out = f();
    (out, peak().saturating_sub(start))
}

/// The allocator's name, for the printed ratios.
pub fn allocator_name() -> &'static str {
    if cfg!(feature = "bench-jemalloc") {
        "jemalloc (freed pages kept)"
    } else {
        "system (glibc malloc)"
    }
}

/// Reads criterion's mean estimate (ns) of `group/id` from this run's JSON (criterion stores a
/// function id `a/b` of `bench_function` as `a_b`, a `BenchmarkId` as `a/b`).
pub fn mean_ns(group: &str, id: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{dir}/criterion/{group}/{id}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

/// The MLP bench model: 784-512-512-10 with softmax cross-entropy.
pub const MLP_SIZES: [usize; 4] = [784, 512, 512, 10];

/// The MLP bench model.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
    fc3: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    /// A fresh model.
    pub fn new(device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(MLP_SIZES[0], MLP_SIZES[1]).init(device),
            fc2: LinearConfig::new(MLP_SIZES[1], MLP_SIZES[2]).init(device),
            fc3: LinearConfig::new(MLP_SIZES[2], MLP_SIZES[3]).init(device),
            act: Relu::new(),
        }
    }

    /// Logits of a batch `[n, 784]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.act.forward(self.fc1.forward(x));
        let h = self.act.forward(self.fc2.forward(h));
        self.fc3.forward(h)
    }

    /// Mean softmax cross-entropy of a batch `[n, 784]` with labels `[n]`: shape `[1]`.
    pub fn loss(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logp = burn::tensor::activation::log_softmax(self.forward(x), 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

/// The CNN bench model: conv 3×3 1→16 on 28×28, relu, conv 3×3 16→32, relu, mean over the
/// spatial dims, linear 32→10, softmax cross-entropy.
#[derive(Module, Debug)]
pub struct Cnn<B: Backend> {
    /// The first convolution.
    pub conv1: Conv2d<B>,
    /// The second convolution.
    pub conv2: Conv2d<B>,
    /// The head.
    pub fc: Linear<B>,
    act: Relu,
}

impl<B: Backend> Cnn<B> {
    /// A fresh model.
    pub fn new(device: &B::Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 16], [3, 3]).init(device),
            conv2: Conv2dConfig::new([16, 32], [3, 3]).init(device),
            fc: LinearConfig::new(32, 10).init(device),
            act: Relu::new(),
        }
    }

    /// Mean softmax cross-entropy of a batch `[n, 1, 28, 28]`.
    pub fn loss(&self, x: Tensor<B, 4>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let h = self.act.forward(self.conv1.forward(x));
        let h = self.act.forward(self.conv2.forward(h));
        let [n, c, hh, ww] = h.dims();
        let pooled = h.reshape([n, c, hh * ww]).mean_dim(2).reshape([n, c]);
        let logp = burn::tensor::activation::log_softmax(self.fc.forward(pooled), 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}
