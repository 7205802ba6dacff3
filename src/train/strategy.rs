//! [`DpStrategy`]: burn-train's training loop for a [`DpModel`], with the refusals DP needs.

use burn::data::dataloader::Progress;
use burn::module::Module;
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
/// Before any step it refuses, with a [`DpTrainError`] in `LearningResult::error`:
/// gradient accumulation ([`DpTrainError::GradientAccumulation`]), resuming from a
/// checkpoint ([`DpTrainError::Resume`]) and a model of another owner
/// ([`DpTrainError::ForeignModel`]). A step's error (the mechanism refusing the model)
/// stops the run the same way, after the steps already taken.
pub struct DpStrategy<M, O> {
    dp: DpTraining<M, O>,
}

impl<M, O> DpStrategy<M, O> {
    pub(super) fn new(dp: DpTraining<M, O>) -> Self {
        Self { dp }
    }
}

/// Stops the run with `error` (burn-train keeps it in `LearningResult::error`).
fn fail(interrupter: &Interrupter, error: DpTrainError) {
    interrupter.fail(TrainingError::Dataset(error.into_dataset_error()));
}

impl<M, O> SupervisedLearningStrategy<DpModel<M, O>> for DpStrategy<M, O>
where
    M: Module + InferenceStep + std::fmt::Display + 'static,
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

        let refusal = match (grad_accumulation, checkpoint) {
            (Some(accumulation), _) => Some(DpTrainError::GradientAccumulation { accumulation }),
            (None, Some(epoch)) => Some(DpTrainError::Resume { epoch }),
            (None, None) if !self.dp.same(learner.model().dp()) => Some(DpTrainError::ForeignModel),
            (None, None) => None,
        };
        if let Some(error) = refusal {
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
    M: Module + InferenceStep + std::fmt::Display + 'static,
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
    M: Module + InferenceStep + std::fmt::Display + 'static,
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
