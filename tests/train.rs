//! DP-SGD through burn-train's `Learner` (`burn_vmap::train`): a small MLP trains for a few
//! steps on an in-memory dataset; the ε on the training split's metric is the mechanism's, and
//! the clipped and non-finite counts are the step's; a run resumed from burn-train's checkpoint
//! continues ε from the mechanism's record as if it had not stopped; gradient accumulation and
//! resumes that cannot be accounted for are refused before any step, with the typed error, and
//! the step refuses what the strategy would have (accumulation under another strategy, a batch
//! of another owner).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::SgdConfig;
use burn::tensor::{Device, Tensor};
use burn_train::logger::MetricLogger;
use burn_train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn_train::metric::{MetricDefinition, MetricId, NumericEntry};
use burn_train::renderer::CliMetricsRenderer;
use burn_train::{InferenceStep, Learner, LearningResult, RegressionOutput, SupervisedTraining};
use burn_vmap::privacy::accounting::{PoissonGaussian, RdpAccountant};
use burn_vmap::privacy::{DpConfig, DpRecord, Neighbouring};
use burn_vmap::train::{DpModel, DpTrainError, DpTraining, record_path};

type Batch = (Tensor<2>, Tensor<2>);

#[derive(Module, Debug)]
struct Mlp {
    hidden: Linear,
    out: Linear,
    act: Relu,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(2, 8).init(device),
            out: LinearConfig::new(8, 1).init(device),
            act: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.out.forward(self.act.forward(self.hidden.forward(x)))
    }
}

/// Squared error of a batch (one example is a batch of one).
fn loss(m: &Mlp, (x, y): Batch) -> Tensor<1> {
    (m.forward(x) - y).powi_scalar(2).mean()
}

impl InferenceStep for Mlp {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, (x, y): Batch) -> RegressionOutput {
        let out = self.forward(x);
        RegressionOutput::new((out.clone() - y.clone()).powi_scalar(2).mean(), out, y)
    }
}

/// `[x0, x1, y]` rows, `y = x0 - 2 x1`.
#[derive(Clone)]
struct Rows;

impl Batcher<[f32; 3], Batch> for Rows {
    fn batch(&self, items: Vec<[f32; 3]>, device: &Device) -> Batch {
        let take = |j: std::ops::Range<usize>| {
            let width = j.len();
            let v: Vec<f32> = items.iter().flat_map(|r| r[j.clone()].to_vec()).collect();
            Tensor::<1>::from_floats(v.as_slice(), device).reshape([items.len(), width])
        };
        (take(0..2), take(2..3))
    }
}

fn rows(n: usize) -> Vec<[f32; 3]> {
    (0..n)
        .map(|i| {
            let a = i as f32 / n as f32;
            let b = ((i * 7) % n) as f32 / n as f32;
            [a, b, a - 2.0 * b]
        })
        .collect()
}

/// C = 1, σ = 1, q = 0.1: 10 steps an epoch; add/remove, the sum divided by the public
/// expected batch size 10 (N = 100).
fn config() -> DpConfig {
    let relation = Neighbouring::AddRemove {
        expected_batch_size: 10.0,
    };
    DpConfig::new(1.0, 1.0, 0.1, relation)
}

/// The owner of `config`, seeded: reproducible, not private (a test).
fn seeded(config: DpConfig, seed: u64) -> DpTraining<Mlp, Batch> {
    DpTraining::seeded(config, seed, InMemDataset::new(rows(100)), Rows, loss).unwrap()
}

fn owner(seed: u64) -> DpTraining<Mlp, Batch> {
    seeded(config(), seed)
}

/// ε by RDP after `k` steps of (q, σ) = (0.1, 1) at δ = 1e-5, of the discrete Gaussian (the
/// default hardened noise).
fn rdp(k: u64) -> f64 {
    let mut acc = RdpAccountant::discrete_gaussian();
    acc.compose(PoissonGaussian::new(0.1, 1.0).unwrap(), k)
        .unwrap();
    acc.epsilon(1e-5).unwrap()
}

fn valid() -> Arc<dyn DataLoader<Batch>> {
    DataLoaderBuilder::new(Rows)
        .batch_size(10)
        .build(InMemDataset::new(rows(20)))
}

/// A fresh training directory under cargo's scratch directory for tests (`target/tmp`), so runs
/// leave nothing in the system's temporary directory.
fn directory(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("train-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every numeric value the training split logged, by metric name, in order.
#[derive(Clone, Default)]
struct Captured {
    names: Arc<Mutex<HashMap<MetricId, String>>>,
    values: Arc<Mutex<Vec<(String, f64)>>>,
}

impl Captured {
    fn of(&self, name: &str) -> Vec<f64> {
        let values = self.values.lock().unwrap();
        values
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .collect()
    }
}

impl MetricLogger for Captured {
    fn log(&mut self, update: MetricsUpdate, _epoch: usize, split: &Split) {
        if *split != Split::Train {
            return;
        }
        let names = self.names.lock().unwrap();
        let mut values = self.values.lock().unwrap();
        for u in update.entries_numeric {
            if let Some(entry) = u.numeric_entry {
                values.push((names[&u.entry.metric_id].clone(), entry.current()));
            }
        }
    }

    fn read_numeric(
        &mut self,
        _name: &str,
        _epoch: usize,
        _split: &Split,
    ) -> Result<Vec<NumericEntry>, String> {
        Ok(Vec::new())
    }

    fn log_metric_definition(&mut self, definition: MetricDefinition) {
        let name = definition.name.to_string();
        self.names
            .lock()
            .unwrap()
            .insert(definition.metric_id, name);
    }

    fn log_epoch_summary(&mut self, _summary: EpochSummary) {}
}

/// A training run of `dp` in a fresh directory, quiet, on the default device.
fn training(dp: &DpTraining<Mlp, Batch>, name: &str) -> SupervisedTraining<DpModel<Mlp, Batch>> {
    training_in(dp, &directory(name))
}

/// A training run of `dp` in `dir` as it is (a resumed run reads its checkpoints).
fn training_in(dp: &DpTraining<Mlp, Batch>, dir: &Path) -> SupervisedTraining<DpModel<Mlp, Batch>> {
    dp.training(dir, valid())
        .renderer(Box::new(CliMetricsRenderer::new()))
        .with_application_logger(None)
}

fn learner(dp: &DpTraining<Mlp, Batch>, model: Mlp) -> Learner<DpModel<Mlp, Batch>> {
    Learner::new(dp.model(model), SgdConfig::new().init(), 0.1)
}

fn params(m: &Mlp) -> Vec<f32> {
    [
        m.hidden.weight.val().flatten::<1>(0, 1),
        m.hidden.bias.as_ref().unwrap().val(),
        m.out.weight.val().flatten::<1>(0, 1),
    ]
    .into_iter()
    .flat_map(|t| {
        t.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap()
    })
    .collect()
}

fn error_of<M: burn_train::LearnerModel>(result: &LearningResult<M>) -> &DpTrainError {
    let error = result
        .error
        .as_deref()
        .expect("the run stopped with an error");
    DpTrainError::find(error).expect("a DpTrainError behind burn-train's error")
}

#[test]
fn should_train_with_dp_through_the_learner_and_show_the_mechanisms_epsilon() {
    let device = Device::default();
    let model = Mlp::new(&device);
    let before = params(&model);
    let dp = owner(1);
    let captured = Captured::default();

    let result = training(&dp, "trains")
        .num_epochs(2)
        .with_metric_logger(captured.clone())
        .launch(learner(&dp, model));

    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(
        dp.steps(),
        20,
        "two epochs of ⌈1/q⌉ = 10 steps, each accounted"
    );
    let after = params(&result.model.clone().into_inner());
    assert!(after.iter().all(|v| v.is_finite()));
    let moved = before
        .iter()
        .zip(&after)
        .filter(|(a, b)| (*a - *b).abs() > 1e-6)
        .count();
    assert!(
        moved > before.len() / 2,
        "{moved} of {} parameters moved",
        before.len()
    );

    // Every step's ε, then each epoch's final value: increasing, the last the mechanism's.
    let eps = captured.of("Epsilon");
    assert_eq!(eps.len(), 22, "{eps:?}");
    assert!(eps.windows(2).all(|w| w[1] >= w[0]), "{eps:?}");
    let final_eps = dp.epsilon_rdp().unwrap();
    assert_eq!(*eps.last().unwrap(), final_eps);
    // 10 steps, epoch 1's value, 10 steps, epoch 2's value: an epoch's value is its last ε.
    assert_eq!(eps[10], eps[9]);
    assert_eq!(eps[20], final_eps, "the last step's ε");
    // Step k's ε is the accountant's for k steps of (q, σ) = (0.1, 1).
    let steps = eps[..10].iter().chain(&eps[11..21]);
    for (k, e) in (1..=20).zip(steps) {
        assert_eq!(*e, rdp(k), "step {k}");
    }
    // The statement's ε is the tighter PLD one; a seeded run is not private, and says so.
    let pld = dp.epsilon().unwrap();
    let statement = dp.statement().unwrap();
    assert_eq!(statement.epsilon(), pld);
    assert_eq!(statement.accounted.steps, 20);
    assert!(pld <= final_eps, "PLD {pld} <= RDP {final_eps}");
    assert!(!statement.is_private());
    assert!(
        statement.to_string().starts_with("NOT PRIVATE"),
        "{statement}"
    );
    // The step's counts are on the dashboard: a percentage clipped and the non-finite examples
    // (none: the loss is finite) after every step (no batch of 100 examples at q = 0.1 came
    // out empty with this seed), then each epoch's.
    let clipped = captured.of("Clipped");
    assert_eq!(clipped.len(), 22, "{clipped:?}");
    assert!(
        clipped.iter().all(|c| (0.0..=100.0).contains(c)),
        "{clipped:?}"
    );
    assert_eq!(captured.of("Non-finite"), vec![0.0; 22]);
}

#[test]
fn should_report_the_clipped_and_non_finite_examples_of_a_step() {
    let device = Device::default();
    // C = 1e-6: every finite example's gradient is above it.
    let tiny = DpConfig {
        clip_norm: 1e-6,
        ..config()
    };
    let dp = seeded(tiny.clone(), 20);
    let model = dp.model(Mlp::new(&device));
    let batch = dp.loader().iter().next().unwrap().unwrap();
    let sampled = batch.size();
    assert!(sampled > 0);
    let output = model.try_step(batch).unwrap().item;
    assert_eq!((output.step(), output.sampled()), (1, sampled));
    assert_eq!((output.clipped(), output.non_finite()), (sampled, 0));

    // A loss that is infinite on every example: none is clipped, all are counted non-finite
    // (each contributes zero), and the step still releases its noise and is accounted.
    let infinite = |m: &Mlp, b: Batch| loss(m, b).div_scalar(0.0);
    let dp = DpTraining::seeded(tiny, 20, InMemDataset::new(rows(100)), Rows, infinite).unwrap();
    let model = dp.model(Mlp::new(&device));
    let batch = dp.loader().iter().next().unwrap().unwrap();
    let sampled = batch.size();
    assert!(sampled > 0);
    let output = model.try_step(batch).unwrap().item;
    assert_eq!((output.clipped(), output.non_finite()), (0, sampled));
    assert_eq!(dp.steps(), 1);
}

#[test]
fn should_resume_epsilon_from_the_mechanisms_record_beside_the_checkpoint() {
    let device = Device::default();
    let dir = directory("resume");
    // The first run: two epochs, checkpointed (burn-train keeps the last two).
    let first = owner(10);
    let result = training_in(&first, &dir)
        .with_default_checkpointers()
        .num_epochs(2)
        .launch(learner(&first, Mlp::new(&device)));
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(first.steps(), 20);
    for (epoch, steps) in [(1, 10), (2, 20)] {
        let record = DpRecord::load(record_path(&dir, epoch)).unwrap();
        assert_eq!(record.steps(), steps, "the record of epoch {epoch}");
        assert!(record.is_seeded());
        assert!(dir.join(format!("checkpoint/model-{epoch}.bpk")).exists());
    }

    // Refused before any step, with the record left as it is: other settings, ...
    let other = seeded(
        DpConfig {
            noise_multiplier: 2.0,
            ..config()
        },
        11,
    );
    let result = training_in(&other, &dir)
        .with_default_checkpointers()
        .checkpoint(2)
        .num_epochs(4)
        .launch(learner(&other, Mlp::new(&device)));
    let error = error_of(&result);
    assert!(
        matches!(error, DpTrainError::Resume { epoch: 2, reason, .. } if reason.contains("settings differ")),
        "{error}"
    );
    assert_eq!(other.steps(), 0);
    // ... an owner with steps of its own (they would drop out of ε), ...
    let result = training_in(&first, &dir)
        .with_default_checkpointers()
        .checkpoint(2)
        .num_epochs(4)
        .launch(learner(&first, Mlp::new(&device)));
    let error = error_of(&result);
    assert!(
        matches!(error, DpTrainError::Resume { reason, .. } if reason.contains("20 steps of its own")),
        "{error}"
    );
    assert_eq!(first.steps(), 20);
    // ... and a checkpoint without the mechanism's record.
    let copy = directory("resume-without-record");
    std::fs::create_dir_all(copy.join("checkpoint")).unwrap();
    for name in ["model", "optim", "scheduler"] {
        let file = format!("checkpoint/{name}-1.bpk");
        std::fs::copy(dir.join(&file), copy.join(&file)).unwrap();
    }
    let lost = owner(12);
    let result = training_in(&lost, &copy)
        .with_default_checkpointers()
        .checkpoint(1)
        .num_epochs(4)
        .launch(learner(&lost, Mlp::new(&device)));
    let error = error_of(&result);
    assert!(
        matches!(error, DpTrainError::Resume { epoch: 1, path, .. } if *path == record_path(&copy, 1)),
        "{error}"
    );
    assert_eq!(lost.steps(), 0);
    // ... and burn-train's own loop in place of the DP strategy: it restores the model but not
    // the mechanism, whose ε would restart at zero; the first step refuses.
    let swapped = owner(15);
    let default_loop = SupervisedTraining::new(&dir, Arc::new(swapped.loader()), valid())
        .renderer(Box::new(CliMetricsRenderer::new()))
        .with_application_logger(None)
        .with_default_checkpointers()
        .checkpoint(2)
        .num_epochs(4);
    let panic = catch_unwind(AssertUnwindSafe(|| {
        default_loop.launch(learner(&swapped, Mlp::new(&device)))
    }))
    .err()
    .expect("the step refuses");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(message, DpTrainError::RestoredWithoutRecord.to_string());
    assert_eq!(swapped.steps(), 0);

    // Resumed by a new DpTraining of the same settings (as a new process would): epochs 3 and 4.
    let resumed = owner(13);
    let captured = Captured::default();
    let result = training_in(&resumed, &dir)
        .with_default_checkpointers()
        .checkpoint(2)
        .num_epochs(4)
        .with_metric_logger(captured.clone())
        .launch(learner(&resumed, Mlp::new(&device)));
    assert!(result.error.is_none(), "{:?}", result.error);
    // ε goes on from step 21: the metric's first value is the RDP ε of 21 steps.
    let eps = captured.of("Epsilon");
    assert_eq!(eps.len(), 22, "{eps:?}");
    assert_eq!(eps[0], rdp(21));
    assert_eq!(*eps.last().unwrap(), rdp(40));
    assert_eq!(DpRecord::load(record_path(&dir, 4)).unwrap().steps(), 40);

    // An uninterrupted run of four epochs: the same steps, the same ε by PLD and by RDP.
    let whole = owner(14);
    let result = training(&whole, "uninterrupted")
        .num_epochs(4)
        .launch(learner(&whole, Mlp::new(&device)));
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!((resumed.steps(), whole.steps()), (40, 40));
    assert_eq!(resumed.epsilon().unwrap(), whole.epsilon().unwrap());
    assert_eq!(resumed.epsilon_rdp().unwrap(), whole.epsilon_rdp().unwrap());
    let statement = resumed.statement().unwrap();
    assert_eq!(statement.accounted.steps, 40);
    assert_eq!(statement.epsilon(), whole.statement().unwrap().epsilon());
    // The first run was seeded: so is every run resumed from its records.
    assert!(!statement.is_private());
}

#[test]
fn should_refuse_gradient_accumulation_before_any_step() {
    let device = Device::default();
    let model = Mlp::new(&device);
    let before = params(&model);
    let dp = owner(2);

    let result = training(&dp, "accumulation")
        .grads_accumulation(4)
        .launch(learner(&dp, model));

    assert!(matches!(
        error_of(&result),
        DpTrainError::GradientAccumulation { accumulation: 4 }
    ));
    assert_eq!(dp.steps(), 0, "nothing sampled, noised or accounted");
    assert_eq!(dp.epsilon().unwrap(), 0.0);
    assert_eq!(params(&result.model.into_inner()), before);
}

#[test]
fn should_refuse_to_resume_without_checkpointers() {
    // burn-train restores no model without checkpointers: continuing ε would train a fresh
    // model from epoch 2 as if it were the checkpoint's.
    let dp = owner(3);
    let result = training(&dp, "resume-without-checkpointers")
        .checkpoint(1)
        .launch(learner(&dp, Mlp::new(&Device::default())));
    let error = error_of(&result);
    assert!(
        matches!(error, DpTrainError::Resume { epoch: 1, reason, .. } if reason.contains("no checkpointers")),
        "{error}"
    );
    assert_eq!(dp.steps(), 0);
}

#[test]
fn should_refuse_a_dataset_that_is_not_the_stated_replace_one_size() {
    let relation = |dataset_size| Neighbouring::ReplaceOne { dataset_size };
    let stated = DpConfig::new(1.0, 1.0, 0.1, relation(90));
    let refused =
        DpTraining::<Mlp, Batch>::seeded(stated, 15, InMemDataset::new(rows(100)), Rows, loss);
    assert!(matches!(
        refused,
        Err(DpTrainError::Privacy(
            burn_vmap::privacy::PrivacyError::Argument {
                argument: "dataset",
                ..
            }
        ))
    ));
    // N public and right: the sum is divided by q · N, and ε is stated for replacement.
    let config = DpConfig::new(1.0, 1.0, 0.1, relation(100));
    let dp: DpTraining<Mlp, Batch> =
        DpTraining::seeded(config, 15, InMemDataset::new(rows(100)), Rows, loss).unwrap();
    assert_eq!(dp.statement().unwrap().config.normaliser(), 10.0);
}

#[test]
fn should_refuse_a_model_of_another_owner_before_any_step() {
    let (a, b) = (owner(7), owner(8));
    let result = training(&a, "foreign").launch(learner(&b, Mlp::new(&Device::default())));
    assert!(matches!(error_of(&result), DpTrainError::ForeignModel));
    assert_eq!(a.steps() + b.steps(), 0);
}

#[test]
fn should_refuse_accumulation_in_the_step_under_another_strategy() {
    // burn-train's own single-device loop with accumulation: the second step finds the first
    // one's gradient unapplied and refuses before sampling noise or accounting.
    let dp = owner(4);
    let training = SupervisedTraining::new(directory("default"), Arc::new(dp.loader()), valid())
        .renderer(Box::new(CliMetricsRenderer::new()))
        .with_application_logger(None)
        .grads_accumulation(2);
    let model = Mlp::new(&Device::default());
    let panic = catch_unwind(AssertUnwindSafe(|| training.launch(learner(&dp, model))))
        .err()
        .expect("the step refuses");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(message, DpTrainError::UnappliedStep.to_string());
    assert_eq!(dp.steps(), 1, "only the first step was accounted");
}

/// A model loaded from a record by hand (`Module::load_record`) takes no DP step: its owner's
/// mechanism was not resumed, so ε would not count the steps the weights were trained with.
#[test]
fn should_refuse_a_step_of_a_model_loaded_from_a_record() {
    let dp = owner(16);
    let trained = Mlp::new(&Device::default());
    let model = dp.model(Mlp::new(&Device::default()));
    let model = model.load_record(trained.into_record());
    let batch = dp.loader().iter().next().unwrap().unwrap();
    assert!(matches!(
        model.try_step(batch),
        Err(DpTrainError::RestoredWithoutRecord)
    ));
    assert_eq!(dp.steps(), 0);
}

#[test]
fn should_refuse_a_batch_sampled_by_another_owner() {
    let (a, b) = (owner(5), owner(6));
    let model = a.model(Mlp::new(&Device::default()));
    let loader = b.loader();
    let batch = loader.iter().next().unwrap().unwrap();
    assert!(matches!(
        model.try_step(batch),
        Err(DpTrainError::ForeignBatch)
    ));
    assert_eq!(a.steps() + b.steps(), 0);
    // Its own owner's batch is accepted; a second step before the first is applied is not.
    let batch = a.loader().iter().next().unwrap().unwrap();
    let output = model.try_step(batch).unwrap();
    assert_eq!(output.item.epsilon().unwrap(), a.epsilon_rdp().unwrap());
    let batch = a.loader().iter().next().unwrap().unwrap();
    assert!(matches!(
        model.try_step(batch),
        Err(DpTrainError::UnappliedStep)
    ));
    assert_eq!(a.steps(), 1);
}
