//! Compile-fail cases of `#[derive(Tree)]` (trybuild): each error points at the user's code.
//!
//! The `.stderr` snapshots are pinned to the installed toolchain (rustc 1.95); compiler messages
//! change between releases: regenerate them with
//! `TRYBUILD=overwrite cargo test --test derive_ui` after a toolchain change
//! and review the diff.

/// The derive does not depend on the device's backend: the cases run in the default (flex)
/// build only, not again under `--features wgpu`/`cuda` (trybuild rebuilds every dependency
/// for them).
#[test]
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn should_fail_to_compile_bad_derives() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
