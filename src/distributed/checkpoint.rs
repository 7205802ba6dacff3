//! Checkpoints of a data-parallel DP run: [`DistributedDp::save_checkpoint`] writes the model's,
//! the optimizer's and the mechanism's records on rank 0; [`load_checkpoint`] reads them on
//! rank 0 and sends them to every rank.

use std::path::{Path, PathBuf};
use std::time::Duration;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Bytes;

use super::Collective;
use super::dp::{
    DistributedDp, DistributedError, checkpoint_error, load_module, module_bytes, share,
};
use crate::privacy::DpRecord;

impl<C: Collective> DistributedDp<C> {
    /// Saves the run's state on rank 0 (the other ranks hold the same bits and write nothing):
    /// the model's record, the optimizer's and the mechanism's ([`DpRecord`]), in
    /// `dir/step-<steps>/`, then `dir/latest` names it (written aside and renamed, so a crash
    /// leaves the previous checkpoint in force) and older checkpoints are removed.
    /// [`load_checkpoint`] resumes from it. Not collective.
    ///
    /// The steps taken after the last checkpoint are lost with a crash and are not in its ε: do
    /// not publish parameters of a crashed run that no checkpoint holds.
    ///
    /// # Errors
    /// [`DistributedError::Checkpoint`] naming the file that could not be written.
    pub fn save_checkpoint<M: Module>(
        &self,
        dir: impl AsRef<Path>,
        model: &M,
        optimizer: &ModuleOptimizer,
    ) -> Result<(), DistributedError> {
        if self.engine().rank() != 0 {
            return Ok(());
        }
        let dir = dir.as_ref();
        let name = format!("step-{:010}", self.mechanism().steps());
        let step_dir = dir.join(&name);
        std::fs::create_dir_all(&step_dir).map_err(|e| io_error(&step_dir, e))?;
        let optimizer_bytes = optimizer
            .into_bytes()
            .map_err(|e| checkpoint_error(&step_dir.join(OPTIMIZER), e))?;
        let files = [
            (MODEL, module_bytes(model, &step_dir.join(MODEL))?),
            (OPTIMIZER, optimizer_bytes.to_vec()),
            (MECHANISM, self.mechanism().record().to_bytes()?),
        ];
        for (file, bytes) in files {
            write_aside(&step_dir.join(file), &bytes)?;
        }
        write_aside(&dir.join(LATEST), name.as_bytes())?;
        // Older checkpoints go once `latest` names the new one.
        for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
            let path = entry.map_err(|e| io_error(dir, e))?.path();
            let old = path.file_name().and_then(|f| f.to_str()).is_some_and(|f| {
                f.starts_with("step-") && f != name && !f.ends_with(".tmp") && path.is_dir()
            });
            if old {
                std::fs::remove_dir_all(&path).map_err(|e| io_error(&path, e))?;
            }
        }
        Ok(())
    }
}

/// A run's state read back by [`load_checkpoint`].
pub struct Checkpoint<M> {
    /// The model, with the saved parameters.
    pub model: M,
    /// The optimizer, with the saved state.
    pub optimizer: ModuleOptimizer,
    /// The mechanism's saved state (`None` when `dir` holds no checkpoint: the model and the
    /// optimizer are then the ones given). Resume with
    /// [`DpMechanism::from_record`](crate::privacy::DpMechanism::from_record) and [`DistributedDp::new`].
    pub record: Option<DpRecord>,
}

impl<M: std::fmt::Debug> std::fmt::Debug for Checkpoint<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("model", &self.model)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// The last checkpoint [`DistributedDp::save_checkpoint`] wrote in `dir`, on every rank:
/// rank 0 reads it and sends it to the others (no shared filesystem is needed), and every rank
/// loads the saved parameters into `model` and the saved state into `optimizer`. When `dir`
/// holds no checkpoint, `record` is `None` and the model and the optimizer are returned as
/// given. **Collective.**
///
/// ```text
/// let ck = load_checkpoint(&engine, dir, model, optimizer, timeout)?;
/// let mechanism = match ck.record {
///     Some(record) => DpMechanism::from_record(record)?,  // ε continues; fresh noise
///     None => DpMechanism::new(config)?,                   // a new run
/// };
/// let dp = DistributedDp::new(mechanism, engine, timeout)?;
/// ```
///
/// # Errors
/// [`DistributedError::Checkpoint`] on rank 0 when a file cannot be read, and on a rank whose
/// model does not take the saved record; [`DistributedError::Peers`] on the other ranks when
/// rank 0 fails; [`DistributedError::Collective`].
pub fn load_checkpoint<C: Collective + ?Sized, M: Module>(
    engine: &C,
    dir: impl AsRef<Path>,
    model: M,
    optimizer: ModuleOptimizer,
    timeout: Duration,
) -> Result<Checkpoint<M>, DistributedError> {
    let dir = dir.as_ref();
    let read = || -> Result<Option<Vec<u8>>, DistributedError> {
        let latest = dir.join(LATEST);
        let name = match std::fs::read_to_string(&latest) {
            Ok(name) => name,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&latest, e)),
        };
        // Three files in one message: each length (8 bytes), then the bytes.
        let mut message = Vec::new();
        for file in [MODEL, OPTIMIZER, MECHANISM] {
            let path = dir.join(name.trim()).join(file);
            let bytes = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
            message.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            message.extend_from_slice(&bytes);
        }
        Ok(Some(message))
    };
    let Some(message) = share(engine, 0, read, timeout)? else {
        return Ok(Checkpoint {
            model,
            optimizer,
            record: None,
        });
    };
    let mut parts = Vec::new();
    let mut rest = message.as_slice();
    while rest.len() >= 8 {
        let (len, tail) = rest.split_at(8);
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let (part, tail) = tail.split_at(len.min(tail.len()));
        parts.push(part.to_vec());
        rest = tail;
    }
    let [model_bytes, optimizer_bytes, record_bytes]: [Vec<u8>; 3] =
        parts.try_into().map_err(|_| DistributedError::Checkpoint {
            path: dir.to_owned(),
            message: "not the three records of a checkpoint".into(),
        })?;
    let model = load_module(model, model_bytes, &dir.join(MODEL))?;
    let optimizer = optimizer
        .from_bytes(Bytes::from_bytes_vec(optimizer_bytes))
        .map_err(|e| checkpoint_error(&dir.join(OPTIMIZER), e))?;
    Ok(Checkpoint {
        model,
        optimizer,
        record: Some(DpRecord::from_bytes(&record_bytes)?),
    })
}

/// The files of a checkpoint.
const MODEL: &str = "model.bpk";
const OPTIMIZER: &str = "optimizer.bpk";
const MECHANISM: &str = "dp.bpk";
const LATEST: &str = "latest";

/// `bytes` written to `path` through a file beside it, flushed to the disk (`fsync`), renamed,
/// and the rename flushed (`fsync` of the directory): after a crash, or a power loss, `path` is
/// the old file or the new one, never a part or an empty file (a rename can reach the disk
/// before the data it names, without the first `fsync`).
fn write_aside(path: &Path, bytes: &[u8]) -> Result<(), DistributedError> {
    use std::io::Write;
    let mut aside = path.as_os_str().to_owned();
    aside.push(".tmp");
    let aside = PathBuf::from(aside);
    let mut file = std::fs::File::create(&aside).map_err(|e| io_error(&aside, e))?;
    file.write_all(bytes).map_err(|e| io_error(&aside, e))?;
    file.sync_all().map_err(|e| io_error(&aside, e))?;
    drop(file);
    std::fs::rename(&aside, path).map_err(|e| io_error(path, e))?;
    sync_dir(path)
}

/// Flushes the directory holding `path` (its entries: a rename or a new file), where the
/// platform can open a directory (Unix); elsewhere a no-op.
fn sync_dir(path: &Path) -> Result<(), DistributedError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> DistributedError {
    checkpoint_error(path, e)
}
