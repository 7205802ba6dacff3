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
//! - the timeout bounds the read back of the result: it runs on a helper thread, and when the
//!   timeout passes the call returns [`CollectiveError::Timeout`] while the helper stays blocked
//!   on the device (the NCCL operation is in flight and Burn cannot abort it). The engine refuses
//!   later collectives; stop the process.
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
    devices: Arc<[Device]>,
    rank: usize,
    /// The collective that timed out, if one did: the engine refuses work from then on.
    broken: Cell<Option<&'static str>>,
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
                devices: devices.clone(),
                rank,
                broken: Cell::new(None),
            })
            .collect()
    }

    /// This rank's device.
    pub fn device(&self) -> &Device {
        &self.devices[self.rank]
    }

    fn usable(&self, operation: &'static str) -> Result<(), CollectiveError> {
        match self.broken.get() {
            None => Ok(()),
            Some(earlier) => Err(CollectiveError::Engine(format!(
                "{operation} refused on rank {}: {earlier} timed out earlier and is still in \
                 flight on the device; stop the process",
                self.rank
            ))),
        }
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

    /// Reads `tensor` back before `timeout` (from `start`) passes.
    fn read(
        &self,
        operation: &'static str,
        tensor: Tensor<1>,
        start: Instant,
        timeout: Duration,
    ) -> Result<Vec<f32>, CollectiveError> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(tensor.try_into_data());
        });
        let remaining = timeout.saturating_sub(start.elapsed());
        match rx.recv_timeout(remaining) {
            Ok(Ok(data)) => data
                .try_into_vec_as::<f32>()
                .map_err(|e| CollectiveError::Engine(format!("{operation}: {e:?}"))),
            Ok(Err(e)) => Err(CollectiveError::Engine(format!("{operation}: {e:?}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.broken.set(Some(operation));
                Err(CollectiveError::Timeout {
                    operation,
                    waited: start.elapsed(),
                    rank: self.rank,
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(CollectiveError::Engine(format!(
                "{operation}: reading the result back panicked"
            ))),
        }
    }

    /// Every rank's length, compared with rank 0's.
    fn agree_on_len(
        &self,
        operation: &'static str,
        len: usize,
        start: Instant,
        timeout: Duration,
    ) -> Result<(), CollectiveError> {
        let size = self.devices.len();
        let mut lens = vec![0f32; 2 * size];
        lens[2 * self.rank] = (len % HALF) as f32;
        lens[2 * self.rank + 1] = (len / HALF) as f32;
        let lens = self.read(operation, self.sum(self.upload(lens)), start, timeout)?;
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

    fn broadcast_f32(
        &self,
        operation: &'static str,
        values: Vec<f32>,
        root: usize,
        timeout: Duration,
    ) -> Result<Vec<f32>, CollectiveError> {
        let start = Instant::now();
        self.usable(operation)?;
        check_root(operation, root, self.size())?;
        self.agree_on_len(operation, values.len(), start, timeout)?;
        if values.is_empty() || self.size() == 1 {
            return Ok(values);
        }
        let out = self.root_values(self.upload(values), root);
        self.read(operation, out, start, timeout)
    }
}

impl Collective for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.devices.len()
    }

    fn all_reduce_sum(&self, values: &mut [f32], timeout: Duration) -> Result<(), CollectiveError> {
        const OP: &str = "all_reduce_sum";
        let start = Instant::now();
        self.usable(OP)?;
        self.agree_on_len(OP, values.len(), start, timeout)?;
        if values.is_empty() || self.size() == 1 {
            return Ok(());
        }
        let sum = self.sum(self.upload(values.to_vec()));
        let sum = self.read(OP, self.root_values(sum, 0), start, timeout)?;
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
