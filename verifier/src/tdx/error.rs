//! Why a TDX quote or its collateral was not parsed.

use kolm_format::reader::ReadError;

/// A structural problem with a quote or a collateral document. Each variant
/// names the field or structure at fault and, where useful, the offset.
///
/// Appraisal failures (bad signatures, expired collateral, TCB level) are
/// not errors of this type: they are failing [`TdxCheck`]s of the
/// [`Evaluation`](crate::attested::Evaluation).
///
/// [`TdxCheck`]: crate::check::TdxCheck
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TdxError {
    /// The input is larger than the parser accepts.
    #[error("{what} is {len} bytes; at most {max} are accepted")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    /// The input ends inside a structure.
    #[error("truncated: {what} at offset {offset} needs {need} bytes, {have} left")]
    Truncated {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    /// Quote header `version` is not 4 or 5.
    #[error("quote version {version} is not supported (TDX quotes are version 4 or 5)")]
    UnsupportedVersion { version: u16 },
    /// Quote header `tee_type` is not TDX (0x00000081).
    #[error("tee_type {tee_type:#010x} is not TDX (0x00000081){}", if *tee_type == 0 { ": this is an SGX quote" } else { "" })]
    WrongTeeType { tee_type: u32 },
    /// Attestation key type other than ECDSA-256 with P-256 (2).
    #[error("attestation key type {key_type} is not supported (only 2 = ECDSA P-256)")]
    UnsupportedAttestationKeyType { key_type: u16 },
    /// QE vendor id other than Intel's.
    #[error("QE vendor id {vendor_id} is not Intel's (939a7233f79c4ca9940a0db3957f0607)")]
    UnknownQeVendor { vendor_id: String },
    /// Quote v5 body type other than 2, 3 or 4 (1 is SGX).
    #[error("quote v5 body type {body_type} is not a TD report (2, 3 or 4)")]
    UnsupportedBodyType { body_type: u16 },
    /// A length field disagrees with the structure it describes.
    #[error("{field} is {declared} bytes but {actual} were expected")]
    LengthMismatch {
        field: &'static str,
        declared: usize,
        actual: usize,
    },
    /// A certification data type other than the one an offline verifier
    /// needs (6 outside, 5 = PEM PCK chain inside).
    #[error("{level} certification data type {cert_type} is not supported (expected {expected})")]
    UnsupportedCertificationDataType {
        level: &'static str,
        cert_type: u16,
        expected: u16,
    },
    /// Non-zero bytes after the quote's signature data. Bytes after the
    /// signature data are covered by no signature and no length field.
    #[error(
        "{len} bytes after the signature data (offset {offset}) are not all zero \
         (first non-zero at offset {first_nonzero})"
    )]
    TrailingData {
        offset: usize,
        len: usize,
        first_nonzero: usize,
    },
    /// A PEM certificate chain that is not a plain sequence of certificates.
    #[error("{what}: {detail}")]
    Pem { what: &'static str, detail: String },
    /// A certificate chain with the wrong number of certificates.
    #[error("{what} has {count} certificates; {expected} expected")]
    ChainLength {
        what: &'static str,
        count: usize,
        expected: usize,
    },
    /// A certificate that does not decode or lacks a required field.
    #[error("{what}: {detail}")]
    Certificate { what: &'static str, detail: String },
    /// dcap-qvl's own quote parser rejected a quote this parser accepted.
    #[error("dcap-qvl rejects the quote structure: {detail}")]
    DcapParse { detail: String },
    /// The collateral is not valid JSON of the expected layout.
    #[error("collateral JSON: {detail}")]
    CollateralJson { detail: String },
    /// A collateral field is not lower- or upper-case hex of the right size.
    #[error("collateral field {field}: {detail}")]
    CollateralField { field: &'static str, detail: String },
    /// A CRL that does not decode.
    #[error("{which}: {detail}")]
    Crl { which: &'static str, detail: String },
    /// The signed `tcb_info` or `qe_identity` document does not decode.
    #[error("{which}: {detail}")]
    CollateralDocument { which: &'static str, detail: String },
    /// Another layout error of the byte reader (see [`ReadError`]).
    #[error("{0}")]
    Layout(ReadError),
}

/// The reader's `Truncated` keeps its own variant (with the same fields);
/// a length field that disagrees with its structure is mapped to
/// [`TdxError::LengthMismatch`] where the parser checks it.
impl From<ReadError> for TdxError {
    fn from(e: ReadError) -> TdxError {
        match e {
            ReadError::Truncated {
                what,
                offset,
                need,
                have,
            } => TdxError::Truncated {
                what,
                offset,
                need,
                have,
            },
            other => TdxError::Layout(other),
        }
    }
}
