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
    #[error("{transform}: step {step}: {what} leaf {path} is {got}, expected {expected}; \
             the carry must keep the structure, kinds and shapes of init, and every step's output the same shapes")]
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
    #[error("{transform}: the scan body uses a captured tensor that requires gradients; its gradient \
             cannot be recomputed per chunk. Pass it through the carry (returned unchanged) instead, \
             or detach it if it needs no gradient")]
    CapturedTrackedTensor {
        /// The transform.
        transform: &'static str,
    },
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
