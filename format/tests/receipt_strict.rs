//! Strict receipts (issue 12 item 8): the attacks, with real bytes.
//!
//! - A receipt whose protected header says the right things in another CBOR
//!   spelling (re-ordered keys, non-minimal integers or lengths, an
//!   indefinite-length map) carries a valid signature over those bytes; it is
//!   refused because receipt-v1 section 4 allows one byte form.
//! - The Ed25519 identity key with `R` = identity and `S` = 0 satisfies the
//!   signature equation for every message, and `ring` accepts it; so does
//!   a key of any small order (canonical or not) for a fraction of messages.
//!   Each is shown to pass `ring` alone here, and refused by
//!   `receipt::verify`. `S + L` (ring already refuses it) and weak `R`
//!   values are refused by the explicit checks too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use coset::{
    CborSerializable, CoseSign1, CoseSign1Builder, ProtectedHeader, TaggedCborSerializable,
};
use kolm_format::receipt::{
    self, CONTENT_TYPE, EXTERNAL_AAD, ReceiptError, StrictReason, protected_header_bytes,
};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};

const MANIFEST: &[u8] = br#"{"any":"manifest the forger likes"}"#;

fn key() -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[7u8; 32]).unwrap()
}

fn pk(k: &Ed25519KeyPair) -> [u8; 32] {
    k.public_key().as_ref().try_into().unwrap()
}

fn h(s: &str) -> [u8; 32] {
    hex::decode(s).unwrap().try_into().unwrap()
}

/// A receipt with exactly these protected bytes and this signature.
fn receipt_with(protected: Vec<u8>, payload: &[u8], signature: Vec<u8>) -> Vec<u8> {
    let header = coset::Header::from_slice(&protected).unwrap();
    let mut s = CoseSign1Builder::new().payload(payload.to_vec()).build();
    s.protected = ProtectedHeader {
        original_data: Some(protected),
        header,
    };
    s.signature = signature;
    s.to_tagged_vec().unwrap()
}

/// A receipt with these protected bytes, correctly signed over them.
fn signed_with(protected: Vec<u8>, key: &Ed25519KeyPair) -> Vec<u8> {
    let unsigned = receipt_with(protected, MANIFEST, Vec::new());
    let s = CoseSign1::from_tagged_slice(&unsigned).unwrap();
    let tbs = s.tbs_data(EXTERNAL_AAD);
    let mut s = s;
    s.signature = key.sign(&tbs).as_ref().to_vec();
    s.to_tagged_vec().unwrap()
}

/// The Sig_structure a receipt for `public_key` over [`MANIFEST`] signs.
fn tbs_for(public_key: &[u8; 32], payload: &[u8]) -> Vec<u8> {
    let r = receipt_with(protected_header_bytes(public_key), payload, Vec::new());
    CoseSign1::from_tagged_slice(&r)
        .unwrap()
        .tbs_data(EXTERNAL_AAD)
}

#[test]
fn the_writer_emits_the_canonical_protected_header() {
    let k = key();
    let r = receipt::sign(MANIFEST, &k).unwrap();
    let s = CoseSign1::from_tagged_slice(&r).unwrap();
    assert_eq!(
        s.protected.original_data.as_deref(),
        Some(protected_header_bytes(&pk(&k)).as_slice())
    );
    // coset's own deterministic encoding of the same header is the same
    // bytes: the hand-written form is the canonical one.
    assert_eq!(
        s.protected.header.clone().to_vec().unwrap(),
        protected_header_bytes(&pk(&k))
    );
    receipt::verify(&r, MANIFEST, &pk(&k)).unwrap();
}

#[test]
fn the_v1_vector_receipt_has_the_canonical_protected_header() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../verifier/tests/vectors/receipt-v1");
    let (Ok(r), Ok(m)) = (
        std::fs::read(dir.join("receipt.cose")),
        std::fs::read(dir.join("manifest.json")),
    ) else {
        return;
    };
    let public = h("ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c");
    receipt::verify(&r, &m, &public).unwrap();
    // Re-signing with the vector's seed reproduces the receipt byte for byte.
    let k = Ed25519KeyPair::from_seed_unchecked(&[7u8; 32]).unwrap();
    assert_eq!(receipt::sign(&m, &k).unwrap(), r);
}

#[test]
fn other_spellings_of_the_protected_header_are_refused() {
    let k = key();
    let kid = Sha256::digest(pk(&k));
    let ct = CONTENT_TYPE.as_bytes();
    let spell = |parts: &[&[u8]]| parts.concat();
    let variants: Vec<(&str, Vec<u8>)> = vec![
        (
            "re-ordered keys (3, 1, 4)",
            spell(&[
                &[0xa3, 0x03, 0x78, 0x25],
                ct,
                &[0x01, 0x27, 0x04, 0x58, 0x20],
                &kid,
            ]),
        ),
        (
            "non-minimal integer key (1 as 0x18 0x01)",
            spell(&[
                &[0xa3, 0x18, 0x01, 0x27, 0x03, 0x78, 0x25],
                ct,
                &[0x04, 0x58, 0x20],
                &kid,
            ]),
        ),
        (
            "non-minimal integer value (-8 as 0x38 0x07)",
            spell(&[
                &[0xa3, 0x01, 0x38, 0x07, 0x03, 0x78, 0x25],
                ct,
                &[0x04, 0x58, 0x20],
                &kid,
            ]),
        ),
        (
            "non-minimal text length (0x79 0x00 0x25)",
            spell(&[
                &[0xa3, 0x01, 0x27, 0x03, 0x79, 0x00, 0x25],
                ct,
                &[0x04, 0x58, 0x20],
                &kid,
            ]),
        ),
        (
            "indefinite-length map",
            spell(&[
                &[0xbf, 0x01, 0x27, 0x03, 0x78, 0x25],
                ct,
                &[0x04, 0x58, 0x20],
                &kid,
                &[0xff],
            ]),
        ),
    ];
    for (what, protected) in variants {
        assert_ne!(protected, protected_header_bytes(&pk(&k)), "{what}");
        let r = signed_with(protected, &k);
        // The signature itself is valid over these bytes, and the parsed
        // header is the expected one: only the spelling differs.
        let s = CoseSign1::from_tagged_slice(&r).unwrap();
        assert_eq!(
            s.protected.header,
            CoseSign1::from_tagged_slice(&receipt::sign(MANIFEST, &k).unwrap())
                .unwrap()
                .protected
                .header,
            "{what}"
        );
        s.verify_signature(EXTERNAL_AAD, |sig, tbs| {
            UnparsedPublicKey::new(&ED25519, pk(&k)).verify(tbs, sig)
        })
        .unwrap();
        match receipt::verify(&r, MANIFEST, &pk(&k)) {
            Err(ReceiptError::ProtectedHeaderNotCanonical { .. }) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// R = identity, S = 0.
fn identity_signature() -> Vec<u8> {
    let mut sig = vec![0u8; 64];
    sig[0] = 1;
    sig
}

#[test]
fn the_identity_key_forgery_passes_ring_and_is_refused() {
    let identity = h("0100000000000000000000000000000000000000000000000000000000000000");
    for manifest in [MANIFEST, b"{}".as_slice(), b"anything at all"] {
        // The attack is real: ring alone accepts it for every message.
        let tbs = tbs_for(&identity, manifest);
        UnparsedPublicKey::new(&ED25519, identity)
            .verify(&tbs, &identity_signature())
            .expect("ring accepts the identity-key forgery");
        let r = receipt_with(
            protected_header_bytes(&identity),
            manifest,
            identity_signature(),
        );
        match receipt::verify(&r, manifest, &identity) {
            Err(ReceiptError::WeakKey(StrictReason::SmallOrderPoint)) => {}
            other => panic!("{other:?}"),
        }
    }
}

/// For a key of small order, `R` = identity and `S` = 0 pass the equation
/// whenever the order divides k = H(R || A || M): search a message for which
/// ring accepts, which shows with real bytes that the key is of small order.
fn ring_accepts_some_forgery(public_key: &[u8; 32]) -> bool {
    (0u32..512).any(|i| {
        let m = format!("{{\"n\":{i}}}");
        let tbs = tbs_for(public_key, m.as_bytes());
        UnparsedPublicKey::new(&ED25519, public_key)
            .verify(&tbs, &identity_signature())
            .is_ok()
    })
}

const SMALL_ORDER_CANONICAL: [&str; 8] = [
    "0100000000000000000000000000000000000000000000000000000000000000",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
];

/// Non-canonical encodings of small-order points: y + p for y = 0 and 1
/// (both signs), and the sign bit on x = 0 (y = 1, y = p - 1).
const SMALL_ORDER_NON_CANONICAL: [&str; 6] = [
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "0100000000000000000000000000000000000000000000000000000000000080",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
];

#[test]
fn every_small_order_key_is_refused() {
    for k in SMALL_ORDER_CANONICAL {
        let key = h(k);
        assert!(ring_accepts_some_forgery(&key), "{k}: not of small order?");
        let r = receipt_with(protected_header_bytes(&key), MANIFEST, identity_signature());
        match receipt::verify(&r, MANIFEST, &key) {
            Err(ReceiptError::WeakKey(StrictReason::SmallOrderPoint)) => {}
            other => panic!("{k}: {other:?}"),
        }
    }
    for k in SMALL_ORDER_NON_CANONICAL {
        let key = h(k);
        // ring (0.17) decodes these too, and accepts forgeries under them.
        assert!(ring_accepts_some_forgery(&key), "{k}");
        let r = receipt_with(protected_header_bytes(&key), MANIFEST, identity_signature());
        match receipt::verify(&r, MANIFEST, &key) {
            Err(ReceiptError::WeakKey(StrictReason::NonCanonicalPoint)) => {}
            other => panic!("{k}: {other:?}"),
        }
    }
}

#[test]
fn non_canonical_keys_are_refused_and_ordinary_keys_accepted() {
    // y = p + 2 .. p + 18 and y = 2^255 - 1: not below p.
    for low in [0xefu8, 0xf0, 0xfe, 0xff] {
        let mut key = [0xffu8; 32];
        key[0] = low;
        key[31] = 0x7f;
        assert!(matches!(
            receipt::check_strict(&key, &[0u8; 64]),
            Err(ReceiptError::WeakKey(StrictReason::NonCanonicalPoint))
        ));
    }
    // Keys ring generates pass the key rules.
    for seed in 0u8..32 {
        let k = Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap();
        let r = receipt::sign(MANIFEST, &k).unwrap();
        receipt::verify(&r, MANIFEST, &pk(&k)).unwrap();
    }
}

const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

fn add_le(a: &[u8], b: &[u8; 32]) -> Vec<u8> {
    let mut out = vec![0u8; 32];
    let mut carry = 0u16;
    for i in 0..32 {
        let s = u16::from(a[i]) + u16::from(b[i]) + carry;
        out[i] = (s & 0xff) as u8;
        carry = s >> 8;
    }
    assert_eq!(carry, 0);
    out
}

#[test]
fn a_scalar_not_below_l_is_refused() {
    let k = key();
    let good = receipt::sign(MANIFEST, &k).unwrap();
    let s = CoseSign1::from_tagged_slice(&good).unwrap();
    let sig = s.signature.clone();
    // S + L: the same point equation, a second signature for the same
    // message (malleability).
    let mut bumped = sig[..32].to_vec();
    bumped.extend(add_le(&sig[32..], &L));
    let tbs = s.tbs_data(EXTERNAL_AAD);
    // ring (0.17) already refuses it; the explicit check does not depend
    // on that.
    let ring_says = UnparsedPublicKey::new(&ED25519, pk(&k))
        .verify(&tbs, &bumped)
        .is_ok();
    assert!(!ring_says);
    let r = receipt_with(protected_header_bytes(&pk(&k)), MANIFEST, bumped);
    match receipt::verify(&r, MANIFEST, &pk(&k)) {
        Err(ReceiptError::WeakSignature(StrictReason::ScalarNotReduced)) => {}
        other => panic!("ring accepted: {ring_says}; {other:?}"),
    }
    // S = L exactly, and S = 2^256 - 1.
    for s_bytes in [L.to_vec(), vec![0xff; 32]] {
        let mut forged = sig[..32].to_vec();
        forged.extend(s_bytes);
        assert!(matches!(
            receipt::check_strict(&pk(&k), &forged),
            Err(ReceiptError::WeakSignature(StrictReason::ScalarNotReduced))
        ));
    }
}

#[test]
fn a_weak_r_is_refused() {
    let k = key();
    for r_hex in SMALL_ORDER_CANONICAL
        .iter()
        .chain(SMALL_ORDER_NON_CANONICAL.iter())
    {
        let mut sig = h(r_hex).to_vec();
        sig.extend([0u8; 32]);
        let r = receipt_with(protected_header_bytes(&pk(&k)), MANIFEST, sig);
        assert!(
            matches!(
                receipt::verify(&r, MANIFEST, &pk(&k)),
                Err(ReceiptError::WeakSignature(
                    StrictReason::SmallOrderPoint | StrictReason::NonCanonicalPoint
                ))
            ),
            "{r_hex}"
        );
    }
    // A short signature is named.
    let r = receipt_with(protected_header_bytes(&pk(&k)), MANIFEST, vec![0u8; 63]);
    assert!(matches!(
        receipt::verify(&r, MANIFEST, &pk(&k)),
        Err(ReceiptError::WeakSignature(StrictReason::Length))
    ));
}
