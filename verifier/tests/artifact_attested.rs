//! Artifacts whose evidence slot holds real hardware evidence: the artifact
//! path must hand it to the platform verifier and enforce the binding to the
//! manifest. Real samples were not produced for a kolm manifest, so each must
//! be rejected exactly at the binding check of its platform, after every
//! chain and signature check passed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::{Path, PathBuf};

use common::{Spec, build};
use kolm_format::evidence::EvidenceRole;
use kolm_format::timefmt;
use kolm_policy::{Platform, Policy};
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::platform;
use kolm_verifier::report::{Verdict, VerifyReport};

fn samples() -> Option<std::path::PathBuf> {
    common::samples_dir("nitro/expected.json")
}

fn seal(
    dir: &Path,
    platform: Platform,
    measurement: &str,
    evidence: Vec<(&str, Vec<u8>, EvidenceRole)>,
) -> PathBuf {
    let p = dir.join(format!("{platform}.zip"));
    build(
        &p,
        &Spec {
            platform,
            measurement: Some(hex::decode(measurement).unwrap()),
            evidence: evidence
                .into_iter()
                .map(|(a, b, c)| (a.to_string(), b, c))
                .collect(),
            ..Spec::default()
        },
    );
    p
}

fn verify_at(p: &Path, at: &str, policy: Policy) -> VerifyReport {
    let opts = VerifyOptions {
        policy: Some(policy),
        at: VerifyAt::Instant(timefmt::parse_rfc3339(at).unwrap()),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    verify_artifact(p, &opts).unwrap()
}

fn assert_binding_failure(r: &VerifyReport, binding_check: &str) {
    assert_eq!(r.verdict, Verdict::Rejected, "{}", r.to_table());
    let first = r.first_failure().unwrap();
    assert_eq!(first.id, "attestation", "{}", r.to_table());
    assert!(first.detail.contains(binding_check), "{}", first.detail);
    // Everything before the binding passed inside the platform verifier.
    let att = kolm_verifier::attested::Outcome::of(r.attestation.as_ref().unwrap());
    let failed: Vec<&str> = att
        .checks()
        .iter()
        .filter(|c| c.status == kolm_verifier::check::CheckStatus::Fail)
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(failed, [binding_check], "{}", r.to_table());
}

fn permissive(platform: &str) -> Policy {
    Policy::from_toml_str(&format!(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"{platform}\"]\nallow_debug = true\n[egress]\nmust_be_zero = false\n[sev_snp]\nmax_vmpl = 3\n"
    ))
    .unwrap()
}

#[test]
fn nitro_evidence_is_verified_and_must_bind_the_manifest() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let doc = std::fs::read(s.join("nitro/nitro-euc1-2025-01-06-prod.cose")).unwrap();
    let pcr0 = "8bb159f202bb95d6d4d98e0e103918246cea734f1d57cd263e4fd56075ed53f6fa8c68854817a32749a241e11874c26b";
    let p = seal(
        dir.path(),
        Platform::Nitro,
        pcr0,
        vec![(platform::NITRO_DOC, doc.clone(), EvidenceRole::Attestation)],
    );
    let r = verify_at(&p, "2026-01-02T04:00:00Z", permissive("nitro"));
    // At the receipt's time the document's leaf certificate has expired.
    assert_eq!(r.first_failure().unwrap().id, "attestation");
    assert!(
        r.reason.as_deref().unwrap().contains("nitro.freshness"),
        "{:?}",
        r.reason
    );
    // Without --at the document is judged at its own timestamp: only the
    // binding to this manifest fails.
    let opts = VerifyOptions {
        policy: Some(permissive("nitro")),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    let r = verify_artifact(&p, &opts).unwrap();
    assert_binding_failure(&r, "nitro.binding.user_data");

    // Evidence under the wrong name is named. Since issue 12 (item 5) the
    // evidence index may list only the slot's own names, so this is refused
    // at the index, naming the one allowed name.
    let p = seal(
        dir.path(),
        Platform::Nitro,
        pcr0,
        vec![("evidence/other.cose", doc, EvidenceRole::Attestation)],
    );
    let r = verify_artifact(&p, &opts).unwrap();
    assert_eq!(r.first_failure().unwrap().id, "evidence.index");
    assert!(r.reason.as_deref().unwrap().contains(platform::NITRO_DOC));
}

#[test]
fn snp_evidence_is_verified_and_must_bind_the_manifest() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = s.join("sev-snp/milan-v5-gcp");
    let p = seal(
        dir.path(),
        Platform::SevSnp,
        "b747d55452e0b9e9",
        vec![
            (
                platform::SNP_REPORT,
                std::fs::read(d.join("report.bin")).unwrap(),
                EvidenceRole::Attestation,
            ),
            (
                platform::SNP_VCEK,
                std::fs::read(d.join("vcek.pem")).unwrap(),
                EvidenceRole::Collateral,
            ),
        ],
    );
    let r = verify_at(&p, "2026-01-02T04:00:00Z", permissive("sev-snp"));
    assert_binding_failure(&r, "snp.binding.report_data");
}

#[test]
fn tdx_evidence_is_verified_and_must_bind_the_manifest() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = s.join("tdx/v4-b0c06f-dcapqvl-2025-06");
    let p = seal(
        dir.path(),
        Platform::Tdx,
        "91eb2b44d141d4ec",
        vec![
            (
                platform::TDX_QUOTE,
                std::fs::read(d.join("quote.bin")).unwrap(),
                EvidenceRole::Attestation,
            ),
            (
                platform::TDX_COLLATERAL,
                std::fs::read(d.join("collateral.json")).unwrap(),
                EvidenceRole::Collateral,
            ),
        ],
    );
    let r = verify_at(&p, "2025-07-01T00:00:00Z", permissive("tdx"));
    assert_binding_failure(&r, "tdx.binding.report_data");
}

#[test]
fn attested_measurement_is_typed_for_each_platform() {
    use kolm_verifier::attested::{Expectations, Measurement};
    let Some(s) = samples() else { return };
    let at = timefmt::parse_rfc3339("2025-01-06T17:00:00Z").unwrap();
    let doc = std::fs::read(s.join("nitro/nitro-euc1-2025-01-06-prod.cose")).unwrap();
    let policy = permissive("nitro");
    let a = kolm_verifier::nitro::verify(&doc, &Expectations::new(&policy), at).unwrap();
    assert!(matches!(a.measurement(), Measurement::NitroPcr0(_)));
    assert_eq!(
        hex::encode(a.measurement().as_bytes()),
        "8bb159f202bb95d6d4d98e0e103918246cea734f1d57cd263e4fd56075ed53f6fa8c68854817a32749a241e11874c26b"
    );
    let d = s.join("sev-snp/milan-v5-gcp");
    let at = timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let policy = permissive("sev-snp");
    let (report, vcek) = (
        std::fs::read(d.join("report.bin")).unwrap(),
        std::fs::read(d.join("vcek.pem")).unwrap(),
    );
    let ev = kolm_verifier::snp::SnpEvidence {
        report: &report,
        vcek: &vcek,
        chain: None,
    };
    let a = kolm_verifier::snp::verify(&ev, &Expectations::new(&policy), at).unwrap();
    assert!(matches!(a.measurement(), Measurement::Snp(_)));
    assert!(hex::encode(a.measurement().as_bytes()).starts_with("b747d55452e0b9e9"));
    let d = s.join("tdx/v4-b0c06f-dcapqvl-2025-06");
    let at = timefmt::parse_rfc3339("2025-07-01T00:00:00Z").unwrap();
    let policy = permissive("tdx");
    let (quote, collateral) = (
        std::fs::read(d.join("quote.bin")).unwrap(),
        std::fs::read(d.join("collateral.json")).unwrap(),
    );
    let ev = kolm_verifier::tdx::TdxEvidence {
        quote: &quote,
        collateral: &collateral,
    };
    let a = kolm_verifier::tdx::verify(&ev, &Expectations::new(&policy), at).unwrap();
    assert!(matches!(a.measurement(), Measurement::TdxMrtd(_)));
    assert!(hex::encode(a.measurement().as_bytes()).starts_with("91eb2b44d141d4ec"));
}

#[test]
fn artifact_evidence_has_one_binary_form() {
    use base64::Engine as _;
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Receipt-v1 section 6 names one binary form per file: the text forms
    // raw evidence may take on the command line are refused inside an
    // artifact, before any signature is looked at.
    let doc = std::fs::read(s.join("nitro/nitro-euc1-2025-01-06-prod.cose")).unwrap();
    let pcr0 = "8bb159f202bb95d6d4d98e0e103918246cea734f1d57cd263e4fd56075ed53f6fa8c68854817a32749a241e11874c26b";
    let text_forms = [
        base64::engine::general_purpose::STANDARD
            .encode(&doc)
            .into_bytes(),
        hex::encode(&doc).into_bytes(),
    ];
    for text in text_forms {
        let p = seal(
            dir.path(),
            Platform::Nitro,
            pcr0,
            vec![(platform::NITRO_DOC, text, EvidenceRole::Attestation)],
        );
        let r = verify_at(&p, "2025-01-06T17:00:00Z", permissive("nitro"));
        assert_eq!(r.first_failure().unwrap().id, "attestation");
        assert!(
            r.reason.as_deref().unwrap().contains("nitro.format"),
            "{}",
            r.to_table()
        );
    }
    let d = s.join("sev-snp/milan-v5-gcp");
    let report = std::fs::read(d.join("report.bin")).unwrap();
    let p = seal(
        dir.path(),
        Platform::SevSnp,
        "b747d55452e0b9e9",
        vec![
            (
                platform::SNP_REPORT,
                hex::encode(&report).into_bytes(),
                EvidenceRole::Attestation,
            ),
            (
                platform::SNP_VCEK,
                std::fs::read(d.join("vcek.pem")).unwrap(),
                EvidenceRole::Collateral,
            ),
        ],
    );
    // The hex form is 2368 bytes: since issue 12 (item 9) it is refused at
    // the index, by the report's exact 1184-byte cap, before it is read.
    let r = verify_at(&p, "2026-01-02T04:00:00Z", permissive("sev-snp"));
    assert_eq!(r.first_failure().unwrap().id, "evidence.index");
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .contains("over its 1184-byte cap"),
        "{}",
        r.to_table()
    );
}
