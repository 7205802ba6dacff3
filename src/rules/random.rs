//! Random numbers under vmap (torch.func's `randomness=` choice).
//!
//! The active `vmap` calls, with their level, size and [`Randomness`] mode, are recorded by
//! [`crate::level`]; `float_random` / `int_random` of [`Vmap`](crate::Vmap) read them:
//!
//! - no active vmap: an ordinary (unbatched) draw;
//! - [`Randomness::Different`] at a level: the draw gets a batch dim at that level, so every
//!   example receives independent numbers;
//! - [`Randomness::Same`] at a level: no batch dim there, one draw shared by the examples;
//! - [`Randomness::Error`] (the default) at a level: the draw is refused. Backend ops cannot
//!   return errors, so the refusal is recorded (`level::refuse`) and the enclosing `vmap` call returns
//!   `VmapError::Randomness` once the function returns (the
//!   draw itself returns an unbatched placeholder so that the function can finish).

use burn_backend::Shape;

use crate::level::{self, Randomness, Refused};
use crate::tensor::{BatchDim, BatchDims};

/// The batch dims a random draw of `op` gets: one per active level in `Different` mode. A level
/// in `Error` mode records a refusal (reported by its `vmap` call) and contributes no dim.
pub(crate) fn random_batch_dims(op: &'static str) -> BatchDims {
    level::with_active(|active| {
        let mut dims = Vec::new();
        for x in active {
            match x.mode {
                Randomness::Different => dims.push(BatchDim {
                    level: x.level,
                    size: x.size,
                }),
                Randomness::Same => {}
                Randomness::Error => level::refuse(Refused {
                    op,
                    level: x.level,
                    size: x.size,
                }),
            }
        }
        dims.sort_by_key(|d| d.level);
        BatchDims::from_sorted(dims)
    })
}

/// A random draw under vmap: `draw(physical shape)` with the batch sizes of
/// [`random_batch_dims`] in front of the logical `shape`.
pub(crate) fn random<P>(
    op: &'static str,
    shape: Shape,
    draw: impl FnOnce(Shape) -> P,
) -> crate::tensor::VmapTensor<P> {
    let bdims = random_batch_dims(op);
    let scalar = shape.num_dims() == 0;
    let physical = crate::physical::with_batch_sizes(&bdims, &shape);
    crate::tensor::VmapTensor::new(draw(physical), bdims).with_scalar(scalar)
}
