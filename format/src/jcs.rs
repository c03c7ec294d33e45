//! RFC 8785 JSON Canonicalization Scheme (JCS): producing canonical bytes and
//! checking that received bytes are already canonical.
//!
//! Canonicalisation itself is done by `serde_json_canonicalizer`; this module
//! adds the strict reading side: received bytes must equal the canonical
//! serialisation of what they parse to, so there is exactly one byte form per
//! document (duplicate keys, white space, escapes or number spellings that
//! differ from RFC 8785 are all rejected).

use serde::Serialize;

/// Why bytes are not canonical JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JcsError {
    #[error("not JSON: {0}")]
    Syntax(String),
    #[error("JSON is not in RFC 8785 canonical form (first difference at byte {offset})")]
    NotCanonical { offset: usize },
    #[error("cannot canonicalise: {0}")]
    Serialize(String),
}

/// The RFC 8785 canonical bytes of `value`.
pub fn to_canonical_vec<T: Serialize>(value: &T) -> Result<Vec<u8>, JcsError> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| JcsError::Serialize(e.to_string()))
}

/// Parses `bytes` as JSON and requires them to be exactly their canonical form.
pub fn parse_canonical(bytes: &[u8]) -> Result<serde_json::Value, JcsError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| JcsError::Syntax(e.to_string()))?;
    let canonical = to_canonical_vec(&value)?;
    if canonical != bytes {
        let offset = canonical
            .iter()
            .zip(bytes.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(canonical.len().min(bytes.len()));
        return Err(JcsError::NotCanonical { offset });
    }
    Ok(value)
}
