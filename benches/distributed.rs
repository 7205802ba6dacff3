//! The MPI engine's all-reduce of a 0.5M-float buffer (2 MiB, the flattened gradient of a
//! half-million-parameter model) at 1, 2 and 4 processes on this machine, beside MPI's own
//! `MPI_Allreduce` in the same run (`cargo bench --features mpi --bench distributed`).
//!
//! - `all_reduce_sum/npN`: `Mpi::all_reduce_sum` (a length check, `MPI_Ireduce` to rank 0 and
//!   `MPI_Ibcast`, polled against a timeout: the same bits on every rank);
//! - `mpi_allreduce/npN`: one blocking `MPI_Allreduce` of the same buffer (no length check, no
//!   timeout, no promise of equal bits), the baseline.
//!
//! Started without `mpirun`, the bench starts itself under `mpirun -np N --oversubscribe` for
//! each N (loopback: OpenMPI's shared-memory transport). Rank 0 runs criterion and tells the
//! other ranks, by a broadcast, which operation to run how many times.
//!
//! Environment: `BURN_VMAP_BENCH_QUICK=1` for a shorter run; `BURN_VMAP_BENCH_NP=2` (or `1,4`)
//! for some sizes only.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use burn_vmap::distributed::Collective;
use burn_vmap::distributed::mpi::Mpi;
use criterion::{BenchmarkId, Criterion};
use mpi::collective::{CommunicatorCollectives, SystemOperation};

use common::mean_ns;

/// The buffer: 2^19 floats.
const LEN: usize = 1 << 19;
const GROUP: &str = "all_reduce_0.5M";
const TIMEOUT: Duration = Duration::from_secs(60);

/// What rank 0 asks the others to run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Stop = 0,
    Ours = 1,
    Baseline = 2,
}

/// Sends (rank 0) or receives (the others) the next operation and its repetitions.
fn command(mpi: &Mpi, op: Op, iters: u64) -> (Op, u64) {
    let mut msg = [0u8; 16];
    msg[..8].copy_from_slice(&(op as u64).to_le_bytes());
    msg[8..].copy_from_slice(&iters.to_le_bytes());
    mpi.broadcast_bytes(&mut msg, 0, TIMEOUT).unwrap();
    let op = match u64::from_le_bytes(msg[..8].try_into().unwrap()) {
        0 => Op::Stop,
        1 => Op::Ours,
        _ => Op::Baseline,
    };
    (op, u64::from_le_bytes(msg[8..].try_into().unwrap()))
}

/// Runs `op` `iters` times on this rank.
fn run(mpi: &Mpi, op: Op, iters: u64, buf: &mut [f32]) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        match op {
            Op::Ours => mpi.all_reduce_sum(buf, TIMEOUT).unwrap(),
            Op::Baseline => {
                let send = buf.to_vec();
                mpi.communicator()
                    .all_reduce_into(&send[..], buf, SystemOperation::sum());
            }
            Op::Stop => unreachable!(),
        }
        // Keep the values finite and the work the same from one repetition to the next.
        buf[0] = 1.0;
    }
    start.elapsed()
}

fn rank_main() {
    let mpi = Mpi::init().unwrap();
    let np = mpi.size();
    let mut buf: Vec<f32> = (0..LEN).map(|i| (i % 97) as f32 * 1e-3).collect();
    if mpi.rank() != 0 {
        loop {
            match command(&mpi, Op::Stop, 0) {
                (Op::Stop, _) => return,
                (op, iters) => {
                    run(&mpi, op, iters, &mut buf);
                }
            }
        }
    }
    let quick = std::env::var_os("BURN_VMAP_BENCH_QUICK").is_some();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(if quick { 2 } else { 5 }))
        .configure_from_args();
    let mut group = c.benchmark_group(GROUP);
    for (name, op) in [
        ("all_reduce_sum", Op::Ours),
        ("mpi_allreduce", Op::Baseline),
    ] {
        group.bench_function(BenchmarkId::new(name, format!("np{np}")), |b| {
            b.iter_custom(|iters| {
                command(&mpi, op, iters);
                run(&mpi, op, iters, &mut buf)
            })
        });
    }
    group.finish();
    command(&mpi, Op::Stop, 0);
}

fn main() {
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        rank_main();
        return;
    }
    let sizes: Vec<usize> = std::env::var("BURN_VMAP_BENCH_NP")
        .map(|s| s.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![1, 2, 4]);
    let exe = std::env::current_exe().unwrap();
    for &np in &sizes {
        let status = Command::new("mpirun")
            .args(["-np", &np.to_string(), "--oversubscribe"])
            .args(["--mca", "btl", "self,vader"])
            .arg(&exe)
            .args(std::env::args().skip(1))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .status()
            .expect("mpirun: not found; install OpenMPI (.ci/install-mpi)");
        assert!(status.success(), "mpirun -np {np}: {status}");
    }
    println!("\n== all-reduce of {LEN} f32 (same run) ==");
    println!("np  all_reduce_sum  MPI_Allreduce  ratio");
    for np in sizes {
        let ours = mean_ns(GROUP, &format!("all_reduce_sum/np{np}"));
        let base = mean_ns(GROUP, &format!("mpi_allreduce/np{np}"));
        if let (Some(o), Some(b)) = (ours, base) {
            println!(
                "{np:<3} {:>11.1} µs  {:>10.1} µs  {:.2}x",
                o / 1e3,
                b / 1e3,
                o / b
            );
        }
    }
}
