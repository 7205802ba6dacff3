//! [`micro_vmap`] and [`micro_grad`]: vmap and per-example gradients in microbatches, with
//! accumulators (optax's `optax.microbatching`).
//!
//! - `micro_vmap.rs`: [`micro_vmap`] and its builder [`MicroVmap`];
//! - `micro_grad.rs`: [`micro_grad`] and the builder [`MicroGrad`] it shares with
//!   [`micro_grad_module`] (`module.rs`);
//! - `grad_fn.rs`: what `micro_grad` plugs in ([`LossOutput`], [`GradFn`]) and returns
//!   ([`MicroAux`]);
//! - `grad_run.rs`: recording `transform_fn` / `metrics_fn` and running the gradients;
//! - `batches.rs`: the microbatched loop both transforms share;
//! - `step.rs`: one microbatch as one batched computation on the engine;
//! - `norms.rs`: tree norms and optax's per-example clipping ([`clip_by_global_norm`]).
//!
//! The accumulators themselves live in [`crate::accumulate`].

mod batches;
mod grad_fn;
mod grad_run;
mod micro_grad;
mod micro_vmap;
mod module;
mod norms;
mod step;

pub use grad_fn::{
    GradFn, GradOut, Identity, LossAux, LossFn, LossOutput, MicroAux, MicroGradCall,
    MicroGradResult, MicroGradTypes, ModuleLossAux, ModuleLossFn, NoMetrics, TreeFn,
};
pub use micro_grad::{ArgGrads, ArgNums, MicroGrad, ModuleParams, micro_grad};
pub use micro_vmap::{MicroVmap, micro_vmap};
pub use module::micro_grad_module;
pub use norms::{
    clip_by_global_norm, clip_by_global_norm_finite, global_norm, non_finite, scale_tree,
};
