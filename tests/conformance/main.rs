//! Conformance runner over the reference vectors (`tests/vectors/`, see `FORMAT.md` and
//! `PROVENANCE.md` there).
//!
//! Every `*.json` case of the directory named by `BURN_VMAP_VECTORS` (default
//! `<crate>/tests/vectors`) is parsed into a [`Case`], its `program` id is mapped to a Rust
//! function (section "programs"), the transform named by `api` is applied with `params`
//! (section "apis"), and every key of `expected` is compared within the case's tolerance
//! (section "comparison"). One line is printed per case:
//!
//! ```text
//! PASS <name>
//! FAIL <name>: <why>
//! SKIP <name>: <api> not implemented yet
//! ```
//!
//! followed by `conformance: N passed, M failed, K skipped`; the test fails when `M > 0`.
//! `BURN_VMAP_FILTER=<substring>` restricts the run to the cases whose name contains it.
//!
//! Programs are written once, for any rank: arguments and results are dynamic pytrees ([`Pt`]),
//! which implement the library's [`Tree`] trait, and each program dispatches on the ranks it
//! gets (the rank it sees under `vmap` is the logical rank, mapped axes removed). So the same
//! program runs under any `in_axes` / `out_axes` / batch size.
//!
//! Burn 0.22: tensors carry no backend (`Tensor<D, K>`), and a transform *records* the program
//! once on Burn's capture device, then runs the recording batched (`ARCHITECTURE.md`). So
//! a program reads tensors only through its arguments (a `captured` input is passed as an
//! unmapped argument), never reads values, and may take gradients and call `vmap` itself (both
//! are recorded). `jax.value_and_grad` runs the program eagerly on an autodiff device.
//!
//! To add an api: write `fn api_<name>(case: &Case) -> Result<Run, String>` in the "apis"
//! section and add it to [`run_api`]. To add a program: write it in `programs` and register it
//! in [`program`].
//!
//! The runner is this file; the parts are modules: `case` (the JSON model), `pytree` ([`Pt`]),
//! `io` (inputs and outputs), `compare`, `apis/` (one function per api) and `programs`.
//! `apis/micro.rs`, `apis/auto.rs`, `apis/powerpax.rs` and `extra.rs` (more powerpax cases
//! against host loops) are ported as far as the 0.21 transforms show, but are not built until
//! their transforms are in the 0.22 crate (see the comment at the top of each); their cases
//! SKIP meanwhile.

// =================================================================================================
// Rank dispatch
// =================================================================================================

/// Highest rank a program argument or result may have.
const MAX_RANK: usize = 6;

/// `with_rank!(r, D => body)`: runs `body` with a `const D: usize = r` (0..=6).
macro_rules! with_rank {
    ($rank:expr, $D:ident => $body:expr) => {
        match $rank {
            0 => {
                const $D: usize = 0;
                $body
            }
            1 => {
                const $D: usize = 1;
                $body
            }
            2 => {
                const $D: usize = 2;
                $body
            }
            3 => {
                const $D: usize = 3;
                $body
            }
            4 => {
                const $D: usize = 4;
                $body
            }
            5 => {
                const $D: usize = 5;
                $body
            }
            6 => {
                const $D: usize = 6;
                $body
            }
            r => panic!("runner: rank {r} is not supported (max {MAX_RANK})"),
        }
    };
}

/// `with_rank_m1!(r, D, DM => body)`: as [`with_rank!`] with also `const DM: usize = D - 1`
/// (ranks 1..=6), for ops that drop an axis.
macro_rules! with_rank_m1 {
    ($rank:expr, $D:ident, $DM:ident => $body:expr) => {
        match $rank {
            1 => {
                const $D: usize = 1;
                const $DM: usize = 0;
                $body
            }
            2 => {
                const $D: usize = 2;
                const $DM: usize = 1;
                $body
            }
            3 => {
                const $D: usize = 3;
                const $DM: usize = 2;
                $body
            }
            4 => {
                const $D: usize = 4;
                const $DM: usize = 3;
                $body
            }
            5 => {
                const $D: usize = 5;
                const $DM: usize = 4;
                $body
            }
            6 => {
                const $D: usize = 6;
                const $DM: usize = 5;
                $body
            }
            r => panic!("runner: rank {r} is not supported here (1..={MAX_RANK})"),
        }
    };
}

mod apis;
mod case;

/// Why case `name` is skipped under Burn's fusion (the crate's `fusion` feature on a cubecl
/// backend), if it is: the scans over rank-0 steps (`sliced_scan_xs_*`: `xs [n]`, a rank-0
/// carry) run the step function, Burn code, on rank-0 tensors, and Burn 0.22.1's fused kernels
/// index a rank-0 tensor's strides at `rank - 1` and fail ("index out of bounds: the len is 0").
/// The same gap as the rank-0 cases CI skips on wgpu (`.ci/run`); `sliced_scan_xs2_*` run.
pub(crate) fn fusion_skip(name: &str) -> Option<&'static str> {
    let fused = cfg!(feature = "fusion") && cfg!(any(feature = "wgpu", feature = "cuda"));
    (fused && name.starts_with("sliced_scan_xs_"))
        .then_some("Burn 0.22.1's fusion fails on rank-0 tensors (the scan's steps are rank 0)")
}
mod compare;
mod extra;
mod io;
mod programs;
mod pytree;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use burn::tensor::kind::{Basic, TensorKind};
use burn::tensor::{Bool, Device, Float, Gradients, Int, Tensor, TensorData};
use burn_vmap::transform::Axes;
use burn_vmap::tree::{Key, Leaf, Leaves, NodeKind, Spec, TreeDef};
use burn_vmap::{Tree, VmapError, vmap};
use serde_json::Value;

pub(crate) use apis::*;
pub(crate) use case::*;
pub(crate) use compare::*;
pub(crate) use io::*;
pub(crate) use programs::{GradProgram, Program, grad_program, program};
pub(crate) use pytree::*;

thread_local! {
    /// Message and location of the last panic on this thread (set by the runner's panic hook).
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    LAST_PANIC
        .with(|p| p.borrow_mut().take())
        .unwrap_or_else(|| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic with a non-string payload".into())
        })
}

pub(crate) fn run_case(case: &Case) -> Outcome {
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        run_api(case).map(|r| r.and_then(|run| judge(case, run)))
    }));
    match result {
        Ok(None) => Outcome::Skip(format!("{} not implemented yet", case.api)),
        Ok(Some(Ok(()))) => Outcome::Pass,
        Ok(Some(Err(why))) => Outcome::Fail(why),
        Err(payload) => Outcome::Fail(format!("panicked: {}", panic_message(&*payload))),
    }
}

#[test]
pub(crate) fn conformance() {
    let dir = vectors_dir();
    let filter = std::env::var("BURN_VMAP_FILTER").ok();
    let cases = load_cases(&dir);
    assert!(!cases.is_empty(), "no *.json case in {}", dir.display());

    // Panics are FAILs of their case: record the message instead of printing it.
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()));
        if let Some(msg) = msg {
            let at = info
                .location()
                .map(|l| format!(" (at {}:{})", l.file(), l.line()))
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
        }
    }));

    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, case) in &cases {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        LAST_PANIC.with(|p| p.borrow_mut().take());
        let outcome = match (case, fusion_skip(name)) {
            (Ok(_), Some(why)) => Outcome::Skip(why.into()),
            (Ok(case), None) => run_case(case),
            (Err(e), _) => Outcome::Fail(e.clone()),
        };
        match outcome {
            Outcome::Pass => {
                passed += 1;
                println!("PASS {name}");
            }
            Outcome::Fail(why) => {
                failed += 1;
                println!("FAIL {name}: {why}");
            }
            Outcome::Skip(why) => {
                skipped += 1;
                println!("SKIP {name}: {why}");
            }
        }
    }
    panic::set_hook(default_hook);

    println!("conformance: {passed} passed, {failed} failed, {skipped} skipped");
    assert_eq!(
        failed, 0,
        "{failed} conformance case(s) failed (see the FAIL lines above)"
    );
}
