//! Errors of the public transforms.

use thiserror::Error;

/// An error from a transform (`vmap`, and the transforms built on it).
///
/// Every message names the offending argument (by its path in the argument tree, such as
/// `args[1]` or `args[0].weight`) and the sizes involved.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum VmapError {
    /// The mapped axes of the batched arguments differ in size.
    #[error("{transform}: inconsistent batch sizes: {}; every mapped axis must have the same size", fmt_sizes(.arguments))]
    InconsistentBatchSizes {
        /// The transform (`vmap`, `per_example_grads`, ...).
        transform: &'static str,
        /// `(argument path, size of its mapped axis)` for every mapped argument.
        arguments: Vec<(String, usize)>,
    },
    /// A mapped axis is outside the argument's rank (`in_axes`) or the result's (`out_axes`).
    #[error("{}", fmt_axis(.spec, .argument, *.axis, *.rank, .shape))]
    AxisOutOfRange {
        /// The specification the axis comes from: `in_axes` or `out_axes`.
        spec: &'static str,
        /// The argument (or output) path.
        argument: String,
        /// The axis as given (may be negative).
        axis: isize,
        /// The rank the axis indexes: the argument's (`in_axes`), or the batched result's, one
        /// more than the function's output (`out_axes`).
        rank: usize,
        /// The argument's shape (`in_axes`), or the function's output shape for one example
        /// (`out_axes`).
        shape: Vec<usize>,
    },
    /// No argument is mapped.
    #[error(
        "{transform}: no argument is mapped: every in_axes entry is None; map at least one argument"
    )]
    NothingMapped {
        /// The transform.
        transform: &'static str,
    },
    /// An axis specification does not match the structure of the arguments or outputs.
    #[error("{what} does not match the tree at {path}: {why}")]
    TreeMismatch {
        /// Which specification (`in_axes`, `out_axes`, `accumulator`, ...).
        what: String,
        /// Path in the tree.
        path: String,
        /// What differs.
        why: String,
    },
    /// A leaf's rank does not match the tensor type it is rebuilt into.
    #[error(
        "{path}: expected a {expected} tensor of rank {expected_rank}, got a {got} tensor of rank {got_rank} (shape {shape:?}); \
             a mapped axis is removed from the function's view of its argument"
    )]
    LeafMismatch {
        /// Path of the leaf.
        path: String,
        /// Expected kind (`float`, `int`, `bool`).
        expected: &'static str,
        /// Expected rank.
        expected_rank: usize,
        /// Actual kind.
        got: &'static str,
        /// Actual rank.
        got_rank: usize,
        /// Actual (logical) shape.
        shape: Vec<usize>,
    },
    /// A tree has fewer or more leaves than the type it is rebuilt into.
    #[error("{path}: the tree has {got} leaves where {expected} were expected")]
    LeafCount {
        /// Path in the tree.
        path: String,
        /// Expected number of leaves.
        expected: usize,
        /// Actual number.
        got: usize,
    },
    /// The microbatch size does not divide the batch size.
    #[error(
        "micro: batch_size={batch_size} must be divisible by microbatch_size={microbatch_size}; pick a microbatch size that divides the batch"
    )]
    NonDividingMicrobatchSize {
        /// The batch size `B`.
        batch_size: usize,
        /// The microbatch size given.
        microbatch_size: usize,
    },
    /// `micro_vmap` supports only `out_axes = 0`.
    #[error("micro_vmap: out_axes={out_axes} is not supported; only 0 (the batch axis first) is")]
    UnsupportedOutAxes {
        /// The `out_axes` given.
        out_axes: String,
    },
    /// `num_real_microbatches` exceeds the number of microbatches.
    #[error(
        "micro: num_real_microbatches={num_real_microbatches} is larger than the {num_microbatches} microbatches of the batch"
    )]
    NumRealMicrobatchesOutOfRange {
        /// The value given.
        num_real_microbatches: usize,
        /// `B / microbatch_size`.
        num_microbatches: usize,
    },
    /// A (custom) accumulator returned the wrong number of rows.
    #[error(
        "micro: {path}: accumulator `{accumulator}` returned {got} rows where {expected} were expected (1 for a reduction, the batch size when it keeps the batch axis)"
    )]
    AccumulatorRows {
        /// Path of the output leaf.
        path: String,
        /// The accumulator's name.
        accumulator: String,
        /// Rows expected.
        expected: usize,
        /// Rows returned.
        got: usize,
    },
    /// An argument index past the last argument.
    #[error(
        "micro_grad: {what} names argument {index}, but the function takes {num_arguments} arguments"
    )]
    ArgumentIndex {
        /// `argnums` or `batch_argnums`.
        what: String,
        /// The index given.
        index: usize,
        /// The number of arguments.
        num_arguments: usize,
    },
    /// A differentiated argument holds an int or bool tensor.
    #[error(
        "micro_grad: {path} is a {kind} tensor and cannot be differentiated; remove its argument from argnums"
    )]
    NotDifferentiable {
        /// Path of the leaf.
        path: String,
        /// Its kind.
        kind: &'static str,
    },
    /// The loss of one example has more than one element.
    #[error(
        "{transform}: the loss of one example must have exactly one element, got shape {shape:?}; reduce it (e.g. .sum() or .mean())"
    )]
    LossNotScalar {
        /// The transform (`per_example_grads`, `micro_grad`, ...).
        transform: &'static str,
        /// The per-example loss shape.
        shape: Vec<usize>,
    },
    /// An [`auto_vmap`](crate::transform::auto_vmap) argument has fewer dims than its base rank.
    #[error("vmap: auto_vmap: {argument}: rank too small: shape {shape:?} has rank {}, but the argument's base rank is {min_rank}; \
             pass at least {min_rank} dims (batch dims go in front of them)", .shape.len())]
    RankTooSmall {
        /// The argument path (e.g. `args[2]`, `args[0].a`).
        argument: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The base rank it was given.
        min_rank: usize,
    },
    /// The batch shapes of [`auto_vmap`](crate::transform::auto_vmap) arguments do not broadcast.
    #[error("vmap: auto_vmap: batch shapes do not broadcast: {}; aligned from the right, each batch dim must have one size or size 1", fmt_shapes(.arguments, .batch_shapes))]
    IncompatibleBatchShapes {
        /// The path of every argument that has batch dims, in argument order.
        arguments: Vec<String>,
        /// Their batch shapes (the leading `ndim - rank` dims), in the same order.
        batch_shapes: Vec<Vec<usize>>,
    },
    /// A [`custom_vmap`](crate::transform::custom_vmap) rule returned outputs that do not match what it
    /// declared (batched outputs with a leading axis of the batch size, unbatched ones shaped
    /// like one example's output) or the function's output type.
    #[error("vmap: custom_vmap rule: {output}: {why}")]
    InvalidRuleOutput {
        /// The output path (e.g. `out`, `out[1]`).
        output: String,
        /// What is wrong, with the sizes.
        why: String,
    },
    /// A random op ran inside a `vmap` whose [`Randomness`](crate::Randomness) mode is `Error`
    /// (the default).
    #[error(
        "{transform}: {op}: random numbers inside the vectorized function (batch size {size}) \
             need a choice: `{transform}(f).randomness(Randomness::Different)` gives every \
             example its own draw (as a loop over the examples would; dropout), \
             `Randomness::Same` shares one draw across the batch; the default, \
             `Randomness::Error`, refuses to guess"
    )]
    Randomness {
        /// The transform whose `.randomness(..)` setting applies (`vmap`, `micro_grad`, ...).
        transform: &'static str,
        /// The random op (`float_random`, `int_random`).
        op: String,
        /// The size of the vmap level that refused the draw.
        size: usize,
    },
    /// A result is batched at a vmap level that has already returned: a batched tensor was
    /// stored outside the mapped function and came back.
    #[error(
        "vmap: {path}: the value is batched at vmap level {level}, whose vmap call has already \
             returned; a batched tensor escaped its vmap through state kept outside the function \
             (for example BatchNorm's running statistics updated in training mode inside vmap): \
             put BatchNorm in eval mode (`model.valid()`), or use GroupNorm/LayerNorm/InstanceNorm, \
             or return the value from the vmapped function instead of storing it"
    )]
    EscapedBatch {
        /// Path of the offending leaf.
        path: String,
        /// The finished level's number.
        level: u64,
    },
    /// The module holds a layer whose training-mode forward pass mixes the examples of a batch
    /// (Burn's `BatchNorm`): per-example gradients through it are not defined, and running it
    /// under vmap would overwrite its running statistics with batched tensors. Refused before
    /// anything runs; the module is left as it was.
    #[error(
        "{transform}: the module at `{path}` is a {layer}, which in training mode mixes the \
             examples of a batch (it normalizes with the batch's statistics and updates its \
             running statistics from them), so per-example gradients through it are not defined; \
             replace it with GroupNorm or LayerNorm (Burn's `GroupNorm`, `LayerNorm`), or \
             compute per-example quantities with the model in eval mode (`model.valid()`)"
    )]
    MixesExamples {
        /// The transform refusing the module.
        transform: &'static str,
        /// The layer's path in the module (`""` for the module itself).
        path: String,
        /// The layer's type (`BatchNorm`).
        layer: &'static str,
    },
    /// The module holds one parameter at two paths (the same `ParamId`: a tied or shared
    /// parameter, a `Param` cloned into two fields). Burn's backward sums the gradients of its
    /// uses into one; burn-vmap does not form that sum per example, and taking its uses apart
    /// would return two partial gradients under one id, and clip their joint norm, not the
    /// norm of their sum (which can exceed the clipping norm: no privacy guarantee). Refused
    /// before anything runs; the module is left as it was. Burn 0.22.1's own optimizers do not
    /// keep such a tie either: a step updates the parameter at the first path only. A layer
    /// called twice in one forward pass (one field) is the tie that holds, and is supported.
    #[error(
        "{transform}: the parameter at `{second}` is the one at `{first}` (the same ParamId: a \
             tied or shared parameter); its gradient is the sum of its uses, which per-example \
             transforms do not form yet, and clipping its uses apart would not bound the norm of \
             that sum; give each use a parameter of its own (a new ParamId), or use one field \
             for both"
    )]
    SharedParameter {
        /// The transform refusing the module.
        transform: &'static str,
        /// The parameter's first path in the module's visiting order (`a.weight`).
        first: String,
        /// The path where it is met again (`b.weight`).
        second: String,
    },
    /// A chunk size that is zero or negative (`chunked_vmap`, `checkpoint_chunked_scan`).
    #[error("{transform}: chunk_size must be positive, got chunk_size = {chunk_size}")]
    ChunkSizeNotPositive {
        /// The transform.
        transform: &'static str,
        /// The chunk size given.
        chunk_size: isize,
    },
    /// The leaves of a scan's `xs` differ in leading size, or differ from the given `length`.
    #[error("{transform}: inconsistent scan lengths: {}{}; every leaf of xs must have the same leading size{}",
            fmt_leading(.arguments), .length.map(|n| format!(", length = {n}")).unwrap_or_default(),
            if .length.is_some() { ", equal to length" } else { "" })]
    ScanLengths {
        /// The transform.
        transform: &'static str,
        /// `(leaf path, leading size)` for every leaf of `xs`.
        arguments: Vec<(String, usize)>,
        /// The `length` given, if any.
        length: Option<usize>,
    },
    /// A scan over an `xs` without tensors and without a `length`.
    #[error("{transform}: xs has no tensor to scan over and no length was given; set .length(n)")]
    ScanNoLength {
        /// The transform.
        transform: &'static str,
    },
    /// A rank-0 tensor where a leading axis is needed (a scan's `xs`).
    #[error("{transform}: {argument} is a rank-0 tensor and has no leading axis to scan over")]
    NoLeadingAxis {
        /// The transform.
        transform: &'static str,
        /// Path of the leaf (e.g. `xs[1]`).
        argument: String,
    },
    /// A scan step returned a carry that does not match `init`, or an output that does not
    /// match the first step's.
    #[error(
        "{transform}: step {step}: {what} leaf {path} is {got}, expected {expected}; \
             the carry must keep the structure, kinds and shapes of init, and every step's output the same shapes"
    )]
    ScanShapeMismatch {
        /// The transform.
        transform: &'static str,
        /// `carry` or `ys`.
        what: String,
        /// Path of the leaf.
        path: String,
        /// Index of the step (into `xs`).
        step: usize,
        /// What was expected.
        expected: String,
        /// What the step returned.
        got: String,
    },
    /// `sliced_scan` with `step = 0`.
    #[error("sliced_scan: slice step cannot be zero")]
    SliceStepZero,
    /// `checkpoint_chunked_scan`'s body captures a tensor that requires gradients.
    #[error(
        "{transform}: the scan body uses a captured tensor that requires gradients; its gradient \
             cannot be recomputed per chunk. Pass it through the carry (returned unchanged) instead, \
             or detach it if it needs no gradient"
    )]
    CapturedTrackedTensor {
        /// The transform.
        transform: &'static str,
    },
    /// The function read a tensor that is not one of its arguments (a tensor it closes over, or
    /// one it created on a device it closes over: the user's device), or a tensor of its module
    /// that does not move with the module (a `#[module(skip)]` or `Ignored<T>` field: Burn's
    /// `to_device` leaves it where it is).
    /// Transforms record the function once for one example on Burn's capture device, so every
    /// tensor it uses must come in through its arguments or as a module's parameter or tensor
    /// field.
    #[error(
        "{transform}: the function uses a tensor that is not one of its arguments ({detail}); \
             a transformed function is recorded once for one example, so pass every tensor it \
             reads as an argument (unmapped: in_axes None) or, for a model, through the \
             transform's module argument as a parameter or a plain tensor field (a tensor in a \
             #[module(skip)] or Ignored<T> field does not move with the module); create a \
             tensor on an argument's device (`&x.device()`), not on a device it closes over"
    )]
    ForeignTensor {
        /// The transform.
        transform: &'static str,
        /// What Burn reported.
        detail: String,
    },
    /// The function read a tensor's values (`into_data`, `to_data`, `into_scalar`, ...) while it
    /// was being recorded: the values of a recorded tensor do not exist yet.
    #[error(
        "{transform}: the function reads a tensor's values ({detail}); a transformed function is \
             recorded once for one example, where values do not exist yet, so its control flow \
             cannot depend on them: compute on tensors (mask_where, select, ...) instead, or read \
             values outside the transform"
    )]
    ValueRead {
        /// The transform.
        transform: &'static str,
        /// What Burn reported.
        detail: String,
    },
    /// The function panicked while it was being recorded for one example.
    #[error("{transform}: the function panicked while it was recorded for one example: {message}")]
    FunctionPanicked {
        /// The transform.
        transform: &'static str,
        /// The panic message.
        message: String,
    },
    /// The recorded function uses an operation burn-vmap cannot replay.
    #[error("vmap: the function uses {op}, which burn-vmap cannot replay: {why}")]
    UnsupportedOp {
        /// The operation.
        op: String,
        /// Why, and what to do.
        why: &'static str,
    },
    /// An argument lives on a device whose backend burn-vmap does not run on, or the arguments
    /// live on different devices.
    #[error("{transform}: {why}")]
    Device {
        /// The transform.
        transform: &'static str,
        /// What is wrong, naming the devices.
        why: String,
    },
    /// A batching rule or a backend op failed while the batched function ran (a panic inside
    /// an op, turned into an error at the transform's boundary).
    #[error("{transform}: {message}")]
    Op {
        /// The transform.
        transform: &'static str,
        /// The op's message (batching rules say `vmap: <op>: <why>; <what to do>`).
        message: String,
    },
    /// A tensor's rank is above what the tree visitors dispatch to
    /// ([`MAX_RANK`](crate::tree::MAX_RANK)).
    #[error(
        "vmap: {path}: a tensor of rank {rank} cannot be passed to a tree visitor or mapper, which handle ranks 0 to {max}; use Tree::map_leaves for it"
    )]
    UnsupportedRank {
        /// Path of the leaf.
        path: String,
        /// Its rank.
        rank: usize,
        /// The highest supported rank.
        max: usize,
    },
}

fn fmt_shapes(args: &[String], shapes: &[Vec<usize>]) -> String {
    args.iter()
        .zip(shapes)
        .map(|(a, s)| format!("{a} has batch shape {s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_sizes(args: &[(String, usize)]) -> String {
    args.iter()
        .map(|(a, s)| format!("{a} has size {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_leading(args: &[(String, usize)]) -> String {
    args.iter()
        .map(|(a, s)| format!("{a} has leading size {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl VmapError {
    /// The error as raised by the user-facing transform `transform` (built on others): a
    /// randomness refusal names the transform whose setting the user changes.
    pub(crate) fn in_transform(self, transform: &'static str) -> Self {
        match self {
            VmapError::Randomness { op, size, .. } => VmapError::Randomness {
                transform,
                op,
                size,
            },
            other => other,
        }
    }
}

/// The text of [`VmapError::AxisOutOfRange`].
fn fmt_axis(spec: &str, argument: &str, axis: isize, rank: usize, shape: &[usize]) -> String {
    let valid = if rank == 0 {
        "there is no axis to map".to_string()
    } else {
        format!("valid axes are {} to {}", -(rank as isize), rank - 1)
    };
    if spec == "out_axes" {
        format!(
            "vmap: out_axes: {argument}: axis {axis} is out of range: the function returns a \
             tensor of rank {} (shape {shape:?}) for one example, so the batched result has rank \
             {rank}; {valid}",
            rank.saturating_sub(1)
        )
    } else {
        format!(
            "vmap: {spec}: {argument}: axis {axis} is out of range for a tensor of rank {rank} \
             (shape {shape:?}); {valid}"
        )
    }
}
