//! [`DpRecord`]: a mechanism's state as a Burn record (burnpack scalars), to save beside the
//! model's and the optimizer's and resume from.

use std::path::Path;

use burn_pack::{Reader, Scalar, Writer};

use super::config::DpConfig;
use super::{Neighbouring, NoiseKind, PrivacyError};

/// The format version this crate writes and reads.
const VERSION: u64 = 1;

/// The saved state of a [`DpMechanism`](super::DpMechanism): its settings, the steps it
/// released, its budget, and whether a seeded generator was ever used (a resumed run stays
/// "not private" then). Never its generators: a resumed run draws fresh noise.
///
/// Stored in Burn's burnpack format (named scalars), as Burn 0.22 stores optimizer and
/// learning-rate scheduler state. Its fields are read-only: a record comes from a mechanism
/// ([`DpMechanism::record`](super::DpMechanism::record)) or from its bytes, whose settings are
/// checked as [`DpMechanism::new`](super::DpMechanism::new) checks them, so no edit of a record
/// in code can relabel a seeded run as private or restart ε (a file edited by hand is outside
/// what any record can prevent: keep checkpoints where the training run alone writes).
///
/// ```
/// use burn_vmap::privacy::{DpConfig, DpMechanism, DpRecord, Neighbouring};
/// let config = DpConfig::new(1.0, 1.1, 0.01, Neighbouring::ReplaceOne { dataset_size: 1000 });
/// let dp = DpMechanism::new(config)?;
/// let path = std::env::temp_dir().join(format!("dp-record-doc-{}.bpk", std::process::id()));
/// dp.record().save(&path)?;
/// let record = DpRecord::load(&path)?;
/// assert_eq!((record.steps(), record.is_seeded()), (0, false));
/// let resumed = DpMechanism::from_record(record)?;
/// assert_eq!(resumed.steps(), dp.steps());
/// assert_eq!(resumed.config(), dp.config());
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), burn_vmap::privacy::PrivacyError>(())
/// ```
///
/// A record cannot be edited: a seeded run stays "not private", and ε cannot restart.
///
/// ```compile_fail
/// use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring};
/// let config = DpConfig::new(1.0, 1.1, 0.01, Neighbouring::ReplaceOne { dataset_size: 1000 });
/// let mut record = DpMechanism::seeded(config, 7).unwrap().record();
/// record.seeded = false; // private field
/// record.steps = 0; // private field
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpRecord {
    pub(super) config: DpConfig,
    pub(super) steps: u64,
    pub(super) budget: Option<(f64, f64)>,
    pub(super) seeded: bool,
}

impl DpRecord {
    /// The settings.
    pub fn config(&self) -> &DpConfig {
        &self.config
    }

    /// Steps released and accounted.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The budget `(ε, δ)`, if any.
    pub fn budget(&self) -> Option<(f64, f64)> {
        self.budget
    }

    /// Whether a seeded generator was used at some point of the run (then it is not private).
    pub fn is_seeded(&self) -> bool {
        self.seeded
    }

    /// The record with another microbatch size, the one setting that changes no released value
    /// (a resumed run may bound its memory differently).
    ///
    /// # Errors
    /// [`PrivacyError::Argument`] for a microbatch size of 0.
    pub fn with_microbatch_size(mut self, size: Option<usize>) -> Result<Self, PrivacyError> {
        self.config.microbatch_size = size;
        self.config.validate()?;
        Ok(self)
    }

    /// The record as a resumed data-parallel rank compares it with its peers': every field but
    /// whether a generator was seeded (a peer's seeded generator marks every rank's run).
    pub(crate) fn unseeded(mut self) -> Self {
        self.seeded = false;
        self
    }

    /// Every field in its domain, as [`DpMechanism::new`](super::DpMechanism::new) and
    /// [`with_budget`](super::DpMechanism::with_budget) check them.
    fn validated(self) -> Result<Self, PrivacyError> {
        self.config.validate()?;
        if let Some((epsilon, delta)) = self.budget {
            super::config::check(
                epsilon.is_finite() && epsilon > 0.0,
                "epsilon",
                "a finite budget ε > 0",
                epsilon,
            )?;
            super::config::check(delta > 0.0 && delta < 1.0, "delta", "a δ in (0, 1)", delta)?;
        }
        Ok(self)
    }
}

impl DpRecord {
    fn scalars(&self) -> Vec<(&'static str, Scalar)> {
        let c = &self.config;
        let mut s = vec![
            ("dp.version", Scalar::UInt(VERSION)),
            ("dp.steps", Scalar::UInt(self.steps)),
            ("dp.seeded", Scalar::Bool(self.seeded)),
            ("dp.clip_norm", Scalar::Float(c.clip_norm)),
            ("dp.noise_multiplier", Scalar::Float(c.noise_multiplier)),
            ("dp.sampling_rate", Scalar::Float(c.sampling_rate)),
            ("dp.delta", Scalar::Float(c.delta)),
            ("dp.per_layer", Scalar::Bool(c.per_layer)),
            (
                "dp.microbatch_size",
                Scalar::UInt(c.microbatch_size.unwrap_or(0) as u64),
            ),
        ];
        if let NoiseKind::Hardened { granularity } = c.noise {
            s.push(("dp.noise.granularity", Scalar::Float(granularity)));
        }
        match c.neighbouring {
            Neighbouring::AddRemove {
                expected_batch_size,
            } => s.push((
                "dp.add_remove.expected_batch_size",
                Scalar::Float(expected_batch_size),
            )),
            Neighbouring::ReplaceOne { dataset_size } => s.push((
                "dp.replace_one.dataset_size",
                Scalar::UInt(dataset_size as u64),
            )),
        }
        if let Some((epsilon, delta)) = self.budget {
            s.push(("dp.budget.epsilon", Scalar::Float(epsilon)));
            s.push(("dp.budget.delta", Scalar::Float(delta)));
        }
        s
    }

    fn writer(&self) -> Writer {
        self.scalars()
            .into_iter()
            .fold(Writer::new(Vec::new()), |w, (k, v)| w.with_scalar(k, v))
    }

    fn from_reader(reader: &Reader) -> Result<Self, PrivacyError> {
        let scalars = reader.scalars();
        let missing = |key: &'static str| PrivacyError::Record {
            message: format!("no scalar `{key}`"),
        };
        let get = |key: &'static str| scalars.get(key).copied();
        let uint = |key| match get(key) {
            Some(Scalar::UInt(v)) => Ok(v),
            _ => Err(missing(key)),
        };
        let float = |key| match get(key) {
            Some(Scalar::Float(v)) => Ok(v),
            _ => Err(missing(key)),
        };
        let boolean = |key| match get(key) {
            Some(Scalar::Bool(v)) => Ok(v),
            _ => Err(missing(key)),
        };
        let version = uint("dp.version")?;
        if version != VERSION {
            return Err(PrivacyError::Record {
                message: format!("format version {version}, this crate reads {VERSION}"),
            });
        }
        let neighbouring = match (
            float("dp.add_remove.expected_batch_size"),
            uint("dp.replace_one.dataset_size"),
        ) {
            (Ok(expected_batch_size), Err(_)) => Neighbouring::AddRemove {
                expected_batch_size,
            },
            (Err(_), Ok(n)) => Neighbouring::ReplaceOne {
                dataset_size: n as usize,
            },
            _ => {
                return Err(PrivacyError::Record {
                    message: "not exactly one neighbouring relation".into(),
                });
            }
        };
        let microbatch = uint("dp.microbatch_size")? as usize;
        let budget = match (float("dp.budget.epsilon"), float("dp.budget.delta")) {
            (Ok(e), Ok(d)) => Some((e, d)),
            _ => None,
        };
        Self {
            config: DpConfig {
                clip_norm: float("dp.clip_norm")?,
                noise_multiplier: float("dp.noise_multiplier")?,
                sampling_rate: float("dp.sampling_rate")?,
                neighbouring,
                delta: float("dp.delta")?,
                microbatch_size: (microbatch > 0).then_some(microbatch),
                per_layer: boolean("dp.per_layer")?,
                noise: match float("dp.noise.granularity") {
                    Ok(granularity) => NoiseKind::Hardened { granularity },
                    Err(_) => NoiseKind::Plain,
                },
            },
            steps: uint("dp.steps")?,
            budget,
            seeded: boolean("dp.seeded")?,
        }
        .validated()
    }

    /// Writes the record to a burnpack file at `path`.
    ///
    /// # Errors
    /// [`PrivacyError::Record`] when the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), PrivacyError> {
        self.writer()
            .overwrite(true)
            .auto_extension(false)
            .write_to_file(path)
            .map_err(record_error)
    }

    /// Reads a record written by [`save`](Self::save).
    ///
    /// # Errors
    /// [`PrivacyError::Record`] for a missing file, another format, or a missing field;
    /// [`PrivacyError::Argument`] for a setting out of its domain.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, PrivacyError> {
        Self::from_reader(&Reader::from_file(path).map_err(record_error)?)
    }

    /// The record as burnpack bytes.
    ///
    /// # Errors
    /// [`PrivacyError::Record`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, PrivacyError> {
        Ok(self.writer().into_bytes().map_err(record_error)?.to_vec())
    }

    /// A record from burnpack bytes.
    ///
    /// # Errors
    /// [`PrivacyError::Record`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, PrivacyError> {
        let bytes = burn_pack::Bytes::from_bytes_vec(bytes.to_vec());
        Self::from_reader(&Reader::from_bytes(bytes).map_err(record_error)?)
    }
}

fn record_error(e: impl std::fmt::Display) -> PrivacyError {
    PrivacyError::Record {
        message: e.to_string(),
    }
}
