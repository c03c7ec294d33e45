//! The signed receipt: a tagged COSE_Sign1 (RFC 9052) whose payload is the
//! canonical manifest, signed with Ed25519 by the per-run enclave key.
//!
//! Strict reading: the bytes must be exactly what this module writes for the
//! same content (re-encoding must reproduce them), the unprotected header is
//! empty, and the protected header holds exactly alg, content type and kid.

use coset::{CoseSign1, CoseSign1Builder, HeaderBuilder, TaggedCborSerializable, iana};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};

/// COSE content type of the payload.
pub const CONTENT_TYPE: &str = "application/vnd.kolm.manifest.v1+json";
/// COSE external AAD: a domain separator for receipt signatures.
pub const EXTERNAL_AAD: &[u8] = b"kolm/receipt/v1";
/// Largest receipt accepted (payload = manifest, plus headers).
pub const MAX_RECEIPT_BYTES: u64 = 16 * 1024 * 1024 + 4096;

/// Why a receipt is rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    #[error("receipt is not a tagged COSE_Sign1: {0}")]
    Cose(String),
    #[error("receipt encoding is not canonical (re-encoding differs)")]
    NotCanonical,
    #[error("receipt header: {0}")]
    Header(String),
    #[error("receipt payload differs from manifest.json")]
    PayloadMismatch,
    #[error("receipt signature does not verify under the manifest's signer key")]
    BadSignature,
}

/// `kid`: sha256 of the raw Ed25519 public key.
pub fn key_id(public_key: &[u8; 32]) -> Vec<u8> {
    Sha256::digest(public_key).to_vec()
}

/// Signs canonical manifest bytes; returns the tagged COSE_Sign1 bytes.
pub fn sign(manifest_bytes: &[u8], key: &Ed25519KeyPair) -> Result<Vec<u8>, ReceiptError> {
    let mut pk = [0u8; 32];
    pk.copy_from_slice(key.public_key().as_ref());
    let protected = HeaderBuilder::new()
        .algorithm(iana::Algorithm::EdDSA)
        .content_type(CONTENT_TYPE.to_string())
        .key_id(key_id(&pk))
        .build();
    let sign1 = CoseSign1Builder::new()
        .protected(protected)
        .payload(manifest_bytes.to_vec())
        .create_signature(EXTERNAL_AAD, |tbs| key.sign(tbs).as_ref().to_vec())
        .build();
    sign1
        .to_tagged_vec()
        .map_err(|e| ReceiptError::Cose(e.to_string()))
}

/// Verifies `receipt` against the manifest bytes and the signer key the
/// manifest names.
pub fn verify(
    receipt: &[u8],
    manifest_bytes: &[u8],
    public_key: &[u8; 32],
) -> Result<(), ReceiptError> {
    let sign1 =
        CoseSign1::from_tagged_slice(receipt).map_err(|e| ReceiptError::Cose(e.to_string()))?;
    let again = sign1
        .clone()
        .to_tagged_vec()
        .map_err(|e| ReceiptError::Cose(e.to_string()))?;
    if again != receipt {
        return Err(ReceiptError::NotCanonical);
    }
    if !sign1.unprotected.is_empty() {
        return Err(ReceiptError::Header(
            "unprotected header must be empty".into(),
        ));
    }
    let h = &sign1.protected.header;
    let expected = HeaderBuilder::new()
        .algorithm(iana::Algorithm::EdDSA)
        .content_type(CONTENT_TYPE.to_string())
        .key_id(key_id(public_key))
        .build();
    if h.alg != expected.alg {
        return Err(ReceiptError::Header(format!(
            "alg must be EdDSA (-8), found {:?}",
            h.alg
        )));
    }
    if h.content_type != expected.content_type {
        return Err(ReceiptError::Header(format!(
            "content type must be {CONTENT_TYPE:?}, found {:?}",
            h.content_type
        )));
    }
    if h.key_id != expected.key_id {
        return Err(ReceiptError::Header(
            "kid is not sha256 of the manifest's signer key".into(),
        ));
    }
    if h != &expected {
        return Err(ReceiptError::Header(
            "protected header has parameters beyond alg, content type and kid".into(),
        ));
    }
    if sign1.payload.as_deref() != Some(manifest_bytes) {
        return Err(ReceiptError::PayloadMismatch);
    }
    sign1.verify_signature(EXTERNAL_AAD, |sig, tbs| {
        UnparsedPublicKey::new(&ED25519, public_key)
            .verify(tbs, sig)
            .map_err(|_| ReceiptError::BadSignature)
    })
}

/// Reads the payload of a receipt without verifying it (to locate a previous
/// receipt's manifest); callers must still call [`verify`].
pub fn payload(receipt: &[u8]) -> Result<Vec<u8>, ReceiptError> {
    let sign1 =
        CoseSign1::from_tagged_slice(receipt).map_err(|e| ReceiptError::Cose(e.to_string()))?;
    sign1
        .payload
        .ok_or_else(|| ReceiptError::Cose("detached payload not allowed".into()))
}
