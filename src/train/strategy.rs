//! [`DpStrategy`]: burn-train's training loop for a [`DpModel`], with the refusals DP needs and
//! the mechanism's records beside burn-train's checkpoints.

use std::path::PathBuf;

use burn::data::dataloader::Progress;
use burn::module::{Module, ModuleDisplay};
use burn_train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent,
    SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainingComponents,
    TrainingError, TrainingItem, ValidLoader,
};

use super::{DpModel, DpTrainError, DpTraining};
use crate::tree::Tree;

/// burn-train's training strategy for a [`DpTraining`] run (`TrainingStrategy::Custom`, set by
/// [`DpTraining::training`]): the loop of burn-train's single-device strategy (train split,
/// validation split, checkpointing, early stopping, interruption) on the model's device, where
/// each step is the owner's DP step and its gradient is applied before the next step.
///
/// With burn-train's checkpointers, it saves the mechanism's record after every epoch, once
/// burn-train has checkpointed the model, at [`record_path`](super::record_path)`(directory,
/// epoch)` (a few hundred bytes; kept for every epoch, as burn-train's checkpointing strategy
/// does not say which epochs it keeps). Resuming (`checkpoint(epoch)`) continues the mechanism from the
/// record of that epoch: ε goes on from its steps, with fresh noise.
///
/// Before any step it refuses, with a [`DpTrainError`] in `LearningResult::error`:
/// gradient accumulation ([`DpTrainError::GradientAccumulation`]), a model of another owner
/// ([`DpTrainError::ForeignModel`]), and a resume it cannot account for
/// ([`DpTrainError::Resume`]: no checkpointers, so burn-train restored no model; no readable
/// record; a record of other settings; an owner that has taken steps already). A step's error
/// (the mechanism refusing the model) or a record that cannot be written stops the run the
/// same way, after the steps already taken.
pub struct DpStrategy<M, O> {
    dp: DpTraining<M, O>,
    /// The run's directory: the records go to its `checkpoint` folder.
    directory: PathBuf,
}

impl<M, O> DpStrategy<M, O> {
    pub(super) fn new(dp: DpTraining<M, O>, directory: PathBuf) -> Self {
        Self { dp, directory }
    }
}

/// Stops the run with `error` (burn-train keeps it in `LearningResult::error`).
fn fail(interrupter: &Interrupter, error: DpTrainError) {
    interrupter.fail(TrainingError::Dataset(error.into_dataset_error()));
}

impl<M, O> SupervisedLearningStrategy<DpModel<M, O>> for DpStrategy<M, O>
where
    M: Module + ModuleDisplay + InferenceStep + std::fmt::Display + 'static,
    O: Tree + Send + 'static,
{
    fn fit(
        &self,
        components: TrainingComponents<DpModel<M, O>>,
        mut learner: Learner<DpModel<M, O>>,
        dataloader_train: TrainLoader<DpModel<M, O>>,
        dataloader_valid: ValidLoader<DpModel<M, O>>,
        starting_epoch: usize,
    ) -> (
        DpModel<M, O>,
        SupervisedTrainingEventProcessor<DpModel<M, O>>,
    ) {
        let TrainingComponents {
            num_epochs,
            checkpoint,
            mut checkpointer,
            grad_accumulation,
            interrupter,
            mut early_stopping,
            mut event_processor,
            event_store,
            ..
        } = components;

        let ready = if let Some(accumulation) = grad_accumulation {
            Err(DpTrainError::GradientAccumulation { accumulation })
        } else if !self.dp.same(learner.model().dp()) {
            Err(DpTrainError::ForeignModel)
        } else {
            match checkpoint {
                // burn-train restores the model, the optimizer and the scheduler (before this
                // strategy runs) only with checkpointers.
                Some(epoch) if checkpointer.is_none() => Err(DpTrainError::Resume {
                    epoch,
                    path: super::record_path(&self.directory, epoch),
                    reason: "no checkpointers, so burn-train restored no model: set `with_default_checkpointers`".into(),
                }),
                Some(epoch) => self.dp.resume(&self.directory, epoch),
                None => Ok(()),
            }
        };
        if let Err(error) = ready {
            fail(&interrupter, error);
            return (learner.model(), event_processor);
        }
        // A step of an earlier, interrupted run may have left its gradient unapplied.
        self.dp.applied();

        // Burn's optimizers step a model whose parameters are autodiff tensors; the batches
        // stay plain (the mechanism differentiates per example on its own).
        let device = learner
            .model()
            .devices()
            .first()
            .cloned()
            .unwrap_or_default();
        let device = if device.is_autodiff() {
            device
        } else {
            device.autodiff()
        };
        learner.fork(&device);
        let plain = device.inner();
        let train = dataloader_train.to_device(&plain);
        let valid = dataloader_valid.to_device(&plain);

        for epoch in starting_epoch..=num_epochs {
            interrupter.fail_on_error(event_processor.process_train(LearnerEvent::StartSplit {
                epoch_number: epoch,
                total_items: train.num_items(),
            }));
            train_epoch(&mut learner, &train, &mut event_processor, &interrupter);
            interrupter.fail_on_error(event_processor.process_train(LearnerEvent::EndSplit(epoch)));
            if interrupter.should_stop() {
                break;
            }

            interrupter.fail_on_error(event_processor.process_valid(LearnerEvent::StartSplit {
                epoch_number: epoch,
                total_items: valid.num_items(),
            }));
            valid_epoch(&learner, &valid, &mut event_processor, &interrupter);
            interrupter.fail_on_error(event_processor.process_valid(LearnerEvent::EndSplit(epoch)));
            interrupter.fail_on_error(event_processor.process_train(LearnerEvent::EndEpoch(epoch)));
            if checkpointer.is_some() || early_stopping.is_some() {
                // Both read the metrics just logged.
                interrupter.fail_on_error(event_processor.flush());
            }
            if interrupter.should_stop() {
                break;
            }
            if let Some(checkpointer) = &mut checkpointer {
                checkpointer.checkpoint(&learner, epoch, &event_store);
                // The mechanism's state after this epoch, beside the model's.
                if let Err(error) = self.dp.save(&self.directory, epoch) {
                    fail(&interrupter, error);
                    break;
                }
            }
            if let Some(early_stopping) = &mut early_stopping
                && early_stopping.should_stop(epoch, &event_store)
            {
                break;
            }
        }
        (learner.model(), event_processor)
    }
}

/// One epoch of DP steps, each gradient applied before the next step.
fn train_epoch<M, O>(
    learner: &mut Learner<DpModel<M, O>>,
    loader: &TrainLoader<DpModel<M, O>>,
    processor: &mut SupervisedTrainingEventProcessor<DpModel<M, O>>,
    interrupter: &Interrupter,
) where
    M: Module + ModuleDisplay + InferenceStep + std::fmt::Display + 'static,
    O: Tree + Send + 'static,
{
    let mut iterator = loader.iter();
    let mut iteration = 0;
    while let Some(batch) = iterator.next() {
        let batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                interrupter.fail(error);
                break;
            }
        };
        iteration += 1;
        let progress: Progress = iterator.progress();
        let output = match learner.model().try_step(batch) {
            Ok(output) => output,
            Err(error) => {
                fail(interrupter, error);
                break;
            }
        };
        learner.lr_step();
        learner.optimizer_step(output.grads);
        let item = TrainingItem::new(
            output.item,
            progress,
            Some(iteration),
            Some(learner.lr_current()),
        );
        interrupter.fail_on_error(processor.process_train(LearnerEvent::ProcessedItem(item)));
        if interrupter.should_stop() {
            break;
        }
    }
}

/// One validation epoch with the model's own `InferenceStep`.
fn valid_epoch<M, O>(
    learner: &Learner<DpModel<M, O>>,
    loader: &ValidLoader<DpModel<M, O>>,
    processor: &mut SupervisedTrainingEventProcessor<DpModel<M, O>>,
    interrupter: &Interrupter,
) where
    M: Module + ModuleDisplay + InferenceStep + std::fmt::Display + 'static,
    O: Tree + Send + 'static,
{
    let model = learner.model().valid();
    let mut iterator = loader.iter();
    let mut iteration = 0;
    while let Some(item) = iterator.next() {
        let item = match item {
            Ok(item) => item,
            Err(error) => {
                interrupter.fail(error);
                break;
            }
        };
        iteration += 1;
        let progress = iterator.progress();
        let output = InferenceStep::step(&model, item);
        let item = TrainingItem::new(output, progress, Some(iteration), None);
        interrupter.fail_on_error(processor.process_valid(LearnerEvent::ProcessedItem(item)));
        if interrupter.should_stop() {
            break;
        }
    }
}
