//! Configurations (which operands are mapped at which level, on which axis), the two sides of
//! the law (the loop on the user's device, nested `vmap` calls), and the proptest runner.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn_vmap::tree::Spec;
use burn_vmap::{Randomness, VmapError, vmap};
use proptest::test_runner::{Config, TestCaseError, TestRng, TestRunner};

use crate::harness::{Operand, P, Rng, T, quietly, shape_strategy};
use crate::host::{Host, TOL, Tol, diff};

/// One vmap level.
#[derive(Clone, Debug)]
pub struct LevelCfg {
    pub size: usize,
    /// Per operand: `None` (not mapped) or the axis (may be negative).
    pub in_axes: Vec<Option<isize>>,
    /// Per output: the axis (may be negative).
    pub out_axes: Vec<isize>,
}

pub fn norm(axis: isize, rank: usize) -> usize {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    assert!(
        a >= 0 && (a as usize) < rank,
        "axis {axis} out of range for rank {rank}"
    );
    a as usize
}

/// Axis choices `{0, 1, -1}` valid for a tensor of `rank` (at least 1).
fn axis_choices(rank: usize) -> Vec<isize> {
    let mut v = vec![0isize, -1];
    if rank >= 3 {
        v.push(1);
    }
    v
}

/// Builds the levels (outermost first) given, per level, which operands are mapped.
pub fn make_levels(
    rng: &mut Rng,
    base_ranks: &[usize],
    out_ranks: &[usize],
    mapped: &[Vec<bool>],
    sizes: &[usize],
) -> Vec<LevelCfg> {
    let nl = mapped.len();
    (0..nl)
        .map(|l| {
            let in_axes = (0..base_ranks.len())
                .map(|o| {
                    if !mapped[l][o] {
                        return None;
                    }
                    // Rank of operand o at level l: its base rank plus the levels >= l mapping it.
                    let rank = base_ranks[o] + (l..nl).filter(|&m| mapped[m][o]).count();
                    Some(rng.choose(&axis_choices(rank)))
                })
                .collect();
            let out_axes = out_ranks
                .iter()
                .map(|&r| rng.choose(&axis_choices(r + (nl - l))))
                .collect();
            LevelCfg {
                size: sizes[l],
                in_axes,
                out_axes,
            }
        })
        .collect()
}

/// Batched host inputs for `levels`: per-example shape with the mapped axes inserted
/// (innermost level first), values drawn for the full shape.
pub fn make_inputs(rng: &mut Rng, operands: &[Operand], levels: &[LevelCfg]) -> Vec<Host> {
    operands
        .iter()
        .enumerate()
        .map(|(o, spec)| {
            let mut shape = spec.shape.clone();
            for lvl in levels.iter().rev() {
                if let Some(a) = lvl.in_axes[o] {
                    let at = norm(a, shape.len() + 1);
                    shape.insert(at, lvl.size);
                }
            }
            Host::r#gen(&shape, &spec.r#gen, rng)
        })
        .collect()
}

/// An op under test: `f` maps per-example operands to per-example outputs.
pub type OpFn = fn(&P, Vec<T>) -> Vec<T>;

/// The oracle: loop over the examples of every level, run `f` on the user's device, stack.
pub fn oracle(
    f: &dyn Fn(Vec<T>) -> Vec<T>,
    args: &[Host],
    levels: &[LevelCfg],
    out_example: &[Host],
) -> Vec<Host> {
    let Some((lvl, rest)) = levels.split_first() else {
        return f(args.iter().map(Host::to_t).collect())
            .into_iter()
            .map(Host::from_t)
            .collect();
    };
    let per_example: Vec<Vec<Host>> = (0..lvl.size)
        .map(|i| {
            let args_i: Vec<Host> = args
                .iter()
                .zip(&lvl.in_axes)
                .map(|(a, ax)| match ax {
                    Some(ax) => a.take(norm(*ax, a.shape.len()), i),
                    None => a.clone(),
                })
                .collect();
            oracle(f, &args_i, rest, out_example)
        })
        .collect();
    (0..lvl.out_axes.len())
        .map(|k| {
            let parts: Vec<Host> = per_example.iter().map(|outs| outs[k].clone()).collect();
            // Shape of one part (for batch size 0): the example output with the inner levels.
            let mut part_shape = out_example[k].shape.clone();
            for l in rest.iter().rev() {
                let at = norm(l.out_axes[k], part_shape.len() + 1);
                part_shape.insert(at, l.size);
            }
            let empty = Host::filler(&part_shape, out_example[k].kind());
            Host::stack(&parts, norm(lvl.out_axes[k], part_shape.len() + 1), &empty)
        })
        .collect()
}

/// The vmapped computation: one `vmap` per level, each inner one called inside the function
/// the outer one records (nesting needs nothing else). Random ops draw per example
/// (`Different`), as the loop does; the cases' checks hold for any draw.
pub fn vmapped(
    f: &dyn Fn(Vec<T>) -> Vec<T>,
    args: Vec<T>,
    levels: &[LevelCfg],
) -> Result<Vec<T>, VmapError> {
    let Some((lvl, rest)) = levels.split_first() else {
        return Ok(f(args));
    };
    let in_axes = Spec::Seq(lvl.in_axes.iter().map(|a| Spec::Leaf(*a)).collect());
    let out_axes = Spec::Seq(lvl.out_axes.iter().map(|a| Spec::Leaf(Some(*a))).collect());
    vmap(|a: Vec<T>| vmapped(f, a, rest).unwrap_or_else(|e| panic!("inner vmap failed: {e}")))
        .randomness(Randomness::Different)
        .in_axes(in_axes)
        .out_axes(out_axes)
        .call_as::<Vec<T>, Vec<T>, Vec<T>, Vec<T>>(args)
}

pub fn describe(operands: &[Operand], levels: &[LevelCfg], inputs: &[Host]) -> String {
    let mut s = String::new();
    for (o, spec) in operands.iter().enumerate() {
        let maps: Vec<String> = levels
            .iter()
            .enumerate()
            .filter_map(|(l, lvl)| lvl.in_axes[o].map(|a| format!("L{l}:axis {a}")))
            .collect();
        let _ = write!(
            s,
            "\n    arg{o}: {:?} per-example {:?}, {} -> batched shape {:?}",
            spec.r#gen.kind(),
            spec.shape,
            if maps.is_empty() {
                "unbatched".to_string()
            } else {
                maps.join(", ")
            },
            inputs[o].shape
        );
    }
    for (l, lvl) in levels.iter().enumerate() {
        let _ = write!(
            s,
            "\n    level {l}: size {}, out_axes {:?}",
            lvl.size, lvl.out_axes
        );
    }
    s
}

/// Number of configurations compared with the oracle (for the summary line).
pub static CONFIGS_CHECKED: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` over one configuration and compares with the oracle.
pub fn check_levels(
    name: &str,
    f: &dyn Fn(Vec<T>) -> Vec<T>,
    operands: &[Operand],
    levels: &[LevelCfg],
    out_example: &[Host],
    rng: &mut Rng,
    tol: Tol,
) -> Result<(), String> {
    CONFIGS_CHECKED.fetch_add(1, Ordering::Relaxed);
    let inputs = make_inputs(rng, operands, levels);
    let expected = oracle(f, &inputs, levels, out_example);
    let args: Vec<T> = inputs.iter().map(Host::to_t).collect();
    let got = match quietly(|| vmapped(f, args, levels)) {
        Ok(Ok(outs)) => outs.into_iter().map(Host::from_t).collect::<Vec<_>>(),
        Ok(Err(e)) => {
            return Err(format!(
                "{name}: vmap returned an error: {e}{}",
                describe(operands, levels, &inputs)
            ));
        }
        Err(msg) => {
            return Err(format!(
                "{name}: vmap panicked: {msg}{}",
                describe(operands, levels, &inputs)
            ));
        }
    };
    if got.len() != expected.len() {
        return Err(format!(
            "{name}: {} outputs, expected {}",
            got.len(),
            expected.len()
        ));
    }
    for (k, (e, g)) in expected.iter().zip(&got).enumerate() {
        if let Some(d) = diff(e, g, tol) {
            return Err(format!(
                "{name}: output {k}: {d}{}",
                describe(operands, levels, &inputs)
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Registered op cases and the runner.
// ------------------------------------------------------------------------------------------

/// An oracle test: a name, its operands and op. Which `OperationIr` variants it exercises is
/// observed (`coverage.rs`), not declared.
#[derive(Clone)]
pub struct OpCase {
    /// Oracle test name (unique).
    pub name: &'static str,
    /// Per-example ranks drawn for `P::rank`.
    pub ranks: RangeInclusive<usize>,
    /// Per-example operands for the drawn parameters.
    pub operands: fn(&P) -> Vec<Operand>,
    /// The op.
    pub f: OpFn,
    /// Float tolerance.
    pub tol: Tol,
    /// Also run with nested levels.
    pub nested: bool,
}

/// Builder shorthand.
pub fn case(
    name: &'static str,
    ranks: RangeInclusive<usize>,
    operands: fn(&P) -> Vec<Operand>,
    f: OpFn,
) -> OpCase {
    OpCase {
        name,
        ranks,
        operands,
        f,
        tol: TOL,
        nested: true,
    }
}

impl OpCase {
    /// With a float tolerance.
    pub fn tol(mut self, rtol: f64, atol: f64) -> Self {
        self.tol = Tol { rtol, atol };
        self
    }
    /// One level only (heavy ops).
    pub fn flat(mut self) -> Self {
        self.nested = false;
        self
    }
}

/// Largest rank (per-example rank plus one per level) the configurations reach.
pub const MAX_RANK: usize = 6;

/// A mix of operands mapped at one level (at least one).
fn some_mapped(rng: &mut Rng, n: usize) -> Vec<bool> {
    loop {
        let m: Vec<bool> = (0..n).map(|_| rng.coin()).collect();
        if m.iter().any(|&x| x) {
            break m;
        }
    }
}

/// Every configuration for one drawn `P`: all batched/unbatched mixes at one level (random
/// axes, sizes `1..=4`), a few two-level nestings (outer maps one operand and inner another,
/// both levels on the same operand, random mixes) and one three-level nesting.
pub fn check_case(case: &OpCase, p: &P) -> Result<(), String> {
    let operands = (case.operands)(p);
    let n = operands.len();
    let mut rng = Rng::new(p.seed);
    let f = |a: Vec<T>| (case.f)(p, a);

    // One example, unbatched: the output kinds and shapes.
    let example: Vec<Host> = operands
        .iter()
        .map(|o| Host::r#gen(&o.shape, &o.r#gen, &mut rng))
        .collect();
    let out_example: Vec<Host> = quietly(|| {
        f(example.iter().map(Host::to_t).collect())
            .into_iter()
            .map(Host::from_t)
            .collect::<Vec<_>>()
    })
    .map_err(|msg| {
        format!(
            "{}: the op itself panicked on unbatched inputs (test bug?): {msg}; operands {operands:?}",
            case.name
        )
    })?;
    let base_ranks: Vec<usize> = operands.iter().map(|o| o.shape.len()).collect();
    let out_ranks: Vec<usize> = out_example.iter().map(|h| h.shape.len()).collect();
    let max_rank = base_ranks
        .iter()
        .chain(&out_ranks)
        .copied()
        .max()
        .unwrap_or(0);
    let max_levels = MAX_RANK.saturating_sub(max_rank);

    let mut configs: Vec<(Vec<Vec<bool>>, Vec<usize>)> = Vec::new();
    for mask in 1u32..(1 << n) {
        let mapped: Vec<bool> = (0..n).map(|o| mask & (1 << o) != 0).collect();
        configs.push((vec![mapped], vec![1 + rng.below(4)]));
    }
    if case.nested {
        let mut both = vec![false; n];
        both[0] = true;
        configs.push((
            vec![both.clone(), both],
            vec![1 + rng.below(3), 1 + rng.below(3)],
        ));
        if n >= 2 {
            let (mut a, mut b) = (vec![false; n], vec![false; n]);
            a[0] = true;
            b[1] = true;
            configs.push((
                vec![a.clone(), b.clone()],
                vec![1 + rng.below(3), 1 + rng.below(3)],
            ));
            configs.push((vec![b, a], vec![1 + rng.below(3), 1 + rng.below(3)]));
            for _ in 0..2 {
                let (x, y) = (some_mapped(&mut rng, n), some_mapped(&mut rng, n));
                configs.push((vec![x, y], vec![1 + rng.below(3), 1 + rng.below(3)]));
            }
        }
        let lv3: Vec<Vec<bool>> = (0..3).map(|_| some_mapped(&mut rng, n)).collect();
        configs.push((
            lv3,
            vec![1 + rng.below(2), 1 + rng.below(2), 1 + rng.below(2)],
        ));
    }

    for (mapped, sizes) in configs {
        if mapped.len() > max_levels {
            continue;
        }
        let levels = make_levels(&mut rng, &base_ranks, &out_ranks, &mapped, &sizes);
        check_levels(
            case.name,
            &f,
            &operands,
            &levels,
            &out_example,
            &mut rng,
            case.tol,
        )?;
    }
    Ok(())
}

/// Number of proptest cases per op (`ORACLE_CASES` overrides; 16 by default, as the 0.21
/// suite had on ndarray).
pub fn num_cases() -> u32 {
    std::env::var("ORACLE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

/// Cases the oracle skips on the cubecl backends (wgpu, CUDA), each with its reason (CHANGELOG,
/// Known issues). The first three are limits of Burn's own unbatched op there, so the loop the
/// oracle compares against cannot run; the others are open: `vmap` differs from the loop there.
const CUBECL_SKIPS: &[(&str, &str)] = &[
    (
        "interpolate_backward",
        "Burn's own op fails unbatched on cubecl (no bicubic backward; some bilinear sizes fail)",
    ),
    (
        "deform_conv2d",
        "Burn's own op panics unbatched on cubecl (\"range end index out of range for slice\")",
    ),
    (
        "grid_sample_2d",
        "Burn's own op fails unbatched on cubecl (\"Unsupported grid_sample interpolation mode: Nearest\")",
    ),
    (
        "float_scatter_nd",
        "Burn's own op loses updates at repeated index tuples on cubecl (the loop is wrong; vmap's is right: misc::scatter_nd_adds_every_update_at_a_repeated_tuple)",
    ),
    (
        "int_scatter_nd",
        "Burn's own op loses updates at repeated index tuples on cubecl (the loop is wrong; vmap's is right: misc::scatter_nd_adds_every_update_at_a_repeated_tuple)",
    ),
];

/// Whether this build's device is a cubecl one (wgpu, CUDA).
const CUBECL: bool = cfg!(any(feature = "wgpu", feature = "cuda"));

/// Under Burn's fusion: the crate's `fusion` feature (Burn's) on a cubecl backend.
pub const FUSED: bool = CUBECL && cfg!(feature = "fusion");

/// Cases whose loop Burn's fusion computes wrong (vmap's engine runs unfused: `runtime::cube`),
/// each asserted in `gaps.rs`.
pub const FUSION_SKIPS: &[(&str, &str)] = &[(
    "grad_scatter_mask",
    "Burn 0.22.1's fusion differentiates this loss wrong without any vmap (the loop is wrong): gaps::known_gap_fusion_scatter_mask_gradient",
)];

/// A proptest runner for `config`: proptest's random seed, or its fixed one with
/// `ORACLE_DETERMINISTIC=1` (CI's wgpu stage: the same configurations every run).
pub fn runner(config: Config) -> TestRunner {
    if std::env::var("ORACLE_DETERMINISTIC").is_ok_and(|v| v == "1") {
        let rng = TestRng::deterministic_rng(config.rng_algorithm);
        TestRunner::new_with_rng(config, rng)
    } else {
        TestRunner::new(config)
    }
}

/// The smallest per-example rank the oracle draws for a case whose ranks start at `start`. On
/// the cubecl backends (wgpu, CUDA) Burn's own unbatched ops panic on rank-0 tensors: cubecl
/// 0.11.3 indexes their strides at `rank - 1` ("index out of bounds: the len is 0 but the index
/// is 18446744073709551615"), so the loop the oracle compares against cannot run there
/// (CHANGELOG, Known issues). Flex runs every rank.
fn first_rank(start: usize) -> usize {
    if CUBECL { start.max(1) } else { start }
}

/// Runs every case (filtered by `ORACLE_FILTER`, a substring of the name) under proptest and
/// fails listing **every** failing case with its shrunk counterexample.
pub fn run_cases(cases: Vec<OpCase>) {
    // Every op must have a real batching rule: the loop fallback panics in strict mode.
    burn_vmap::strict::set_strict(true);
    let filter = std::env::var("ORACLE_FILTER").ok();
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases {
        if let Some(f) = &filter
            && !case.name.contains(f.as_str())
        {
            continue;
        }
        if CUBECL && let Some((_, why)) = CUBECL_SKIPS.iter().find(|(n, _)| *n == case.name) {
            println!("oracle: {} skipped on cubecl: {why}", case.name);
            continue;
        }
        let ranks = first_rank(*case.ranks.start())..=*case.ranks.end();
        if ranks.is_empty() {
            continue;
        }
        ran += 1;
        let mut config = Config::with_cases(num_cases());
        config.failure_persistence = None;
        config.max_shrink_iters = 256;
        let mut runner = runner(config);
        let result = runner.run(&shape_strategy(ranks), |p| {
            check_case(&case, &p).map_err(TestCaseError::fail)
        });
        if let Err(e) = result {
            failures.push(format!("[{}] {e}", case.name));
        }
    }
    println!(
        "oracle: {ran} cases run, {} configurations checked so far in this process",
        CONFIGS_CHECKED.load(Ordering::Relaxed)
    );
    if !failures.is_empty() {
        let mut msg = format!("{} of {ran} oracle cases failed:\n", failures.len());
        for f in &failures {
            msg.push_str(f);
            msg.push_str("\n\n");
        }
        panic!("{msg}");
    }
}
