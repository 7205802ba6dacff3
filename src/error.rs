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
    #[error("vmap: inconsistent batch sizes: {}; every mapped axis must have the same size", fmt_sizes(.arguments))]
    InconsistentBatchSizes {
        /// `(argument path, size of its mapped axis)` for every mapped argument.
        arguments: Vec<(String, usize)>,
    },
    /// A mapped axis is outside the argument's rank.
    #[error("vmap: {argument}: axis {axis} is out of range for a tensor of rank {rank} (shape {shape:?})")]
    AxisOutOfRange {
        /// The argument (or output) path.
        argument: String,
        /// The axis as given (may be negative).
        axis: isize,
        /// The tensor's rank.
        rank: usize,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// No argument is mapped.
    #[error("vmap: no argument is mapped: every in_axes entry is None; map at least one argument")]
    NothingMapped,
    /// An axis specification does not match the structure of the arguments or outputs.
    #[error("vmap: {what} does not match the tree at {path}: {why}")]
    TreeMismatch {
        /// Which specification (`in_axes`, `out_axes`, `accumulator`, ...).
        what: String,
        /// Path in the tree.
        path: String,
        /// What differs.
        why: String,
    },
    /// A leaf's rank does not match the tensor type it is rebuilt into.
    #[error("vmap: {path}: expected a {expected} tensor of rank {expected_rank}, got a {got} tensor of rank {got_rank} (shape {shape:?}); \
             a mapped axis is removed from the function's view of its argument")]
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
    #[error("vmap: {path}: the tree has {got} leaves where {expected} were expected")]
    LeafCount {
        /// Path in the tree.
        path: String,
        /// Expected number of leaves.
        expected: usize,
        /// Actual number.
        got: usize,
    },
    /// A random op ran inside a `vmap` whose [`Randomness`](crate::Randomness) mode is `Error`
    /// (the default).
    #[error(
        "vmap: {op}: random numbers inside vmap (batch size {size}) need a choice: \
             `vmap(f).randomness(Randomness::Different)` gives every example its own draw (as a \
             loop over the examples would), `Randomness::Same` shares one draw across the batch; \
             the default, `Randomness::Error`, refuses to guess. If the draw comes from a Burn \
             module parameter that is initialized lazily on first use, initialize the model \
             outside vmap first (run it once, or read each parameter with `param.val()`)"
    )]
    Randomness {
        /// The random op (`float_random`, `int_random`).
        op: String,
        /// The size of the vmap level that refused the draw.
        size: usize,
    },
    /// A result is batched at a vmap level that has already returned: a batched tensor was
    /// stored outside the mapped function and came back.
    #[error("vmap: {path}: the value is batched at vmap level {level}, whose vmap call has already \
             returned; a batched tensor escaped its vmap through state kept outside the function \
             (for example BatchNorm's running statistics updated in training mode inside vmap): \
             put BatchNorm in eval mode (`model.valid()`), or use GroupNorm/LayerNorm/InstanceNorm, \
             or return the value from the vmapped function instead of storing it")]
    EscapedBatch {
        /// Path of the offending leaf.
        path: String,
        /// The finished level's number.
        level: u64,
    },
}

fn fmt_sizes(args: &[(String, usize)]) -> String {
    args.iter()
        .map(|(a, s)| format!("{a} has size {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}
