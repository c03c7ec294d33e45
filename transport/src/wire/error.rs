//! `error`, either way: what went wrong, as a code and a public message;
//! the sender closes the connection. Its codec and its rule.

use std::fmt;

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError, MAX_NAME, invalid};
use super::rules::{Invalid, Rule, max_len};

/// Longest error message or cancel reason, in bytes.
pub const MAX_REASON: usize = 4096;

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

impl Codec for ErrorMessage {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("code");
        e.text(self.code.as_str());
        e.key("message");
        e.text(&self.message);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("error", Self::FIELDS)?;
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
        Ok(ErrorMessage { code, message })
    }
}

impl Body for ErrorMessage {
    const FIELDS: &'static [&'static str] = &["code", "message"];

    fn check(&self) -> Rule {
        max_len("error.message", self.message.len(), MAX_REASON)
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::message::*;

    #[test]
    fn error_messages_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_REASON);
        let e = ErrorMessage::new(ErrorCode::Internal, &long);
        assert_eq!(e.message.len(), MAX_REASON);
        assert!(Message::Error(e).encode().is_ok());
    }
}
