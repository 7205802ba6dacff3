//! [`custom_vmap`]: a user-defined batching rule for a function, and [`sequential_vmap`], the
//! loop as that rule.

use burn_backend::backend::Backend;

use crate::VmapError;
use crate::batching::BatchOps;
use crate::level::{Level, PrivateLevel, is_private};
use crate::tensor::BatchDim;
use crate::transform::transform_call;
use crate::tree::{DynTree, Leaf, Spec, Tree, TreeDef, rows};

// =================================================================================================
// custom_vmap
// =================================================================================================

transform_call! {
    custom;
    /// Gives `f` a custom batching rule: JAX's `custom_vmap`.
    ///
    /// `custom_vmap(f, rule).call(args)` computes `f(args)`. When it is called under
    /// [`vmap`](crate::vmap) with some input batched, `f` is not batched op by op: the rule computes the
    /// whole batch at once. For the innermost vmap level at which any input is batched:
    ///
    /// ```text
    /// size       = batch size of that level
    /// in_batched = [leaf is batched at that level, for every input leaf]
    /// args       = the inputs, batched ones with that batch as logical axis 0
    /// out, out_batched = rule(size, in_batched, args)
    /// result     = out, the leaves declared batched re-batched from their axis 0
    /// ```
    ///
    /// so that `vmap(custom_vmap(f, rule))(xs) == stack([f(x) for x in xs])` exactly when the rule
    /// computes that stack. When no input is batched (no vmap, or only unrelated ones), `f` is
    /// called and the rule is not.
    ///
    /// The rule returns the outputs (any [`Tree`] with the structure of `f`'s result, such as the
    /// same type with one more axis, or a [`DynTree`]) and which of them are batched: a
    /// `Spec<bool>` prefix of the outputs, e.g. `true` for all. A batched output has the batch as
    /// its leading axis (size `size`); an unbatched one is the same for every example and has the
    /// shape of one example's output.
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
    /// On an autodiff backend (`Autodiff<Vmap<_>>`) the rule is differentiable like any code, and
    /// moving the batch in and out of axis 0 is too. So that gradients stay *per example* (an
    /// unbatched parameter used by every example gets one gradient per example, as with plain
    /// `vmap`, instead of their sum), every unbatched **float** input is handed to the rule
    /// broadcast along the batch and reported batched in `in_batched` when the backend is an
    /// autodiff backend: the rule then gives every example its own copy. Int and bool inputs, and
    /// every input on a non-autodiff backend, are reported as they are.
    ///
    /// # Example
    /// The `vector_dot` of JAX's proposal: one rule branch per batching pattern.
    /// ```
    /// use burn::tensor::Tensor;
    /// use burn_vmap::testing::TestBackend;
    /// use burn_vmap::transform::custom_vmap;
    /// use burn_vmap::tree::DynTree;
    /// use burn_vmap::{vmap, Vmap, VmapError};
    /// type B = Vmap<TestBackend>;
    /// let device = Default::default();
    ///
    /// let vector_dot = custom_vmap(
    ///     |(u, v): (Tensor<B, 1>, Tensor<B, 1>)| (u * v).sum(),
    ///     |_size, in_batched: &[bool], args: DynTree<B>| -> Result<(Tensor<B, 2>, bool), VmapError> {
    ///         let out = match in_batched {
    ///             [true, true] => {
    ///                 let (u, v): (Tensor<B, 2>, Tensor<B, 2>) = args.get()?;
    ///                 (u * v).sum_dim(1)
    ///             }
    ///             [true, false] => {
    ///                 let (u, v): (Tensor<B, 2>, Tensor<B, 1>) = args.get()?;
    ///                 u.matmul(v.unsqueeze_dim(1))
    ///             }
    ///             _ => {
    ///                 let (u, v): (Tensor<B, 1>, Tensor<B, 2>) = args.get()?;
    ///                 v.matmul(u.unsqueeze_dim(1))
    ///             }
    ///         };
    ///         Ok((out, true)) // (size, 1): one `[1]` result per example
    ///     },
    /// );
    ///
    /// let us = Tensor::<B, 2>::from_floats([[1.0, 0.0], [1.0, 1.0], [2.0, 3.0]], &device);
    /// let v = Tensor::<B, 1>::from_floats([10.0, 1.0], &device);
    /// let f = |(u, v): (Tensor<B, 1>, Tensor<B, 1>)| vector_dot.call((u, v)).unwrap().exp();
    /// let out: Tensor<B, 2> = vmap(f).in_axes([Some(0), None]).call((us, v.clone())).unwrap();
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
    /// From [`call`](CustomVmap::call), whatever the rule returns, and
    /// [`VmapError::InvalidRuleOutput`] when an output declared batched has no leading axis of the
    /// batch size, when the outputs do not fit the type of `f`'s result (e.g. an output declared
    /// unbatched that has the batch axis), or when an output is batched at the level the rule
    /// handles (a value captured from the enclosing vmap instead of passed as an input).
    pub fn custom_vmap<F, Rule>(f: F, rule: Rule) -> CustomVmap<F, Rule> {
        CustomVmap { f, rule }
    }
}

/// A function with a custom batching rule, made by [`custom_vmap`].
#[derive(Debug, Clone)]
pub struct CustomVmap<F, Rule> {
    f: F,
    rule: Rule,
}

impl<F, Rule> CustomVmap<F, Rule> {
    transform_call! {
        custom;
        /// Calls the function: `f(inputs)`, computed by the rule when an input is batched.
        ///
        /// # Errors
        /// See [`custom_vmap`].
        pub fn call(&self, inputs: A) -> Result<R, VmapError> {
            apply(inputs, &self.f, |size, in_batched, args, _level| {
                let (out, out_batched) = (self.rule)(size, in_batched, args)?;
                let (leaves, def) = out.flatten();
                Ok((leaves, def, out_batched.into()))
            })
        }
    }
}

/// What the internal form of a rule returns: output leaves, their structure, which are batched.
type RuleOut<B> = (Vec<Leaf<B>>, TreeDef, Spec<bool>);

/// The machinery shared by [`CustomVmap`] and [`SequentialVmap`]: find the level, move it to
/// axis 0, call the rule, check and re-batch its outputs.
fn apply<B, A, R>(
    inputs: A,
    f: impl FnOnce(A) -> R,
    rule: impl FnOnce(usize, &[bool], DynTree<B>, Level) -> Result<RuleOut<B>, VmapError>,
) -> Result<R, VmapError>
where
    B: BatchOps,
    A: Tree<B>,
    R: Tree<B>,
{
    let (leaves, def) = inputs.flatten();
    let top = leaves
        .iter()
        .flat_map(|l| l.batch_dims().as_slice().to_vec())
        .filter(|d| !is_private(d.level))
        .max_by_key(|d| d.level);
    let Some(BatchDim { level, size }) = top else {
        return Ok(f(A::unflatten_named(&def, leaves, "args")?));
    };
    let ad = leaves.first().is_some_and(|l| B::ad_enabled(&l.device()));
    let in_batched: Vec<bool> = leaves
        .iter()
        .map(|l| l.batch_dims().position(level).is_some() || (ad && matches!(l, Leaf::Float(_))))
        .collect();
    let leaves = leaves
        .into_iter()
        .zip(&in_batched)
        .map(|(l, &b)| if b { l.unbatch(level, size, 0) } else { l })
        .collect();
    let (out, out_def, out_batched) = rule(size, &in_batched, DynTree { leaves, def }, level)?;

    let flags = out_batched.broadcast_to(&out_def, "out_batched", "out")?;
    if out.len() != out_def.num_leaves() {
        return Err(VmapError::InvalidRuleOutput {
            output: "out".into(),
            why: format!(
                "the rule returned {} leaves for a structure of {}",
                out.len(),
                out_def.num_leaves()
            ),
        });
    }
    let paths = out_def.leaf_paths("out");
    let mut result = Vec::with_capacity(out.len());
    for ((leaf, batched), path) in out.into_iter().zip(flags).zip(paths) {
        let shape = leaf.shape().to_vec();
        if leaf.batch_dims().position(level).is_some() {
            return Err(VmapError::InvalidRuleOutput {
                output: path,
                why: format!(
                    "shape {shape:?} is batched at the vmap level the rule handles (size {size}): \
                     the rule used a value captured from the enclosing vmap; pass it as an input"
                ),
            });
        }
        if batched {
            if shape.first() != Some(&size) {
                return Err(VmapError::InvalidRuleOutput {
                    output: path,
                    why: format!(
                        "declared batched, so its leading axis must be the batch of size {size}, \
                         but its shape is {shape:?}"
                    ),
                });
            }
            result.push(leaf.batch(0, level));
        } else {
            result.push(leaf);
        }
    }
    R::unflatten_named(&out_def, result, "out").map_err(|e| match e {
        VmapError::LeafMismatch {
            path,
            expected_rank,
            got_rank,
            shape,
            ..
        } => VmapError::InvalidRuleOutput {
            output: path,
            why: format!(
                "the function returns a rank-{expected_rank} tensor here, but the rule's output \
                 has rank {got_rank} (shape {shape:?}, batch axis removed if declared batched, \
                 batch size {size}); an output declared unbatched must have the shape of one \
                 example's output, a batched one one more leading axis"
            ),
        },
        other => VmapError::InvalidRuleOutput {
            output: "out".into(),
            why: format!("the rule's output does not fit the function's output type: {other}"),
        },
    })
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
/// For functions without batching rules, or whose batched form would need too much memory.
/// Every level of nested vmaps runs as a loop (the loop calls the sequential function itself,
/// so the next enclosing level is looped over too). Differentiable like any code on an
/// autodiff backend; see [`custom_vmap`] for how per-example gradients are kept. A batch of
/// size 0 has no example to call `f` on: `f` is then batched by the ordinary rules.
///
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::transform::sequential_vmap;
/// use burn_vmap::{vmap, Vmap};
/// type B = Vmap<TestBackend>;
/// let device = Default::default();
///
/// let norm = sequential_vmap(|v: Tensor<B, 1>| (v.clone() * v).sum().sqrt());
/// let vs = Tensor::<B, 2>::from_floats([[3.0, 4.0], [6.0, 8.0]], &device);
/// let out: Tensor<B, 2> = vmap(|v| norm.call(v).unwrap()).call(vs).unwrap();
/// assert_eq!(out.into_data().to_vec::<f32>().unwrap(), vec![5.0, 10.0]);
/// ```
pub fn sequential_vmap<F>(f: F) -> SequentialVmap<F> {
    SequentialVmap { f }
}

/// A function batched by a loop, made by [`sequential_vmap`].
#[derive(Debug, Clone)]
pub struct SequentialVmap<F> {
    f: F,
}

impl<F> SequentialVmap<F> {
    /// Calls the function: `f(inputs)`, looped over the examples when an input is batched.
    ///
    /// # Errors
    /// [`VmapError::LeafMismatch`] and the other tree errors when `f`'s types do not fit.
    pub fn call<B, A, R>(&self, inputs: A) -> Result<R, VmapError>
    where
        B: BatchOps,
        A: Tree<B>,
        R: Tree<B>,
        F: Fn(A) -> R,
    {
        apply(inputs, &self.f, |size, in_batched, args, level| {
            let (leaves, def) = args.into_parts();
            if size == 0 {
                return self.batched::<B, A, R>(leaves, def, in_batched, level);
            }
            let private = PrivateLevel::new();
            let mut stacks: Vec<Vec<Leaf<B>>> = Vec::new();
            let mut out_def = None;
            for i in 0..size {
                let example = leaves
                    .iter()
                    .zip(in_batched)
                    .map(|(l, &b)| {
                        if b {
                            // Example `i`, keeping its axis (size 1).
                            l.clone().slice_axis(0, rows(i..i + 1)).batch(0, private.0)
                        } else {
                            l.clone()
                        }
                    })
                    .collect();
                let out: R = self.call(A::unflatten_named(&def, example, "args")?)?;
                let (out, d) = out.flatten();
                if stacks.is_empty() {
                    stacks = out.iter().map(|_| Vec::with_capacity(size)).collect();
                }
                for (stack, leaf) in stacks.iter_mut().zip(out) {
                    stack.push(leaf.unbatch(private.0, 1, 0));
                }
                out_def.get_or_insert(d);
            }
            let out_def = out_def.expect("size > 0: at least one example ran");
            let out = stacks
                .into_iter()
                .zip(out_def.leaf_paths("out"))
                .map(|(stack, path)| cat_leaves(stack, &path))
                .collect::<Result<_, _>>()?;
            Ok((out, out_def, Spec::Leaf(true)))
        })
    }

    /// An empty batch: `f` on the inputs batched at `level` again, by the ordinary rules.
    fn batched<B, A, R>(
        &self,
        leaves: Vec<Leaf<B>>,
        def: TreeDef,
        in_batched: &[bool],
        level: Level,
    ) -> Result<RuleOut<B>, VmapError>
    where
        B: BatchOps,
        A: Tree<B>,
        R: Tree<B>,
        F: Fn(A) -> R,
    {
        let leaves = leaves
            .into_iter()
            .zip(in_batched)
            .map(|(l, &b)| if b { l.batch(0, level) } else { l })
            .collect();
        let (out, out_def) = (self.f)(A::unflatten_named(&def, leaves, "args")?).flatten();
        let out = out.into_iter().map(|l| l.unbatch(level, 0, 0)).collect();
        Ok((out, out_def, Spec::Leaf(true)))
    }
}

/// Concatenates the examples' outputs at one output position along logical axis 0.
fn cat_leaves<B: Backend>(leaves: Vec<Leaf<B>>, path: &str) -> Result<Leaf<B>, VmapError> {
    let first = leaves[0].shape().to_vec();
    for (i, l) in leaves.iter().enumerate() {
        let shape = l.shape().to_vec();
        if l.kind_name() != leaves[0].kind_name() || shape[1..] != first[1..] {
            return Err(VmapError::InvalidRuleOutput {
                output: path.to_string(),
                why: format!(
                    "sequential_vmap: example {i} returned a {} tensor of shape {:?}, example 0 a \
                     {} tensor of shape {:?}; every example must return the same kind and shape",
                    l.kind_name(),
                    &shape[1..],
                    leaves[0].kind_name(),
                    &first[1..]
                ),
            });
        }
    }
    Ok(Leaf::cat(leaves, 0))
}
