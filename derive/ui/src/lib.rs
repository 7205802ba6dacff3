//! Compile-fail cases of burn-vmap's `#[derive(Tree)]`: see `tests/ui.rs`. This crate has no
//! code; it holds the cases apart from the proc-macro crate (see `Cargo.toml`).
