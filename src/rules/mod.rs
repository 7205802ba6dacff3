//! Batching rules, by op family.
//!
//! A rule takes [`VmapTensor`](crate::tensor::VmapTensor) operands, works on their physical tensors (batch
//! dims first, sorted by level) and returns the batched result. When no operand is batched, every
//! rule calls the inner op directly (the fast path). Rules are named after the Burn methods they
//! batch; the op-trait impls in [`crate::ops`] only unwrap, call a rule, and rewrap.

pub(crate) mod batch;
pub(crate) mod create;
pub(crate) mod elementwise;
pub(crate) mod fallback;
pub(crate) mod helpers;
pub(crate) mod indexing;
pub(crate) mod linalg;
pub(crate) mod module;
pub(crate) mod outer;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod view;
