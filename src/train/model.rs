//! The `Learner`'s model ([`DpModel`]: your model with the DP step as its `TrainStep`), the
//! batches that step accepts ([`DpBatch`]) and the data loader that samples them
//! ([`DpLoader`]).

use std::sync::Arc;

use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::module::{Devices, Module, ModuleDisplay, ModuleMapper, ModuleVisitor, Param};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer, MultiGradientsParams};
use burn::store::{ModuleRecord, RecordError};
use burn::tensor::{Device, Tensor};
use burn_train::{InferenceStep, TrainOutput, TrainStep};

use super::mechanism::Sample;
use super::{DpStepOutput, DpTrainError, DpTraining};
use crate::tree::Tree;

/// Your model as a burn-train `Learner`'s model, made by [`DpTraining::model`]: its parameters,
/// its record (the same paths: a checkpoint of it loads into your model and back), its
/// `Display` and its `InferenceStep` are your model's; its `TrainStep` is the DP step of the
/// owner's per-example loss on a [`DpBatch`], and its output a [`DpStepOutput`].
///
/// `TrainStep::step` cannot return an error: outside [`DpStrategy`](super::DpStrategy) it
/// panics with a [`DpTrainError`]'s message (a second step before the first one's gradient is
/// applied, a batch of another owner, a refused model). [`try_step`](Self::try_step) returns it.
pub struct DpModel<M, O> {
    model: M,
    dp: DpTraining<M, O>,
}

impl<M, O> DpModel<M, O> {
    pub(super) fn new(model: M, dp: DpTraining<M, O>) -> Self {
        Self { model, dp }
    }

    /// Your model.
    pub fn inner(&self) -> &M {
        &self.model
    }

    /// Your model, unwrapped (after training: `result.model.into_inner()`).
    pub fn into_inner(self) -> M {
        self.model
    }

    /// The owner of the mechanism that trains it.
    pub fn dp(&self) -> &DpTraining<M, O> {
        &self.dp
    }
}

impl<M, O> DpModel<M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    /// The DP step on `batch`: the privatized gradient (every example's gradient clipped to
    /// `C`, the sum noised once, divided by the expected batch size) and what the step did. The
    /// step is accounted; apply its gradient (`TrainStep::optimize`) before the next step.
    ///
    /// # Errors
    /// [`DpTrainError::ForeignBatch`], [`DpTrainError::UnappliedStep`],
    /// [`DpTrainError::RestoredWithoutRecord`], and the mechanism's
    /// refusals as [`DpTrainError::Privacy`] (a module with BatchNorm in training mode, inputs
    /// that do not fit the loss).
    pub fn try_step(&self, batch: DpBatch<O>) -> Result<TrainOutput<DpStepOutput>, DpTrainError> {
        self.dp.step(&self.model, batch)
    }
}

impl<M: Module + ModuleDisplay + 'static, O: Send + 'static> DpModel<M, O> {
    /// The model as Burn's optimizers step it: with autodiff parameters. The DP step itself
    /// differentiates per example and takes the model in either mode, so a model made on a
    /// plain device (forked to an autodiff device, which keeps its tensors plain) is turned to
    /// training mode here, once; a model already in training mode is left as it is (its frozen
    /// parameters stay frozen).
    fn trainable(self) -> Self {
        #[derive(Default)]
        struct Autodiff(bool);
        impl ModuleVisitor for Autodiff {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                self.0 |= param.val().is_autodiff();
            }
        }
        let mut autodiff = Autodiff::default();
        self.model.visit(&mut autodiff);
        if autodiff.0 { self } else { self.train() }
    }
}

impl<M: Clone, O> Clone for DpModel<M, O> {
    fn clone(&self) -> Self {
        Self {
            model: self.model.clone(),
            dp: self.dp.clone(),
        }
    }
}

impl<M: std::fmt::Debug, O> std::fmt::Debug for DpModel<M, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpModel")
            .field("model", &self.model)
            .field("dp", &self.dp)
            .finish()
    }
}

impl<M: std::fmt::Display, O> std::fmt::Display for DpModel<M, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.model.fmt(f)
    }
}

/// Every method is your model's; the owner handle rides along.
impl<M, O> Module for DpModel<M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Send + 'static,
{
    fn collect_devices(&self, devices: Devices) -> Devices {
        self.model.collect_devices(devices)
    }

    fn fork(self, device: &Device) -> Self {
        Self::new(self.model.fork(device), self.dp)
    }

    fn to_device(self, device: &Device) -> Self {
        Self::new(self.model.to_device(device), self.dp)
    }

    fn train(self) -> Self {
        Self::new(self.model.train(), self.dp)
    }

    fn valid(&self) -> Self {
        Self::new(self.model.valid(), self.dp.clone())
    }

    fn materialize(self) -> Self {
        Self::new(self.model.materialize(), self.dp)
    }

    fn visit<V: ModuleVisitor>(&self, visitor: &mut V) {
        self.model.visit(visitor)
    }

    fn map<Mapper: ModuleMapper>(self, mapper: &mut Mapper) -> Self {
        Self::new(self.model.map(mapper), self.dp)
    }

    /// Your model's, and the owner refuses steps until its mechanism is resumed too
    /// ([`DpTrainError::RestoredWithoutRecord`]): burn-train loads a checkpoint's model this
    /// way, and the ε of a model trained before must count those steps.
    fn try_load_record(self, record: ModuleRecord) -> Result<Self, RecordError> {
        let model = self.model.try_load_record(record)?;
        self.dp.restored();
        Ok(Self::new(model, self.dp))
    }
}

impl<M, O> TrainStep for DpModel<M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    type Input = DpBatch<O>;
    type Output = DpStepOutput;

    /// # Panics
    /// With the [`DpTrainError`] of [`try_step`](DpModel::try_step).
    fn step(&self, batch: DpBatch<O>) -> TrainOutput<DpStepOutput> {
        self.try_step(batch).unwrap_or_else(|e| panic!("{e}"))
    }

    fn optimize(
        self,
        optim: &mut ModuleOptimizer,
        lr_module: ModuleLearningRate,
        grads: GradientsParams,
    ) -> Self {
        self.dp.applied();
        optim.step(lr_module, self.trainable(), grads)
    }

    fn optimize_multi(
        self,
        optim: &mut ModuleOptimizer,
        lr_module: ModuleLearningRate,
        grads: MultiGradientsParams,
    ) -> Self {
        self.dp.applied();
        optim.step_multi(lr_module, self.trainable(), grads)
    }
}

/// Validation is your model's.
impl<M, O> InferenceStep for DpModel<M, O>
where
    M: InferenceStep,
{
    type Input = M::Input;
    type Output = M::Output;

    fn step(&self, item: M::Input) -> M::Output {
        self.model.step(item)
    }
}

/// One step's Poisson-sampled batch: the input of [`DpModel`]'s `TrainStep`. Only a
/// [`DpLoader`] makes one (it is one of the mechanism's
/// [`Sampled`](crate::privacy::Sampled) batches), and only its owner's model accepts it, once,
/// in sampling order: a batch dropped without a step (a refused one included) leaves the
/// mechanism refusing the batches after it.
pub struct DpBatch<O> {
    owner: u64,
    sample: Sample<O>,
}

impl<O> DpBatch<O> {
    pub(super) fn new(owner: u64, sample: Sample<O>) -> Self {
        Self { owner, sample }
    }

    pub(super) fn into_parts(self) -> (u64, Sample<O>) {
        (self.owner, self.sample)
    }

    /// Examples that joined (0: the step is noise only). Private: for the mechanism, not for
    /// logs.
    pub fn size(&self) -> usize {
        self.sample.size()
    }

    /// The batched examples, `None` when no example joined.
    pub fn batch(&self) -> Option<&O> {
        self.sample.batch()
    }
}

impl<O> std::fmt::Debug for DpBatch<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpBatch")
            .field("size", &self.sample.size())
            .finish_non_exhaustive()
    }
}

/// burn-train's training data loader for a [`DpTraining`]: an epoch is `⌈1/q⌉` steps, each a
/// Poisson sample of the whole dataset batched by your batcher (of random size, possibly empty),
/// drawn by the owner's mechanism. Progress counts steps. Moved to a device
/// (`DataLoader::to_device`, as burn-train does to the model's device), it draws from the
/// mechanism's loader for that device, made on first use: every device's batches are the one
/// mechanism's, numbered in one sequence. It cannot be split across devices
/// (`DataLoader::slice` gives a loader whose first item is [`DpTrainError::Sliced`]).
pub struct DpLoader<M, O> {
    dp: DpTraining<M, O>,
    device: Device,
    /// Made by `slice`: every iteration fails.
    sliced: bool,
}

impl<M, O> DpLoader<M, O> {
    pub(super) fn new(dp: DpTraining<M, O>, device: Device) -> Self {
        Self {
            dp,
            device,
            sliced: false,
        }
    }
}

impl<M, O> DataLoader<DpBatch<O>> for DpLoader<M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<DpBatch<O>> + 'a> {
        Box::new(DpLoaderIter {
            loader: self,
            steps: self.dp.steps_per_epoch(),
            done: 0,
        })
    }

    fn num_items(&self) -> usize {
        self.dp.steps_per_epoch()
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<DpBatch<O>>> {
        Arc::new(Self {
            dp: self.dp.clone(),
            device: device.clone(),
            sliced: self.sliced,
        })
    }

    fn slice(&self, _start: usize, _end: usize) -> Arc<dyn DataLoader<DpBatch<O>>> {
        Arc::new(Self {
            dp: self.dp.clone(),
            device: self.device.clone(),
            sliced: true,
        })
    }
}

struct DpLoaderIter<'a, M, O> {
    loader: &'a DpLoader<M, O>,
    steps: usize,
    done: usize,
}

impl<M, O> Iterator for DpLoaderIter<'_, M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    type Item = Result<DpBatch<O>, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done == self.steps {
            return None;
        }
        self.done += 1;
        if self.loader.sliced {
            self.done = self.steps;
            return Some(Err(DpTrainError::Sliced.into_dataset_error()));
        }
        Some(self.loader.dp.sample(&self.loader.device))
    }
}

impl<M, O> DataLoaderIterator<DpBatch<O>> for DpLoaderIter<'_, M, O>
where
    M: Module + ModuleDisplay + 'static,
    O: Tree + Send + 'static,
{
    fn progress(&self) -> Progress {
        Progress::new(self.done, self.steps, Some("steps".to_string()))
    }
}
