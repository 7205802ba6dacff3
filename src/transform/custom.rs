//! [`custom_vmap`]: a user-defined batching rule for a function, and [`sequential_vmap`], the
//! loop as that rule.
//!
//! A custom function called on the user's tensors is just called. Called inside a function that
//! a transform records (its arguments are capture tensors), it records itself as **one**
//! custom operation (`graph/custom.rs`): its function recorded for one example, and a handler
//! that records the rule for each batching pattern met when the program runs batched. The rule
//! is user code over Burn tensors like the function, so it is recorded the same way, at the
//! batched signature, and its recording runs on the batching backend in place of the function.

use std::fmt;
use std::sync::{Arc, Mutex};

use burn_backend::{Shape, TensorMetadata};
use burn_dispatch::{Dispatch, DispatchTensor};

use crate::VmapError;
use crate::graph::{
    CustomHandler, Program, Recording, RuleProgram, TensorSig, capture, placeholder, record_call,
};
use crate::runtime::is_capture;
use crate::transform::run::{any_autodiff, record};
use crate::tree::{DynTree, Leaf, Spec, Tree, TreeDef};

/// A rule with its output types erased: outputs' leaves, their structure, which are batched.
type ErasedRule = dyn Fn(usize, &[bool], DynTree) -> Result<(Vec<Leaf>, TreeDef, Spec<bool>), VmapError>
    + Send
    + Sync;

// =================================================================================================
// custom_vmap
// =================================================================================================

/// Gives `f` a custom batching rule: JAX's `custom_vmap`. The rule is set with
/// [`def_vmap`](CustomVmap::def_vmap).
///
/// `custom_vmap(f).def_vmap(rule).call(args)` computes `f(args)`. When it is batched (called
/// inside a function under [`vmap`](crate::vmap), [`per_example_grads`](crate::per_example_grads)
/// or another vectorizing transform, with some input batched), `f` is not batched op by op: the
/// rule computes the whole batch at once. For the innermost vmap level at which an input is
/// batched:
///
/// ```text
/// size       = batch size of that level
/// in_batched = [leaf is batched at that level, for every input leaf]
/// args       = the inputs, batched ones with that batch as axis 0
/// out, out_batched = rule(size, in_batched, args)
/// result     = out, the leaves declared batched re-batched from their axis 0
/// ```
///
/// so that `vmap(custom_vmap(f).def_vmap(rule))(xs) == stack([f(x) for x in xs])` exactly when
/// the rule computes that stack. When no input is batched (a call on the user's tensors, or
/// under a vmap that maps only other arguments), `f` runs and the rule does not.
///
/// The rule returns the outputs (any [`Tree`] with the structure of `f`'s result, such as the
/// same type with one more axis, or a [`DynTree`]) and which of them are batched: a
/// `Spec<bool>` prefix of the outputs, e.g. `true` for all. A batched output has the batch as
/// its leading axis (size `size`); an unbatched one is the same for every example and has the
/// shape of one example's output.
///
/// # Recording
/// Like every transformed function, `f` and the rule are recorded (on Burn's capture device)
/// rather than run on the data: `f` once per argument signature, the rule once per batching
/// pattern (`size`, `in_batched`, shapes) when the batched program first meets it. So the rule
/// reads no tensor value, uses tensors only through `args`, and is `Send + Sync + 'static`
/// (it is kept with the recorded program): share state with it through an `Arc`.
///
/// # Nested vmaps
/// As in JAX, the rule handles **one** level: the innermost one at which an input is batched.
/// Inside the rule the inputs are still batched at every enclosing level (invisibly, as inside
/// any vmap), so the operations of the rule are batched for those levels by the ordinary
/// batching rules. A rule that wants its own treatment of the enclosing levels too calls a
/// custom-vmapped function inside (as [`sequential_vmap`] does: its loop calls itself, so every
/// level runs as a loop).
///
/// # Autodiff
/// Per-example gradients through the rule (it runs on `Autodiff<Vmap<_>>` under
/// [`per_example_grads`](crate::per_example_grads)) are differentiated like any code, and so is
/// moving the batch in and out of axis 0. So that gradients stay *per example* (an unbatched
/// parameter used by every example gets one gradient per example, as with plain `vmap`, instead
/// of their sum), every unbatched **float** input is handed to the rule broadcast along the
/// batch and reported batched in `in_batched` when the batched program is differentiated: the
/// rule then gives every example its own copy. Int and bool inputs, and every input of a
/// program that is not differentiated, are reported as they are.
///
/// # Example
/// The `vector_dot` of JAX's proposal: one rule branch per batching pattern.
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::custom_vmap;
/// use burn_vmap::tree::DynTree;
/// use burn_vmap::{vmap, VmapError};
/// let device = Device::default();
///
/// let vector_dot = custom_vmap(|(u, v): (Tensor<1>, Tensor<1>)| (u * v).sum()).def_vmap(
///     |_size, in_batched: &[bool], args: DynTree| -> Result<(Tensor<2>, bool), VmapError> {
///         let out = match in_batched {
///             [true, true] => {
///                 let (u, v): (Tensor<2>, Tensor<2>) = args.get()?;
///                 (u * v).sum_dim(1)
///             }
///             [true, false] => {
///                 let (u, v): (Tensor<2>, Tensor<1>) = args.get()?;
///                 u.matmul(v.unsqueeze_dim(1))
///             }
///             _ => {
///                 let (u, v): (Tensor<1>, Tensor<2>) = args.get()?;
///                 v.matmul(u.unsqueeze_dim(1))
///             }
///         };
///         Ok((out, true)) // (size, 1): one `[1]` result per example
///     },
/// );
///
/// let us = Tensor::<2>::from_floats([[1.0, 0.0], [1.0, 1.0], [2.0, 3.0]], &device);
/// let v = Tensor::<1>::from_floats([10.0, 1.0], &device);
/// let f = |(u, v): (Tensor<1>, Tensor<1>)| vector_dot.call((u, v)).unwrap().exp();
/// let out: Tensor<2> = vmap(f).in_axes([Some(0), None]).call((us, v.clone())).unwrap();
/// let expected = [10.0f32, 11.0, 23.0].map(f32::exp);
/// let got = out.into_data().to_vec::<f32>().unwrap();
/// assert!(got.iter().zip(expected).all(|(g, e)| (g - e).abs() <= 1e-4 * e));
///
/// // Not batched: `f` itself runs.
/// let one = vector_dot.call((v.clone(), v)).unwrap();
/// assert_eq!(one.into_data().to_vec::<f32>().unwrap(), vec![101.0]);
/// ```
///
/// # Errors
/// The call of a function being recorded records; the errors of the batched call come from
/// the transform that runs it: whatever the rule returns, the recording errors of
/// [`vmap`](crate::vmap) for the rule (with this transform's name), and
/// [`VmapError::InvalidRuleOutput`] when an output declared batched has no leading axis of the
/// batch size, or when the outputs do not fit `f`'s result (another structure, or an output
/// declared unbatched that has the batch axis).
pub fn custom_vmap<F>(f: F) -> CustomVmap<F> {
    CustomVmap {
        f,
        rule: Arc::new(NoRule),
        handlers: Handlers::default(),
    }
}

/// A function with a custom batching rule, made by [`custom_vmap`] and
/// [`def_vmap`](CustomVmap::def_vmap).
#[derive(Debug, Clone)]
pub struct CustomVmap<F, Rule = NoRule> {
    f: F,
    rule: Arc<Rule>,
    handlers: Handlers,
}

/// The rule of a [`custom_vmap`] before [`def_vmap`](CustomVmap::def_vmap) sets one.
#[derive(Debug, Clone, Copy)]
pub struct NoRule;

impl<F> CustomVmap<F, NoRule> {
    /// Sets the batching rule: `rule(size, in_batched, args) -> Ok((outputs, out_batched))` (see
    /// [`custom_vmap`]).
    pub fn def_vmap<Rule>(self, rule: Rule) -> CustomVmap<F, Rule> {
        CustomVmap {
            f: self.f,
            rule: Arc::new(rule),
            handlers: Handlers::default(),
        }
    }
}

impl<F, Rule> CustomVmap<F, Rule> {
    /// Calls the function: `f(inputs)`, computed by the rule when an input is batched.
    ///
    /// `A` is what `f` takes, `R` what it returns; `RO` and `OB` what the rule returns (its
    /// outputs, and which of them are batched).
    ///
    /// # Errors
    /// See [`custom_vmap`]; the tree errors of `A` and `R`.
    pub fn call<A, R, RO, OB>(&self, inputs: A) -> Result<R, VmapError>
    where
        F: Fn(A) -> R,
        A: Tree,
        R: Tree,
        Rule: Fn(usize, &[bool], DynTree) -> Result<(RO, OB), VmapError> + Send + Sync + 'static,
        RO: Tree + 'static,
        OB: Into<Spec<bool>> + 'static,
    {
        let rule = self.rule.clone();
        call_custom("custom_vmap", &self.f, &self.handlers, inputs, move || {
            Arc::new(move |size, in_batched: &[bool], args| {
                let (out, out_batched) = rule(size, in_batched, args)?;
                let (leaves, def) = out.flatten();
                Ok((leaves, def, out_batched.into()))
            })
        })
    }
}

/// Calls `f` on `inputs`, or records the call as a custom operation when the inputs are being
/// recorded (its handler made once per signature, with the rule `rule` makes).
fn call_custom<A: Tree, R: Tree>(
    transform: &'static str,
    f: &impl Fn(A) -> R,
    handlers: &Handlers,
    inputs: A,
    rule: impl FnOnce() -> Arc<ErasedRule>,
) -> Result<R, VmapError> {
    let (leaves, def) = inputs.flatten();
    if !leaves.iter().any(|l| is_capture(&l.device())) {
        return Ok(f(A::unflatten_named(&def, leaves, "args")?));
    }
    let sigs: Vec<TensorSig> = leaves
        .iter()
        .map(|l| TensorSig {
            shape: l.shape(),
            dtype: l.dtype(),
        })
        .collect();
    let autodiff = any_autodiff(&leaves);
    let handler = handlers.get_or_make(&def, &sigs, autodiff, || {
        Handler::new(transform, f, &def, &sigs, autodiff, rule())
    })?;
    let inputs = leaves.into_iter().map(Leaf::into_dispatch).collect();
    let outputs = record_call(transform, inputs, handler.clone())?;
    R::unflatten_named(
        &handler.out_def,
        outputs.into_iter().map(Leaf).collect(),
        "out",
    )
}

// =================================================================================================
// The handler of a recorded call
// =================================================================================================

/// A custom function recorded for one signature: its program, and its rule recorded per
/// batching pattern.
struct Handler {
    transform: &'static str,
    program: Program,
    out_def: TreeDef,
    in_def: TreeDef,
    rule: Arc<ErasedRule>,
    rules: Mutex<Vec<(RuleKey, Arc<RuleProgram>)>>,
}

#[derive(Debug, PartialEq)]
struct RuleKey {
    size: usize,
    in_batched: Vec<bool>,
    sigs: Vec<TensorSig>,
    autodiff: bool,
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handler")
            .field("transform", &self.transform)
            .field("program", &self.program)
            .field("out_def", &self.out_def)
            .finish_non_exhaustive()
    }
}

impl CustomHandler for Handler {
    fn transform(&self) -> &'static str {
        self.transform
    }

    fn program(&self) -> &Program {
        &self.program
    }

    fn rule(
        &self,
        size: usize,
        in_batched: &[bool],
        sigs: &[TensorSig],
        autodiff: bool,
    ) -> Result<Arc<RuleProgram>, VmapError> {
        let key = RuleKey {
            size,
            in_batched: in_batched.to_vec(),
            sigs: sigs.to_vec(),
            autodiff,
        };
        let rules = || self.rules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = rules().iter().find(|(k, _)| *k == key) {
            return Ok(r.clone());
        }
        let (program, (out_batched, out_paths)) = capture(self.transform, autodiff, |device| {
            let inputs: Vec<DispatchTensor> = sigs.iter().map(|s| placeholder(s, device)).collect();
            let args = DynTree {
                leaves: inputs.iter().cloned().map(Leaf).collect(),
                def: self.in_def.clone(),
            };
            let (outputs, out_def, out_batched) = (self.rule)(size, in_batched, args)?;
            self.check_structure(&outputs, &out_def)?;
            let flags = out_batched.broadcast_to(&out_def, "out_batched", "out")?;
            Ok(Recording {
                inputs,
                outputs: outputs.into_iter().map(Leaf::into_dispatch).collect(),
                extra: (flags, out_def.leaf_paths("out")),
            })
        })?;
        let recorded = Arc::new(RuleProgram {
            program,
            out_batched,
            out_paths,
        });
        rules().push((key, recorded.clone()));
        Ok(recorded)
    }
}

impl Handler {
    /// `f` recorded for arguments of structure `def` and signature `sigs`, with `rule`.
    fn new<A: Tree, R: Tree>(
        transform: &'static str,
        f: &impl Fn(A) -> R,
        def: &TreeDef,
        sigs: &[TensorSig],
        autodiff: bool,
        rule: Arc<ErasedRule>,
    ) -> Result<Self, VmapError> {
        let recorded = record::<A, R>(transform, f, def, sigs, autodiff)?;
        Ok(Handler {
            transform,
            program: recorded.program,
            out_def: recorded.out_def,
            in_def: def.clone(),
            rule,
            rules: Mutex::default(),
        })
    }

    /// Checks that the rule's outputs have the structure of the function's.
    fn check_structure(&self, outputs: &[Leaf], def: &TreeDef) -> Result<(), VmapError> {
        if outputs.len() != def.num_leaves() {
            return Err(VmapError::InvalidRuleOutput {
                output: "out".into(),
                why: format!(
                    "the rule returned {} leaves for a structure of {}",
                    outputs.len(),
                    def.num_leaves()
                ),
            });
        }
        self.out_def
            .check_same(def, "the rule's output", "out")
            .map_err(|e| VmapError::InvalidRuleOutput {
                output: "out".into(),
                why: format!("the rule's output does not fit the function's output type: {e}"),
            })
    }
}

/// The handlers of a custom function, by argument structure, per-example signature and
/// autodiff mode (shared by the clones of the function).
#[derive(Clone, Default)]
struct Handlers(Arc<Mutex<Vec<HandlerEntry>>>);

/// One handler with what identifies it.
type HandlerEntry = (TreeDef, Vec<TensorSig>, bool, Arc<Handler>);

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Handlers")
    }
}

impl Handlers {
    /// The handler for this signature, made by `make` on a miss.
    fn get_or_make(
        &self,
        def: &TreeDef,
        sigs: &[TensorSig],
        autodiff: bool,
        make: impl FnOnce() -> Result<Handler, VmapError>,
    ) -> Result<Arc<Handler>, VmapError> {
        let lock = || self.0.lock().unwrap_or_else(|e| e.into_inner());
        let hit =
            |(d, s, a, _): &&HandlerEntry| *a == autodiff && s == sigs && d.same_structure(def);
        if let Some((.., h)) = lock().iter().find(hit) {
            return Ok(h.clone());
        }
        let handler = Arc::new(make()?);
        lock().push((def.clone(), sigs.to_vec(), autodiff, handler.clone()));
        Ok(handler)
    }
}

// =================================================================================================
// sequential_vmap
// =================================================================================================

/// `f` batched by a loop over the examples: JAX's `sequential_vmap`, a [`custom_vmap`] whose
/// rule is
///
/// ```text
/// rule(size, in_batched, args):
///     out[i] = f(args with every batched input replaced by its example i)   for i in 0..size
///     return stack(out), all batched
/// ```
///
/// For functions without batching rules, or whose batched form would need too much memory: the
/// batched program computes one example after the other. Every level of nested vmaps runs as a
/// loop (the loop calls the sequential function itself, so the next enclosing level is looped
/// over too). Differentiable like any code; see [`custom_vmap`] for how per-example gradients
/// are kept. `f` is recorded once per argument signature (see [`custom_vmap`]'s "Recording");
/// the loop is recorded once per batch size, and runs `f`'s recording once per example.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::transform::sequential_vmap;
/// use burn_vmap::vmap;
/// let device = Device::default();
///
/// let norm = sequential_vmap(|v: Tensor<1>| (v.clone() * v).sum().sqrt());
/// let vs = Tensor::<2>::from_floats([[3.0, 4.0], [6.0, 8.0]], &device);
/// let out: Tensor<2> = vmap(|v| norm.call(v).unwrap()).call(vs).unwrap();
/// assert_eq!(out.into_data().to_vec::<f32>().unwrap(), vec![5.0, 10.0]);
/// ```
pub fn sequential_vmap<F>(f: F) -> SequentialVmap<F> {
    SequentialVmap {
        inner: Arc::new(Sequential {
            f,
            handlers: Handlers::default(),
        }),
    }
}

/// A function batched by a loop, made by [`sequential_vmap`].
#[derive(Debug)]
pub struct SequentialVmap<F> {
    inner: Arc<Sequential<F>>,
}

impl<F> Clone for SequentialVmap<F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Sequential<F> {
    f: F,
    handlers: Handlers,
}

impl<F> SequentialVmap<F> {
    /// Calls the function: `f(inputs)`, looped over the examples when an input is batched.
    ///
    /// # Errors
    /// [`VmapError::LeafMismatch`] and the other tree errors when `f`'s types do not fit, and
    /// the recording errors (see [`custom_vmap`]).
    pub fn call<A, R>(&self, inputs: A) -> Result<R, VmapError>
    where
        F: Fn(A) -> R + Send + Sync + 'static,
        A: Tree + 'static,
        R: Tree + 'static,
    {
        sequential_call(&self.inner, inputs)
    }
}

fn sequential_call<F, A, R>(this: &Arc<Sequential<F>>, inputs: A) -> Result<R, VmapError>
where
    F: Fn(A) -> R + Send + Sync + 'static,
    A: Tree + 'static,
    R: Tree + 'static,
{
    call_custom("sequential_vmap", &this.f, &this.handlers, inputs, || {
        loop_rule::<F, A, R>(this)
    })
}

/// The loop as an erased rule.
fn loop_rule<F, A, R>(this: &Arc<Sequential<F>>) -> Arc<ErasedRule>
where
    F: Fn(A) -> R + Send + Sync + 'static,
    A: Tree + 'static,
    R: Tree + 'static,
{
    let this = this.clone();
    Arc::new(move |size, in_batched: &[bool], args| {
        sequential_rule::<F, A, R>(&this, size, in_batched, args)
    })
}

/// The loop: `f` on every example, through the sequential function (so that an enclosing level
/// at which an example is still batched loops too), stacked.
fn sequential_rule<F, A, R>(
    this: &Arc<Sequential<F>>,
    size: usize,
    in_batched: &[bool],
    args: DynTree,
) -> Result<(Vec<Leaf>, TreeDef, Spec<bool>), VmapError>
where
    F: Fn(A) -> R + Send + Sync + 'static,
    A: Tree + 'static,
    R: Tree + 'static,
{
    let (leaves, def) = args.into_parts();
    if size == 0 {
        return empty_batch::<F, A, R>(this, in_batched, &leaves, &def);
    }
    let mut columns: Vec<Vec<Leaf>> = Vec::new();
    let mut out_def = None;
    for i in 0..size {
        let example = leaves
            .iter()
            .zip(in_batched)
            .map(|(l, &b)| if b { l.index(0, i) } else { l.clone() })
            .collect();
        let out: R = sequential_call(this, A::unflatten_named(&def, example, "args")?)?;
        let (out, d) = out.flatten();
        if columns.is_empty() {
            columns = out.iter().map(|_| Vec::with_capacity(size)).collect();
        }
        for (column, leaf) in columns.iter_mut().zip(out) {
            column.push(leaf);
        }
        out_def.get_or_insert(d);
    }
    let out = columns.into_iter().map(|c| Leaf::stack(c, 0)).collect();
    Ok((out, out_def.expect("size > 0"), Spec::Leaf(true)))
}

/// A batch of no example: outputs with a zero-length batch axis, shaped from `f`'s recording.
fn empty_batch<F, A, R>(
    this: &Arc<Sequential<F>>,
    in_batched: &[bool],
    leaves: &[Leaf],
    def: &TreeDef,
) -> Result<(Vec<Leaf>, TreeDef, Spec<bool>), VmapError>
where
    F: Fn(A) -> R + Send + Sync + 'static,
    A: Tree + 'static,
    R: Tree + 'static,
{
    let sigs: Vec<TensorSig> = leaves
        .iter()
        .zip(in_batched)
        .map(|(l, &b)| {
            let dims = l.shape().to_vec();
            TensorSig {
                shape: Shape::from(if b { dims[1..].to_vec() } else { dims }),
                dtype: l.dtype(),
            }
        })
        .collect();
    let autodiff = any_autodiff(leaves);
    let handler = this.handlers.get_or_make(def, &sigs, autodiff, || {
        Handler::new(
            "sequential_vmap",
            &this.f,
            def,
            &sigs,
            autodiff,
            loop_rule(this),
        )
    })?;
    let device = leaves[0].clone().into_dispatch().device();
    let out = handler
        .program
        .output_sigs()
        .map(|sig| {
            let mut shape = sig.shape;
            shape.insert(0, 0);
            Leaf(zeros(shape, sig.dtype, &device))
        })
        .collect();
    Ok((out, handler.out_def.clone(), Spec::Leaf(true)))
}

fn zeros(
    shape: Shape,
    dtype: burn_backend::DType,
    device: &burn_dispatch::DispatchDevice,
) -> DispatchTensor {
    use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
    if dtype.is_float() {
        Dispatch::float_zeros(shape, device, dtype.into())
    } else if dtype.is_bool() {
        Dispatch::bool_zeros(shape, device, dtype.into())
    } else {
        Dispatch::int_zeros(shape, device, dtype.into())
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Tensor;
    use burn_ir::OperationIr;

    use super::*;
    use crate::transform::vmap;

    /// `vmap(inner vmap(seq))` recorded: the inner vmap's loop leaves the calls of the
    /// sequential function as custom operations of the outer recording (so that the outer
    /// level loops too), instead of inlining the function's operations.
    #[test]
    fn should_leave_an_unbatched_call_to_the_enclosing_recording() {
        let seq = sequential_vmap(|(m, v): (Tensor<2>, Tensor<1>)| {
            m.matmul(v.unsqueeze_dim(1)).squeeze_dim::<1>(1)
        });
        let outer = |(m, vs): (Tensor<2>, Tensor<2>)| -> Tensor<2> {
            vmap(|a| seq.call(a).unwrap())
                .in_axes([None, Some(0)])
                .call((m, vs))
                .unwrap()
        };
        let sigs = [[2, 3], [4, 3]].map(|s| TensorSig {
            shape: Shape::from(s.to_vec()),
            dtype: burn_backend::DType::F32,
        });
        let (_, def) = (
            Tensor::<2>::zeros([2, 3], &Default::default()),
            Tensor::<2>::zeros([4, 3], &Default::default()),
        )
            .flatten();
        let recorded =
            record::<(Tensor<2>, Tensor<2>), Tensor<2>>("test", &outer, &def, &sigs, false)
                .unwrap();
        let customs = recorded
            .program
            .ops()
            .iter()
            .filter(|op| matches!(op, OperationIr::Custom(_)))
            .count();
        // The inner loop over 4 examples: one call per example.
        assert_eq!(customs, 4);
    }
}
