//! The messages of the sealed-run protocol, version 1, and their one
//! encoder and one decoder.
//!
//! Each frame carries one message: a CBOR array `[version, kind, body]`,
//! `body` a map whose keys are the fields below in deterministic order
//! (`docs/sealed-run.md` lists them). Decoding is strict: an unknown
//! version or kind, a missing, unknown, repeated or misplaced field, a
//! wrong type, an over-long string, a value out of range, a
//! non-deterministic encoding or a byte after the message is an error. The
//! same rules ([`Message::encode`] refuses what [`Message::decode`] would),
//! so every accepted message re-encodes to the bytes it was read from.

use std::collections::BTreeSet;
use std::fmt;

use kolm_format::reader::ReadError;
use kolm_policy::Platform;

use super::cbor::{Decoder, Encoder};

/// The smallest maximum frame size a peer may announce or configure: every
/// control message (hello, error, ...) fits in it.
pub const MIN_MAX_FRAME: u32 = 64 * 1024;
/// The protocol version this build writes.
pub const PROTOCOL_VERSION: u32 = 1;
/// The versions this build reads.
pub const SUPPORTED_VERSIONS: [u32; 1] = [PROTOCOL_VERSION];

/// Most versions a hello may list.
pub const MAX_VERSIONS: usize = 16;
/// Longest launch measurement (SNP, TDX and Nitro use 48 bytes).
pub const MAX_MEASUREMENT: usize = 64;
/// An Ed25519 public key.
pub const IDENTITY_KEY_LEN: usize = 32;
/// Most bytes of identity evidence a hello carries (all files together):
/// a hello must fit the smallest frame limit, [`MIN_MAX_FRAME`]. Real
/// attestations are 1.2 KiB (SNP) to 5 KiB (Nitro, TDX); with collateral
/// that does not fit, the enclave sends the attestation alone and the host
/// completes it from its own bundle.
pub const MAX_HELLO_EVIDENCE: usize = 60 * 1024;
/// Most evidence files a hello carries.
pub const MAX_HELLO_EVIDENCE_FILES: usize = 8;
/// Largest job spec and largest policy.
pub const MAX_DOCUMENT: usize = 1024 * 1024;
/// Most collateral files a job-submit carries.
pub const MAX_SUBMIT_COLLATERAL_FILES: usize = 8;
/// Largest collateral file a job-submit carries, whatever its slot: the
/// largest collateral slot's cap (TDX `QuoteCollateralV3` JSON). Each file
/// is also held to its own slot's cap; a unit test keeps the two in step.
pub const MAX_SUBMIT_COLLATERAL_FILE: usize = 1024 * 1024;
/// Most inputs one job may declare.
pub const MAX_INPUTS: usize = 4096;
/// Longest file name (inputs, artifacts), in bytes.
pub const MAX_FILE_NAME: usize = 255;
/// Longest progress phase name.
pub const MAX_PHASE: usize = 64;
/// Longest log line, in bytes.
pub const MAX_LOG_LINE: usize = 64 * 1024;
/// Longest error message or cancel reason, in bytes.
pub const MAX_REASON: usize = 4096;
/// Longest kind or enumeration value on the wire.
const MAX_NAME: usize = 32;
/// Byte strings bounded only by the frame (chunk data).
const FRAME_BOUNDED: usize = usize::MAX;

/// A SHA-256 digest.
pub type Sha256Digest = [u8; 32];

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Enclave to host, first on every connection.
    Hello(Hello),
    /// Host to enclave: the job and the inputs that will follow.
    JobSubmit(JobSubmit),
    /// Host to enclave: part of a declared input.
    InputChunk(InputChunk),
    /// Enclave to host: how far the job is.
    Progress(Progress),
    /// Enclave to host: how far training is (fine-tune jobs).
    TrainProgress(TrainProgress),
    /// Enclave to host: one line of public log output.
    Log(LogLine),
    /// Enclave to host: part of the sealed artifact.
    ArtifactChunk(ArtifactChunk),
    /// Host to enclave: stop the job.
    Cancel(Cancel),
    /// Either way: what went wrong; the sender closes the connection.
    Error(ErrorMessage),
    /// Either way: the sender is done and closes the connection.
    Bye,
}

/// The enclave introduces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol versions the enclave speaks: 1 to [`MAX_VERSIONS`]
    /// numbers, each at least 1, strictly ascending.
    pub versions: Vec<u32>,
    /// The TEE platform the enclave runs on.
    pub platform: Platform,
    /// The largest frame payload the enclave accepts (at least
    /// [`MIN_MAX_FRAME`]).
    pub max_frame: u32,
    /// The launch measurement (empty on platform `none`), at most
    /// [`MAX_MEASUREMENT`] bytes.
    pub measurement: Vec<u8>,
    /// The enclave's attested Ed25519 identity public key.
    pub identity_key: [u8; IDENTITY_KEY_LEN],
    /// The platform's evidence over the identity key: report data
    /// [`kolm_format::binding::identity_report_data`]`(identity_key)`, in the
    /// files and binary forms of the receipt-v2 evidence slots of
    /// `platform` (exactly one attestation, optionally collateral). Empty
    /// on platform `none`, which proves nothing.
    pub evidence: Vec<HelloEvidence>,
}

/// One file of a hello's identity evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloEvidence {
    /// Its content.
    pub data: Vec<u8>,
    /// Its receipt-v2 evidence slot path (`evidence/nitro.cose`, ...).
    pub path: String,
}

/// A job and the inputs the host will stream after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSubmit {
    /// The job spec (TOML), at most [`MAX_DOCUMENT`] bytes.
    pub spec: Vec<u8>,
    /// The inputs, at most [`MAX_INPUTS`], names distinct.
    pub inputs: Vec<InputDecl>,
    /// The policy (TOML), at most [`MAX_DOCUMENT`] bytes.
    pub policy: Vec<u8>,
    /// The host's offline collateral (`kolm-host run --bundle DIR`), for an
    /// enclave whose platform supplies none and that has no bundle of its
    /// own (on a guest, the host's directory is not on the enclave's file
    /// system): at most [`MAX_SUBMIT_COLLATERAL_FILES`] files, each under
    /// a receipt-v2 collateral slot path of some hardware platform
    /// ([`collateral_slot`]), each path once, each within its slot's cap.
    /// Empty when the host has no bundle. Untrusted like everything the
    /// host sends: the enclave checks each file's shape, and the verifier
    /// judges the collateral the receipt binds.
    pub collateral: Vec<CollateralFile>,
}

/// One file of the host's collateral bundle, sent with a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollateralFile {
    /// Its content.
    pub data: Vec<u8>,
    /// Its receipt-v2 evidence slot path (`evidence/tdx-collateral.json`,
    /// ...).
    pub path: String,
}

/// One declared input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputDecl {
    /// Its file name in the job's input directory.
    pub name: FileName,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of its content.
    pub sha256: Sha256Digest,
}

/// Bytes of a declared input, starting at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputChunk {
    /// The bytes (bounded by the frame).
    pub data: Vec<u8>,
    /// The input they belong to.
    pub name: FileName,
    /// Where in the input they start.
    pub offset: u64,
}

/// Progress of the job: `done` of `total` units of `phase`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Units done, at most `total`.
    pub done: u64,
    /// What is progressing: 1 to [`MAX_PHASE`] bytes of `a-z`, `0-9`, `-`.
    pub phase: String,
    /// Units in all.
    pub total: u64,
}

/// How far a fine-tune job's training is, at most a few times a second.
/// Only these integers cross from the job's output: its own words never
/// do (they may carry sealed data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainProgress {
    /// Optimizer steps done, 1 to `steps`.
    pub step: u64,
    /// Seconds left at the current rate.
    pub eta_s: u64,
    /// Optimizer steps in all.
    pub steps: u64,
    /// The training loss of step `step`, in millionths (at most
    /// [`MAX_LOSS_MICROS`]).
    pub loss_micros: u64,
    /// Training tokens per second, over the run so far.
    pub tokens_per_s: u64,
}

/// Largest loss a `train-progress` carries, in millionths (a loss of
/// 10^6: far past any real cross-entropy, whose start is ln(vocabulary)).
pub const MAX_LOSS_MICROS: u64 = 1_000_000_000_000;

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The text, at most [`MAX_LOG_LINE`] bytes.
    pub line: String,
    /// Where it came from.
    pub stream: LogStream,
}

/// The source of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    /// The job's standard output. Spelled `stdout`.
    Stdout,
    /// The job's standard error. Spelled `stderr`.
    Stderr,
    /// The enclave's supervisor. Spelled `supervisor`.
    Supervisor,
}

/// Bytes of the sealed artifact `name`, `total` bytes long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactChunk {
    /// The bytes; `offset + data.len() <= total`.
    pub data: Vec<u8>,
    /// The artifact's file name.
    pub name: FileName,
    /// The artifact's size.
    pub total: u64,
    /// Where in the artifact they start.
    pub offset: u64,
}

/// Stop the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// Why, at most [`MAX_REASON`] bytes.
    pub reason: String,
}

/// An error report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMessage {
    /// What kind of failure.
    pub code: ErrorCode,
    /// What failed, for people; at most [`MAX_REASON`] bytes. Public: it
    /// never carries keys, inputs or outputs.
    pub message: String,
}

/// The failure classes an [`ErrorMessage`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The message's protocol version is not spoken here.
    UnsupportedVersion,
    /// The message kind is not known.
    UnknownKind,
    /// The message does not decode.
    Malformed,
    /// A frame's length is over the limit.
    FrameTooLarge,
    /// The message is valid but not expected now.
    UnexpectedMessage,
    /// Nothing arrived in time.
    Timeout,
    /// The declared inputs exceed the size limit.
    BundleTooLarge,
    /// An input chunk or declaration was refused.
    InputRejected,
    /// An input's content does not have its declared SHA-256.
    DigestMismatch,
    /// The enclave is running another job.
    Busy,
    /// The job failed; no artifact.
    JobFailed,
    /// The job was cancelled; no artifact.
    Cancelled,
    /// The enclave failed for a reason of its own.
    Internal,
    /// The host could not verify the enclave's identity evidence and
    /// sends it nothing.
    IdentityRejected,
}

/// A plain file name: 1 to [`MAX_FILE_NAME`] bytes, no `/`, no control
/// character, not starting with `.` (so never `.` or `..`, and never the
/// name of a receiver's temporary file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileName(String);

/// Why a file name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileNameError {
    #[error("empty file name")]
    Empty,
    #[error("file name {name:?} has {len} bytes, at most {MAX_FILE_NAME} allowed")]
    TooLong { name: String, len: usize },
    #[error("file name {name:?} contains `/`: only plain file names, no paths")]
    Slash { name: String },
    #[error("file name {name:?} contains a control character")]
    Control { name: String },
    #[error("file name {name:?} starts with `.`")]
    LeadingDot { name: String },
}

impl FileName {
    /// Parses a plain file name.
    pub fn parse(s: &str) -> Result<FileName, FileNameError> {
        let name = || s.chars().take(MAX_FILE_NAME).collect::<String>();
        if s.is_empty() {
            return Err(FileNameError::Empty);
        }
        if s.len() > MAX_FILE_NAME {
            return Err(FileNameError::TooLong {
                name: name(),
                len: s.len(),
            });
        }
        if s.contains('/') {
            return Err(FileNameError::Slash { name: name() });
        }
        if s.chars().any(char::is_control) {
            return Err(FileNameError::Control { name: name() });
        }
        if s.starts_with('.') {
            return Err(FileNameError::LeadingDot { name: name() });
        }
        Ok(FileName(s.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A field value that breaks the protocol's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    #[error("must list 1 to {MAX_VERSIONS} versions, each at least 1, strictly ascending")]
    Versions,
    #[error("{value} does not fit 32 bits")]
    NotU32 { value: u64 },
    #[error("unknown platform {value:?}")]
    UnknownPlatform { value: String },
    #[error("{value} is below the smallest frame limit, {MIN_MAX_FRAME}")]
    MaxFrameTooSmall { value: u32 },
    #[error("{len} bytes, at most {max} allowed")]
    TooLong { len: usize, max: usize },
    #[error("{len} bytes, must be exactly {want}")]
    WrongLength { len: usize, want: usize },
    #[error(transparent)]
    FileName(#[from] FileNameError),
    #[error("input {name:?} is declared twice")]
    DuplicateInput { name: String },
    #[error("declared input sizes add up to more than 2^64 - 1 bytes")]
    TotalOverflow,
    #[error("phase {value:?} is not 1 to {MAX_PHASE} bytes of a-z, 0-9 and -")]
    Phase { value: String },
    #[error("done {done} is more than total {total}")]
    DoneOverTotal { done: u64, total: u64 },
    #[error("step {step} is not 1 to steps ({steps})")]
    StepOutOfRange { step: u64, steps: u64 },
    #[error("{value} is over the largest loss, {MAX_LOSS_MICROS} millionths")]
    LossTooLarge { value: u64 },
    #[error("offset {offset} plus {len} bytes passes the end ({total})")]
    PastEnd { offset: u64, len: u64, total: u64 },
    #[error("offset {offset} plus {len} bytes overflows 64 bits")]
    OffsetOverflow { offset: u64, len: u64 },
    #[error("unknown log stream {value:?}")]
    UnknownLogStream { value: String },
    #[error("unknown error code {value:?}")]
    UnknownErrorCode { value: String },
    #[error("{path:?} is not an evidence file of platform {platform}")]
    EvidenceSlot { path: String, platform: Platform },
    #[error("{path:?} is listed twice")]
    DuplicateEvidence { path: String },
    #[error("{path:?} has {len} bytes, its slot holds at most {max}")]
    EvidenceTooLarge { path: String, len: usize, max: u64 },
    #[error("{count} attestation files; platform {platform} needs exactly {want}")]
    EvidenceAttestations {
        count: usize,
        want: usize,
        platform: Platform,
    },
    #[error(
        "{path:?} is not a collateral file of any hardware platform (allowed: {})",
        collateral_paths().join(", ")
    )]
    CollateralSlot { path: String },
}

/// Why bytes are not a protocol message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("unsupported protocol version {version} (this build speaks {SUPPORTED_VERSIONS:?})")]
    UnknownVersion { version: u64 },
    #[error("unknown message kind {kind:?}")]
    UnknownKind { kind: String },
    #[error(
        "the message array has {len} elements; version {PROTOCOL_VERSION} has 3: [version, kind, body]"
    )]
    EnvelopeLength { len: u64 },
    #[error("{what} at offset {offset}: need {need} bytes, {have} left in the frame")]
    Truncated {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("{count} bytes after the message (offset {offset})")]
    TrailingBytes { offset: usize, count: usize },
    #[error("{0}")]
    Read(ReadError),
    #[error("{what} at offset {offset}: expected {expected}, found {found}")]
    WrongType {
        what: &'static str,
        offset: usize,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{what} at offset {offset}: indefinite length (only definite lengths are allowed)")]
    Indefinite { what: &'static str, offset: usize },
    #[error("{what} at offset {offset}: not the shortest encoding of its value")]
    NotShortest { what: &'static str, offset: usize },
    #[error("{what} at offset {offset}: reserved additional information {info}")]
    ReservedInfo {
        what: &'static str,
        offset: usize,
        info: u8,
    },
    #[error("{what}: declared length {len}, at most {max} allowed")]
    TooLong {
        what: &'static str,
        len: u64,
        max: usize,
    },
    #[error("{what} at offset {offset}: text is not UTF-8")]
    InvalidUtf8 { what: &'static str, offset: usize },
    #[error("{message}: unknown field {field:?} at offset {offset}")]
    UnknownField {
        message: &'static str,
        field: String,
        offset: usize,
    },
    #[error("{message}: field {field:?} at offset {offset} is repeated or out of order")]
    FieldOrder {
        message: &'static str,
        field: String,
        offset: usize,
    },
    #[error("{message}: missing field {field:?}")]
    MissingField {
        message: &'static str,
        field: &'static str,
    },
    #[error("{field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: Invalid,
    },
}

/// Why a message cannot be encoded (it breaks a rule the decoder enforces).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("{field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: Invalid,
    },
}

/// The message kinds, as spelled on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Hello,
    JobSubmit,
    InputChunk,
    Progress,
    TrainProgress,
    Log,
    ArtifactChunk,
    Cancel,
    Error,
    Bye,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 10] = [
        Kind::Hello,
        Kind::JobSubmit,
        Kind::InputChunk,
        Kind::Progress,
        Kind::TrainProgress,
        Kind::Log,
        Kind::ArtifactChunk,
        Kind::Cancel,
        Kind::Error,
        Kind::Bye,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::JobSubmit => "job-submit",
            Kind::InputChunk => "input-chunk",
            Kind::Progress => "progress",
            Kind::TrainProgress => "train-progress",
            Kind::Log => "log",
            Kind::ArtifactChunk => "artifact-chunk",
            Kind::Cancel => "cancel",
            Kind::Error => "error",
            Kind::Bye => "bye",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl LogStream {
    /// Every stream.
    pub const ALL: [LogStream; 3] = [LogStream::Stdout, LogStream::Stderr, LogStream::Supervisor];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Supervisor => "supervisor",
        }
    }
}

impl ErrorCode {
    /// Every code.
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::UnsupportedVersion,
        ErrorCode::UnknownKind,
        ErrorCode::Malformed,
        ErrorCode::FrameTooLarge,
        ErrorCode::UnexpectedMessage,
        ErrorCode::Timeout,
        ErrorCode::BundleTooLarge,
        ErrorCode::InputRejected,
        ErrorCode::DigestMismatch,
        ErrorCode::Busy,
        ErrorCode::JobFailed,
        ErrorCode::Cancelled,
        ErrorCode::Internal,
        ErrorCode::IdentityRejected,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnsupportedVersion => "unsupported-version",
            ErrorCode::UnknownKind => "unknown-kind",
            ErrorCode::Malformed => "malformed",
            ErrorCode::FrameTooLarge => "frame-too-large",
            ErrorCode::UnexpectedMessage => "unexpected-message",
            ErrorCode::Timeout => "timeout",
            ErrorCode::BundleTooLarge => "bundle-too-large",
            ErrorCode::InputRejected => "input-rejected",
            ErrorCode::DigestMismatch => "digest-mismatch",
            ErrorCode::Busy => "busy",
            ErrorCode::JobFailed => "job-failed",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Internal => "internal",
            ErrorCode::IdentityRejected => "identity-rejected",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ErrorMessage {
    /// An error report whose message is cut (at a character boundary) to
    /// [`MAX_REASON`] bytes.
    pub fn new(code: ErrorCode, message: &str) -> ErrorMessage {
        let mut end = message.len().min(MAX_REASON);
        while !message.is_char_boundary(end) {
            end = end.saturating_sub(1);
        }
        ErrorMessage {
            code,
            message: message.get(..end).unwrap_or_default().to_owned(),
        }
    }
}

impl Hello {
    /// The highest version both this hello and `ours` list.
    pub fn common_version(&self, ours: &[u32]) -> Option<u32> {
        self.versions
            .iter()
            .rev()
            .find(|v| ours.contains(v))
            .copied()
    }
}

impl JobSubmit {
    /// The declared inputs' sizes added up (checked by encode and decode
    /// not to overflow).
    pub fn total_input_bytes(&self) -> Option<u64> {
        self.inputs
            .iter()
            .try_fold(0u64, |sum, i| sum.checked_add(i.size))
    }
}

// Field lists, in deterministic key order (a unit test checks the order).
const HELLO: &[&str] = &[
    "evidence",
    "platform",
    "versions",
    "max_frame",
    "measurement",
    "identity_key",
];
/// A file entry (hello evidence, job-submit collateral).
const FILE_ENTRY: &[&str] = &["data", "path"];
const JOB_SUBMIT: &[&str] = &["spec", "inputs", "policy", "collateral"];
const INPUT_DECL: &[&str] = &["name", "size", "sha256"];
const INPUT_CHUNK: &[&str] = &["data", "name", "offset"];
const PROGRESS: &[&str] = &["done", "phase", "total"];
/// Deterministic (length-first) key order.
const TRAIN_PROGRESS: &[&str] = &["step", "eta_s", "steps", "loss_micros", "tokens_per_s"];
const LOG: &[&str] = &["line", "stream"];
const ARTIFACT_CHUNK: &[&str] = &["data", "name", "total", "offset"];
const CANCEL: &[&str] = &["reason"];
const ERROR: &[&str] = &["code", "message"];
const BYE: &[&str] = &[];

type Rule = Result<(), (&'static str, Invalid)>;

fn max_len(field: &'static str, len: usize, max: usize) -> Rule {
    if len > max {
        return Err((field, Invalid::TooLong { len, max }));
    }
    Ok(())
}

fn span(field: &'static str, offset: u64, len: usize) -> Result<u64, (&'static str, Invalid)> {
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    offset
        .checked_add(len)
        .ok_or((field, Invalid::OffsetOverflow { offset, len }))
}

/// One evidence file of a message (a hello's evidence, a job-submit's
/// collateral) in its `slot`: its path not `seen` before, its `len` within
/// the slot's cap.
fn check_slot_file<'a>(
    field: &'static str,
    seen: &mut BTreeSet<&'a str>,
    path: &'a str,
    len: usize,
    slot: &kolm_format::evidence::EvidenceSlot,
) -> Rule {
    if !seen.insert(path) {
        return Err((
            field,
            Invalid::DuplicateEvidence {
                path: path.to_owned(),
            },
        ));
    }
    if u64::try_from(len).map_or(true, |n| n > slot.max_bytes) {
        return Err((
            field,
            Invalid::EvidenceTooLarge {
                path: path.to_owned(),
                len,
                max: slot.max_bytes,
            },
        ));
    }
    Ok(())
}

/// A hello's evidence: receipt-v2 slots of its platform, each once and
/// within its cap, [`MAX_HELLO_EVIDENCE`] bytes in all, exactly one
/// attestation (none on platform `none`).
fn check_hello_evidence(h: &Hello) -> Rule {
    use kolm_format::evidence::{EvidenceRole, evidence_slots};
    use kolm_format::version::SpecVersion;
    const FIELD: &str = "hello.evidence";
    if h.evidence.len() > MAX_HELLO_EVIDENCE_FILES {
        return Err((
            FIELD,
            Invalid::TooLong {
                len: h.evidence.len(),
                max: MAX_HELLO_EVIDENCE_FILES,
            },
        ));
    }
    let slots = evidence_slots(SpecVersion::V2, h.platform);
    let mut seen = BTreeSet::new();
    let mut total = 0usize;
    let mut attestations = 0usize;
    for f in &h.evidence {
        let slot = slots.iter().find(|s| s.path == f.path).ok_or_else(|| {
            (
                FIELD,
                Invalid::EvidenceSlot {
                    path: f.path.clone(),
                    platform: h.platform,
                },
            )
        })?;
        check_slot_file(FIELD, &mut seen, &f.path, f.data.len(), slot)?;
        total = total.saturating_add(f.data.len());
        if slot.role == EvidenceRole::Attestation {
            attestations = attestations.saturating_add(1);
        }
    }
    max_len(FIELD, total, MAX_HELLO_EVIDENCE)?;
    let want = usize::from(h.platform != Platform::None);
    if attestations != want {
        return Err((
            FIELD,
            Invalid::EvidenceAttestations {
                count: attestations,
                want,
                platform: h.platform,
            },
        ));
    }
    Ok(())
}

/// The receipt-v2 collateral slot at `path` of some hardware platform
/// (`evidence/snp-vcek.der`, `evidence/snp-ask-ark.pem`,
/// `evidence/tdx-collateral.json`): the paths a job-submit's collateral may
/// use. Never a simulated TEE's (it writes its own) nor an attestation.
pub fn collateral_slot(path: &str) -> Option<kolm_format::evidence::EvidenceSlot> {
    hardware_collateral_slots()
        .find(|s| s.path == path)
        .copied()
}

/// The receipt-v2 collateral slots of every hardware platform (a slot
/// two platforms share, once per platform).
fn hardware_collateral_slots() -> impl Iterator<Item = &'static kolm_format::evidence::EvidenceSlot>
{
    use kolm_format::evidence::{EvidenceRole, evidence_slots};
    Platform::HARDWARE
        .into_iter()
        .flat_map(|p| evidence_slots(kolm_format::version::SpecVersion::V2, p))
        .filter(|s| s.role == EvidenceRole::Collateral)
}

/// Every path [`collateral_slot`] admits, sorted.
fn collateral_paths() -> Vec<&'static str> {
    let paths: BTreeSet<&'static str> = hardware_collateral_slots().map(|s| s.path).collect();
    paths.into_iter().collect()
}

/// A job-submit's collateral: at most [`MAX_SUBMIT_COLLATERAL_FILES`]
/// files, each a hardware platform's collateral slot, once, within its cap.
fn check_submit_collateral(j: &JobSubmit) -> Rule {
    const FIELD: &str = "job-submit.collateral";
    max_len(FIELD, j.collateral.len(), MAX_SUBMIT_COLLATERAL_FILES)?;
    let mut seen = BTreeSet::new();
    for f in &j.collateral {
        let slot = collateral_slot(&f.path).ok_or_else(|| {
            (
                FIELD,
                Invalid::CollateralSlot {
                    path: f.path.clone(),
                },
            )
        })?;
        check_slot_file(FIELD, &mut seen, &f.path, f.data.len(), &slot)?;
    }
    Ok(())
}

fn valid_phase(p: &str) -> bool {
    (1..=MAX_PHASE).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Message {
    /// The message's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::JobSubmit(_) => Kind::JobSubmit,
            Message::InputChunk(_) => Kind::InputChunk,
            Message::Progress(_) => Kind::Progress,
            Message::TrainProgress(_) => Kind::TrainProgress,
            Message::Log(_) => Kind::Log,
            Message::ArtifactChunk(_) => Kind::ArtifactChunk,
            Message::Cancel(_) => Kind::Cancel,
            Message::Error(_) => Kind::Error,
            Message::Bye => Kind::Bye,
        }
    }

    /// The rules a value must follow beyond its Rust type; both
    /// [`Message::encode`] and [`Message::decode`] apply them.
    fn check(&self) -> Rule {
        match self {
            Message::Hello(h) => {
                let ascending = h.versions.windows(2).all(|w| matches!(w, [a, b] if a < b));
                if h.versions.is_empty()
                    || h.versions.len() > MAX_VERSIONS
                    || h.versions.contains(&0)
                    || !ascending
                {
                    return Err(("hello.versions", Invalid::Versions));
                }
                if h.max_frame < MIN_MAX_FRAME {
                    return Err((
                        "hello.max_frame",
                        Invalid::MaxFrameTooSmall { value: h.max_frame },
                    ));
                }
                max_len("hello.measurement", h.measurement.len(), MAX_MEASUREMENT)?;
                check_hello_evidence(h)
            }
            Message::JobSubmit(j) => {
                max_len("job-submit.spec", j.spec.len(), MAX_DOCUMENT)?;
                max_len("job-submit.policy", j.policy.len(), MAX_DOCUMENT)?;
                if j.inputs.len() > MAX_INPUTS {
                    return Err((
                        "job-submit.inputs",
                        Invalid::TooLong {
                            len: j.inputs.len(),
                            max: MAX_INPUTS,
                        },
                    ));
                }
                let mut names = BTreeSet::new();
                for i in &j.inputs {
                    if !names.insert(&i.name) {
                        return Err((
                            "job-submit.inputs",
                            Invalid::DuplicateInput {
                                name: i.name.0.clone(),
                            },
                        ));
                    }
                }
                if j.total_input_bytes().is_none() {
                    return Err(("job-submit.inputs", Invalid::TotalOverflow));
                }
                check_submit_collateral(j)
            }
            Message::InputChunk(c) => span("input-chunk.offset", c.offset, c.data.len()).map(drop),
            Message::Progress(p) => {
                if !valid_phase(&p.phase) {
                    return Err((
                        "progress.phase",
                        Invalid::Phase {
                            value: p.phase.chars().take(MAX_PHASE).collect(),
                        },
                    ));
                }
                if p.done > p.total {
                    return Err((
                        "progress.done",
                        Invalid::DoneOverTotal {
                            done: p.done,
                            total: p.total,
                        },
                    ));
                }
                Ok(())
            }
            Message::TrainProgress(t) => {
                if t.step == 0 || t.step > t.steps {
                    return Err((
                        "train-progress.step",
                        Invalid::StepOutOfRange {
                            step: t.step,
                            steps: t.steps,
                        },
                    ));
                }
                if t.loss_micros > MAX_LOSS_MICROS {
                    return Err((
                        "train-progress.loss_micros",
                        Invalid::LossTooLarge {
                            value: t.loss_micros,
                        },
                    ));
                }
                Ok(())
            }
            Message::Log(l) => max_len("log.line", l.line.len(), MAX_LOG_LINE),
            Message::ArtifactChunk(a) => {
                let end = span("artifact-chunk.offset", a.offset, a.data.len())?;
                if end > a.total {
                    return Err((
                        "artifact-chunk.offset",
                        Invalid::PastEnd {
                            offset: a.offset,
                            len: end.saturating_sub(a.offset),
                            total: a.total,
                        },
                    ));
                }
                Ok(())
            }
            Message::Cancel(c) => max_len("cancel.reason", c.reason.len(), MAX_REASON),
            Message::Error(e) => max_len("error.message", e.message.len(), MAX_REASON),
            Message::Bye => Ok(()),
        }
    }

    /// The message's bytes (one frame's payload).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        self.check()
            .map_err(|(field, problem)| EncodeError::Invalid { field, problem })?;
        let mut e = Encoder::default();
        e.array(3);
        e.uint(PROTOCOL_VERSION.into());
        e.text(self.kind().as_str());
        match self {
            Message::Hello(h) => {
                e.map(HELLO);
                e.key("evidence");
                encode_files(
                    &mut e,
                    h.evidence.iter().map(|f| (&f.data[..], &f.path[..])),
                );
                e.key("platform");
                e.text(h.platform.as_str());
                e.key("versions");
                e.array(h.versions.len());
                for v in &h.versions {
                    e.uint((*v).into());
                }
                e.key("max_frame");
                e.uint(h.max_frame.into());
                e.key("measurement");
                e.bytes(&h.measurement);
                e.key("identity_key");
                e.bytes(&h.identity_key);
            }
            Message::JobSubmit(j) => {
                e.map(JOB_SUBMIT);
                e.key("spec");
                e.bytes(&j.spec);
                e.key("inputs");
                e.array(j.inputs.len());
                for i in &j.inputs {
                    e.map(INPUT_DECL);
                    e.key("name");
                    e.text(i.name.as_str());
                    e.key("size");
                    e.uint(i.size);
                    e.key("sha256");
                    e.bytes(&i.sha256);
                }
                e.key("policy");
                e.bytes(&j.policy);
                e.key("collateral");
                encode_files(
                    &mut e,
                    j.collateral.iter().map(|f| (&f.data[..], &f.path[..])),
                );
            }
            Message::InputChunk(c) => {
                e.map(INPUT_CHUNK);
                e.key("data");
                e.bytes(&c.data);
                e.key("name");
                e.text(c.name.as_str());
                e.key("offset");
                e.uint(c.offset);
            }
            Message::Progress(p) => {
                e.map(PROGRESS);
                e.key("done");
                e.uint(p.done);
                e.key("phase");
                e.text(&p.phase);
                e.key("total");
                e.uint(p.total);
            }
            Message::TrainProgress(t) => {
                e.map(TRAIN_PROGRESS);
                e.key("step");
                e.uint(t.step);
                e.key("eta_s");
                e.uint(t.eta_s);
                e.key("steps");
                e.uint(t.steps);
                e.key("loss_micros");
                e.uint(t.loss_micros);
                e.key("tokens_per_s");
                e.uint(t.tokens_per_s);
            }
            Message::Log(l) => {
                e.map(LOG);
                e.key("line");
                e.text(&l.line);
                e.key("stream");
                e.text(l.stream.as_str());
            }
            Message::ArtifactChunk(a) => {
                e.map(ARTIFACT_CHUNK);
                e.key("data");
                e.bytes(&a.data);
                e.key("name");
                e.text(a.name.as_str());
                e.key("total");
                e.uint(a.total);
                e.key("offset");
                e.uint(a.offset);
            }
            Message::Cancel(c) => {
                e.map(CANCEL);
                e.key("reason");
                e.text(&c.reason);
            }
            Message::Error(m) => {
                e.map(ERROR);
                e.key("code");
                e.text(m.code.as_str());
                e.key("message");
                e.text(&m.message);
            }
            Message::Bye => e.map(BYE),
        }
        Ok(e.into_bytes())
    }

    /// Reads one message from a frame's payload: all of it, strictly.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        let mut d = Decoder::new(bytes);
        let len = d.array_any("message")?;
        if len == 0 {
            return Err(DecodeError::EnvelopeLength { len });
        }
        let version = d.uint("version")?;
        if !SUPPORTED_VERSIONS.iter().any(|&v| u64::from(v) == version) {
            return Err(DecodeError::UnknownVersion { version });
        }
        if len != 3 {
            return Err(DecodeError::EnvelopeLength { len });
        }
        let kind = d.text("kind", MAX_NAME)?;
        let kind = Kind::parse(kind).ok_or_else(|| DecodeError::UnknownKind {
            kind: kind.to_owned(),
        })?;
        let message = match kind {
            Kind::Hello => Message::Hello(decode_hello(&mut d)?),
            Kind::JobSubmit => Message::JobSubmit(decode_job_submit(&mut d)?),
            Kind::InputChunk => {
                let mut m = d.map("input-chunk", INPUT_CHUNK)?;
                d.key(&mut m, "data")?;
                let data = d.bytes("input-chunk.data", FRAME_BOUNDED)?.to_vec();
                d.key(&mut m, "name")?;
                let name = file_name(&mut d, "input-chunk.name")?;
                d.key(&mut m, "offset")?;
                let offset = d.uint("input-chunk.offset")?;
                d.end(m)?;
                Message::InputChunk(InputChunk { data, name, offset })
            }
            Kind::Progress => {
                let mut m = d.map("progress", PROGRESS)?;
                d.key(&mut m, "done")?;
                let done = d.uint("progress.done")?;
                d.key(&mut m, "phase")?;
                let phase = d.text("progress.phase", MAX_PHASE)?.to_owned();
                d.key(&mut m, "total")?;
                let total = d.uint("progress.total")?;
                d.end(m)?;
                Message::Progress(Progress { done, phase, total })
            }
            Kind::TrainProgress => {
                let mut m = d.map("train-progress", TRAIN_PROGRESS)?;
                d.key(&mut m, "step")?;
                let step = d.uint("train-progress.step")?;
                d.key(&mut m, "eta_s")?;
                let eta_s = d.uint("train-progress.eta_s")?;
                d.key(&mut m, "steps")?;
                let steps = d.uint("train-progress.steps")?;
                d.key(&mut m, "loss_micros")?;
                let loss_micros = d.uint("train-progress.loss_micros")?;
                d.key(&mut m, "tokens_per_s")?;
                let tokens_per_s = d.uint("train-progress.tokens_per_s")?;
                d.end(m)?;
                Message::TrainProgress(TrainProgress {
                    step,
                    eta_s,
                    steps,
                    loss_micros,
                    tokens_per_s,
                })
            }
            Kind::Log => {
                let mut m = d.map("log", LOG)?;
                d.key(&mut m, "line")?;
                let line = d.text("log.line", MAX_LOG_LINE)?.to_owned();
                d.key(&mut m, "stream")?;
                let value = d.text("log.stream", MAX_NAME)?;
                let stream = LogStream::ALL
                    .into_iter()
                    .find(|s| s.as_str() == value)
                    .ok_or_else(|| {
                        invalid(
                            "log.stream",
                            Invalid::UnknownLogStream {
                                value: value.to_owned(),
                            },
                        )
                    })?;
                d.end(m)?;
                Message::Log(LogLine { line, stream })
            }
            Kind::ArtifactChunk => {
                let mut m = d.map("artifact-chunk", ARTIFACT_CHUNK)?;
                d.key(&mut m, "data")?;
                let data = d.bytes("artifact-chunk.data", FRAME_BOUNDED)?.to_vec();
                d.key(&mut m, "name")?;
                let name = file_name(&mut d, "artifact-chunk.name")?;
                d.key(&mut m, "total")?;
                let total = d.uint("artifact-chunk.total")?;
                d.key(&mut m, "offset")?;
                let offset = d.uint("artifact-chunk.offset")?;
                d.end(m)?;
                Message::ArtifactChunk(ArtifactChunk {
                    data,
                    name,
                    total,
                    offset,
                })
            }
            Kind::Cancel => {
                let mut m = d.map("cancel", CANCEL)?;
                d.key(&mut m, "reason")?;
                let reason = d.text("cancel.reason", MAX_REASON)?.to_owned();
                d.end(m)?;
                Message::Cancel(Cancel { reason })
            }
            Kind::Error => {
                let mut m = d.map("error", ERROR)?;
                d.key(&mut m, "code")?;
                let value = d.text("error.code", MAX_NAME)?;
                let code = ErrorCode::ALL
                    .into_iter()
                    .find(|c| c.as_str() == value)
                    .ok_or_else(|| {
                        invalid(
                            "error.code",
                            Invalid::UnknownErrorCode {
                                value: value.to_owned(),
                            },
                        )
                    })?;
                d.key(&mut m, "message")?;
                let message = d.text("error.message", MAX_REASON)?.to_owned();
                d.end(m)?;
                Message::Error(ErrorMessage { code, message })
            }
            Kind::Bye => {
                let m = d.map("bye", BYE)?;
                d.end(m)?;
                Message::Bye
            }
        };
        d.finish()?;
        message
            .check()
            .map_err(|(field, problem)| DecodeError::Invalid { field, problem })?;
        Ok(message)
    }
}

fn invalid(field: &'static str, problem: Invalid) -> DecodeError {
    DecodeError::Invalid { field, problem }
}

fn file_name(d: &mut Decoder<'_>, field: &'static str) -> Result<FileName, DecodeError> {
    let s = d.text(field, MAX_FILE_NAME)?;
    FileName::parse(s).map_err(|e| invalid(field, e.into()))
}

fn fixed<const N: usize>(d: &mut Decoder<'_>, field: &'static str) -> Result<[u8; N], DecodeError> {
    let b = d.bytes(field, N)?;
    <[u8; N]>::try_from(b).map_err(|_| {
        invalid(
            field,
            Invalid::WrongLength {
                len: b.len(),
                want: N,
            },
        )
    })
}

/// An array of `{data, path}` entries: `what` names the array, its `data`
/// and its `path`; at most `max_files` entries, `data` at most `max_data`
/// bytes (refused from the heads).
fn decode_files(
    d: &mut Decoder<'_>,
    [what, data_what, path_what]: [&'static str; 3],
    max_files: usize,
    max_data: usize,
) -> Result<Vec<(Vec<u8>, String)>, DecodeError> {
    let n = d.array(what, max_files)?;
    // Grown as entries decode: a short frame declaring many entries costs nothing.
    let mut files = Vec::new();
    for _ in 0..n {
        let mut fm = d.map(what, FILE_ENTRY)?;
        d.key(&mut fm, "data")?;
        let data = d.bytes(data_what, max_data)?.to_vec();
        d.key(&mut fm, "path")?;
        let path = d.text(path_what, MAX_FILE_NAME)?.to_owned();
        d.end(fm)?;
        files.push((data, path));
    }
    Ok(files)
}

/// The encoding of [`decode_files`].
fn encode_files<'a>(e: &mut Encoder, files: impl ExactSizeIterator<Item = (&'a [u8], &'a str)>) {
    e.array(files.len());
    for (data, path) in files {
        e.map(FILE_ENTRY);
        e.key("data");
        e.bytes(data);
        e.key("path");
        e.text(path);
    }
}

fn decode_hello(d: &mut Decoder<'_>) -> Result<Hello, DecodeError> {
    let mut m = d.map("hello", HELLO)?;
    d.key(&mut m, "evidence")?;
    let evidence = decode_files(
        d,
        [
            "hello.evidence",
            "hello.evidence.data",
            "hello.evidence.path",
        ],
        MAX_HELLO_EVIDENCE_FILES,
        MAX_HELLO_EVIDENCE,
    )?
    .into_iter()
    .map(|(data, path)| HelloEvidence { data, path })
    .collect();
    d.key(&mut m, "platform")?;
    let value = d.text("hello.platform", MAX_NAME)?;
    let platform = Platform::parse(value).map_err(|_| {
        invalid(
            "hello.platform",
            Invalid::UnknownPlatform {
                value: value.to_owned(),
            },
        )
    })?;
    d.key(&mut m, "versions")?;
    let n = d.array("hello.versions", MAX_VERSIONS)?;
    let mut versions = Vec::with_capacity(n);
    for _ in 0..n {
        let v = d.uint("hello.versions")?;
        versions.push(
            u32::try_from(v)
                .map_err(|_| invalid("hello.versions", Invalid::NotU32 { value: v }))?,
        );
    }
    d.key(&mut m, "max_frame")?;
    let v = d.uint("hello.max_frame")?;
    let max_frame =
        u32::try_from(v).map_err(|_| invalid("hello.max_frame", Invalid::NotU32 { value: v }))?;
    d.key(&mut m, "measurement")?;
    let measurement = d.bytes("hello.measurement", MAX_MEASUREMENT)?.to_vec();
    d.key(&mut m, "identity_key")?;
    let identity_key = fixed::<IDENTITY_KEY_LEN>(d, "hello.identity_key")?;
    d.end(m)?;
    Ok(Hello {
        versions,
        platform,
        max_frame,
        measurement,
        identity_key,
        evidence,
    })
}

fn decode_job_submit(d: &mut Decoder<'_>) -> Result<JobSubmit, DecodeError> {
    let mut m = d.map("job-submit", JOB_SUBMIT)?;
    d.key(&mut m, "spec")?;
    let spec = d.bytes("job-submit.spec", MAX_DOCUMENT)?.to_vec();
    d.key(&mut m, "inputs")?;
    let n = d.array("job-submit.inputs", MAX_INPUTS)?;
    // Grown as entries decode: a short frame declaring many entries costs nothing.
    let mut inputs = Vec::new();
    for _ in 0..n {
        let mut im = d.map("job-submit.inputs", INPUT_DECL)?;
        d.key(&mut im, "name")?;
        let name = file_name(d, "job-submit.inputs.name")?;
        d.key(&mut im, "size")?;
        let size = d.uint("job-submit.inputs.size")?;
        d.key(&mut im, "sha256")?;
        let sha256 = fixed::<32>(d, "job-submit.inputs.sha256")?;
        d.end(im)?;
        inputs.push(InputDecl { name, size, sha256 });
    }
    d.key(&mut m, "policy")?;
    let policy = d.bytes("job-submit.policy", MAX_DOCUMENT)?.to_vec();
    d.key(&mut m, "collateral")?;
    let collateral = decode_files(
        d,
        [
            "job-submit.collateral",
            "job-submit.collateral.data",
            "job-submit.collateral.path",
        ],
        MAX_SUBMIT_COLLATERAL_FILES,
        MAX_SUBMIT_COLLATERAL_FILE,
    )?
    .into_iter()
    .map(|(data, path)| CollateralFile { data, path })
    .collect();
    d.end(m)?;
    Ok(JobSubmit {
        spec,
        inputs,
        policy,
        collateral,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use ciborium::Value;

    use super::*;
    use crate::wire::cbor::in_deterministic_order;

    fn name(s: &str) -> FileName {
        FileName::parse(s).unwrap()
    }

    fn hello() -> Message {
        Message::Hello(Hello {
            versions: vec![1],
            platform: Platform::Simulated,
            max_frame: MIN_MAX_FRAME,
            measurement: vec![0xaa; 48],
            identity_key: [7; 32],
            evidence: vec![HelloEvidence {
                data: vec![0x84; 100],
                path: kolm_format::evidence::SIM_NITRO_DOC_PATH.into(),
            }],
        })
    }

    fn train() -> Message {
        Message::TrainProgress(TrainProgress {
            step: 12,
            eta_s: 94,
            steps: 200,
            loss_micros: 3_214_500,
            tokens_per_s: 367_000,
        })
    }

    #[test]
    fn train_progress_round_trips_with_its_five_integers() {
        let bytes = train().encode().unwrap();
        assert_eq!(Message::decode(&bytes).unwrap(), train());
        // A field of another message, or a float for the loss, is refused.
        let extra = mutated(&train(), |i| {
            body(i).push((text("line"), text("sealed words")))
        });
        assert!(Message::decode(&extra).is_err());
        let float = mutated(&train(), |i| body(i)[3].1 = Value::Float(3.2));
        assert!(Message::decode(&float).is_err());
        let t = Message::TrainProgress(TrainProgress {
            step: 0,
            eta_s: 0,
            steps: 0,
            loss_micros: 0,
            tokens_per_s: 0,
        });
        assert!(matches!(
            t.encode(),
            Err(EncodeError::Invalid {
                field: "train-progress.step",
                problem: Invalid::StepOutOfRange { .. }
            })
        ));
    }

    fn job() -> Message {
        Message::JobSubmit(JobSubmit {
            spec: b"[job]\nname = \"demo\"\n".to_vec(),
            inputs: vec![
                InputDecl {
                    name: name("corpus.txt"),
                    size: 5,
                    sha256: [1; 32],
                },
                InputDecl {
                    name: name("weights.bin"),
                    size: 0,
                    sha256: [2; 32],
                },
            ],
            policy: b"version = 1\n".to_vec(),
            collateral: vec![CollateralFile {
                data: b"{\"tcb_info\": \"...\"}".to_vec(),
                path: "evidence/tdx-collateral.json".into(),
            }],
        })
    }

    /// `message` through ciborium's generic value, changed by `f`, back to
    /// bytes: how the hostile cases below are made.
    fn mutated(message: &Message, f: impl FnOnce(&mut Vec<Value>)) -> Vec<u8> {
        let mut v: Value = ciborium::from_reader(&message.encode().unwrap()[..]).unwrap();
        let Value::Array(items) = &mut v else {
            panic!("not an array")
        };
        f(items);
        let mut out = Vec::new();
        ciborium::into_writer(&v, &mut out).unwrap();
        out
    }

    fn body(items: &mut [Value]) -> &mut Vec<(Value, Value)> {
        match &mut items[2] {
            Value::Map(m) => m,
            other => panic!("body is {other:?}"),
        }
    }

    fn text(s: &str) -> Value {
        Value::Text(s.to_owned())
    }

    /// `{data, path}` file entries as the wire carries them (hello
    /// evidence, job-submit collateral), whatever the rules say.
    fn file_entries<'a>(files: impl Iterator<Item = (&'a [u8], &'a str)>) -> Value {
        Value::Array(
            files
                .map(|(data, path)| {
                    Value::Map(vec![
                        (text("data"), Value::Bytes(data.to_vec())),
                        (text("path"), text(path)),
                    ])
                })
                .collect(),
        )
    }

    #[test]
    fn field_lists_are_in_deterministic_key_order() {
        for fields in [
            HELLO,
            FILE_ENTRY,
            JOB_SUBMIT,
            INPUT_DECL,
            INPUT_CHUNK,
            PROGRESS,
            TRAIN_PROGRESS,
            LOG,
            ARTIFACT_CHUNK,
            CANCEL,
            ERROR,
            BYE,
        ] {
            assert!(in_deterministic_order(fields), "{fields:?}");
        }
    }

    #[test]
    fn the_envelope_is_version_kind_body_and_ciborium_reads_it() {
        let bytes = Message::Bye.encode().unwrap();
        assert_eq!(bytes, [0x83, 0x01, 0x63, b'b', b'y', b'e', 0xa0]);
        let v: Value = ciborium::from_reader(&hello().encode().unwrap()[..]).unwrap();
        let Value::Array(items) = v else { panic!() };
        assert_eq!(items[0], Value::Integer(1.into()));
        assert_eq!(items[1], text("hello"));
        let keys: Vec<Value> = match &items[2] {
            Value::Map(m) => m.iter().map(|(k, _)| k.clone()).collect(),
            _ => panic!(),
        };
        assert_eq!(keys, HELLO.iter().map(|k| text(k)).collect::<Vec<_>>());
    }

    #[test]
    fn version_is_checked_first_then_the_envelope_then_the_kind() {
        for (bytes, want) in [
            (
                mutated(&hello(), |i| i[0] = Value::Integer(2.into())),
                DecodeError::UnknownVersion { version: 2 },
            ),
            // A future version's envelope of another shape: still "unknown version".
            (vec![0x81, 0x07], DecodeError::UnknownVersion { version: 7 }),
            (vec![0x80], DecodeError::EnvelopeLength { len: 0 }),
            (
                mutated(&Message::Bye, |i| i.push(Value::Null)),
                DecodeError::EnvelopeLength { len: 4 },
            ),
            (
                mutated(&Message::Bye, |i| i[1] = text("launch-missiles")),
                DecodeError::UnknownKind {
                    kind: "launch-missiles".into(),
                },
            ),
        ] {
            assert_eq!(Message::decode(&bytes), Err(want));
        }
        let err =
            Message::decode(&mutated(&hello(), |i| i[0] = Value::Integer(9.into()))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported protocol version 9 (this build speaks [1])"
        );
    }

    #[test]
    fn fields_must_be_exactly_the_declared_ones_in_order() {
        let unknown = mutated(&hello(), |i| {
            body(i).push((text("debug"), Value::Integer(1.into())))
        });
        assert!(matches!(
            Message::decode(&unknown),
            Err(DecodeError::UnknownField { message: "hello", ref field, .. }) if field == "debug"
        ));
        let missing = mutated(&hello(), |i| {
            body(i).pop();
        });
        assert_eq!(
            Message::decode(&missing),
            Err(DecodeError::MissingField {
                message: "hello",
                field: "identity_key"
            })
        );
        let swapped = mutated(&hello(), |i| body(i).swap(1, 2));
        assert!(matches!(
            Message::decode(&swapped),
            Err(DecodeError::FieldOrder { message: "hello", ref field, .. }) if field == "versions"
        ));
        let repeated = mutated(&Message::Cancel(Cancel { reason: "x".into() }), |i| {
            let again = body(i)[0].clone();
            body(i).push(again);
        });
        assert!(matches!(
            Message::decode(&repeated),
            Err(DecodeError::FieldOrder {
                message: "cancel",
                ..
            })
        ));
        let inner = mutated(&job(), |i| {
            let Value::Array(inputs) = &mut body(i)[1].1 else {
                panic!()
            };
            let Value::Map(first) = &mut inputs[0] else {
                panic!()
            };
            first.push((text("mode"), Value::Integer(0o755.into())));
        });
        assert!(matches!(
            Message::decode(&inner),
            Err(DecodeError::UnknownField {
                message: "job-submit.inputs",
                ..
            })
        ));
    }

    #[test]
    fn wrong_types_trailing_bytes_and_non_deterministic_forms_are_refused() {
        let wrong = mutated(&hello(), |i| body(i)[3].1 = text("65536"));
        assert!(matches!(
            Message::decode(&wrong),
            Err(DecodeError::WrongType {
                what: "hello.max_frame",
                expected: "unsigned integer",
                found: "text string",
                ..
            })
        ));
        let negative = mutated(&job(), |i| {
            let Value::Array(inputs) = &mut body(i)[1].1 else {
                panic!()
            };
            let Value::Map(first) = &mut inputs[0] else {
                panic!()
            };
            first[1].1 = Value::Integer((-5).into());
        });
        assert!(matches!(
            Message::decode(&negative),
            Err(DecodeError::WrongType {
                found: "negative integer",
                ..
            })
        ));
        let mut trailing = Message::Bye.encode().unwrap();
        trailing.push(0);
        assert_eq!(
            Message::decode(&trailing),
            Err(DecodeError::TrailingBytes {
                offset: 7,
                count: 1
            })
        );
        // The version as a two-byte integer: the same value, not the same bytes.
        let long_version = [0x83, 0x18, 0x01, 0x63, b'b', b'y', b'e', 0xa0];
        assert!(matches!(
            Message::decode(&long_version),
            Err(DecodeError::NotShortest {
                what: "version",
                offset: 1
            })
        ));
        // An indefinite-length body map.
        let indefinite = [0x83, 0x01, 0x63, b'b', b'y', b'e', 0xbf, 0xff];
        assert!(matches!(
            Message::decode(&indefinite),
            Err(DecodeError::Indefinite { what: "bye", .. })
        ));
        // A tagged envelope.
        assert!(matches!(
            Message::decode(&[0xd8, 0x18, 0x80]),
            Err(DecodeError::WrongType { found: "tag", .. })
        ));
        assert!(matches!(
            Message::decode(&[]),
            Err(DecodeError::Truncated {
                what: "message",
                offset: 0,
                need: 1,
                have: 0
            })
        ));
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_field() {
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (
                mutated(&hello(), |i| {
                    body(i)[2].1 =
                        Value::Array(vec![Value::Integer(2.into()), Value::Integer(1.into())])
                }),
                "hello.versions",
                "ascending",
            ),
            (
                mutated(&hello(), |i| body(i)[1].1 = text("sgx")),
                "hello.platform",
                "unknown platform \"sgx\"",
            ),
            (
                mutated(&hello(), |i| body(i)[5].1 = Value::Bytes(vec![0; 31])),
                "hello.identity_key",
                "31 bytes, must be exactly 32",
            ),
            (
                mutated(&hello(), |i| body(i)[3].1 = Value::Integer(4096.into())),
                "hello.max_frame",
                "below the smallest frame limit",
            ),
            (
                mutated(&job(), |i| {
                    let Value::Array(inputs) = &mut body(i)[1].1 else {
                        panic!()
                    };
                    let Value::Map(first) = &mut inputs[0] else {
                        panic!()
                    };
                    first[0].1 = text("../../etc/passwd");
                }),
                "job-submit.inputs.name",
                "only plain file names",
            ),
            (
                mutated(&job(), |i| {
                    let Value::Array(inputs) = &mut body(i)[1].1 else {
                        panic!()
                    };
                    let Value::Map(second) = &mut inputs[1] else {
                        panic!()
                    };
                    second[0].1 = text("corpus.txt");
                }),
                "job-submit.inputs",
                "\"corpus.txt\" is declared twice",
            ),
            (
                mutated(&job(), |i| {
                    let Value::Array(inputs) = &mut body(i)[1].1 else {
                        panic!()
                    };
                    for input in inputs.iter_mut() {
                        let Value::Map(m) = input else { panic!() };
                        m[1].1 = Value::Integer(u64::MAX.into());
                    }
                }),
                "job-submit.inputs",
                "more than 2^64 - 1",
            ),
            (
                mutated(
                    &Message::Progress(Progress {
                        done: 1,
                        phase: "run".into(),
                        total: 2,
                    }),
                    |i| body(i)[0].1 = Value::Integer(3.into()),
                ),
                "progress.done",
                "done 3 is more than total 2",
            ),
            (
                mutated(&train(), |i| body(i)[0].1 = Value::Integer(0.into())),
                "train-progress.step",
                "step 0 is not 1 to steps (200)",
            ),
            (
                mutated(&train(), |i| body(i)[0].1 = Value::Integer(201.into())),
                "train-progress.step",
                "step 201 is not 1 to steps (200)",
            ),
            (
                mutated(&train(), |i| {
                    body(i)[3].1 = Value::Integer((MAX_LOSS_MICROS + 1).into())
                }),
                "train-progress.loss_micros",
                "over the largest loss",
            ),
            (
                mutated(
                    &Message::Progress(Progress {
                        done: 1,
                        phase: "run".into(),
                        total: 2,
                    }),
                    |i| body(i)[1].1 = text("Run!"),
                ),
                "progress.phase",
                "a-z, 0-9 and -",
            ),
            (
                mutated(
                    &Message::ArtifactChunk(ArtifactChunk {
                        data: vec![1, 2],
                        name: name("a.zip"),
                        total: 4,
                        offset: 2,
                    }),
                    |i| body(i)[3].1 = Value::Integer(3.into()),
                ),
                "artifact-chunk.offset",
                "passes the end (4)",
            ),
            (
                mutated(
                    &Message::InputChunk(InputChunk {
                        data: vec![1],
                        name: name("a"),
                        offset: 0,
                    }),
                    |i| body(i)[2].1 = Value::Integer(u64::MAX.into()),
                ),
                "input-chunk.offset",
                "overflows 64 bits",
            ),
            (
                mutated(
                    &Message::Error(ErrorMessage::new(ErrorCode::Busy, "busy")),
                    |i| body(i)[0].1 = text("teapot"),
                ),
                "error.code",
                "unknown error code \"teapot\"",
            ),
            (
                mutated(
                    &Message::Log(LogLine {
                        line: "x".into(),
                        stream: LogStream::Stdout,
                    }),
                    |i| body(i)[1].1 = text("stdin"),
                ),
                "log.stream",
                "unknown log stream \"stdin\"",
            ),
        ];
        for (bytes, field, says) in cases {
            let err = Message::decode(&bytes).unwrap_err();
            assert!(
                matches!(&err, DecodeError::Invalid { field: f, .. } if *f == field),
                "{field}: {err:?}"
            );
            assert!(err.to_string().contains(says), "{field}: {err}");
        }
    }

    #[test]
    fn declared_lengths_over_a_field_cap_are_refused_from_the_head() {
        // A measurement declared 2^31 bytes long in a 40-byte frame.
        let mut bytes = mutated(&hello(), |i| body(i)[4].1 = Value::Bytes(vec![]));
        let at = bytes.iter().position(|&b| b == 0x40).unwrap();
        bytes.splice(at..=at, [0x5a, 0x80, 0, 0, 0]);
        assert_eq!(
            Message::decode(&bytes),
            Err(DecodeError::TooLong {
                what: "hello.measurement",
                len: 1 << 31,
                max: MAX_MEASUREMENT
            })
        );
    }

    #[test]
    fn the_encoder_refuses_what_the_decoder_would() {
        let mut h = hello();
        if let Message::Hello(h) = &mut h {
            h.versions = vec![];
        }
        assert!(matches!(
            h.encode(),
            Err(EncodeError::Invalid {
                field: "hello.versions",
                problem: Invalid::Versions
            })
        ));
        let p = Message::Progress(Progress {
            done: 3,
            phase: "x".into(),
            total: 2,
        });
        assert!(matches!(
            p.encode(),
            Err(EncodeError::Invalid {
                field: "progress.done",
                ..
            })
        ));
        let l = Message::Log(LogLine {
            line: "x".repeat(MAX_LOG_LINE + 1),
            stream: LogStream::Stderr,
        });
        assert!(matches!(
            l.encode(),
            Err(EncodeError::Invalid {
                field: "log.line",
                problem: Invalid::TooLong { .. }
            })
        ));
    }

    #[test]
    fn file_names_are_plain_names_only() {
        for ok in [
            "a",
            "corpus.txt",
            "x..y",
            "weights-v2_final.bin",
            "ünïcode",
            &"n".repeat(255),
        ] {
            assert_eq!(FileName::parse(ok).unwrap().as_str(), ok);
        }
        for (bad, class) in [
            ("", "Empty"),
            (".", "LeadingDot"),
            ("..", "LeadingDot"),
            (".hidden", "LeadingDot"),
            ("../x", "Slash"),
            ("a/b", "Slash"),
            ("/etc", "Slash"),
            ("a\0b", "Control"),
            ("line\nbreak", "Control"),
        ] {
            let err = FileName::parse(bad).unwrap_err();
            assert!(format!("{err:?}").starts_with(class), "{bad:?}: {err:?}");
        }
        assert!(matches!(
            FileName::parse(&"n".repeat(256)),
            Err(FileNameError::TooLong { len: 256, .. })
        ));
    }

    #[test]
    fn error_messages_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_REASON);
        let e = ErrorMessage::new(ErrorCode::Internal, &long);
        assert_eq!(e.message.len(), MAX_REASON);
        assert!(Message::Error(e).encode().is_ok());
    }

    #[test]
    fn common_version_is_the_highest_both_speak() {
        let Message::Hello(mut h) = hello() else {
            panic!()
        };
        h.versions = vec![1, 3, 4];
        assert_eq!(h.common_version(&[1, 3]), Some(3));
        assert_eq!(h.common_version(&[2]), None);
    }

    /// The evidence rules hold both ways: what encode refuses, decode
    /// refuses (the field is named), and a valid hello round-trips.
    #[test]
    fn hello_evidence_is_slots_of_its_platform_once_each_with_one_attestation() {
        use kolm_format::evidence::{SIM_NITRO_DOC_PATH, SNP_REPORT_BYTES};
        let Message::Hello(base) = hello() else {
            panic!()
        };
        let ev = |path: &str, len: usize| HelloEvidence {
            data: vec![1; len],
            path: path.into(),
        };
        let with = |platform: Platform, evidence: Vec<HelloEvidence>| {
            Message::Hello(Hello {
                platform,
                evidence,
                ..base.clone()
            })
        };
        let good = [
            with(Platform::None, vec![]),
            with(Platform::Simulated, vec![ev(SIM_NITRO_DOC_PATH, 4000)]),
            with(
                Platform::SevSnp,
                vec![
                    ev("evidence/snp-report.bin", SNP_REPORT_BYTES as usize),
                    ev("evidence/snp-vcek.der", 1300),
                    ev("evidence/snp-ask-ark.pem", 4600),
                ],
            ),
            with(Platform::Tdx, vec![ev("evidence/tdx-quote.bin", 5000)]),
        ];
        for m in good {
            let bytes = m.encode().unwrap();
            assert_eq!(Message::decode(&bytes).unwrap(), m);
        }
        let bad = [
            (with(Platform::Simulated, vec![]), "EvidenceAttestations"),
            (
                with(Platform::None, vec![ev(SIM_NITRO_DOC_PATH, 10)]),
                "EvidenceSlot",
            ),
            (
                with(Platform::Nitro, vec![ev(SIM_NITRO_DOC_PATH, 10)]),
                "EvidenceSlot",
            ),
            (
                with(Platform::Tdx, vec![ev("evidence/tdx-collateral.json", 10)]),
                "EvidenceAttestations",
            ),
            (
                with(
                    Platform::Nitro,
                    vec![ev("evidence/nitro.cose", 10), ev("evidence/nitro.cose", 10)],
                ),
                "DuplicateEvidence",
            ),
            (
                with(Platform::SevSnp, vec![ev("evidence/snp-report.bin", 1185)]),
                "EvidenceTooLarge",
            ),
            (
                with(
                    Platform::Tdx,
                    vec![
                        ev("evidence/tdx-quote.bin", 10),
                        ev("evidence/tdx-collateral.json", MAX_HELLO_EVIDENCE),
                    ],
                ),
                "TooLong",
            ),
        ];
        for (m, class) in bad {
            let EncodeError::Invalid { field, problem } = m.encode().unwrap_err();
            assert_eq!(field, "hello.evidence");
            assert!(format!("{problem:?}").starts_with(class), "{problem:?}");
            // The same message, forced onto the wire, is refused on decode.
            let Message::Hello(h) = &m else { panic!() };
            let bytes = mutated(&hello(), |i| {
                let b = body(i);
                b[0].1 = file_entries(h.evidence.iter().map(|f| (&f.data[..], &f.path[..])));
                b[1].1 = text(h.platform.as_str());
            });
            let err = Message::decode(&bytes).unwrap_err();
            assert!(
                matches!(
                    &err,
                    DecodeError::Invalid {
                        field: "hello.evidence",
                        ..
                    }
                ),
                "{class}: {err:?}"
            );
        }
    }

    /// The job-submit's collateral rules hold both ways: what encode
    /// refuses, decode refuses naming the field, and a valid submit
    /// round-trips.
    #[test]
    fn submit_collateral_is_hardware_collateral_slots_once_each_within_their_caps() {
        let Message::JobSubmit(base) = job() else {
            panic!()
        };
        let file = |path: &str, len: usize| CollateralFile {
            data: vec![0x30; len],
            path: path.into(),
        };
        let with = |collateral: Vec<CollateralFile>| {
            Message::JobSubmit(JobSubmit {
                collateral,
                ..base.clone()
            })
        };
        let good = [
            with(vec![]),
            with(vec![file("evidence/tdx-collateral.json", 20_000)]),
            // Every slot at its cap, in any order.
            with(vec![
                file("evidence/tdx-collateral.json", 1024 * 1024),
                file("evidence/snp-vcek.der", 16 * 1024),
                file("evidence/snp-ask-ark.pem", 64 * 1024),
            ]),
        ];
        for m in good {
            let bytes = m.encode().unwrap();
            assert_eq!(Message::decode(&bytes).unwrap(), m);
        }
        let nine: Vec<CollateralFile> = (0..9).map(|_| file("evidence/snp-vcek.der", 10)).collect();
        let bad = [
            // A simulated TEE's collateral: it writes its own.
            (
                with(vec![file("evidence/sim-tdx-collateral.json", 10)]),
                "CollateralSlot",
            ),
            // An attestation, the index, a path out of the slot.
            (
                with(vec![file("evidence/tdx-quote.bin", 10)]),
                "CollateralSlot",
            ),
            (
                with(vec![file("evidence/index.json", 10)]),
                "CollateralSlot",
            ),
            (
                with(vec![file("evidence/../tdx-collateral.json", 10)]),
                "CollateralSlot",
            ),
            (with(vec![file("snp-vcek.der", 10)]), "CollateralSlot"),
            (
                with(vec![
                    file("evidence/snp-vcek.der", 10),
                    file("evidence/snp-ask-ark.pem", 10),
                    file("evidence/snp-vcek.der", 10),
                ]),
                "DuplicateEvidence",
            ),
            (
                with(vec![file("evidence/snp-vcek.der", 16 * 1024 + 1)]),
                "EvidenceTooLarge",
            ),
            (with(nine), "TooLong"),
        ];
        for (m, class) in bad {
            let EncodeError::Invalid { field, problem } = m.encode().unwrap_err();
            assert_eq!(field, "job-submit.collateral");
            assert!(format!("{problem:?}").starts_with(class), "{problem:?}");
            // The same message, forced onto the wire, is refused on decode.
            let Message::JobSubmit(j) = &m else { panic!() };
            let bytes = mutated(&job(), |i| {
                body(i)[3].1 =
                    file_entries(j.collateral.iter().map(|f| (&f.data[..], &f.path[..])));
            });
            let err = Message::decode(&bytes).unwrap_err();
            let named = match &err {
                DecodeError::Invalid { field, .. } => *field,
                // Nine files: refused from the array's head.
                DecodeError::TooLong { what, .. } => what,
                _ => "",
            };
            assert_eq!(named, "job-submit.collateral", "{class}: {err:?}");
        }
        let e = with(vec![file("evidence/tdx-quote.bin", 1)])
            .encode()
            .unwrap_err();
        assert!(
            e.to_string().contains(
                "(allowed: evidence/snp-ask-ark.pem, evidence/snp-vcek.der, \
                 evidence/tdx-collateral.json)"
            ),
            "{e}"
        );
        // A file over the largest cap is refused from its head, before its
        // bytes are read.
        let mut huge = mutated(&job(), |i| {
            body(i)[3].1 = Value::Array(vec![Value::Map(vec![
                (text("data"), Value::Bytes(vec![])),
                (text("path"), text("evidence/tdx-collateral.json")),
            ])]);
        });
        let at = huge.windows(5).position(|w| w == b"\x64data").unwrap() + 5;
        huge.splice(at..=at, [0x5a, 0x00, 0x10, 0x00, 0x01]);
        assert_eq!(
            Message::decode(&huge),
            Err(DecodeError::TooLong {
                what: "job-submit.collateral.data",
                len: (1 << 20) + 1,
                max: MAX_SUBMIT_COLLATERAL_FILE
            })
        );
        // The entries' own fields: exactly data and path, typed.
        let extra = mutated(&job(), |i| {
            let Value::Array(files) = &mut body(i)[3].1 else {
                panic!()
            };
            let Value::Map(first) = &mut files[0] else {
                panic!()
            };
            first.push((text("role"), text("collateral")));
        });
        assert!(matches!(
            Message::decode(&extra),
            Err(DecodeError::UnknownField { message: "job-submit.collateral", ref field, .. })
                if field == "role"
        ));
        let as_text = mutated(&job(), |i| {
            let Value::Array(files) = &mut body(i)[3].1 else {
                panic!()
            };
            let Value::Map(first) = &mut files[0] else {
                panic!()
            };
            first[0].1 = text("{}");
        });
        assert!(matches!(
            Message::decode(&as_text),
            Err(DecodeError::WrongType {
                what: "job-submit.collateral.data",
                expected: "byte string",
                ..
            })
        ));
        // A submit of before this field is refused, naming it.
        let without = mutated(&job(), |i| {
            body(i).pop();
        });
        assert_eq!(
            Message::decode(&without),
            Err(DecodeError::MissingField {
                message: "job-submit",
                field: "collateral"
            })
        );
    }

    #[test]
    fn the_largest_submitted_collateral_file_is_the_largest_slot_cap() {
        let largest = hardware_collateral_slots()
            .map(|s| s.max_bytes)
            .max()
            .unwrap();
        assert_eq!(largest, MAX_SUBMIT_COLLATERAL_FILE as u64);
        assert_eq!(
            collateral_paths(),
            [
                "evidence/snp-ask-ark.pem",
                "evidence/snp-vcek.der",
                "evidence/tdx-collateral.json"
            ]
        );
        assert!(collateral_slot("evidence/sim-snp-vcek.der").is_none());
        assert!(collateral_slot("evidence/azure-evidence.json").is_none());
    }

    #[test]
    fn identity_report_data_has_its_own_domain() {
        use kolm_format::binding::{identity_report_data, report_data_for};
        let key = [9u8; 32];
        let rd = identity_report_data(&key);
        assert_ne!(rd, identity_report_data(&[8u8; 32]));
        let cid = kolm_format::content_id::ContentId::from_sha256(key);
        assert_ne!(
            rd,
            report_data_for(kolm_format::version::SpecVersion::V2, &cid)
        );
    }
}
