//! What the MPI test files share: each test starts this test binary again under `mpirun` (for
//! itself only) at every size of [`SIZES`], and checks the job's exit status and what its ranks
//! printed; under `mpirun` (the variable `OMPI_COMM_WORLD_SIZE` set), the test's body runs on
//! every rank. Jobs run one at a time (timings stay honest on a small machine) and are killed by
//! `mpirun --timeout` if they hang. Needs OpenMPI's `mpirun` (`.ci/install-mpi`).
#![allow(dead_code)] // each file uses a part

use std::io::Write;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

use burn_vmap::distributed::mpi::Mpi;

/// The sizes every job runs at.
pub const SIZES: [usize; 2] = [2, 3];

/// One `mpirun` job at a time.
static JOBS: Mutex<()> = Mutex::new(());

/// Whether this process is a rank of an `mpirun` job.
pub fn under_mpirun() -> bool {
    std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some()
}

/// Runs the test `name` of this binary on `np` ranks, returning the job's output.
pub fn mpirun(name: &str, np: usize) -> Output {
    mpirun_with(name, np, &[])
}

/// As [`mpirun`], with environment variables `env` set on every rank.
pub fn mpirun_with(name: &str, np: usize, env: &[(&str, &str)]) -> Output {
    mpirun_over(name, np, env, TCP)
}

/// Loopback TCP between the ranks (every test's default: what a job across nodes uses).
pub const TCP: &str = "self,tcp";
/// Shared memory between the ranks (OpenMPI 4's `vader`; what a job on one node uses by
/// default).
pub const SHARED_MEMORY: &str = "self,vader";

/// As [`mpirun_with`], over the byte transfer layers `btl` ([`TCP`] or [`SHARED_MEMORY`]).
pub fn mpirun_over(name: &str, np: usize, env: &[(&str, &str)], btl: &str) -> Output {
    let _one_at_a_time = JOBS.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("the test binary's path");
    let started = Instant::now();
    let mut command = Command::new("mpirun");
    command
        .args(["-np", &np.to_string(), "--oversubscribe"])
        // A hung job is killed after a minute.
        .args(["--mca", "btl", btl, "--timeout", "60"]);
    for (key, value) in env {
        command.args(["-x", &format!("{key}={value}")]);
    }
    let out = command
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun: not found; install OpenMPI (.ci/install-mpi)");
    eprintln!(
        "== {name} under mpirun -np {np} over {btl} {env:?}: {} in {:.2?}\n{}{}",
        out.status,
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What follows `tag` on the lines of `out`'s standard output that hold it, `tag` included
/// (a rank's line may follow the test harness's `test name ... `).
pub fn tagged(out: &Output, tag: &str) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find(tag).map(|at| l[at..].to_owned()))
        .collect()
}

/// The value of `key=value` on `line` (up to the next space).
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let pattern = format!(" {key}=");
    let at = line
        .find(&pattern)
        .unwrap_or_else(|| panic!("no {key}= in {line}"));
    let rest = &line[at + pattern.len()..];
    rest.split(' ').next().unwrap_or("")
}

/// Runs `body` on every rank when under `mpirun`; otherwise starts the test `name` under
/// `mpirun` at every size of [`SIZES`], asserts the job succeeded and hands its output to
/// `check`.
pub fn on_ranks(name: &str, body: impl FnOnce(&Mpi), check: impl Fn(usize, &Output)) {
    on_ranks_at(name, &SIZES, body, check);
}

/// As [`on_ranks`], at the job sizes `sizes`.
pub fn on_ranks_at(
    name: &str,
    sizes: &[usize],
    body: impl FnOnce(&Mpi),
    check: impl Fn(usize, &Output),
) {
    if under_mpirun() {
        let mpi = Mpi::init().expect("MPI initializes once per process");
        body(&mpi);
        std::io::stdout().flush().unwrap();
        return;
    }
    for &np in sizes {
        let out = mpirun(name, np);
        assert!(out.status.success(), "{name}: mpirun -np {np} failed");
        check(np, &out);
    }
}

/// Prints a line for the parent to read, at once (an abort loses buffered output).
pub fn say(line: String) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// FNV-1a of the values' bits.
pub fn fingerprint(values: &[f32]) -> u64 {
    values.iter().fold(0xCBF2_9CE4_8422_2325, |h, v| {
        (h ^ u64::from(v.to_bits())).wrapping_mul(0x0100_0000_01B3)
    })
}

/// Every rank printed one `tag` line, and all of them end alike (after `rank=<r>`).
pub fn assert_same_on_every_rank(np: usize, out: &Output, tag: &str) {
    let lines = tagged(out, tag);
    assert_eq!(lines.len(), np, "one {tag} line per rank: {lines:?}");
    let tails: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once(' ').map_or("", |(_, rest)| rest))
        .map(|rest| rest.split_once(' ').map_or("", |(_, tail)| tail))
        .collect();
    assert!(
        tails.iter().all(|t| *t == tails[0]),
        "{tag}: ranks disagree: {lines:?}"
    );
}
