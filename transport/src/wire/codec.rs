//! The codec each wire type implements, after rustls
//! (`rustls/src/msgs/codec.rs`: `encode` into a buffer, `read` from a
//! checked reader): [`Codec`] over the deterministic CBOR of [`super::cbor`],
//! and [`Body`], a message body's codec with the rules its values follow.
//! Also the errors of both directions ([`DecodeError`], [`EncodeError`])
//! and the field readers the message modules share.

use kolm_format::reader::ReadError;

use super::cbor::{Decoder, Encoder};
use super::file_name::{FileName, MAX_FILE_NAME};
use super::message::{PROTOCOL_VERSION, SUPPORTED_VERSIONS};
use super::rules::{Invalid, Rule};

/// A wire type: its one encoding and its one strict reader.
pub(crate) trait Codec: Sized {
    /// Appends the value's encoding. The caller has checked the rules
    /// ([`Body::check`]): what is written here is what [`Codec::read`]
    /// reads back.
    fn encode(&self, e: &mut Encoder);

    /// Reads one value: every field in order, each within its cap; a
    /// value that cannot be represented (an unknown name, a bad file name)
    /// is refused here, the rules between fields by [`Body::check`].
    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError>;
}

/// The body of a message: a map of exactly [`Body::FIELDS`].
pub(crate) trait Body: Codec {
    /// The body's keys, in deterministic key order (a unit test checks
    /// the order).
    const FIELDS: &'static [&'static str];

    /// The rules a value must follow beyond its Rust type; both
    /// `Message::encode` and `Message::decode` apply them (decode after the
    /// whole message is read).
    fn check(&self) -> Rule;
}

/// Longest kind or enumeration value on the wire.
pub(super) const MAX_NAME: usize = 32;
/// Byte strings bounded only by the frame (chunk data).
pub(super) const FRAME_BOUNDED: usize = usize::MAX;

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

/// A field whose value breaks a rule, as a decode error.
pub(super) fn invalid(field: &'static str, problem: Invalid) -> DecodeError {
    DecodeError::Invalid { field, problem }
}

/// A [`FileName`] field.
pub(super) fn file_name(d: &mut Decoder<'_>, field: &'static str) -> Result<FileName, DecodeError> {
    let s = d.text(field, MAX_FILE_NAME)?;
    FileName::parse(s).map_err(|e| invalid(field, e.into()))
}

/// A byte string of exactly `N` bytes (a longer one refused from its head).
pub(super) fn fixed<const N: usize>(
    d: &mut Decoder<'_>,
    field: &'static str,
) -> Result<[u8; N], DecodeError> {
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
