//! AWS Nitro Enclaves attestation, verified offline.
//!
//! An NSM attestation document is a COSE_Sign1 (ES384) whose payload is a
//! CBOR map (module id, PCRs, timestamp, the signing certificate and its CA
//! bundle, optional `public_key`/`user_data`/`nonce`). [`verify_nitro`]
//! takes the document in any of the forms in [`NitroInputForm`], checks it
//! at a caller-given instant against the embedded AWS Nitro Enclaves Root
//! G1, a [`Policy`] and optional [`NitroExpectations`], and returns an
//! [`AttestationReport`] whose checks are, in order:
//!
//! | id | kind | fails when |
//! |---|---|---|
//! | `nitro.format` | format | the input is not one of the accepted forms, the COSE_Sign1 is malformed, not ES384, has trailing bytes, or the payload breaks the NSM schema |
//! | `nitro.chain` | chain | `cabundle[0]` is not byte-equal to the pinned root, a certificate is malformed, a link's name, CA constraints or signature is wrong |
//! | `nitro.signature` | signature | the COSE signature does not verify with the leaf certificate's P-384 key |
//! | `nitro.freshness` | freshness | a certificate is not valid at the instant, or the document timestamp is outside the leaf's validity |
//! | `nitro.policy.platform` | measurement | the policy does not allow `nitro` |
//! | `nitro.debug` | debug | PCR0, PCR1 and PCR2 are all zero (debug mode) and the policy has `allow_debug = false` |
//! | `nitro.policy.pcr` | measurement | a PCR listed in the policy is absent or not allowed |
//! | `nitro.binding.user_data`, `.nonce`, `.public_key` | binding | an expectation is set and the field is absent or differs |
//! | `nitro.binding.tls_spki` | binding | the document came from a TLS certificate and its `user_data` is not that certificate's SubjectPublicKeyInfo DER |
//!
//! The policy and binding checks run only on an authenticated document
//! (chain and signature passed); otherwise they are skipped, so a report
//! never says a forged value matched. The freshness check does not gate
//! them: a stale document is still authentic, and still rejected.
//!
//! A kolm enclave puts its manifest's report data
//! ([`kolm_format::binding::report_data`]) in `user_data`: pass it as
//! [`NitroExpectations::user_data`], or read it with
//! [`NitroDocument::user_data`] after [`parse_nitro_document`].

#![deny(clippy::arithmetic_side_effects)]

mod chain;
mod document;
mod error;
mod input;
mod root;

use kolm_policy::{Platform, Policy};
use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::attestation::{AttestationReport, CheckKind};

pub use document::{
    ES384_SIGNATURE_BYTES, MAX_CABUNDLE_LEN, MAX_CERT_BYTES, MAX_PCRS, MAX_USER_DATA_BYTES,
    NitroDigest, NitroDocument, PCR_BYTES,
};
pub use error::NitroError;
pub use input::{MAX_DOCUMENT_BYTES, MAX_INPUT_BYTES, NitroInputForm, certificate_spki_der};
pub use root::{AWS_NITRO_ROOT_G1_DER, AWS_NITRO_ROOT_G1_SHA256};

/// `platform` of Nitro reports.
pub const PLATFORM: &str = "nitro";

/// The PCRs Nitro Enclaves defines, which the report lists: 0 (enclave
/// image), 1 (kernel and bootstrap), 2 (application), 3 (parent IAM role),
/// 4 (parent instance id), 8 (EIF signing certificate).
pub const REPORTED_PCRS: [u8; 6] = [0, 1, 2, 3, 4, 8];

/// Values the caller expects the document to carry. Each one that is set
/// must be present in the document and byte-equal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NitroExpectations {
    /// Expected `user_data` (for kolm: the manifest's 64-byte report data).
    pub user_data: Option<Vec<u8>>,
    /// Expected `nonce` (the verifier's challenge).
    pub nonce: Option<Vec<u8>>,
    /// Expected `public_key`.
    pub public_key: Option<Vec<u8>>,
}

/// Parses a document in any accepted form, without any cryptographic or
/// time check. The result is structurally valid but unauthenticated.
pub fn parse_nitro_document(input: &[u8]) -> Result<NitroDocument, NitroError> {
    document::parse(input::extract(input)?)
}

/// Verifies a Nitro attestation document at instant `at` (never the system
/// clock) against the embedded root, `policy` and `expect`.
pub fn verify_nitro(
    input: &[u8],
    at: OffsetDateTime,
    policy: &Policy,
    expect: &NitroExpectations,
) -> AttestationReport {
    let at = at.to_offset(time::UtcOffset::UTC);
    let mut report = AttestationReport::new(PLATFORM, at.format(&Rfc3339).unwrap_or_default());
    let doc = match parse_nitro_document(input) {
        Ok(doc) => doc,
        Err(e) => {
            report.fail("nitro.format", CheckKind::Format, e.to_string());
            for (id, kind) in LATER_CHECKS {
                report.skip(id, kind, "not evaluated: the input did not parse");
            }
            report.conclude();
            return report;
        }
    };
    report.pass(
        "nitro.format",
        CheckKind::Format,
        format!(
            "{}: COSE_Sign1 ES384 of {} bytes; NSM document with {} PCRs, {} CA certificates",
            doc.input_form().as_str(),
            doc.cose_bytes().len(),
            doc.pcrs().len(),
            doc.cabundle().len()
        ),
    );
    document_fields(&mut report, &doc);

    // Chain.
    let chain = chain::verify_chain(&doc);
    report.field("root_is_aws_g1", chain.root_is_aws_g1);
    report.field("chain_sig_ok", chain.sig_ok);
    report.field(
        "window",
        chain.window().map_or(Value::Null, |(nb, na)| {
            json!([iso_seconds(nb), iso_seconds(na)])
        }),
    );
    report.field(
        "leaf_subject",
        chain
            .leaf()
            .map_or(Value::Null, |leaf| Value::String(leaf.subject_rfc4514())),
    );
    match &chain.failure {
        Some(f) => report.fail("nitro.chain", CheckKind::Chain, f.clone()),
        None => report.pass(
            "nitro.chain",
            CheckKind::Chain,
            format!(
                "cabundle[0] is the pinned AWS Nitro Enclaves Root G1; {} certificates chain \
                 to the leaf",
                chain.certs.len()
            ),
        ),
    }

    // COSE signature with the leaf key.
    let cose_sig_ok = match chain.leaf().and_then(|leaf| leaf.p384_point()) {
        Some(point) => {
            let ok = UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, point)
                .verify(doc.sig_structure(), doc.signature())
                .is_ok();
            if ok {
                report.pass(
                    "nitro.signature",
                    CheckKind::Signature,
                    "ES384 signature verifies with the leaf certificate's key",
                );
            } else {
                report.fail(
                    "nitro.signature",
                    CheckKind::Signature,
                    "ES384 signature does not verify with the leaf certificate's key",
                );
            }
            ok
        }
        None => {
            report.fail(
                "nitro.signature",
                CheckKind::Signature,
                "no usable P-384 key in the leaf certificate",
            );
            false
        }
    };
    report.field("cose_sig_ok", cose_sig_ok);

    // Validity at `at`.
    check_freshness(&mut report, &doc, &chain, at);

    let authenticated = chain.failure.is_none() && cose_sig_ok;
    if authenticated {
        check_policy(&mut report, &doc, policy);
        check_binding(&mut report, &doc, expect);
    } else {
        for (id, kind) in LATER_CHECKS.into_iter().skip(3) {
            report.skip(id, kind, "not evaluated: the document is not authenticated");
        }
    }
    report.conclude();
    report
}

/// The checks after `nitro.format`, in report order.
const LATER_CHECKS: [(&str, CheckKind); 10] = [
    ("nitro.chain", CheckKind::Chain),
    ("nitro.signature", CheckKind::Signature),
    ("nitro.freshness", CheckKind::Freshness),
    ("nitro.policy.platform", CheckKind::Measurement),
    ("nitro.debug", CheckKind::Debug),
    ("nitro.policy.pcr", CheckKind::Measurement),
    ("nitro.binding.user_data", CheckKind::Binding),
    ("nitro.binding.nonce", CheckKind::Binding),
    ("nitro.binding.public_key", CheckKind::Binding),
    ("nitro.binding.tls_spki", CheckKind::Binding),
];

fn document_fields(report: &mut AttestationReport, doc: &NitroDocument) {
    let hex_or_null = |v: Option<&[u8]>| v.map_or(Value::Null, |b| Value::String(hex::encode(b)));
    report.field("format", doc.input_form().as_str());
    report.field("module_id", doc.module_id());
    report.field("timestamp", iso_millis(doc.timestamp_ms()));
    report.field("timestamp_ms", doc.timestamp_ms());
    report.field("digest", doc.digest().as_str());
    let pcrs: serde_json::Map<String, Value> = REPORTED_PCRS
        .iter()
        .filter_map(|&i| {
            doc.pcr(i)
                .map(|v| (i.to_string(), Value::String(hex::encode(v))))
        })
        .collect();
    report.field("pcrs", Value::Object(pcrs));
    report.field("user_data", hex_or_null(doc.user_data()));
    report.field("nonce", hex_or_null(doc.nonce()));
    report.field("public_key", hex_or_null(doc.public_key()));
    report.field("debug_mode_all_zero_pcr012", doc.is_debug());
    report.field("cabundle_len", doc.cabundle().len());
    report.field("doc_sha256", hex::encode(doc.doc_sha256()));
}

fn check_freshness(
    report: &mut AttestationReport,
    doc: &NitroDocument,
    chain: &chain::ChainOutcome,
    at: OffsetDateTime,
) {
    let Some(leaf) = chain.leaf() else {
        report.skip(
            "nitro.freshness",
            CheckKind::Freshness,
            "not evaluated: the certificates did not parse",
        );
        return;
    };
    let at_s = at.format(&Rfc3339).unwrap_or_default();
    if let Some((label, nb, na)) = chain.validity().find(|&(_, nb, na)| at < nb || at > na) {
        report.fail(
            "nitro.freshness",
            CheckKind::Freshness,
            format!(
                "{label} is not valid at {at_s} (notBefore {}, notAfter {})",
                iso_seconds(nb),
                iso_seconds(na)
            ),
        );
        return;
    }
    let ts = doc.timestamp();
    if ts < leaf.not_before || ts > leaf.not_after {
        report.fail(
            "nitro.freshness",
            CheckKind::Freshness,
            format!(
                "document timestamp {} is outside the leaf certificate's validity ({} .. {})",
                iso_millis(doc.timestamp_ms()),
                iso_seconds(leaf.not_before),
                iso_seconds(leaf.not_after)
            ),
        );
        return;
    }
    let window = chain
        .window()
        .map(|(nb, na)| format!("{} .. {}", iso_seconds(nb), iso_seconds(na)))
        .unwrap_or_default();
    report.pass(
        "nitro.freshness",
        CheckKind::Freshness,
        format!(
            "{at_s} is inside every certificate's validity ({window}); document timestamp \
             inside the leaf's"
        ),
    );
}

fn check_policy(report: &mut AttestationReport, doc: &NitroDocument, policy: &Policy) {
    match policy.check_platform(Platform::Nitro) {
        Ok(()) => report.pass(
            "nitro.policy.platform",
            CheckKind::Measurement,
            "policy allows nitro",
        ),
        Err(v) => report.fail(
            "nitro.policy.platform",
            CheckKind::Measurement,
            v.to_string(),
        ),
    }

    let pcr012_present = (0u8..=2).all(|i| doc.pcr(i).is_some());
    let debug = doc.is_debug() || !pcr012_present;
    match policy.check_debug(debug) {
        Ok(()) if debug => report.pass(
            "nitro.debug",
            CheckKind::Debug,
            "debug enclave (PCR0/1/2 all zero or absent) accepted: the policy has allow_debug = true",
        ),
        Ok(()) => report.pass(
            "nitro.debug",
            CheckKind::Debug,
            "production enclave (PCR0/1/2 not all zero)",
        ),
        Err(v) if pcr012_present => report.fail(
            "nitro.debug",
            CheckKind::Debug,
            format!("debug enclave: PCR0, PCR1 and PCR2 are all zero; {v}"),
        ),
        Err(v) => report.fail(
            "nitro.debug",
            CheckKind::Debug,
            format!("PCR0/1/2 absent, so debug mode cannot be ruled out; {v}"),
        ),
    }

    if policy.nitro.pcrs.is_empty() {
        report.skip(
            "nitro.policy.pcr",
            CheckKind::Measurement,
            "the policy lists no PCR values",
        );
    } else {
        match policy.check_nitro_pcrs(doc.pcrs()) {
            Ok(()) => report.pass(
                "nitro.policy.pcr",
                CheckKind::Measurement,
                format!(
                    "PCR {} in the policy's allow-lists",
                    policy
                        .nitro
                        .pcrs
                        .keys()
                        .map(u8::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Err(v) => report.fail("nitro.policy.pcr", CheckKind::Measurement, v.to_string()),
        }
    }
}

fn check_binding(report: &mut AttestationReport, doc: &NitroDocument, expect: &NitroExpectations) {
    bind(
        report,
        "nitro.binding.user_data",
        "user_data",
        expect.user_data.as_deref(),
        doc.user_data(),
    );
    bind(
        report,
        "nitro.binding.nonce",
        "nonce",
        expect.nonce.as_deref(),
        doc.nonce(),
    );
    bind(
        report,
        "nitro.binding.public_key",
        "public_key",
        expect.public_key.as_deref(),
        doc.public_key(),
    );
    match doc.tls_spki() {
        None => report.skip(
            "nitro.binding.tls_spki",
            CheckKind::Binding,
            "the document did not come from a TLS certificate",
        ),
        Some(spki) => bind(
            report,
            "nitro.binding.tls_spki",
            "user_data",
            Some(spki),
            doc.user_data(),
        ),
    }
}

fn bind(
    report: &mut AttestationReport,
    id: &str,
    name: &str,
    expected: Option<&[u8]>,
    found: Option<&[u8]>,
) {
    let what = if id == "nitro.binding.tls_spki" {
        "the TLS certificate's SubjectPublicKeyInfo"
    } else {
        "the expected value"
    };
    match (expected, found) {
        (None, _) => report.skip(id, CheckKind::Binding, format!("no {name} expected")),
        (Some(_), None) => report.fail(
            id,
            CheckKind::Binding,
            format!("{name} is absent; expected {what}"),
        ),
        (Some(e), Some(f)) if e == f => report.pass(
            id,
            CheckKind::Binding,
            format!("{name} equals {what} ({} bytes)", f.len()),
        ),
        (Some(e), Some(f)) => report.fail(
            id,
            CheckKind::Binding,
            format!(
                "{name} {} differs from {what} {}",
                abbreviate(f),
                abbreviate(e)
            ),
        ),
    }
}

fn abbreviate(bytes: &[u8]) -> String {
    match bytes.get(..32) {
        Some(head) if bytes.len() > 32 => {
            format!("{}... ({} bytes)", hex::encode(head), bytes.len())
        }
        _ => hex::encode(bytes),
    }
}

/// `YYYY-MM-DDTHH:MM:SS+00:00`.
fn iso_seconds(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+00:00",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (microseconds, as Python's
/// `isoformat`), or whole seconds when the fraction is zero.
fn iso_millis(ms: u64) -> String {
    let Some(t) = document::ms_to_datetime(ms) else {
        return String::new();
    };
    let secs = iso_seconds(t);
    match t.microsecond() {
        0 => secs,
        us => format!("{}.{us:06}+00:00", secs.trim_end_matches("+00:00")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_spelled_as_python_isoformat() {
        assert_eq!(
            iso_millis(1_736_179_625_472),
            "2025-01-06T16:07:05.472000+00:00"
        );
        assert_eq!(iso_millis(1_736_179_625_000), "2025-01-06T16:07:05+00:00");
        assert_eq!(
            iso_seconds(OffsetDateTime::from_unix_timestamp(1_736_179_622).unwrap()),
            "2025-01-06T16:07:02+00:00"
        );
    }

    #[test]
    fn input_forms_have_stable_spellings() {
        assert_eq!(
            NitroInputForm::CoseSign1Untagged.as_str(),
            "cose-sign1-untagged-binary"
        );
        assert_eq!(
            NitroInputForm::CoseSign1Base64.as_str(),
            "cose-sign1-base64-text"
        );
        assert_eq!(NitroInputForm::TlsCertificateDer.as_str(), "tls-cert-der");
    }
}
