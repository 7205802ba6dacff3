//! [`Nccl`]: the [`Collective`] engine over Burn 0.22's all-reduce
//! ([`burn::tensor::distributed::all_reduce`], `DistributedOps::all_reduce`), which the CUDA
//! backend runs through NCCL, for several CUDA devices of one process.
//!
//! Burn 0.22 has an all-reduce (sum or mean) and nothing else: no reduce, no broadcast, no
//! cancellation. The engine builds what the trait asks from it:
//!
//! - a broadcast from `root` is an all-reduce where every other rank contributes zeros:
//!   `x + 0 + ... + 0 == x` exactly in IEEE arithmetic, in any order (a `-0.0` arrives as
//!   `+0.0`, on every rank alike), so the root's bits arrive everywhere;
//! - [`all_reduce_sum`](Collective::all_reduce_sum) is an all-reduce followed by that broadcast
//!   from rank 0, on the device, with one read back: NCCL does not promise that every rank's sum
//!   has the same bits, the broadcast makes it so;
//! - lengths are compared first by an all-reduce of every rank's length (two exact `f32` halves
//!   per rank, zeros elsewhere), so a mismatch is a typed error on every rank, not a hang;
//! - the timeout bounds the whole call: the communicator's start-up (Burn creates it at the
//!   group's first all-reduce), the length agreement, the enqueue and the read back run on a
//!   helper thread, and when the timeout passes the call returns [`CollectiveError::Timeout`]
//!   while the helper stays blocked (the NCCL operation is in flight and Burn cannot abort it).
//!   The engine refuses later collectives; stop the process.
//!
//! Each rank's engine runs on its own thread, as NCCL requires of a group driven from one
//! process (one thread issuing every rank's call in turn waits on the first one's peers, and
//! times out).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use burn::tensor::distributed::{ReduceOperation, all_reduce};
use burn::tensor::{DType, Device, Tensor, TensorData};

use super::{Collective, CollectiveError, check_root};

/// Exact in `f32`: lengths are split in halves below `2^24`.
const HALF: usize = 1 << 24;

/// One CUDA device of a group of devices in this process, as a [`Collective`] rank.
///
/// ```no_run
/// use std::time::Duration;
/// use burn::tensor::Device;
/// use burn_vmap::distributed::{Collective, nccl::Nccl};
///
/// # fn devices() -> Vec<Device> { unimplemented!() }
/// let devices: Vec<Device> = devices(); // two CUDA devices
/// let handles: Vec<_> = Nccl::group(devices)
///     .into_iter()
///     .map(|engine| {
///         std::thread::spawn(move || {
///             let mut sum = vec![engine.rank() as f32; 4];
///             engine.all_reduce_sum(&mut sum, Duration::from_secs(30)).unwrap();
///             sum
///         })
///     })
///     .collect();
/// for h in handles {
///     assert_eq!(h.join().unwrap(), vec![1.0; 4]);
/// }
/// ```
#[derive(Debug)]
pub struct Nccl {
    member: Member,
    /// The collective that timed out, if one did: the engine refuses work from then on.
    broken: Cell<Option<&'static str>>,
}

/// What a rank's collectives run with, moved to the helper thread that runs each of them.
#[derive(Debug, Clone)]
struct Member {
    devices: Arc<[Device]>,
    rank: usize,
}

impl Nccl {
    /// One engine per device, rank `i` on `devices[i]`: move each to its own thread.
    ///
    /// # Panics
    /// When `devices` is empty.
    pub fn group(devices: Vec<Device>) -> Vec<Nccl> {
        assert!(!devices.is_empty(), "Nccl::group: no device");
        let devices: Arc<[Device]> = devices.into();
        (0..devices.len())
            .map(|rank| Nccl {
                member: Member {
                    devices: devices.clone(),
                    rank,
                },
                broken: Cell::new(None),
            })
            .collect()
    }

    /// This rank's device.
    pub fn device(&self) -> &Device {
        self.member.device()
    }

    fn usable(&self, operation: &'static str) -> Result<(), CollectiveError> {
        match self.broken.get() {
            None => Ok(()),
            Some(earlier) => Err(CollectiveError::Engine(format!(
                "{operation} refused on rank {}: {earlier} timed out earlier and is still in \
                 flight on the device; stop the process",
                self.member.rank
            ))),
        }
    }

    /// Runs `job` (a whole collective: the length agreement, the enqueue, the read back) on a
    /// helper thread, and waits for it at most `timeout`. On a timeout the helper stays blocked
    /// in the operation (Burn cannot abort it) and the engine refuses later work.
    fn within<T: Send + 'static>(
        &self,
        operation: &'static str,
        timeout: Duration,
        job: impl FnOnce(&Member) -> Result<T, CollectiveError> + Send + 'static,
    ) -> Result<T, CollectiveError> {
        let start = Instant::now();
        self.usable(operation)?;
        let (tx, rx) = mpsc::channel();
        let member = self.member.clone();
        std::thread::spawn(move || {
            let _ = tx.send(job(&member));
        });
        match rx.recv_timeout(timeout) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.broken.set(Some(operation));
                Err(CollectiveError::Timeout {
                    operation,
                    waited: start.elapsed(),
                    rank: self.member.rank,
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(CollectiveError::Engine(format!(
                "{operation}: the collective panicked on rank {}",
                self.member.rank
            ))),
        }
    }

    fn broadcast_f32(
        &self,
        operation: &'static str,
        values: Vec<f32>,
        root: usize,
        timeout: Duration,
    ) -> Result<Vec<f32>, CollectiveError> {
        check_root(operation, root, self.size())?;
        self.within(operation, timeout, move |m| {
            m.agree_on_len(operation, values.len())?;
            if values.is_empty() || m.size() == 1 {
                return Ok(values);
            }
            let out = m.root_values(m.upload(values), root);
            m.read(operation, out)
        })
    }
}

impl Member {
    fn device(&self) -> &Device {
        &self.devices[self.rank]
    }

    fn size(&self) -> usize {
        self.devices.len()
    }

    fn upload(&self, values: Vec<f32>) -> Tensor<1> {
        let n = values.len();
        Tensor::from_data(TensorData::new(values, [n]), (self.device(), DType::F32))
    }

    /// The sum of `tensor` over the group, on this rank's device (not yet read).
    fn sum(&self, tensor: Tensor<1>) -> Tensor<1> {
        all_reduce(tensor, ReduceOperation::Sum, self.devices.to_vec()).resolve()
    }

    /// `tensor` on rank `root`, zeros elsewhere, summed: rank `root`'s bits on every rank.
    fn root_values(&self, tensor: Tensor<1>, root: usize) -> Tensor<1> {
        let contribution = if self.rank == root {
            tensor
        } else {
            tensor.zeros_like()
        };
        self.sum(contribution)
    }

    /// Reads `tensor` back (blocking: the caller bounds it, [`Nccl::within`]).
    fn read(
        &self,
        operation: &'static str,
        tensor: Tensor<1>,
    ) -> Result<Vec<f32>, CollectiveError> {
        tensor
            .try_into_data()
            .map_err(|e| CollectiveError::Engine(format!("{operation}: {e:?}")))?
            .try_into_vec_as::<f32>()
            .map_err(|e| CollectiveError::Engine(format!("{operation}: {e:?}")))
    }

    /// Every rank's length, compared with rank 0's.
    fn agree_on_len(&self, operation: &'static str, len: usize) -> Result<(), CollectiveError> {
        let size = self.size();
        let mut lens = vec![0f32; 2 * size];
        lens[2 * self.rank] = (len % HALF) as f32;
        lens[2 * self.rank + 1] = (len / HALF) as f32;
        let lens = self.read(operation, self.sum(self.upload(lens)))?;
        let lens: Vec<usize> = lens
            .chunks(2)
            .map(|c| c[0] as usize + c[1] as usize * HALF)
            .collect();
        match lens.iter().position(|&l| l != lens[0]) {
            None => Ok(()),
            Some(rank) => Err(CollectiveError::Mismatch {
                operation,
                expected: lens[0],
                got: lens[rank],
                rank: Some(rank),
            }),
        }
    }
}

impl Collective for Nccl {
    fn rank(&self) -> usize {
        self.member.rank
    }

    fn size(&self) -> usize {
        self.member.size()
    }

    fn all_reduce_sum(&self, values: &mut [f32], timeout: Duration) -> Result<(), CollectiveError> {
        const OP: &str = "all_reduce_sum";
        let input = values.to_vec();
        let sum = self.within(OP, timeout, move |m| {
            m.agree_on_len(OP, input.len())?;
            if input.is_empty() || m.size() == 1 {
                return Ok(input);
            }
            let sum = m.sum(m.upload(input));
            m.read(OP, m.root_values(sum, 0))
        })?;
        values.copy_from_slice(&sum);
        Ok(())
    }

    fn broadcast(
        &self,
        values: &mut [f32],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let out = self.broadcast_f32("broadcast", values.to_vec(), root, timeout)?;
        values.copy_from_slice(&out);
        Ok(())
    }

    /// Bytes travel as `f32` values (integers below 256: exact).
    fn broadcast_bytes(
        &self,
        bytes: &mut [u8],
        root: usize,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let values = bytes.iter().map(|&b| f32::from(b)).collect();
        let out = self.broadcast_f32("broadcast_bytes", values, root, timeout)?;
        for (b, v) in bytes.iter_mut().zip(out) {
            *b = v as u8;
        }
        Ok(())
    }
}
