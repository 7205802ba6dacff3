//! `DistributedOps` for `Vmap<B>`: Burn's defaults.
//!
//! Burn 0.22's collective ops (an all-reduce, native on CUDA through NCCL only; Flex has none)
//! act on whole tensors across devices. Under vmap a tensor's examples live in its batch dims,
//! which a device-level all-reduce knows nothing about, so `Vmap<B>` forwards nothing: the
//! defaults (a sync server of its own, `all_reduce` unimplemented) stand. Reduce across devices
//! outside vmap, on the unbatched result.

use burn_backend::backend::Backend;
use burn_backend::distributed::DistributedOps;

use crate::Vmap;

impl<B: Backend> DistributedOps<Self> for Vmap<B> {}
