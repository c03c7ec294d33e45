//! The sim evidence in the AWS Nitro Enclaves format: an NSM attestation
//! document (AWS Nitro Enclaves User Guide, "Verifying the root of trust",
//! attestation document specification) in an untagged COSE_Sign1 (ES384,
//! signature r || s), exactly as the NSM returns it, but signed by a fresh
//! P-384 leaf certificate that the installation's sim root issues, with
//! `cabundle = [sim root]`.
//!
//! The payload map has the NSM's keys in the NSM's order: `module_id`,
//! `digest` (`"SHA384"`), `timestamp` (ms), `pcrs` (0, 1, 2, 3, 4, 8, 48
//! bytes each), `certificate` (the leaf, DER), `cabundle`, `public_key`,
//! `user_data`, `nonce` (the optional three as CBOR `null` when absent, as
//! the NSM writes them).

use std::collections::BTreeMap;

use ciborium::Value;
use coset::{CborSerializable as _, CoseSign1Builder, HeaderBuilder, iana};
use kolm_tee_layouts::nitro::document as keys;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use time::{Duration, OffsetDateTime};

use super::SimError;
use super::der::{self, oid};
use super::root::{self, KeyAlg, SIM_ORG_UNIT, SimRoot, TbsFields};

/// The leaf certificate's common name.
pub const LEAF_COMMON_NAME: &str = "kolm simulated TEE attestation (NOT A TEE)";
/// How long a leaf is valid (AWS issues its leaves for 3 hours).
pub const LEAF_VALIDITY: Duration = Duration::hours(3);
/// The NSM's caps on `user_data`, `nonce` and `public_key`.
pub const MAX_USER_DATA_BYTES: usize = keys::MAX_USER_DATA_BYTES;
/// The NSM's cap on a certificate.
pub const MAX_CERT_BYTES: usize = keys::MAX_CERT_BYTES;
/// A PCR of the SHA384 digest.
pub const PCR_BYTES: usize = keys::PCR_BYTES;

/// What one document attests.
#[derive(Debug, Clone, Copy)]
pub struct DocumentRequest<'a> {
    /// `user_data`: a kolm enclave's 64-byte report data.
    pub user_data: &'a [u8],
    /// `nonce`, if any (a verifier's challenge).
    pub nonce: Option<&'a [u8]>,
    /// `public_key`, if any (1..=1024 bytes).
    pub public_key: Option<&'a [u8]>,
    /// The document's `timestamp` (and the leaf's notBefore, to the
    /// second).
    pub at: OffsetDateTime,
}

/// Builds one signed document.
pub(crate) fn document(
    root: &SimRoot,
    module_id: &str,
    pcrs: &BTreeMap<u8, [u8; PCR_BYTES]>,
    req: &DocumentRequest<'_>,
) -> Result<Vec<u8>, SimError> {
    let field = |field: &'static str, reason: String| SimError::Field { field, reason };
    if req.user_data.len() > MAX_USER_DATA_BYTES {
        return Err(field(
            keys::USER_DATA,
            format!("{} bytes, over {MAX_USER_DATA_BYTES}", req.user_data.len()),
        ));
    }
    if let Some(n) = req.nonce.filter(|n| n.len() > MAX_USER_DATA_BYTES) {
        return Err(field(
            keys::NONCE,
            format!("{} bytes, over {MAX_USER_DATA_BYTES}", n.len()),
        ));
    }
    if let Some(k) = req
        .public_key
        .filter(|k| k.is_empty() || k.len() > MAX_USER_DATA_BYTES)
    {
        return Err(field(
            keys::PUBLIC_KEY,
            format!("{} bytes, not 1..={MAX_USER_DATA_BYTES}", k.len()),
        ));
    }
    let ms = req.at.unix_timestamp_nanos().div_euclid(1_000_000);
    let timestamp = u64::try_from(ms)
        .ok()
        .filter(|&ms| ms > 0)
        .ok_or_else(|| field("timestamp", format!("{ms} ms is before the epoch")))?;

    // A fresh leaf key per document, signed by the root.
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &rng)
        .map_err(|_| SimError::Crypto("leaf key generation failed"))?;
    let leaf_key = EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| SimError::Crypto("leaf key does not load"))?;
    let not_before = req.at.replace_nanosecond(0).unwrap_or(req.at);
    let subject = der::name(&[
        (oid::ORGANIZATION, "kolm"),
        (oid::ORGANIZATIONAL_UNIT, SIM_ORG_UNIT),
        (oid::COMMON_NAME, LEAF_COMMON_NAME),
    ]);
    let tbs = root::tbs_certificate(&TbsFields {
        serial: root::random_serial()?,
        issuer: root.subject_der(),
        subject: &subject,
        not_before,
        not_after: not_before.saturating_add(LEAF_VALIDITY),
        public_key: leaf_key.public_key().as_ref(),
        key_alg: KeyAlg::P384,
        signature_alg: root.alg(),
        ca: None,
        authority_key_id: Some(root::key_id(root.public_key())),
        extra_extensions: &[],
    });
    let leaf = root::certificate(&tbs, root.alg(), &root.sign_tbs(&tbs)?);
    for (name, cert) in [
        ("certificate", &leaf[..]),
        ("cabundle[0]", root.certificate_der()),
    ] {
        if cert.len() > MAX_CERT_BYTES {
            return Err(field(
                keys::CERTIFICATE,
                format!("{name} is {} bytes, over {MAX_CERT_BYTES}", cert.len()),
            ));
        }
    }

    let bytes_or_null = |v: Option<&[u8]>| v.map_or(Value::Null, |b| Value::Bytes(b.to_vec()));
    let text = |s: &str| Value::Text(s.to_string());
    let payload = Value::Map(vec![
        (text(keys::MODULE_ID), text(module_id)),
        (text(keys::DIGEST), text(keys::DIGEST_SHA384)),
        (text(keys::TIMESTAMP), Value::Integer(timestamp.into())),
        (
            text(keys::PCRS),
            Value::Map(
                pcrs.iter()
                    .map(|(&i, v)| (Value::Integer(i.into()), Value::Bytes(v.to_vec())))
                    .collect(),
            ),
        ),
        (text(keys::CERTIFICATE), Value::Bytes(leaf)),
        (
            text(keys::CABUNDLE),
            Value::Array(vec![Value::Bytes(root.certificate_der().to_vec())]),
        ),
        (text(keys::PUBLIC_KEY), bytes_or_null(req.public_key)),
        (text(keys::USER_DATA), Value::Bytes(req.user_data.to_vec())),
        (text(keys::NONCE), bytes_or_null(req.nonce)),
    ]);
    let mut payload_bytes = Vec::new();
    ciborium::ser::into_writer(&payload, &mut payload_bytes)
        .map_err(|e| SimError::Encode(e.to_string()))?;

    let mut sign1 = CoseSign1Builder::new()
        .protected(
            HeaderBuilder::new()
                .algorithm(iana::Algorithm::ES384)
                .build(),
        )
        .payload(payload_bytes)
        .build();
    let signature = leaf_key
        .sign(&rng, &sign1.tbs_data(b""))
        .map_err(|_| SimError::Crypto("ES384 signing failed"))?;
    sign1.signature = signature.as_ref().to_vec();
    sign1.to_vec().map_err(|e| SimError::Encode(e.to_string()))
}
