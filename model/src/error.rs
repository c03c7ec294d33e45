//! The one error type of the crate: each variant names the check that failed
//! and carries what was found.

use std::path::PathBuf;

/// Why a model could not be loaded, tokenised or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The file could not be opened or read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// The file does not start with the GGUF magic.
    #[error("not a GGUF file: starts with {found:02x?}, expected \"GGUF\"")]
    NotGguf {
        /// The first bytes of the file (fewer when the file is shorter).
        found: Vec<u8>,
    },
    /// A GGUF version this loader does not read (2 and 3 are read).
    #[error("GGUF version {found} is not supported (2 or 3)")]
    UnsupportedVersion {
        /// The version in the header.
        found: u32,
    },
    /// The file ends before what its header declares.
    #[error("GGUF truncated: {what} needs bytes up to offset {needed}, the file has {file_size}")]
    Truncated {
        /// The header, or the tensor whose data is cut off.
        what: String,
        /// The end offset the header implies (0 when unknown: cut inside the header).
        needed: u64,
        /// The file's size.
        file_size: u64,
    },
    /// The GGUF parser rejected the header (other than by running out of bytes).
    #[error("malformed GGUF header: {reason}")]
    Malformed {
        /// The parser's message.
        reason: String,
    },
    /// A metadata key the model needs is absent.
    #[error("GGUF metadata `{key}` is missing")]
    MetadataMissing {
        /// The key.
        key: String,
    },
    /// A metadata key holds a value of the wrong type.
    #[error("GGUF metadata `{key}` is {found}, expected {expected}")]
    MetadataType {
        /// The key.
        key: String,
        /// The type the loader needs.
        expected: &'static str,
        /// The value's type (and value for scalars).
        found: String,
    },
    /// `general.architecture` is not one this loader runs.
    #[error("GGUF architecture `{found}` is not supported (llama)")]
    UnsupportedArchitecture {
        /// The architecture in the metadata.
        found: String,
    },
    /// A hyper-parameter is out of range or inconsistent with the others.
    #[error("GGUF hyper-parameter `{key}` = {value}: {why}")]
    BadHyperParameter {
        /// The metadata key.
        key: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A hyper-parameter disagrees with the tensors the file holds (checked
    /// before anything is sized from it).
    #[error(
        "GGUF hyper-parameter `{key}` = {value}, but tensor `{tensor}` in the file implies {implied}"
    )]
    HyperParameterMismatch {
        /// The metadata key.
        key: String,
        /// Its value.
        value: String,
        /// The tensor (or tensor family, `blk.N`) it was checked against.
        tensor: String,
        /// What the tensors imply.
        implied: String,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("GGUF tensor `{name}` is missing")]
    MissingTensor {
        /// The GGUF tensor name.
        name: String,
    },
    /// The file holds a tensor this architecture does not use.
    #[error("GGUF tensor `{name}`: {why}")]
    UnsupportedTensor {
        /// The GGUF tensor name.
        name: String,
        /// What it is and why it is refused.
        why: &'static str,
    },
    /// Bytes follow the last tensor's data (beyond the alignment padding).
    #[error(
        "GGUF has trailing bytes: the tensor data ends at {data_end}, the file has {file_size}"
    )]
    TrailingBytes {
        /// End offset of the last tensor's data.
        data_end: u64,
        /// The file's size.
        file_size: u64,
    },
    /// A tensor's shape disagrees with the hyper-parameters.
    #[error("GGUF tensor `{name}` has shape {found:?}, the metadata implies {expected:?}")]
    WrongShape {
        /// The GGUF tensor name.
        name: String,
        /// Shape implied by the metadata (row-major, outer first).
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A weight handed in the kernels' layout has the wrong number of
    /// values (or the list has the wrong number of tensors).
    #[error("kernel-layout parameter {index} ({what}) has {found} values, expected {expected}")]
    ParamShape {
        /// Index in `Config::params` order.
        index: usize,
        /// Its role.
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// A tensor is stored in a type that is valid GGUF but wrong for its role
    /// (a norm weight must be a float type).
    #[error("GGUF tensor `{name}` is {found}, expected {expected}")]
    WrongDtype {
        /// The GGUF tensor name.
        name: String,
        /// What its role allows.
        expected: &'static str,
        /// The type in the file.
        found: String,
    },
    /// A tensor type that is not a storage quantisation (`Q8_1`, `Q8_K` are
    /// ggml's activation formats).
    #[error(
        "GGUF tensor `{name}` uses quantisation {found}, which this loader does not dequantise"
    )]
    UnsupportedQuantisation {
        /// The GGUF tensor name.
        name: String,
        /// The ggml type.
        found: String,
    },
    /// Dequantising a tensor failed.
    #[error("dequantising `{name}`: {reason}")]
    Dequantise {
        /// The GGUF tensor name.
        name: String,
        /// candle's message.
        reason: String,
    },
    /// The tokenizer described by the metadata could not be built or used.
    #[error("tokenizer: {reason}")]
    Tokenizer {
        /// What failed.
        reason: String,
    },
    /// The chat template in the metadata is not the one this crate renders.
    #[error("chat template not supported: {reason}")]
    UnsupportedChatTemplate {
        /// Why.
        reason: String,
    },
    /// An input token id is not in the vocabulary.
    #[error("token id {id} at position {position} is outside the vocabulary of {vocab}")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// Its position in the input.
        position: usize,
        /// The vocabulary size.
        vocab: usize,
    },
    /// The input is too short for the operation.
    #[error("{what} needs at least {needed} tokens, got {got}")]
    TooFewTokens {
        /// The operation.
        what: &'static str,
        /// Its minimum.
        needed: usize,
        /// The input's length.
        got: usize,
    },
    /// The sequence would run past the model's context length.
    #[error("{len} positions exceed the model's context length {max}")]
    ContextTooLong {
        /// Positions needed.
        len: usize,
        /// The context length from the metadata.
        max: usize,
    },
    /// A tensor operation failed (a bug: shapes are checked at load time).
    #[error("tensor operation: {reason}")]
    Compute {
        /// candle's message.
        reason: String,
    },
    /// The model configuration refused the sizes in a way that is not a
    /// [`ModelError::BadHyperParameter`] (none today).
    #[error("model configuration: {error}")]
    Config {
        /// Its refusal.
        error: kolm_model_config::ConfigError,
    },
}

/// candle's message without the backtrace it wraps its errors in.
pub(crate) fn candle_message(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(inner),
        other => other.to_string(),
    }
}

/// Whether candle gave up because the reader ran out of bytes.
pub(crate) fn is_unexpected_eof(e: &candle_core::Error) -> bool {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => is_unexpected_eof(inner),
        candle_core::Error::Io(io) => io.kind() == std::io::ErrorKind::UnexpectedEof,
        _ => false,
    }
}

impl From<candle_core::Error> for ModelError {
    /// Only for tensor arithmetic in the forward pass; loading maps candle's
    /// errors to the specific variants above.
    fn from(e: candle_core::Error) -> Self {
        Self::Compute {
            reason: candle_message(&e),
        }
    }
}
