//! [`DistributedDp`]: DP-SGD's mechanism over the processes of a data-parallel job, and its
//! checkpoints ([`DistributedDp::save_checkpoint`], [`load_checkpoint`](super::load_checkpoint), in `checkpoint.rs`).
//!
//! One step, on every rank `r` of `n`, over a gradient of `d` coordinates in `n` slices
//! (`exchange.rs` lays the blocks out):
//!
//! ```text
//! sum = clipped_sum(model, my_batch)         # my shard's Poisson batch, no noise (zeros if empty)
//! mine = reduce_scatter_sum(sum by slice ++ [failed?, fingerprint] in every block)
//!                                            # the complete sum of MY slice, every rank's flags
//! account one step                           # every rank's ε is the one-process ε
//! noised = (mine + noise) / B                # my generator, std calibrated to all d
//! update = all_gather(noised ++ [failed?])   # every slice, copied: the same bits on each rank
//! ```
//!
//! Each rank samples its shard with Poisson sampling at the mechanism's `q`: every example of
//! the union joins independently with probability `q`, which is Poisson sampling of the union,
//! the mechanism the accountant assumes. Every coordinate of the total gets its noise exactly
//! once, drawn by the rank that owns it from that rank's own generator (the hardened noise is
//! drawn independently per coordinate, its standard deviation calibrated to all `d`): one
//! mechanism's noise, its cost split across the ranks. The noise goes on the total, never on a
//! shard's sum: a floating-point addition of private values after the noise would undo the
//! hardened noise's protection (a released value would no longer be a function of its noised
//! grid point alone).
//!
//! **What a rank sees.** With an engine whose reduce-scatter is its own (MPI,
//! [`Collective::scatters`]) a rank receives the complete un-noised sum of its own slice only,
//! `1/n` of it (the library's algorithm may route partial sums of other slices, of some ranks'
//! contributions, through it); the two collectives move about half the data of two
//! all-reduces. With the default reduce-scatter (an all-reduce) every rank sees the whole
//! un-noised sum. The statement says which.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::module::{Module, ModuleDisplay};
use burn::optim::ModuleOptimizer;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::store::ModuleRecord;
use burn::tensor::{Bytes, Device, Tensor};

use super::exchange::{Blocks, Flag};
use super::{Collective, CollectiveError, agree, flatten_grads, unflatten_grads};
use crate::ParamGrads;
use crate::privacy::{
    DpLoader, DpMechanism, DpRecord, DpStatement, PrivacyError, Sampled, StepReport,
};
use crate::tree::Tree;

/// What a data-parallel DP step can fail with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DistributedError {
    /// This rank's part of the step failed (its batch, its budget, its per-example gradients);
    /// it still took part in the step's collectives, so the other ranks return
    /// [`Peers`](Self::Peers). Nothing was released; the step was accounted on every rank when
    /// a rank's failure came after reading its batch (as [`DpMechanism::noisy_gradient`]).
    #[error(transparent)]
    Privacy(#[from] PrivacyError),
    /// A collective failed: [`CollectiveError::Timeout`] when a peer is stalled or dead (stop
    /// the job and restart it from its last checkpoint). A step whose all-gather failed was
    /// accounted on every rank that reached it.
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    /// The step failed on other ranks (each returns its own error); nothing was released on
    /// any rank, every rank's batch was consumed, and the step was accounted on every rank when
    /// a failure came after reading a batch.
    #[error(
        "distributed DP: {operation} failed on rank(s) {ranks:?} (see their error); nothing was \
         released on any rank"
    )]
    Peers {
        /// The step, or the checkpoint's load.
        operation: &'static str,
        /// The ranks whose part failed.
        ranks: Vec<usize>,
    },
    /// The ranks' models differ (parameters or constants, compared by fingerprint every
    /// [`fingerprint_every`](DistributedDp::with_fingerprint_every) steps): a rank started from
    /// its own initial parameters (no [`sync_module`](DistributedDp::sync_module)), or stepped
    /// with another learning rate or optimizer. Nothing was released; the step is not accounted
    /// (the models are public). Every rank returns it.
    #[error(
        "distributed DP: the models of rank(s) {ranks:?} differ from rank 0's at step {step} \
         (parameters or constants): start every rank from rank 0's model (sync_module) and step \
         every rank with the same optimizer and learning rate"
    )]
    Diverged {
        /// The ranks whose model differs from rank 0's.
        ranks: Vec<usize>,
        /// The step (the number of steps accounted before it, plus one).
        step: u64,
    },
    /// The ranks' mechanisms differ (settings, steps taken, budget): every rank must build its
    /// mechanism from the same configuration, or resume from the same record.
    #[error(
        "distributed DP: the mechanisms of rank(s) {ranks:?} differ from rank 0's (settings, \
         steps or budget): build every rank's from the same DpConfig, or resume every rank \
         from the same checkpoint"
    )]
    Disagree {
        /// The ranks whose mechanism differs from rank 0's.
        ranks: Vec<usize>,
    },
    /// A checkpoint could not be written or read.
    #[error("distributed DP: checkpoint {path}: {message}")]
    Checkpoint {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl DistributedError {
    /// Whether a collective timed out: a peer is stalled or dead, and the job must stop (the
    /// collective cannot be cancelled) and restart from its last checkpoint.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Self::Collective(CollectiveError::Timeout { .. })
                | Self::Collective(CollectiveError::Engine(_))
        )
    }
}

/// DP-SGD's [`DpMechanism`] across the ranks of a [`Collective`]: every rank holds the same
/// model and samples its own shard of the data at the same `q`; the clipped sums are summed
/// over the ranks, the noise is added once to the total (each rank noises its own slice of the
/// coordinates) and the noised update is assembled with the same bits on every rank, so the
/// parameters stay bit-identical; every rank accounts every step, so each one's ε is the ε of
/// one mechanism on the union of the shards.
///
/// ```text
/// for step in 0..steps:                   # on every rank
///     batch = my_shard_loader.next_batch()  # Poisson at q; possibly empty: still takes part
///     model = dp.step(&mut optimizer, lr, model, loss, batch)
///     if rank == 0 and step % k == 0: dp.save_checkpoint(dir, &model, &optimizer)
/// ```
///
/// **Trust model**: the peers are trusted. Each rank sees its own shard and, of the step's
/// clipped sum without noise, the complete sum of its own slice of the coordinates when the
/// engine has its own reduce-scatter (MPI; see the module docs), else the whole sum; the
/// guarantee ([`statement`](Self::statement)) is for the released parameters.
///
/// Every method that takes part in a collective says so: every rank calls it, in the same
/// order. A rank whose own part of a step fails (its batch, its budget, its model) still takes
/// part, so the others get [`DistributedError::Peers`] at once instead of a timeout.
///
/// On one process, with [`Local`](super::Local):
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use burn::data::dataloader::batcher::Batcher;
/// use burn::data::dataset::InMemDataset;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::SgdConfig;
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::distributed::{DistributedDp, Local};
/// use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring};
///
/// #[derive(Clone)]
/// struct Rows;
/// impl Batcher<[f32; 2], Tensor<2>> for Rows {
///     fn batch(&self, items: Vec<[f32; 2]>, device: &Device) -> Tensor<2> {
///         let rows = items.iter().map(|r| Tensor::<1>::from_floats(*r, device).unsqueeze()).collect();
///         Tensor::cat(rows, 0)
///     }
/// }
///
/// let device = Device::default();
/// let config = DpConfig::new(1.0, 1.0, 0.1, Neighbouring::AddRemove { expected_batch_size: 10.0 });
/// // Under mpirun: `Mpi::init()?` as the engine, every rank with its own shard.
/// let mut dp = DistributedDp::new(DpMechanism::new(config)?, Local, Duration::from_secs(60))?;
/// let shard: Vec<[f32; 2]> = (0..100).map(|i| [i as f32 / 100.0, 1.0]).collect();
/// let mut loader = dp.loader(Arc::new(InMemDataset::new(shard)), Arc::new(Rows), device.clone())?;
/// let model: Linear = LinearConfig::new(2, 1).init(&device);
/// let mut model = dp.sync_module(model)?; // rank 0's initial parameters on every rank
/// let mut optimizer = SgdConfig::new().init();
/// let loss = |m: &Linear, x: Tensor<2>| m.forward(x).sum();
/// for _ in 0..3 {
///     let batch = loader.next_batch()?;
///     (model, _) = dp.step(&mut optimizer, 0.1, model, loss, batch)?;
/// }
/// assert_eq!(dp.mechanism().steps(), 3);
/// assert_eq!(dp.statement()?.processes, Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DistributedDp<C: Collective> {
    mechanism: DpMechanism,
    engine: C,
    timeout: Duration,
    /// The models are compared every this many steps.
    fingerprint_every: u64,
}

impl<C: Collective> std::fmt::Debug for DistributedDp<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedDp")
            .field("mechanism", &self.mechanism)
            .field("rank", &self.engine.rank())
            .field("size", &self.engine.size())
            .field("timeout", &self.timeout)
            .field("fingerprint_every", &self.fingerprint_every)
            .finish()
    }
}

/// The step's name in errors.
const STEP: &str = "the DP step";

impl<C: Collective> DistributedDp<C> {
    /// `mechanism` across the ranks of `engine`, every collective bounded by `timeout`; the
    /// models are compared every step ([`with_fingerprint_every`](Self::with_fingerprint_every)).
    /// **Collective**: the ranks check that their mechanisms agree (settings, steps, budget), and
    /// when any rank's generator is seeded every rank's statement says "NOT PRIVATE". Each
    /// rank's generators move to a stream of their own (the rank's), so ranks seeded alike
    /// ([`DpMechanism::seeded`] with one seed) still draw independent noise and samples.
    ///
    /// # Errors
    /// [`DistributedError::Disagree`] naming the ranks whose mechanism differs from rank 0's;
    /// [`DistributedError::Collective`].
    pub fn new(
        mut mechanism: DpMechanism,
        engine: C,
        timeout: Duration,
    ) -> Result<Self, DistributedError> {
        let (rank, size) = (engine.rank(), engine.size());
        let mine = mechanism.record().unseeded();
        let root = share(&engine, 0, || Ok(Some(mine.to_bytes()?)), timeout)?;
        let differs = match root.as_deref().map(DpRecord::from_bytes) {
            Some(Ok(r)) => r.unseeded() != mine,
            _ => true,
        };
        // Per rank: [differs, seeded].
        let mut flags = vec![0f32; 2 * size];
        flags[2 * rank] = f32::from(u8::from(differs));
        flags[2 * rank + 1] = f32::from(u8::from(mechanism.is_seeded()));
        engine.all_reduce_sum(&mut flags, timeout)?;
        let ranks: Vec<usize> = (0..size).filter(|r| flags[2 * r] > 0.0).collect();
        if !ranks.is_empty() {
            return Err(DistributedError::Disagree { ranks });
        }
        if (0..size).any(|r| flags[2 * r + 1] > 0.0) {
            mechanism.mark_seeded();
        }
        mechanism.separate_rank(rank as u64);
        Ok(Self {
            mechanism,
            engine,
            timeout,
            fingerprint_every: 1,
        })
    }

    /// Compares the ranks' models every `steps` steps (default: every step) instead: a
    /// fingerprint of every parameter's values and of the model's constants, carried by the
    /// step's first collective, read back from the device on the steps it is taken (a model's
    /// size in host traffic). A rank whose model differs fails every rank's step with
    /// [`DistributedError::Diverged`].
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] (as [`DistributedError::Privacy`]) for `steps = 0`.
    pub fn with_fingerprint_every(mut self, steps: u64) -> Result<Self, DistributedError> {
        if steps == 0 {
            return Err(PrivacyError::Argument {
                argument: "steps",
                expected: "compare the models every k >= 1 steps",
                got: "0".into(),
            }
            .into());
        }
        self.fingerprint_every = steps;
        Ok(self)
    }

    /// Rank 0's `seed` on every rank: for what every rank must draw alike, first of all the
    /// split of the data into shards (a rank started with another seed would split it otherwise,
    /// and an example in two shards is sampled twice). **Collective.**
    ///
    /// # Errors
    /// [`DistributedError::Collective`].
    pub fn shared_seed(&self, seed: u64) -> Result<u64, DistributedError> {
        agree::from_rank(&self.engine, 0, seed, self.timeout)
    }

    /// The mechanism (ε, the record, the configuration).
    pub fn mechanism(&self) -> &DpMechanism {
        &self.mechanism
    }

    /// The engine (its rank and size; `Mpi::abort` after a timeout).
    pub fn engine(&self) -> &C {
        &self.engine
    }

    /// The timeout of every collective.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.engine.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.engine.size()
    }

    /// The mechanism and the engine.
    pub fn into_parts(self) -> (DpMechanism, C) {
        (self.mechanism, self.engine)
    }

    /// The loader of this rank's `shard`: Poisson sampling at the mechanism's `q` (the shards
    /// together: Poisson sampling of their union). **Collective**: the shards' sizes are summed,
    /// and under the replace-one relation their total must be the public `N`. A rank may have an
    /// empty shard: its batches are empty, and it takes part in every step.
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] (as [`DistributedError::Privacy`]) when the shards do not add
    /// up to the replace-one relation's `N`; [`DistributedError::Collective`].
    pub fn loader<I, O>(
        &self,
        shard: Arc<dyn Dataset<I>>,
        batcher: Arc<dyn Batcher<I, O>>,
        device: Device,
    ) -> Result<DpLoader<I, O>, DistributedError> {
        let total = agree::sum_counts(&self.engine, &[shard.len() as u64], self.timeout)?[0];
        Ok(self
            .mechanism
            .shard_loader(shard, batcher, device, total as usize)?)
    }

    /// `module` with rank 0's parameters on every rank, bit for bit (sent as Burn's module
    /// record): call it once before training, so that every rank starts from the same model.
    /// **Collective**.
    ///
    /// # Errors
    /// [`DistributedError::Checkpoint`] when rank 0's record cannot be written or this rank's
    /// module does not take it (another architecture); [`DistributedError::Peers`] on the
    /// other ranks when rank 0 fails; [`DistributedError::Collective`].
    pub fn sync_module<M: Module>(&self, module: M) -> Result<M, DistributedError> {
        let bytes = share(
            &self.engine,
            0,
            || Ok(Some(module_bytes(&module, Path::new("the module"))?)),
            self.timeout,
        )?
        .expect("rank 0 always sends a record");
        load_module(module, bytes, Path::new("rank 0's module"))
    }

    /// The privatized gradient of one data-parallel step of `model` on this rank's `batch`
    /// (sampled by this rank's [`loader`](Self::loader)): this rank's clipped sum, summed over
    /// every rank, noised once (each rank noises its slice of the coordinates), divided by the
    /// configuration's normaliser, the same bits on every rank; the step accounted on every
    /// rank. The report counts this rank's examples. **Collective.**
    ///
    /// # Errors
    /// - [`DistributedError::Privacy`]: this rank's batch, budget or gradients failed (as
    ///   [`DpMechanism::noisy_gradient`]); [`DistributedError::Peers`]: another rank's did.
    ///   Either way nothing was released on any rank and every rank's batch was consumed; the
    ///   step was accounted on every rank when a failure came after reading a batch (it depends
    ///   on the data, and every rank sees it);
    /// - [`DistributedError::Collective`]: a collective failed; [`CollectiveError::Timeout`]
    ///   within about `timeout` when a peer is stalled or dead. The step's collective is still
    ///   in flight: stop the job and restart it from the last checkpoint.
    pub fn noisy_gradient<M, A, F>(
        &mut self,
        model: &M,
        loss_fn: F,
        batch: Sampled<A>,
    ) -> Result<(ParamGrads, StepReport), DistributedError>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let (rank, size) = (self.engine.rank(), self.engine.size());
        // This rank's noise, started before its clipped sum (hardened noise is drawn on a thread
        // of its own meanwhile): the slice it noises is known from the model alone.
        let dims = ParamGrads::trainable_dims(STEP, model).map_err(PrivacyError::from)?;
        let mine = Blocks::new(dims, size, false).range(rank).len();
        let device = model.devices().into_iter().next().unwrap_or_default();
        let noise = self.mechanism.start_part_noise(mine, dims, &device)?;
        let (sum, local) = match self.mechanism.clipped_sum(model, loss_fn, batch) {
            Ok((sum, report)) => (sum, Ok(report)),
            // Takes part with zeros, so the peers learn of the failure instead of timing out.
            Err(e) => (self.mechanism.zeros(model)?, Err(e)),
        };
        // This rank's flag (1: it failed before reading its batch, 2: after) and, on the steps
        // the models are compared, its model's fingerprint, carried in every block.
        let step = self.mechanism.steps() + 1;
        let compare = (step - 1).is_multiple_of(self.fingerprint_every);
        let flag = Flag {
            failed: match &local {
                Ok(_) => 0.0,
                Err(failure) if failure.read => 2.0,
                Err(_) => 1.0,
            },
            print: compare.then(|| agree::fingerprint(model)),
        };
        let flat = flatten_grads(&sum);
        let blocks = Blocks::new(flat.len(), size, compare);
        let mut mine = vec![0f32; blocks.width()];
        self.engine
            .reduce_scatter_sum(&blocks.pack(&flat, rank, flag), &mut mine, self.timeout)?;
        drop(flat);
        let received = blocks.unpack(&mine, rank);
        let failed: Vec<usize> = (0..size).filter(|&r| received.failed[r] > 0.0).collect();
        if !failed.is_empty() {
            // A failure that depends on a rank's data is seen by every rank: every rank
            // accounts the step, so their accountants stay the one-process accountant.
            if received.failed.iter().any(|&f| f > 1.5) {
                self.mechanism.account_released()?;
            }
            return Err(match local {
                Err(failure) => (*failure.error).into(),
                Ok(_) => DistributedError::Peers {
                    operation: STEP,
                    ranks: failed,
                },
            });
        }
        let report = local.map_err(|f| *f.error)?;
        if !received.diverged.is_empty() {
            return Err(DistributedError::Diverged {
                ranks: received.diverged,
                step,
            });
        }

        // Every rank noises the complete sum of its own slice (every coordinate once, each
        // rank's generator its own); the all-gather copies the noised slices, the same bits on
        // every rank.
        // The noise calibrated to every coordinate of the gradient, `blocks.len()`.
        debug_assert_eq!(blocks.len(), dims);
        // Every rank has read its slice of the total by now: the step is accounted, failed or
        // not, before the slices go out (a rank whose all-gather fails has accounted it as the
        // ranks that completed it have: their accountants stay equal).
        self.mechanism.account_released()?;
        let noised = self.mechanism.noise_part(noise, received.sum, &device);
        let block = blocks.gathered_block(noised.as_deref().ok());
        let mut gathered = blocks.gathered_buffer();
        self.engine
            .all_gather(&block, &mut gathered, self.timeout)?;
        noised?;
        let update = blocks
            .assemble(&gathered)
            .map_err(|ranks| DistributedError::Peers {
                operation: STEP,
                ranks,
            })?;
        // In the parameters' dtype (the local sum was taken wider; the ranks exchange f32).
        let update = unflatten_grads(sum, &update)?;
        Ok((
            update.cast_like(STEP, model).map_err(PrivacyError::from)?,
            report,
        ))
    }

    /// One data-parallel DP-SGD step: [`noisy_gradient`](Self::noisy_gradient), then
    /// `optimizer` steps `model` with learning rate `lr` (the model in training mode, as
    /// [`DpSgd::step`](crate::privacy::DpSgd::step) returns it). Every rank applies the same
    /// bits with the same optimizer, so the parameters stay bit-identical. **Collective.**
    ///
    /// # Errors
    /// As [`noisy_gradient`](Self::noisy_gradient); the optimizer does not run.
    pub fn step<M, A, F>(
        &mut self,
        optimizer: &mut ModuleOptimizer,
        lr: impl Into<ModuleLearningRate>,
        model: M,
        loss_fn: F,
        batch: Sampled<A>,
    ) -> Result<(M, StepReport), DistributedError>
    where
        M: Module + ModuleDisplay + 'static,
        A: Tree + 'static,
        F: Fn(&M, A) -> Tensor<1> + Send + Sync + 'static,
    {
        let (grads, report) = self.noisy_gradient(&model, loss_fn, batch)?;
        Ok((crate::privacy::apply(optimizer, lr, model, grads), report))
    }

    /// ε so far at the configured δ (as [`DpMechanism::epsilon`]; the same on every rank).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn epsilon(&self) -> Result<f64, PrivacyError> {
        self.mechanism.epsilon()
    }

    /// What the run guarantees and assumes ([`DpStatement`]), with the number of processes and
    /// the trust model (the peers are trusted; the guarantee is for the released parameters).
    ///
    /// # Errors
    /// [`PrivacyError::Accounting`].
    pub fn statement(&self) -> Result<DpStatement, PrivacyError> {
        let mut statement = self.mechanism.statement()?;
        statement.processes = Some(self.engine.size());
        statement.scattered = self.engine.scatters();
        Ok(statement)
    }
}

pub(super) fn checkpoint_error(path: &Path, e: impl std::fmt::Display) -> DistributedError {
    DistributedError::Checkpoint {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// The module's record as burnpack bytes.
pub(super) fn module_bytes<M: Module>(
    module: &M,
    path: &Path,
) -> Result<Vec<u8>, DistributedError> {
    let bytes = module
        .clone()
        .into_record()
        .into_bytes()
        .map_err(|e| checkpoint_error(path, e))?;
    Ok(bytes.to_vec())
}

/// `module` with the record in `bytes`.
pub(super) fn load_module<M: Module>(
    module: M,
    bytes: Vec<u8>,
    path: &Path,
) -> Result<M, DistributedError> {
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes))
        .map_err(|e| checkpoint_error(path, e))?;
    module
        .try_load_record(record)
        .map_err(|e| checkpoint_error(path, e))
}

/// What `root` makes with `make`, on every rank: `Ok(None)` when it made nothing,
/// [`DistributedError::Peers`] on the other ranks when it failed (`root` returns its own
/// error). **Collective.**
pub(super) fn share<C: Collective + ?Sized>(
    engine: &C,
    root: usize,
    make: impl FnOnce() -> Result<Option<Vec<u8>>, DistributedError>,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, DistributedError> {
    const NOTHING: u64 = u64::MAX;
    const FAILED: u64 = u64::MAX - 1;
    let (mut made, mut failure) = (None, None);
    let mut header = [0u8; 8];
    if engine.rank() == root {
        let len = match make() {
            Ok(Some(bytes)) => {
                let len = bytes.len() as u64;
                made = Some(bytes);
                len
            }
            Ok(None) => NOTHING,
            Err(e) => {
                failure = Some(e);
                FAILED
            }
        };
        header = len.to_le_bytes();
    }
    engine.broadcast_bytes(&mut header, root, timeout)?;
    match u64::from_le_bytes(header) {
        FAILED => Err(failure.unwrap_or(DistributedError::Peers {
            operation: "a record from rank 0",
            ranks: vec![root],
        })),
        NOTHING => Ok(None),
        len => {
            let mut bytes = made.unwrap_or_else(|| vec![0; len as usize]);
            engine.broadcast_bytes(&mut bytes, root, timeout)?;
            Ok(Some(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::Local;

    #[test]
    fn should_share_nothing_or_a_failure() {
        let none = share(&Local, 0, || Ok(None), Duration::ZERO).unwrap();
        assert_eq!(none, None);
        let bytes = share(&Local, 0, || Ok(Some(vec![1, 2])), Duration::ZERO).unwrap();
        assert_eq!(bytes, Some(vec![1, 2]));
        let err = share(
            &Local,
            0,
            || {
                Err(DistributedError::Checkpoint {
                    path: "x".into(),
                    message: "gone".into(),
                })
            },
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(matches!(err, DistributedError::Checkpoint { .. }), "{err}");
    }

    /// One rank whose peers stall after the reduce-scatter: its all-gather times out.
    struct GatherTimesOut;

    impl Collective for GatherTimesOut {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            1
        }
        fn all_reduce_sum(&self, _: &mut [f32], _: Duration) -> Result<(), CollectiveError> {
            Ok(())
        }
        fn broadcast(&self, _: &mut [f32], _: usize, _: Duration) -> Result<(), CollectiveError> {
            Ok(())
        }
        fn broadcast_bytes(
            &self,
            _: &mut [u8],
            _: usize,
            _: Duration,
        ) -> Result<(), CollectiveError> {
            Ok(())
        }
        fn all_gather(&self, _: &[f32], _: &mut [f32], t: Duration) -> Result<(), CollectiveError> {
            Err(CollectiveError::Timeout {
                operation: "all_gather",
                waited: t,
                rank: 0,
            })
        }
    }

    /// A rank whose all-gather fails has read its slice of the sum: it accounts the step, as
    /// the ranks that completed the all-gather do (their accountants stay equal).
    #[test]
    fn should_account_a_step_whose_all_gather_failed() {
        use burn::data::dataloader::batcher::Batcher;
        use burn::data::dataset::InMemDataset;
        use burn::nn::{Linear, LinearConfig};

        #[derive(Clone)]
        struct Rows;
        impl Batcher<f32, Tensor<2>> for Rows {
            fn batch(&self, items: Vec<f32>, device: &Device) -> Tensor<2> {
                let n = items.len();
                let values = items.into_iter().flat_map(|v| [v, 1.0]).collect::<Vec<_>>();
                Tensor::from_data(burn::tensor::TensorData::new(values, [n, 2]), device)
            }
        }
        let config = crate::privacy::DpConfig::new(
            1.0,
            1.0,
            1.0,
            crate::privacy::Neighbouring::AddRemove {
                expected_batch_size: 4.0,
            },
        );
        let mechanism = DpMechanism::new(config).unwrap();
        let mut dp = DistributedDp::new(mechanism, GatherTimesOut, Duration::ZERO).unwrap();
        let device = Device::default();
        let data = Arc::new(InMemDataset::new(vec![1.0f32, 2.0, 3.0, 4.0]));
        let mut loader = dp.loader(data, Arc::new(Rows), device.clone()).unwrap();
        let model: Linear = LinearConfig::new(2, 1).init(&device);
        let loss = |m: &Linear, x: Tensor<2>| m.forward(x).sum();
        let err = dp
            .noisy_gradient(&model, loss, loader.next_batch().unwrap())
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert_eq!(dp.mechanism().steps(), 1, "the step is accounted");
    }
}
