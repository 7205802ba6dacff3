//! `micro_vmap`, `micro_grad` and `micro_grad_module` against the loop: stacking `f(x_i)` (or
//! single-example gradients from Burn's own backward) and reducing by hand, for every
//! accumulator, microbatch size and `num_real_microbatches`; the optax cases of the reference
//! vectors; error paths.

#[path = "micro/common.rs"]
mod common;
#[path = "micro/grad.rs"]
mod grad;
#[path = "micro/module.rs"]
mod module;
#[path = "micro/vmap.rs"]
mod vmap;
