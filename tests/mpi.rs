#![cfg(feature = "mpi")]
//! The MPI engine (`burn_vmap::distributed::mpi::Mpi`) under `mpirun` on loopback.
//!
//! `cargo test --features mpi --test mpi` runs every test twice, under `mpirun -np 2` and
//! `mpirun -np 3 --oversubscribe` (the harness in `tests/mpirun/`).

mod mpirun;

use std::time::{Duration, Instant};

use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_vmap::distributed::mpi::Mpi;
use burn_vmap::distributed::{
    Collective, CollectiveError, Local, all_reduce_grads, flatten_grads, unflatten_grads,
};
use burn_vmap::{ParamGrads, per_example_grads};

use mpirun::{
    SIZES, assert_same_on_every_rank, fingerprint, mpirun, on_ranks, say, tagged, under_mpirun,
};

/// The timeout of the collectives that should complete.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The timeout of the stalled-peer test, and how late a survivor may report it.
const STALL_TIMEOUT: Duration = Duration::from_millis(1000);
const STALL_SLACK: Duration = Duration::from_millis(1000);
/// `MPI_Abort`'s code in the stalled-peer test.
const ABORT_CODE: i32 = 3;

/// Rank `rank`'s contribution: values of mixed signs and magnitudes, whose sum depends on the
/// order of the additions in its last bits.
fn contribution(rank: usize, len: usize) -> Vec<f32> {
    let mut state =
        0x9E37_79B9_7F4A_7C15u64 ^ (rank as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let scale = [1e-3, 1.0, 1e3][(state % 3) as usize];
            unit * scale
        })
        .collect()
}

#[test]
fn should_sum_bit_identically_on_every_rank() {
    const LEN: usize = 100_003;
    on_ranks(
        "should_sum_bit_identically_on_every_rank",
        |mpi| {
            let mut sum = contribution(mpi.rank(), LEN);
            mpi.all_reduce_sum(&mut sum, TIMEOUT).unwrap();
            // Against a sum in f64 of every rank's contribution.
            let ranks: Vec<Vec<f32>> = (0..mpi.size()).map(|r| contribution(r, LEN)).collect();
            for (i, s) in sum.iter().enumerate() {
                let exact: f64 = ranks.iter().map(|c| f64::from(c[i])).sum();
                let bound: f64 = ranks.iter().map(|c| f64::from(c[i].abs())).sum();
                assert!(
                    (f64::from(*s) - exact).abs() <= 1e-6 * bound + 1e-12,
                    "element {i}: {s} != {exact}"
                );
            }
            say(format!(
                "SUM rank={} fingerprint={:016x}",
                mpi.rank(),
                fingerprint(&sum)
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "SUM"),
    );
}

#[test]
fn should_take_part_with_an_empty_shard() {
    on_ranks(
        "should_take_part_with_an_empty_shard",
        |mpi| {
            // Rank 1 sampled no example: it contributes zeros, and still calls.
            let mine = |r: usize| {
                if r == 1 {
                    vec![0.0f32; 5]
                } else {
                    (0..5).map(|i| (10 * r + i) as f32).collect()
                }
            };
            let mut sum = mine(mpi.rank());
            mpi.all_reduce_sum(&mut sum, TIMEOUT).unwrap();
            let expected: Vec<f32> = (0..5)
                .map(|i| (0..mpi.size()).map(|r| mine(r)[i]).sum())
                .collect();
            assert_eq!(sum, expected);
            // Every rank empty: a collective of no values, still in step afterwards.
            mpi.all_reduce_sum(&mut [], TIMEOUT).unwrap();
            let mut ones = vec![1.0f32; 3];
            mpi.all_reduce_sum(&mut ones, TIMEOUT).unwrap();
            assert_eq!(ones, vec![mpi.size() as f32; 3]);
            say(format!("EMPTY rank={} sum={sum:?}", mpi.rank()));
        },
        |np, out| assert_same_on_every_rank(np, out, "EMPTY"),
    );
}

#[test]
fn should_wait_for_a_late_peer_within_the_timeout() {
    on_ranks(
        "should_wait_for_a_late_peer_within_the_timeout",
        |mpi| {
            // Later than the engine's hot polling, well within the timeout.
            if mpi.rank() == mpi.size() - 1 {
                std::thread::sleep(Duration::from_millis(500));
            }
            let started = Instant::now();
            let mut ones = vec![1.0f32; 1000];
            mpi.all_reduce_sum(&mut ones, Duration::from_secs(5))
                .unwrap();
            assert_eq!(ones, vec![mpi.size() as f32; 1000]);
            say(format!(
                "LATE rank={} waited_ms={}",
                mpi.rank(),
                started.elapsed().as_millis() / 100 * 100
            ));
        },
        |np, out| assert_eq!(tagged(out, "LATE").len(), np),
    );
}

/// Nanoseconds since the Unix epoch: the ranks of one node share the clock, so a rank's arrival
/// and another's completion compare.
fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos()
}

/// The lengths of the late-peer test: 2 MiB and 16 MiB of `f32`.
const LATE_LENS: [usize; 2] = [1 << 19, 1 << 22];
/// How late the last rank comes (past the engine's 200 ms of hot polling at a collective's
/// opening).
const LATENESS: Duration = Duration::from_millis(400);

/// One rank of the late-peer job: per length, the on-time all-reduce's time (the median of
/// three), then two all-reduces whose last rank arrives [`LATENESS`] late; each rank prints, per
/// late trial, when the last rank arrived and when it was done (timing noise only slows a run:
/// the parent takes the better trial).
fn late_peer_rank(mpi: &Mpi) {
    let last = mpi.size() - 1;
    let mut sync = [0f32];
    for len in LATE_LENS {
        let values = contribution(mpi.rank(), len);
        // Warm up (the shared-memory segments, the pages), then the on-time calls.
        mpi.all_reduce_sum(&mut values.clone(), TIMEOUT).unwrap();
        let mut on_time: Vec<u128> = (0..3)
            .map(|_| {
                mpi.all_reduce_sum(&mut sync, TIMEOUT).unwrap();
                let started = Instant::now();
                mpi.all_reduce_sum(&mut values.clone(), TIMEOUT).unwrap();
                started.elapsed().as_nanos()
            })
            .collect();
        on_time.sort_unstable();
        for trial in 0..2 {
            mpi.all_reduce_sum(&mut sync, TIMEOUT).unwrap();
            if mpi.rank() == last {
                std::thread::sleep(LATENESS);
            }
            let arrived = now_ns();
            mpi.all_reduce_sum(&mut values.clone(), TIMEOUT).unwrap();
            let done = now_ns();
            say(format!(
                "LATEPEER rank={} len={len} trial={trial} on_time_ns={} arrived_ns={arrived} \
                 done_ns={done}",
                mpi.rank(),
                on_time[1]
            ));
        }
    }
}

/// Issue 46, item 1: over shared memory (one node's default), an all-reduce whose last rank
/// arrives 400 ms late completes soon after it arrives, at 2 MiB and 16 MiB. (The engine used to
/// poll every millisecond after 200 ms, and MPI moves a large buffer only inside MPI calls: a
/// late 2 MiB all-reduce took 310–360 ms, some 70 times the on-time call.) The issue measured
/// within 1.5x of the on-time all-reduce's time, which the test prints; it asserts within 3x
/// plus 10 ms, the slack of a loaded 2-core runner (2.0x there on 2026-11-29: 9.1 ms against
/// 4.6 ms), which the old behaviour still exceeds several times over.
#[test]
fn should_finish_soon_after_a_late_peer_arrives_over_shared_memory() {
    const NAME: &str = "should_finish_soon_after_a_late_peer_arrives_over_shared_memory";
    if under_mpirun() {
        late_peer_rank(&Mpi::init().unwrap());
        return;
    }
    for np in SIZES {
        let out = mpirun::mpirun_over(NAME, np, &[], mpirun::SHARED_MEMORY);
        assert!(out.status.success(), "mpirun -np {np} failed");
        let lines = tagged(&out, "LATEPEER");
        assert_eq!(lines.len(), np * LATE_LENS.len() * 2, "{lines:?}");
        let num = |l: &String, key: &str| -> u128 { mpirun::field(l, key).parse().unwrap() };
        for len in LATE_LENS {
            let of = |trial: u128| -> Vec<&String> {
                lines
                    .iter()
                    .filter(|l| num(l, "len") == len as u128 && num(l, "trial") == trial)
                    .collect()
            };
            let on_time = of(0).iter().map(|l| num(l, "on_time_ns")).max().unwrap();
            // Per trial, the slowest rank's completion after the last arrival; the better trial.
            let after = (0..2)
                .map(|t| {
                    let arrival = of(t).iter().map(|l| num(l, "arrived_ns")).max().unwrap();
                    of(t)
                        .iter()
                        .map(|l| num(l, "done_ns").saturating_sub(arrival))
                        .max()
                        .unwrap()
                })
                .min()
                .unwrap();
            println!(
                "np {np}, {} MiB: done {:.1} ms after the last arrival, on time {:.1} ms",
                (len * 4) >> 20,
                after as f64 / 1e6,
                on_time as f64 / 1e6
            );
            assert!(
                after as f64 <= 3.0 * on_time as f64 + 10e6,
                "np {np}, {len} floats: {after} ns after the last arrival, against {on_time} ns \
                 on time: {lines:?}"
            );
        }
    }
}

#[test]
fn should_refuse_lengths_that_differ_across_ranks() {
    on_ranks(
        "should_refuse_lengths_that_differ_across_ranks",
        |mpi| {
            let last = mpi.size() - 1;
            let len = if mpi.rank() == last { 9 } else { 8 };
            let mut values = vec![1.0f32; len];
            let err = mpi.all_reduce_sum(&mut values, TIMEOUT).unwrap_err();
            assert_eq!(
                err,
                CollectiveError::Mismatch {
                    operation: "all_reduce_sum",
                    expected: 8,
                    got: 9,
                    rank: Some(last),
                }
            );
            assert_eq!(values, vec![1.0; len], "nothing reduced");
            let err = mpi.broadcast(&mut values, 0, TIMEOUT).unwrap_err();
            assert!(matches!(err, CollectiveError::Mismatch { .. }), "{err}");
            // Nothing is in flight: the engine goes on.
            let mut ones = vec![1.0f32; 4];
            mpi.all_reduce_sum(&mut ones, TIMEOUT).unwrap();
            assert_eq!(ones, vec![mpi.size() as f32; 4]);
            say(format!("MISMATCH rank={} error={err}", mpi.rank()));
        },
        |np, out| assert_same_on_every_rank(np, out, "MISMATCH"),
    );
}

#[test]
fn should_broadcast_from_any_root() {
    on_ranks(
        "should_broadcast_from_any_root",
        |mpi| {
            let root = mpi.size() - 1;
            let mut values = contribution(mpi.rank(), 1000);
            mpi.broadcast(&mut values, root, TIMEOUT).unwrap();
            assert_eq!(fingerprint(&values), fingerprint(&contribution(root, 1000)));
            let mut seed = [mpi.rank() as u8; 32];
            mpi.broadcast_bytes(&mut seed, root, TIMEOUT).unwrap();
            assert_eq!(seed, [root as u8; 32]);
            let err = mpi.broadcast(&mut values, mpi.size(), TIMEOUT).unwrap_err();
            assert!(matches!(err, CollectiveError::Root { .. }), "{err}");
            say(format!(
                "BROADCAST rank={} fingerprint={:016x}",
                mpi.rank(),
                fingerprint(&values)
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "BROADCAST"),
    );
}

/// The stalled-peer job's ranks: the last one sleeps past the timeout, the survivors report
/// their typed error and stop the job.
fn stalled_peer(mpi: &Mpi) -> ! {
    let stalled = mpi.size() - 1;
    if mpi.rank() == stalled {
        // Never reaches the collective in time; the survivors' abort kills it.
        std::thread::sleep(STALL_TIMEOUT * 20);
        say(format!("STALLED rank={} was not stopped", mpi.rank()));
        std::process::exit(1);
    }
    let started = Instant::now();
    let err = mpi
        .all_reduce_sum(&mut vec![1.0f32; 1000], STALL_TIMEOUT)
        .unwrap_err();
    let returned = started.elapsed();
    let CollectiveError::Timeout {
        operation, waited, ..
    } = err
    else {
        panic!("expected a timeout, got {err}");
    };
    // The engine refuses to go on with a collective in flight.
    let refused = mpi.all_reduce_sum(&mut [1.0], TIMEOUT).unwrap_err();
    assert!(matches!(refused, CollectiveError::Engine(_)), "{refused}");
    say(format!(
        "TIMEOUT rank={} operation={operation} waited_ms={} returned_ms={}",
        mpi.rank(),
        waited.as_millis(),
        returned.as_millis()
    ));
    // Every survivor reports before the first one stops the job.
    std::thread::sleep(Duration::from_millis(500));
    mpi.abort(ABORT_CODE)
}

#[test]
fn should_time_out_on_a_stalled_peer() {
    const NAME: &str = "should_time_out_on_a_stalled_peer";
    if under_mpirun() {
        stalled_peer(&Mpi::init().unwrap());
    }
    for np in SIZES {
        let started = Instant::now();
        let out = mpirun(NAME, np);
        let elapsed = started.elapsed();
        assert_eq!(
            out.status.code(),
            Some(ABORT_CODE),
            "mpirun -np {np}: the survivors abort with code {ABORT_CODE}"
        );
        let lines = tagged(&out, "TIMEOUT");
        assert_eq!(lines.len(), np - 1, "every survivor reports: {lines:?}");
        for line in &lines {
            assert!(line.contains("operation=all_reduce_sum"), "{line}");
            let returned: u64 = line
                .rsplit_once("returned_ms=")
                .and_then(|(_, ms)| ms.parse().ok())
                .expect("returned_ms");
            let returned = Duration::from_millis(returned);
            assert!(
                returned >= STALL_TIMEOUT && returned <= STALL_TIMEOUT + STALL_SLACK,
                "{line}: the timeout came after {returned:?}"
            );
        }
        assert!(
            tagged(&out, "STALLED").is_empty(),
            "the stalled rank was killed"
        );
        assert!(
            elapsed < STALL_TIMEOUT * 15,
            "no hang: the job ended after {elapsed:?}"
        );
    }
}

/// A `Linear` with fixed weights, equal on every rank.
fn linear(device: &Device) -> Linear {
    let mut model: Linear = LinearConfig::new(3, 2).init(device);
    model.weight = Param::from_tensor(Tensor::from_floats(
        [[0.5, -1.0], [0.25, 2.0], [-0.75, 1.5]],
        device,
    ));
    model.bias = Some(Param::from_tensor(Tensor::from_floats([0.1, -0.2], device)));
    model
}

/// Rank `rank`'s clipped-sum stand-in: the summed per-example gradients of its shard (rank 1's
/// shard is empty: zeros).
fn shard_grads(model: &Linear, rank: usize, device: &Device) -> ParamGrads {
    let rows = if rank == 1 { 0 } else { rank + 2 };
    let xs: Vec<f32> = (0..rows * 3)
        .map(|i| (i + rank) as f32 * 0.1 - 0.3)
        .collect();
    let loss = |m: &Linear, x: Tensor<1>| m.forward(x).powi_scalar(2).sum();
    if rows == 0 {
        // The gradient sum of no example: zeros shaped like the parameters.
        let one = Tensor::<2>::zeros([1, 3], device);
        let like = per_example_grads(model, one, loss).unwrap().sum_batch();
        return unflatten_grads(like, &[0.0; 8]).unwrap();
    }
    let xs = Tensor::<2>::from_data(TensorData::new(xs, [rows, 3]), device);
    per_example_grads(model, xs, loss).unwrap().sum_batch()
}

#[test]
fn should_all_reduce_param_grads() {
    on_ranks(
        "should_all_reduce_param_grads",
        |mpi| {
            let device = Device::default();
            let model = linear(&device);
            let mine = shard_grads(&model, mpi.rank(), &device);
            let total = all_reduce_grads(mpi, mine, TIMEOUT).unwrap();
            // Against the sum of every rank's gradients, computed here.
            let mut expected = vec![0.0f32; 8];
            for r in 0..mpi.size() {
                for (e, g) in expected
                    .iter_mut()
                    .zip(flatten_grads(&shard_grads(&model, r, &device)))
                {
                    *e += g;
                }
            }
            let got = flatten_grads(&total);
            for (g, e) in got.iter().zip(&expected) {
                assert!(
                    (g - e).abs() <= 1e-5 * e.abs().max(1.0),
                    "{got:?} != {expected:?}"
                );
            }
            assert_eq!(total.paths().collect::<Vec<_>>(), ["weight", "bias"]);
            assert_eq!(total.get::<2>("weight").unwrap().dims(), [3, 2]);
            say(format!(
                "GRADS rank={} fingerprint={:016x}",
                mpi.rank(),
                fingerprint(&got)
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "GRADS"),
    );
}

#[test]
fn should_round_trip_param_grads_through_a_flat_buffer() {
    if under_mpirun() {
        return;
    }
    let device = Device::default();
    let model = linear(&device);
    let grads = shard_grads(&model, 2, &device);
    let flat = flatten_grads(&grads);
    assert_eq!(flat.len(), 3 * 2 + 2);
    let weight: Vec<f32> = grads
        .get::<2>("weight")
        .unwrap()
        .into_data()
        .try_into_vec()
        .unwrap();
    let bias: Vec<f32> = grads
        .get::<1>("bias")
        .unwrap()
        .into_data()
        .try_into_vec()
        .unwrap();
    assert_eq!(
        flat,
        [weight, bias].concat(),
        "row-major, in the parameters' order"
    );

    let back = unflatten_grads(grads.clone(), &flat).unwrap();
    assert_eq!(flatten_grads(&back), flat);
    let ids = |g: &ParamGrads| {
        g.iter()
            .map(|(p, id, _)| (p.to_owned(), id))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&back), ids(&grads));

    let err = unflatten_grads(grads.clone(), &flat[1..]).unwrap_err();
    assert_eq!(
        err,
        CollectiveError::Mismatch {
            operation: "unflatten_grads",
            expected: 8,
            got: 7,
            rank: None,
        }
    );
    // One rank: the identity.
    let total = all_reduce_grads(&Local, grads, TIMEOUT).unwrap();
    assert_eq!(flatten_grads(&total), flat);
}

/// Issue 46, item 3: MPI's start-up waits for every process of the job and cannot time out by
/// itself. A rank that never reaches it (here: it sleeps past the others' deadline) makes the
/// others end with `DEADLINE_EXIT_CODE` and a message at their `init_within` deadline, and
/// mpirun stops the job, instead of a hang.
#[test]
fn should_end_a_job_whose_peer_never_starts_mpi() {
    const NAME: &str = "should_end_a_job_whose_peer_never_starts_mpi";
    const DEADLINE: Duration = Duration::from_millis(1500);
    if under_mpirun() {
        let rank: usize = std::env::var("OMPI_COMM_WORLD_RANK")
            .unwrap()
            .parse()
            .unwrap();
        let size: usize = std::env::var("OMPI_COMM_WORLD_SIZE")
            .unwrap()
            .parse()
            .unwrap();
        if rank == size - 1 {
            std::thread::sleep(DEADLINE * 20);
            say(format!("LATESTART rank={rank} was not stopped"));
        }
        let mpi = Mpi::init_within(DEADLINE).unwrap();
        say(format!("STARTED rank={}", mpi.rank()));
        return;
    }
    for np in SIZES {
        let started = Instant::now();
        let out = mpirun(NAME, np);
        let elapsed = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "np {np}: the job must fail");
        assert!(
            stderr.contains("MPI's start-up (MPI_Init) did not complete within"),
            "np {np}: {stderr}"
        );
        assert!(
            tagged(&out, "STARTED").is_empty(),
            "np {np}: no rank started"
        );
        assert!(
            tagged(&out, "LATESTART").is_empty(),
            "np {np}: the late rank was stopped"
        );
        assert!(elapsed < DEADLINE * 10, "np {np}: no hang ({elapsed:?})");
    }
}
