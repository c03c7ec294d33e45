//! AWS Nitro Enclaves attestation, verified offline.
//!
//! An NSM attestation document is a COSE_Sign1 (ES384) whose payload is a
//! CBOR map (module id, PCRs, timestamp, the signing certificate and its CA
//! bundle, optional `public_key`/`user_data`/`nonce`). [`verify`] takes the
//! binary COSE_Sign1 (untagged as the NSM returns it, or behind tag 18: the
//! one form receipt v1 section 6 names for `evidence/nitro.cose`);
//! [`verify_any_form`] takes raw evidence in any of the forms of
//! [`NitroInputForm`] (base64, hex, a TLS certificate carrying the
//! document). Both check the document at a caller-given instant against the
//! embedded AWS Nitro Enclaves Root G1 and the [`Expectations`] (policy;
//! `report_data` is matched against `user_data`, `nonce` and `public_key`
//! against the fields of those names), and record these [`NitroCheck`]s, in
//! order:
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
//! The claims of a parsed document are: platform `nitro`, the launch
//! measurement PCR0 ([`Measurement::NitroPcr0`]; a document without PCR0
//! yields no claims and is rejected), report data = `user_data` (empty when
//! absent), [`Tcb::Nitro`], and debug when PCR0, PCR1 and PCR2 are all zero
//! or any of them is absent.
//!
//! A kolm enclave puts its manifest's report data
//! ([`kolm_format::binding::report_data`]) in `user_data`: pass it as
//! [`Expectations::report_data`], or read it with
//! [`NitroDocument::user_data`] after [`parse_cose_document`]. An artifact's
//! document is judged at its own time: [`NitroDocument::timestamp`].

#![deny(clippy::arithmetic_side_effects)]

pub(crate) mod chain;
mod document;
mod error;
mod input;
mod root;

use kolm_policy::{Platform, Policy};
use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::attested::{
    Attested, Claims, Evaluation, EvidenceKind, Expectations, Fields, Identity, Measurement,
    Rejection, Tcb,
};
use crate::check::{Checklist, NitroCheck};

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

/// Parses a document in any accepted form ([`NitroInputForm`]), without any
/// cryptographic or time check. The result is structurally valid but
/// unauthenticated.
pub fn parse_nitro_document(input: &[u8]) -> Result<NitroDocument, NitroError> {
    document::parse(input::extract(input)?)
}

/// Parses a binary COSE_Sign1 document (untagged or tag 18) and nothing
/// else: the form of an artifact's `evidence/nitro.cose`. No cryptographic
/// or time check.
pub fn parse_cose_document(document: &[u8]) -> Result<NitroDocument, NitroError> {
    document::parse(input::extract_binary(document)?)
}

/// Checks a binary COSE_Sign1 Nitro attestation document at instant `at`
/// (never the system clock) against the embedded root and `expect`.
pub fn evaluate(document: &[u8], expect: &Expectations<'_>, at: OffsetDateTime) -> Evaluation {
    evaluate_parsed(parse_cose_document(document), expect, at)
}

/// [`evaluate`], concluded: the claims of a document that passed every
/// check, or the first failing check.
pub fn verify(
    document: &[u8],
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate(document, expect, at).conclude(expect.policy)
}

/// [`evaluate`] for raw evidence in any [`NitroInputForm`]; the `format`
/// field names the form the input came in.
pub fn evaluate_any_form(
    input: &[u8],
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_parsed(parse_nitro_document(input), expect, at)
}

/// [`evaluate_any_form`], concluded.
pub fn verify_any_form(
    input: &[u8],
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Result<Attested, Rejection> {
    evaluate_any_form(input, expect, at).conclude(expect.policy)
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_default()
}

fn evaluate_parsed(
    parsed: Result<NitroDocument, NitroError>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
) -> Evaluation {
    evaluate_anchored(parsed, expect, at, chain::Anchor::AwsG1)
}

/// The Nitro checks with the chain pinned to `anchor`: the AWS root for
/// platform `nitro`; a caller-given kolm sim root for platform `simulated`
/// ([`crate::sim`]), whose evaluation is of kind
/// [`EvidenceKind::Simulated`], claims platform `simulated`, and skips
/// the policy's Nitro rules (platform, PCR allow-lists): they pin Nitro
/// enclaves, and a simulation is none.
pub(crate) fn evaluate_anchored(
    parsed: Result<NitroDocument, NitroError>,
    expect: &Expectations<'_>,
    at: OffsetDateTime,
    anchor: chain::Anchor<'_>,
) -> Evaluation {
    let at = at.to_offset(time::UtcOffset::UTC);
    let sim = matches!(anchor, chain::Anchor::Sim(_));
    let kind = if sim {
        EvidenceKind::Simulated
    } else {
        EvidenceKind::Nitro
    };
    let mut ev = Evaluation::new(kind, at);
    let doc = match parsed {
        Ok(doc) => doc,
        Err(e) => {
            ev.checks.fail(NitroCheck::Format, e.to_string());
            ev.checks
                .skip_unrecorded(NitroCheck::ALL, "not evaluated: the input did not parse");
            return ev;
        }
    };
    let checks = &mut ev.checks;
    let fields = &mut ev.fields;
    checks.pass(
        NitroCheck::Format,
        format!(
            "{}: COSE_Sign1 ES384 of {} bytes; NSM document with {} PCRs, {} CA certificates",
            doc.input_form().as_str(),
            doc.cose_bytes().len(),
            doc.pcrs().len(),
            doc.cabundle().len()
        ),
    );
    document_fields(fields, &doc);

    // Chain.
    let chain = check_chain(checks, fields, &doc, anchor, sim);

    // COSE signature with the leaf key.
    let cose_sig_ok = check_cose_signature(checks, &doc, &chain);
    fields.insert("cose_sig_ok", cose_sig_ok);

    // Validity at `at`.
    check_freshness(checks, &doc, &chain, at);

    if chain.failure.is_none() && cose_sig_ok {
        check_policy(checks, &doc, expect.policy, sim);
        check_binding(checks, &doc, expect);
    } else {
        checks.skip_unrecorded(
            NitroCheck::ALL,
            "not evaluated: the document is not authenticated",
        );
    }
    ev.claims = claims(&doc, sim);
    ev
}

/// Check `nitro.chain`: walks the chain to `anchor` and records what it
/// found in `fields`.
fn check_chain(
    checks: &mut Checklist,
    fields: &mut Fields,
    doc: &NitroDocument,
    anchor: chain::Anchor<'_>,
    sim: bool,
) -> chain::ChainOutcome {
    let chain = chain::verify_chain(doc, anchor);
    fields.insert("root_is_aws_g1", chain.root_pinned && !sim);
    if sim {
        fields.insert("sim_root_sha256", anchor.sha256_hex());
    }
    fields.insert("chain_sig_ok", chain.sig_ok);
    fields.insert(
        "window",
        chain.window().map_or(Value::Null, |(nb, na)| {
            json!([iso_seconds(nb), iso_seconds(na)])
        }),
    );
    fields.insert(
        "leaf_subject",
        chain
            .leaf()
            .map_or(Value::Null, |leaf| Value::String(leaf.subject_rfc4514())),
    );
    match &chain.failure {
        Some(f) => checks.fail(NitroCheck::Chain, f.clone()),
        None if sim => checks.pass(
            NitroCheck::Chain,
            format!(
                "cabundle[0] is {} (sha256 {}), NOT a hardware vendor's root; {} certificates \
                 chain to the leaf",
                anchor.name(),
                anchor.sha256_hex(),
                chain.certs.len()
            ),
        ),
        None => checks.pass(
            NitroCheck::Chain,
            format!(
                "cabundle[0] is the pinned AWS Nitro Enclaves Root G1; {} certificates chain \
                 to the leaf",
                chain.certs.len()
            ),
        ),
    }
    chain
}

/// Check `nitro.signature`: the COSE_Sign1 signature with the leaf key.
fn check_cose_signature(
    checks: &mut Checklist,
    doc: &NitroDocument,
    chain: &chain::ChainOutcome,
) -> bool {
    match chain.leaf().and_then(|leaf| leaf.p384_point()) {
        Some(point) => {
            let ok = UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, point)
                .verify(doc.sig_structure(), doc.signature())
                .is_ok();
            if ok {
                checks.pass(
                    NitroCheck::Signature,
                    "ES384 signature verifies with the leaf certificate's key",
                );
            } else {
                checks.fail(
                    NitroCheck::Signature,
                    "ES384 signature does not verify with the leaf certificate's key",
                );
            }
            ok
        }
        None => {
            checks.fail(
                NitroCheck::Signature,
                "no usable P-384 key in the leaf certificate",
            );
            false
        }
    }
}

/// The typed claims of a parsed document; none without a 48-byte PCR0 (the
/// launch measurement). A sim document's claims are platform `simulated`
/// with their own measurement, TCB and identity types, so that no caller
/// can take them for Nitro's.
fn claims(doc: &NitroDocument, sim: bool) -> Option<Claims> {
    let pcr0: [u8; PCR_BYTES] = doc.pcr(0)?.try_into().ok()?;
    let pcrs = doc.pcrs().clone();
    let (platform, measurement, tcb, identity) = if sim {
        (
            Platform::Simulated,
            Measurement::SimPcr0(pcr0),
            Tcb::Simulated,
            Identity::Simulated { pcrs },
        )
    } else {
        (
            Platform::Nitro,
            Measurement::NitroPcr0(pcr0),
            Tcb::Nitro,
            Identity::Nitro { pcrs },
        )
    };
    Some(Claims {
        platform,
        measurement,
        report_data: doc.user_data().unwrap_or_default().to_vec(),
        tcb,
        debug: debug_mode(doc).debug,
        identity,
    })
}

/// How the document's debug mode was determined.
struct DebugMode {
    /// Debug, or not ruled out.
    debug: bool,
    /// PCR0, PCR1 and PCR2 are all present.
    pcr012_present: bool,
}

/// Debug when PCR0, PCR1 and PCR2 are all zero (what the NSM reports for
/// `--debug-mode`), or when any of them is absent (not ruled out).
fn debug_mode(doc: &NitroDocument) -> DebugMode {
    let pcr012_present = (0u8..=2).all(|i| doc.pcr(i).is_some());
    DebugMode {
        debug: doc.is_debug() || !pcr012_present,
        pcr012_present,
    }
}

fn document_fields(fields: &mut Fields, doc: &NitroDocument) {
    let hex_or_null = |v: Option<&[u8]>| v.map_or(Value::Null, |b| Value::String(hex::encode(b)));
    fields.insert("format", doc.input_form().as_str());
    fields.insert("module_id", doc.module_id());
    fields.insert("timestamp", iso_millis(doc.timestamp_ms()));
    fields.insert("timestamp_ms", doc.timestamp_ms());
    fields.insert("digest", doc.digest().as_str());
    let pcrs: serde_json::Map<String, Value> = REPORTED_PCRS
        .iter()
        .filter_map(|&i| {
            doc.pcr(i)
                .map(|v| (i.to_string(), Value::String(hex::encode(v))))
        })
        .collect();
    fields.insert("pcrs", Value::Object(pcrs));
    fields.insert("user_data", hex_or_null(doc.user_data()));
    fields.insert("nonce", hex_or_null(doc.nonce()));
    fields.insert("public_key", hex_or_null(doc.public_key()));
    fields.insert("debug_mode_all_zero_pcr012", doc.is_debug());
    fields.insert("cabundle_len", doc.cabundle().len());
    fields.insert("doc_sha256", hex::encode(doc.doc_sha256()));
}

fn check_freshness(
    checks: &mut Checklist,
    doc: &NitroDocument,
    chain: &chain::ChainOutcome,
    at: OffsetDateTime,
) {
    let Some(leaf) = chain.leaf() else {
        checks.skip(
            NitroCheck::Freshness,
            "not evaluated: the certificates did not parse",
        );
        return;
    };
    let at_s = rfc3339(at);
    if let Some((label, nb, na)) = chain.validity().find(|&(_, nb, na)| at < nb || at > na) {
        checks.fail(
            NitroCheck::Freshness,
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
        checks.fail(
            NitroCheck::Freshness,
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
    checks.pass(
        NitroCheck::Freshness,
        format!(
            "{at_s} is inside every certificate's validity ({window}); document timestamp \
             inside the leaf's"
        ),
    );
}

fn check_policy(checks: &mut Checklist, doc: &NitroDocument, policy: &Policy, sim: bool) {
    if sim {
        checks.skip(
            NitroCheck::PolicyPlatform,
            "simulated evidence: not a TEE, so no policy rule on `nitro` applies (an artifact's \
             `policy` check applies `allowed_platforms` to `simulated` when \
             --dangerous-allow-unattested accepts it)",
        );
    } else {
        match policy.check_platform(Platform::Nitro) {
            Ok(()) => checks.pass(NitroCheck::PolicyPlatform, "policy allows nitro"),
            Err(v) => checks.fail(NitroCheck::PolicyPlatform, v.to_string()),
        }
    }

    let DebugMode {
        debug,
        pcr012_present,
    } = debug_mode(doc);
    match policy.check_debug(debug) {
        Ok(()) if debug => checks.pass(
            NitroCheck::Debug,
            "debug enclave (PCR0/1/2 all zero or absent) accepted: the policy has allow_debug = true",
        ),
        Ok(()) => checks.pass(
            NitroCheck::Debug,
            "production enclave (PCR0/1/2 not all zero)",
        ),
        Err(v) if pcr012_present => checks.fail(
            NitroCheck::Debug,
            format!("debug enclave: PCR0, PCR1 and PCR2 are all zero; {v}"),
        ),
        Err(v) => checks.fail(
            NitroCheck::Debug,
            format!("PCR0/1/2 absent, so debug mode cannot be ruled out; {v}"),
        ),
    }

    if sim {
        checks.skip(
            NitroCheck::PolicyPcr,
            "simulated evidence: the policy's nitro.pcrs pin Nitro enclaves, not simulations",
        );
    } else if policy.nitro.pcrs.is_empty() {
        checks.skip(NitroCheck::PolicyPcr, "the policy lists no PCR values");
    } else {
        match policy.check_nitro_pcrs(doc.pcrs()) {
            Ok(()) => checks.pass(
                NitroCheck::PolicyPcr,
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
            Err(v) => checks.fail(NitroCheck::PolicyPcr, v.to_string()),
        }
    }
}

fn check_binding(checks: &mut Checklist, doc: &NitroDocument, expect: &Expectations<'_>) {
    bind(
        checks,
        NitroCheck::BindingUserData,
        "user_data",
        expect.report_data.as_deref(),
        doc.user_data(),
    );
    bind(
        checks,
        NitroCheck::BindingNonce,
        "nonce",
        expect.nonce.as_deref(),
        doc.nonce(),
    );
    bind(
        checks,
        NitroCheck::BindingPublicKey,
        "public_key",
        expect.public_key.as_deref(),
        doc.public_key(),
    );
    match doc.tls_spki() {
        None => checks.skip(
            NitroCheck::BindingTlsSpki,
            "the document did not come from a TLS certificate",
        ),
        Some(spki) => bind(
            checks,
            NitroCheck::BindingTlsSpki,
            "user_data",
            Some(spki),
            doc.user_data(),
        ),
    }
}

fn bind(
    checks: &mut Checklist,
    id: NitroCheck,
    name: &str,
    expected: Option<&[u8]>,
    found: Option<&[u8]>,
) {
    let what = if id == NitroCheck::BindingTlsSpki {
        "the TLS certificate's SubjectPublicKeyInfo"
    } else {
        "the expected value"
    };
    match (expected, found) {
        (None, _) => checks.skip(id, format!("no {name} expected")),
        (Some(_), None) => checks.fail(id, format!("{name} is absent; expected {what}")),
        (Some(e), Some(f)) if e == f => {
            checks.pass(id, format!("{name} equals {what} ({} bytes)", f.len()));
        }
        (Some(e), Some(f)) => checks.fail(
            id,
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
    fn the_artifact_path_refuses_text_forms_the_raw_path_decodes() {
        let policy = Policy::production();
        let expect = Expectations::new(&policy);
        let at = OffsetDateTime::from_unix_timestamp(1_736_179_622).unwrap();
        // Base64 of the first six bytes of a COSE_Sign1.
        let strict = evaluate(b"hEShATgi", &expect, at);
        let format = strict.checks.get(NitroCheck::Format).unwrap();
        assert_eq!(format.status, crate::check::CheckStatus::Fail);
        assert!(format.detail.starts_with("not a binary COSE_Sign1"));
        assert_eq!(strict.checks.len(), NitroCheck::ALL.len());
        assert!(strict.claims.is_none());
        assert!(matches!(
            parse_cose_document(b"hEShATgi"),
            Err(NitroError::NotBinaryCose { .. })
        ));
        // The raw-evidence path decodes it, and finds it truncated.
        let raw = evaluate_any_form(b"hEShATgi", &expect, at);
        let format = raw.checks.get(NitroCheck::Format).unwrap();
        assert!(
            format.detail.starts_with("COSE_Sign1:"),
            "{}",
            format.detail
        );
        let r = verify(&[0x84, 0x40], &expect, at).unwrap_err();
        assert_eq!(r.first_failure().unwrap().id, "nitro.format");
        assert!(r.reason.starts_with("nitro.format: COSE_Sign1:"));
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
