//! Compile-fail cases of `#[derive(Tree)]` (trybuild): each error points at the user's code.
//!
//! The `.stderr` snapshots are pinned to the installed toolchain (rustc 1.95); compiler messages
//! change between releases: regenerate them with
//! `TRYBUILD=overwrite cargo test --test ui` (at the root) after a toolchain change and
//! review the diff.
//!
//! They live in this crate, not in `burn-vmap`'s tests, because trybuild checks every
//! dependency of the crate under test again in a target dir of its own, dev-dependencies
//! included: here that is Burn and `burn-vmap` without its default features, not burn-train,
//! criterion and the rest of the main crate's dev-dependencies.

#[test]
fn should_fail_to_compile_bad_derives() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
