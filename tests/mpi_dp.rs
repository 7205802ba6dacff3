#![cfg(feature = "mpi")]
//! Data-parallel DP-SGD (`burn_vmap::distributed::DistributedDp`) over the MPI engine, under
//! `mpirun -np 2` and `-np 3 --oversubscribe` on loopback (the harness in `tests/mpirun/`):
//! the update of one mechanism on the union of the shards, the noise added once, an empty
//! shard, a stalled peer, a killed peer and the restart from the last checkpoint; and the
//! `dp_sgd_distributed` example end to end, resumed from its checkpoint.

mod mpirun;

#[allow(dead_code)]
#[path = "../examples/dp_sgd_distributed.rs"]
mod dp_sgd_distributed;

use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_vmap::distributed::mpi::Mpi;
use burn_vmap::distributed::{
    Collective, CollectiveError, DistributedDp, DistributedError, flatten_grads, load_checkpoint,
};
use burn_vmap::privacy::{DpConfig, DpLoader, DpMechanism, DpSgd, Neighbouring, NoiseKind};

use mpirun::{
    SIZES, assert_same_on_every_rank, field, fingerprint, mpirun_with, on_ranks, on_ranks_at, say,
    tagged, under_mpirun,
};

/// The timeout of the collectives that should complete.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The timeout of the stalled-peer test, and how late a survivor may report it.
const STALL_TIMEOUT: Duration = Duration::from_millis(1000);
const STALL_SLACK: Duration = Duration::from_millis(1000);
/// `MPI_Abort`'s code in the stalled-peer test.
const ABORT_CODE: i32 = 3;

/// One example: three features and a target.
type Example = [f32; 4];
/// A batch: features `[n, 3]`, targets `[n, 1]`.
type Batch = (Tensor<2>, Tensor<2>);

/// Example `i` of the union: features of mixed magnitudes, so that some gradients are clipped.
fn example(i: usize) -> Example {
    let t = i as f32;
    [
        (t * 0.37).sin() * 3.0,
        (t * 0.11).cos(),
        t / 10.0 - 1.0,
        (t * 0.23).sin() * 2.0 + 0.5,
    ]
}

/// Rank `rank`'s shard of the union of `n` examples: every `size`-th example.
fn shard(n: usize, rank: usize, size: usize) -> Vec<Example> {
    (0..n).filter(|i| i % size == rank).map(example).collect()
}

#[derive(Clone)]
struct Rows;

impl Batcher<Example, Batch> for Rows {
    fn batch(&self, items: Vec<Example>, device: &Device) -> Batch {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|e| e[..3].to_vec()).collect();
        let y: Vec<f32> = items.iter().map(|e| e[3]).collect();
        (
            Tensor::from_data(TensorData::new(x, [n, 3]), device),
            Tensor::from_data(TensorData::new(y, [n, 1]), device),
        )
    }
}

/// The squared error of one example (a batch of one).
fn loss(m: &Linear, (x, y): Batch) -> Tensor<1> {
    (m.forward(x) - y).powi_scalar(2).sum()
}

/// A `Linear` 3 → 1 whose weights depend on `seed` (a rank's own initialization).
fn linear(seed: usize, device: &Device) -> Linear {
    let s = seed as f32;
    let mut model: Linear = LinearConfig::new(3, 1).init(device);
    model.weight = Param::from_tensor(Tensor::from_floats([[0.5 + s], [-1.0], [0.25 * s]], device));
    model.bias = Some(Param::from_tensor(Tensor::from_floats([0.1 - s], device)));
    model
}

/// The parameters' values, in order.
fn params(model: &Linear) -> Vec<f32> {
    let mut values: Vec<f32> = model.weight.val().into_data().try_to_vec().unwrap();
    if let Some(bias) = &model.bias {
        values.extend(bias.val().into_data().try_to_vec::<f32>().unwrap());
    }
    values
}

fn sgd() -> ModuleOptimizer {
    SgdConfig::new().init()
}

/// A data-parallel run's parts on this rank: the mechanism of `config` over `mpi`, and the
/// loader of the rank's `shard`.
fn distributed<O>(
    mpi: &Mpi,
    mechanism: DpMechanism,
    shard: Vec<Example>,
) -> (DistributedDp<&Mpi>, DpLoader<Example, O>)
where
    Rows: Batcher<Example, O>,
{
    let dp = DistributedDp::new(mechanism, mpi, TIMEOUT).unwrap();
    let loader = dp
        .loader(
            Arc::new(InMemDataset::new(shard)),
            Arc::new(Rows),
            Device::default(),
        )
        .unwrap();
    (dp, loader)
}

#[test]
fn should_match_one_process_on_the_union_without_noise() {
    const N: usize = 24;
    const STEPS: usize = 5;
    const LR: f64 = 0.2;
    on_ranks(
        "should_match_one_process_on_the_union_without_noise",
        |mpi| {
            let device = Device::default();
            // σ = 0 and q = 1: every shard's batch is the whole shard, the union's is the union.
            // Replace-one: the loaders check that the shards add up to the public N.
            let config = DpConfig::new(0.5, 0.0, 1.0, Neighbouring::ReplaceOne { dataset_size: N });
            let mechanism = DpMechanism::new(config.clone()).unwrap();
            let (mut dp, mut loader) =
                distributed(mpi, mechanism, shard(N, mpi.rank(), mpi.size()));
            // Every rank starts from rank 0's parameters.
            let mut model = dp.sync_module(linear(mpi.rank(), &device)).unwrap();
            assert_eq!(params(&model), params(&linear(0, &device)));
            let mut optimizer = sgd();
            for _ in 0..STEPS {
                let batch = loader.next_batch().unwrap();
                (model, _) = dp.step(&mut optimizer, LR, model, loss, batch).unwrap();
            }

            // One process on the union, computed here.
            let mut one = DpSgd::new(sgd(), DpMechanism::new(config).unwrap());
            let mut union = one
                .mechanism()
                .loader(
                    Arc::new(InMemDataset::new(shard(N, 0, 1))),
                    Arc::new(Rows),
                    device.clone(),
                )
                .unwrap();
            let mut reference = linear(0, &device);
            for _ in 0..STEPS {
                let batch = union.next_batch().unwrap();
                assert_eq!(batch.size(), N);
                (reference, _) = one.step(LR, reference, loss, batch).unwrap();
            }

            let (got, want) = (params(&model), params(&reference));
            let diff = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0f32, f32::max);
            assert!(diff <= 1e-5, "{got:?} != {want:?}");
            assert_ne!(got, params(&linear(0, &device)), "the model moved");
            assert_eq!(dp.mechanism().steps(), STEPS as u64);
            say(format!(
                "UNION rank={} fingerprint={:016x} max_diff={diff:e}",
                mpi.rank(),
                fingerprint(&got)
            ));
        },
        |np, out| {
            let lines = tagged(out, "UNION");
            assert_eq!(lines.len(), np, "{lines:?}");
            let prints: Vec<&str> = lines.iter().map(|l| field(l, "fingerprint")).collect();
            assert!(prints.iter().all(|p| *p == prints[0]), "{lines:?}");
        },
    );
}

#[test]
fn should_add_the_noise_of_one_mechanism() {
    const STEPS: usize = 3;
    const B: f64 = 10.0;
    on_ranks_at(
        "should_add_the_noise_of_one_mechanism",
        &[2, 3, 4],
        |mpi| {
            let device = Device::default();
            // Every shard empty: each step's update is the noise alone, over 100,100 coordinates.
            let (sigma, clip) = (1.0, 1.0);
            let config = DpConfig::new(
                clip,
                sigma,
                0.1,
                Neighbouring::AddRemove {
                    expected_batch_size: B,
                },
            );
            let (mut dp, mut loader) =
                distributed(mpi, DpMechanism::new(config.clone()).unwrap(), Vec::new());
            let model: Linear = LinearConfig::new(1000, 100).init(&device);
            let model = dp.sync_module(model).unwrap();
            let mut values = Vec::new();
            for _ in 0..STEPS {
                let batch = loader.next_batch().unwrap();
                assert!(batch.is_empty());
                let (grads, report) = dp.noisy_gradient(&model, loss_wide, batch).unwrap();
                assert_eq!(report.sampled, 0);
                values.extend(flatten_grads(&grads));
            }
            let dims = values.len() / STEPS;
            assert_eq!(dims, 1000 * 100 + 100);
            // One mechanism's: (σ·C_eff / B)², C_eff the clip norm plus the grid's inflation.
            let std = config.noise.calibrated_std(sigma, clip, dims).unwrap();
            assert!(matches!(config.noise, NoiseKind::Hardened { .. }));
            // Every rank's slice of the coordinates (⌈d/n⌉ each) on its own: a slice noised
            // twice, or not at all, would fail here even when the pooled variance is right.
            let slice = dims.div_ceil(mpi.size());
            let mut ratio = 0.0;
            for r in 0..mpi.size() {
                let of: Vec<f64> = values
                    .chunks(dims)
                    .flat_map(|step| &step[(r * slice).min(dims)..((r + 1) * slice).min(dims)])
                    .map(|&v| f64::from(v))
                    .collect();
                let n = of.len() as f64;
                let mean = of.iter().sum::<f64>() / n;
                let variance = of.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
                ratio = variance / (std / B).powi(2);
                // The ratio's standard error is √(2/n) ≤ 0.0052 (np 4): 0.03 is 5.8 of them; a
                // slice noised twice gives 2, one never noised 0.
                assert!(
                    (ratio - 1.0).abs() < 0.03,
                    "slice {r}: variance ratio {ratio}"
                );
                assert!(
                    mean.abs() < 5.0 * std / B / n.sqrt(),
                    "slice {r}: mean {mean}"
                );
            }
            assert_eq!(dp.mechanism().steps(), STEPS as u64);
            say(format!(
                "NOISE rank={} fingerprint={:016x} ratio={ratio:.4} eps={:?}",
                mpi.rank(),
                fingerprint(&values),
                dp.epsilon().unwrap()
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "NOISE"),
    );
}

/// The loss of the wide model (never called: every batch is empty).
fn loss_wide(m: &Linear, x: Tensor<2>) -> Tensor<1> {
    m.forward(x).sum()
}

/// The batcher of the wide model's (absent) examples.
impl Batcher<Example, Tensor<2>> for Rows {
    fn batch(&self, items: Vec<Example>, device: &Device) -> Tensor<2> {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|e| [e[0]; 1000]).collect();
        Tensor::from_data(TensorData::new(x, [n, 1000]), device)
    }
}

#[test]
fn should_stay_in_step_with_an_empty_shard() {
    const N: usize = 60;
    const STEPS: usize = 8;
    on_ranks(
        "should_stay_in_step_with_an_empty_shard",
        |mpi| {
            let device = Device::default();
            let config = DpConfig::new(
                1.0,
                1.0,
                0.5,
                Neighbouring::AddRemove {
                    expected_batch_size: 0.5 * N as f64,
                },
            );
            // Rank 1 holds no example: it takes part in every step with zeros.
            let mine = if mpi.rank() == 1 {
                Vec::new()
            } else {
                shard(N, mpi.rank(), mpi.size())
            };
            let (mut dp, mut loader) = distributed(mpi, DpMechanism::new(config).unwrap(), mine);
            let mut model = dp.sync_module(linear(mpi.rank(), &device)).unwrap();
            let mut optimizer = sgd();
            let mut sampled = 0;
            for _ in 0..STEPS {
                let batch = loader.next_batch().unwrap();
                let report;
                (model, report) = dp.step(&mut optimizer, 0.1, model, loss, batch).unwrap();
                sampled += report.sampled;
            }
            if mpi.rank() == 1 {
                assert_eq!(sampled, 0);
            }
            let statement = dp.statement().unwrap();
            assert_eq!(statement.processes, Some(mpi.size()));
            assert!(statement.to_string().contains("the peers are trusted"));
            say(format!(
                "EMPTY rank={} fingerprint={:016x} steps={} eps={:?}",
                mpi.rank(),
                fingerprint(&params(&model)),
                dp.mechanism().steps(),
                dp.epsilon().unwrap()
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "EMPTY"),
    );
}

#[test]
fn should_report_a_peer_whose_step_failed() {
    on_ranks(
        "should_report_a_peer_whose_step_failed",
        |mpi| {
            let device = Device::default();
            let config = DpConfig::new(
                1.0,
                1.0,
                0.5,
                Neighbouring::AddRemove {
                    expected_batch_size: 5.0,
                },
            );
            let (mut dp, mut loader) = distributed(
                mpi,
                DpMechanism::new(config).unwrap(),
                shard(20, mpi.rank(), mpi.size()),
            );
            let model = linear(0, &device);
            let first = loader.next_batch().unwrap();
            let second = loader.next_batch().unwrap();
            // The last rank steps its batches out of order: its own error, the others' Peers,
            // and no rank accounts the step.
            let last = mpi.size() - 1;
            let batch = if mpi.rank() == last { second } else { first };
            let err = dp.noisy_gradient(&model, loss, batch).unwrap_err();
            match (&err, mpi.rank() == last) {
                (DistributedError::Privacy(_), true) => {}
                (DistributedError::Peers { ranks, .. }, false) => assert_eq!(ranks, &[last]),
                _ => panic!("rank {}: {err}", mpi.rank()),
            }
            assert_eq!(dp.mechanism().steps(), 0);
            say(format!("PEERS rank={} error={err}", mpi.rank()));
        },
        |np, out| assert_eq!(tagged(out, "PEERS").len(), np),
    );
}

/// The stalled-peer job's ranks: the last one sleeps past the timeout, the survivors report
/// their typed error and stop the job.
fn stalled_peer(mpi: &Mpi) -> ! {
    let device = Device::default();
    let config = DpConfig::new(
        1.0,
        1.0,
        0.5,
        Neighbouring::AddRemove {
            expected_batch_size: 5.0,
        },
    );
    let mechanism = DpMechanism::new(config).unwrap();
    let mut dp = DistributedDp::new(mechanism, mpi, STALL_TIMEOUT).unwrap();
    let shard = Arc::new(InMemDataset::new(shard(20, mpi.rank(), mpi.size())));
    let mut loader: DpLoader<Example, Batch> =
        dp.loader(shard, Arc::new(Rows), device.clone()).unwrap();
    let model = linear(0, &device);
    let stalled = mpi.size() - 1;
    if mpi.rank() == stalled {
        // Never reaches the step in time; the survivors' abort kills it.
        std::thread::sleep(STALL_TIMEOUT * 20);
        say(format!("STALLED rank={} was not stopped", mpi.rank()));
        std::process::exit(1);
    }
    let batch = loader.next_batch().unwrap();
    let started = Instant::now();
    let err = dp.noisy_gradient(&model, loss, batch).unwrap_err();
    let returned = started.elapsed();
    assert!(err.is_timeout(), "{err}");
    let DistributedError::Collective(CollectiveError::Timeout { operation, .. }) = err else {
        panic!("expected a timeout, got {err}");
    };
    assert_eq!(dp.mechanism().steps(), 0, "nothing accounted");
    say(format!(
        "TIMEOUT rank={} operation={operation} returned_ms={}",
        mpi.rank(),
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
        let out = mpirun_with(NAME, np, &[]);
        let elapsed = started.elapsed();
        assert_eq!(
            out.status.code(),
            Some(ABORT_CODE),
            "mpirun -np {np}: the survivors abort with code {ABORT_CODE}"
        );
        let lines = tagged(&out, "TIMEOUT");
        assert_eq!(lines.len(), np - 1, "every survivor reports: {lines:?}");
        for line in &lines {
            assert_eq!(field(line, "operation"), "reduce_scatter_sum", "{line}");
            let returned: u64 = field(line, "returned_ms").parse().unwrap();
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
        assert!(elapsed < STALL_TIMEOUT * 15, "no hang: {elapsed:?}");
    }
}

/// The restart test's run: `STEPS` steps in all, a checkpoint every `EVERY`.
const STEPS: u64 = 6;
const EVERY: u64 = 2;
/// The crashing run's last rank dies at the start of this step.
const KILLED_AT: u64 = 5;
const PHASE: &str = "BURN_VMAP_TEST_PHASE";
const DIR: &str = "BURN_VMAP_TEST_DIR";

/// One rank of the restart test's jobs: `full` runs every step, `crash` dies at step
/// [`KILLED_AT`] (its last rank is killed by SIGKILL from another process), `resume` continues
/// from the last checkpoint.
fn restart_rank(mpi: &Mpi, phase: &str, dir: &str) {
    let device = Device::default();
    let config = DpConfig::new(
        1.0,
        1.0,
        0.25,
        Neighbouring::AddRemove {
            expected_batch_size: 10.0,
        },
    );
    let checkpoint =
        load_checkpoint(mpi, dir, linear(mpi.rank(), &device), sgd(), TIMEOUT).unwrap();
    let (mechanism, model) = match checkpoint.record {
        Some(record) => {
            assert_eq!(phase, "resume");
            let loaded = params(&checkpoint.model);
            say(format!(
                "LOADED rank={} steps={} fingerprint={:016x}",
                mpi.rank(),
                record.steps(),
                fingerprint(&loaded)
            ));
            (DpMechanism::from_record(record).unwrap(), checkpoint.model)
        }
        None => (DpMechanism::new(config).unwrap(), checkpoint.model),
    };
    let mut optimizer = checkpoint.optimizer;
    let (mut dp, mut loader) = distributed(mpi, mechanism, shard(40, mpi.rank(), mpi.size()));
    let mut model = dp.sync_module(model).unwrap();
    while dp.mechanism().steps() < STEPS {
        let step = dp.mechanism().steps() + 1;
        if phase == "crash" && step == KILLED_AT && mpi.rank() == mpi.size() - 1 {
            say(format!("KILLED rank={} step={step}", mpi.rank()));
            // SIGKILL from another process (as the OOM killer or a lost node): no handler, no
            // flush, no MPI call runs in this rank after it.
            let pid = std::process::id().to_string();
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
            std::thread::sleep(Duration::from_secs(60));
            unreachable!("rank {} survived SIGKILL", mpi.rank());
        }
        let batch = loader.next_batch().unwrap();
        (model, _) = dp.step(&mut optimizer, 0.1, model, loss, batch).unwrap();
        if phase != "full" && step % EVERY == 0 {
            dp.save_checkpoint(dir, &model, &optimizer).unwrap();
            if mpi.rank() == 0 {
                say(format!(
                    "SAVED rank=0 steps={step} fingerprint={:016x}",
                    fingerprint(&params(&model))
                ));
            }
        }
    }
    say(format!(
        "DONE rank={} steps={} eps={:?} fingerprint={:016x}",
        mpi.rank(),
        dp.mechanism().steps(),
        dp.epsilon().unwrap(),
        fingerprint(&params(&model))
    ));
}

#[test]
fn should_restart_from_the_last_checkpoint() {
    const NAME: &str = "should_restart_from_the_last_checkpoint";
    if under_mpirun() {
        let phase = std::env::var(PHASE).expect("the job's phase");
        let dir = std::env::var(DIR).expect("the checkpoint directory");
        restart_rank(&Mpi::init().unwrap(), &phase, &dir);
        return;
    }
    let last = |out: &Output, tag: &str| tagged(out, tag).last().cloned().unwrap_or_default();
    for np in SIZES {
        let dir =
            std::env::temp_dir().join(format!("burn-vmap-{NAME}-{}-{np}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let dir_s = dir.to_str().unwrap();
        let full = mpirun_with(NAME, np, &[(PHASE, "full"), (DIR, dir_s)]);
        assert!(full.status.success(), "the uninterrupted run");
        assert_same_on_every_rank(np, &full, "DONE");

        let started = Instant::now();
        let crash = mpirun_with(NAME, np, &[(PHASE, "crash"), (DIR, dir_s)]);
        assert!(!crash.status.success(), "a killed peer stops the job");
        assert!(
            started.elapsed() < TIMEOUT,
            "mpirun stopped the job before the survivors' timeout"
        );
        assert_eq!(tagged(&crash, "KILLED").len(), 1);
        assert!(tagged(&crash, "DONE").is_empty());
        let saved = last(&crash, "SAVED");
        assert_eq!(
            field(&saved, "steps"),
            (KILLED_AT - 1).to_string(),
            "{saved}"
        );

        let resumed = mpirun_with(NAME, np, &[(PHASE, "resume"), (DIR, dir_s)]);
        assert!(resumed.status.success(), "the restarted run");
        // Every rank continues from the saved parameters and steps.
        let loaded = tagged(&resumed, "LOADED");
        assert_eq!(loaded.len(), np);
        for line in &loaded {
            assert_eq!(field(line, "steps"), field(&saved, "steps"), "{line}");
            assert_eq!(
                field(line, "fingerprint"),
                field(&saved, "fingerprint"),
                "{line}"
            );
        }
        // And ends with the uninterrupted run's steps and ε, the same parameters on every rank.
        assert_same_on_every_rank(np, &resumed, "DONE");
        let (a, b) = (last(&full, "DONE"), last(&resumed, "DONE"));
        assert_eq!(field(&a, "steps"), STEPS.to_string());
        assert_eq!(field(&b, "steps"), field(&a, "steps"));
        assert_eq!(field(&b, "eps"), field(&a, "eps"), "ε: {a} vs {b}");
        eprintln!("np {np}: uninterrupted {a}\n      restarted {b}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// -------------------------------------------------------------------------------------------
// Issue 43, item 10: what the ranks must agree on is checked, not assumed.
// -------------------------------------------------------------------------------------------

/// Ranks started with other seeds get rank 0's: the data split cannot differ between ranks.
#[test]
fn should_agree_on_rank_0s_seed() {
    on_ranks(
        "should_agree_on_rank_0s_seed",
        |mpi| {
            let config = DpConfig::new(1.0, 1.0, 0.5, Neighbouring::ReplaceOne { dataset_size: 8 });
            let dp = DistributedDp::new(DpMechanism::new(config).unwrap(), mpi, TIMEOUT).unwrap();
            let seed = dp.shared_seed(1000 + mpi.rank() as u64).unwrap();
            assert_eq!(seed, 1000);
            say(format!("SEED rank={} seed={seed}", mpi.rank()));
        },
        |np, out| assert_same_on_every_rank(np, out, "SEED"),
    );
}

/// A rank stepped with another learning rate, or started from its own parameters, fails every
/// rank's next step with `Diverged` naming it; nothing is accounted.
#[test]
fn should_fail_every_rank_when_the_models_diverge() {
    on_ranks(
        "should_fail_every_rank_when_the_models_diverge",
        |mpi| {
            let device = Device::default();
            let config =
                DpConfig::new(1.0, 0.0, 1.0, Neighbouring::ReplaceOne { dataset_size: 12 });
            let last = mpi.size() - 1;
            // Another learning rate on the last rank: the first step agrees, the second not.
            let (mut dp, mut loader) = distributed(
                mpi,
                DpMechanism::new(config.clone()).unwrap(),
                shard(12, mpi.rank(), mpi.size()),
            );
            let mut model = dp.sync_module(linear(mpi.rank(), &device)).unwrap();
            let lr = if mpi.rank() == last { 0.2 } else { 0.1 };
            let mut optimizer = sgd();
            let batch = loader.next_batch().unwrap();
            (model, _) = dp.step(&mut optimizer, lr, model, loss, batch).unwrap();
            let batch = loader.next_batch().unwrap();
            match dp.step(&mut optimizer, lr, model, loss, batch) {
                Err(DistributedError::Diverged { ranks, step }) => {
                    assert_eq!((ranks, step), (vec![last], 2));
                }
                other => panic!("rank {}: {:?}", mpi.rank(), other.map(|_| ())),
            }
            assert_eq!(
                dp.mechanism().steps(),
                1,
                "the refused step is not accounted"
            );
            // No sync_module: every rank but 0 starts from its own parameters.
            let (mut dp, mut loader) = distributed(
                mpi,
                DpMechanism::new(config).unwrap(),
                shard(12, mpi.rank(), mpi.size()),
            );
            let batch = loader.next_batch().unwrap();
            let err = dp
                .noisy_gradient(&linear(mpi.rank(), &device), loss, batch)
                .unwrap_err();
            let DistributedError::Diverged { ranks, step } = &err else {
                panic!("rank {}: {err}", mpi.rank());
            };
            assert_eq!((ranks.clone(), *step), ((1..mpi.size()).collect(), 1));
            assert!(err.to_string().contains("sync_module"), "{err}");
            say(format!("DIVERGED rank={} {err}", mpi.rank()));
        },
        |np, out| assert_same_on_every_rank(np, out, "DIVERGED"),
    );
}

/// Ranks whose mechanisms are seeded alike draw independent noise: each rank's slice of a
/// noise-only update differs from the others' (the same stream on every rank gave every slice
/// the same values).
#[test]
fn should_draw_independent_noise_on_ranks_seeded_alike() {
    on_ranks(
        "should_draw_independent_noise_on_ranks_seeded_alike",
        |mpi| {
            let device = Device::default();
            let config = DpConfig::new(
                1.0,
                1.0,
                0.1,
                Neighbouring::AddRemove {
                    expected_batch_size: 10.0,
                },
            );
            let mechanism = DpMechanism::seeded(config, 7).unwrap();
            let (mut dp, mut loader) = distributed(mpi, mechanism, Vec::new());
            let model = dp
                .sync_module(LinearConfig::new(1000, 100).init(&device))
                .unwrap();
            let batch = loader.next_batch().unwrap();
            let update = flatten_grads(&dp.noisy_gradient(&model, loss_wide, batch).unwrap().0);
            let (len, size) = (update.len(), mpi.size());
            let slice = |r: usize| &update[len * r / size..len * r / size + 64];
            for r in 1..size {
                let same = (0..64).filter(|&i| slice(r)[i] == slice(0)[i]).count();
                assert!(same < 4, "slice {r} repeats slice 0's noise ({same} of 64)");
            }
            say(format!(
                "SEEDED rank={} fingerprint={:016x}",
                mpi.rank(),
                fingerprint(&update)
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "SEEDED"),
    );
}

/// The sampled examples of a loader, recorded by its batcher (items are the examples' indices
/// in the union).
#[derive(Clone, Default)]
struct Recording(Arc<std::sync::Mutex<Vec<usize>>>);

impl Batcher<usize, Batch> for Recording {
    fn batch(&self, items: Vec<usize>, device: &Device) -> Batch {
        self.0.lock().unwrap().extend(&items);
        Rows.batch(items.into_iter().map(example).collect(), device)
    }
}

/// Issue 46, item 2: the reduce-scatter path equals one process on the same sampled batches,
/// with q < 1 (random batch sizes), uneven shards and an empty one, to 1e-5, at np 2, 3, 4.
/// Each rank records which examples its loader sampled; the ranks share them, and every rank
/// steps a one-process mechanism (σ = 0, every example of the union's batch) beside.
#[test]
fn should_match_one_process_on_the_same_sampled_batches() {
    const N: usize = 40;
    const STEPS: usize = 6;
    const LR: f64 = 0.2;
    on_ranks_at(
        "should_match_one_process_on_the_same_sampled_batches",
        &[2, 3, 4],
        |mpi| {
            let device = Device::default();
            let (rank, size) = (mpi.rank(), mpi.size());
            let public = Neighbouring::AddRemove {
                expected_batch_size: 10.0,
            };
            let config = DpConfig::new(0.5, 0.0, 0.4, public);
            // Uneven shards: the first ranks share the examples two to one, the last holds none.
            let mine: Vec<usize> = (0..N)
                .filter(|&i| {
                    let owner = if i % 3 == 0 {
                        0
                    } else {
                        (i % (size - 1).max(1)).min(size - 2)
                    };
                    size > 1 && rank == owner && rank + 1 < size
                })
                .collect();
            let sampled = Recording::default();
            let mut dp =
                DistributedDp::new(DpMechanism::new(config.clone()).unwrap(), mpi, TIMEOUT)
                    .unwrap();
            let mut loader = dp
                .loader(
                    Arc::new(InMemDataset::new(mine)),
                    Arc::new(sampled.clone()),
                    device.clone(),
                )
                .unwrap();
            let mut model = dp.sync_module(linear(rank, &device)).unwrap();
            let mut optimizer = sgd();
            // The one-process reference: σ = 0, q = 1 over each step's union batch.
            let reference_config = DpConfig::new(0.5, 0.0, 1.0, public);
            let mut one = DpSgd::new(sgd(), DpMechanism::new(reference_config).unwrap());
            let mut reference = linear(0, &device);
            let mut total = 0;
            for _ in 0..STEPS {
                sampled.0.lock().unwrap().clear();
                let batch = loader.next_batch().unwrap();
                (model, _) = dp.step(&mut optimizer, LR, model, loss, batch).unwrap();
                // Every rank's sampled indices, from each rank in turn.
                let mut union = Vec::new();
                for root in 0..size {
                    let mine = sampled.0.lock().unwrap().clone();
                    let mut count = (mine.len() as u64).to_le_bytes();
                    mpi.broadcast_bytes(&mut count, root, TIMEOUT).unwrap();
                    let mut bytes = vec![0u8; u64::from_le_bytes(count) as usize * 8];
                    if rank == root {
                        bytes = mine
                            .iter()
                            .flat_map(|&i| (i as u64).to_le_bytes())
                            .collect();
                    }
                    mpi.broadcast_bytes(&mut bytes, root, TIMEOUT).unwrap();
                    union.extend(
                        bytes
                            .chunks(8)
                            .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as usize),
                    );
                }
                total += union.len();
                let mut data = one
                    .mechanism()
                    .loader(
                        Arc::new(InMemDataset::new(union)),
                        Arc::new(Recording::default()),
                        device.clone(),
                    )
                    .unwrap();
                (reference, _) = one
                    .step(LR, reference, loss, data.next_batch().unwrap())
                    .unwrap();
            }
            let (got, want) = (params(&model), params(&reference));
            let diff = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0f32, f32::max);
            assert!(diff <= 1e-5, "{got:?} != {want:?}");
            assert!(
                total > 0 && total < STEPS * N,
                "q < 1 sampled {total} in {STEPS} steps"
            );
            say(format!(
                "SAMPLED rank={rank} fingerprint={:016x} max_diff={diff:e}",
                fingerprint(&got)
            ));
        },
        |np, out| assert_same_on_every_rank(np, out, "SAMPLED"),
    );
}

/// The `dp_sgd_distributed` example on 2 processes: one epoch (23 steps) with a checkpoint, then
/// started again on the same directory for a second epoch. Both runs end on the same model on
/// every rank (one accuracy), the resumed one accounts both epochs' steps and learns (chance is
/// 10%).
#[test]
fn should_run_and_resume_the_distributed_example() {
    const NAME: &str = "should_run_and_resume_the_distributed_example";
    const NP: usize = 2;
    let run = |epochs: &str, dir: &str| -> Vec<String> {
        let flags = ["--epochs", epochs, "--checkpoint", dir, "--every", "10"];
        let flags = flags.into_iter().chain(["--timeout", "20"]);
        std::iter::once("dp_sgd_distributed")
            .chain(flags)
            .map(String::from)
            .collect()
    };
    if under_mpirun() {
        let (phase, dir) = (std::env::var(PHASE).unwrap(), std::env::var(DIR).unwrap());
        let epochs = if phase == "first" { "1" } else { "2" };
        let mpi = Mpi::init().unwrap();
        let out = dp_sgd_distributed::run_with(&mpi, &run(epochs, &dir)).unwrap();
        say(format!(
            "RUN rank={} steps={} accuracy={:.4} eps={:.6}",
            mpi.rank(),
            out.steps,
            out.accuracy,
            out.epsilon
        ));
        return;
    }
    let dir = std::env::temp_dir().join(format!("burn-vmap-{NAME}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_s = dir.to_str().unwrap();
    let mut runs = ["first", "resumed"].map(|phase| {
        let out = mpirun_with(NAME, NP, &[(PHASE, phase), (DIR, dir_s)]);
        assert!(out.status.success(), "{phase} run: {out:?}");
        assert_same_on_every_rank(NP, &out, "RUN");
        tagged(&out, "RUN").remove(0)
    });
    let _ = std::fs::remove_dir_all(&dir);
    let (resumed, first) = (runs[1].clone(), std::mem::take(&mut runs[0]));
    let number = |line: &str, key: &str| field(line, key).parse::<f64>().unwrap();
    assert_eq!(number(&first, "steps"), 23.0, "{first}");
    assert_eq!(number(&resumed, "steps"), 46.0, "{resumed}");
    assert!(number(&resumed, "eps") > number(&first, "eps"), "{resumed}");
    assert!(number(&resumed, "accuracy") > 0.5, "{resumed}");
    eprintln!("first: {first}\nresumed: {resumed}");
}
