//! Training checkpoints (`kolm.checkpoint.v1`): what a fine-tune job writes
//! every N steps so that a killed run resumes and ends byte-identical to one
//! that was never interrupted. Documented in `docs/jobs.md`, "Checkpoints".
//!
//! A checkpoint is a directory `step-<N>/` holding exactly two files:
//!
//! - `tensors.safetensors`: named f32 tensors, each `<group>/<name>` (the
//!   caller picks groups such as `param`, `adam_m`, `adam_v`, `lora_a`,
//!   `lora_b`), in the byte form the `safetensors` crate writes (no
//!   `__metadata__`);
//! - `state.json`: RFC 8785 canonical JSON with the step, the job's and the
//!   base model's SHA-256 (a checkpoint only resumes the job that wrote it),
//!   the trainer's RNG state, the data loader's position, the optimizer's
//!   step count, and the tensor file's size, SHA-256 and tensor list.
//!
//! The reader is strict: the state must be canonical with no unknown field,
//! the tensor file must have the stated size and digest, its header must list
//! exactly the stated tensors with the stated dtype and shape, contiguous and
//! in bounds, and the file must be the one byte form the writer produces.
//! Nothing here reads the clock.
//!
//! [`write`] is atomic: the files go into `step-<N>.tmp-<random>/`, are
//! fsynced with that directory, and the directory is renamed to `step-<N>/`
//! and the parent fsynced. A crash leaves either the old set of checkpoints
//! or the new one (plus a temp directory that [`latest`] removes). Older
//! checkpoints beyond the `keep` newest are removed only once the new one is
//! durable, each first renamed to a temp name so that a crash mid-removal
//! never leaves a half checkpoint under a complete name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use kolm_format::hexbytes::{HexBytes, HexVec, Sha256Digest};
use kolm_format::jcs;

/// `schema` of `state.json`.
pub const CHECKPOINT_SCHEMA_V1: &str = "kolm.checkpoint.v1";

/// The state file inside `step-<N>/`.
pub const STATE_FILE: &str = "state.json";

/// The tensor file inside `step-<N>/`.
pub const TENSORS_FILE: &str = "tensors.safetensors";

/// Largest `state.json` read. It lists every tensor (about 100 bytes each): a
/// 135M-parameter model with two Adam moments lists under a thousand.
pub const MAX_STATE_BYTES: u64 = 8 * 1024 * 1024;

/// Largest integer `state.json` holds as a JSON number: RFC 8785 writes
/// numbers as IEEE doubles, which are exact only up to 2^53 - 1 (the I-JSON
/// limit, RFC 7493). Bigger values (the permutation seed) are hex strings.
pub const MAX_JSON_INT: u64 = (1 << 53) - 1;

/// Longest RNG state accepted (opaque bytes the trainer defines).
pub const MAX_RNG_STATE_BYTES: usize = 1024;

/// Longest group (`param`, `adam_m`, ...): lower-case ASCII, digits, `_`.
const MAX_GROUP_LEN: usize = 32;

/// Longest tensor name after the group: ASCII letters, digits, `_ . - /`.
const MAX_NAME_LEN: usize = 200;

/// Directory name prefix of a checkpoint, and the infix of a temp directory.
const STEP_PREFIX: &str = "step-";
const TMP_INFIX: &str = ".tmp-";

/// Why a checkpoint was refused (on write or on read), naming the check.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    // The OS error is part of the message and not a `source`: callers
    // print the message (`kolm-train` wraps it as `checkpoint: {0}`, the
    // enclave sends `to_string()`), and a chain printer such as anyhow's
    // `{:#}` would print a source a second time.
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    #[error("no system randomness for a temp directory name")]
    Random,
    #[error("{STATE_FILE} is over the {max}-byte cap")]
    StateTooLarge { max: u64 },
    #[error("{STATE_FILE} is not a valid {CHECKPOINT_SCHEMA_V1} document: {0}")]
    StateJson(serde_json::Error),
    #[error("{STATE_FILE} schema is {0:?}, expected {CHECKPOINT_SCHEMA_V1}")]
    Schema(String),
    #[error(
        "{STATE_FILE} is not in its RFC 8785 canonical form (first difference at byte {offset})"
    )]
    StateNotCanonical { offset: usize },
    #[error("cannot write {STATE_FILE}: {0}")]
    StateSerialize(String),
    #[error("{field} is {value}, over {MAX_JSON_INT} (2^53 - 1), the largest exact JSON number")]
    NotJsonSafe { field: &'static str, value: u64 },
    #[error("step {step} is after total_steps {total_steps}")]
    StepAfterTotal { step: u64, total_steps: u64 },
    #[error("optimizer.step {optimizer_step} is after step {step}")]
    OptimizerStepAfterStep { optimizer_step: u64, step: u64 },
    #[error("rng_state is {len} bytes; it must be 1 to {MAX_RNG_STATE_BYTES}")]
    RngStateLength { len: usize },
    #[error("tensor name {name:?} is not `<group>/<name>`: {reason}")]
    TensorName { name: String, reason: &'static str },
    #[error("tensor {name} has shape {shape:?} ({elements} elements) but {data_len} values")]
    TensorData {
        name: String,
        shape: Vec<usize>,
        elements: String,
        data_len: usize,
    },
    #[error("tensor {name} is listed twice or out of order (the list is sorted by name)")]
    TensorOrder { name: String },
    #[error("tensor {name} is listed in {STATE_FILE} but absent from {TENSORS_FILE}")]
    TensorMissing { name: String },
    #[error("tensor {name} is in {TENSORS_FILE} but not listed in {STATE_FILE}")]
    TensorExtra { name: String },
    #[error("tensor {name} is {found} in {TENSORS_FILE}, {STATE_FILE} lists {listed}")]
    TensorDtype {
        name: String,
        listed: String,
        found: String,
    },
    #[error("tensor {name} has shape {found:?} in {TENSORS_FILE}, {STATE_FILE} lists {listed:?}")]
    TensorShape {
        name: String,
        listed: Vec<u64>,
        found: Vec<usize>,
    },
    #[error("{TENSORS_FILE} is {len} bytes, over the {max}-byte cap")]
    TensorsTooLarge { len: u64, max: u64 },
    #[error("{TENSORS_FILE} is {found} bytes, {STATE_FILE} says {stated}")]
    TensorsSize { stated: u64, found: u64 },
    #[error("{TENSORS_FILE} has SHA-256 {found}, {STATE_FILE} says {expected}")]
    TensorsDigest {
        expected: Sha256Digest,
        found: Sha256Digest,
    },
    #[error("{TENSORS_FILE} is truncated in its {what}: needs {need} bytes, has {len}")]
    TensorsTruncated {
        what: &'static str,
        need: u64,
        len: u64,
    },
    #[error("{TENSORS_FILE} header is not valid: {0}")]
    TensorsHeader(String),
    #[error(
        "{TENSORS_FILE} header: data_offsets of {name} overlap the previous tensor or leave a \
         gap (each tensor starts where the one before ends)"
    )]
    TensorsOffsets { name: String },
    #[error(
        "{TENSORS_FILE} header: a tensor's data_offsets span does not match its dtype and shape"
    )]
    TensorsSpan,
    #[error(
        "{TENSORS_FILE} header: tensor data ends at byte {declared_end}, past the end of the \
         {len}-byte file (truncated, or data_offsets out of bounds)"
    )]
    TensorsOutOfBounds { declared_end: u64, len: u64 },
    #[error(
        "{TENSORS_FILE} has {trailing} bytes after the last tensor's data (which ends at byte \
         {declared_end})"
    )]
    TensorsTrailing { declared_end: u64, trailing: u64 },
    #[error("{TENSORS_FILE} header has __metadata__, which checkpoints never write")]
    TensorsMetadata,
    #[error("tensor {name} is {dtype}; checkpoints hold only F32 tensors")]
    TensorsUnsupportedDtype { name: String, dtype: String },
    #[error(
        "{TENSORS_FILE} is not in the one byte form the writer produces (first difference at \
         byte {offset})"
    )]
    TensorsNotCanonical { offset: usize },
    #[error("cannot write {TENSORS_FILE}: {0}")]
    TensorsSerialize(String),
    #[error(
        "checkpoint belongs to another job: its {field} is {checkpoint}, this job's is {expected}"
    )]
    OtherJob {
        field: &'static str,
        checkpoint: Sha256Digest,
        expected: Sha256Digest,
    },
    #[error("{path} holds step {state_step}, its directory name says step {dir_step}")]
    StepDirMismatch {
        path: PathBuf,
        dir_step: u64,
        state_step: u64,
    },
    #[error(
        "{path} is not a checkpoint entry (a checkpoint directory holds only `step-<N>` \
         directories and their temp directories; `step-<N>` holds only {STATE_FILE} and \
         {TENSORS_FILE})"
    )]
    UnexpectedEntry { path: PathBuf },
    #[error("cannot write step {step}: the directory already holds step {newest}")]
    StepNotNewer { step: u64, newest: u64 },
}

/// Where the data loader is: the next example is `permutation[index]` of
/// epoch `epoch`, the permutation drawn from `permutation_seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataLoaderPosition {
    pub epoch: u64,
    pub index: u64,
    /// All 64 bits are kept: written as 16 hex digits, not a JSON number.
    pub permutation_seed: u64,
}

/// The optimizer's scalar state (its moments are tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptimizerState {
    /// Updates applied so far, for AdamW's bias correction.
    pub step: u64,
}

/// Everything in a checkpoint besides the tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainState {
    /// Steps completed; the run resumes with step `step + 1`.
    pub step: u64,
    pub total_steps: u64,
    /// SHA-256 of the job spec's bytes: a checkpoint resumes only its job.
    pub job_spec_sha256: Sha256Digest,
    /// SHA-256 of the base model file.
    pub base_model_sha256: Sha256Digest,
    /// The trainer's RNG state, opaque here (1 to [`MAX_RNG_STATE_BYTES`]).
    pub rng_state: Vec<u8>,
    pub data_loader: DataLoaderPosition,
    pub optimizer: OptimizerState,
}

/// One f32 tensor, `<group>/<name>`, whose value count matches its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    full_name: String,
    group_len: usize,
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl Tensor {
    /// A tensor in `group` (`param`, `adam_m`, ...: lower-case ASCII,
    /// digits and `_`, at most 32) named `name` (ASCII letters, digits and
    /// `_ . - /`, at most 200), with `data` in row-major order.
    pub fn new(
        group: &str,
        name: &str,
        shape: Vec<usize>,
        data: Vec<f32>,
    ) -> Result<Tensor, CheckpointError> {
        let full_name = format!("{group}/{name}");
        check_name_parts(&full_name, group, name)?;
        check_elements(&full_name, &shape, data.len())?;
        Ok(Tensor {
            group_len: group.len(),
            full_name,
            shape,
            data,
        })
    }

    /// `<group>/<name>`, its name in the tensor file.
    pub fn full_name(&self) -> &str {
        &self.full_name
    }

    pub fn group(&self) -> &str {
        self.full_name.get(..self.group_len).unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        // group_len < full_name.len(): a '/' and a non-empty name follow.
        self.full_name
            .get(self.group_len.saturating_add(1)..)
            .unwrap_or_default()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &[f32] {
        &self.data
    }

    pub fn into_data(self) -> Vec<f32> {
        self.data
    }
}

/// A whole checkpoint: the state and its tensors, sorted by full name, no
/// name twice.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    state: TrainState,
    tensors: Vec<Tensor>,
}

/// The newest complete checkpoint of a directory ([`latest`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    /// Its `step-<N>/` directory.
    pub path: PathBuf,
    pub checkpoint: Checkpoint,
}

/// `state.json`, parsed and checked on its own (without the tensor file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    pub state: TrainState,
    /// Size and SHA-256 of `tensors.safetensors`.
    pub tensors_bytes: u64,
    pub tensors_sha256: Sha256Digest,
    /// Every tensor, sorted by full name.
    pub tensors: Vec<TensorEntry>,
}

/// A tensor as `state.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorEntry {
    /// `<group>/<name>`.
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

/// Element type of a checkpoint tensor. Version 1 holds f32 only: master
/// weights and Adam moments are f32 whatever the compute precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Dtype {
    F32,
}

impl Dtype {
    fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
        }
    }
}

// ---- state.json ---------------------------------------------------------

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateDoc {
    schema: String,
    step: u64,
    total_steps: u64,
    job_spec_sha256: Sha256Digest,
    base_model_sha256: Sha256Digest,
    rng_state: HexVec,
    data_loader: DataLoaderDoc,
    optimizer: OptimizerDoc,
    tensors_bytes: u64,
    tensors_sha256: Sha256Digest,
    tensors: Vec<TensorEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DataLoaderDoc {
    epoch: u64,
    index: u64,
    permutation_seed: HexBytes<8>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptimizerDoc {
    step: u64,
}

fn json_safe(field: &'static str, value: u64) -> Result<(), CheckpointError> {
    if value > MAX_JSON_INT {
        return Err(CheckpointError::NotJsonSafe { field, value });
    }
    Ok(())
}

/// The checks `state.json` gets on write and on read.
fn check_state(state: &TrainState) -> Result<(), CheckpointError> {
    json_safe("step", state.step)?;
    json_safe("total_steps", state.total_steps)?;
    json_safe("data_loader.epoch", state.data_loader.epoch)?;
    json_safe("data_loader.index", state.data_loader.index)?;
    json_safe("optimizer.step", state.optimizer.step)?;
    if state.step > state.total_steps {
        return Err(CheckpointError::StepAfterTotal {
            step: state.step,
            total_steps: state.total_steps,
        });
    }
    if state.optimizer.step > state.step {
        return Err(CheckpointError::OptimizerStepAfterStep {
            optimizer_step: state.optimizer.step,
            step: state.step,
        });
    }
    let len = state.rng_state.len();
    if len == 0 || len > MAX_RNG_STATE_BYTES {
        return Err(CheckpointError::RngStateLength { len });
    }
    Ok(())
}

fn check_name_parts(full: &str, group: &str, name: &str) -> Result<(), CheckpointError> {
    let bad = |reason| {
        Err(CheckpointError::TensorName {
            name: full.to_owned(),
            reason,
        })
    };
    if group.is_empty() || group.len() > MAX_GROUP_LEN {
        return bad("the group must be 1 to 32 bytes");
    }
    if !group
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
    {
        return bad("the group may hold only a-z, 0-9 and _");
    }
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return bad("the name must be 1 to 200 bytes");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
    {
        return bad("the name may hold only A-Z, a-z, 0-9 and _ . - /");
    }
    Ok(())
}

/// Splits `<group>/<name>` at its first `/` and checks both parts.
fn check_full_name(full: &str) -> Result<(), CheckpointError> {
    match full.split_once('/') {
        Some((group, name)) => check_name_parts(full, group, name),
        None => Err(CheckpointError::TensorName {
            name: full.to_owned(),
            reason: "no `/` between group and name",
        }),
    }
}

/// The element count of `shape`, or `None` on overflow.
fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn check_elements(name: &str, shape: &[usize], data_len: usize) -> Result<(), CheckpointError> {
    let elements = element_count(shape);
    if elements != Some(data_len) {
        return Err(CheckpointError::TensorData {
            name: name.to_owned(),
            shape: shape.to_vec(),
            elements: elements.map_or_else(|| "more than 2^64".to_owned(), |e| e.to_string()),
            data_len,
        });
    }
    Ok(())
}

fn check_sorted<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), CheckpointError> {
    let mut previous: Option<&str> = None;
    for name in names {
        if previous.is_some_and(|p| p >= name) {
            return Err(CheckpointError::TensorOrder {
                name: name.to_owned(),
            });
        }
        previous = Some(name);
    }
    Ok(())
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

impl StateFile {
    /// The strict reader of `state.json`: at most [`MAX_STATE_BYTES`], no
    /// unknown field, the schema, exactly its canonical bytes (no trailing
    /// bytes, one spelling), integers up to 2^53 - 1, step within
    /// total_steps, optimizer step within step, a non-empty RNG state, and
    /// a tensor list sorted by name with valid names and shapes.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<StateFile, CheckpointError> {
        if u64::try_from(bytes.len())
            .ok()
            .is_none_or(|l| l > MAX_STATE_BYTES)
        {
            return Err(CheckpointError::StateTooLarge {
                max: MAX_STATE_BYTES,
            });
        }
        let doc: StateDoc = serde_json::from_slice(bytes).map_err(CheckpointError::StateJson)?;
        if doc.schema != CHECKPOINT_SCHEMA_V1 {
            return Err(CheckpointError::Schema(doc.schema));
        }
        let file = StateFile {
            state: TrainState {
                step: doc.step,
                total_steps: doc.total_steps,
                job_spec_sha256: doc.job_spec_sha256,
                base_model_sha256: doc.base_model_sha256,
                rng_state: doc.rng_state.0,
                data_loader: DataLoaderPosition {
                    epoch: doc.data_loader.epoch,
                    index: doc.data_loader.index,
                    permutation_seed: u64::from_be_bytes(doc.data_loader.permutation_seed.0),
                },
                optimizer: OptimizerState {
                    step: doc.optimizer.step,
                },
            },
            tensors_bytes: doc.tensors_bytes,
            tensors_sha256: doc.tensors_sha256,
            tensors: doc.tensors,
        };
        // The same checks as on write, then the byte form: re-serialising
        // what was read must give back the input exactly.
        let canonical = file.to_json_bytes()?;
        if canonical != bytes {
            return Err(CheckpointError::StateNotCanonical {
                offset: first_difference(&canonical, bytes),
            });
        }
        Ok(file)
    }

    /// The canonical bytes of `state.json`, after the checks the reader
    /// makes.
    pub fn to_json_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        check_state(&self.state)?;
        json_safe("tensors_bytes", self.tensors_bytes)?;
        check_sorted(self.tensors.iter().map(|t| t.name.as_str()))?;
        for t in &self.tensors {
            check_full_name(&t.name)?;
            for &d in &t.shape {
                json_safe("tensors[].shape", d)?;
            }
        }
        let doc = StateDoc {
            schema: CHECKPOINT_SCHEMA_V1.to_owned(),
            step: self.state.step,
            total_steps: self.state.total_steps,
            job_spec_sha256: self.state.job_spec_sha256,
            base_model_sha256: self.state.base_model_sha256,
            rng_state: HexVec(self.state.rng_state.clone()),
            data_loader: DataLoaderDoc {
                epoch: self.state.data_loader.epoch,
                index: self.state.data_loader.index,
                permutation_seed: HexBytes(self.state.data_loader.permutation_seed.to_be_bytes()),
            },
            optimizer: OptimizerDoc {
                step: self.state.optimizer.step,
            },
            tensors_bytes: self.tensors_bytes,
            tensors_sha256: self.tensors_sha256,
            tensors: self.tensors.clone(),
        };
        jcs::to_canonical_vec(&doc).map_err(|e| CheckpointError::StateSerialize(e.to_string()))
    }
}

// ---- tensors.safetensors ------------------------------------------------

/// A tensor as the file's header declares it, its data borrowed.
struct RawTensor<'a> {
    name: String,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
}

impl safetensors::View for &RawTensor<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// A tensor being written: its data as little-endian bytes.
struct OwnedView<'a> {
    shape: &'a [usize],
    bytes: Vec<u8>,
}

impl safetensors::View for OwnedView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors::Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Bytes before the header JSON: its length, u64 little-endian.
const HEADER_LEN_BYTES: usize = 8;

/// Parses the header and checks its offsets (with the `safetensors` crate,
/// which requires each tensor to start where the one before ends, each span
/// to match its dtype and shape, and the last to end at the end of the file),
/// turning each failure into a typed error.
fn read_raw(bytes: &[u8]) -> Result<Vec<RawTensor<'_>>, CheckpointError> {
    use safetensors::SafeTensorError as E;
    let len = to_u64(bytes.len());
    let (n, metadata) = match safetensors::SafeTensors::read_metadata(bytes) {
        Ok(ok) => ok,
        Err(E::HeaderTooSmall) => {
            return Err(CheckpointError::TensorsTruncated {
                what: "header length",
                need: to_u64(HEADER_LEN_BYTES),
                len,
            });
        }
        Err(E::InvalidHeaderLength | E::HeaderTooLarge) => {
            return Err(CheckpointError::TensorsTruncated {
                what: "header",
                need: header_len(bytes)
                    .unwrap_or(u64::MAX)
                    .saturating_add(to_u64(HEADER_LEN_BYTES)),
                len,
            });
        }
        Err(E::InvalidOffset(name)) => return Err(CheckpointError::TensorsOffsets { name }),
        Err(E::TensorInvalidInfo) => return Err(CheckpointError::TensorsSpan),
        Err(E::MetadataIncompleteBuffer) => return Err(data_end_error(bytes)),
        Err(E::ValidationOverflow) => {
            return Err(CheckpointError::TensorsHeader(
                "a tensor's size (shape times dtype) overflows".to_owned(),
            ));
        }
        Err(e) => return Err(CheckpointError::TensorsHeader(format!("{e:?}"))),
    };
    if metadata.metadata().is_some() {
        return Err(CheckpointError::TensorsMetadata);
    }
    // read_metadata checked that the header and every span lie inside
    // `bytes`; `get` keeps that a checked fact here too.
    let data_start = n.checked_add(HEADER_LEN_BYTES);
    let data =
        data_start
            .and_then(|s| bytes.get(s..))
            .ok_or(CheckpointError::TensorsTruncated {
                what: "header",
                need: to_u64(n).saturating_add(to_u64(HEADER_LEN_BYTES)),
                len,
            })?;
    let mut out = Vec::new();
    for name in metadata.offset_keys() {
        let info = metadata
            .info(&name)
            .ok_or_else(|| CheckpointError::TensorMissing { name: name.clone() })?;
        let (start, end) = info.data_offsets;
        let slice = data
            .get(start..end)
            .ok_or(CheckpointError::TensorsOutOfBounds {
                declared_end: to_u64(end),
                len,
            })?;
        out.push(RawTensor {
            name,
            dtype: info.dtype,
            shape: info.shape.clone(),
            data: slice,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The header's length field (the first 8 bytes, little-endian).
fn header_len(bytes: &[u8]) -> Option<u64> {
    let (first, _) = bytes.split_first_chunk::<HEADER_LEN_BYTES>()?;
    Some(u64::from_le_bytes(*first))
}

/// The header parsed alone (its offsets are valid: `read_metadata` failed
/// only on the file's length), to say where the data should end.
fn data_end_error(bytes: &[u8]) -> CheckpointError {
    let len = to_u64(bytes.len());
    let declared = header_len(bytes)
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| {
            let header = bytes.get(HEADER_LEN_BYTES..HEADER_LEN_BYTES.checked_add(n)?)?;
            let meta: safetensors::tensor::Metadata = serde_json::from_slice(header).ok()?;
            to_u64(meta.data_len()).checked_add(to_u64(n.checked_add(HEADER_LEN_BYTES)?))
        });
    match declared {
        Some(end) if end > len => CheckpointError::TensorsOutOfBounds {
            declared_end: end,
            len,
        },
        Some(end) => CheckpointError::TensorsTrailing {
            declared_end: end,
            trailing: len.saturating_sub(end),
        },
        None => CheckpointError::TensorsHeader("data does not end where the header says".into()),
    }
}

fn dtype_name(d: safetensors::Dtype) -> String {
    format!("{d:?}")
}

/// The file must be what the writer makes of the tensors it holds.
fn check_canonical(raw: &[RawTensor<'_>], bytes: &[u8]) -> Result<(), CheckpointError> {
    let again = safetensors::serialize(raw.iter().map(|t| (t.name.as_str(), t)), None)
        .map_err(|e| CheckpointError::TensorsSerialize(format!("{e:?}")))?;
    if again != bytes {
        return Err(CheckpointError::TensorsNotCanonical {
            offset: first_difference(&again, bytes),
        });
    }
    Ok(())
}

fn decode(raw: &[RawTensor<'_>]) -> Result<Vec<Tensor>, CheckpointError> {
    raw.iter()
        .map(|t| {
            if t.dtype != safetensors::Dtype::F32 {
                return Err(CheckpointError::TensorsUnsupportedDtype {
                    name: t.name.clone(),
                    dtype: dtype_name(t.dtype),
                });
            }
            check_full_name(&t.name)?;
            // Bit patterns are kept as they are (NaN payloads included):
            // a resumed run must see exactly the values that were saved.
            let (words, rest) = t.data.as_chunks::<4>();
            let data: Vec<f32> = words.iter().map(|w| f32::from_le_bytes(*w)).collect();
            // The crate checked span == elements * 4, so `rest` is empty;
            // checked again rather than assumed.
            if !rest.is_empty() {
                return Err(CheckpointError::TensorsSpan);
            }
            check_elements(&t.name, &t.shape, data.len())?;
            let group_len = t.name.find('/').unwrap_or_default();
            Ok(Tensor {
                full_name: t.name.clone(),
                group_len,
                shape: t.shape.clone(),
                data,
            })
        })
        .collect()
}

/// The strict reader of a tensor file on its own (without `state.json`):
/// at most `max_bytes`, a valid header with contiguous in-bounds offsets and
/// no `__metadata__`, only F32 tensors with valid names, and exactly the
/// bytes the writer makes of them.
pub fn read_tensors(bytes: &[u8], max_bytes: u64) -> Result<Vec<Tensor>, CheckpointError> {
    check_cap(bytes, max_bytes)?;
    let raw = read_raw(bytes)?;
    let tensors = decode(&raw)?;
    check_canonical(&raw, bytes)?;
    Ok(tensors)
}

fn check_cap(bytes: &[u8], max_bytes: u64) -> Result<(), CheckpointError> {
    let len = to_u64(bytes.len());
    if len > max_bytes {
        return Err(CheckpointError::TensorsTooLarge {
            len,
            max: max_bytes,
        });
    }
    Ok(())
}

/// `tensors` (sorted by name, names unique: as [`Checkpoint::new`] and
/// [`read_tensors`] keep them) in the one byte form [`read_tensors`]
/// accepts: what the `safetensors` crate writes. A fine-tune artifact's
/// weight files use it too, so that one writer and one reader serve both.
pub fn tensors_to_bytes(tensors: &[Tensor]) -> Result<Vec<u8>, CheckpointError> {
    check_sorted(tensors.iter().map(|t| t.full_name.as_str()))?;
    let views: Vec<(&str, OwnedView<'_>)> = tensors
        .iter()
        .map(|t| {
            let bytes = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            (
                t.full_name.as_str(),
                OwnedView {
                    shape: &t.shape,
                    bytes,
                },
            )
        })
        .collect();
    let tensors = safetensors::serialize(views, None)
        .map_err(|e| CheckpointError::TensorsSerialize(format!("{e:?}")))?;
    Ok(tensors)
}

fn sha256(bytes: &[u8]) -> Sha256Digest {
    HexBytes(Sha256::digest(bytes).into())
}

// ---- a whole checkpoint -------------------------------------------------

impl Checkpoint {
    /// A checkpoint of `state` and `tensors` (any order; no name twice).
    pub fn new(state: TrainState, mut tensors: Vec<Tensor>) -> Result<Checkpoint, CheckpointError> {
        check_state(&state)?;
        tensors.sort_by(|a, b| a.full_name.cmp(&b.full_name));
        check_sorted(tensors.iter().map(|t| t.full_name.as_str()))?;
        Ok(Checkpoint { state, tensors })
    }

    pub fn state(&self) -> &TrainState {
        &self.state
    }

    /// Every tensor, sorted by full name.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensor `<group>/<name>`.
    pub fn tensor(&self, group: &str, name: &str) -> Option<&Tensor> {
        self.tensors
            .iter()
            .find(|t| t.group() == group && t.name() == name)
    }

    pub fn into_parts(self) -> (TrainState, Vec<Tensor>) {
        (self.state, self.tensors)
    }

    /// Refuses a checkpoint written by another job or from another base
    /// model: resuming it would not continue this run.
    pub fn check_resumes(
        &self,
        job_spec_sha256: &Sha256Digest,
        base_model_sha256: &Sha256Digest,
    ) -> Result<(), CheckpointError> {
        for (field, checkpoint, expected) in [
            (
                "job_spec_sha256",
                self.state.job_spec_sha256,
                job_spec_sha256,
            ),
            (
                "base_model_sha256",
                self.state.base_model_sha256,
                base_model_sha256,
            ),
        ] {
            if checkpoint != *expected {
                return Err(CheckpointError::OtherJob {
                    field,
                    checkpoint,
                    expected: *expected,
                });
            }
        }
        Ok(())
    }

    /// The two files' bytes: (`state.json`, `tensors.safetensors`). The
    /// same checkpoint always gives the same bytes.
    pub fn to_bytes(&self) -> Result<(Vec<u8>, Vec<u8>), CheckpointError> {
        let tensors = tensors_to_bytes(&self.tensors)?;
        let state = StateFile {
            state: self.state.clone(),
            tensors_bytes: to_u64(tensors.len()),
            tensors_sha256: sha256(&tensors),
            tensors: self
                .tensors
                .iter()
                .map(|t| TensorEntry {
                    name: t.full_name.clone(),
                    dtype: Dtype::F32,
                    shape: t.shape.iter().map(|&d| to_u64(d)).collect(),
                })
                .collect(),
        }
        .to_json_bytes()?;
        Ok((state, tensors))
    }

    /// The strict reader of a checkpoint's two files: `state.json` as
    /// [`StateFile::from_json_bytes`]; the tensor file at most
    /// `max_tensors_bytes`, of the stated size and SHA-256, its header
    /// valid (contiguous, in-bounds offsets) and listing exactly the stated
    /// tensors with the stated dtype and shape, in the writer's byte form.
    pub fn from_bytes(
        state_json: &[u8],
        tensors: &[u8],
        max_tensors_bytes: u64,
    ) -> Result<Checkpoint, CheckpointError> {
        let state = StateFile::from_json_bytes(state_json)?;
        check_cap(tensors, max_tensors_bytes)?;
        let found = to_u64(tensors.len());
        if found != state.tensors_bytes {
            return Err(CheckpointError::TensorsSize {
                stated: state.tensors_bytes,
                found,
            });
        }
        let digest = sha256(tensors);
        if digest != state.tensors_sha256 {
            return Err(CheckpointError::TensorsDigest {
                expected: state.tensors_sha256,
                found: digest,
            });
        }
        let raw = read_raw(tensors)?;
        compare_lists(&state.tensors, &raw)?;
        let decoded = decode(&raw)?;
        check_canonical(&raw, tensors)?;
        Ok(Checkpoint {
            state: state.state,
            tensors: decoded,
        })
    }
}

/// The file's tensors against the list: both sorted by name.
fn compare_lists(listed: &[TensorEntry], raw: &[RawTensor<'_>]) -> Result<(), CheckpointError> {
    let mut found = raw.iter().peekable();
    for entry in listed {
        // Tensors in the file that sort before this entry are not listed.
        if let Some(extra) = found.next_if(|t| t.name.as_str() < entry.name.as_str()) {
            return Err(CheckpointError::TensorExtra {
                name: extra.name.clone(),
            });
        }
        let Some(t) = found.next_if(|t| t.name == entry.name) else {
            return Err(CheckpointError::TensorMissing {
                name: entry.name.clone(),
            });
        };
        let dtype = dtype_name(t.dtype);
        if dtype != entry.dtype.as_str() {
            return Err(CheckpointError::TensorDtype {
                name: entry.name.clone(),
                listed: entry.dtype.as_str().to_owned(),
                found: dtype,
            });
        }
        if t.shape
            .iter()
            .map(|&d| to_u64(d))
            .ne(entry.shape.iter().copied())
        {
            return Err(CheckpointError::TensorShape {
                name: entry.name.clone(),
                listed: entry.shape.clone(),
                found: t.shape.clone(),
            });
        }
    }
    if let Some(extra) = found.next() {
        return Err(CheckpointError::TensorExtra {
            name: extra.name.clone(),
        });
    }
    Ok(())
}

// ---- the checkpoint directory -------------------------------------------

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CheckpointError {
    let path = path.to_path_buf();
    move |error| CheckpointError::Io { op, path, error }
}

/// `step-<N>` with `N` in its one decimal spelling.
fn parse_step(s: &str) -> Option<u64> {
    let digits = s.strip_prefix(STEP_PREFIX)?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

fn step_dir_name(step: u64) -> String {
    format!("{STEP_PREFIX}{step}")
}

/// A directory entry: a complete checkpoint or a temp directory.
enum Entry {
    Complete(u64),
    Temp,
}

fn classify(name: &str) -> Option<Entry> {
    if let Some(step) = parse_step(name) {
        return Some(Entry::Complete(step));
    }
    let (base, suffix) = name.split_once(TMP_INFIX)?;
    let hex_ok = suffix.len() == 16
        && suffix
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (parse_step(base).is_some() && hex_ok).then_some(Entry::Temp)
}

/// The complete steps (ascending) and temp directories of `dir`; anything
/// else in it is refused. A missing `dir` is empty.
fn scan(dir: &Path) -> Result<(Vec<u64>, Vec<PathBuf>), CheckpointError> {
    let mut steps = Vec::new();
    let mut temps = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((steps, temps)),
        Err(e) => return Err(io_err("read directory", dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err("read directory", dir))?;
        let path = entry.path();
        let is_dir = entry.file_type().map_err(io_err("stat", &path))?.is_dir();
        match entry.file_name().to_str().and_then(classify) {
            Some(Entry::Complete(step)) if is_dir => steps.push(step),
            Some(Entry::Temp) if is_dir => temps.push(path),
            _ => return Err(CheckpointError::UnexpectedEntry { path }),
        }
    }
    steps.sort_unstable();
    Ok((steps, temps))
}

fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err("fsync directory", dir))
}

fn write_file_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("create", path))?;
    f.write_all(bytes).map_err(io_err("write", path))?;
    f.sync_all().map_err(io_err("fsync", path))
}

fn temp_name(step: u64) -> Result<String, CheckpointError> {
    let mut r = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut r)
        .map_err(|_| CheckpointError::Random)?;
    Ok(format!(
        "{}{TMP_INFIX}{}",
        step_dir_name(step),
        hex::encode(r)
    ))
}

/// Writes both files into `tmp`, fsyncs them and `tmp`, and renames `tmp`
/// to `target` (which must not exist: `rename` of a directory onto a
/// non-empty one fails).
fn stage(tmp: &Path, target: &Path, state: &[u8], tensors: &[u8]) -> Result<(), CheckpointError> {
    fs::create_dir(tmp).map_err(io_err("create directory", tmp))?;
    write_file_synced(&tmp.join(TENSORS_FILE), tensors)?;
    write_file_synced(&tmp.join(STATE_FILE), state)?;
    sync_dir(tmp)?;
    fs::rename(tmp, target).map_err(io_err("rename into place", tmp))
}

/// Writes `checkpoint` atomically as `dir/step-<N>/` (creating `dir`), then
/// removes the oldest complete checkpoints so that `keep` remain. Refuses a
/// step not newer than every checkpoint already in `dir` (another run's
/// directory, or a resume that went back): retention would otherwise drop
/// the newer ones. Returns the new checkpoint's directory.
pub fn write(
    dir: &Path,
    checkpoint: &Checkpoint,
    keep: NonZeroUsize,
) -> Result<PathBuf, CheckpointError> {
    let step = checkpoint.state.step;
    if !dir.is_dir() {
        fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    let (steps, _) = scan(dir)?;
    if let Some(&newest) = steps.last()
        && newest >= step
    {
        return Err(CheckpointError::StepNotNewer { step, newest });
    }
    let (state, tensors) = checkpoint.to_bytes()?;

    let tmp = dir.join(temp_name(step)?);
    let target = dir.join(step_dir_name(step));
    if let Err(e) = stage(&tmp, &target, &state, &tensors) {
        // Best effort: a temp directory left behind is removed by `latest`.
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    sync_dir(dir)?;

    // The new checkpoint is durable; only now may older ones go.
    let drop_count = steps
        .len()
        .saturating_add(1)
        .saturating_sub(keep.get())
        .min(steps.len());
    let mut doomed = Vec::new();
    for &old in steps.iter().take(drop_count) {
        let from = dir.join(step_dir_name(old));
        let to = dir.join(temp_name(old)?);
        fs::rename(&from, &to).map_err(io_err("rename for removal", &from))?;
        doomed.push(to);
    }
    if !doomed.is_empty() {
        sync_dir(dir)?;
        for d in &doomed {
            fs::remove_dir_all(d).map_err(io_err("remove", d))?;
        }
    }
    Ok(target)
}

/// Reads at most `max` bytes of `path` (and fails beyond).
fn read_capped(
    path: &Path,
    max: u64,
    too_large: CheckpointError,
) -> Result<Vec<u8>, CheckpointError> {
    let f = File::open(path).map_err(io_err("open", path))?;
    let mut out = Vec::new();
    f.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(io_err("read", path))?;
    if to_u64(out.len()) > max {
        return Err(too_large);
    }
    Ok(out)
}

/// Reads the checkpoint directory `path` (`.../step-<N>/`) with the strict
/// reader of [`Checkpoint::from_bytes`]; the directory holds exactly the two
/// files, and its name's step is the state's.
pub fn read(path: &Path, max_tensors_bytes: u64) -> Result<Checkpoint, CheckpointError> {
    for entry in fs::read_dir(path).map_err(io_err("read directory", path))? {
        let entry = entry.map_err(io_err("read directory", path))?;
        let name = entry.file_name();
        if name != STATE_FILE && name != TENSORS_FILE {
            return Err(CheckpointError::UnexpectedEntry { path: entry.path() });
        }
    }
    let state = read_capped(
        &path.join(STATE_FILE),
        MAX_STATE_BYTES,
        CheckpointError::StateTooLarge {
            max: MAX_STATE_BYTES,
        },
    )?;
    let tensors_path = path.join(TENSORS_FILE);
    let tensors = read_capped(
        &tensors_path,
        max_tensors_bytes,
        CheckpointError::TensorsTooLarge {
            len: fs::metadata(&tensors_path).map_or(u64::MAX, |m| m.len()),
            max: max_tensors_bytes,
        },
    )?;
    let checkpoint = Checkpoint::from_bytes(&state, &tensors, max_tensors_bytes)?;
    let dir_step = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_step);
    if dir_step != Some(checkpoint.state.step) {
        return Err(CheckpointError::StepDirMismatch {
            path: path.to_path_buf(),
            dir_step: dir_step.unwrap_or(u64::MAX),
            state_step: checkpoint.state.step,
        });
    }
    Ok(checkpoint)
}

/// The newest complete checkpoint in `dir`, read strictly (`None` when
/// there is none, or no `dir`). Temp directories (a write or a removal cut
/// short) are removed first. A newest checkpoint that fails the reader is an
/// error, not a reason to fall back to an older one silently.
pub fn latest(dir: &Path, max_tensors_bytes: u64) -> Result<Option<Latest>, CheckpointError> {
    let (steps, temps) = scan(dir)?;
    for t in &temps {
        fs::remove_dir_all(t).map_err(io_err("remove", t))?;
    }
    if !temps.is_empty() {
        sync_dir(dir)?;
    }
    let Some(&newest) = steps.last() else {
        return Ok(None);
    };
    let path = dir.join(step_dir_name(newest));
    let checkpoint = read(&path, max_tensors_bytes)?;
    Ok(Some(Latest { path, checkpoint }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A checkpoint that cannot be read names the operation, the path and
    /// the OS error once, printed alone or as a chain (the OS error used to
    /// be both in the message and its `source`: `read directory P: No such
    /// file or directory (os error 2): No such file or directory (os error
    /// 2)`).
    #[test]
    fn an_io_error_prints_the_os_error_once() {
        let base = tempfile::tempdir().unwrap();
        let missing = base.path().join("step-1");
        let e = read(&missing, 1 << 20).unwrap_err();
        let CheckpointError::Io { op, path, error } = &e else {
            panic!("expected CheckpointError::Io, got {e:?}");
        };
        assert_eq!(*op, "read directory");
        assert_eq!(*path, missing);
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        let shown = format!("read directory {}: {error}", missing.display());
        assert_eq!(e.to_string(), shown);
        // No source: a chain printer (anyhow's `{:#}`) appends nothing.
        assert!(std::error::Error::source(&e).is_none());
    }
}
