//! [`Mpi`]: the [`Collective`] engine over a system MPI (rsmpi), for data-parallel training
//! across the processes of an `mpirun` job, on one node or many.
//!
//! Every collective is non-blocking (`MPI_Iallgather`, `MPI_Ireduce`, `MPI_Ibcast`) and polled
//! with `MPI_Test` until it completes or the timeout passes, so a stalled peer gives the others
//! [`CollectiveError::Timeout`] instead of a hang. A collective opens with the ranks' lengths
//! (an 8-byte all-gather, polled every 100 µs after 200 ms, while a peer may be late); once
//! that completes every rank is in the collective, and its data is polled without pause (MPI
//! progresses a transfer only inside MPI calls), so a late peer costs at most `COLD_POLL`
//! more than an on-time one (a tenth of a millisecond).
//!
//! # Bit-identical sums
//! [`all_reduce_sum`](Collective::all_reduce_sum) is a reduction to rank 0 followed by a
//! broadcast of rank 0's result, not `MPI_Allreduce`. The standard only *recommends* that a
//! reduction give the same result for the same arguments (MPI 4.0, 6.9.1, advice to
//! implementors), and says nothing of every rank of an all-reduce receiving the same bits: an
//! implementation may sum in a different order on each rank (recursive doubling, hierarchical
//! algorithms across nodes), and floating-point sums in different orders differ in the last
//! bits. A broadcast copies bytes, so with reduce + broadcast every rank holds rank 0's sum, bit
//! for bit, whatever algorithm the library picks. The price is one more latency term per call.
//!
//! # Timeouts
//! MPI cannot cancel a collective (`MPI_Cancel` on one is erroneous), and a rank cannot leave one
//! it has entered. On a timeout the engine therefore keeps the operation's buffers alive (they are
//! leaked: MPI may still write into them), forgets the request, and refuses every later
//! collective with [`CollectiveError::Engine`]. Stop the job: [`Mpi::abort`] kills every process
//! of it, and `mpirun` returns the code given. Dropping a timed-out engine skips `MPI_Finalize`
//! (which could wait for the stalled collective forever), and `mpirun` stops the job when it sees
//! a process exit without finalizing.
//!
//! # Length mismatches
//! A collective whose ranks pass different lengths is erroneous in MPI (truncation, or a hang).
//! Each collective first gathers every rank's length (one 8-byte all-gather), and when they differ
//! every rank returns [`CollectiveError::Mismatch`] before anything is reduced.

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use mpi::Rank;
use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};

use super::{Collective, CollectiveError, check_root};

/// How long the opening of a collective (its ranks' lengths, gathered before anything else) is
/// polled without pause before the engine polls it every [`COLD_POLL`], waiting for a late peer.
const HOT_POLL: Duration = Duration::from_millis(200);

/// How often the opening of a collective is polled after [`HOT_POLL`]: a late peer's arrival is
/// noticed within it (10 000 polls a second cost a stalled job's waiting ranks little).
const COLD_POLL: Duration = Duration::from_micros(100);

/// Who a wait may be waiting for, which sets how it polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peers {
    /// The opening of a collective: a peer may be late (or stalled) by any amount. Polled hot
    /// for [`HOT_POLL`], then every [`COLD_POLL`] (a late peer then costs at most that much
    /// more: the opening moves 8 bytes).
    Arriving,
    /// Every rank has entered the collective (its opening completed): polled hot until it
    /// completes or times out. MPI moves a large buffer only inside MPI calls, a fragment per
    /// call on both sides, so a pause between polls here stretches the transfer: polled every
    /// millisecond, a 2 MiB all-reduce over shared memory took 310–360 ms instead of 7–34.
    Present,
}

/// The processes of an MPI job as one [`Collective`] group (a duplicate of `MPI_COMM_WORLD`, so
/// its messages never mix with the application's own).
///
/// ```no_run
/// use std::time::Duration;
/// use burn_vmap::distributed::{Collective, CollectiveError, mpi::Mpi};
///
/// // Run with `mpirun -np 2 ./trainer`.
/// let mpi = Mpi::init().unwrap();
/// let mut sum = vec![mpi.rank() as f32; 4];
/// match mpi.all_reduce_sum(&mut sum, Duration::from_secs(30)) {
///     Ok(()) => assert_eq!(sum, vec![1.0; 4]), // 0 + 1 on both ranks
///     Err(e @ CollectiveError::Timeout { .. }) => {
///         eprintln!("{e}");
///         mpi.abort(3) // the collective cannot be cancelled: stop the job
///     }
///     Err(e) => panic!("{e}"),
/// }
/// ```
pub struct Mpi {
    // Freed before `universe` finalizes MPI; never freed after a timeout.
    comm: ManuallyDrop<SimpleCommunicator>,
    rank: usize,
    size: usize,
    /// The collective that timed out, if one did: the engine refuses work from then on.
    broken: Cell<Option<&'static str>>,
    universe: Option<Universe>,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("broken", &self.broken.get())
            .finish()
    }
}

impl Mpi {
    /// Initializes MPI (`MPI_Init`, single-threaded) and takes its world: every process the
    /// job's `mpirun` started. MPI is finalized when the engine is dropped. Run outside `mpirun`,
    /// the group is this process alone.
    ///
    /// # Errors
    /// [`CollectiveError::Engine`] when MPI was initialized already (hand the
    /// [`Universe`] over with [`from_universe`](Self::from_universe) instead).
    pub fn init() -> Result<Self, CollectiveError> {
        let universe = mpi::initialize().ok_or_else(|| {
            CollectiveError::Engine(
                "MPI is initialized already: pass its Universe to Mpi::from_universe".into(),
            )
        })?;
        Ok(Self::from_universe(universe))
    }

    /// As [`init`](Self::init), ending the process if `MPI_Init` (and the communicator's
    /// duplicate, a collective) has not returned `within` this long: MPI's start-up waits for
    /// every process of the job and cannot time out by itself, so a peer that never starts
    /// would hang this one. The process prints why and exits with [`DEADLINE_EXIT_CODE`];
    /// `mpirun` then stops the job (a process exited without finalizing). Without it, bound the
    /// job with the launcher (`mpirun --timeout SECONDS`).
    ///
    /// # Errors
    /// As [`init`](Self::init).
    pub fn init_within(within: Duration) -> Result<Self, CollectiveError> {
        let _deadline = Deadline::arm("MPI's start-up (MPI_Init)", within);
        Self::init()
    }

    /// Finalizes MPI (drops the engine), ending the process if `MPI_Finalize` has not returned
    /// `within` this long (it may wait for peers; a dead one would hang this process), as
    /// [`init_within`](Self::init_within) does.
    pub fn finalize_within(self, within: Duration) {
        let _deadline = Deadline::arm("MPI's shutdown (MPI_Finalize)", within);
        drop(self);
    }

    /// The engine over an MPI initialized by the application, which hands over its
    /// [`Universe`]: MPI is finalized when the engine is dropped.
    pub fn from_universe(universe: Universe) -> Self {
        let comm = universe.world().duplicate();
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        Self {
            comm: ManuallyDrop::new(comm),
            rank,
            size,
            broken: Cell::new(None),
            universe: Some(universe),
        }
    }

    /// The engine's communicator, for the application's own messages (they never mix with the
    /// engine's collectives only if the application duplicates it).
    pub fn communicator(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Stops the whole job (`MPI_Abort`): every process of it is killed and `mpirun` returns
    /// `code`. The response to [`CollectiveError::Timeout`], which leaves a collective in flight.
    pub fn abort(&self, code: i32) -> ! {
        self.comm.abort(code)
    }

    /// Refuses work after a timeout.
    fn usable(&self, operation: &'static str) -> Result<(), CollectiveError> {
        match self.broken.get() {
            None => Ok(()),
            Some(earlier) => Err(CollectiveError::Engine(format!(
                "{operation} refused on rank {}: {earlier} timed out earlier and is still in \
                 flight; stop the job (Mpi::abort)",
                self.rank
            ))),
        }
    }

    /// Polls `request` until it completes (`Ok`) or `timeout`, counted from `start`, passes,
    /// as `peers` says ([`Peers`]). On a timeout the request is forgotten and the engine marked
    /// broken; the caller must leak the request's buffers.
    fn wait<D: ?Sized>(
        &self,
        operation: &'static str,
        mut request: Request<'static, D, StaticScope>,
        (start, timeout): (Instant, Duration),
        peers: Peers,
    ) -> Result<(), CollectiveError> {
        let entered = Instant::now();
        loop {
            request = match request.test() {
                Ok(_) => return Ok(()),
                Err(pending) => pending,
            };
            let waited = start.elapsed();
            if waited >= timeout {
                // SAFETY: the request stays in flight inside MPI; forgetting its handle is all
                // that is possible (collectives cannot be cancelled). The caller leaks the
                // buffers it reads and writes, so they outlive it.
                let _ = unsafe { request.into_raw() };
                self.broken.set(Some(operation));
                return Err(CollectiveError::Timeout {
                    operation,
                    waited,
                    rank: self.rank,
                });
            }
            // MPI progresses a non-blocking collective only inside MPI calls (a large buffer
            // moves in fragments, each needing a call on both sides), so poll hot (yielding the
            // core to peers that outnumber the cores) while every rank is in the collective, and
            // at its opening for a while; then every `COLD_POLL` while waiting for a late or
            // stalled peer to arrive.
            if peers == Peers::Present || entered.elapsed() < HOT_POLL {
                std::thread::yield_now();
            } else {
                std::thread::sleep((timeout - waited).min(COLD_POLL));
            }
        }
    }

    /// Gathers every rank's `len`; `Mismatch` on every rank when they differ.
    fn agree_on_len(
        &self,
        operation: &'static str,
        len: usize,
        start: Instant,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let mut send = Heap::new(vec![len as u64]);
        let mut lens = Heap::new(vec![0u64; self.size]);
        // SAFETY: both buffers stay allocated until the request completes (freed below) or
        // forever (leaked on a timeout).
        let request = unsafe {
            self.comm
                .immediate_all_gather_into(StaticScope, send.lend(), lens.lend())
        };
        self.wait(operation, request, (start, timeout), Peers::Arriving)?;
        // SAFETY: the request completed.
        let lens = unsafe {
            send.free();
            lens.free()
        };
        match lens.iter().position(|&l| l != lens[0]) {
            None => Ok(()),
            Some(rank) => Err(CollectiveError::Mismatch {
                operation,
                expected: lens[0] as usize,
                got: lens[rank] as usize,
                rank: Some(rank),
            }),
        }
    }

    /// Broadcasts `values` from `root` after checking the lengths agree.
    fn broadcast_slice<T: Equivalence + Copy + 'static>(
        &self,
        operation: &'static str,
        values: &mut [T],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let start = Instant::now();
        self.usable(operation)?;
        check_root(operation, root, self.size)?;
        self.agree_on_len(operation, values.len(), start, timeout)?;
        if values.is_empty() || self.size == 1 {
            return Ok(());
        }
        let mut buf = Heap::new(values.to_vec());
        // SAFETY: as in `agree_on_len`.
        let request = unsafe {
            self.comm
                .process_at_rank(root as Rank)
                .immediate_broadcast_into(StaticScope, buf.lend())
        };
        self.wait(operation, request, (start, timeout), Peers::Present)?;
        // SAFETY: the request completed.
        values.copy_from_slice(&unsafe { buf.free() });
        Ok(())
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    /// `MPI_Ireduce` to rank 0, then `MPI_Ibcast` of rank 0's sum: see the module's docs for why
    /// not `MPI_Allreduce`.
    fn all_reduce_sum(&self, values: &mut [f32], timeout: Duration) -> Result<(), CollectiveError> {
        const OP: &str = "all_reduce_sum";
        let start = Instant::now();
        self.usable(OP)?;
        self.agree_on_len(OP, values.len(), start, timeout)?;
        if values.is_empty() || self.size == 1 {
            return Ok(());
        }
        let root = self.comm.process_at_rank(0);
        let mut send = Heap::new(values.to_vec());
        // Rank 0 receives the sum and broadcasts it from there; the others receive the broadcast
        // into their send buffer, free once the reduction completed.
        let mut result = if self.rank == 0 {
            let mut sum = Heap::new(vec![0f32; values.len()]);
            // SAFETY: as in `agree_on_len`.
            let request = unsafe {
                root.immediate_reduce_into_root(
                    StaticScope,
                    send.lend(),
                    sum.lend(),
                    SystemOperation::sum(),
                )
            };
            self.wait(OP, request, (start, timeout), Peers::Present)?;
            // SAFETY: the request completed.
            drop(unsafe { send.free() });
            sum
        } else {
            // SAFETY: as in `agree_on_len`.
            let request = unsafe {
                root.immediate_reduce_into(StaticScope, send.lend(), SystemOperation::sum())
            };
            self.wait(OP, request, (start, timeout), Peers::Present)?;
            send
        };
        // SAFETY: as in `agree_on_len`.
        let request = unsafe { root.immediate_broadcast_into(StaticScope, result.lend()) };
        self.wait(OP, request, (start, timeout), Peers::Present)?;
        // SAFETY: the request completed.
        values.copy_from_slice(&unsafe { result.free() });
        Ok(())
    }

    fn broadcast(
        &self,
        values: &mut [f32],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        self.broadcast_slice("broadcast", values, root, timeout)
    }

    fn broadcast_bytes(
        &self,
        bytes: &mut [u8],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        self.broadcast_slice("broadcast_bytes", bytes, root, timeout)
    }

    /// `MPI_Ireduce_scatter_block`: each rank receives the complete sum of its block only (the
    /// library's algorithm may route partial sums of other blocks through it).
    fn reduce_scatter_sum(
        &self,
        send: &[f32],
        recv: &mut [f32],
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        const OP: &str = "reduce_scatter_sum";
        let start = Instant::now();
        self.usable(OP)?;
        super::check_blocks(OP, send.len(), recv.len(), self.size)?;
        self.agree_on_len(OP, send.len(), start, timeout)?;
        if recv.is_empty() || self.size == 1 {
            recv.copy_from_slice(&send[..recv.len()]);
            return Ok(());
        }
        let mut sent = Heap::new(send.to_vec());
        let mut block = Heap::new(vec![0f32; recv.len()]);
        // SAFETY: as in `agree_on_len`.
        let request = unsafe {
            self.comm.immediate_reduce_scatter_block_into(
                StaticScope,
                sent.lend(),
                block.lend(),
                SystemOperation::sum(),
            )
        };
        self.wait(OP, request, (start, timeout), Peers::Present)?;
        // SAFETY: the request completed.
        drop(unsafe { sent.free() });
        recv.copy_from_slice(&unsafe { block.free() });
        Ok(())
    }

    /// `MPI_Iallgather`: bytes copied, the same on every rank.
    fn all_gather(
        &self,
        send: &[f32],
        recv: &mut [f32],
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        const OP: &str = "all_gather";
        let start = Instant::now();
        self.usable(OP)?;
        super::check_blocks(OP, recv.len(), send.len(), self.size)?;
        self.agree_on_len(OP, send.len(), start, timeout)?;
        if send.is_empty() || self.size == 1 {
            recv.copy_from_slice(send);
            return Ok(());
        }
        let mut sent = Heap::new(send.to_vec());
        let mut all = Heap::new(vec![0f32; recv.len()]);
        // SAFETY: as in `agree_on_len`.
        let request = unsafe {
            self.comm
                .immediate_all_gather_into(StaticScope, sent.lend(), all.lend())
        };
        self.wait(OP, request, (start, timeout), Peers::Present)?;
        // SAFETY: the request completed.
        drop(unsafe { sent.free() });
        recv.copy_from_slice(&unsafe { all.free() });
        Ok(())
    }

    fn scatters(&self) -> bool {
        true
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        if self.broken.get().is_some() {
            // A collective is still in flight: MPI_Finalize (and freeing its communicator) could
            // wait for it forever. Exit without them; mpirun stops the job.
            std::mem::forget(self.universe.take());
        } else {
            // SAFETY: dropped once, here, before `universe` finalizes MPI.
            unsafe { ManuallyDrop::drop(&mut self.comm) };
        }
    }
}

/// The exit code of a process whose MPI start-up or shutdown passed its deadline
/// ([`Mpi::init_within`], [`Mpi::finalize_within`]), as `timeout(1)`'s.
pub const DEADLINE_EXIT_CODE: i32 = 124;

/// A deadline on a blocking call that cannot time out by itself: armed before the call,
/// disarmed when dropped after it; if the call has not returned when the deadline passes, a
/// thread of its own prints what hung and ends the process ([`DEADLINE_EXIT_CODE`]).
struct Deadline {
    done: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl Deadline {
    fn arm(what: &'static str, within: Duration) -> Self {
        let done = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let watched = done.clone();
        std::thread::spawn(move || {
            let (lock, signal) = &*watched;
            let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
            let (finished, _) = signal
                .wait_timeout_while(guard, within, |finished| !*finished)
                .unwrap_or_else(|e| e.into_inner());
            if !*finished {
                eprintln!(
                    "burn-vmap: {what} did not complete within {within:?}: a peer of the job never \
                     started, stopped, or died; exiting with code {DEADLINE_EXIT_CODE}"
                );
                std::process::exit(DEADLINE_EXIT_CODE);
            }
        });
        Self { done }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let (lock, signal) = &*self.done;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        signal.notify_all();
    }
}

/// A heap buffer lent to a non-blocking MPI operation, which may read or write it until the
/// request completes: it has no destructor, so it is freed only by [`free`](Self::free) after
/// completion and leaked on every other path (a timeout).
struct Heap<T>(*mut [T]);

impl<T> Heap<T> {
    fn new(values: Vec<T>) -> Self {
        Self(Box::into_raw(values.into_boxed_slice()))
    }

    /// The buffer for one request.
    ///
    /// # Safety
    /// At most one request holds the buffer at a time, and nothing else touches it until that
    /// request completes.
    unsafe fn lend(&mut self) -> &'static mut [T] {
        unsafe { &mut *self.0 }
    }

    /// The values, freeing the buffer.
    ///
    /// # Safety
    /// No request holding the buffer is in flight.
    unsafe fn free(self) -> Vec<T> {
        unsafe { Box::from_raw(self.0) }.into_vec()
    }
}
