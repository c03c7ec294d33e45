//! The model card `kolm.model-card.v1` and the lineage record
//! `kolm.lineage.v1` that a fine-tune job seals beside the trained weights.
//! Both are RFC 8785 canonical JSON; the card also has a Markdown
//! rendering ([`ModelCard::to_markdown`]) for people. Documented field by
//! field in `docs/artifact-files.md`.
//!
//! As with [`crate::eval_report`], one piece of code writes and reads each
//! format: [`ModelCard::to_canonical_bytes`] and [`Lineage::to_canonical_bytes`]
//! check every rule before writing, and the strict readers
//! ([`ModelCard::from_canonical_bytes`], [`Lineage::from_canonical_bytes`])
//! check the same rules, so nothing is written that the reader refuses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::eval_report::{MAX_SAFE_INTEGER, METRIC_NAMES};
use crate::hexbytes::Sha256Digest;
use crate::jcs::{self, JcsError};
use crate::job_spec::{LORA_TARGETS, MAX_ID, MAX_INPUTS};

/// `schema` of the model card.
pub const MODEL_CARD_SCHEMA_V1: &str = "kolm.model-card.v1";
/// `schema` of the lineage record.
pub const LINEAGE_SCHEMA_V1: &str = "kolm.lineage.v1";

/// Largest model card accepted on read (a card with the most data files a
/// job may name, 4096 of at most 255-byte names, is about 2 MiB).
pub const MAX_MODEL_CARD_BYTES: usize = 4 * 1024 * 1024;
/// Largest lineage record accepted on read.
pub const MAX_LINEAGE_BYTES: usize = 2 * 1024 * 1024;

/// Longest data path or base model file name, in bytes (a file name).
pub const MAX_PATH_BYTES: usize = 255;
/// Longest free-text string (a licence, a limitation, a gate rule ...), in
/// bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Most entries of each list of free text (limitations, attribution, gates).
pub const MAX_TEXT_ENTRIES: usize = 256;

/// Largest LoRA rank (as a job spec allows it).
pub const MAX_LORA_RANK: u64 = 256;
/// Most training steps (as a job spec allows them).
pub const MAX_STEPS: u64 = 10_000_000;
/// Largest batch (as a job spec allows it).
pub const MAX_BATCH: u64 = 4096;
/// Shortest and longest sequence (as a job spec allows them).
pub const SEQ_LEN_RANGE: (u64, u64) = (8, 8192);

/// The file the adapter of a LoRA fine-tune is sealed in.
pub const ADAPTER_FILE: &str = "adapter.safetensors";
/// The file the merged (or fully fine-tuned) weights are sealed in.
pub const MERGED_FILE: &str = "model.safetensors";

/// `how` of the lineage edge base -> adapter of a LoRA fine-tune.
pub const HOW_LORA_TRAIN: &str = "LoRA trained on data";
/// `how` of the lineage edge adapter -> merged of a LoRA fine-tune.
pub const HOW_LORA_MERGE: &str = "merged W + alpha/rank B A";
/// `how` of the lineage edge base -> merged of a full fine-tune.
pub const HOW_FULL: &str = "full fine-tune on data";

/// Why a model card or lineage record was refused, on write or on read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelCardError {
    #[error("{document} is {len} bytes, over the {max}-byte cap")]
    TooLarge {
        document: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{0}")]
    Jcs(#[from] JcsError),
    #[error("not a valid {document} document: {reason}")]
    Json {
        document: &'static str,
        reason: String,
    },
    #[error("schema is {found:?}, expected {expected}")]
    Schema {
        found: String,
        expected: &'static str,
    },
    #[error("`{field}`: {reason}")]
    Field { field: String, reason: String },
    /// Canonical JSON that is not what the writer writes for the same
    /// document: an optional field spelled `null` instead of left out.
    #[error(
        "{document} differs at byte {offset} from what the writer writes for the same \
         document (an absent optional field is left out, never null)"
    )]
    NotWriterForm {
        document: &'static str,
        offset: usize,
    },
}

fn field(name: impl Into<String>, reason: impl Into<String>) -> ModelCardError {
    ModelCardError::Field {
        field: name.into(),
        reason: reason.into(),
    }
}

/// A whole model card. The fields are public: the job fills them and
/// [`ModelCard::to_canonical_bytes`] refuses a card that breaks a rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// Always [`MODEL_CARD_SCHEMA_V1`].
    pub schema: String,
    /// The job id (the job spec's rule: 1 to 128 bytes of `a-z A-Z 0-9 - _ .`).
    pub name: String,
    pub base_model: BaseModel,
    /// Every input file the job read, sorted by path (byte order).
    pub data: Vec<DataFile>,
    pub method: Method,
    /// The evaluation's gateable metrics, by the names of
    /// [`METRIC_NAMES`]; `k_score` among them.
    pub metrics: BTreeMap<String, f64>,
    /// The K-score, in [0, 1]; equal to `metrics["k_score"]`.
    pub k_score: f64,
    pub gate: Gate,
    pub training: Training,
    /// What the model is not good for, one statement each (at least one).
    pub limitations: Vec<String>,
    /// Attributions the data's licences ask for (may be empty).
    pub attribution: Vec<String>,
}

/// Where the base weights came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseModel {
    /// The model's name (`SmolLM2-135M-Instruct`).
    pub name: String,
    pub source: BaseSource,
    /// The input file the weights were read from; present iff `source` is
    /// `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// SHA-256 of that file; present iff `source` is `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256Digest>,
    /// The weights' licence (`Apache-2.0`, `none (randomly initialised)`).
    pub licence: String,
    /// The architecture in words.
    pub architecture: String,
}

/// `base_model.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BaseSource {
    /// Weights read from an input file.
    File,
    /// A randomly initialised model.
    RandomInit,
}

/// One input file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataFile {
    /// The input's file name.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    pub sha256: Sha256Digest,
    pub role: DataRole,
    /// The data's licence, where the job states one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licence: Option<String>,
}

/// `data[].role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataRole {
    /// Trained on.
    Train,
    /// Evaluated on, never trained on.
    Heldout,
}

/// How the model was trained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Method {
    pub kind: MethodKind,
    /// Present iff `kind` is `lora`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraParams>,
    /// Optimizer steps run (1 to 10^7).
    pub steps: u64,
    /// Sequences per step (1 to 4096).
    pub batch: u64,
    /// Tokens per sequence (8 to 8192).
    pub seq_len: u64,
    /// Peak learning rate, > 0 and < 1.
    pub lr: f64,
    pub schedule: Schedule,
    /// Fewer than `steps`.
    pub warmup_steps: u64,
    /// AdamW's decoupled weight decay, >= 0 and < 1.
    pub weight_decay: f64,
    /// Global gradient-norm clip, > 0; absent when not clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_norm: Option<f64>,
    /// The training seed in decimal, without sign or leading zero (a
    /// string: a u64 does not fit an RFC 8785 number).
    pub seed: String,
    pub device: Device,
    /// `bf16` on the GPU only.
    pub precision: Precision,
    /// What reproducing the run gives (`bitwise on the recorded
    /// hardware/software tuple`).
    pub determinism: String,
}

/// `method.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MethodKind {
    Full,
    Lora,
}

/// `method.lora`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraParams {
    /// 1 to 256.
    pub rank: u64,
    /// > 0.
    pub alpha: f64,
    /// Among `q k v o gate up down`, none twice, in that order.
    pub targets: Vec<String>,
}

/// `method.schedule`: the learning rate after warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    Cosine,
    Linear,
    Constant,
}

/// `method.device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cpu,
    Gpu,
}

/// `method.precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    Bf16,
}

/// The quality gate's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub passed: bool,
    /// The policy's gate rules as it states them (`k_score >= 0.5`); a
    /// failed gate names at least one.
    pub gates: Vec<String>,
}

/// What training did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Training {
    /// Tokens trained on (predicted tokens summed over the steps).
    pub tokens: u64,
    /// The training loss of the last step (mean negative log-likelihood,
    /// >= 0).
    pub final_loss: f64,
    /// Held-out perplexity of the base model (>= 1).
    pub base_perplexity: f64,
    /// Held-out perplexity of the tuned model (>= 1).
    pub tuned_perplexity: f64,
}

impl BaseSource {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BaseSource::File => "file",
            BaseSource::RandomInit => "random-init",
        }
    }
}

impl DataRole {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DataRole::Train => "train",
            DataRole::Heldout => "heldout",
        }
    }
}

impl MethodKind {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MethodKind::Full => "full",
            MethodKind::Lora => "lora",
        }
    }
}

impl Schedule {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Schedule::Cosine => "cosine",
            Schedule::Linear => "linear",
            Schedule::Constant => "constant",
        }
    }
}

impl Device {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }
}

impl Precision {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

// ---------------------------------------------------------------- rules

fn check_count(name: &str, value: u64) -> Result<(), ModelCardError> {
    if value > MAX_SAFE_INTEGER {
        return Err(field(
            name,
            format!("{value} is over 2^53 - 1, the largest integer of an RFC 8785 number"),
        ));
    }
    Ok(())
}

fn check_range(name: &str, value: u64, low: u64, high: u64) -> Result<(), ModelCardError> {
    if !(low..=high).contains(&value) {
        return Err(field(name, format!("{value} is outside {low} to {high}")));
    }
    Ok(())
}

fn check_finite(name: &str, value: f64) -> Result<(), ModelCardError> {
    if !value.is_finite() {
        return Err(field(name, format!("{value} is not a finite number")));
    }
    Ok(())
}

/// Free text: 1 to [`MAX_TEXT_BYTES`] bytes, no control character (the
/// Markdown card is line-based).
fn check_text(name: &str, value: &str) -> Result<(), ModelCardError> {
    if value.is_empty() {
        return Err(field(name, "empty"));
    }
    if value.len() > MAX_TEXT_BYTES {
        return Err(field(
            name,
            format!("{} bytes, over {MAX_TEXT_BYTES}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(field(name, "contains a control character"));
    }
    Ok(())
}

fn check_text_list(name: &str, values: &[String]) -> Result<(), ModelCardError> {
    if values.len() > MAX_TEXT_ENTRIES {
        return Err(field(
            name,
            format!("{} entries, over {MAX_TEXT_ENTRIES}", values.len()),
        ));
    }
    for (i, v) in values.iter().enumerate() {
        check_text(&format!("{name}[{i}]"), v)?;
    }
    Ok(())
}

/// A plain file name, as a job spec's `inputs` allow: 1 to
/// [`MAX_PATH_BYTES`] bytes, no `/` or `\`, no leading `.`, no control
/// character.
fn check_file_name(name: &str, value: &str) -> Result<(), ModelCardError> {
    if value.is_empty()
        || value.len() > MAX_PATH_BYTES
        || value.starts_with('.')
        || value.contains(['/', '\\'])
        || value.chars().any(char::is_control)
    {
        return Err(field(
            name,
            format!(
                "{value:?} is not a plain file name (1 to {MAX_PATH_BYTES} bytes, no `/` or `\\`, \
                 no leading `.`, no control character)"
            ),
        ));
    }
    Ok(())
}

/// Paths strictly increasing in byte order: sorted, none twice.
fn check_sorted_paths<'a>(
    name: &str,
    paths: impl Iterator<Item = &'a str>,
) -> Result<(), ModelCardError> {
    let mut previous: Option<&str> = None;
    for (i, path) in paths.enumerate() {
        let at = format!("{name}[{i}].path");
        check_file_name(&at, path)?;
        if let Some(p) = previous {
            if p == path {
                return Err(field(at, format!("{path:?} is listed twice")));
            }
            if p > path {
                return Err(field(
                    at,
                    format!("{path:?} comes after {p:?}: the list is sorted by path (byte order)"),
                ));
            }
        }
        previous = Some(path);
    }
    Ok(())
}

/// The decimal seed: digits only, no sign, no leading zero, at most
/// `u64::MAX` (one spelling per value).
fn check_seed(name: &str, seed: &str) -> Result<(), ModelCardError> {
    let canonical = !seed.is_empty()
        && seed.bytes().all(|b| b.is_ascii_digit())
        && (seed == "0" || !seed.starts_with('0'))
        && seed.parse::<u64>().is_ok();
    if !canonical {
        return Err(field(
            name,
            format!("{seed:?} is not a decimal u64 without sign or leading zero"),
        ));
    }
    Ok(())
}

fn check_positive_below_one(
    name: &str,
    value: f64,
    low_inclusive: bool,
) -> Result<(), ModelCardError> {
    check_finite(name, value)?;
    let low_ok = if low_inclusive {
        value >= 0.0
    } else {
        value > 0.0
    };
    if !low_ok || value >= 1.0 {
        let low = if low_inclusive { ">= 0" } else { "> 0" };
        return Err(field(name, format!("{value} is not {low} and < 1")));
    }
    Ok(())
}

impl ModelCard {
    /// The canonical bytes, after checking every rule (so nothing is
    /// written that the reader would refuse).
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, ModelCardError> {
        self.check()?;
        Ok(jcs::to_canonical_vec(self)?)
    }

    /// The strict reader: a size cap, RFC 8785 canonical bytes (no white
    /// space, duplicate key or trailing byte), no unknown or missing field,
    /// the bytes the writer writes (an absent optional field is left out,
    /// never `null`), the schema, then every rule.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<ModelCard, ModelCardError> {
        read_strict(bytes, MODEL_CARD_SCHEMA_V1, MAX_MODEL_CARD_BYTES).and_then(
            |card: ModelCard| {
                card.check()?;
                Ok(card)
            },
        )
    }

    /// Every rule of the format, part by part in the card's order.
    fn check(&self) -> Result<(), ModelCardError> {
        if self.schema != MODEL_CARD_SCHEMA_V1 {
            return Err(ModelCardError::Schema {
                found: self.schema.clone(),
                expected: MODEL_CARD_SCHEMA_V1,
            });
        }
        self.check_name()?;
        self.check_base_model()?;
        self.check_data()?;
        self.check_method()?;
        self.check_metrics()?;
        self.check_gate()?;
        self.check_training()?;
        self.check_notes()?;
        Ok(())
    }

    /// `name`: a job id.
    fn check_name(&self) -> Result<(), ModelCardError> {
        if self.name.is_empty()
            || self.name.len() > MAX_ID
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(field(
                "name",
                format!(
                    "{:?} is not a job id: 1 to {MAX_ID} bytes of a-z, A-Z, 0-9, `-`, `_`, `.`",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// `base_model`: its texts, and a file and hash iff the source is `file`.
    fn check_base_model(&self) -> Result<(), ModelCardError> {
        let b = &self.base_model;
        check_text("base_model.name", &b.name)?;
        match (b.source, &b.file, &b.sha256) {
            (BaseSource::File, Some(file), Some(_)) => check_file_name("base_model.file", file)?,
            (BaseSource::File, None, _) => {
                return Err(field("base_model.file", "absent, but the source is `file`"));
            }
            (BaseSource::File, Some(_), None) => {
                return Err(field(
                    "base_model.sha256",
                    "absent, but the source is `file`",
                ));
            }
            (BaseSource::RandomInit, Some(_), _) => {
                return Err(field(
                    "base_model.file",
                    "present, but the source is `random-init`",
                ));
            }
            (BaseSource::RandomInit, None, Some(_)) => {
                return Err(field(
                    "base_model.sha256",
                    "present, but the source is `random-init`",
                ));
            }
            (BaseSource::RandomInit, None, None) => {}
        }
        check_text("base_model.licence", &b.licence)?;
        check_text("base_model.architecture", &b.architecture)?;
        Ok(())
    }

    /// `data`: at most [`MAX_INPUTS`] files, sorted paths, and at least one
    /// file of each role.
    fn check_data(&self) -> Result<(), ModelCardError> {
        if self.data.len() > MAX_INPUTS {
            return Err(field(
                "data",
                format!("{} files, over {MAX_INPUTS}", self.data.len()),
            ));
        }
        check_sorted_paths("data", self.data.iter().map(|d| d.path.as_str()))?;
        for (i, d) in self.data.iter().enumerate() {
            check_count(&format!("data[{i}].size"), d.size)?;
            if let Some(licence) = &d.licence {
                check_text(&format!("data[{i}].licence"), licence)?;
            }
        }
        for role in [DataRole::Train, DataRole::Heldout] {
            if !self.data.iter().any(|d| d.role == role) {
                return Err(field(
                    "data",
                    format!(
                        "no `{}` file: a card lists at least one of each role",
                        role.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `metrics` and `k_score`: known names, finite values, a K-score in
    /// [0, 1] that the metrics repeat bit for bit.
    fn check_metrics(&self) -> Result<(), ModelCardError> {
        if self.metrics.is_empty() {
            return Err(field("metrics", "empty: `k_score` at least"));
        }
        for (name, value) in &self.metrics {
            if !METRIC_NAMES.contains(&name.as_str()) {
                return Err(field(
                    format!("metrics.{name}"),
                    format!("not a metric name (one of {})", METRIC_NAMES.join(", ")),
                ));
            }
            check_finite(&format!("metrics.{name}"), *value)?;
        }
        check_finite("k_score", self.k_score)?;
        if !(0.0..=1.0).contains(&self.k_score) {
            return Err(field(
                "k_score",
                format!("{} is outside [0, 1]", self.k_score),
            ));
        }
        match self.metrics.get("k_score") {
            Some(k) if k.to_bits() == self.k_score.to_bits() => {}
            Some(k) => {
                return Err(field(
                    "metrics.k_score",
                    format!("{k}, but `k_score` is {}", self.k_score),
                ));
            }
            None => return Err(field("metrics.k_score", "absent")),
        }
        Ok(())
    }

    /// `gate`: a failed gate names its gates.
    fn check_gate(&self) -> Result<(), ModelCardError> {
        check_text_list("gate.gates", &self.gate.gates)?;
        if !self.gate.passed && self.gate.gates.is_empty() {
            return Err(field(
                "gate.gates",
                "empty, but the gate failed: a failure names the gates",
            ));
        }
        Ok(())
    }

    /// `training`: a non-negative loss and perplexities of at least 1.
    fn check_training(&self) -> Result<(), ModelCardError> {
        let t = &self.training;
        check_count("training.tokens", t.tokens)?;
        check_finite("training.final_loss", t.final_loss)?;
        if t.final_loss < 0.0 {
            return Err(field(
                "training.final_loss",
                format!("{} is negative: a probability above 1", t.final_loss),
            ));
        }
        for (name, value) in [
            ("training.base_perplexity", t.base_perplexity),
            ("training.tuned_perplexity", t.tuned_perplexity),
        ] {
            check_finite(name, value)?;
            if value < 1.0 {
                return Err(field(
                    name,
                    format!("{value} is below 1: a perplexity is exp of a non-negative mean"),
                ));
            }
        }
        Ok(())
    }

    /// `limitations` (at least one) and `attribution`.
    fn check_notes(&self) -> Result<(), ModelCardError> {
        if self.limitations.is_empty() {
            return Err(field("limitations", "empty: a card states at least one"));
        }
        check_text_list("limitations", &self.limitations)?;
        check_text_list("attribution", &self.attribution)?;
        Ok(())
    }

    fn check_method(&self) -> Result<(), ModelCardError> {
        let m = &self.method;
        match (m.kind, &m.lora) {
            (MethodKind::Full, None) => {}
            (MethodKind::Full, Some(_)) => {
                return Err(field("method.lora", "present, but the kind is `full`"));
            }
            (MethodKind::Lora, None) => {
                return Err(field("method.lora", "absent, but the kind is `lora`"));
            }
            (MethodKind::Lora, Some(l)) => {
                check_range("method.lora.rank", l.rank, 1, MAX_LORA_RANK)?;
                check_finite("method.lora.alpha", l.alpha)?;
                if l.alpha <= 0.0 {
                    return Err(field(
                        "method.lora.alpha",
                        format!("{} is not positive", l.alpha),
                    ));
                }
                if l.targets.is_empty() {
                    return Err(field("method.lora.targets", "empty"));
                }
                let mut last: Option<usize> = None;
                for (i, t) in l.targets.iter().enumerate() {
                    let at = format!("method.lora.targets[{i}]");
                    let Some(pos) = LORA_TARGETS.iter().position(|x| x == t) else {
                        return Err(field(
                            at,
                            format!("{t:?} is not one of {}", LORA_TARGETS.join(" ")),
                        ));
                    };
                    if last.is_some_and(|p| p >= pos) {
                        return Err(field(
                            at,
                            format!(
                                "{t:?} is out of order or twice: targets are listed once each, \
                                 in the order {}",
                                LORA_TARGETS.join(" ")
                            ),
                        ));
                    }
                    last = Some(pos);
                }
            }
        }
        check_range("method.steps", m.steps, 1, MAX_STEPS)?;
        check_range("method.batch", m.batch, 1, MAX_BATCH)?;
        check_range(
            "method.seq_len",
            m.seq_len,
            SEQ_LEN_RANGE.0,
            SEQ_LEN_RANGE.1,
        )?;
        check_positive_below_one("method.lr", m.lr, false)?;
        if m.warmup_steps >= m.steps {
            return Err(field(
                "method.warmup_steps",
                format!("{} is not fewer than the {} steps", m.warmup_steps, m.steps),
            ));
        }
        check_positive_below_one("method.weight_decay", m.weight_decay, true)?;
        if let Some(c) = m.clip_norm {
            check_finite("method.clip_norm", c)?;
            if c <= 0.0 {
                return Err(field("method.clip_norm", format!("{c} is not positive")));
            }
        }
        check_seed("method.seed", &m.seed)?;
        if m.precision == Precision::Bf16 && m.device != Device::Gpu {
            return Err(field(
                "method.precision",
                "bf16 compute runs on the GPU only, and the device is `cpu`",
            ));
        }
        check_text("method.determinism", &m.determinism)?;
        Ok(())
    }

    /// Checks that `lineage` describes this card's run: the same base model
    /// hash, the card's `train` files (path and SHA-256) as the lineage's
    /// data, and an adapter iff the method is LoRA.
    pub fn check_lineage(&self, lineage: &Lineage) -> Result<(), ModelCardError> {
        if lineage.base.sha256 != self.base_model.sha256 {
            return Err(field(
                "lineage.base.sha256",
                "differs from the card's `base_model.sha256`",
            ));
        }
        let train: Vec<(&str, &Sha256Digest)> = self
            .data
            .iter()
            .filter(|d| d.role == DataRole::Train)
            .map(|d| (d.path.as_str(), &d.sha256))
            .collect();
        let listed: Vec<(&str, &Sha256Digest)> = lineage
            .data
            .files
            .iter()
            .map(|f| (f.path.as_str(), &f.sha256))
            .collect();
        if train != listed {
            return Err(field(
                "lineage.data.files",
                "differ from the card's `train` files (path and SHA-256)",
            ));
        }
        if lineage.adapter.is_some() != (self.method.kind == MethodKind::Lora) {
            return Err(field(
                "lineage.adapter",
                format!(
                    "{}, but the card's method is `{}`",
                    if lineage.adapter.is_some() {
                        "present"
                    } else {
                        "absent"
                    },
                    self.method.kind.as_str()
                ),
            ));
        }
        Ok(())
    }

    /// The card for people, in Markdown. Deterministic: the same card gives
    /// the same bytes. Every string of the card is escaped ([`escape_markdown`])
    /// so that it cannot add a table column, a link, an image, HTML or
    /// emphasis. Numbers: integers in plain decimal; metrics, the K-score,
    /// the loss and perplexities to 4 decimal places (`{:.4}`); the
    /// learning rate, alpha, weight decay and clip norm as the shortest
    /// decimal that reads back as the same f64 (`{}`: never an exponent).
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        self.write_title(&mut out);
        self.write_base_model(&mut out);
        self.write_data(&mut out);
        self.write_method(&mut out);
        self.write_metrics(&mut out);
        self.write_training(&mut out);
        self.write_notes(&mut out);
        out
    }

    /// The title and the line naming the schema.
    fn write_title(&self, out: &mut String) {
        line(
            out,
            &format!("# Model card: {}", escape_markdown(&self.name)),
        );
        line(out, "");
        line(
            out,
            &format!(
                "Schema `{MODEL_CARD_SCHEMA_V1}`; the JSON card is the record, this is its rendering."
            ),
        );
        line(out, "");
    }

    /// `## Base model`: a field/value table.
    fn write_base_model(&self, out: &mut String) {
        let b = &self.base_model;
        line(out, "## Base model");
        line(out, "");
        line(out, "| field | value |");
        line(out, "|---|---|");
        row(out, &["name", &escape_markdown(&b.name)]);
        row(out, &["source", b.source.as_str()]);
        if let Some(file) = &b.file {
            row(out, &["file", &escape_markdown(file)]);
        }
        if let Some(sha) = &b.sha256 {
            row(out, &["SHA-256", &format!("`{sha}`")]);
        }
        row(out, &["licence", &escape_markdown(&b.licence)]);
        row(out, &["architecture", &escape_markdown(&b.architecture)]);
        line(out, "");
    }

    /// `## Data`: one row a file.
    fn write_data(&self, out: &mut String) {
        line(out, "## Data");
        line(out, "");
        line(out, "| path | role | bytes | SHA-256 | licence |");
        line(out, "|---|---|---:|---|---|");
        for d in &self.data {
            let licence = d
                .licence
                .as_deref()
                .map_or_else(|| "not stated".to_owned(), escape_markdown);
            row(
                out,
                &[
                    &escape_markdown(&d.path),
                    d.role.as_str(),
                    &d.size.to_string(),
                    &format!("`{}`", d.sha256),
                    &licence,
                ],
            );
        }
        line(out, "");
    }

    /// `## Method`: a field/value table, the LoRA rows iff LoRA.
    fn write_method(&self, out: &mut String) {
        let m = &self.method;
        line(out, "## Method");
        line(out, "");
        line(out, "| field | value |");
        line(out, "|---|---|");
        row(out, &["kind", m.kind.as_str()]);
        if let Some(l) = &m.lora {
            row(out, &["LoRA rank", &l.rank.to_string()]);
            row(out, &["LoRA alpha", &format!("{}", l.alpha)]);
            row(
                out,
                &["LoRA targets", &escape_markdown(&l.targets.join(" "))],
            );
        }
        row(out, &["steps", &m.steps.to_string()]);
        row(out, &["batch", &m.batch.to_string()]);
        row(out, &["sequence length", &m.seq_len.to_string()]);
        row(out, &["learning rate", &format!("{}", m.lr)]);
        row(out, &["schedule", m.schedule.as_str()]);
        row(out, &["warmup steps", &m.warmup_steps.to_string()]);
        row(out, &["weight decay", &format!("{}", m.weight_decay)]);
        let clip = m
            .clip_norm
            .map_or_else(|| "none".to_owned(), |c| format!("{c}"));
        row(out, &["gradient clip norm", &clip]);
        row(out, &["seed", &escape_markdown(&m.seed)]);
        row(out, &["device", m.device.as_str()]);
        row(out, &["precision", m.precision.as_str()]);
        row(out, &["determinism", &escape_markdown(&m.determinism)]);
        line(out, "");
    }

    /// `## Metrics`: the K-score first, then the other metrics, then the
    /// quality gate and its gates.
    fn write_metrics(&self, out: &mut String) {
        line(out, "## Metrics");
        line(out, "");
        line(out, "| metric | value |");
        line(out, "|---|---:|");
        row(out, &["K-score", &format!("{:.4}", self.k_score)]);
        for (name, value) in &self.metrics {
            if name != "k_score" {
                row(out, &[&escape_markdown(name), &format!("{value:.4}")]);
            }
        }
        line(out, "");
        line(
            out,
            &format!(
                "Quality gate: **{}**.",
                if self.gate.passed { "passed" } else { "failed" }
            ),
        );
        line(out, "");
        if self.gate.gates.is_empty() {
            line(out, "- the policy states no gate");
        }
        for g in &self.gate.gates {
            line(out, &format!("- {}", escape_markdown(g)));
        }
        line(out, "");
    }

    /// `## Training`: a field/value table.
    fn write_training(&self, out: &mut String) {
        let t = &self.training;
        line(out, "## Training");
        line(out, "");
        line(out, "| field | value |");
        line(out, "|---|---:|");
        row(out, &["tokens trained on", &t.tokens.to_string()]);
        row(
            out,
            &["final training loss", &format!("{:.4}", t.final_loss)],
        );
        row(
            out,
            &[
                "held-out perplexity, base",
                &format!("{:.4}", t.base_perplexity),
            ],
        );
        row(
            out,
            &[
                "held-out perplexity, tuned",
                &format!("{:.4}", t.tuned_perplexity),
            ],
        );
        line(out, "");
    }

    /// `## Limitations` and `## Attribution`, the last sections.
    fn write_notes(&self, out: &mut String) {
        line(out, "## Limitations");
        line(out, "");
        for l in &self.limitations {
            line(out, &format!("- {}", escape_markdown(l)));
        }
        line(out, "");

        line(out, "## Attribution");
        line(out, "");
        if self.attribution.is_empty() {
            line(out, "- none required");
        }
        for a in &self.attribution {
            line(out, &format!("- {}", escape_markdown(a)));
        }
    }
}

fn line(out: &mut String, text: &str) {
    out.push_str(text);
    out.push('\n');
}

fn row(out: &mut String, cells: &[&str]) {
    out.push('|');
    for c in cells {
        out.push(' ');
        out.push_str(c);
        out.push_str(" |");
    }
    out.push('\n');
}

/// Escapes a string for the Markdown card: a backslash before each of
/// ``\ ` * _ [ ] < > | & # ! ~``, and every control character (newlines
/// included) as a space. The result cannot end a table cell, open a link,
/// image, HTML tag, entity, code span, emphasis or heading. (A renderer
/// that links bare `www.` text may still show such text as a link to
/// itself.)
pub fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.push(' ');
        } else {
            if matches!(
                c,
                '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '&' | '#' | '!' | '~'
            ) {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// The shared strict-reading steps: cap, canonical bytes, shape, the
/// writer's byte form, schema.
fn read_strict<T>(bytes: &[u8], schema: &'static str, max: usize) -> Result<T, ModelCardError>
where
    T: Serialize + for<'de> Deserialize<'de> + HasSchema,
{
    if bytes.len() > max {
        return Err(ModelCardError::TooLarge {
            document: schema,
            len: bytes.len(),
            max,
        });
    }
    let value = jcs::parse_canonical(bytes)?;
    let doc: T = serde_json::from_value(value).map_err(|e| ModelCardError::Json {
        document: schema,
        reason: e.to_string(),
    })?;
    if doc.schema() != schema {
        return Err(ModelCardError::Schema {
            found: doc.schema().to_owned(),
            expected: schema,
        });
    }
    let written = jcs::to_canonical_vec(&doc)?;
    if written != bytes {
        let offset = written
            .iter()
            .zip(bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(written.len().min(bytes.len()));
        return Err(ModelCardError::NotWriterForm {
            document: schema,
            offset,
        });
    }
    Ok(doc)
}

trait HasSchema {
    fn schema(&self) -> &str;
}

impl HasSchema for ModelCard {
    fn schema(&self) -> &str {
        &self.schema
    }
}

impl HasSchema for Lineage {
    fn schema(&self) -> &str {
        &self.schema
    }
}

// ---------------------------------------------------------------- lineage

/// The lineage record: the chain base -> data -> adapter -> merged, each
/// node named by its hash, and the derivation edges between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lineage {
    /// Always [`LINEAGE_SCHEMA_V1`].
    pub schema: String,
    pub base: LineageBase,
    pub data: LineageData,
    /// Present iff the fine-tune was LoRA; its file is [`ADAPTER_FILE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<LineageArtifact>,
    /// The weights sealed; its file is [`MERGED_FILE`].
    pub merged: LineageArtifact,
    /// Exactly the edges of the method: LoRA (`base` -> `adapter`,
    /// [`HOW_LORA_TRAIN`]) then (`adapter` -> `merged`, [`HOW_LORA_MERGE`]);
    /// full (`base` -> `merged`, [`HOW_FULL`]).
    pub derivation: Vec<Derivation>,
}

/// `base`: the base weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageBase {
    /// SHA-256 of the base model file; absent for a random initialisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256Digest>,
    /// The base model in words (`SmolLM2-135M-Instruct`, `random init of
    /// tiny, seed 7`).
    pub description: String,
}

/// `data`: what was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageData {
    /// The training files, sorted by path (byte order), none twice.
    pub files: Vec<LineageFile>,
}

/// One training file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageFile {
    pub path: String,
    pub sha256: Sha256Digest,
}

/// A sealed weights file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageArtifact {
    pub file: String,
    pub sha256: Sha256Digest,
}

/// A node of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LineageNode {
    Base,
    Data,
    Adapter,
    Merged,
}

/// One derivation edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derivation {
    pub from: LineageNode,
    pub to: LineageNode,
    pub how: String,
}

/// The edges a lineage with (`true`) or without an adapter carries.
pub fn derivation_for(adapter: bool) -> Vec<Derivation> {
    let edge = |from, to, how: &str| Derivation {
        from,
        to,
        how: how.to_owned(),
    };
    if adapter {
        vec![
            edge(LineageNode::Base, LineageNode::Adapter, HOW_LORA_TRAIN),
            edge(LineageNode::Adapter, LineageNode::Merged, HOW_LORA_MERGE),
        ]
    } else {
        vec![edge(LineageNode::Base, LineageNode::Merged, HOW_FULL)]
    }
}

impl Lineage {
    /// Builds a lineage: the training files sorted by path, the fixed file
    /// names, the edges of the method (LoRA iff `adapter_sha256` is given);
    /// then checks every rule.
    pub fn new(
        base: LineageBase,
        mut files: Vec<LineageFile>,
        adapter_sha256: Option<Sha256Digest>,
        merged_sha256: Sha256Digest,
    ) -> Result<Lineage, ModelCardError> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let lineage = Lineage {
            schema: LINEAGE_SCHEMA_V1.to_owned(),
            base,
            data: LineageData { files },
            derivation: derivation_for(adapter_sha256.is_some()),
            adapter: adapter_sha256.map(|sha256| LineageArtifact {
                file: ADAPTER_FILE.to_owned(),
                sha256,
            }),
            merged: LineageArtifact {
                file: MERGED_FILE.to_owned(),
                sha256: merged_sha256,
            },
        };
        lineage.check()?;
        Ok(lineage)
    }

    /// The canonical bytes, after checking every rule.
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, ModelCardError> {
        self.check()?;
        Ok(jcs::to_canonical_vec(self)?)
    }

    /// The strict reader: as [`ModelCard::from_canonical_bytes`], with the
    /// lineage's rules.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<Lineage, ModelCardError> {
        read_strict(bytes, LINEAGE_SCHEMA_V1, MAX_LINEAGE_BYTES).and_then(|l: Lineage| {
            l.check()?;
            Ok(l)
        })
    }

    fn check(&self) -> Result<(), ModelCardError> {
        if self.schema != LINEAGE_SCHEMA_V1 {
            return Err(ModelCardError::Schema {
                found: self.schema.clone(),
                expected: LINEAGE_SCHEMA_V1,
            });
        }
        check_text("base.description", &self.base.description)?;
        let files = &self.data.files;
        if files.is_empty() {
            return Err(field(
                "data.files",
                "empty: a fine-tune trains on at least one file",
            ));
        }
        if files.len() > MAX_INPUTS {
            return Err(field(
                "data.files",
                format!("{} files, over {MAX_INPUTS}", files.len()),
            ));
        }
        check_sorted_paths("data.files", files.iter().map(|f| f.path.as_str()))?;
        if let Some(a) = &self.adapter
            && a.file != ADAPTER_FILE
        {
            return Err(field(
                "adapter.file",
                format!("{:?}, expected {ADAPTER_FILE:?}", a.file),
            ));
        }
        if self.merged.file != MERGED_FILE {
            return Err(field(
                "merged.file",
                format!("{:?}, expected {MERGED_FILE:?}", self.merged.file),
            ));
        }
        let expected = derivation_for(self.adapter.is_some());
        if self.derivation != expected {
            let shape = if self.adapter.is_some() {
                format!(
                    "(base, adapter, {HOW_LORA_TRAIN:?}), (adapter, merged, {HOW_LORA_MERGE:?})"
                )
            } else {
                format!("(base, merged, {HOW_FULL:?})")
            };
            return Err(field(
                "derivation",
                format!(
                    "the edges of a lineage {} an adapter are exactly {shape}",
                    if self.adapter.is_some() {
                        "with"
                    } else {
                        "without"
                    }
                ),
            ));
        }
        Ok(())
    }
}
