//! [`NitroError`]: why bytes are not a well-formed Nitro attestation
//! document. Cryptographic and policy failures are not errors: they are
//! failing checks in the [`Evaluation`](crate::attested::Evaluation).

/// Why an input is not a well-formed Nitro attestation document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NitroError {
    /// The input is over the size cap.
    #[error("input is {size} bytes, over the {max}-byte cap")]
    TooLarge {
        /// Input length.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// Not COSE_Sign1 bytes, base64 text of them, or an X.509 certificate.
    #[error(
        "input is not a COSE_Sign1 document (raw or base64) nor an X.509 certificate carrying one \
         (first bytes {prefix})"
    )]
    UnrecognisedInput {
        /// The first bytes, hex.
        prefix: String,
    },
    /// Not binary COSE_Sign1 bytes, on the path that takes only that form
    /// (an artifact's `evidence/nitro.cose`).
    #[error(
        "not a binary COSE_Sign1 (untagged, first byte 0x84, or tag 18, first byte 0xd2; \
         base64, hex and certificate forms are accepted only as raw evidence): first bytes \
         {prefix}"
    )]
    NotBinaryCose {
        /// The first bytes, hex.
        prefix: String,
    },
    /// The input looked like base64 text but does not decode.
    #[error("base64: {reason}")]
    Base64 {
        /// What the decoder said.
        reason: String,
    },
    /// The X.509 certificate that should carry the document is malformed
    /// or carries none.
    #[error("TLS certificate: {reason}")]
    TlsCertificate {
        /// What is wrong.
        reason: String,
    },
    /// The COSE_Sign1 envelope is malformed.
    #[error("COSE_Sign1: {reason}")]
    Cose {
        /// What is wrong.
        reason: String,
    },
    /// The protected header names an algorithm other than ES384.
    #[error(
        "COSE_Sign1 algorithm is {found}; only ES384 (-35) in the protected header is accepted"
    )]
    Algorithm {
        /// The algorithm found (or `none`).
        found: String,
    },
    /// The payload is not a CBOR map.
    #[error("attestation document: {reason}")]
    Payload {
        /// What is wrong.
        reason: String,
    },
    /// A payload key outside the NSM attestation document schema.
    #[error("attestation document: unknown key {key}")]
    UnknownKey {
        /// The key, as CBOR diagnostic-ish text.
        key: String,
    },
    /// A payload key that appears twice.
    #[error("attestation document: duplicate key {key:?}")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A mandatory payload key is absent.
    #[error("attestation document: missing key {key:?}")]
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// A payload field has the wrong type, size or value.
    #[error("attestation document field {field}: {reason}")]
    Field {
        /// The field (`pcrs[3]`, `cabundle[1]`, ...).
        field: String,
        /// What is wrong.
        reason: String,
    },
}

impl NitroError {
    pub(crate) fn field(field: impl Into<String>, reason: impl Into<String>) -> NitroError {
        NitroError::Field {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn cose(reason: impl Into<String>) -> NitroError {
        NitroError::Cose {
            reason: reason.into(),
        }
    }

    pub(crate) fn tls(reason: impl Into<String>) -> NitroError {
        NitroError::TlsCertificate {
            reason: reason.into(),
        }
    }
}
