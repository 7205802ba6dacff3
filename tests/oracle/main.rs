//! Loop-oracle tests for `Vmap<B>`: every required method of Burn's `FloatTensorOps`,
//! `IntTensorOps` and `BoolTensorOps` runs through `vmap` and must equal the loop of the
//! unbatched op over the examples (stacked along `out_axes`), for every mix of batched and
//! unbatched operands, batch axes `0`, `1`, `-1`, and nested levels.
//!
//! - `harness`: rank-erased operands, host-side oracle, configurations, proptest runner.
//! - `float_ops`, `int_ops`, `bool_ops`: the registered op cases (one per op or op family).
//! - `derived`: Burn's default (non-required) ops built on the required ones, and known gaps.
//! - `grads`: per-example gradients under `Autodiff<Vmap<_>>` against single-example backward.
//! - `misc`: batch size 0, reading data back inside vmap, explicit nestings, errors, and the
//!   oracle's own base: `Vmap<B>`'s unbatched pass-through against `B`.
//! - `coverage`: every required method maps to a registered oracle case.
//!
//! Environment: `ORACLE_FILTER=substring` runs only matching cases, `ORACLE_CASES=n` sets the
//! number of proptest cases per op (default 16).

#[macro_use]
mod harness;

/// Shorthand for an elementwise float/int/bool case over ranks `0..=3`, one operand.
macro_rules! unary {
    ($name:literal, [$($cov:literal),*], $gen:expr, $acc:ident, |$x:ident| $body:expr) => {
        $crate::harness::case($name, &[$($cov),*], 0..=3,
            |p| vec![$crate::harness::op(&p.shape(), $gen)],
            |_p, a| vec![ranked!(a[0], $acc, |$x| $body)])
    };
}

/// Shorthand for a binary case over ranks `0..=3` whose operands may broadcast (size-1 dims).
macro_rules! binary {
    ($name:literal, [$($cov:literal),*], $ga:expr, $gb:expr, $acc:ident, |$x:ident, $y:ident| $body:expr) => {
        $crate::harness::case($name, &[$($cov),*], 0..=3,
            |p| {
                let (sa, sb) = $crate::bpair(p);
                vec![$crate::harness::op(&sa, $ga), $crate::harness::op(&sb, $gb)]
            },
            |_p, a| vec![ranked!(a[0], $acc, a[1], $acc, |$x, $y| $body)])
    };
}

/// Shorthand for a binary case over ranks `0..=3` with equal operand shapes (ops whose
/// backends do not broadcast logical dims).
macro_rules! binary_eq {
    ($name:literal, [$($cov:literal),*], $ga:expr, $gb:expr, $acc:ident, |$x:ident, $y:ident| $body:expr) => {
        $crate::harness::case($name, &[$($cov),*], 0..=3,
            |p| vec![$crate::harness::op(&p.shape(), $ga), $crate::harness::op(&p.shape(), $gb)],
            |_p, a| vec![ranked!(a[0], $acc, a[1], $acc, |$x, $y| $body)])
    };
}

/// Operand shapes of a binary broadcasting op: equal, or one side with some dims set to 1.
pub fn bpair(p: &harness::P) -> (Vec<usize>, Vec<usize>) {
    match p.pick(7, 3) {
        0 => (p.shape(), p.shape()),
        1 => (p.shape(), p.bshape(8)),
        _ => (p.bshape(9), p.shape()),
    }
}

mod bool_ops;
mod coverage;
mod derived;
mod float_ops;
mod grads;
mod int_ops;
mod misc;

#[test]
fn oracle_float_ops() {
    harness::run_cases(float_ops::cases());
}

#[test]
fn oracle_int_ops() {
    harness::run_cases(int_ops::cases());
}

#[test]
fn oracle_bool_ops() {
    harness::run_cases(bool_ops::cases());
}

#[test]
fn oracle_derived_ops() {
    harness::run_cases(derived::cases());
}
