//! Artifacts whose evidence slot holds real hardware evidence: the artifact
//! path must hand it to the platform verifier and enforce the binding to the
//! manifest. Real samples were not produced for a kolm manifest, so each must
//! be rejected exactly at the binding check of its platform, after every
//! chain and signature check passed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::{Path, PathBuf};

use common::{Spec, build, verify_at};
use kolm_format::evidence::EvidenceRole;
use kolm_format::timefmt;
use kolm_policy::{Platform, Policy};
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::platform;
use kolm_verifier::report::{Verdict, VerifyReport};

fn samples() -> Option<std::path::PathBuf> {
    common::samples_dir("nitro/expected.json")
}

fn spec(
    platform: Platform,
    measurement: &str,
    evidence: Vec<(&str, Vec<u8>, EvidenceRole)>,
) -> Spec {
    Spec {
        platform,
        measurement: Some(hex::decode(measurement).unwrap()),
        evidence: evidence
            .into_iter()
            .map(|(a, b, c)| (a.to_string(), b, c))
            .collect(),
        ..Spec::default()
    }
}

fn seal(
    dir: &Path,
    platform: Platform,
    measurement: &str,
    evidence: Vec<(&str, Vec<u8>, EvidenceRole)>,
) -> PathBuf {
    let p = dir.join(format!("{platform}.zip"));
    build(&p, &spec(platform, measurement, evidence));
    p
}

/// An artifact kolm's writer refuses to seal, forged by hand.
fn forge(
    dir: &Path,
    platform: Platform,
    measurement: &str,
    evidence: Vec<(&str, Vec<u8>, EvidenceRole)>,
) -> PathBuf {
    let p = dir.join(format!("{platform}-forged.zip"));
    common::build_forged(&p, &spec(platform, measurement, evidence));
    p
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
    let p = forge(
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
    // kolm's writer refuses it too (the same slot table): forged by hand.
    let p = forge(
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
    // the index, by the report's exact REPORT_LEN-byte cap, before it is read.
    let r = verify_at(&p, "2026-01-02T04:00:00Z", permissive("sev-snp"));
    assert_eq!(r.first_failure().unwrap().id, "evidence.index");
    assert!(
        r.reason.as_deref().unwrap().contains(&format!(
            "over its {}-byte cap",
            kolm_verifier::snp::report::REPORT_LEN
        )),
        "{}",
        r.to_table()
    );
}

// ---------------------------------------------------------------------------
// Issue 12, item 1: a verified artifact means "our enclave", not "some
// genuine TEE". Each genuine sample is what an attacker with any guest of
// that platform can obtain for report data of its choosing.
// ---------------------------------------------------------------------------

use kolm_policy::{IdentityField, Pinning};
use kolm_verifier::artifact::judge_attestation;
use kolm_verifier::attested::{Attested, EvidenceVerdict, Expectations, Outcome, Rejection};
use kolm_verifier::check::{AzureCheck, CheckStatus, SnpCheck, TdxCheck};

fn policy(body: &str) -> Policy {
    Policy::from_toml_str(&format!("schema = \"kolm.policy.v1\"\n{body}")).unwrap()
}

/// The sample's verdict as `kolm-verify` gives it, without and with
/// `--dangerous-any-measurement`.
fn verdicts(r: &Result<Attested, Rejection>) -> (EvidenceVerdict, EvidenceVerdict) {
    (Outcome::of(r).verdict(false), Outcome::of(r).verdict(true))
}

fn nitro_sample(s: &Path, pol: &Policy) -> Result<Attested, Rejection> {
    let at = timefmt::parse_rfc3339("2025-01-06T17:00:00Z").unwrap();
    let doc = std::fs::read(s.join("nitro/nitro-euc1-2025-01-06-prod.cose")).unwrap();
    kolm_verifier::nitro::verify(&doc, &Expectations::new(pol), at)
}

#[test]
fn unpinned_nitro_sample_is_unpinned_until_the_policy_pins_pcr0() {
    let Some(s) = samples() else { return };
    let unpinned = nitro_sample(&s, &Policy::production());
    // Genuine: every check passed ...
    let a = unpinned.as_ref().unwrap();
    // ... but nothing says which enclave: verdict `unpinned`, exit 1.
    assert!(!a.is_pinned());
    assert_eq!(
        verdicts(&unpinned),
        (EvidenceVerdict::Unpinned, EvidenceVerdict::Accept)
    );
    assert_eq!(EvidenceVerdict::Unpinned.exit_code(), 1);
    let reason = Outcome::of(&unpinned).verdict_reason(false).unwrap();
    assert!(reason.starts_with(kolm_policy::UNPINNED_REASON), "{reason}");
    let loud = Outcome::of(&unpinned).verdict_reason(true).unwrap();
    assert!(loud.contains("--dangerous-any-measurement"), "{loud}");

    let pcr = |i: u8| hex::encode(a.identity_pcr(i));
    // PCR8 (signing certificate) alone does not pin.
    let p8 = policy(&format!(
        "allowed_platforms = [\"nitro\"]\n[nitro.pcrs]\n8 = [\"{}\"]\n",
        pcr(8)
    ));
    let r = nitro_sample(&s, &p8);
    assert_eq!(verdicts(&r).0, EvidenceVerdict::Unpinned);
    // PCR0 pins.
    let p0 = policy(&format!(
        "allowed_platforms = [\"nitro\"]\n[nitro.pcrs]\n0 = [\"{}\"]\n",
        pcr(0)
    ));
    let r = nitro_sample(&s, &p0);
    assert_eq!(verdicts(&r).0, EvidenceVerdict::Accept);
    assert_eq!(
        r.unwrap().pinning,
        Pinning::Pinned {
            by: vec![IdentityField::NitroPcr(0)]
        }
    );
    // PCR1 and PCR2 together pin.
    let p12 = policy(&format!(
        "allowed_platforms = [\"nitro\"]\n[nitro.pcrs]\n1 = [\"{}\"]\n2 = [\"{}\"]\n",
        pcr(1),
        pcr(2)
    ));
    assert_eq!(verdicts(&nitro_sample(&s, &p12)).0, EvidenceVerdict::Accept);
}

/// PCR `i` of a Nitro result, as the identity carries it.
trait NitroPcr {
    fn identity_pcr(&self, i: u8) -> Vec<u8>;
}

impl NitroPcr for Attested {
    fn identity_pcr(&self, i: u8) -> Vec<u8> {
        match self.identity() {
            kolm_verifier::attested::Identity::Nitro { pcrs } => pcrs[&i].clone(),
            other => panic!("{other:?}"),
        }
    }
}

fn gcp_snp(s: &Path, pol: &Policy) -> Result<Attested, Rejection> {
    let d = s.join("sev-snp/milan-v5-gcp");
    let at = timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let (report, vcek) = (
        std::fs::read(d.join("report.bin")).unwrap(),
        std::fs::read(d.join("vcek.pem")).unwrap(),
    );
    let ev = kolm_verifier::snp::SnpEvidence {
        report: &report,
        vcek: &vcek,
        chain: None,
    };
    kolm_verifier::snp::verify(&ev, &Expectations::new(pol), at)
}

#[test]
fn snp_pins_by_image_measurement_or_id_key_never_by_firmware_or_host_data() {
    let Some(s) = samples() else { return };
    let r = gcp_snp(&s, &Policy::production());
    assert_eq!(
        verdicts(&r),
        (EvidenceVerdict::Unpinned, EvidenceVerdict::Accept)
    );
    let m = hex::encode(r.unwrap().measurement().as_bytes());
    let zero32 = "00".repeat(32);
    // GCP's MEASUREMENT is Google's firmware: listed as such, it is accepted
    // but pins nothing; HOST_DATA (written by the launching host) neither.
    let firmware = policy(&format!(
        "allowed_platforms = [\"sev-snp\"]\n[sev_snp]\nfirmware_measurements = [\"{m}\"]\nhost_data = [\"{zero32}\"]\n"
    ));
    let r = gcp_snp(&s, &firmware);
    assert_eq!(
        verdicts(&r).0,
        EvidenceVerdict::Unpinned,
        "{:?}",
        r.map(|a| a.pinning)
    );
    // The same digest listed as a guest image's pins (the policy author
    // vouches that it covers the guest's code).
    let image = policy(&format!(
        "allowed_platforms = [\"sev-snp\"]\n[sev_snp]\nmeasurements = [\"{m}\"]\n"
    ));
    assert_eq!(verdicts(&gcp_snp(&s, &image)).0, EvidenceVerdict::Accept);
    // An ID key allow-list pins, and the sample (no ID block: all-zero
    // ID_KEY_DIGEST) is not in it.
    let id_key = policy(&format!(
        "allowed_platforms = [\"sev-snp\"]\n[sev_snp]\nid_key_digests = [\"{}\"]\n",
        "ab".repeat(48)
    ));
    let r = gcp_snp(&s, &id_key);
    let rej = r.unwrap_err();
    assert_eq!(
        rej.first_failure().map(|c| c.id),
        Some(SnpCheck::PolicyIdKey.into()),
        "{}",
        rej.reason
    );
    // A policy that allows only azure-sev-snp does not accept bare SEV-SNP.
    let azure_only = policy(&format!(
        "allowed_platforms = [\"azure-sev-snp\"]\n[sev_snp]\nmeasurements = [\"{m}\"]\n"
    ));
    let rej = gcp_snp(&s, &azure_only).unwrap_err();
    assert_eq!(
        rej.first_failure().map(|c| c.id),
        Some(SnpCheck::PolicyPlatform.into())
    );
}

fn tdx_v4(s: &Path, pol: &Policy) -> Result<Attested, Rejection> {
    let d = s.join("tdx/v4-b0c06f-dcapqvl-2025-06");
    let at = timefmt::parse_rfc3339("2025-07-01T00:00:00Z").unwrap();
    let (quote, collateral) = (
        std::fs::read(d.join("quote.bin")).unwrap(),
        std::fs::read(d.join("collateral.json")).unwrap(),
    );
    let ev = kolm_verifier::tdx::TdxEvidence {
        quote: &quote,
        collateral: &collateral,
    };
    kolm_verifier::tdx::verify(&ev, &Expectations::new(pol), at)
}

#[test]
fn tdx_pins_by_mrtd_and_rtmr0_to_2_not_by_mrtd_alone() {
    let Some(s) = samples() else { return };
    let r = tdx_v4(&s, &Policy::production());
    assert_eq!(verdicts(&r).0, EvidenceVerdict::Unpinned);
    let kolm_verifier::attested::Identity::Tdx(id) = r.unwrap().identity().clone() else {
        panic!()
    };
    let (mrtd, [r0, r1, r2, _]) = (hex::encode(id.mrtd), id.rtmr.map(hex::encode));
    // MRTD alone leaves kernel and initrd (RTMR1, RTMR2) open.
    let mrtd_only = policy(&format!(
        "allowed_platforms = [\"tdx\"]\n[tdx]\nmrtd = [\"{mrtd}\"]\n"
    ));
    assert_eq!(
        verdicts(&tdx_v4(&s, &mrtd_only)).0,
        EvidenceVerdict::Unpinned
    );
    let full = format!(
        "allowed_platforms = [\"tdx\"]\n[tdx]\nmrtd = [\"{mrtd}\"]\nrtmr0 = [\"{r0}\"]\nrtmr1 = [\"{r1}\"]\nrtmr2 = [\"{r2}\"]\n"
    );
    assert_eq!(
        verdicts(&tdx_v4(&s, &policy(&full))).0,
        EvidenceVerdict::Accept
    );
    // MRCONFIGID narrows (host-supplied: it never pins on its own).
    let other = format!("{full}mrconfigid = [\"{}\"]\n", "ab".repeat(48));
    let rej = tdx_v4(&s, &policy(&other)).unwrap_err();
    assert_eq!(
        rej.first_failure().map(|c| c.id),
        Some(TdxCheck::PolicyConfig.into()),
        "{}",
        rej.reason
    );
    // A policy that allows only azure-tdx does not accept bare TDX.
    let azure_only = full.replace("[\"tdx\"]", "[\"azure-tdx\"]");
    let rej = tdx_v4(&s, &policy(&azure_only)).unwrap_err();
    assert_eq!(
        rej.first_failure().map(|c| c.id),
        Some(TdxCheck::PolicyPlatform.into())
    );
}

fn azure_snp_bytes(s: &Path) -> Vec<u8> {
    std::fs::read(s.join("azure/az-snp-vtpm-milan/evidence.json")).unwrap()
}

fn azure_snp(s: &Path, pol: &Policy) -> Result<Attested, Rejection> {
    let at = timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let bytes = azure_snp_bytes(s);
    let input = kolm_verifier::azure::AzureInput {
        evidence: &bytes,
        tdx_collateral: None,
    };
    kolm_verifier::azure::verify(&input, &Expectations::new(pol), at)
}

#[test]
fn azure_is_pinned_only_by_vtpm_pcrs_never_by_the_paravisor_measurement() {
    let Some(s) = samples() else { return };
    let ev = kolm_verifier::azure::parse_azure_evidence(&azure_snp_bytes(&s)).unwrap();
    let quoted = ev.quoted_pcrs();
    let r = azure_snp(&s, &Policy::production());
    let a = r.as_ref().unwrap();
    assert_eq!(a.platform(), Platform::AzureSevSnp);
    let paravisor = hex::encode(a.measurement().as_bytes());
    // The attack: the paravisor's MEASUREMENT is the same for every tenant;
    // pinning it pins nothing.
    let paravisor_only = policy(&format!(
        "allowed_platforms = [\"azure-sev-snp\"]\n[sev_snp]\nmeasurements = [\"{paravisor}\"]\n"
    ));
    let r = azure_snp(&s, &paravisor_only);
    assert_eq!(
        verdicts(&r),
        (EvidenceVerdict::Unpinned, EvidenceVerdict::Accept),
        "{:?}",
        r.map(|a| a.pinning)
    );
    // azure-sev-snp allowed without sev-snp: accepted (the SEV-SNP layer
    // used to ask the policy about `sev-snp`).
    assert_eq!(r.as_ref().map(|_| ()).map_err(|e| e.reason.clone()), Ok(()));
    // A policy allowing only bare sev-snp does not accept Azure evidence.
    let bare = policy("allowed_platforms = [\"sev-snp\"]\n");
    let rej = azure_snp(&s, &bare).unwrap_err();
    assert_eq!(
        rej.first_failure().map(|c| c.id),
        Some(SnpCheck::PolicyPlatform.into()),
        "{}",
        rej.reason
    );
    // vTPM PCR4 and PCR11 (or 8, 9) pin the guest.
    let (p4, p11) = (hex::encode(quoted[&4]), hex::encode(quoted[&11]));
    let pcrs = format!(
        "allowed_platforms = [\"azure-sev-snp\"]\n[azure.pcrs]\n4 = [\"{p4}\"]\n11 = [\"{p11}\"]\n"
    );
    let r = azure_snp(&s, &policy(&pcrs));
    assert_eq!(
        verdicts(&r).0,
        EvidenceVerdict::Accept,
        "{:?}",
        r.map(|a| a.pinning)
    );
    // PCR4 alone (the boot loader) does not.
    let p4_only =
        format!("allowed_platforms = [\"azure-sev-snp\"]\n[azure.pcrs]\n4 = [\"{p4}\"]\n");
    assert_eq!(
        verdicts(&azure_snp(&s, &policy(&p4_only))).0,
        EvidenceVerdict::Unpinned
    );
    // Another value of a pinned PCR is rejected.
    let wrong = pcrs.replace(&p11, &"ab".repeat(32));
    let rej = azure_snp(&s, &policy(&wrong)).unwrap_err();
    assert_eq!(
        rej.first_failure().map(|c| c.id),
        Some(AzureCheck::PolicyPcr.into()),
        "{}",
        rej.reason
    );
    // A PCR outside the quote's selection is not signed: it cannot pin.
    if let Some(unquoted) = (0u8..24).find(|i| !quoted.contains_key(i)) {
        let value = hex::encode(ev.pcrs[usize::from(unquoted)]);
        let p = format!("{pcrs}{unquoted} = [\"{value}\"]\n");
        let rej = azure_snp(&s, &policy(&p)).unwrap_err();
        assert!(
            rej.reason.contains("not in the TPM quote"),
            "{}",
            rej.reason
        );
    }
}

#[test]
fn artifact_attestation_judges_label_measurement_and_pinning() {
    let Some(s) = samples() else { return };
    let azure_policy = policy("allowed_platforms = [\"azure-sev-snp\", \"azure-tdx\"]\n");
    let r = azure_snp(&s, &azure_policy);
    let m = r.as_ref().unwrap().measurement().as_bytes().to_vec();
    // Genuine, bound, labelled right, but unpinned: `unpinned`.
    let (status, detail) = judge_attestation(Platform::AzureSevSnp, &r, Some(&m));
    assert_eq!(status, CheckStatus::Unpinned, "{detail}");
    assert!(detail.contains(kolm_policy::UNPINNED_REASON), "{detail}");
    // The same SEV-SNP evidence under an `azure-tdx` label: rejected.
    let (status, detail) = judge_attestation(Platform::AzureTdx, &r, Some(&m));
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        detail.contains("proves platform azure-sev-snp, the evidence index says azure-tdx"),
        "{detail}"
    );
    // ... and under a bare `sev-snp` label.
    let (status, _) = judge_attestation(Platform::SevSnp, &r, Some(&m));
    assert_eq!(status, CheckStatus::Fail);
    // Another claimed measurement: rejected.
    let (status, _) = judge_attestation(Platform::AzureSevSnp, &r, Some(&[0; 48]));
    assert_eq!(status, CheckStatus::Fail);
    // Pinned by the vTPM: passes.
    let ev = kolm_verifier::azure::parse_azure_evidence(&azure_snp_bytes(&s)).unwrap();
    let q = ev.quoted_pcrs();
    let pinned = policy(&format!(
        "allowed_platforms = [\"azure-sev-snp\"]\n[azure.pcrs]\n4 = [\"{}\"]\n9 = [\"{}\"]\n",
        hex::encode(q[&4]),
        hex::encode(q[&9])
    ));
    let r = azure_snp(&s, &pinned);
    let (status, detail) = judge_attestation(Platform::AzureSevSnp, &r, Some(&m));
    assert_eq!(status, CheckStatus::Pass, "{detail}");
}
