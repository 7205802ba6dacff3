//! `ActivationOps` for `Vmap<B>`: Burn's defaults decompose every activation into elementwise
//! float ops, whose batching rules apply.

use burn_backend::backend::Backend;
use burn_backend::ops::ActivationOps;

use crate::Vmap;

impl<B: Backend> ActivationOps<Self> for Vmap<B> {}
