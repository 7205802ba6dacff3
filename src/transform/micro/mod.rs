//! [`micro_vmap`] and [`micro_grad`]: vmap and per-example gradients in microbatches, with
//! accumulators (optax's `optax.microbatching`).
//!
//! - `micro_vmap.rs`: [`micro_vmap`] and its builder [`MicroVmap`];
//! - `micro_grad.rs`: [`micro_grad`], [`micro_grad_module`] and their builder [`MicroGrad`];
//! - `grad_fn.rs`: what `micro_grad` plugs in ([`LossOutput`], [`GradFn`], [`GradSource`]) and
//!   returns ([`MicroAux`]);
//! - `vmap_fn.rs`: the vectorizer run on each microbatch ([`VmapFn`]);
//! - `run.rs`: the microbatched loop both transforms share;
//! - `norms.rs`: tree norms and optax's per-example clipping ([`clip_by_global_norm`]).
//!
//! The accumulators themselves live in [`crate::accumulate`].

mod grad_fn;
mod micro_grad;
mod micro_vmap;
mod module;
mod norms;
mod run;
mod vmap_fn;

pub use grad_fn::{
    ArgGrads, GradFn, GradOut, GradSource, Identity, LossOutput, MicroAux, MicroGradResult,
    MicroGradTypes, ModuleGrads, ModuleParams, NoMetrics, TreeFn,
};
pub use micro_grad::{ArgNums, MicroGrad, micro_grad};
pub use micro_vmap::{MicroVmap, micro_vmap};
pub use module::micro_grad_module;
pub use norms::{
    clip_by_global_norm, clip_by_global_norm_finite, global_norm, non_finite, scale_tree,
};
pub use vmap_fn::{ChunkedVmapFn, PlainVmap, VmapFn};

use crate::transform::axes::Axes;

type Inner<AB> = <AB as burn::tensor::backend::AutodiffBackend>::InnerBackend;
