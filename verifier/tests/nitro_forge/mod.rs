//! Builds forged and mutated Nitro attestation documents for the negative
//! tests, with fixed-seed P-384 keys so every byte is reproducible (ECDSA
//! signing is deterministic, RFC 6979).
//!
//! The forgeries copy everything an attacker can copy from a genuine
//! document (payload, subjects, validity windows) and differ only in what
//! needs a private key they do not have.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use ciborium::Value;
use const_oid::db::rfc5280::{ID_CE_BASIC_CONSTRAINTS, ID_CE_KEY_USAGE};
use const_oid::db::rfc5912::{ECDSA_WITH_SHA_384, ID_EC_PUBLIC_KEY, SECP_384_R_1};
use coset::{CborSerializable as _, CoseSign1, CoseSign1Builder, HeaderBuilder, iana};
use der::asn1::{Any, BitString, OctetString};
use der::{Decode as _, Encode as _};
use kolm_verifier::nitro::AWS_NITRO_ROOT_G1_DER;
use p384::ecdsa::signature::Signer as _;
use p384::ecdsa::{Signature, SigningKey};
use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::certificate::{Certificate, TbsCertificate, Version};
use x509_cert::ext::Extension;
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, KeyUsages};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::Validity;

/// Seeds of the forger's keys.
pub const ROOT_SEED: u8 = 0x51;
pub const INTERMEDIATE_SEED: u8 = 0x52;
pub const LEAF_SEED: u8 = 0x53;

/// A P-384 key whose scalar is 48 copies of `seed`.
pub fn key(seed: u8) -> SigningKey {
    SigningKey::from_slice(&[seed; 48]).unwrap()
}

fn ecdsa_sha384() -> AlgorithmIdentifierOwned {
    AlgorithmIdentifierOwned {
        oid: ECDSA_WITH_SHA_384,
        parameters: None,
    }
}

fn spki(key: &SigningKey) -> SubjectPublicKeyInfoOwned {
    let point = key.verifying_key().to_encoded_point(false);
    SubjectPublicKeyInfoOwned {
        algorithm: AlgorithmIdentifierOwned {
            oid: ID_EC_PUBLIC_KEY,
            parameters: Some(Any::from(SECP_384_R_1)),
        },
        subject_public_key: BitString::from_bytes(point.as_bytes()).unwrap(),
    }
}

fn extension(id: const_oid::ObjectIdentifier, critical: bool, value: Vec<u8>) -> Extension {
    Extension {
        extn_id: id,
        critical,
        extn_value: OctetString::new(value).unwrap(),
    }
}

/// A certificate for `subject_key`, signed by `issuer_key`. `ca` is the
/// pathLenConstraint of a CA (`Some(None)`: CA without one), `None` for a
/// leaf.
pub fn issue(
    serial: u8,
    subject: &Name,
    issuer: &Name,
    validity: Validity,
    subject_key: &SigningKey,
    issuer_key: &SigningKey,
    ca: Option<Option<u8>>,
) -> Vec<u8> {
    let (bc, ku) = match ca {
        Some(path_len_constraint) => (
            BasicConstraints {
                ca: true,
                path_len_constraint,
            },
            KeyUsage(KeyUsages::KeyCertSign | KeyUsages::CRLSign | KeyUsages::DigitalSignature),
        ),
        None => (
            BasicConstraints {
                ca: false,
                path_len_constraint: None,
            },
            KeyUsage(KeyUsages::DigitalSignature | KeyUsages::NonRepudiation),
        ),
    };
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::new(&[serial]).unwrap(),
        signature: ecdsa_sha384(),
        issuer: issuer.clone(),
        validity,
        subject: subject.clone(),
        subject_public_key_info: spki(subject_key),
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(vec![
            extension(ID_CE_BASIC_CONSTRAINTS, true, bc.to_der().unwrap()),
            extension(ID_CE_KEY_USAGE, true, ku.to_der().unwrap()),
        ]),
    };
    let sig: Signature = issuer_key.sign(&tbs.to_der().unwrap());
    Certificate {
        tbs_certificate: tbs,
        signature_algorithm: ecdsa_sha384(),
        signature: BitString::from_bytes(sig.to_der().as_bytes()).unwrap(),
    }
    .to_der()
    .unwrap()
}

/// The decoded payload map of a COSE_Sign1.
pub fn payload_map(cose: &[u8]) -> Vec<(Value, Value)> {
    let sign1 = CoseSign1::from_slice(cose).unwrap();
    let payload = sign1.payload.unwrap();
    match ciborium::de::from_reader::<Value, _>(payload.as_slice()).unwrap() {
        Value::Map(m) => m,
        other => panic!("payload is not a map: {other:?}"),
    }
}

pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out).unwrap();
    out
}

/// The value of `key` in a payload map.
pub fn get<'a>(map: &'a [(Value, Value)], key: &str) -> &'a Value {
    &map.iter()
        .find(|(k, _)| k.as_text() == Some(key))
        .unwrap_or_else(|| panic!("no {key}"))
        .1
}

/// Replaces (or appends) `key` in a payload map.
pub fn set(map: &mut Vec<(Value, Value)>, key: &str, value: Value) {
    match map.iter_mut().find(|(k, _)| k.as_text() == Some(key)) {
        Some(entry) => entry.1 = value,
        None => map.push((Value::Text(key.into()), value)),
    }
}

pub fn bytes(v: &Value) -> Vec<u8> {
    v.as_bytes().unwrap().clone()
}

/// The certificates of a genuine document: `(cabundle, leaf)`.
pub fn chain_of(cose: &[u8]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let map = payload_map(cose);
    let cabundle = get(&map, "cabundle")
        .as_array()
        .unwrap()
        .iter()
        .map(bytes)
        .collect();
    (cabundle, bytes(get(&map, "certificate")))
}

/// The same envelope (protected header, signature) around a new payload:
/// what an attacker who edits the document without a key produces.
pub fn with_payload(cose: &[u8], payload: Vec<u8>) -> Vec<u8> {
    let mut sign1 = CoseSign1::from_slice(cose).unwrap();
    sign1.payload = Some(payload);
    sign1.to_vec().unwrap()
}

/// `cose` with its payload map edited by `edit`, signature untouched.
pub fn edit_payload(cose: &[u8], edit: impl FnOnce(&mut Vec<(Value, Value)>)) -> Vec<u8> {
    let mut map = payload_map(cose);
    edit(&mut map);
    with_payload(cose, encode(&Value::Map(map)))
}

/// An untagged ES384 COSE_Sign1 over `payload`, signed by `key`.
pub fn sign_es384(payload: Vec<u8>, key: &SigningKey) -> Vec<u8> {
    CoseSign1Builder::new()
        .protected(
            HeaderBuilder::new()
                .algorithm(iana::Algorithm::ES384)
                .build(),
        )
        .payload(payload)
        .create_signature(b"", |tbs| {
            let sig: Signature = key.sign(tbs);
            sig.to_bytes().to_vec()
        })
        .build()
        .to_vec()
        .unwrap()
}

fn cert(der: &[u8]) -> Certificate {
    Certificate::from_der(der).unwrap()
}

/// Forgery 1: a fake root with the AWS root's subject and validity (but the
/// forger's key), a fake leaf with the genuine leaf's subject and validity,
/// and the genuine payload re-signed by the fake leaf. `cabundle = [fake
/// root]`. Everything verifies except the pin on the root's bytes.
pub fn forge_fake_root(genuine: &[u8]) -> Vec<u8> {
    let (_, leaf) = chain_of(genuine);
    let real_root = cert(AWS_NITRO_ROOT_G1_DER);
    let real_leaf = cert(&leaf);
    let root_key = key(ROOT_SEED);
    let leaf_key = key(LEAF_SEED);
    let root_name = &real_root.tbs_certificate.subject;
    let fake_root = issue(
        1,
        root_name,
        root_name,
        real_root.tbs_certificate.validity,
        &root_key,
        &root_key,
        Some(None),
    );
    let fake_leaf = issue(
        2,
        &real_leaf.tbs_certificate.subject,
        root_name,
        real_leaf.tbs_certificate.validity,
        &leaf_key,
        &root_key,
        None,
    );
    let mut map = payload_map(genuine);
    set(&mut map, "certificate", Value::Bytes(fake_leaf));
    set(
        &mut map,
        "cabundle",
        Value::Array(vec![Value::Bytes(fake_root)]),
    );
    sign_es384(encode(&Value::Map(map)), &leaf_key)
}

/// Forgery 2: the genuine root bytes in `cabundle[0]`, then a fake
/// intermediate that names the AWS root as issuer (signed by the forger's
/// key), then a fake leaf under it signing the genuine payload. Everything
/// verifies except the intermediate's signature by the real root.
pub fn forge_fake_intermediate(genuine: &[u8]) -> Vec<u8> {
    let (cabundle, leaf) = chain_of(genuine);
    let real_root = cert(AWS_NITRO_ROOT_G1_DER);
    let real_inter = cert(&cabundle[1]);
    let real_leaf = cert(&leaf);
    let forger_key = key(ROOT_SEED);
    let inter_key = key(INTERMEDIATE_SEED);
    let leaf_key = key(LEAF_SEED);
    let inter_name = &real_inter.tbs_certificate.subject;
    let fake_inter = issue(
        3,
        inter_name,
        &real_root.tbs_certificate.subject,
        real_inter.tbs_certificate.validity,
        &inter_key,
        &forger_key,
        Some(Some(2)),
    );
    let fake_leaf = issue(
        4,
        &real_leaf.tbs_certificate.subject,
        inter_name,
        real_leaf.tbs_certificate.validity,
        &leaf_key,
        &inter_key,
        None,
    );
    let mut map = payload_map(genuine);
    set(&mut map, "certificate", Value::Bytes(fake_leaf));
    set(
        &mut map,
        "cabundle",
        Value::Array(vec![
            Value::Bytes(AWS_NITRO_ROOT_G1_DER.to_vec()),
            Value::Bytes(fake_inter),
        ]),
    );
    sign_es384(encode(&Value::Map(map)), &leaf_key)
}
