//! AWS Nitro Enclaves attestation: the shared samples
//! (`attestation-samples/nitro/expected.json`, every case and every field),
//! validity windows, policy, binding, input forms, and negative tests made by
//! mutating the genuine documents and by forging chains with fixed-seed keys.
//!
//! The genuine samples come from [`kolm_testkit::samples`]; the committed
//! forgery lives in the repository's `attestation-samples/nitro/` (rewrite it
//! with `KOLM_WRITE_FORGERIES=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

mod nitro_forge;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ciborium::Value as Cbor;
use kolm_policy::{Platform, Policy};
use kolm_verifier::attested::{Attested, Expectations, Measurement, Outcome, Rejection, Tcb};
use kolm_verifier::check::{CheckId, CheckStatus, NitroCheck};
use kolm_verifier::nitro::{
    self, NitroError, NitroInputForm, certificate_spki_der, parse_cose_document,
    parse_nitro_document, verify, verify_any_form,
};
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

/// The genuine binary COSE_Sign1 documents.
const GENUINE: [&str; 5] = [PROD_EUC1, PROD_2022, PROD_2023, DEBUG_2022, DEBUG_2025];

type Verdict = Result<Attested, Rejection>;
/// Which [`NitroError`] a table case must give.
type Is = fn(&NitroError) -> bool;
/// A decoded payload map.
type PayloadMap = Vec<(Cbor, Cbor)>;
/// Input-form table row: case, input, its form, the sample it verifies as,
/// the COSE bytes in it.
type FormCase<'a> = (
    &'static str,
    Vec<u8>,
    NitroInputForm,
    &'static str,
    &'a [u8],
);

// ---------------------------------------------------------------- helpers

/// The shared Nitro samples and their `expected.json`.
struct Samples {
    dir: PathBuf,
    cases: Vec<Value>,
}

impl Samples {
    /// `None` (the test returns) when the samples are absent.
    fn find() -> Option<Samples> {
        let root = kolm_testkit::samples("nitro/expected.json")?;
        let dir = root.join("nitro");
        let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["platform"], "nitro");
        let cases = doc["cases"].as_array().unwrap().clone();
        Some(Samples { dir, cases })
    }

    fn sample(&self, name: &str) -> Vec<u8> {
        let path = self.dir.join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// A genuine document as raw COSE bytes (base64 decoded where needed).
    fn cose(&self, name: &str) -> Vec<u8> {
        let bytes = self.sample(name);
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

    fn case(&self, file: &str) -> &Value {
        self.cases
            .iter()
            .find(|c| c["file"] == file)
            .unwrap_or_else(|| panic!("{file} not in expected.json"))
    }

    /// A hex field of a case, decoded.
    fn field_bytes(&self, file: &str, name: &str) -> Vec<u8> {
        hex::decode(self.case(file)["fields"][name].as_str().unwrap()).unwrap()
    }

    fn verify_at(&self, file: &str) -> OffsetDateTime {
        instant(self.case(file)["verify_at"].as_str().unwrap())
    }
}

fn instant(s: &str) -> OffsetDateTime {
    OffsetDateTime::parse(s, &Rfc3339).unwrap()
}

fn debug_policy() -> Policy {
    let mut p = Policy::production();
    p.allow_debug = true;
    p
}

/// Raw evidence in any form, nothing expected but the policy.
fn run(input: &[u8], at: OffsetDateTime, policy: &Policy) -> Verdict {
    verify_any_form(input, &Expectations::new(policy), at)
}

/// The checks and fields, for assertion messages.
fn show(r: &Verdict) -> String {
    let o = Outcome::of(r);
    let mut out = format!("accepted: {}; reason: {:?}\n", o.accepted(), o.reason());
    for c in o.checks() {
        out.push_str(&format!("  {} {:?} {}\n", c.id, c.status, c.detail));
    }
    for (k, v) in o.fields().iter() {
        out.push_str(&format!("  {k} = {v}\n"));
    }
    out
}

#[track_caller]
fn status(r: &Verdict, id: NitroCheck) -> CheckStatus {
    Outcome::of(r)
        .status_of(id)
        .unwrap_or_else(|| panic!("no check {id} in\n{}", show(r)))
}

fn field<'a>(r: &'a Verdict, name: &str) -> &'a Value {
    Outcome::of(r)
        .fields()
        .get(name)
        .unwrap_or_else(|| panic!("no field {name} in\n{}", show(r)))
}

fn reason(r: &Verdict) -> &str {
    Outcome::of(r)
        .reason()
        .unwrap_or_else(|| panic!("accepted:\n{}", show(r)))
}

#[track_caller]
fn first_failure(r: &Verdict) -> CheckId {
    Outcome::of(r)
        .checks()
        .first_failure()
        .unwrap_or_else(|| panic!("no failure in\n{}", show(r)))
        .id
}

#[track_caller]
fn assert_accepted(r: &Verdict) {
    assert!(r.is_ok(), "{}", show(r));
}

#[track_caller]
fn assert_rejected_by(r: &Verdict, id: NitroCheck) {
    let Err(rejection) = r else {
        panic!("accepted, expected {id} to fail:\n{}", show(r))
    };
    assert_eq!(first_failure(r), CheckId::from(id), "{}", show(r));
    assert!(rejection.reason.starts_with(&format!("{id}: ")));
}

fn is_prod(c: &Value) -> bool {
    c["expected"] == "accept"
}

fn is_binary(file: &str) -> bool {
    file.ends_with(".cose")
}

// ---------------------------------------------------- expected.json cases

#[test]
fn every_expected_case_and_field() {
    let Some(s) = Samples::find() else { return };
    assert_eq!(s.cases.len(), 7, "expected.json lists seven Nitro cases");
    for c in &s.cases {
        let file = c["file"].as_str().unwrap();
        let input = s.sample(file);
        assert_eq!(
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&input)),
            c["file_sha256"],
            "{file}: fixture bytes changed"
        );
        let at = instant(c["verify_at"].as_str().unwrap());
        let production = run(&input, at, &Policy::production());
        let o = Outcome::of(&production);
        for (name, want) in c["fields"].as_object().unwrap() {
            assert_eq!(
                o.fields().get(name),
                Some(want),
                "{file}: field {name}\n{}",
                show(&production)
            );
        }
        assert_eq!(*field(&production, "format"), c["format"], "{file}");
        assert_eq!(o.kind().as_str(), "nitro");
        assert_eq!(o.verified_at(), at);
        assert_eq!(o.checks().len(), NitroCheck::ALL.len());

        for id in [
            NitroCheck::Format,
            NitroCheck::Chain,
            NitroCheck::Signature,
            NitroCheck::Freshness,
        ] {
            assert_eq!(status(&production, id), CheckStatus::Pass, "{file}: {id}");
        }
        let permissive = run(&input, at, &debug_policy());
        if is_prod(c) {
            assert_accepted(&production);
            assert_eq!(status(&production, NitroCheck::Debug), CheckStatus::Pass);
        } else {
            assert!(
                c["expected"]
                    .as_str()
                    .unwrap()
                    .starts_with("accept-signature; reject-under-production-policy")
            );
            assert_rejected_by(&production, NitroCheck::Debug);
            assert_accepted(&permissive);
            assert_eq!(Outcome::of(&permissive).fields(), o.fields());
        }

        // The typed claims.
        let claims = &permissive.as_ref().unwrap().claims;
        assert_eq!(claims.platform, Platform::Nitro);
        let pcr0 = pcr48(c["fields"]["pcrs"]["0"].as_str().unwrap());
        assert_eq!(claims.measurement, Measurement::NitroPcr0(pcr0));
        assert_eq!(
            hex::encode(&claims.report_data),
            c["fields"]["user_data"].as_str().unwrap_or("")
        );
        assert_eq!(claims.tcb, Tcb::Nitro);
        assert_eq!(claims.debug, !is_prod(c));

        // The artifact path takes the binary form only; on it the verdict is
        // the same as on the raw-evidence path.
        let strict = verify(&input, &Expectations::new(&debug_policy()), at);
        if is_binary(file) {
            assert_eq!(
                Outcome::of(&strict).checks(),
                Outcome::of(&permissive).checks()
            );
            assert_eq!(
                Outcome::of(&strict).fields(),
                Outcome::of(&permissive).fields()
            );
        } else {
            assert_rejected_by(&strict, NitroCheck::Format);
            assert!(reason(&strict).contains("not a binary COSE_Sign1"));
        }
    }
}

#[test]
fn parse_only_api_agrees_with_the_samples() {
    let Some(s) = Samples::find() else { return };
    for c in &s.cases {
        let file = c["file"].as_str().unwrap();
        let doc = parse_nitro_document(&s.sample(file)).unwrap();
        let f = &c["fields"];
        assert_eq!(doc.module_id(), f["module_id"], "{file}");
        assert_eq!(doc.timestamp_ms(), f["timestamp_ms"].as_u64().unwrap());
        assert_eq!(
            doc.timestamp(),
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(doc.timestamp_ms()) * 1_000_000)
                .unwrap()
        );
        assert_eq!(doc.input_form().as_str(), c["format"]);
        assert_eq!(doc.cabundle().len(), 4);
        assert_eq!(doc.pcrs().len(), 16);
        assert_eq!(hex::encode(doc.doc_sha256()), f["doc_sha256"]);
        let hex_field = |name: &str| f[name].as_str().map(str::to_owned);
        assert_eq!(doc.user_data().map(hex::encode), hex_field("user_data"));
        assert_eq!(doc.nonce().map(hex::encode), hex_field("nonce"));
        assert_eq!(doc.public_key().map(hex::encode), hex_field("public_key"));
        assert_eq!(
            doc.is_debug(),
            f["debug_mode_all_zero_pcr012"].as_bool().unwrap()
        );
        assert_eq!(
            doc.input_form().is_tls_certificate(),
            file.ends_with(".der")
        );
        assert_eq!(doc.tls_spki().is_some(), file.ends_with(".der"));
        // The strict parser takes the binary samples only, and agrees.
        match parse_cose_document(&s.sample(file)) {
            Ok(strict) => {
                assert!(is_binary(file));
                assert_eq!(strict, doc);
            }
            Err(e) => {
                assert!(!is_binary(file));
                assert!(matches!(e, NitroError::NotBinaryCose { .. }), "{e}");
            }
        }
    }
}

// ------------------------------------------------------------ freshness

#[test]
fn each_document_is_rejected_one_second_outside_its_window() {
    let Some(s) = Samples::find() else { return };
    let policy = debug_policy();
    for c in &s.cases {
        let file = c["file"].as_str().unwrap();
        let input = s.sample(file);
        let window = c["fields"]["window"].as_array().unwrap();
        let start = instant(window[0].as_str().unwrap());
        let end = instant(window[1].as_str().unwrap());
        for at in [start, end] {
            assert_accepted(&run(&input, at, &policy));
        }
        for at in [start - time::Duration::SECOND, end + time::Duration::SECOND] {
            let r = run(&input, at, &policy);
            assert_rejected_by(&r, NitroCheck::Freshness);
            assert_eq!(status(&r, NitroCheck::Chain), CheckStatus::Pass);
            assert_eq!(status(&r, NitroCheck::Signature), CheckStatus::Pass);
        }
        // Sub-second precision counts: 1 ms past notAfter is too late.
        let r = run(&input, end + time::Duration::MILLISECOND, &policy);
        assert_rejected_by(&r, NitroCheck::Freshness);
        // At the document's own timestamp (what the artifact check uses).
        let own = parse_nitro_document(&input).unwrap().timestamp();
        assert_accepted(&run(&input, own, &policy));
    }
}

#[test]
fn validity_is_evaluated_at_the_given_instant_not_the_clock() {
    let Some(s) = Samples::find() else { return };
    // Years after every leaf expired: rejected; at verify_at: accepted.
    let input = s.sample(PROD_EUC1);
    let r = run(
        &input,
        instant("2026-11-25T00:00:00Z"),
        &Policy::production(),
    );
    assert_rejected_by(&r, NitroCheck::Freshness);
    assert!(reason(&r).contains("not valid at 2026-11-25T00:00:00Z"));
    assert_accepted(&run(&input, s.verify_at(PROD_EUC1), &Policy::production()));
}

// ------------------------------------------------------------ policy

#[test]
fn debug_mode_against_the_policy() {
    let Some(s) = Samples::find() else { return };
    // (file, a debug document)
    let table = [
        (DEBUG_2022, true),
        (DEBUG_B64, true),
        (DEBUG_2025, true),
        (PROD_EUC1, false),
        (PROD_2022, false),
        (PROD_2023, false),
        (PROD_TLS, false),
    ];
    for (file, debug) in table {
        let input = s.sample(file);
        let at = s.verify_at(file);
        let r = run(&input, at, &Policy::production());
        assert_eq!(*field(&r, "debug_mode_all_zero_pcr012"), debug, "{file}");
        if debug {
            assert_rejected_by(&r, NitroCheck::Debug);
            assert!(reason(&r).contains("PCR0, PCR1 and PCR2 are all zero"));
        } else {
            assert_accepted(&r);
        }
        let permissive = run(&input, at, &debug_policy());
        assert_accepted(&permissive);
        assert_eq!(permissive.unwrap().claims.debug, debug, "{file}");
    }
}

fn pcr48(hex_str: &str) -> [u8; 48] {
    hex::decode(hex_str).unwrap().try_into().unwrap()
}

/// What a table case expects.
enum Want {
    /// Accepted, with these checks passed.
    Accept(&'static [NitroCheck]),
    /// Rejected by this check, the reason containing the text.
    Reject(NitroCheck, &'static str),
}

#[track_caller]
fn assert_want(r: &Verdict, want: &Want, case: &str) {
    match *want {
        Want::Accept(passed) => {
            assert!(r.is_ok(), "{case}:\n{}", show(r));
            for &id in passed {
                assert_eq!(status(r, id), CheckStatus::Pass, "{case}: {id}");
            }
        }
        Want::Reject(id, text) => {
            assert_eq!(first_failure(r), CheckId::from(id), "{case}:\n{}", show(r));
            assert!(reason(r).contains(text), "{case}: {}", reason(r));
        }
    }
}

#[test]
fn policy_platform_and_pcr_allow_lists() {
    let Some(s) = Samples::find() else { return };
    let input = s.sample(PROD_EUC1);
    let at = s.verify_at(PROD_EUC1);
    let pcr = |file: &str, i: u8| {
        pcr48(
            s.case(file)["fields"]["pcrs"][i.to_string()]
                .as_str()
                .unwrap(),
        )
    };
    let mut genuine = Policy::production();
    for i in [0u8, 1, 2, 8] {
        genuine
            .nitro
            .pcrs
            .insert(i, BTreeSet::from([pcr(PROD_EUC1, i)]));
    }
    // A second allowed value (a rollout) still passes.
    let mut rollout = genuine.clone();
    rollout.nitro.pcrs.get_mut(&0).unwrap().insert([0xab; 48]);
    // PCR0 of another image.
    let mut other = rollout.clone();
    other
        .nitro
        .pcrs
        .insert(0, BTreeSet::from([pcr(PROD_2022, 0)]));
    // A PCR the document does not carry.
    let mut absent = rollout.clone();
    absent.nitro.pcrs.insert(20, BTreeSet::from([[0u8; 48]]));
    let mut sev_only = Policy::production();
    sev_only.allowed_platforms = BTreeSet::from([Platform::SevSnp]);

    let table = [
        (
            "genuine PCRs",
            genuine,
            Want::Accept(&[NitroCheck::PolicyPcr]),
        ),
        ("rollout", rollout, Want::Accept(&[NitroCheck::PolicyPcr])),
        (
            "another image",
            other,
            Want::Reject(NitroCheck::PolicyPcr, "PCR0 = 8bb159f2"),
        ),
        (
            "absent PCR",
            absent,
            Want::Reject(NitroCheck::PolicyPcr, "PCR20"),
        ),
        (
            "platform not allowed",
            sev_only,
            Want::Reject(NitroCheck::PolicyPlatform, ""),
        ),
    ];
    for (case, policy, want) in &table {
        assert_want(&run(&input, at, policy), want, case);
    }
    // No allow-list: the check is skipped, not passed.
    let r = run(&input, at, &Policy::production());
    assert_eq!(status(&r, NitroCheck::PolicyPcr), CheckStatus::Skip);
}

// ------------------------------------------------------------ binding

#[test]
fn report_data_nonce_and_public_key_expectations() {
    let Some(s) = Samples::find() else { return };
    let nonce = s.field_bytes(PROD_2022, "nonce");
    let mut wrong_nonce = nonce.clone();
    wrong_nonce[0] ^= 1;
    let user_data_2022 = s.field_bytes(DEBUG_2022, "user_data");
    assert_eq!(user_data_2022, b"hello, world!");
    let public_key_2022 = s.field_bytes(DEBUG_2022, "public_key");
    let mut other_report_data = [0u8; 64];
    other_report_data[63] = 1;
    // The base64 document's user_data is the key of a separate certificate.
    let spki = certificate_spki_der(&s.sample(TLS_CERT_2023_09)).unwrap();
    assert_eq!(spki, s.field_bytes(DEBUG_B64, "user_data"));
    let other_spki = certificate_spki_der(&s.sample(PROD_TLS)).unwrap();

    type Bytes = Option<Vec<u8>>;
    // (case, file, report_data, nonce, public_key, want)
    let table: Vec<(&str, &str, Bytes, Bytes, Bytes, Want)> = vec![
        (
            "nonce",
            PROD_2022,
            None,
            Some(nonce.clone()),
            None,
            Want::Accept(&[NitroCheck::BindingNonce]),
        ),
        (
            "wrong nonce",
            PROD_2022,
            None,
            Some(wrong_nonce),
            None,
            Want::Reject(NitroCheck::BindingNonce, "differs"),
        ),
        (
            "absent user_data",
            PROD_2022,
            Some(vec![0; 64]),
            None,
            None,
            Want::Reject(NitroCheck::BindingUserData, "absent"),
        ),
        (
            "absent public_key",
            PROD_2022,
            None,
            None,
            Some(vec![1]),
            Want::Reject(NitroCheck::BindingPublicKey, "absent"),
        ),
        (
            "user_data and public_key",
            DEBUG_2022,
            Some(user_data_2022.clone()),
            None,
            Some(public_key_2022),
            Want::Accept(&[NitroCheck::BindingUserData, NitroCheck::BindingPublicKey]),
        ),
        (
            "wrong public_key",
            DEBUG_2022,
            Some(user_data_2022),
            None,
            Some(b"my super secret keY".to_vec()),
            Want::Reject(NitroCheck::BindingPublicKey, "differs"),
        ),
        // The 2025 debug document carries 64 zero bytes of user_data, the
        // size of a kolm report_data.
        (
            "kolm report data",
            DEBUG_2025,
            Some(vec![0; 64]),
            None,
            None,
            Want::Accept(&[NitroCheck::BindingUserData]),
        ),
        (
            "other kolm report data",
            DEBUG_2025,
            Some(other_report_data.to_vec()),
            None,
            None,
            Want::Reject(NitroCheck::BindingUserData, "differs"),
        ),
        (
            "separate TLS certificate's key",
            DEBUG_B64,
            Some(spki),
            None,
            None,
            Want::Accept(&[NitroCheck::BindingUserData]),
        ),
        (
            "another certificate's key",
            DEBUG_B64,
            Some(other_spki),
            None,
            None,
            Want::Reject(NitroCheck::BindingUserData, "differs"),
        ),
    ];
    let policy = debug_policy();
    for (case, file, report_data, nonce, public_key, want) in table {
        let expect = Expectations {
            policy: &policy,
            report_data,
            nonce,
            public_key,
        };
        let r = verify_any_form(&s.sample(file), &expect, s.verify_at(file));
        assert_want(&r, &want, case);
        // What is not expected is skipped, not passed.
        for (id, set) in [
            (NitroCheck::BindingUserData, expect.report_data.is_some()),
            (NitroCheck::BindingNonce, expect.nonce.is_some()),
            (NitroCheck::BindingPublicKey, expect.public_key.is_some()),
        ] {
            if !set {
                assert_eq!(status(&r, id), CheckStatus::Skip, "{case}: {id}");
            }
        }
        // Not from a certificate: no TLS binding to check.
        assert_eq!(status(&r, NitroCheck::BindingTlsSpki), CheckStatus::Skip);
        if let Ok(a) = &r {
            assert_eq!(
                a.claims.report_data,
                parse_nitro_document(&s.sample(file))
                    .unwrap()
                    .user_data()
                    .unwrap_or_default()
            );
        }
    }
}

#[test]
fn tls_certificate_form_checks_user_data_against_its_own_key() {
    let Some(s) = Samples::find() else { return };
    let der = s.sample(PROD_TLS);
    let at = s.verify_at(PROD_TLS);
    let p = Policy::production();
    let r = run(&der, at, &p);
    assert_accepted(&r);
    assert_eq!(status(&r, NitroCheck::BindingTlsSpki), CheckStatus::Pass);
    // The same document, extracted, is the committed .cose sample.
    let doc = parse_nitro_document(&der).unwrap();
    assert_eq!(doc.cose_bytes(), s.sample(PROD_2023).as_slice());
    assert_eq!(doc.tls_spki().unwrap(), certificate_spki_der(&der).unwrap());

    // PEM of the same certificate.
    let pem = der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, &der).unwrap();
    let r = run(pem.as_bytes(), at, &p);
    assert_accepted(&r);
    assert_eq!(*field(&r, "format"), "tls-cert-pem");

    // The same certificate with another SubjectPublicKeyInfo (its own
    // signature is not the verifier's business; the binding is).
    use der::{Decode as _, Encode as _};
    let mut cert = x509_cert::Certificate::from_der(&der).unwrap();
    let other = x509_cert::Certificate::from_der(&s.sample(TLS_CERT_2023_09)).unwrap();
    cert.tbs_certificate.subject_public_key_info =
        other.tbs_certificate.subject_public_key_info.clone();
    let swapped = cert.to_der().unwrap();
    let r = run(&swapped, at, &p);
    assert_rejected_by(&r, NitroCheck::BindingTlsSpki);
    assert_eq!(status(&r, NitroCheck::Signature), CheckStatus::Pass);
}

// ------------------------------------------------------------ input forms

/// Joins the chunks of `text` of `width` characters with `sep`.
fn wrap(text: &str, width: usize, sep: &str) -> String {
    text.as_bytes()
        .chunks(width)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(sep)
}

#[test]
fn input_forms_are_detected_and_only_binary_is_an_artifact_document() {
    let Some(s) = Samples::find() else { return };
    use NitroInputForm as F;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let raw = s.cose(PROD_EUC1);
    let mut tagged = vec![0xd2];
    tagged.extend_from_slice(&raw);
    let b64 = STANDARD.encode(&raw);
    // Base64 of a tagged document starts with `0` (0x30), like DER.
    let b64_tagged = STANDARD.encode(&tagged);
    assert!(b64_tagged.starts_with('0'));
    let b64_tagged = b64_tagged.into_bytes();
    let url = URL_SAFE_NO_PAD.encode(&raw);
    assert!(url.contains(['-', '_']));
    let unpadded = b64.trim_end_matches('=');
    assert_ne!(unpadded, b64);
    let hex_text = hex::encode(&raw);
    let der = s.sample(PROD_TLS);
    let pem = der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, &der).unwrap();

    let raw_2023 = s.sample(PROD_2023);
    let table: Vec<FormCase<'_>> = vec![
        (
            "untagged",
            raw.clone(),
            F::CoseSign1Untagged,
            PROD_EUC1,
            &raw,
        ),
        (
            "tagged",
            tagged.clone(),
            F::CoseSign1Tagged,
            PROD_EUC1,
            &tagged,
        ),
        (
            // Wrapped at 76 columns with CRLF, leading and trailing whitespace.
            "base64 wrapped",
            format!("  \n{}\n\t", wrap(&b64, 76, "\r\n")).into_bytes(),
            F::CoseSign1Base64,
            PROD_EUC1,
            &raw,
        ),
        (
            "base64 tagged",
            b64_tagged,
            F::CoseSign1Base64,
            PROD_EUC1,
            &tagged,
        ),
        (
            "base64 url-safe",
            url.into_bytes(),
            F::CoseSign1Base64,
            PROD_EUC1,
            &raw,
        ),
        (
            "base64 unpadded",
            unpadded.as_bytes().to_vec(),
            F::CoseSign1Base64,
            PROD_EUC1,
            &raw,
        ),
        (
            "hex",
            hex_text.clone().into_bytes(),
            F::CoseSign1Hex,
            PROD_EUC1,
            &raw,
        ),
        (
            "hex upper-case wrapped",
            wrap(&hex_text.to_uppercase(), 64, "\n").into_bytes(),
            F::CoseSign1Hex,
            PROD_EUC1,
            &raw,
        ),
        (
            "TLS certificate DER",
            der,
            F::TlsCertificateDer,
            PROD_TLS,
            &raw_2023,
        ),
        (
            "TLS certificate PEM",
            pem.into_bytes(),
            F::TlsCertificatePem,
            PROD_TLS,
            &raw_2023,
        ),
    ];
    let p = Policy::production();
    for (case, input, form, file, cose) in &table {
        let at = s.verify_at(file);
        assert_eq!(
            parse_nitro_document(input).map(|d| d.input_form()),
            Ok(*form),
            "{case}"
        );
        let r = run(input, at, &p);
        assert_accepted(&r);
        assert_eq!(*field(&r, "format"), form.as_str(), "{case}");
        assert_eq!(parse_nitro_document(input).unwrap().cose_bytes(), *cose);
        assert_eq!(
            *field(&r, "doc_sha256"),
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(cose)),
            "{case}"
        );
        // The artifact path (receipt v1 section 6) takes binary COSE_Sign1
        // only, and says so rather than decoding.
        let binary = matches!(form, F::CoseSign1Untagged | F::CoseSign1Tagged);
        let strict = verify(input, &Expectations::new(&p), at);
        assert_eq!(strict.is_ok(), binary, "{case}:\n{}", show(&strict));
        assert_eq!(parse_cose_document(input).is_ok(), binary, "{case}");
        if !binary {
            assert_rejected_by(&strict, NitroCheck::Format);
            assert!(matches!(
                parse_cose_document(input),
                Err(NitroError::NotBinaryCose { .. })
            ));
            assert_eq!(
                status(&strict, NitroCheck::Chain),
                CheckStatus::Skip,
                "{case}"
            );
        }
    }
    // A mix of both base64 alphabets is not base64.
    let mixed = format!("{}-", &b64[..b64.len() - 4]);
    assert!(matches!(
        parse_nitro_document(mixed.as_bytes()),
        Err(NitroError::Base64 { .. })
    ));
    // Odd-length hex is not a document.
    assert!(parse_nitro_document(&hex_text.as_bytes()[1..]).is_err());
}

#[test]
fn unrecognised_and_malformed_inputs() {
    let Some(s) = Samples::find() else { return };
    let p = Policy::production();
    let at = s.verify_at(PROD_EUC1);
    let any: Is = |_| true;
    let base64_err: Is = |e| matches!(e, NitroError::Base64 { .. });
    let tls_err: Is = |e| matches!(e, NitroError::TlsCertificate { .. });
    let too_large: Is = |e| matches!(e, NitroError::TooLarge { .. });
    // (input, what the any-form parser says)
    let table: Vec<(Vec<u8>, Is)> = vec![
        (b"".to_vec(), any),
        (b"   \n".to_vec(), any),
        (b"\x00\x01\x02".to_vec(), any),
        (b"{\"not\":\"a document\"}".to_vec(), any),
        (b"hEShATgi!".to_vec(), any),
        // base64 of the first six bytes only
        (b"hESh ATgi".to_vec(), any),
        // Base64 of something that is not COSE.
        (
            STANDARD_B64.encode(b"\x30\x03\x02\x01\x00").into_bytes(),
            base64_err,
        ),
        // A certificate carrying no document (the 2023-09 TLS certificate).
        (s.sample(TLS_CERT_2023_09), tls_err),
        // Over the size cap.
        (vec![0x84; nitro::MAX_INPUT_BYTES + 1], too_large),
        // A PEM block that is not a certificate.
        (
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
            tls_err,
        ),
    ];
    for (input, is) in &table {
        let what = String::from_utf8_lossy(&input[..input.len().min(40)]).into_owned();
        let e = parse_nitro_document(input).unwrap_err();
        assert!(is(&e), "{what:?}: {e:?}");
        assert_rejected_by(&run(input, at, &p), NitroCheck::Format);
        assert!(parse_cose_document(input).is_err(), "{what:?}");
        let strict = verify(input, &Expectations::new(&p), at);
        assert_rejected_by(&strict, NitroCheck::Format);
        // Nothing after the format check ran.
        assert_eq!(Outcome::of(&strict).checks().len(), NitroCheck::ALL.len());
        assert!(
            Outcome::of(&strict)
                .checks()
                .iter()
                .skip(1)
                .all(|c| c.status == CheckStatus::Skip)
        );
    }
    // The strict parser caps binary input the same way.
    assert!(matches!(
        parse_cose_document(&vec![0x84; nitro::MAX_INPUT_BYTES + 1]),
        Err(NitroError::TooLarge { .. })
    ));
}

const STANDARD_B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

// -------------------------------------------------------------- mutations

/// Verifies a mutated binary document at its original instant under the
/// permissive policy, on the artifact path: anything but a rejection is a
/// failure. Returns the first failing check.
#[track_caller]
fn assert_mutation_rejected(s: &Samples, file: &str, bytes: &[u8], what: &str) -> CheckId {
    let r = verify(
        bytes,
        &Expectations::new(&debug_policy()),
        s.verify_at(file),
    );
    assert!(r.is_err(), "{file}: {what} was accepted\n{}", show(&r));
    first_failure(&r)
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
    let Some(s) = Samples::find() else { return };
    for file in GENUINE {
        let doc = s.cose(file);
        let (protected, signature) = envelope_offsets(&doc);
        for i in protected.chain(signature) {
            for mask in [0x01u8, 0xff] {
                let mut m = doc.clone();
                m[i] ^= mask;
                let id = assert_mutation_rejected(&s, file, &m, &format!("byte {i} ^ {mask:#04x}"));
                assert!(
                    [NitroCheck::Format, NitroCheck::Signature]
                        .map(CheckId::from)
                        .contains(&id),
                    "{file}: byte {i} ^ {mask:#04x} failed {id}"
                );
            }
        }
    }
}

/// Flips every 7th payload byte with two masks; every flip must be rejected
/// by parsing, the chain or the signature, and most by the signature.
fn payload_mutations_are_rejected(file: &str) {
    let Some(s) = Samples::find() else { return };
    let doc = s.cose(file);
    let (_, signature) = envelope_offsets(&doc);
    let mut seen = BTreeMap::<CheckId, usize>::new();
    for i in (6..signature.start).step_by(7) {
        for mask in [0x01u8, 0x80] {
            let mut m = doc.clone();
            m[i] ^= mask;
            let id = assert_mutation_rejected(&s, file, &m, &format!("byte {i} ^ {mask:#04x}"));
            *seen.entry(id).or_default() += 1;
        }
    }
    assert!(
        seen.get(&NitroCheck::Signature.into())
            .copied()
            .unwrap_or(0)
            > 100,
        "{seen:?}"
    );
    let allowed = [NitroCheck::Format, NitroCheck::Chain, NitroCheck::Signature].map(CheckId::from);
    assert!(seen.keys().all(|k| allowed.contains(k)), "{seen:?}");
}

#[test]
fn payload_mutations_are_rejected_prod() {
    payload_mutations_are_rejected(PROD_EUC1);
}

#[test]
fn payload_mutations_are_rejected_indefinite_length_map() {
    payload_mutations_are_rejected(DEBUG_2025);
}

#[test]
fn truncations_and_trailing_bytes_are_rejected() {
    let Some(s) = Samples::find() else { return };
    let dbg = debug_policy();
    for file in GENUINE {
        let doc = s.cose(file);
        let at = s.verify_at(file);
        for len in 0..doc.len() {
            let r = verify(&doc[..len], &Expectations::new(&dbg), at);
            assert_rejected_by(&r, NitroCheck::Format);
        }
        for extra in [&[0x00][..], &[0xf6], &[0x84], &doc[..6]] {
            let mut m = doc.clone();
            m.extend_from_slice(extra);
            let r = verify(&m, &Expectations::new(&dbg), at);
            assert_rejected_by(&r, NitroCheck::Format);
            assert!(matches!(
                parse_nitro_document(&m),
                Err(NitroError::Cose { .. })
            ));
        }
    }
    // The other forms: a trailing byte after the certificate or base64
    // characters that change the decoded bytes.
    let mut der = s.sample(PROD_TLS);
    der.push(0);
    assert_rejected_by(
        &run(&der, s.verify_at(PROD_TLS), &Policy::production()),
        NitroCheck::Format,
    );
    let tls = s.sample(PROD_TLS);
    for len in (0..tls.len()).step_by(97) {
        assert!(parse_nitro_document(&tls[..len]).is_err());
    }
    let mut b64 = s.sample(DEBUG_B64);
    let end = b64.iter().rposition(|b| !b.is_ascii_whitespace()).unwrap();
    b64.truncate(end + 1);
    b64.extend_from_slice(b"AAAA");
    assert_rejected_by(&run(&b64, s.verify_at(DEBUG_B64), &dbg), NitroCheck::Format);
}

#[test]
fn cabundle_edits_break_the_chain() {
    let Some(s) = Samples::find() else { return };
    let dbg = debug_policy();
    for file in GENUINE {
        let doc = s.cose(file);
        let at = s.verify_at(file);
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
        // (edited bundle, root still first)
        let mut edits = Vec::new();
        // Each certificate removed in turn.
        for i in 0..cabundle.len() {
            let mut b = cabundle.clone();
            b.remove(i);
            edits.push((b, i != 0));
        }
        // Neighbours swapped, and the whole bundle reversed.
        for i in 0..cabundle.len() - 1 {
            let mut b = cabundle.clone();
            b.swap(i, i + 1);
            edits.push((b, i != 0));
        }
        let mut reversed = cabundle.clone();
        reversed.reverse();
        edits.push((reversed, false));
        for (bundle, root_first) in edits {
            let len = bundle.len();
            let r = verify(&with_bundle(bundle), &Expectations::new(&dbg), at);
            assert_rejected_by(&r, NitroCheck::Chain);
            assert_eq!(*field(&r, "cabundle_len"), len);
            assert_eq!(*field(&r, "root_is_aws_g1"), root_first, "{file}");
        }
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
    let Some(s) = Samples::find() else { return };
    let (_, other_leaf) = forge::chain_of(&s.cose(PROD_2022));
    for file in [PROD_2023, DEBUG_2022] {
        let doc = s.cose(file);
        let m = forge::edit_payload(&doc, |map| {
            forge::set(map, "certificate", Cbor::Bytes(other_leaf.clone()))
        });
        let policy = debug_policy();
        let expect = Expectations::new(&policy).with_report_data(vec![0; 64]);
        let r = verify(&m, &expect, s.verify_at(file));
        assert!(r.is_err());
        assert_eq!(status(&r, NitroCheck::Signature), CheckStatus::Fail);
        assert_eq!(status(&r, NitroCheck::Chain), CheckStatus::Fail);
        assert_eq!(*field(&r, "cose_sig_ok"), false);
        // Policy and binding are not evaluated on an unauthenticated document.
        for id in [NitroCheck::Debug, NitroCheck::BindingUserData] {
            assert_eq!(status(&r, id), CheckStatus::Skip, "{file}: {id}");
            let detail = &Outcome::of(&r).checks().get(id).unwrap().detail;
            assert_eq!(detail, "not evaluated: the document is not authenticated");
        }
    }
}

// -------------------------------------------------------------- forgeries

#[test]
fn forgery_under_a_fake_root_with_the_aws_subject_fails_the_chain() {
    let Some(s) = Samples::find() else { return };
    let forged = forge::forge_fake_root(&s.cose(PROD_EUC1));
    let at = s.verify_at(PROD_EUC1);
    let r = verify(&forged, &Expectations::new(&Policy::production()), at);
    assert_rejected_by(&r, NitroCheck::Chain);
    assert!(reason(&r).contains("not the pinned AWS Nitro Enclaves Root G1"));
    // Everything the forger controls is consistent: its own signatures verify
    // and the subject is copied from the real root.
    assert_eq!(*field(&r, "root_is_aws_g1"), false);
    assert_eq!(*field(&r, "chain_sig_ok"), true);
    assert_eq!(*field(&r, "cose_sig_ok"), true);
    assert_eq!(status(&r, NitroCheck::Signature), CheckStatus::Pass);
    assert_eq!(status(&r, NitroCheck::Freshness), CheckStatus::Pass);
    assert_eq!(
        *field(&r, "leaf_subject"),
        s.case(PROD_EUC1)["fields"]["leaf_subject"]
    );
    use der::Decode as _;
    let doc = parse_cose_document(&forged).unwrap();
    let fake_root = x509_cert::Certificate::from_der(&doc.cabundle()[0]).unwrap();
    let real_root = x509_cert::Certificate::from_der(nitro::AWS_NITRO_ROOT_G1_DER).unwrap();
    assert_eq!(
        fake_root.tbs_certificate.subject,
        real_root.tbs_certificate.subject
    );
    // Not even a permissive policy accepts it.
    let r = verify(&forged, &Expectations::new(&debug_policy()), at);
    assert_rejected_by(&r, NitroCheck::Chain);
}

#[test]
fn forgery_under_the_real_root_with_a_fake_intermediate_fails_the_signature() {
    let Some(s) = Samples::find() else { return };
    let forged = forge::forge_fake_intermediate(&s.cose(PROD_EUC1));
    let r = verify(
        &forged,
        &Expectations::new(&debug_policy()),
        s.verify_at(PROD_EUC1),
    );
    assert_rejected_by(&r, NitroCheck::Chain);
    assert_eq!(*field(&r, "root_is_aws_g1"), true);
    assert_eq!(*field(&r, "chain_sig_ok"), false);
    assert_eq!(*field(&r, "cose_sig_ok"), true);
    assert!(
        reason(&r).contains("cabundle[1]: signature by cabundle[0] does not verify"),
        "{}",
        show(&r)
    );
}

#[test]
fn committed_forgery_is_reproducible_and_rejected() {
    let Some(s) = Samples::find() else { return };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../attestation-samples/nitro")
        .join(FORGED_FAKE_ROOT);
    let generated = forge::forge_fake_root(&s.cose(PROD_EUC1));
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
    let r = verify(
        &committed,
        &Expectations::new(&debug_policy()),
        s.verify_at(PROD_EUC1),
    );
    assert_rejected_by(&r, NitroCheck::Chain);
}

// ------------------------------------------------------ payload schema

#[test]
fn payload_schema_is_enforced() {
    let Some(s) = Samples::find() else { return };
    use NitroError as E;
    let doc = s.cose(PROD_EUC1);
    // A document with the payload edited; only parsing is exercised, so the
    // (now wrong) signature does not matter.
    let parse_edited = |edit: &dyn Fn(&mut PayloadMap)| {
        parse_cose_document(&forge::edit_payload(&doc, edit)).map(|_| ())
    };
    assert_eq!(parse_edited(&|_| {}), Ok(()));

    // Keys: (edit, the error it must give)
    type Edit = Box<dyn Fn(&mut PayloadMap)>;
    let mut key_cases: Vec<(&str, Edit, Is)> = vec![
        (
            "text key outside the schema",
            Box::new(|m| m.push((Cbor::Text("extra".into()), Cbor::Null))),
            |e| matches!(e, E::UnknownKey { .. }),
        ),
        (
            "integer key",
            Box::new(|m| m.push((Cbor::Integer(1.into()), Cbor::Null))),
            |e| matches!(e, E::UnknownKey { .. }),
        ),
        (
            "duplicate key",
            Box::new(|m| {
                let dup = m[0].clone();
                m.push(dup)
            }),
            |e| matches!(e, E::DuplicateKey { .. }),
        ),
    ];
    for key in [
        "module_id",
        "digest",
        "timestamp",
        "pcrs",
        "certificate",
        "cabundle",
    ] {
        key_cases.push((
            key,
            Box::new(move |m| m.retain(|(k, _)| k.as_text() != Some(key))),
            |e| matches!(e, E::MissingKey { .. }),
        ));
    }
    for (case, edit, is) in &key_cases {
        let e = parse_edited(edit.as_ref()).unwrap_err();
        assert!(is(&e), "{case}: {e:?}");
        if let E::MissingKey { key } = e {
            assert_eq!(key, *case);
        }
    }
    // Optional fields may be absent as well as null.
    for key in ["public_key", "user_data", "nonce"] {
        assert_eq!(
            parse_edited(&|m| m.retain(|(k, _)| k.as_text() != Some(key))),
            Ok(()),
            "{key}"
        );
    }

    let pcrs = |entries: Vec<(i64, Cbor)>| {
        Cbor::Map(
            entries
                .into_iter()
                .map(|(i, v)| (Cbor::Integer(i.into()), v))
                .collect(),
        )
    };
    // (key, value, the field the error names)
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
        ("pcrs", pcrs(vec![(32, Cbor::Bytes(vec![0; 48]))]), "pcrs"),
        ("pcrs", pcrs(vec![(-1, Cbor::Bytes(vec![0; 48]))]), "pcrs"),
        (
            "pcrs",
            Cbor::Map(vec![(Cbor::Text("0".into()), Cbor::Bytes(vec![0; 48]))]),
            "pcrs",
        ),
        ("pcrs", pcrs(vec![(0, Cbor::Bytes(vec![0; 32]))]), "pcrs[0]"),
        ("pcrs", pcrs(vec![(0, Cbor::Bytes(vec![0; 64]))]), "pcrs[0]"),
        ("pcrs", pcrs(vec![(5, Cbor::Text("00".into()))]), "pcrs[5]"),
        (
            "pcrs",
            pcrs(vec![
                (1, Cbor::Bytes(vec![0; 48])),
                (1, Cbor::Bytes(vec![1; 48])),
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
        match parse_edited(&|m| forge::set(m, key, value.clone())) {
            Err(E::Field { field, .. }) => assert_eq!(field, want, "{key} = {value:?}"),
            other => panic!("{key} = {value:?}: not a field error: {other:?}"),
        }
    }
    // The limits themselves are accepted.
    for (key, value) in [
        ("user_data", Cbor::Bytes(vec![7; 1024])),
        ("user_data", Cbor::Bytes(vec![])),
        ("nonce", Cbor::Bytes(vec![7; 1024])),
        ("public_key", Cbor::Bytes(vec![7; 1024])),
        ("pcrs", pcrs(vec![(31, Cbor::Bytes(vec![0; 48]))])),
    ] {
        assert_eq!(
            parse_edited(&|m| forge::set(m, key, value.clone())),
            Ok(()),
            "{key}"
        );
    }
    // Payload that is not a map, or has trailing bytes.
    let not_map = forge::with_payload(&doc, forge::encode(&Cbor::Array(vec![])));
    let mut trailing = forge::encode(&Cbor::Map(forge::payload_map(&doc)));
    trailing.push(0);
    for m in [not_map, forge::with_payload(&doc, trailing)] {
        assert!(matches!(parse_cose_document(&m), Err(E::Payload { .. })));
    }
}

#[test]
fn envelope_rules() {
    let Some(s) = Samples::find() else { return };
    use coset::{CborSerializable as _, CoseSign1, HeaderBuilder, ProtectedHeader, iana};
    let doc = s.cose(PROD_EUC1);
    let rebuild = |f: &dyn Fn(&mut CoseSign1)| {
        let mut s = CoseSign1::from_slice(&doc).unwrap();
        f(&mut s);
        s.to_vec().unwrap()
    };
    let protected_alg = |alg| ProtectedHeader {
        original_data: None,
        header: HeaderBuilder::new().algorithm(alg).build(),
    };
    let algorithm: Is = |e| matches!(e, NitroError::Algorithm { .. });
    let cose_err: Is = |e| matches!(e, NitroError::Cose { .. });
    let any: Is = |_| true;
    let mut tag17 = vec![0xd1];
    tag17.extend_from_slice(&doc);
    // (case, document, the error it must give)
    let table: Vec<(&str, Vec<u8>, Is)> = vec![
        (
            "ES256",
            rebuild(&|s| s.protected = protected_alg(iana::Algorithm::ES256)),
            algorithm,
        ),
        (
            "ES512",
            rebuild(&|s| s.protected = protected_alg(iana::Algorithm::ES512)),
            algorithm,
        ),
        (
            "EdDSA",
            rebuild(&|s| s.protected = protected_alg(iana::Algorithm::EdDSA)),
            algorithm,
        ),
        (
            "no algorithm",
            rebuild(&|s| s.protected = ProtectedHeader::default()),
            algorithm,
        ),
        (
            // ES384 in the unprotected header only does not count.
            "algorithm unprotected",
            rebuild(&|s| {
                s.protected = ProtectedHeader::default();
                s.unprotected = HeaderBuilder::new()
                    .algorithm(iana::Algorithm::ES384)
                    .build();
            }),
            any,
        ),
        ("detached payload", rebuild(&|s| s.payload = None), cose_err),
        (
            "short signature",
            rebuild(&|s| s.signature.truncate(95)),
            cose_err,
        ),
        (
            "long signature",
            rebuild(&|s| s.signature.push(0)),
            cose_err,
        ),
        (
            "critical parameters",
            rebuild(&|s| {
                s.protected.original_data = None;
                s.protected.header.crit = vec![coset::RegisteredLabelWithPrivate::Assigned(
                    iana::HeaderParameter::Kid,
                )];
            }),
            cose_err,
        ),
        // Another tag than 18.
        ("tag 17", tag17, any),
    ];
    for (case, m, is) in &table {
        let e = parse_nitro_document(m).unwrap_err();
        assert!(is(&e), "{case}: {e:?}");
        assert!(parse_cose_document(m).is_err(), "{case}");
        assert_rejected_by(
            &verify(
                m,
                &Expectations::new(&debug_policy()),
                s.verify_at(PROD_EUC1),
            ),
            NitroCheck::Format,
        );
    }
}
