//! `TransactionOps` for `Vmap<B>`: the default reads each tensor through `*_into_data`, which
//! refuses batched tensors with a clear message.

use burn_backend::backend::Backend;
use burn_backend::ops::TransactionOps;

use crate::Vmap;

impl<B: Backend> TransactionOps<Self> for Vmap<B> {}
