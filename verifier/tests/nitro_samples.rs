//! AWS Nitro Enclaves attestation: the shared samples
//! (`attestation-samples/nitro/expected.json`, every case and every field),
//! validity windows, policy, binding, and negative tests made by mutating
//! the genuine documents and by forging chains with fixed-seed keys.
//!
//! The genuine samples are read from `$KOLM_ATTESTATION_SAMPLES`, else the
//! repository's `attestation-samples/` if it holds `nitro/expected.json`,
//! else the project's `shared/attestation-samples/` beside the checkout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod nitro_forge;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ciborium::Value as Cbor;
use kolm_policy::{Platform, Policy};
use kolm_verifier::attestation::{AttestationReport, AttestationVerdict};
use kolm_verifier::nitro::{
    self, NitroError, NitroExpectations, NitroInputForm, certificate_spki_der,
    parse_nitro_document, verify_nitro,
};
use kolm_verifier::report::CheckStatus;
use nitro_forge as forge;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const PROD_EUC1: &str = "nitro-euc1-2025-01-06-prod.cose";
const PROD_2022: &str = "nitro-use1-2022-10-13-prod.cose";
const PROD_2023: &str = "nitro-use1-2023-01-18-prod.cose";
const PROD_TLS: &str = "nitro-use1-2023-01-18-prod-in-tlscert.der";
const DEBUG_2022: &str = "nitro-use1-2022-10-12-debug.cose";
const DEBUG_B64: &str = "nitro-use1-2023-09-18-debug.b64";
const DEBUG_2025: &str = "nitro-use1-2025-12-25-debug.cose";
const TLS_CERT_2023_09: &str = "nitro-use1-2023-09-18-tls-cert.der";
/// The committed forgery (see `attestation-samples/nitro/INDEX.md`).
const FORGED_FAKE_ROOT: &str = "tamper-fake-root-same-subject.cose";

// ---------------------------------------------------------------- helpers

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn samples_dir() -> PathBuf {
    let candidates = [
        std::env::var_os("KOLM_ATTESTATION_SAMPLES").map(PathBuf::from),
        Some(repo_root().join("attestation-samples")),
        Some(repo_root().join("../shared/attestation-samples")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("nitro/expected.json").is_file())
        .unwrap_or_else(|| {
            panic!(
                "attestation samples not found: set KOLM_ATTESTATION_SAMPLES or provide \
                 attestation-samples/nitro/ in the repository or ../shared/"
            )
        })
}

/// True (and says so on stderr, which libtest does not capture) when the
/// shared samples are absent: the test then skips instead of failing.
fn samples_missing() -> bool {
    let found = std::env::var_os("KOLM_ATTESTATION_SAMPLES")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo_root().join("attestation-samples"),
            repo_root().join("../shared/attestation-samples"),
        ])
        .any(|d| d.join("nitro/expected.json").is_file());
    if !found {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: attestation samples not found (KOLM_ATTESTATION_SAMPLES, ../shared/attestation-samples)"
        );
    }
    !found
}

fn sample(name: &str) -> Vec<u8> {
    let path = samples_dir().join("nitro").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A genuine document as raw COSE bytes (base64 decoded where needed).
fn cose(name: &str) -> Vec<u8> {
    let bytes = sample(name);
    if name.ends_with(".b64") {
        let text: Vec<u8> = bytes
            .into_iter()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    } else {
        bytes
    }
}

fn expected() -> Vec<Value> {
    let text = std::fs::read_to_string(samples_dir().join("nitro/expected.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["platform"], "nitro");
    doc["cases"].as_array().unwrap().clone()
}

fn case(file: &str) -> Value {
    expected()
        .into_iter()
        .find(|c| c["file"] == file)
        .unwrap_or_else(|| panic!("{file} not in expected.json"))
}

fn instant(s: &str) -> OffsetDateTime {
    OffsetDateTime::parse(s, &Rfc3339).unwrap()
}

fn verify_at(file: &str) -> OffsetDateTime {
    instant(case(file)["verify_at"].as_str().unwrap())
}

fn debug_policy() -> Policy {
    let mut p = Policy::production();
    p.allow_debug = true;
    p
}

fn none() -> NitroExpectations {
    NitroExpectations::default()
}

fn status(r: &AttestationReport, id: &str) -> CheckStatus {
    r.checks
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no check {id} in {}", r.to_table()))
        .status
}

fn first_failure(r: &AttestationReport) -> &str {
    r.first_failure()
        .map(|c| c.id.as_str())
        .unwrap_or_else(|| panic!("no failure in {}", r.to_table()))
}

#[track_caller]
fn assert_accepted(r: &AttestationReport) {
    assert_eq!(r.verdict, AttestationVerdict::Accept, "{}", r.to_table());
    assert!(r.reason.is_none());
}

#[track_caller]
fn assert_rejected_by(r: &AttestationReport, id: &str) {
    assert_eq!(r.verdict, AttestationVerdict::Reject, "{}", r.to_table());
    assert_eq!(first_failure(r), id, "{}", r.to_table());
    assert!(r.reason.as_deref().unwrap().starts_with(&format!("{id}: ")));
}

fn is_prod(c: &Value) -> bool {
    c["expected"] == "accept"
}

// ---------------------------------------------------- expected.json cases

#[test]
fn every_expected_case_and_field() {
    if samples_missing() {
        return;
    }
    let cases = expected();
    assert_eq!(cases.len(), 7, "expected.json lists seven Nitro cases");
    for c in &cases {
        let file = c["file"].as_str().unwrap();
        let input = sample(file);
        assert_eq!(
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&input)),
            c["file_sha256"],
            "{file}: fixture bytes changed"
        );
        let at = instant(c["verify_at"].as_str().unwrap());
        let production = verify_nitro(&input, at, &Policy::production(), &none());
        let fields = c["fields"].as_object().unwrap();
        for (name, want) in fields {
            assert_eq!(
                production.fields.get(name),
                Some(want),
                "{file}: field {name}\n{}",
                production.to_table()
            );
        }
        assert_eq!(production.fields["format"], c["format"], "{file}");
        assert_eq!(production.platform, "nitro");
        assert_eq!(production.verified_at, c["verify_at"].as_str().unwrap());

        for id in [
            "nitro.format",
            "nitro.chain",
            "nitro.signature",
            "nitro.freshness",
        ] {
            assert_eq!(status(&production, id), CheckStatus::Pass, "{file}: {id}");
        }
        if is_prod(c) {
            assert_accepted(&production);
            assert_eq!(status(&production, "nitro.debug"), CheckStatus::Pass);
        } else {
            assert!(
                c["expected"]
                    .as_str()
                    .unwrap()
                    .starts_with("accept-signature; reject-under-production-policy")
            );
            assert_rejected_by(&production, "nitro.debug");
            let permissive = verify_nitro(&input, at, &debug_policy(), &none());
            assert_accepted(&permissive);
            assert_eq!(permissive.fields, production.fields);
        }
        // The report serialises as one JSON document.
        let json = serde_json::to_value(&production).unwrap();
        assert_eq!(json["schema"], "kolm.attestation-report.v1");
    }
}

#[test]
fn parse_only_api_agrees_with_the_samples() {
    if samples_missing() {
        return;
    }
    for c in expected() {
        let file = c["file"].as_str().unwrap();
        let doc = parse_nitro_document(&sample(file)).unwrap();
        let f = &c["fields"];
        assert_eq!(doc.module_id(), f["module_id"], "{file}");
        assert_eq!(doc.timestamp_ms(), f["timestamp_ms"].as_u64().unwrap());
        assert_eq!(doc.input_form().as_str(), c["format"]);
        assert_eq!(doc.cabundle().len(), 4);
        assert_eq!(doc.pcrs().len(), 16);
        assert_eq!(hex::encode(doc.doc_sha256()), f["doc_sha256"]);
        assert_eq!(
            doc.user_data().map(hex::encode),
            f["user_data"].as_str().map(str::to_owned)
        );
        assert_eq!(
            doc.nonce().map(hex::encode),
            f["nonce"].as_str().map(str::to_owned)
        );
        assert_eq!(
            doc.public_key().map(hex::encode),
            f["public_key"].as_str().map(str::to_owned)
        );
        assert_eq!(
            doc.is_debug(),
            f["debug_mode_all_zero_pcr012"].as_bool().unwrap()
        );
        assert_eq!(
            doc.input_form().is_tls_certificate(),
            file.ends_with(".der")
        );
        assert_eq!(doc.tls_spki().is_some(), file.ends_with(".der"));
    }
}

// ------------------------------------------------------------ freshness

#[test]
fn each_document_is_rejected_one_second_outside_its_window() {
    if samples_missing() {
        return;
    }
    for c in expected() {
        let file = c["file"].as_str().unwrap();
        let input = sample(file);
        let policy = debug_policy();
        let window = c["fields"]["window"].as_array().unwrap();
        let start = instant(window[0].as_str().unwrap());
        let end = instant(window[1].as_str().unwrap());
        for at in [start, end] {
            assert_accepted(&verify_nitro(&input, at, &policy, &none()));
        }
        for at in [start - time::Duration::SECOND, end + time::Duration::SECOND] {
            let r = verify_nitro(&input, at, &policy, &none());
            assert_rejected_by(&r, "nitro.freshness");
            assert_eq!(status(&r, "nitro.chain"), CheckStatus::Pass);
            assert_eq!(status(&r, "nitro.signature"), CheckStatus::Pass);
        }
        // Sub-second precision counts: 1 ms past notAfter is too late.
        let r = verify_nitro(&input, end + time::Duration::MILLISECOND, &policy, &none());
        assert_rejected_by(&r, "nitro.freshness");
    }
}

#[test]
fn validity_is_evaluated_at_the_given_instant_not_the_clock() {
    if samples_missing() {
        return;
    }
    // Years after every leaf expired: rejected; at verify_at: accepted.
    let input = sample(PROD_EUC1);
    let late = instant("2026-11-25T00:00:00Z");
    let r = verify_nitro(&input, late, &Policy::production(), &none());
    assert_rejected_by(&r, "nitro.freshness");
    assert!(
        r.reason
            .unwrap()
            .contains("not valid at 2026-11-25T00:00:00Z")
    );
    assert_accepted(&verify_nitro(
        &input,
        verify_at(PROD_EUC1),
        &Policy::production(),
        &none(),
    ));
}

// ------------------------------------------------------------ policy

#[test]
fn debug_documents_need_allow_debug() {
    if samples_missing() {
        return;
    }
    for file in [DEBUG_2022, DEBUG_B64, DEBUG_2025] {
        let input = sample(file);
        let at = verify_at(file);
        let r = verify_nitro(&input, at, &Policy::production(), &none());
        assert_rejected_by(&r, "nitro.debug");
        assert!(
            r.reason
                .unwrap()
                .contains("PCR0, PCR1 and PCR2 are all zero")
        );
        assert_eq!(r.fields["debug_mode_all_zero_pcr012"], true);
        assert_accepted(&verify_nitro(&input, at, &debug_policy(), &none()));
    }
}

#[test]
fn production_documents_pass_the_debug_check() {
    if samples_missing() {
        return;
    }
    for file in [PROD_EUC1, PROD_2022, PROD_2023, PROD_TLS] {
        let r = verify_nitro(
            &sample(file),
            verify_at(file),
            &Policy::production(),
            &none(),
        );
        assert_accepted(&r);
        assert_eq!(r.fields["debug_mode_all_zero_pcr012"], false);
    }
}

fn pcr48(hex_str: &str) -> [u8; 48] {
    hex::decode(hex_str).unwrap().try_into().unwrap()
}

#[test]
fn pcr_allow_lists() {
    if samples_missing() {
        return;
    }
    let input = sample(PROD_EUC1);
    let at = verify_at(PROD_EUC1);
    let f = &case(PROD_EUC1)["fields"]["pcrs"];
    let mut policy = Policy::production();
    for i in [0u8, 1, 2, 8] {
        policy.nitro.pcrs.insert(
            i,
            BTreeSet::from([pcr48(f[i.to_string()].as_str().unwrap())]),
        );
    }
    let r = verify_nitro(&input, at, &policy, &none());
    assert_accepted(&r);
    assert_eq!(status(&r, "nitro.policy.pcr"), CheckStatus::Pass);

    // A second allowed value (a rollout) still passes.
    policy.nitro.pcrs.get_mut(&0).unwrap().insert([0xab; 48]);
    assert_accepted(&verify_nitro(&input, at, &policy, &none()));

    // PCR0 of another image: rejected.
    let mut other = policy.clone();
    other.nitro.pcrs.insert(
        0,
        BTreeSet::from([pcr48(
            case(PROD_2022)["fields"]["pcrs"]["0"].as_str().unwrap(),
        )]),
    );
    let r = verify_nitro(&input, at, &other, &none());
    assert_rejected_by(&r, "nitro.policy.pcr");
    assert!(r.reason.unwrap().contains("PCR0 = 8bb159f2"));

    // A PCR the document does not carry: rejected.
    let mut absent = policy.clone();
    absent.nitro.pcrs.insert(20, BTreeSet::from([[0u8; 48]]));
    let r = verify_nitro(&input, at, &absent, &none());
    assert_rejected_by(&r, "nitro.policy.pcr");
    assert!(r.reason.unwrap().contains("PCR20"));

    // No allow-list: the check is skipped, not passed.
    let r = verify_nitro(&input, at, &Policy::production(), &none());
    assert_eq!(status(&r, "nitro.policy.pcr"), CheckStatus::Skip);
}

#[test]
fn platform_must_be_allowed_by_the_policy() {
    if samples_missing() {
        return;
    }
    let mut policy = Policy::production();
    policy.allowed_platforms = BTreeSet::from([Platform::SevSnp]);
    let r = verify_nitro(&sample(PROD_EUC1), verify_at(PROD_EUC1), &policy, &none());
    assert_rejected_by(&r, "nitro.policy.platform");
}

// ------------------------------------------------------------ binding

#[test]
fn user_data_nonce_and_public_key_expectations() {
    if samples_missing() {
        return;
    }
    let c = case(PROD_2022);
    let f = &c["fields"];
    let nonce = hex::decode(f["nonce"].as_str().unwrap()).unwrap();
    let input = sample(PROD_2022);
    let at = verify_at(PROD_2022);
    let p = Policy::production();

    let ok = NitroExpectations {
        nonce: Some(nonce.clone()),
        ..none()
    };
    let r = verify_nitro(&input, at, &p, &ok);
    assert_accepted(&r);
    assert_eq!(status(&r, "nitro.binding.nonce"), CheckStatus::Pass);
    assert_eq!(status(&r, "nitro.binding.user_data"), CheckStatus::Skip);

    let mut wrong = nonce.clone();
    wrong[0] ^= 1;
    let r = verify_nitro(
        &input,
        at,
        &p,
        &NitroExpectations {
            nonce: Some(wrong),
            ..none()
        },
    );
    assert_rejected_by(&r, "nitro.binding.nonce");

    // The document has no user_data / public_key: an expectation fails.
    let r = verify_nitro(
        &input,
        at,
        &p,
        &NitroExpectations {
            user_data: Some(vec![0; 64]),
            ..none()
        },
    );
    assert_rejected_by(&r, "nitro.binding.user_data");
    assert!(r.reason.unwrap().contains("absent"));
    let r = verify_nitro(
        &input,
        at,
        &p,
        &NitroExpectations {
            public_key: Some(vec![1]),
            ..none()
        },
    );
    assert_rejected_by(&r, "nitro.binding.public_key");

    // public_key and user_data of the 2022 debug document.
    let d = case(DEBUG_2022);
    let all = NitroExpectations {
        user_data: Some(hex::decode(d["fields"]["user_data"].as_str().unwrap()).unwrap()),
        public_key: Some(hex::decode(d["fields"]["public_key"].as_str().unwrap()).unwrap()),
        nonce: None,
    };
    assert_eq!(all.user_data.as_deref(), Some(&b"hello, world!"[..]));
    let r = verify_nitro(
        &sample(DEBUG_2022),
        verify_at(DEBUG_2022),
        &debug_policy(),
        &all,
    );
    assert_accepted(&r);
    assert_eq!(status(&r, "nitro.binding.public_key"), CheckStatus::Pass);
    let mut bad = all.clone();
    bad.public_key = Some(b"my super secret keY".to_vec());
    let r = verify_nitro(
        &sample(DEBUG_2022),
        verify_at(DEBUG_2022),
        &debug_policy(),
        &bad,
    );
    assert_rejected_by(&r, "nitro.binding.public_key");
}

#[test]
fn kolm_report_data_binding_through_user_data() {
    if samples_missing() {
        return;
    }
    // The 2025 debug document carries 64 zero bytes of user_data, the size
    // of a kolm report_data.
    let doc = parse_nitro_document(&sample(DEBUG_2025)).unwrap();
    assert_eq!(doc.user_data(), Some(&[0u8; 64][..]));
    let at = verify_at(DEBUG_2025);
    let r = verify_nitro(
        &sample(DEBUG_2025),
        at,
        &debug_policy(),
        &NitroExpectations {
            user_data: Some(vec![0; 64]),
            ..none()
        },
    );
    assert_accepted(&r);
    let mut other = [0u8; 64];
    other[63] = 1;
    let r = verify_nitro(
        &sample(DEBUG_2025),
        at,
        &debug_policy(),
        &NitroExpectations {
            user_data: Some(other.to_vec()),
            ..none()
        },
    );
    assert_rejected_by(&r, "nitro.binding.user_data");
}

#[test]
fn base64_document_is_bound_to_its_separate_tls_certificate() {
    if samples_missing() {
        return;
    }
    let spki = certificate_spki_der(&sample(TLS_CERT_2023_09)).unwrap();
    assert_eq!(
        hex::encode(&spki),
        case(DEBUG_B64)["fields"]["user_data"].as_str().unwrap()
    );
    let at = verify_at(DEBUG_B64);
    let r = verify_nitro(
        &sample(DEBUG_B64),
        at,
        &debug_policy(),
        &NitroExpectations {
            user_data: Some(spki.clone()),
            ..none()
        },
    );
    assert_accepted(&r);
    assert_eq!(status(&r, "nitro.binding.user_data"), CheckStatus::Pass);
    // Not from a certificate: no TLS binding to check.
    assert_eq!(status(&r, "nitro.binding.tls_spki"), CheckStatus::Skip);

    // Another certificate's key does not match.
    let other = certificate_spki_der(&sample(PROD_TLS)).unwrap();
    let r = verify_nitro(
        &sample(DEBUG_B64),
        at,
        &debug_policy(),
        &NitroExpectations {
            user_data: Some(other),
            ..none()
        },
    );
    assert_rejected_by(&r, "nitro.binding.user_data");
}

#[test]
fn tls_certificate_form_checks_user_data_against_its_own_key() {
    if samples_missing() {
        return;
    }
    let der = sample(PROD_TLS);
    let at = verify_at(PROD_TLS);
    let r = verify_nitro(&der, at, &Policy::production(), &none());
    assert_accepted(&r);
    assert_eq!(status(&r, "nitro.binding.tls_spki"), CheckStatus::Pass);
    // The same document, extracted, is the committed .cose sample.
    let doc = parse_nitro_document(&der).unwrap();
    assert_eq!(doc.cose_bytes(), sample(PROD_2023).as_slice());
    assert_eq!(doc.tls_spki().unwrap(), certificate_spki_der(&der).unwrap());

    // PEM of the same certificate.
    let pem = der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, &der).unwrap();
    let r = verify_nitro(pem.as_bytes(), at, &Policy::production(), &none());
    assert_accepted(&r);
    assert_eq!(r.fields["format"], "tls-cert-pem");

    // The same certificate with another SubjectPublicKeyInfo (its own
    // signature is not the verifier's business; the binding is).
    use der::{Decode as _, Encode as _};
    let mut cert = x509_cert::Certificate::from_der(&der).unwrap();
    let other = x509_cert::Certificate::from_der(&sample(TLS_CERT_2023_09)).unwrap();
    cert.tbs_certificate.subject_public_key_info =
        other.tbs_certificate.subject_public_key_info.clone();
    let swapped = cert.to_der().unwrap();
    let r = verify_nitro(&swapped, at, &Policy::production(), &none());
    assert_rejected_by(&r, "nitro.binding.tls_spki");
    assert_eq!(status(&r, "nitro.signature"), CheckStatus::Pass);
}

// ------------------------------------------------------------ input forms

#[test]
fn input_forms_are_detected() {
    if samples_missing() {
        return;
    }
    let raw = cose(PROD_EUC1);
    let at = verify_at(PROD_EUC1);
    let p = Policy::production();
    let form = |b: &[u8]| parse_nitro_document(b).map(|d| d.input_form());

    assert_eq!(form(&raw), Ok(NitroInputForm::CoseSign1Untagged));

    let mut tagged = vec![0xd2];
    tagged.extend_from_slice(&raw);
    assert_eq!(form(&tagged), Ok(NitroInputForm::CoseSign1Tagged));
    assert_accepted(&verify_nitro(&tagged, at, &p, &none()));

    let b64 = base64::engine::general_purpose::STANDARD.encode(&raw);
    // Wrapped at 76 columns with CRLF, leading and trailing whitespace.
    let wrapped: String = b64
        .as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("\r\n");
    let wrapped = format!("  \n{wrapped}\n\t");
    assert_eq!(
        form(wrapped.as_bytes()),
        Ok(NitroInputForm::CoseSign1Base64)
    );
    let r = verify_nitro(wrapped.as_bytes(), at, &p, &none());
    assert_accepted(&r);
    assert_eq!(
        r.fields["doc_sha256"],
        case(PROD_EUC1)["fields"]["doc_sha256"]
    );
    // Base64 of a tagged document: starts with `0` (0x30), like DER.
    let b64_tagged = base64::engine::general_purpose::STANDARD.encode(&tagged);
    assert!(b64_tagged.starts_with('0'));
    assert_eq!(
        form(b64_tagged.as_bytes()),
        Ok(NitroInputForm::CoseSign1Base64)
    );

    // URL-safe alphabet, padding stripped.
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
    assert!(url.contains(['-', '_']));
    assert_eq!(form(url.as_bytes()), Ok(NitroInputForm::CoseSign1Base64));
    assert_accepted(&verify_nitro(url.as_bytes(), at, &p, &none()));
    // Standard alphabet without padding.
    let unpadded = b64.trim_end_matches('=');
    assert_ne!(unpadded, b64);
    assert_eq!(
        form(unpadded.as_bytes()),
        Ok(NitroInputForm::CoseSign1Base64)
    );
    // A mix of both alphabets is not base64.
    let mixed = format!("{}-", &b64[..b64.len() - 4]);
    assert!(matches!(
        parse_nitro_document(mixed.as_bytes()),
        Err(NitroError::Base64 { .. })
    ));

    // Hex text, either case, wrapped.
    let hex_text = hex::encode(&raw);
    let upper_wrapped: String = hex_text
        .to_uppercase()
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    for text in [hex_text.clone(), upper_wrapped] {
        assert_eq!(form(text.as_bytes()), Ok(NitroInputForm::CoseSign1Hex));
        let r = verify_nitro(text.as_bytes(), at, &p, &none());
        assert_accepted(&r);
        assert_eq!(r.fields["format"], "cose-sign1-hex-text");
    }
    // Odd-length hex is not a document.
    assert!(parse_nitro_document(&hex_text.as_bytes()[1..]).is_err());

    assert_eq!(
        form(&sample(PROD_TLS)),
        Ok(NitroInputForm::TlsCertificateDer)
    );
}

#[test]
fn unrecognised_and_malformed_inputs() {
    if samples_missing() {
        return;
    }
    let p = Policy::production();
    let at = verify_at(PROD_EUC1);
    for bad in [
        &b""[..],
        b"   \n",
        b"\x00\x01\x02",
        b"{\"not\":\"a document\"}",
        b"hEShATgi!",
        b"hESh ATgi", // base64 of the first six bytes only
    ] {
        let r = verify_nitro(bad, at, &p, &none());
        assert_rejected_by(&r, "nitro.format");
        assert!(parse_nitro_document(bad).is_err(), "{bad:?}");
    }
    // Base64 of something that is not COSE.
    let text = base64::engine::general_purpose::STANDARD.encode(b"\x30\x03\x02\x01\x00");
    assert!(matches!(
        parse_nitro_document(text.as_bytes()),
        Err(NitroError::Base64 { .. })
    ));
    // A certificate carrying no document (the 2023-09 TLS certificate).
    assert!(matches!(
        parse_nitro_document(&sample(TLS_CERT_2023_09)),
        Err(NitroError::TlsCertificate { .. })
    ));
    // Over the size cap.
    let huge = vec![0x84; nitro::MAX_INPUT_BYTES + 1];
    assert!(matches!(
        parse_nitro_document(&huge),
        Err(NitroError::TooLarge { .. })
    ));
    // A PEM block that is not a certificate.
    let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    assert!(matches!(
        parse_nitro_document(key.as_bytes()),
        Err(NitroError::TlsCertificate { .. })
    ));
}

// -------------------------------------------------------------- mutations

const GENUINE: [&str; 5] = [PROD_EUC1, PROD_2022, PROD_2023, DEBUG_2022, DEBUG_2025];

/// Verifies a mutated document at its original instant under the
/// permissive policy: anything but a rejection is a failure.
#[track_caller]
fn assert_mutation_rejected(file: &str, bytes: &[u8], what: &str) -> String {
    let r = verify_nitro(bytes, verify_at(file), &debug_policy(), &none());
    assert_eq!(
        r.verdict,
        AttestationVerdict::Reject,
        "{file}: {what} was accepted\n{}",
        r.to_table()
    );
    first_failure(&r).to_owned()
}

/// Offsets of the protected header bstr (with its header byte) and of the
/// signature bstr (with its two header bytes) in an untagged COSE_Sign1.
fn envelope_offsets(doc: &[u8]) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    assert_eq!(&doc[..6], &[0x84, 0x44, 0xa1, 0x01, 0x38, 0x22]);
    let sig_start = doc.len() - 98;
    assert_eq!(&doc[sig_start..sig_start + 2], &[0x58, 0x60]);
    (0..6, sig_start..doc.len())
}

#[test]
fn every_byte_of_protected_header_and_signature_matters() {
    if samples_missing() {
        return;
    }
    for file in GENUINE {
        let doc = cose(file);
        let (protected, signature) = envelope_offsets(&doc);
        for i in protected.chain(signature) {
            for mask in [0x01u8, 0xff] {
                let mut m = doc.clone();
                m[i] ^= mask;
                let id = assert_mutation_rejected(file, &m, &format!("byte {i} ^ {mask:#04x}"));
                assert!(
                    ["nitro.format", "nitro.signature"].contains(&id.as_str()),
                    "{file}: byte {i} ^ {mask:#04x} failed {id}"
                );
            }
        }
    }
}

/// Flips every 7th payload byte with two masks; every flip must be rejected
/// by parsing, the chain or the signature, and most by the signature.
fn payload_mutations_are_rejected(file: &str) {
    let doc = cose(file);
    let (_, signature) = envelope_offsets(&doc);
    let mut seen = BTreeMap::<String, usize>::new();
    for i in (6..signature.start).step_by(7) {
        for mask in [0x01u8, 0x80] {
            let mut m = doc.clone();
            m[i] ^= mask;
            let id = assert_mutation_rejected(file, &m, &format!("byte {i} ^ {mask:#04x}"));
            *seen.entry(id).or_default() += 1;
        }
    }
    assert!(
        seen.get("nitro.signature").copied().unwrap_or(0) > 100,
        "{seen:?}"
    );
    assert!(
        seen.keys()
            .all(|k| ["nitro.format", "nitro.chain", "nitro.signature"].contains(&k.as_str())),
        "{seen:?}"
    );
}

#[test]
fn payload_mutations_are_rejected_prod() {
    if samples_missing() {
        return;
    }
    payload_mutations_are_rejected(PROD_EUC1);
}

#[test]
fn payload_mutations_are_rejected_indefinite_length_map() {
    if samples_missing() {
        return;
    }
    payload_mutations_are_rejected(DEBUG_2025);
}

#[test]
fn truncations_and_trailing_bytes_are_rejected() {
    if samples_missing() {
        return;
    }
    for file in GENUINE {
        let doc = cose(file);
        for len in 0..doc.len() {
            let r = verify_nitro(&doc[..len], verify_at(file), &debug_policy(), &none());
            assert_rejected_by(&r, "nitro.format");
        }
        for extra in [&[0x00][..], &[0xf6], &[0x84], &doc[..6]] {
            let mut m = doc.clone();
            m.extend_from_slice(extra);
            let r = verify_nitro(&m, verify_at(file), &debug_policy(), &none());
            assert_rejected_by(&r, "nitro.format");
            assert!(matches!(
                parse_nitro_document(&m),
                Err(NitroError::Cose { .. })
            ));
        }
    }
    // The other forms: a trailing byte after the certificate or base64
    // characters that change the decoded bytes.
    let mut der = sample(PROD_TLS);
    der.push(0);
    assert_rejected_by(
        &verify_nitro(&der, verify_at(PROD_TLS), &Policy::production(), &none()),
        "nitro.format",
    );
    let tls = sample(PROD_TLS);
    for len in (0..tls.len()).step_by(97) {
        assert!(parse_nitro_document(&tls[..len]).is_err());
    }
    let mut b64 = sample(DEBUG_B64);
    let end = b64.iter().rposition(|b| !b.is_ascii_whitespace()).unwrap();
    b64.truncate(end + 1);
    b64.extend_from_slice(b"AAAA");
    assert_rejected_by(
        &verify_nitro(&b64, verify_at(DEBUG_B64), &debug_policy(), &none()),
        "nitro.format",
    );
}

#[test]
fn cabundle_edits_break_the_chain() {
    if samples_missing() {
        return;
    }
    for file in GENUINE {
        let doc = cose(file);
        let (cabundle, _) = forge::chain_of(&doc);
        let with_bundle = |bundle: Vec<Vec<u8>>| {
            forge::edit_payload(&doc, |m| {
                forge::set(
                    m,
                    "cabundle",
                    Cbor::Array(bundle.into_iter().map(Cbor::Bytes).collect()),
                )
            })
        };
        // Each certificate removed in turn.
        for i in 0..cabundle.len() {
            let mut b = cabundle.clone();
            b.remove(i);
            let r = verify_nitro(&with_bundle(b), verify_at(file), &debug_policy(), &none());
            assert_rejected_by(&r, "nitro.chain");
            assert_eq!(r.fields["cabundle_len"], 3);
            assert_eq!(r.fields["root_is_aws_g1"], i != 0);
        }
        // Neighbours swapped, and the whole bundle reversed.
        for i in 0..cabundle.len() - 1 {
            let mut b = cabundle.clone();
            b.swap(i, i + 1);
            let r = verify_nitro(&with_bundle(b), verify_at(file), &debug_policy(), &none());
            assert_rejected_by(&r, "nitro.chain");
        }
        let mut reversed = cabundle.clone();
        reversed.reverse();
        let r = verify_nitro(
            &with_bundle(reversed),
            verify_at(file),
            &debug_policy(),
            &none(),
        );
        assert_rejected_by(&r, "nitro.chain");
        // The edit machinery itself changes nothing: the untouched bundle
        // re-encodes to the same bytes (the 2025 document's payload is an
        // indefinite-length map, which re-encodes as a definite one).
        if file != DEBUG_2025 {
            assert_eq!(with_bundle(cabundle.clone()), doc, "{file}");
        }
    }
}

#[test]
fn leaf_from_another_document_is_rejected() {
    if samples_missing() {
        return;
    }
    let (_, other_leaf) = forge::chain_of(&cose(PROD_2022));
    for file in [PROD_2023, DEBUG_2022] {
        let doc = cose(file);
        let m = forge::edit_payload(&doc, |map| {
            forge::set(map, "certificate", Cbor::Bytes(other_leaf.clone()))
        });
        let r = verify_nitro(&m, verify_at(file), &debug_policy(), &none());
        assert_eq!(r.verdict, AttestationVerdict::Reject);
        assert_eq!(
            status(&r, "nitro.signature"),
            CheckStatus::Fail,
            "{}",
            r.to_table()
        );
        assert_eq!(
            status(&r, "nitro.chain"),
            CheckStatus::Fail,
            "{}",
            r.to_table()
        );
        assert_eq!(r.fields["cose_sig_ok"], false);
        // Policy and binding are not evaluated on an unauthenticated document.
        assert_eq!(status(&r, "nitro.debug"), CheckStatus::Skip);
        assert_eq!(status(&r, "nitro.binding.user_data"), CheckStatus::Skip);
    }
}

// -------------------------------------------------------------- forgeries

#[test]
fn forgery_under_a_fake_root_with_the_aws_subject_fails_the_chain() {
    if samples_missing() {
        return;
    }
    let genuine = cose(PROD_EUC1);
    let forged = forge::forge_fake_root(&genuine);
    let at = verify_at(PROD_EUC1);
    let r = verify_nitro(&forged, at, &Policy::production(), &none());
    assert_rejected_by(&r, "nitro.chain");
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .contains("not the pinned AWS Nitro Enclaves Root G1")
    );
    // Everything the forger controls is consistent: its own signatures verify
    // and the subject is copied from the real root.
    assert_eq!(r.fields["root_is_aws_g1"], false);
    assert_eq!(r.fields["chain_sig_ok"], true);
    assert_eq!(r.fields["cose_sig_ok"], true);
    assert_eq!(status(&r, "nitro.signature"), CheckStatus::Pass);
    assert_eq!(status(&r, "nitro.freshness"), CheckStatus::Pass);
    assert_eq!(
        r.fields["leaf_subject"],
        case(PROD_EUC1)["fields"]["leaf_subject"]
    );
    use der::Decode as _;
    let doc = parse_nitro_document(&forged).unwrap();
    let fake_root = x509_cert::Certificate::from_der(&doc.cabundle()[0]).unwrap();
    let real_root = x509_cert::Certificate::from_der(nitro::AWS_NITRO_ROOT_G1_DER).unwrap();
    assert_eq!(
        fake_root.tbs_certificate.subject,
        real_root.tbs_certificate.subject
    );
    // Not even a permissive policy accepts it.
    let r = verify_nitro(&forged, at, &debug_policy(), &none());
    assert_rejected_by(&r, "nitro.chain");
}

#[test]
fn forgery_under_the_real_root_with_a_fake_intermediate_fails_the_signature() {
    if samples_missing() {
        return;
    }
    let genuine = cose(PROD_EUC1);
    let forged = forge::forge_fake_intermediate(&genuine);
    let r = verify_nitro(&forged, verify_at(PROD_EUC1), &debug_policy(), &none());
    assert_rejected_by(&r, "nitro.chain");
    assert_eq!(r.fields["root_is_aws_g1"], true);
    assert_eq!(r.fields["chain_sig_ok"], false);
    assert_eq!(r.fields["cose_sig_ok"], true);
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .contains("cabundle[1]: signature by cabundle[0] does not verify"),
        "{}",
        r.to_table()
    );
}

#[test]
fn committed_forgery_is_reproducible_and_rejected() {
    if samples_missing() {
        return;
    }
    let path = repo_root()
        .join("attestation-samples/nitro")
        .join(FORGED_FAKE_ROOT);
    let generated = forge::forge_fake_root(&cose(PROD_EUC1));
    if std::env::var_os("KOLM_WRITE_FORGERIES").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        committed, generated,
        "regenerate with KOLM_WRITE_FORGERIES=1"
    );
    let index = std::fs::read_to_string(path.with_file_name("INDEX.md")).unwrap();
    assert!(index.contains(FORGED_FAKE_ROOT));
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&committed));
    assert!(index.contains(&sha), "INDEX.md must list sha256 {sha}");
    let r = verify_nitro(&committed, verify_at(PROD_EUC1), &debug_policy(), &none());
    assert_rejected_by(&r, "nitro.chain");
}

// ------------------------------------------------------ payload schema

/// A document with the payload edited; only parsing is exercised, so the
/// (now wrong) signature does not matter.
fn parse_edited(edit: impl FnOnce(&mut Vec<(Cbor, Cbor)>)) -> Result<(), NitroError> {
    parse_nitro_document(&forge::edit_payload(&cose(PROD_EUC1), edit)).map(|_| ())
}

#[test]
fn payload_schema_is_enforced() {
    if samples_missing() {
        return;
    }
    use NitroError as E;
    assert_eq!(parse_edited(|_| {}), Ok(()));
    let err = |e: Result<(), NitroError>| e.unwrap_err();

    assert!(matches!(
        err(parse_edited(
            |m| m.push((Cbor::Text("extra".into()), Cbor::Null))
        )),
        E::UnknownKey { .. }
    ));
    assert!(matches!(
        err(parse_edited(
            |m| m.push((Cbor::Integer(1.into()), Cbor::Null))
        )),
        E::UnknownKey { .. }
    ));
    assert!(matches!(
        err(parse_edited(|m| {
            let dup = m[0].clone();
            m.push(dup)
        })),
        E::DuplicateKey { .. }
    ));
    for key in [
        "module_id",
        "digest",
        "timestamp",
        "pcrs",
        "certificate",
        "cabundle",
    ] {
        assert_eq!(
            err(parse_edited(|m| m.retain(|(k, _)| k.as_text() != Some(key)))),
            E::MissingKey { key },
        );
    }
    // Optional fields may be absent as well as null.
    for key in ["public_key", "user_data", "nonce"] {
        assert_eq!(
            parse_edited(|m| m.retain(|(k, _)| k.as_text() != Some(key))),
            Ok(())
        );
    }
    let field = |e: NitroError| match e {
        E::Field { field, .. } => field,
        other => panic!("not a field error: {other:?}"),
    };
    let cases: Vec<(&str, Cbor, &str)> = vec![
        ("module_id", Cbor::Text(String::new()), "module_id"),
        ("module_id", Cbor::Bytes(b"i-0".to_vec()), "module_id"),
        ("digest", Cbor::Text("SHA256".into()), "digest"),
        ("digest", Cbor::Text("sha384".into()), "digest"),
        ("timestamp", Cbor::Integer(0.into()), "timestamp"),
        ("timestamp", Cbor::Integer((-1).into()), "timestamp"),
        ("timestamp", Cbor::Float(1.7e12), "timestamp"),
        ("timestamp", Cbor::Integer(u64::MAX.into()), "timestamp"),
        ("pcrs", Cbor::Map(vec![]), "pcrs"),
        ("pcrs", Cbor::Array(vec![]), "pcrs"),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Integer(32.into()), Cbor::Bytes(vec![0; 48]))]),
            "pcrs",
        ),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Integer((-1).into()), Cbor::Bytes(vec![0; 48]))]),
            "pcrs",
        ),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Text("0".into()), Cbor::Bytes(vec![0; 48]))]),
            "pcrs",
        ),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Integer(0.into()), Cbor::Bytes(vec![0; 32]))]),
            "pcrs[0]",
        ),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Integer(0.into()), Cbor::Bytes(vec![0; 64]))]),
            "pcrs[0]",
        ),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Integer(5.into()), Cbor::Text("00".into()))]),
            "pcrs[5]",
        ),
        (
            "pcrs",
            Cbor::Map(vec![
                (Cbor::Integer(1.into()), Cbor::Bytes(vec![0; 48])),
                (Cbor::Integer(1.into()), Cbor::Bytes(vec![1; 48])),
            ]),
            "pcrs",
        ),
        ("certificate", Cbor::Bytes(vec![]), "certificate"),
        ("certificate", Cbor::Bytes(vec![0x30; 1025]), "certificate"),
        ("certificate", Cbor::Null, "certificate"),
        ("cabundle", Cbor::Array(vec![]), "cabundle"),
        ("cabundle", Cbor::Bytes(vec![1]), "cabundle"),
        (
            "cabundle",
            Cbor::Array(vec![Cbor::Bytes(vec![])]),
            "cabundle[0]",
        ),
        (
            "cabundle",
            Cbor::Array(vec![Cbor::Text("x".into())]),
            "cabundle[0]",
        ),
        (
            "cabundle",
            Cbor::Array(vec![Cbor::Bytes(vec![1]); 17]),
            "cabundle",
        ),
        ("public_key", Cbor::Bytes(vec![]), "public_key"),
        ("public_key", Cbor::Bytes(vec![1; 1025]), "public_key"),
        ("user_data", Cbor::Bytes(vec![1; 1025]), "user_data"),
        ("user_data", Cbor::Text("hello".into()), "user_data"),
        ("nonce", Cbor::Bytes(vec![1; 1025]), "nonce"),
        ("nonce", Cbor::Bool(false), "nonce"),
    ];
    for (key, value, want) in cases {
        let got = field(err(parse_edited(|m| forge::set(m, key, value.clone()))));
        assert_eq!(got, want, "{key} = {value:?}");
    }
    // The limits themselves are accepted.
    for (key, value) in [
        ("user_data", Cbor::Bytes(vec![7; 1024])),
        ("user_data", Cbor::Bytes(vec![])),
        ("nonce", Cbor::Bytes(vec![7; 1024])),
        ("public_key", Cbor::Bytes(vec![7; 1024])),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Integer(31.into()), Cbor::Bytes(vec![0; 48]))]),
        ),
    ] {
        assert_eq!(
            parse_edited(|m| forge::set(m, key, value.clone())),
            Ok(()),
            "{key}"
        );
    }
    // Payload that is not a map, or has trailing bytes.
    let doc = cose(PROD_EUC1);
    let not_map = forge::with_payload(&doc, forge::encode(&Cbor::Array(vec![])));
    assert!(matches!(
        parse_nitro_document(&not_map),
        Err(E::Payload { .. })
    ));
    let mut trailing = forge::encode(&Cbor::Map(forge::payload_map(&doc)));
    trailing.push(0);
    assert!(matches!(
        parse_nitro_document(&forge::with_payload(&doc, trailing)),
        Err(E::Payload { .. })
    ));
}

#[test]
fn envelope_rules() {
    if samples_missing() {
        return;
    }
    use coset::{CborSerializable as _, CoseSign1, HeaderBuilder, iana};
    let doc = cose(PROD_EUC1);
    let rebuild = |f: &dyn Fn(&mut CoseSign1)| {
        let mut s = CoseSign1::from_slice(&doc).unwrap();
        f(&mut s);
        s.to_vec().unwrap()
    };
    for alg in [
        iana::Algorithm::ES256,
        iana::Algorithm::ES512,
        iana::Algorithm::EdDSA,
    ] {
        let m = rebuild(&|s| {
            s.protected = coset::ProtectedHeader {
                original_data: None,
                header: HeaderBuilder::new().algorithm(alg).build(),
            }
        });
        assert!(
            matches!(parse_nitro_document(&m), Err(NitroError::Algorithm { .. })),
            "{alg:?}"
        );
    }
    let no_alg = rebuild(&|s| s.protected = coset::ProtectedHeader::default());
    assert!(matches!(
        parse_nitro_document(&no_alg),
        Err(NitroError::Algorithm { .. })
    ));
    // ES384 in the unprotected header only does not count.
    let unprotected = rebuild(&|s| {
        s.protected = coset::ProtectedHeader::default();
        s.unprotected = HeaderBuilder::new()
            .algorithm(iana::Algorithm::ES384)
            .build();
    });
    assert!(parse_nitro_document(&unprotected).is_err());
    let detached = rebuild(&|s| s.payload = None);
    assert!(matches!(
        parse_nitro_document(&detached),
        Err(NitroError::Cose { .. })
    ));
    let short_sig = rebuild(&|s| s.signature.truncate(95));
    assert!(matches!(
        parse_nitro_document(&short_sig),
        Err(NitroError::Cose { .. })
    ));
    let der_sig = rebuild(&|s| s.signature.push(0));
    assert!(matches!(
        parse_nitro_document(&der_sig),
        Err(NitroError::Cose { .. })
    ));
    let crit = rebuild(&|s| {
        s.protected.original_data = None;
        s.protected.header.crit = vec![coset::RegisteredLabelWithPrivate::Assigned(
            iana::HeaderParameter::Kid,
        )];
    });
    assert!(matches!(
        parse_nitro_document(&crit),
        Err(NitroError::Cose { .. })
    ));
    // Another tag than 18.
    let mut tag17 = vec![0xd1];
    tag17.extend_from_slice(&doc);
    assert!(parse_nitro_document(&tag17).is_err());
}
