//! What a DP step reports ([`DpStepOutput`], the `TrainStep` output) and the metrics that show
//! it on burn-train's dashboard: [`EpsilonMetric`], [`ClippedFractionMetric`] and
//! [`NonFiniteMetric`].
//!
//! ε is what the run may publish. The clipped and non-finite counts (and the sample size) are
//! computed from the private batches and are **not** covered by the guarantee: they are for
//! watching a run (a clipping norm far too small, a loss that overflows), not for publishing,
//! and burn-train writes them to the logs of the training directory as it does every metric.

use std::sync::Arc;

use burn::tensor::TensorReadError;
use burn_std::ExecutionError;
use burn_train::metric::{
    Adaptor, ItemLazy, Metric, MetricAttributes, MetricMetadata, MetricName, Numeric,
    NumericAttributes, NumericEntry, SerializedEntry, format_float,
};

use super::DpTrainError;
use super::mechanism::{StepEpsilon, StepReport};

/// What one DP step did: the training split's item, read by [`EpsilonMetric`],
/// [`ClippedFractionMetric`] and [`NonFiniteMetric`]. Holds numbers only; its ε is computed
/// when burn-train syncs the item on its metrics thread (`ItemLazy::sync`), off the training
/// thread. The counts are computed from the private batch, outside the guarantee.
#[derive(Debug, Clone)]
pub struct DpStepOutput {
    report: StepReport,
    delta: f64,
}

impl DpStepOutput {
    pub(super) fn new(report: StepReport, delta: f64) -> Self {
        Self { report, delta }
    }

    /// The step's number in the run (1 for the first; a resumed run goes on from the saved
    /// count).
    pub fn step(&self) -> u64 {
        self.report.step
    }

    /// Examples in the step's Poisson sample (0 for a noise-only step).
    pub fn sampled(&self) -> usize {
        self.report.sampled
    }

    /// Finite examples whose gradient norm exceeded `C` (scaled down to `C`).
    pub fn clipped(&self) -> usize {
        self.report.clipped
    }

    /// Examples whose gradient was NaN or infinite: they contributed zero (and counted as
    /// sampled).
    pub fn non_finite(&self) -> usize {
        self.report.non_finite
    }

    /// ε after this step, at [`delta`](Self::delta) (by RDP, as
    /// [`DpTraining::epsilon_rdp`](super::DpTraining::epsilon_rdp)).
    ///
    /// # Errors
    /// [`DpTrainError::Privacy`] from the accountant.
    pub fn epsilon(&self) -> Result<f64, DpTrainError> {
        Ok(self.report.epsilon.value()?)
    }

    /// The δ of [`epsilon`](Self::epsilon).
    pub fn delta(&self) -> f64 {
        self.delta
    }
}

impl ItemLazy for DpStepOutput {
    /// Computes ε (burn-train calls this on its metrics thread).
    fn sync(mut self) -> Result<Self, ExecutionError> {
        let epsilon = self.epsilon().map_err(|e| ExecutionError::WithContext {
            reason: e.to_string(),
        })?;
        self.report.epsilon = StepEpsilon::Known(epsilon);
        Ok(self)
    }
}

/// [`EpsilonMetric`]'s input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpsilonInput {
    /// ε so far.
    pub epsilon: f64,
    /// Its δ.
    pub delta: f64,
}

impl Adaptor<EpsilonInput> for DpStepOutput {
    /// After `sync` (as burn-train does), ε is known; before, it is computed here, and NaN
    /// if the accountant fails (`sync` reports that error instead).
    fn adapt(&self) -> EpsilonInput {
        EpsilonInput {
            epsilon: self.epsilon().unwrap_or(f64::NAN),
            delta: self.delta,
        }
    }
}

/// ε so far, at the run's δ: the training split's privacy spent, after every step, by RDP (for
/// the default hardened noise the statement's own ε, the discrete Gaussian's RDP; for plain
/// noise an upper bound a little above the PLD ε of the final statement). Its value for an
/// epoch is the ε at the epoch's end (not a mean over its steps).
#[derive(Debug, Clone)]
pub struct EpsilonMetric {
    name: MetricName,
    last: Option<EpsilonInput>,
}

impl EpsilonMetric {
    /// The metric, named "Epsilon".
    pub fn new() -> Self {
        Self {
            name: Arc::new("Epsilon".to_string()),
            last: None,
        }
    }

    fn entry(&self) -> SerializedEntry {
        match self.last {
            Some(EpsilonInput { epsilon, delta }) => SerializedEntry::new(
                format!("{} at δ = {delta:.0e} (RDP)", format_float(epsilon, 3)),
                NumericEntry::Value(epsilon).serialize(),
            ),
            None => SerializedEntry::not_available(None),
        }
    }
}

impl Default for EpsilonMetric {
    fn default() -> Self {
        Self::new()
    }
}

impl Metric for EpsilonMetric {
    type Input = EpsilonInput;

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn description(&self) -> Option<String> {
        Some("ε so far of the (ε, δ)-DP guarantee on the training data, by RDP".to_string())
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes {
            unit: None,
            higher_is_better: false,
        }
        .into()
    }

    fn update(
        &mut self,
        item: &EpsilonInput,
        _metadata: &MetricMetadata,
    ) -> Result<SerializedEntry, TensorReadError> {
        self.last = Some(*item);
        Ok(self.entry())
    }

    fn compute(&mut self) -> Result<SerializedEntry, TensorReadError> {
        Ok(match self.last {
            Some(last) => SerializedEntry::new(
                self.entry().formatted,
                NumericEntry::Final(last.epsilon).serialize(),
            ),
            None => self.entry(),
        })
    }

    fn clear(&mut self) {
        self.last = None;
    }
}

impl Numeric for EpsilonMetric {
    fn value(&self) -> Option<NumericEntry> {
        self.last.map(|l| NumericEntry::Value(l.epsilon))
    }

    fn running_value(&self) -> Option<NumericEntry> {
        self.value()
    }

    fn final_value(&self) -> NumericEntry {
        NumericEntry::Final(self.last.map_or(f64::NAN, |l| l.epsilon))
    }
}

/// [`ClippedFractionMetric`]'s input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClippedFractionInput {
    /// Examples clipped.
    pub clipped: usize,
    /// Examples sampled.
    pub sampled: usize,
}

impl Adaptor<ClippedFractionInput> for DpStepOutput {
    fn adapt(&self) -> ClippedFractionInput {
        ClippedFractionInput {
            clipped: self.clipped(),
            sampled: self.sampled(),
        }
    }
}

/// The share of sampled examples whose gradient norm exceeded `C`, in percent: a batch's, and
/// the epoch's (clipped over sampled, summed over its steps). "N/A" for a noise-only step.
/// Computed from the private batches: for watching a run, outside the guarantee.
#[derive(Debug, Clone)]
pub struct ClippedFractionMetric {
    name: MetricName,
    /// This batch's fraction, when there is one.
    current: Option<f64>,
    clipped: usize,
    sampled: usize,
}

impl ClippedFractionMetric {
    /// The metric, named "Clipped".
    pub fn new() -> Self {
        Self {
            name: Arc::new("Clipped".to_string()),
            current: None,
            clipped: 0,
            sampled: 0,
        }
    }

    fn running(&self) -> Option<f64> {
        (self.sampled > 0).then(|| 100.0 * self.clipped as f64 / self.sampled as f64)
    }

    fn entry(&self, last: bool) -> SerializedEntry {
        let show = |v: Option<f64>| v.map_or("N/A".to_string(), |v| format!("{v:.1}"));
        let formatted = format!(
            "epoch {} % - batch {} %",
            show(self.running()),
            show(self.current)
        );
        let value = if last {
            self.running().map(NumericEntry::Final)
        } else {
            self.current.map(|v| NumericEntry::Aggregated {
                aggregated_value: v,
                count: 1,
            })
        };
        match value {
            Some(v) => SerializedEntry::new(formatted, v.serialize()),
            None => SerializedEntry::new(formatted, SerializedEntry::NOT_AVAILABLE.to_string()),
        }
    }
}

impl Default for ClippedFractionMetric {
    fn default() -> Self {
        Self::new()
    }
}

impl Metric for ClippedFractionMetric {
    type Input = ClippedFractionInput;

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn description(&self) -> Option<String> {
        Some("share of sampled examples whose gradient norm exceeded the clipping norm".to_string())
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes {
            unit: Some("%".to_string()),
            higher_is_better: false,
        }
        .into()
    }

    fn update(
        &mut self,
        item: &ClippedFractionInput,
        _metadata: &MetricMetadata,
    ) -> Result<SerializedEntry, TensorReadError> {
        self.clipped += item.clipped;
        self.sampled += item.sampled;
        self.current =
            (item.sampled > 0).then(|| 100.0 * item.clipped as f64 / item.sampled as f64);
        Ok(self.entry(false))
    }

    fn compute(&mut self) -> Result<SerializedEntry, TensorReadError> {
        Ok(self.entry(true))
    }

    fn clear(&mut self) {
        *self = Self::new();
    }
}

impl Numeric for ClippedFractionMetric {
    fn value(&self) -> Option<NumericEntry> {
        self.current.map(NumericEntry::Value)
    }

    fn running_value(&self) -> Option<NumericEntry> {
        self.running().map(NumericEntry::Value)
    }

    fn final_value(&self) -> NumericEntry {
        NumericEntry::Final(self.running().unwrap_or(f64::NAN))
    }
}

/// [`NonFiniteMetric`]'s input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonFiniteInput {
    /// Examples whose gradient was not finite.
    pub non_finite: usize,
}

impl Adaptor<NonFiniteInput> for DpStepOutput {
    fn adapt(&self) -> NonFiniteInput {
        NonFiniteInput {
            non_finite: self.non_finite(),
        }
    }
}

/// The examples whose gradient was NaN or infinite (each contributed zero to its step): a
/// batch's count, and the epoch's total. Anything above zero means the loss overflows or
/// divides by zero on some examples. Computed from the private batches: for watching a run,
/// outside the guarantee.
#[derive(Debug, Clone)]
pub struct NonFiniteMetric {
    name: MetricName,
    /// This batch's count, once a batch was seen.
    current: Option<usize>,
    total: usize,
}

impl NonFiniteMetric {
    /// The metric, named "Non-finite".
    pub fn new() -> Self {
        Self {
            name: Arc::new("Non-finite".to_string()),
            current: None,
            total: 0,
        }
    }

    fn entry(&self, last: bool) -> SerializedEntry {
        let Some(current) = self.current else {
            return SerializedEntry::not_available(None);
        };
        let formatted = format!("epoch {} - batch {current}", self.total);
        let value = if last {
            NumericEntry::Final(self.total as f64)
        } else {
            NumericEntry::Value(current as f64)
        };
        SerializedEntry::new(formatted, value.serialize())
    }
}

impl Default for NonFiniteMetric {
    fn default() -> Self {
        Self::new()
    }
}

impl Metric for NonFiniteMetric {
    type Input = NonFiniteInput;

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn description(&self) -> Option<String> {
        Some("examples whose gradient was NaN or infinite (each contributed zero)".to_string())
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes {
            unit: None,
            higher_is_better: false,
        }
        .into()
    }

    fn update(
        &mut self,
        item: &NonFiniteInput,
        _metadata: &MetricMetadata,
    ) -> Result<SerializedEntry, TensorReadError> {
        self.current = Some(item.non_finite);
        self.total += item.non_finite;
        Ok(self.entry(false))
    }

    fn compute(&mut self) -> Result<SerializedEntry, TensorReadError> {
        Ok(self.entry(true))
    }

    fn clear(&mut self) {
        *self = Self::new();
    }
}

impl Numeric for NonFiniteMetric {
    fn value(&self) -> Option<NumericEntry> {
        self.current.map(|c| NumericEntry::Value(c as f64))
    }

    fn running_value(&self) -> Option<NumericEntry> {
        self.current.map(|_| NumericEntry::Value(self.total as f64))
    }

    fn final_value(&self) -> NumericEntry {
        NumericEntry::Final(self.current.map_or(f64::NAN, |_| self.total as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::data::dataloader::Progress;

    fn metadata() -> MetricMetadata {
        MetricMetadata {
            progress: Progress::new(1, 1, None),
            iteration: Some(1),
            lr: None,
        }
    }

    fn output(sampled: usize, clipped: usize, epsilon: f64) -> DpStepOutput {
        DpStepOutput::new(
            StepReport {
                step: 1,
                sampled,
                clipped,
                non_finite: sampled - clipped.min(sampled),
                epsilon: StepEpsilon::Known(epsilon),
            },
            1e-5,
        )
    }

    #[test]
    fn should_show_the_last_epsilon_not_a_mean() {
        let mut m = EpsilonMetric::new();
        for eps in [0.5, 1.0, 2.0] {
            let input: EpsilonInput = output(3, 0, eps).adapt();
            m.update(&input, &metadata()).unwrap();
        }
        assert!(matches!(m.value(), Some(NumericEntry::Value(v)) if v == 2.0));
        let entry = m.compute().unwrap();
        assert_eq!(entry.serialized, "2,final");
        assert!(
            entry.formatted.starts_with("2.000 at δ = 1e-5"),
            "{}",
            entry.formatted
        );
    }

    #[test]
    fn should_weight_the_clipped_fraction_by_examples() {
        let mut m = ClippedFractionMetric::new();
        for (sampled, clipped) in [(4, 1), (0, 0), (6, 6)] {
            let input: ClippedFractionInput = output(sampled, clipped, 1.0).adapt();
            m.update(&input, &metadata()).unwrap();
        }
        // 7 of 10 sampled examples; the empty step has no fraction of its own.
        assert!(
            matches!(m.running_value(), Some(NumericEntry::Value(v)) if (v - 70.0).abs() < 1e-12)
        );
        assert!(matches!(m.value(), Some(NumericEntry::Value(v)) if v == 100.0));
        assert_eq!(m.compute().unwrap().serialized, "70,final");
    }

    #[test]
    fn should_say_not_available_for_a_noise_only_step() {
        let mut m = ClippedFractionMetric::new();
        let input: ClippedFractionInput = output(0, 0, 1.0).adapt();
        let entry = m.update(&input, &metadata()).unwrap();
        assert!(entry.is_not_available());
        assert!(m.value().is_none() && m.running_value().is_none());
        assert!(m.compute().unwrap().is_not_available());
    }

    #[test]
    fn should_count_non_finite_examples_per_batch_and_epoch() {
        let mut m = NonFiniteMetric::new();
        assert!(m.compute().unwrap().is_not_available());
        // (sampled, clipped): 2, 0 and 3 non-finite examples.
        for (sampled, clipped) in [(5, 3), (4, 4), (3, 0)] {
            let input: NonFiniteInput = output(sampled, clipped, 1.0).adapt();
            m.update(&input, &metadata()).unwrap();
        }
        assert!(matches!(m.value(), Some(NumericEntry::Value(v)) if v == 3.0));
        assert!(matches!(m.running_value(), Some(NumericEntry::Value(v)) if v == 5.0));
        let entry = m.compute().unwrap();
        assert_eq!(entry.serialized, "5,final");
        assert_eq!(entry.formatted, "epoch 5 - batch 3");
    }
}
