//! Between the user's tensors and the engine: recording a function for one example (with a
//! cache keyed by its signature), and running the recorded program batched on `Vmap<B>`.
//!
//! ```text
//! call(inputs)
//!   flatten; check in_axes                        transform/axes.rs
//!   signature of one example (mapped axes removed)
//!   cache hit, or record f on the capture device  graph/capture.rs
//!   on the backend behind the inputs' device:     runtime.rs
//!     lift every input into Vmap<B>, batch the mapped ones at a fresh level
//!     run the program                             graph/program.rs (each op: a batching rule)
//!     unbatch every output at its out_axes, lower it back to B
//!   unflatten into the result type
//! ```

use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use burn_backend::Shape;

use crate::Vmap;
use crate::VmapError;
use crate::batching::BatchOps;
use crate::graph::{Program, Recording, TensorSig, capture_with, placeholder};
use crate::guard;
use crate::level::{Level, Randomness, VmapScope};
use crate::runtime::{Job, UserBackend, on_backend};
use crate::tree::{Leaf, Tree, TreeDef};
use crate::value::Value;

/// A function recorded for one signature: the program and the structure of its output.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub(crate) program: Program,
    pub(crate) out_def: TreeDef,
}

/// The signature of one example of flattened arguments: each leaf's shape without its mapped
/// axis, and its dtype.
pub(crate) fn example_sigs(leaves: &[Leaf], axes: &[Option<usize>]) -> Vec<TensorSig> {
    leaves
        .iter()
        .zip(axes)
        .map(|(leaf, axis)| {
            let mut dims = leaf.shape().to_vec();
            if let Some(a) = axis {
                dims.remove(*a);
            }
            TensorSig {
                shape: Shape::from(dims),
                dtype: leaf.dtype(),
            }
        })
        .collect()
}

/// The device every leaf is on.
///
/// # Errors
/// [`VmapError::Device`] when the leaves are on different devices, or there is none.
pub(crate) fn common_device(transform: &'static str, leaves: &[Leaf]) -> Result<Device, VmapError> {
    let Some(first) = leaves.first() else {
        return Err(VmapError::Device {
            transform,
            why: "the arguments hold no tensor, so there is no device to run on".into(),
        });
    };
    let device = first.device();
    if let Some(other) = leaves.iter().find(|l| l.device() != device) {
        return Err(VmapError::Device {
            transform,
            why: format!(
                "the arguments are on different devices ({device:?} and {:?}); move them to one",
                other.device()
            ),
        });
    }
    Ok(device)
}

/// Whether any leaf is on an autodiff device (the function is then recorded as a training step
/// records: `Dropout` in training mode draws its mask).
pub(crate) fn any_autodiff(leaves: &[Leaf]) -> bool {
    leaves.iter().any(|l| l.device().is_autodiff())
}

/// Records `f` for arguments of structure `def` and signature `sigs`, with the default dtypes of
/// the default device (see [`record_on`]).
pub(crate) fn record<A: Tree, R: Tree>(
    transform: &'static str,
    f: &impl Fn(A) -> R,
    def: &TreeDef,
    sigs: &[TensorSig],
    autodiff: bool,
) -> Result<Recorded, VmapError> {
    record_on(transform, f, def, sigs, autodiff, &Device::default())
}

/// Records `f` for arguments of structure `def` and signature `sigs`, with the default dtypes of
/// the arguments' `device`: a tensor `f` creates gets the dtype it gets there.
pub(crate) fn record_on<A: Tree, R: Tree>(
    transform: &'static str,
    f: &impl Fn(A) -> R,
    def: &TreeDef,
    sigs: &[TensorSig],
    autodiff: bool,
    device: &Device,
) -> Result<Recorded, VmapError> {
    let (program, out_def) = capture_with(transform, autodiff, device.settings(), |device| {
        let inputs: Vec<_> = sigs.iter().map(|s| placeholder(s, device)).collect();
        let leaves = inputs.iter().cloned().map(Leaf).collect();
        let args = A::unflatten_named(def, leaves, "args")?;
        let (outputs, out_def) = f(args).flatten();
        Ok(Recording {
            inputs,
            outputs: outputs.into_iter().map(Leaf::into_dispatch).collect(),
            extra: out_def,
        })
    })?;
    Ok(Recorded { program, out_def })
}

/// Recorded programs by signature: a transform records its function once per argument
/// structure, per-example shapes and dtypes (never per batch size), and autodiff mode (and,
/// for a module, its parameters and constants: `module::ModuleKey`).
///
/// Like `jax.jit`, the recording assumes the function depends only on its arguments: state it
/// reads through a `Cell` or a global is read once, when it is recorded.
///
/// At most [`Cache::CAPACITY`] recordings are kept, the least recently used dropped first: a
/// key that changes every epoch (a dropout schedule) records again instead of growing the cache
/// without bound.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cache {
    entries: Arc<Mutex<Vec<Entry>>>,
}

/// A recording and what it was made for.
type Entry = (Key, Arc<Recorded>);

#[derive(Debug)]
struct Key {
    def: TreeDef,
    sigs: Vec<TensorSig>,
    autodiff: bool,
}

impl Cache {
    /// The most recordings kept.
    pub(crate) const CAPACITY: usize = 8;

    /// The recording for this signature, made by `record` on a miss.
    pub(crate) fn get_or_record(
        &self,
        def: &TreeDef,
        sigs: &[TensorSig],
        autodiff: bool,
        record: impl FnOnce() -> Result<Recorded, VmapError>,
    ) -> Result<Arc<Recorded>, VmapError> {
        let hit = |k: &Key| k.autodiff == autodiff && k.sigs == sigs && k.def.same_structure(def);
        {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = entries.iter().position(|(k, _)| hit(k)) {
                // The most recently used last.
                let last = entries.len() - 1;
                if i != last {
                    let entry = entries.remove(i);
                    entries.push(entry);
                }
                return Ok(entries[last].1.clone());
            }
        }
        let recorded = Arc::new(record()?);
        let key = Key {
            def: def.clone(),
            sigs: sigs.to_vec(),
            autodiff,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= Self::CAPACITY {
            entries.remove(0);
        }
        entries.push((key, recorded.clone()));
        Ok(recorded)
    }
}

/// A recorded program run batched: mapped inputs batched at a fresh level along their axis,
/// the others shared by every example, outputs unbatched at their `out_axes` (`None`: the output
/// must not vary across the batch).
pub(crate) struct Batched<'a> {
    pub(crate) transform: &'static str,
    pub(crate) program: &'a Program,
    pub(crate) leaves: Vec<Leaf>,
    pub(crate) axes: Vec<Option<usize>>,
    pub(crate) size: usize,
    pub(crate) out_axes: Vec<Option<usize>>,
    pub(crate) out_paths: Vec<String>,
    pub(crate) randomness: Randomness,
}

impl Batched<'_> {
    /// Runs on the backend of `device`.
    pub(crate) fn run_on(self, device: &Device) -> Result<Vec<Leaf>, VmapError> {
        let transform = self.transform;
        on_backend(transform, device, self)?
    }
}

impl Job for Batched<'_> {
    type Output = Result<Vec<Leaf>, VmapError>;

    fn run<B: UserBackend>(self, device: B::Device) -> Self::Output {
        let transform = self.transform;
        let level = Level::fresh();
        let mut inputs = Vec::with_capacity(self.leaves.len());
        for (leaf, axis) in self.leaves.into_iter().zip(&self.axes) {
            let value = lift::<B>(transform, leaf)?;
            inputs.push(match axis {
                Some(a) => batch::<Vmap<B>>(value, *a, level),
                None => value,
            });
        }
        let scope = VmapScope::enter(level, self.size, self.randomness);
        let outputs = guard::catch(|| self.program.run::<Vmap<B>>(inputs, &device))
            .map_err(|message| VmapError::Op { transform, message })??;
        if let Some(refused) = scope.take_refused() {
            return Err(VmapError::Randomness {
                transform,
                op: refused.op.into(),
                size: refused.size,
            });
        }
        drop(scope);
        let mut result = Vec::with_capacity(outputs.len());
        for ((out, axis), path) in outputs.into_iter().zip(&self.out_axes).zip(&self.out_paths) {
            let out = match axis {
                Some(a) => guard::catch(|| unbatch::<Vmap<B>>(out, level, self.size, *a))
                    .map_err(|message| VmapError::Op { transform, message })?,
                None if is_batched_at::<Vmap<B>>(&out, level) => {
                    return Err(VmapError::TreeMismatch {
                        what: "out_axes".into(),
                        path: path.clone(),
                        why: "the output varies across the batch but its out_axes entry is None"
                            .into(),
                    });
                }
                None => out,
            };
            result.push(Leaf(B::tensor(lower::<B>(out))));
        }
        Ok(result)
    }
}

/// A user's tensor as an (unbatched) tensor of `Vmap<B>`.
///
/// A rank-0 tensor is held as `[1]` marked rank 0, the engine's layout of every logical rank-0
/// tensor (`[batch sizes.., 1]`, see [`VmapTensor::from_physical_scalar`]): held as `[]`, an
/// unmapped rank-0 argument would meet a batched rank-0 tensor with one physical dim too few
/// (the binary rules align it to `[1]` against `[batch, 1]`, giving a rank-1 result, or a rank
/// mismatch on backends that do not broadcast across ranks, such as capture).
pub(crate) fn lift<B: UserBackend>(
    transform: &'static str,
    leaf: Leaf,
) -> Result<Value<Vmap<B>>, VmapError> {
    let value = B::value(leaf.into_dispatch()).map_err(|why| VmapError::Device {
        transform,
        why: format!("an argument is not on the backend of the others: {why}"),
    })?;
    Ok(match value {
        Value::Float(t) => Value::Float(crate::ops::from_inner(t, B::float_reshape)),
        Value::Int(t) => Value::Int(crate::ops::from_inner(t, B::int_reshape)),
        Value::Bool(t) => Value::Bool(crate::ops::from_inner(t, B::bool_reshape)),
    })
}

/// An unbatched tensor of `Vmap<B>` as a tensor of `B` (a lazy form computed).
///
/// # Panics
/// If the tensor is still batched (an internal error: outputs are unbatched first).
pub(crate) fn lower<B: UserBackend>(value: Value<Vmap<B>>) -> Value<B> {
    match value {
        Value::Float(t) => Value::Float(crate::ops::into_unbatched(t, B::float_reshape)),
        Value::Int(t) => Value::Int(crate::ops::into_unbatched(t, B::int_reshape)),
        Value::Bool(t) => Value::Bool(crate::ops::into_unbatched(t, B::bool_reshape)),
    }
}

/// Batches logical `axis` of a value at `level`.
pub(crate) fn batch<V: BatchOps>(value: Value<V>, axis: usize, level: Level) -> Value<V> {
    match value {
        Value::Float(t) => Value::Float(V::float_batch(t, axis, level)),
        Value::Int(t) => Value::Int(V::int_batch(t, axis, level)),
        Value::Bool(t) => Value::Bool(V::bool_batch(t, axis, level)),
    }
}

/// Unbatches `level` of a value into logical `axis` (broadcasting an unbatched value).
pub(crate) fn unbatch<V: BatchOps>(
    value: Value<V>,
    level: Level,
    size: usize,
    axis: usize,
) -> Value<V> {
    match value {
        Value::Float(t) => Value::Float(V::float_unbatch(t, level, size, axis)),
        Value::Int(t) => Value::Int(V::int_unbatch(t, level, size, axis)),
        Value::Bool(t) => Value::Bool(V::bool_unbatch(t, level, size, axis)),
    }
}

/// Whether a value is batched at `level`.
pub(crate) fn is_batched_at<V: BatchOps>(value: &Value<V>, level: Level) -> bool {
    let dims = match value {
        Value::Float(t) => V::float_batch_dims(t),
        Value::Int(t) => V::int_batch_dims(t),
        Value::Bool(t) => V::bool_batch_dims(t),
    };
    dims.position(level).is_some()
}
