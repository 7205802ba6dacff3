//! The loop oracle through the public front end: for every op family of Burn 0.22's tensor
//! API, `vmap(f)(xs)` (Burn 0.22 `Tensor<D>` code, recorded once on the capture device and run
//! on the batching engine) must equal the loop of `f` over the examples on the user's device,
//! stacked along `out_axes`, for every mix of batched and unbatched operands, batch axes `0`,
//! `1`, `-1`, and 1-3 nested levels (a `vmap` inside the recorded function).
//!
//! - `harness`, `host`, `run`: rank-erased operands, host-side oracle, configurations, runner.
//! - `kinds`, `float_ops`, `int_ops`, `bool_ops`: the op cases (one per op or op family).
//! - `derived`: Burn's composite ops (stack, repeat, sort, topk, activations, ...).
//! - `module_ops`: convolutions, pools, interpolate, attention, normalization, embedding,
//!   and the backend's own module ops called through `Dispatch`.
//! - `random`: random ops in each `Randomness` mode.
//! - `grads`: `per_example_grads` of modules against the loop of Burn's own backward.
//! - `misc`: batch size 0, value reads, explicit nestings, errors.
//! - `coverage`: every `OperationIr` variant of Burn 0.22.1 is produced by some oracle case,
//!   observed by recording the cases on Burn's capture device, or is in a documented allow-list.
//!
//! Environment: `ORACLE_FILTER=substring` runs only matching cases, `ORACLE_CASES=n` sets the
//! number of proptest cases per op (default 16).

#[macro_use]
mod harness;
mod host;
mod run;

/// Shorthand for an elementwise case over ranks `0..=3`, one operand.
macro_rules! unary {
    ($name:literal, $gen:expr, $acc:ident, |$x:ident| $body:expr) => {
        $crate::run::case(
            $name,
            0..=3,
            |p| vec![$crate::harness::op(&p.shape(), $gen)],
            |_p, a| vec![ranked!(a[0], $acc, |$x| $body)],
        )
    };
}

/// Shorthand for a binary case over ranks `0..=3` whose operands may broadcast (size-1 dims).
macro_rules! binary {
    ($name:literal, $ga:expr, $gb:expr, $acc:ident, |$x:ident, $y:ident| $body:expr) => {
        $crate::run::case(
            $name,
            0..=3,
            |p| {
                let (sa, sb) = $crate::bpair(p);
                vec![$crate::harness::op(&sa, $ga), $crate::harness::op(&sb, $gb)]
            },
            |_p, a| vec![ranked!(a[0], $acc, a[1], $acc, |$x, $y| $body)],
        )
    };
}

/// Shorthand for a binary case over ranks `0..=3` with equal operand shapes.
macro_rules! binary_eq {
    ($name:literal, $ga:expr, $gb:expr, $acc:ident, |$x:ident, $y:ident| $body:expr) => {
        $crate::run::case(
            $name,
            0..=3,
            |p| {
                vec![
                    $crate::harness::op(&p.shape(), $ga),
                    $crate::harness::op(&p.shape(), $gb),
                ]
            },
            |_p, a| vec![ranked!(a[0], $acc, a[1], $acc, |$x, $y| $body)],
        )
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

mod backend_ops;
mod bool_ops;
mod coverage;
mod derived;
mod float_ops;
mod gaps;
mod grads;
mod int_ops;
mod kinds;
mod misc;
mod module_ops;
mod numeric;
mod random;

/// Every registered op case.
pub fn all_cases() -> Vec<run::OpCase> {
    let mut v = float_ops::cases();
    v.extend(int_ops::cases());
    v.extend(bool_ops::cases());
    v.extend(derived::cases());
    v.extend(module_ops::cases());
    v.extend(backend_ops::cases());
    v.extend(numeric::cases());
    v
}

#[test]
fn oracle_float_ops() {
    run::run_cases(float_ops::cases());
}

#[test]
fn oracle_int_ops() {
    run::run_cases(int_ops::cases());
}

#[test]
fn oracle_bool_ops() {
    run::run_cases(bool_ops::cases());
}

#[test]
fn oracle_derived_ops() {
    run::run_cases(derived::cases());
}

#[test]
fn oracle_module_ops() {
    run::run_cases(module_ops::cases());
}

#[test]
fn oracle_backend_ops() {
    run::run_cases(backend_ops::cases());
}

#[test]
fn oracle_numeric_ops() {
    run::run_cases(numeric::cases());
}
