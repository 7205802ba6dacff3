//! The engine's tests at primitive level, on Flex: every batching rule against the loop oracle
//! (`common::check`: the batched op equals the op applied to each example), random ops under
//! each `Randomness` mode, and per-example gradients on `Autodiff<Vmap<Flex>>`.

#[path = "engine/capture.rs"]
mod capture;
#[path = "engine/common.rs"]
mod common;
#[path = "engine/constant.rs"]
mod constant;
#[path = "engine/elementwise.rs"]
mod elementwise;
#[path = "engine/grad.rs"]
mod grad;
#[path = "engine/indexing.rs"]
mod indexing;
#[path = "engine/module.rs"]
mod module;
#[path = "engine/random.rs"]
mod random;
#[path = "engine/reduce.rs"]
mod reduce;
#[path = "engine/view.rs"]
mod view;
