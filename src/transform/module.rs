//! A user's Burn module under a transform: its parameters as the inputs of a recorded loss.
//!
//! Burn 0.22 modules hold `Param<Tensor<D>>` on a plain device. A transform that differentiates
//! a loss over a module records the loss once with the module moved to the capture device and
//! its float parameters declared as the program's first inputs (in the module's visiting
//! order); every run then feeds the module's current parameters, so an optimizer step needs no
//! new recording. A parameter is differentiated when it is trainable (`Module::freeze` and
//! `set_require_grad(false)` exclude it, as Burn's own `backward` would).
//!
//! Everything else the loss reads from the module is a constant of the recording: a
//! `Dropout`'s probability, a plain `f64` field (a temperature, a loss weight), a
//! `#[module(skip)]` or `Ignored<T>` value, a non-parameter tensor field. A kept recording is
//! reused only for a module whose [`constants`] (Burn's rendering of every such field) are the
//! ones it was recorded with, and whose tensors that are not float parameters hold the values
//! it was recorded with ([`tensor_fields`]); any change records the loss again.

use burn::module::{
    DisplaySettings, Flag, Module, ModuleDisplay, ModuleMapper, ModuleVisitor, Param, ParamId,
};
use burn::tensor::{Float, Tensor};
use burn_backend::TensorData;

use crate::VmapError;
use crate::graph::{Recording, TensorSig, capture_values, capture_with, placeholder};
use crate::transform::run::Recorded;
use crate::tree::{Leaf, Tree, TreeDef};

/// A module's float parameters in visiting order.
#[derive(Debug, Clone)]
pub(crate) struct ModuleParams {
    /// `layer1.weight`.
    pub(crate) paths: Vec<String>,
    pub(crate) ids: Vec<ParamId>,
    pub(crate) tensors: Vec<Leaf>,
    /// Whether each parameter gets a gradient.
    pub(crate) trainable: Vec<bool>,
}

/// What identifies a module for a recording: its parameters' ids and shapes, its flags (a
/// `Dropout`'s training flag changes what is recorded), and its [`constants`] and
/// [`tensor_fields`] once a transform that keeps recordings adds them
/// ([`with_constants`](Self::with_constants)).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModuleKey {
    params: Vec<(ParamId, TensorSig, bool)>,
    flags: Vec<(ParamId, bool)>,
    constants: Option<String>,
    /// The values of the tensors that are not float parameters (empty when there are none).
    fields: Vec<TensorData>,
}

impl ModuleKey {
    /// The key with the module's [`constants`] and, where its rendering shows a tensor that is
    /// not a float parameter, the values of those tensors ([`tensor_fields`], recorded with
    /// the default dtypes of `settings`): a recording kept under it is reused only for a module
    /// whose every non-parameter field is the same, values included.
    ///
    /// # Errors
    /// As [`tensor_fields`]'.
    pub(crate) fn with_constants<M: Module + ModuleDisplay>(
        mut self,
        transform: &'static str,
        module: &M,
        settings: burn_backend::DeviceSettings,
    ) -> Result<Self, VmapError> {
        let constants = constants(module);
        if shows_tensor_field(&constants) {
            self.fields = tensor_fields(transform, module, settings)?;
        }
        self.constants = Some(constants);
        Ok(self)
    }
}

/// Whether a module's [`constants`] show a tensor that is not a float parameter, whose values
/// a recording takes as constants: a tensor field (`Tensor {rank: ..}`), or an integer or
/// boolean parameter (`ParamTensor {rank: .., kind: int}`: only float parameters are a
/// recording's inputs).
fn shows_tensor_field(constants: &str) -> bool {
    const TENSOR: &str = "Tensor {rank:";
    constants.match_indices(TENSOR).any(|(at, _)| {
        let rest = &constants[at..];
        let rendering = &rest[..rest.find('}').unwrap_or(rest.len())];
        !constants[..at].ends_with("Param") || !rendering.contains("kind: float")
    })
}

/// The values of every tensor of `module` that a recording of a loss over it takes as a
/// constant: its tensor fields that are not parameters (a `RotaryEncoding`'s frequencies, a
/// mask, a buffer the training loop updates) and its integer and boolean parameters, in a fixed
/// order. Burn's module visitors do not reach a plain tensor field, so they are read the way a
/// recording reads them: a clone of the module, its float parameters replaced by one-element
/// placeholders, is moved to a capture device, and the values that arrive are kept. On a GPU
/// that is a read of those tensors (not of the parameters) to the host.
///
/// # Errors
/// A capture error ([`VmapError::FunctionPanicked`] when Burn refuses the move).
pub(crate) fn tensor_fields<M: Module>(
    transform: &'static str,
    module: &M,
    settings: burn_backend::DeviceSettings,
) -> Result<Vec<TensorData>, VmapError> {
    capture_values(transform, false, settings, |device| {
        // `valid`: a tensor field of a module in training mode is on an autodiff device, which
        // the capture device refuses (the flags it turns off do not matter here). Its clone
        // holds running statistics of its own (`RunningState::valid`), so the placeholders
        // leave the user's alone.
        let stripped = module.valid().map(&mut Placeholders(device.clone()));
        drop(stripped.to_device(device));
        Ok(())
    })
}

/// Replaces each float parameter of a module with a one-element zero on the capture device.
struct Placeholders(burn::tensor::Device);

impl ModuleMapper for Placeholders {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, _, mapper) = param.consume();
        Param::from_mapped_value(id, Tensor::zeros([1; D], &self.0), mapper)
    }
}

/// Everything of `module` that a function recorded over it may read besides its parameters'
/// values and flags, as one string: Burn's rendering of the module with every attribute
/// (`ModuleDisplay` with `show_all_attributes`, what `#[derive(Module)]` generates, custom
/// displays bypassed). A field that is not a module is rendered by its `Debug` (a temperature,
/// a `#[module(skip)]` or `Ignored<T>` value), a constant (`f64`, `usize`) by its value (`f64`
/// in the shortest form that reads back to the same bits), a `Dropout` by its probability, a
/// tensor that is not a parameter by its shape, a parameter by its shape. The values of such a
/// tensor are [`tensor_fields`]'.
pub(crate) fn constants<M: ModuleDisplay>(module: &M) -> String {
    let settings = DisplaySettings::new()
        .with_show_all_attributes(true)
        .with_show_param_id(false)
        .with_show_num_parameters(false)
        .with_new_line_after_attribute(false)
        .with_indentation_size(0);
    module.format(settings)
}

/// The paths of the first parameter met twice (the same `ParamId` at two paths: a tied or
/// shared parameter, a `Param` cloned into two fields), first and second.
fn shared(paths: &[String], ids: &[ParamId]) -> Option<(String, String)> {
    let mut seen = std::collections::HashMap::with_capacity(ids.len());
    ids.iter().enumerate().find_map(|(i, id)| {
        seen.insert(*id, i)
            .map(|first| (paths[first].clone(), paths[i].clone()))
    })
}

/// Layers whose training mode mixes the examples of a batch (batch statistics), and writes
/// module state (running statistics): refused in training mode, allowed in eval mode.
const MIXES_EXAMPLES: &[&str] = &["Struct:BatchNorm"];

#[derive(Default)]
struct Collect {
    /// The path of the current field, `layer1.weight`, and where each entered name starts.
    path: String,
    starts: Vec<usize>,
    /// For each entered field, the layer holding it where that layer's training mode mixes
    /// examples (`BatchNorm`).
    mixes: Vec<Option<&'static str>>,
    paths: Vec<String>,
    ids: Vec<ParamId>,
    tensors: Vec<Leaf>,
    /// Whether each parameter's value requires a gradient, where it is on an autodiff device.
    require_grad: Vec<Option<bool>>,
    flags: Vec<(ParamId, bool)>,
    /// The first layer that mixes examples in training mode: its path and type.
    mixing: Option<(String, &'static str)>,
}

impl ModuleVisitor for Collect {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.starts.push(self.path.len());
        if self.starts.len() > 1 {
            self.path.push('.');
        }
        self.path.push_str(name);
        let layer = MIXES_EXAMPLES.iter().find(|l| **l == container_type);
        self.mixes
            .push(layer.map(|l| l.trim_start_matches("Struct:")));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        if let Some(start) = self.starts.pop() {
            self.path.truncate(start);
        }
        self.mixes.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        self.paths.push(self.path.clone());
        self.ids.push(param.id);
        self.require_grad
            .push(value.is_autodiff().then(|| value.is_require_grad()));
        self.tensors.push(Leaf::new(value));
    }

    fn visit_flag(&mut self, flag: &Param<burn::module::Flag>) {
        let enabled = flag.val().is_enabled();
        self.flags.push((flag.id, enabled));
        // Entering a field passes the type of the struct holding it: the flag's layer, whose
        // path is the current one less the flag's own name.
        if enabled
            && self.mixing.is_none()
            && let Some(Some(layer)) = self.mixes.last()
        {
            let end = self.starts.last().copied().unwrap_or(0);
            self.mixing = Some((self.path[..end].to_string(), layer));
        }
    }
}

struct Trainable(Vec<bool>);

impl ModuleVisitor for Trainable {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.val().is_require_grad());
    }
}

/// The float parameters of `module`, as tensors, in visiting order.
pub(crate) fn param_tensors<M: Module>(module: &M) -> Vec<Leaf> {
    let mut collect = Collect::default();
    module.visit(&mut collect);
    collect.tensors
}

impl ModuleParams {
    /// The float parameters of `module`, and what identifies it for a recording.
    ///
    /// # Errors
    /// [`VmapError::MixesExamples`] for a layer that mixes the examples of a batch in training
    /// mode (`BatchNorm`), named by its path, and [`VmapError::SharedParameter`] for one
    /// parameter at two paths, before anything is recorded.
    pub(crate) fn of<M: Module>(
        transform: &'static str,
        module: &M,
    ) -> Result<(Self, ModuleKey), VmapError> {
        let mut collect = Collect::default();
        module.visit(&mut collect);
        if let Some((path, layer)) = collect.mixing.take() {
            return Err(VmapError::MixesExamples {
                transform,
                path,
                layer,
            });
        }
        if let Some((first, second)) = shared(&collect.paths, &collect.ids) {
            return Err(VmapError::SharedParameter {
                transform,
                first,
                second,
            });
        }
        // On an autodiff device (a module in training mode, as an optimizer holds it) a
        // parameter's value requires a gradient exactly when it is trainable. On a plain device
        // Burn applies the configured trainability when the module enters training mode
        // (`train`): read it there, on a clone.
        let trainable = match collect.require_grad.iter().copied().collect() {
            Some(flags) => Trainable(flags),
            None => {
                let mut trainable = Trainable(Vec::with_capacity(collect.ids.len()));
                module.clone().train().visit(&mut trainable);
                trainable
            }
        };
        let key = ModuleKey {
            params: collect
                .ids
                .iter()
                .zip(&collect.tensors)
                .zip(&trainable.0)
                .map(|((id, t), g)| {
                    let sig = TensorSig {
                        shape: t.shape(),
                        dtype: t.dtype(),
                    };
                    (*id, sig, *g)
                })
                .collect(),
            flags: collect.flags,
            constants: None,
            fields: Vec::new(),
        };
        let params = Self {
            paths: collect.paths,
            ids: collect.ids,
            tensors: collect.tensors,
            trainable: trainable.0,
        };
        Ok((params, key))
    }
}

/// Records `loss(module, args)` for one example: the module on the capture device (with
/// autodiff on, as a training step runs), its float parameters as the first inputs, then the
/// arguments of structure `def` and signature `sigs`, with the default dtypes of `settings` (the
/// arguments' device's). The program's outputs are the flattened result of `loss`.
pub(crate) fn record_module_fn<M: Module, A: Tree, R: Tree>(
    transform: &'static str,
    module: &M,
    loss: &impl Fn(&M, A) -> R,
    def: &TreeDef,
    sigs: &[TensorSig],
    settings: burn_backend::DeviceSettings,
) -> Result<Recorded, VmapError> {
    // Burn's `RunningState` (BatchNorm's running statistics) is shared between a module and its
    // clones: moving the recorded clone to the capture device moves the user's statistics too
    // (and the user's model then panics: "Cannot move a tensor from a capture device"). Their
    // values are put back once the recording is made.
    let saved = Saved::of(module);
    let recorded = capture_with(transform, true, settings, |device| {
        // Burn refuses to move an autodiff tensor to a capture device: a module in training
        // mode (on an autodiff device, as an optimizer holds it) is recorded from its values.
        let recorded_module = without_autodiff(module).to_device(device);
        let params = param_tensors(&recorded_module);
        let args: Vec<_> = sigs.iter().map(|s| placeholder(s, device)).collect();
        let tree = A::unflatten_named(def, args.iter().cloned().map(Leaf).collect(), "args")?;
        let (outputs, out_def) = loss(&recorded_module, tree).flatten();
        let mut inputs: Vec<_> = params.into_iter().map(Leaf::into_dispatch).collect();
        inputs.extend(args);
        Ok(Recording {
            inputs,
            outputs: outputs.into_iter().map(Leaf::into_dispatch).collect(),
            extra: out_def,
        })
    });
    saved.restore(module);
    let (program, out_def) = recorded?;
    Ok(Recorded { program, out_def })
}

/// A module's float tensors by id (its parameters and running states), before recording.
struct Saved(Vec<(ParamId, Leaf)>);

impl Saved {
    fn of<M: Module>(module: &M) -> Self {
        let mut collect = Collect::default();
        module.visit(&mut collect);
        Self(collect.ids.into_iter().zip(collect.tensors).collect())
    }

    /// Writes the saved values back through a clone of `module`: a parameter of the clone is
    /// its own (the clone is dropped), a running state is the user's.
    fn restore<M: Module>(self, module: &M) {
        let _ = module.clone().map(&mut Restore(self.0));
    }
}

/// A clone of `module` with no tensor on an autodiff device (a capture device refuses them),
/// its parameters and flags (a `Dropout`'s training mode) as they are. Burn's mappers do not
/// reach a tensor field that is not a parameter (a `RotaryEncoding`'s frequencies, on an
/// autodiff device when the module is in training mode): `Module::valid` takes every tensor off
/// autodiff, and the float parameters and flags, which `valid` changes too, are put back from
/// the module's own, off autodiff.
fn without_autodiff<M: Module>(module: &M) -> M {
    let mut own = Own::default();
    module.visit(&mut own);
    module.valid().map(&mut own)
}

/// A module's float parameters (off autodiff) and flags by id, put back by [`without_autodiff`].
#[derive(Default)]
struct Own {
    params: Vec<(ParamId, Box<dyn std::any::Any>)>,
    flags: Vec<Param<Flag>>,
}

impl ModuleVisitor for Own {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let plain = param.clone().map(Tensor::without_autodiff);
        self.params.push((param.id, Box::new(plain)));
    }

    fn visit_flag(&mut self, flag: &Param<Flag>) {
        self.flags.push(flag.clone());
    }
}

impl ModuleMapper for Own {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let own = self.params.iter().position(|(id, _)| *id == param.id);
        match own.map(|i| self.params.swap_remove(i).1.downcast::<Param<Tensor<D>>>()) {
            Some(Ok(own)) => *own,
            _ => param,
        }
    }

    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        match self.flags.iter().position(|f| f.id == flag.id) {
            Some(i) => self.flags.swap_remove(i),
            None => flag,
        }
    }
}

/// Replaces each float tensor of a module with its saved value (by id).
struct Restore(Vec<(ParamId, Leaf)>);

impl ModuleMapper for Restore {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let saved = self.0.iter().find(|(id, _)| *id == param.id);
        let Some(value) = saved.and_then(|(_, t)| t.clone().into_tensor::<D, Float>().ok()) else {
            return param;
        };
        let (id, _, mapper) = param.consume();
        Param::from_mapped_value(id, value, mapper)
    }
}

#[cfg(test)]
mod tests {
    use burn::module::{Module, Param, ParamId};
    use burn::nn::{DropoutConfig, LinearConfig, RotaryEncodingConfig};
    use burn::tensor::{Bool, Device, Int, Tensor};

    use super::{constants, shows_tensor_field};

    #[derive(Module, Debug)]
    struct Flags {
        mask: Param<Tensor<1, Bool>>,
    }

    #[derive(Module, Debug)]
    struct Lookup {
        table: Param<Tensor<1, Int>>,
    }

    /// Burn's own renderings: float parameters and plain settings show no tensor that a
    /// recording takes as a constant; a tensor field and integer or boolean parameters do.
    #[test]
    fn should_tell_the_tensors_a_recording_takes_as_constants_from_burns_rendering() {
        let device = Device::default();
        let linear = LinearConfig::new(3, 2).init(&device);
        assert!(!shows_tensor_field(&constants(&linear)));
        assert!(!shows_tensor_field(&constants(
            &DropoutConfig::new(0.5).init()
        )));
        let rope = RotaryEncodingConfig::new(4, 2).init(&device);
        assert!(shows_tensor_field(&constants(&rope)));
        let mask = Flags {
            mask: Param::initialized(ParamId::new(), Tensor::from_data([true], &device)),
        };
        assert!(shows_tensor_field(&constants(&mask)));
        let table = Lookup {
            table: Param::initialized(ParamId::new(), Tensor::from_ints([1, 2], &device)),
        };
        assert!(shows_tensor_field(&constants(&table)));
    }
}
