//! Collectives for data-parallel training: one small trait, [`Collective`], over the engines
//! people already run, one file per engine.
//!
//! | engine | feature | ranks are | file |
//! |---|---|---|---|
//! | [`Local`] | none | this process alone (size 1, every collective is the identity) | `local.rs` |
//! | `mpi::Mpi` | `mpi` | the processes of an MPI job (`mpirun -np N`), across nodes | `mpi.rs` |
//! | `nccl::Nccl` | `cuda` | CUDA devices of this process, through Burn's NCCL all-reduce | `nccl.rs` |
//!
//! [`DistributedDp`] is data-parallel DP-SGD over any of them: every rank samples its shard at the
//! mechanism's `q`, the clipped sums are reduce-scattered over the ranks, each rank adds the
//! noise to its own slice of the total and the noised slices are gathered, every rank accounts
//! every step; [`DistributedDp::save_checkpoint`] and [`load_checkpoint`] restart a job that
//! stopped.
//!
//! The sum flattens each rank's clipped gradient sum into one host buffer ([`flatten_grads`]),
//! sums the buffers over the ranks in one collective ([`Collective::all_reduce_sum`]) and rebuilds
//! the gradients ([`unflatten_grads`]); [`all_reduce_grads`] does the three:
//!
//! ```text
//! flat = concat(reshape(g, [-1]) for g in grads)    # one buffer, the parameters' order
//! all_reduce_sum(flat)                              # the sum over every rank, same bits on each
//! grads = split(flat) reshaped like grads
//! ```
//!
//! Every collective takes a timeout: a stalled or dead peer makes the others return
//! [`CollectiveError::Timeout`] instead of hanging. Collectives cannot be cancelled (MPI and NCCL
//! have no way to withdraw a rank from one in flight), so a timeout leaves the engine unusable and
//! the right response is to stop the job (`Mpi::abort`) and restart it from
//! the last saved state.
//!
//! ```
//! use std::time::Duration;
//! use burn_vmap::distributed::{Collective, Local};
//!
//! let engine = Local;
//! let mut sum = vec![1.0f32, 2.0];
//! engine.all_reduce_sum(&mut sum, Duration::from_secs(1)).unwrap();
//! assert_eq!((engine.rank(), engine.size(), sum), (0, 1, vec![1.0, 2.0]));
//! ```

mod agree;
mod checkpoint;
mod dp;
mod exchange;
mod flat;
mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "cuda")]
pub mod nccl;

use std::time::Duration;

pub use checkpoint::{Checkpoint, load_checkpoint};
pub use dp::{DistributedDp, DistributedError};
pub use flat::{all_reduce_grads, flatten_grads, unflatten_grads};
pub use local::Local;

/// A group of ranks that reduce and broadcast host buffers together.
///
/// Every rank of the group calls the same collectives in the same order, with buffers of the
/// same length; a rank with nothing to contribute (an empty shard) still calls, with zeros.
/// Results are bit-identical on every rank: data-parallel training keeps its parameters equal
/// across processes by applying the same bits everywhere, never by hoping two sums round alike.
///
/// `timeout` bounds the whole call. When it passes, the call returns
/// [`CollectiveError::Timeout`]; the collective is still in flight in the engine and cannot be
/// cancelled, so the engine refuses further collectives and the job should stop (for MPI,
/// `Mpi::abort`).
///
/// The trait is object safe: a trainer holds a `Box<dyn Collective>`, [`Local`] when no engine is
/// configured.
pub trait Collective {
    /// This rank, in `0..size()`.
    fn rank(&self) -> usize;

    /// The number of ranks in the group.
    fn size(&self) -> usize;

    /// Replaces `values` by their element-wise sum over every rank, the same bits on each rank.
    ///
    /// # Errors
    /// [`CollectiveError::Mismatch`] when the ranks pass buffers of different lengths (every
    /// rank returns it; nothing is reduced), [`CollectiveError::Timeout`] when `timeout` passes
    /// first, [`CollectiveError::Engine`] when the engine fails or is unusable after a timeout.
    fn all_reduce_sum(&self, values: &mut [f32], timeout: Duration) -> Result<(), CollectiveError>;

    /// Replaces `values` on every rank by those of rank `root`.
    ///
    /// # Errors
    /// As [`all_reduce_sum`](Self::all_reduce_sum), and [`CollectiveError::Root`] when `root` is
    /// not a rank of the group.
    fn broadcast(
        &self,
        values: &mut [f32],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError>;

    /// Replaces `bytes` on every rank by those of rank `root` (a seed, a serialized state).
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast).
    fn broadcast_bytes(
        &self,
        bytes: &mut [u8],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError>;

    /// `send` holds [`size`](Self::size) blocks of `recv.len()` values, block `r` for rank `r`:
    /// each rank receives into `recv` the element-wise sum over every rank of its block. Each
    /// block is summed once, by its rank, so [`all_gather`](Self::all_gather)ing the blocks gives
    /// every rank the same bits.
    ///
    /// The default reduces the whole buffer on every rank
    /// ([`all_reduce_sum`](Self::all_reduce_sum)) and keeps the rank's block: every rank then sees
    /// every block's sum.
    /// [`scatters`](Self::scatters) says whether an engine does better (MPI's reduce-scatter).
    ///
    /// # Errors
    /// [`CollectiveError::Mismatch`] when `send` is not `size` blocks of `recv.len()`, and as
    /// [`all_reduce_sum`](Self::all_reduce_sum).
    fn reduce_scatter_sum(
        &self,
        send: &[f32],
        recv: &mut [f32],
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let block = check_blocks("reduce_scatter_sum", send.len(), recv.len(), self.size())?;
        let mut all = send.to_vec();
        self.all_reduce_sum(&mut all, timeout)?;
        let at = self.rank() * block;
        recv.copy_from_slice(&all[at..at + block]);
        Ok(())
    }

    /// Every rank's block `send`, in rank order, into `recv` (`size` blocks), the same bits on
    /// every rank.
    ///
    /// The default sums the blocks, each amid the other ranks' zeros
    /// ([`all_reduce_sum`](Self::all_reduce_sum): `x + 0` is `x`, exactly).
    ///
    /// # Errors
    /// [`CollectiveError::Mismatch`] when `recv` is not `size` blocks of `send.len()`, and as
    /// [`all_reduce_sum`](Self::all_reduce_sum).
    fn all_gather(
        &self,
        send: &[f32],
        recv: &mut [f32],
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let block = check_blocks("all_gather", recv.len(), send.len(), self.size())?;
        recv.fill(0.0);
        let at = self.rank() * block;
        recv[at..at + block].copy_from_slice(send);
        self.all_reduce_sum(recv, timeout)
    }

    /// Whether [`reduce_scatter_sum`](Self::reduce_scatter_sum) is the engine's own, so that a
    /// rank receives the complete sum of its block only (the default reduces everything
    /// everywhere).
    fn scatters(&self) -> bool {
        false
    }
}

/// The block length of `whole` values in `size` blocks, checked against `block`.
pub(crate) fn check_blocks(
    operation: &'static str,
    whole: usize,
    block: usize,
    size: usize,
) -> Result<usize, CollectiveError> {
    if whole == block * size {
        Ok(block)
    } else {
        Err(CollectiveError::Mismatch {
            operation,
            expected: block * size,
            got: whole,
            rank: None,
        })
    }
}

/// Forwards every method of [`Collective`] to the engine behind `**self` (the borrowed and boxed
/// engines), so that an engine's own collectives are used through them, not the defaults.
macro_rules! forward_collective {
    () => {
        fn rank(&self) -> usize {
            (**self).rank()
        }

        fn size(&self) -> usize {
            (**self).size()
        }

        fn all_reduce_sum(
            &self,
            values: &mut [f32],
            timeout: Duration,
        ) -> Result<(), CollectiveError> {
            (**self).all_reduce_sum(values, timeout)
        }

        fn broadcast(
            &self,
            values: &mut [f32],
            root: usize,
            timeout: Duration,
        ) -> Result<(), CollectiveError> {
            (**self).broadcast(values, root, timeout)
        }

        fn broadcast_bytes(
            &self,
            bytes: &mut [u8],
            root: usize,
            timeout: Duration,
        ) -> Result<(), CollectiveError> {
            (**self).broadcast_bytes(bytes, root, timeout)
        }

        fn reduce_scatter_sum(
            &self,
            send: &[f32],
            recv: &mut [f32],
            timeout: Duration,
        ) -> Result<(), CollectiveError> {
            (**self).reduce_scatter_sum(send, recv, timeout)
        }

        fn all_gather(
            &self,
            send: &[f32],
            recv: &mut [f32],
            timeout: Duration,
        ) -> Result<(), CollectiveError> {
            (**self).all_gather(send, recv, timeout)
        }

        fn scatters(&self) -> bool {
            (**self).scatters()
        }
    };
}

/// A borrowed engine: a trainer can hold `&Mpi` and the application keep the engine (for
/// `Mpi::abort`).
impl<C: Collective + ?Sized> Collective for &C {
    forward_collective!();
}

/// A boxed engine (`Box<dyn Collective>`, chosen at run time).
impl<C: Collective + ?Sized> Collective for Box<C> {
    forward_collective!();
}

/// Why a collective failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CollectiveError {
    /// The collective did not complete within its timeout: a peer is stalled, dead or calling
    /// another collective. The operation is still in flight and cannot be cancelled; the engine
    /// refuses further collectives. Stop the job and restart it from its last saved state.
    #[error(
        "collective: {operation} on rank {rank} did not complete within {waited:?}: a peer is \
         stalled, dead or out of step; the operation cannot be cancelled, stop the job (Mpi::abort) \
         and restart it from its last saved state"
    )]
    Timeout {
        /// The collective (`"all_reduce_sum"`, `"broadcast"`, ...).
        operation: &'static str,
        /// How long this rank waited.
        waited: Duration,
        /// The rank that gave up (this one).
        rank: usize,
    },
    /// Buffers of different lengths: across the ranks of a collective (`rank` is the first rank
    /// whose length differs from rank 0's), or a flat buffer that does not fit the gradients it
    /// is unflattened into (`rank` is `None`).
    #[error(
        "collective: {operation}: {} holds {got} values where {expected} are expected; every rank \
         must pass buffers of the same length (flatten the same parameters in the same order)",
        match rank { Some(r) => format!("rank {r}"), None => "the buffer".into() }
    )]
    Mismatch {
        /// The collective or helper.
        operation: &'static str,
        /// The expected length (rank 0's, or the gradients' number of values).
        expected: usize,
        /// The length found.
        got: usize,
        /// The rank holding `got` values, where ranks were compared.
        rank: Option<usize>,
    },
    /// A root that is not a rank of the group.
    #[error("collective: {operation}: root {root} is not a rank of a group of {size}")]
    Root {
        /// The collective.
        operation: &'static str,
        /// The root asked for.
        root: usize,
        /// The group's size.
        size: usize,
    },
    /// The engine failed, or refuses work after an earlier timeout.
    #[error("collective engine: {0}")]
    Engine(String),
}

/// Checks `root` against the group's size.
pub(crate) fn check_root(
    operation: &'static str,
    root: usize,
    size: usize,
) -> Result<(), CollectiveError> {
    if root < size {
        Ok(())
    } else {
        Err(CollectiveError::Root {
            operation,
            root,
            size,
        })
    }
}
