//! The signed receipt: a tagged COSE_Sign1 (RFC 9052) whose payload is the
//! canonical manifest, signed with Ed25519 by the per-run enclave key.
//!
//! Two versions ([`SpecVersion`]): v1 and v2 differ only in the content type
//! and the external AAD (receipt-v2.md section 4); [`sign`], [`verify`] and
//! [`protected_header_bytes`] are the frozen v1 forms, [`sign_for`],
//! [`verify_for`] and [`protected_header_bytes_for`] name the version.
//!
//! Strict reading (receipt-v1 section 4, the same in v2):
//! - the bytes must be exactly what this module writes for the same content:
//!   re-encoding the parsed structure must reproduce them, and the protected
//!   header's inner bytes (which `coset` keeps as it found them, so the
//!   re-encoding cannot catch them) must equal [`protected_header_bytes`],
//!   the one canonical encoding of `{1: -8, 3: content type, 4: kid}`;
//! - the unprotected header is empty;
//! - the signature is checked strictly ([`check_strict`]): the public key and
//!   `R` must be canonical point encodings that are not of small order, and
//!   `S` must be below the group order `L`, before `ring` checks the
//!   equation. Without this, the identity key with `R` = identity and `S` = 0
//!   "signs" every manifest.

use coset::{
    CoseSign1, CoseSign1Builder, HeaderBuilder, ProtectedHeader, TaggedCborSerializable, iana,
};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};

use crate::version::SpecVersion;

/// COSE content type of the payload (receipt v1).
pub const CONTENT_TYPE: &str = "application/vnd.kolm.manifest.v1+json";
/// COSE external AAD: a domain separator for receipt signatures (receipt
/// v1).
pub const EXTERNAL_AAD: &[u8] = b"kolm/receipt/v1";
/// COSE content type of the payload (receipt v2): as long as v1's, so the
/// protected header keeps its layout.
pub const CONTENT_TYPE_V2: &str = "application/vnd.kolm.manifest.v2+json";
/// COSE external AAD of receipt v2.
pub const EXTERNAL_AAD_V2: &[u8] = b"kolm/receipt/v2";
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
    /// The protected header parses to the right parameters but its bytes are
    /// not the one encoding section 4 prescribes (re-ordered keys,
    /// non-minimal integers or lengths, an indefinite-length map, ...).
    #[error(
        "receipt protected header is not in its one canonical encoding (receipt-v1 section 4): expected {expected} bytes {expected_hex}, found {found} bytes"
    )]
    ProtectedHeaderNotCanonical {
        expected: usize,
        expected_hex: String,
        found: usize,
    },
    #[error("receipt payload differs from manifest.json")]
    PayloadMismatch,
    /// The signer key is one strict Ed25519 verification refuses.
    #[error("receipt signer key refused (strict Ed25519): {0}")]
    WeakKey(StrictReason),
    /// The signature is one strict Ed25519 verification refuses before the
    /// equation is checked.
    #[error("receipt signature refused (strict Ed25519): {0}")]
    WeakSignature(StrictReason),
    #[error("receipt signature does not verify under the manifest's signer key")]
    BadSignature,
}

/// Which strict Ed25519 rule a key or signature breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StrictReason {
    /// The point encoding's y coordinate is not below p = 2^255 - 19, or it
    /// is y = 1 or y = p - 1 (x = 0) with the sign bit set.
    #[error("non-canonical point encoding")]
    NonCanonicalPoint,
    /// The point is one of the 8 points of small order (order 1, 2, 4 or 8).
    #[error("point of small order")]
    SmallOrderPoint,
    /// `S` is not below the group order L.
    #[error("S is not below the group order L")]
    ScalarNotReduced,
    /// The signature is not 64 bytes.
    #[error("signature is not 64 bytes")]
    Length,
}

/// `kid`: sha256 of the raw Ed25519 public key.
pub fn key_id(public_key: &[u8; 32]) -> Vec<u8> {
    Sha256::digest(public_key).to_vec()
}

/// The one canonical v1 encoding of the protected header for `public_key`
/// ([`protected_header_bytes_for`] v1).
pub fn protected_header_bytes(public_key: &[u8; 32]) -> Vec<u8> {
    protected_header_bytes_for(SpecVersion::V1, public_key)
}

/// The one canonical encoding of the protected header for `public_key`
/// (receipt-v1 and receipt-v2 section 4), spelled out byte by byte (RFC 8949 section 4.2.1
/// deterministic encoding: definite lengths, minimal heads, keys in
/// ascending order):
///
/// ```text
/// a3                      map(3)
///   01 27                 1 (alg): -8 (EdDSA)
///   03 78 25 <37 bytes>   3 (content type): text(37) the version's content type
///   04 58 20 <32 bytes>   4 (kid): bytes(32) sha256(public_key)
/// ```
pub fn protected_header_bytes_for(version: SpecVersion, public_key: &[u8; 32]) -> Vec<u8> {
    const _: () = assert!(CONTENT_TYPE.len() == 0x25);
    const _: () = assert!(CONTENT_TYPE_V2.len() == 0x25);
    let mut out = Vec::with_capacity(78);
    out.extend_from_slice(&[0xa3, 0x01, 0x27, 0x03, 0x78, 0x25]);
    out.extend_from_slice(version.content_type().as_bytes());
    out.extend_from_slice(&[0x04, 0x58, 0x20]);
    out.extend_from_slice(&Sha256::digest(public_key));
    out
}

fn expected_header(version: SpecVersion, public_key: &[u8; 32]) -> coset::Header {
    HeaderBuilder::new()
        .algorithm(iana::Algorithm::EdDSA)
        .content_type(version.content_type().to_string())
        .key_id(key_id(public_key))
        .build()
}

/// Signs canonical v1 manifest bytes ([`sign_for`] v1).
pub fn sign(manifest_bytes: &[u8], key: &Ed25519KeyPair) -> Result<Vec<u8>, ReceiptError> {
    sign_for(SpecVersion::V1, manifest_bytes, key)
}

/// Signs canonical manifest bytes of receipt spec `version`; returns the
/// tagged COSE_Sign1 bytes.
pub fn sign_for(
    version: SpecVersion,
    manifest_bytes: &[u8],
    key: &Ed25519KeyPair,
) -> Result<Vec<u8>, ReceiptError> {
    let mut pk = [0u8; 32];
    pk.copy_from_slice(key.public_key().as_ref());
    // The protected bytes are the canonical ones by construction (coset
    // writes `original_data` as given), and they are what is signed.
    let protected = ProtectedHeader {
        original_data: Some(protected_header_bytes_for(version, &pk)),
        header: expected_header(version, &pk),
    };
    let mut sign1 = CoseSign1Builder::new()
        .payload(manifest_bytes.to_vec())
        .build();
    sign1.protected = protected;
    let tbs = sign1.tbs_data(version.external_aad());
    sign1.signature = key.sign(&tbs).as_ref().to_vec();
    sign1
        .to_tagged_vec()
        .map_err(|e| ReceiptError::Cose(e.to_string()))
}

/// Verifies a v1 `receipt` ([`verify_for`] v1).
pub fn verify(
    receipt: &[u8],
    manifest_bytes: &[u8],
    public_key: &[u8; 32],
) -> Result<(), ReceiptError> {
    verify_for(SpecVersion::V1, receipt, manifest_bytes, public_key)
}

/// Verifies `receipt` as receipt spec `version` (the manifest's) against
/// the manifest bytes and the signer key the manifest names.
pub fn verify_for(
    version: SpecVersion,
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
    let expected = expected_header(version, public_key);
    if h.alg != expected.alg {
        return Err(ReceiptError::Header(format!(
            "alg must be EdDSA (-8), found {:?}",
            h.alg
        )));
    }
    if h.content_type != expected.content_type {
        return Err(ReceiptError::Header(format!(
            "content type must be {:?}, found {:?}",
            version.content_type(),
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
    // coset re-emits the protected header's original bytes, so the round
    // trip above cannot see how they were spelled: compare them with the
    // one canonical encoding.
    let canonical = protected_header_bytes_for(version, public_key);
    let found = sign1.protected.original_data.as_deref().unwrap_or_default();
    if found != canonical.as_slice() {
        return Err(ReceiptError::ProtectedHeaderNotCanonical {
            expected: canonical.len(),
            expected_hex: hex::encode(&canonical),
            found: found.len(),
        });
    }
    if sign1.payload.as_deref() != Some(manifest_bytes) {
        return Err(ReceiptError::PayloadMismatch);
    }
    check_strict(public_key, &sign1.signature)?;
    sign1.verify_signature(version.external_aad(), |sig, tbs| {
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

/// The strict Ed25519 rules checked before the signature equation (the
/// rules of ed25519-dalek's `verify_strict`, written out here so that
/// kolm-format needs no curve arithmetic):
///
/// - the public key `A` and the signature's `R` are canonical encodings: the
///   little-endian y (bit 255 cleared) is below p = 2^255 - 19, and the sign
///   bit is clear when x = 0 (y = 1 or y = p - 1);
/// - neither `A` nor `R` is one of the 8 points of small order;
/// - `S` (the signature's last 32 bytes, little-endian) is below L.
///
/// `ring` then checks `[S]B = R + [k]A` (cofactorless). Not checked: whether
/// `A` has a torsion component (a "mixed-order" key); such a key still has
/// to produce a valid signature for the exact bytes, so it forges nothing.
pub fn check_strict(public_key: &[u8; 32], signature: &[u8]) -> Result<(), ReceiptError> {
    check_point(public_key).map_err(ReceiptError::WeakKey)?;
    let (r, s) = match signature.split_first_chunk::<32>() {
        Some((r, rest)) => match <&[u8; 32]>::try_from(rest) {
            Ok(s) => (r, s),
            Err(_) => return Err(ReceiptError::WeakSignature(StrictReason::Length)),
        },
        None => return Err(ReceiptError::WeakSignature(StrictReason::Length)),
    };
    check_point(r).map_err(ReceiptError::WeakSignature)?;
    if !less_than(s, &GROUP_ORDER_L) {
        return Err(ReceiptError::WeakSignature(StrictReason::ScalarNotReduced));
    }
    Ok(())
}

/// p = 2^255 - 19, little-endian.
const FIELD_P: [u8; 32] = {
    let mut p = [0xff; 32];
    p[0] = 0xed;
    p[31] = 0x7f;
    p
};

/// p - 1 (y of the order-2 point (0, -1)), little-endian.
const FIELD_P_MINUS_1: [u8; 32] = {
    let mut p = FIELD_P;
    p[0] = 0xec;
    p
};

/// L = 2^252 + 27742317777372353535851937790883648493, little-endian.
const GROUP_ORDER_L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// The canonical encodings of the 8 points of small order (the torsion
/// subgroup E[8]). Their non-canonical encodings (y + p for y = 0, 1; the
/// sign bit on x = 0) are refused as non-canonical first.
const SMALL_ORDER: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    // Order 1: (0, 1).
    t[0][0] = 1;
    // Order 2: (0, -1).
    t[1] = FIELD_P_MINUS_1;
    // Order 4: (+-sqrt(-1), 0).
    t[3][31] = 0x80;
    // Order 8: the two y values, each with both signs of x.
    let y8a: [u8; 32] = [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ];
    let y8b: [u8; 32] = [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ];
    t[4] = y8a;
    t[5] = y8a;
    t[5][31] |= 0x80;
    t[6] = y8b;
    t[7] = y8b;
    t[7][31] |= 0x80;
    t
};

fn check_point(p: &[u8; 32]) -> Result<(), StrictReason> {
    let mut y = *p;
    let sign = y[31] & 0x80 != 0;
    y[31] &= 0x7f;
    if !less_than(&y, &FIELD_P) {
        return Err(StrictReason::NonCanonicalPoint);
    }
    let mut one = [0u8; 32];
    one[0] = 1;
    if sign && (y == one || y == FIELD_P_MINUS_1) {
        return Err(StrictReason::NonCanonicalPoint);
    }
    if SMALL_ORDER.contains(p) {
        return Err(StrictReason::SmallOrderPoint);
    }
    Ok(())
}

/// `a < b` for 32-byte little-endian integers.
fn less_than(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().rev().cmp(b.iter().rev()) == std::cmp::Ordering::Less
}
