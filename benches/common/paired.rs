//! Ratios of two workloads measured in alternation, so that a drift of the machine's speed
//! during a run (frequency, a neighbour's load) falls on both alike.
//!
//! Criterion measures one benchmark after the other: on a shared 2-core machine the standard
//! step and the step compared with it may run at different speeds, and the ratio of their
//! means moves by ±10% between runs. Here each round times a block of `a`, then of `b`, then of
//! `b`, then of `a` (ABBA, which also cancels a linear drift within the round), and the ratio
//! reported is the median over the rounds of `(B₁ + B₂) / (A₁ + A₂)`, with the quartiles beside
//! it.
//!
//! A block is one untimed run, then [`BLOCK`] timed ones. A step in training follows a step of
//! its own kind, and on Flex the first step after the other kind pays for memory laid out by
//! that other step (glibc's page faults: README, Performance). Timing single steps in strict
//! alternation would charge each workload for the other's memory.

use std::time::{Duration, Instant};

/// The timed runs of a block (after its untimed one).
pub const BLOCK: usize = 2;

/// The median and quartiles of `time(b) / time(a)` over ABBA rounds of blocks: as many rounds
/// as fit in `budget`, at least 10.
pub fn paired_ratio(budget: Duration, mut a: impl FnMut(), mut b: impl FnMut()) -> Ratio {
    let block = |f: &mut dyn FnMut()| {
        f();
        let start = Instant::now();
        for _ in 0..BLOCK {
            f();
        }
        start.elapsed().as_secs_f64()
    };
    let start = Instant::now();
    let mut ratios = Vec::new();
    while ratios.len() < 10 || start.elapsed() < budget {
        let a1 = block(&mut a);
        let b1 = block(&mut b);
        let b2 = block(&mut b);
        let a2 = block(&mut a);
        ratios.push((b1 + b2) / (a1 + a2));
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    Ratio {
        rounds: ratios.len(),
        median: at(0.5),
        low: at(0.25),
        high: at(0.75),
    }
}

/// A ratio's median and quartiles over the rounds.
#[derive(Clone, Copy, Debug)]
pub struct Ratio {
    pub rounds: usize,
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}x [{:.2}, {:.2}] ({} rounds)",
            self.median, self.low, self.high, self.rounds
        )
    }
}
