//! Batching rules, by op family.
//!
//! A rule takes [`VmapTensor`](crate::tensor::VmapTensor) operands, works on their physical
//! tensors (batch dims first, sorted by level) and returns the batched result. Rules are named
//! after the Burn methods they batch; the op-trait impls in [`crate::ops`] only unwrap, call a
//! rule, and rewrap. When no operand is batched, the ops call the inner op directly: the
//! multi-operand families do it in one place, the `unbatched!` fast path of `ops/macros.rs`, so
//! their rules see at least one batched operand; unary and view rules keep a batch-free tensor's
//! batch dims (none) as they are.
//!
//! | file | family |
//! |---|---|
//! | `helpers.rs` | shared moves: align an operand to a set of batch dims, materialize them |
//! | `elementwise.rs` | unary and binary elementwise ops (broadcasting or materializing) |
//! | `reduce.rs` | reductions, scans and sorts along a dim, whole-tensor reductions |
//! | `view.rs` | reshape, permute, swap_dims, flip, expand, slice, cat |
//! | `indexing.rs` | gather, scatter, select, select_assign, slice_assign, masks, `*_nd` |
//! | `linalg.rs` | matmul and `linear` (a batch folded into the matmul rows) |
//! | `factored/` | factored per-example weight gradients (dense layers, convolutions, embeddings) and the ops that keep them factored |
//! | `module.rs` | convolutions, pools, attention (the batch folded into `N`, or groups) |
//! | `create.rs` | new tensors and reading them back |
//! | `constant.rs` | float constants (held unwritten) folded through `neg`, products, views |
//! | `random.rs` | random draws under `Randomness` |
//! | `batch.rs` | moving a tensor in and out of a level (`BatchOps`) |
//! | `fallback.rs` | the loop over examples, for ops without a rule |

pub(crate) mod batch;
pub(crate) mod constant;
pub(crate) mod create;
pub(crate) mod elementwise;
pub(crate) mod factored;
pub(crate) mod fallback;
pub(crate) mod helpers;
pub(crate) mod indexing;
pub(crate) mod linalg;
pub(crate) mod module;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod view;
