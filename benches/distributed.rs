//! The MPI engine at 1, 2 and 4 processes on this machine (`cargo bench --features mpi --bench
//! distributed`).
//!
//! Group `all_reduce_0.5M`, a 0.5M-float buffer (2 MiB, the flattened gradient of a
//! half-million-parameter model), beside MPI's own `MPI_Allreduce` in the same run:
//! - `all_reduce_sum/npN`: `Mpi::all_reduce_sum` (a length check, `MPI_Ireduce` to rank 0 and
//!   `MPI_Ibcast`, polled against a timeout: the same bits on every rank);
//! - `mpi_allreduce/npN`: one blocking `MPI_Allreduce` of the same buffer (no length check, no
//!   timeout, no promise of equal bits), the baseline.
//!
//! Group `dp_step_mlp`, one data-parallel DP-SGD step (`DistributedDp::step`) of the MLP bench
//! model (784-512-512-10, 669,706 parameters) on a global batch of 64 examples split across the
//! processes (q = 1 on shards of 64/N: every step the same work), and its parts in the same run:
//! - `step/npN`: the whole step (clip and sum on every rank, the reduce-scatter of the sums by
//!   slice, every rank's hardened noise on its slice, the all-gather of the noised slices, the
//!   optimizer);
//! - `exchange/npN`: the step's two collectives alone, a reduce-scatter of the gradient's
//!   slices (each with every rank's flags and fingerprint) and an all-gather of the slices;
//! - `two_all_reduces/npN`: what the step exchanged before (issue 46): two all-reduces of the
//!   gradient and one slot per rank, every rank seeing the whole un-noised sum;
//! - `noise/npN`: the hardened noise of one rank's slice (every rank drawing its own at once).
//!
//! The values each rank moves per step are printed from the bandwidth-optimal cost model
//! (an all-reduce of `L` values moves `2(N−1)/N·L` per rank, a reduce-scatter or an all-gather
//! `(N−1)/N·L`), beside the measured times.
//!
//! Started without `mpirun`, the bench starts itself under `mpirun -np N --oversubscribe` for
//! each N (loopback: OpenMPI's shared-memory transport). Rank 0 runs criterion and tells the
//! other ranks, by a broadcast, which operation to run how many times.
//!
//! Environment: `BURN_VMAP_BENCH_QUICK=1` for a shorter run; `BURN_VMAP_BENCH_NP=2` (or `1,4`)
//! for some sizes only.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::distributed::mpi::Mpi;
use burn_vmap::distributed::{Collective, DistributedDp, flatten_grads};
use burn_vmap::privacy::{
    DpConfig, DpLoader, DpMechanism, Neighbouring, NoiseKind, PrivacyRng, add_noise,
};
use burn_vmap::{ParamGrads, per_example_grads};
use criterion::{BenchmarkId, Criterion};
use mpi::collective::{CommunicatorCollectives, SystemOperation};

use common::{MLP_SIZES, Mlp, mean_ns};

/// The buffer: 2^19 floats.
const LEN: usize = 1 << 19;
const GROUP: &str = "all_reduce_0.5M";
const DP_GROUP: &str = "dp_step_mlp";
/// The global batch of the DP step, split across the processes.
const GLOBAL_BATCH: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(60);

/// What rank 0 asks the others to run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Stop = 0,
    Ours = 1,
    Baseline = 2,
    Step = 3,
    Exchange = 4,
    Noise = 5,
    TwoAllReduces = 6,
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
        2 => Op::Baseline,
        3 => Op::Step,
        4 => Op::Exchange,
        5 => Op::Noise,
        _ => Op::TwoAllReduces,
    };
    (op, u64::from_le_bytes(msg[8..].try_into().unwrap()))
}

/// One example of the DP step: an image and its label.
type Example = (Vec<f32>, i64);
type Batch = (Tensor<2>, Tensor<1, Int>);

#[derive(Clone)]
struct Rows;

impl Batcher<Example, Batch> for Rows {
    fn batch(&self, items: Vec<Example>, device: &Device) -> Batch {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|(x, _)| x.clone()).collect();
        let y: Vec<i64> = items.iter().map(|(_, y)| *y).collect();
        (
            Tensor::from_data(TensorData::new(x, [n, MLP_SIZES[0]]), device),
            Tensor::from_data(TensorData::new(y, [n]), device),
        )
    }
}

fn loss(model: &Mlp, (x, y): Batch) -> Tensor<1> {
    model.loss(x, y)
}

/// This rank's part of the DP step: the model, the mechanism over the engine, its shard's
/// loader, the optimizer, and the buffers of the step's collectives and noise.
struct DpBench<'a> {
    model: Option<Mlp>,
    dp: DistributedDp<&'a Mpi>,
    loader: DpLoader<Example, Batch>,
    optimizer: ModuleOptimizer,
    /// This rank's slice of the gradient (the noise's input), and the whole gradient's length.
    part: ParamGrads,
    len: usize,
    /// The step's reduce-scatter buffers (this rank's send, its block), its all-gather buffers
    /// (its slice, every slice), and the all-reduce buffer of the step before (the gradient and
    /// one slot per rank).
    scatter: (Vec<f32>, Vec<f32>),
    gather: (Vec<f32>, Vec<f32>),
    reduce: Vec<f32>,
    rng: PrivacyRng,
}

impl<'a> DpBench<'a> {
    fn new(mpi: &'a Mpi) -> Self {
        let device = Device::default();
        let (rank, np) = (mpi.rank(), mpi.size());
        // Rank r's shard: every np-th example of the global batch; q = 1 takes all of it.
        let shard: Vec<Example> = (rank..GLOBAL_BATCH)
            .step_by(np)
            .map(|i| {
                let x = (0..MLP_SIZES[0])
                    .map(|j| ((i * 31 + j * 7) % 97) as f32 / 97.0)
                    .collect();
                (x, (i % 10) as i64)
            })
            .collect();
        let config = DpConfig::new(
            1.0,
            1.0,
            1.0,
            Neighbouring::AddRemove {
                expected_batch_size: GLOBAL_BATCH as f64,
            },
        );
        let mechanism = DpMechanism::new(config).unwrap();
        let mut dp = DistributedDp::new(mechanism, mpi, TIMEOUT).unwrap();
        let mut loader = dp
            .loader(
                Arc::new(InMemDataset::new(shard)),
                Arc::new(Rows),
                device.clone(),
            )
            .unwrap();
        let model = dp.sync_module(Mlp::new(&device)).unwrap();
        // A first step (records the loss function), outside the timings.
        let batch = loader.next_batch().unwrap();
        let (grads, _) = dp.noisy_gradient(&model, loss, batch).unwrap();
        let len = flatten_grads(&grads).len();
        // A gradient of a slice's size: a bias-free Linear's weight, [slice, 1].
        let slice = len.div_ceil(np);
        let linear: Linear = LinearConfig::new(slice, 1).with_bias(false).init(&device);
        let x = Tensor::<2>::ones([1, slice], &device);
        let part = per_example_grads(&linear, x, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
            .unwrap()
            .sum_batch();
        Self {
            model: Some(model),
            dp,
            loader,
            optimizer: SgdConfig::new().init(),
            part,
            len,
            // As the step lays them out (`distributed/exchange.rs`): a slice, the failure flags
            // and the fingerprints (4 limbs) per block; a slice and a flag per gathered block.
            scatter: (vec![0.0; (slice + 5 * np) * np], vec![0.0; slice + 5 * np]),
            gather: (vec![0.0; slice + 1], vec![0.0; (slice + 1) * np]),
            reduce: vec![0.0; len + np],
            rng: PrivacyRng::from_entropy(),
        }
    }

    fn run(&mut self, op: Op) {
        match op {
            Op::Step => {
                let batch = self.loader.next_batch().unwrap();
                let model = self.model.take().unwrap();
                let (model, _) = self
                    .dp
                    .step(&mut self.optimizer, 1e-3, model, loss, batch)
                    .unwrap();
                self.model = Some(model);
            }
            Op::Exchange => {
                let engine = self.dp.engine();
                let (send, block) = &mut self.scatter;
                engine.reduce_scatter_sum(send, block, TIMEOUT).unwrap();
                let (slice, all) = &mut self.gather;
                engine.all_gather(slice, all, TIMEOUT).unwrap();
            }
            Op::TwoAllReduces => {
                for _ in 0..2 {
                    self.dp
                        .engine()
                        .all_reduce_sum(&mut self.reduce, TIMEOUT)
                        .unwrap();
                }
            }
            Op::Noise => {
                let kind = NoiseKind::default();
                let std = kind.calibrated_std(1.0, 1.0, self.len).unwrap();
                add_noise(self.part.clone(), std, kind, &mut self.rng).unwrap();
            }
            _ => unreachable!(),
        }
    }
}

/// Runs `op` `iters` times on this rank.
fn run(mpi: &Mpi, dp: &mut DpBench, op: Op, iters: u64, buf: &mut [f32]) -> Duration {
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
            op => dp.run(op),
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
    let mut dp = DpBench::new(&mpi);
    if mpi.rank() != 0 {
        loop {
            match command(&mpi, Op::Stop, 0) {
                (Op::Stop, _) => return,
                (op, iters) => {
                    run(&mpi, &mut dp, op, iters, &mut buf);
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
    let groups: [(&str, &[(&str, Op)]); 2] = [
        (
            GROUP,
            &[
                ("all_reduce_sum", Op::Ours),
                ("mpi_allreduce", Op::Baseline),
            ],
        ),
        (
            DP_GROUP,
            &[
                ("step", Op::Step),
                ("exchange", Op::Exchange),
                ("two_all_reduces", Op::TwoAllReduces),
                ("noise", Op::Noise),
            ],
        ),
    ];
    for (group_name, ops) in groups {
        let mut group = c.benchmark_group(group_name);
        for &(name, op) in ops {
            group.bench_function(BenchmarkId::new(name, format!("np{np}")), |b| {
                b.iter_custom(|iters| {
                    command(&mpi, op, iters);
                    run(&mpi, &mut dp, op, iters, &mut buf)
                })
            });
        }
        group.finish();
    }
    command(&mpi, Op::Stop, 0);
}

fn main() {
    common::start_run();
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
    for &np in &sizes {
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
    println!(
        "\n== DP step of the MLP, global batch {GLOBAL_BATCH} split across the processes (same run) =="
    );
    // The gradient's length, for the cost model.
    let len = MLP_SIZES
        .windows(2)
        .map(|w| w[0] * w[1] + w[1])
        .sum::<usize>() as f64;
    println!(
        "np  step      exchange (values moved/rank)  before: 2 all-reduces (values)  step before  noise of a slice"
    );
    for np in sizes {
        let ms = |id: &str| mean_ns(DP_GROUP, &format!("{id}/np{np}")).map(|ns| ns / 1e6);
        let (Some(step), Some(exchange), Some(before), Some(noise)) = (
            ms("step"),
            ms("exchange"),
            ms("two_all_reduces"),
            ms("noise"),
        ) else {
            continue;
        };
        let n = np as f64;
        let moved_now = 2.0 * (n - 1.0) / n * len;
        let moved_before = 2.0 * 2.0 * (n - 1.0) / n * len;
        // The step before: the same step with its exchange replaced by the two all-reduces.
        println!(
            "{np:<3} {step:>6.1} ms  {exchange:>6.1} ms ({:>7.0})          {before:>6.1} ms ({:>7.0})          {:>6.1} ms    {noise:>6.1} ms",
            moved_now,
            moved_before,
            step - exchange + before
        );
    }
}
