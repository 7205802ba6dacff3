//! The front end's interpreter: a user's function is recorded once for one example on Burn's
//! capture device ([`capture`]), kept as a [`Program`], and run on any backend
//! ([`Program::run`], one [`execute`](ops::execute) per recorded operation): the user's own
//! backend, `Vmap<B>` (the batched function) or `Autodiff<Vmap<B>>` (its per-example
//! gradients).
//!
//! | file | holds |
//! |---|---|
//! | `capture.rs` | recording a function on the capture device; panics and foreign tensors as errors |
//! | `program.rs` | [`Program`]: operations, inputs, outputs, constants; running it |
//! | `env.rs` | the live tensors of one run, each freed after its last read |
//! | `custom.rs` | custom operations (`custom_vmap`): recorded as one node, batched by their rule when run |
//! | `ops.rs` | the one match over Burn's `OperationIr` |
//! | `rewrite.rs` | rewrites of a captured graph before it runs (`linear`, which Burn 0.22.1 records decomposed) |

mod capture;
mod custom;
mod env;
mod ops;
mod program;
mod rewrite;

pub(crate) use capture::{Recording, capture, capture_values, capture_with, classify, placeholder};
pub(crate) use custom::{CustomHandler, RuleProgram, record_call};
pub(crate) use program::{Program, TensorSig};

#[cfg(test)]
mod tests;
