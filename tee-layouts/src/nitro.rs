//! AWS Nitro Enclaves: the NSM attestation document (AWS Nitro Enclaves
//! User Guide, "Verifying the root of trust", the attestation document
//! specification; the NSM API's `Attestation` request). The document is a
//! CBOR map, not a fixed layout: what is written once here are its keys, in
//! the order the NSM writes them, and the bounds the specification gives.

/// The payload map of the COSE_Sign1 attestation document.
///
/// ```text
/// module_id:   text, non-empty
/// digest:      "SHA384"
/// timestamp:   uint, milliseconds since the epoch
/// pcrs:        { + index (0..=31) => bytes .size 48 }
/// certificate: bytes .size (1..=1024), DER
/// cabundle:    [ + bytes .size (1..=1024) ]
/// public_key:  bytes .size (1..=1024) / null
/// user_data:   bytes .size (0..=1024) / null
/// nonce:       bytes .size (0..=1024) / null
/// ```
pub mod document {
    pub const MODULE_ID: &str = "module_id";
    pub const DIGEST: &str = "digest";
    pub const TIMESTAMP: &str = "timestamp";
    pub const PCRS: &str = "pcrs";
    pub const CERTIFICATE: &str = "certificate";
    pub const CABUNDLE: &str = "cabundle";
    pub const PUBLIC_KEY: &str = "public_key";
    pub const USER_DATA: &str = "user_data";
    pub const NONCE: &str = "nonce";

    /// Every key, in the order the NSM writes them.
    pub const KEYS: [&str; 9] = [
        MODULE_ID,
        DIGEST,
        TIMESTAMP,
        PCRS,
        CERTIFICATE,
        CABUNDLE,
        PUBLIC_KEY,
        USER_DATA,
        NONCE,
    ];

    /// The one `digest` the NSM writes.
    pub const DIGEST_SHA384: &str = "SHA384";
    /// Bytes of a SHA384 PCR.
    pub const PCR_BYTES: usize = 48;
    /// PCR indexes are `0..PCR_COUNT`.
    pub const PCR_COUNT: usize = 32;
    /// The most bytes of `user_data`, `nonce` and `public_key`.
    pub const MAX_USER_DATA_BYTES: usize = 1024;
    /// The most bytes of one certificate (`certificate`, each of
    /// `cabundle`).
    pub const MAX_CERT_BYTES: usize = 1024;
}

/// The NSM API's `Attestation` request: a map of these optional keys
/// (`user_data`, `nonce`, `public_key`, the same names as the document's).
pub mod attestation_request {
    pub use super::document::{NONCE, PUBLIC_KEY, USER_DATA};
    /// The request's own variant name and the response's key.
    pub const REQUEST: &str = "Attestation";
    pub const RESPONSE_DOCUMENT: &str = "document";
}
