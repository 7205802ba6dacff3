//! Compile-fail cases of `#[derive(Tree)]` (trybuild): each error points at the user's code.
//!
//! The `.stderr` snapshots are pinned to the installed toolchain (rustc 1.95); compiler messages
//! change between releases: regenerate them with
//! `TRYBUILD=overwrite cargo test --test ui` (at the root) after a toolchain change and
//! review the diff.
//!
//! They live in a crate of their own (`derive/ui`): see its `Cargo.toml` for why.

#[test]
fn should_fail_to_compile_bad_derives() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
