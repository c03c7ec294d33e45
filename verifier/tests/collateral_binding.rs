//! Issue 12 item 5: collateral digests listed in the signed manifest
//! (receipt v2, `docs/receipt-v2.md`). Each test performs an attack of a
//! host that holds the sealed artifact (and, before sealing, the guest's
//! clock and the collateral transport) on real evidence from the shared
//! samples, and shows where it is now rejected.
//!
//! Real samples were not produced for a kolm manifest, so an artifact built
//! from them, untouched, is rejected at the platform's report-data binding
//! inside the `attestation` check, after `evidence.index` and `binding`
//! passed: that is the baseline each attack is compared with.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::{Path, PathBuf};

use common::{Spec, build, entries, rewrite, verify_at};
use kolm_format::evidence::{EVIDENCE_SCHEMA_V1, EvidenceIndex, EvidenceRole};
use kolm_format::hexbytes::HexBytes;
use kolm_format::version::SpecVersion;
use kolm_policy::{Platform, Policy};
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::check::ArtifactCheck;
use kolm_verifier::platform;
use kolm_verifier::report::{CheckStatus, Verdict, VerifyReport};
use sha2::{Digest, Sha256};

/// Both TDX and SEV-SNP samples are used.
fn samples() -> Option<PathBuf> {
    common::samples_dir("tdx/expected.json")
        .and_then(|_| common::samples_dir("sev-snp/expected.json"))
}

/// TDX, FMSPC B0C06F: collateral issued 2025-06-19 (TCB evaluation data
/// number 17), and another genuine Intel-signed set for the same FMSPC,
/// issued 2026-10-07 (number 20).
const TDX_2025: &str = "tdx/v4-b0c06f-dcapqvl-2025-06";
const TDX_2026: &str = "tdx/v5-td15ex-b0c06f-dcapqvl-2026-10";
/// The latest date signed into the 2025 collateral: its QE identity's
/// issueDate (TCB info 10:16:03, PCK CRL 10:00:35, root CA CRL 2025-03-20).
const TDX_2025_SIGNED: &str = "2025-06-19T10:32:27Z";
/// GCP SEV-SNP (Milan): the VCEK's notBefore is 2025-12-05T06:04:27Z.
const SNP_GCP: &str = "sev-snp/milan-v5-gcp";

fn read(s: &Path, dir: &str, file: &str) -> Vec<u8> {
    std::fs::read(s.join(dir).join(file)).unwrap()
}

fn permissive(platform: &str, extra: &str) -> Policy {
    Policy::from_toml_str(&format!(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"{platform}\"]\nallow_debug = true\n[egress]\nmust_be_zero = false\n[sev_snp]\nmax_vmpl = 3\n{extra}"
    ))
    .unwrap()
}

/// The first failed check and its detail.
fn first_failure(r: &VerifyReport) -> (&'static str, String) {
    assert_eq!(r.verdict, Verdict::Rejected, "{}", r.to_table());
    let f = r.first_failure().unwrap();
    (f.id.as_str(), f.detail.clone())
}

/// The baseline: everything up to the platform's report-data binding
/// passed, and that (the sample is not bound to this manifest) failed.
fn assert_only_the_sample_binding_fails(r: &VerifyReport, binding_check: &str) {
    let (id, detail) = first_failure(r);
    assert_eq!(id, "attestation", "{}", r.to_table());
    assert!(detail.contains(binding_check), "{}", r.to_table());
}

fn tdx_spec(s: &Path, collateral: &str, version: SpecVersion) -> Spec {
    Spec {
        platform: Platform::Tdx,
        measurement: Some(hex::decode("91eb2b44d141d4ece09f0c75c2c53d247a3c68edd7fafe8a3520c942a604a407de03ae6dc5f87f27428b2538873118b7").unwrap()),
        evidence: vec![
            (
                platform::TDX_QUOTE.to_string(),
                read(s, TDX_2025, "quote.bin"),
                EvidenceRole::Attestation,
            ),
            (
                platform::TDX_COLLATERAL.to_string(),
                read(s, collateral, "collateral.json"),
                EvidenceRole::Collateral,
            ),
        ],
        version,
        ..Spec::default()
    }
}

fn snp_spec(s: &Path) -> Spec {
    let report = read(s, SNP_GCP, "report.bin");
    let measurement = kolm_verifier::snp::parse_snp_report(&report)
        .unwrap()
        .measurement()
        .to_vec();
    Spec {
        platform: Platform::SevSnp,
        measurement: Some(measurement),
        evidence: vec![
            (
                platform::SNP_REPORT.to_string(),
                report,
                EvidenceRole::Attestation,
            ),
            (
                platform::SNP_VCEK.to_string(),
                read(s, SNP_GCP, "vcek.pem"),
                EvidenceRole::Collateral,
            ),
        ],
        ..Spec::default()
    }
}

fn seal(dir: &Path, name: &str, spec: &Spec) -> PathBuf {
    let p = dir.join(format!("{name}.zip"));
    build(&p, spec);
    p
}

/// What a host does to a sealed artifact: replace an evidence file and
/// rewrite the unsigned index to describe the new bytes (`None` removes
/// the file).
fn host_replaces(src: &Path, dest: &Path, path: &str, bytes: Option<Vec<u8>>, role: EvidenceRole) {
    let mut files = entries(src);
    let mut index = EvidenceIndex::from_canonical_bytes(&files["evidence/index.json"]).unwrap();
    index.files.retain(|f| f.file.path != path);
    files.remove(path);
    if let Some(bytes) = bytes {
        index.files.push(kolm_format::evidence::EvidenceFile {
            file: kolm_format::manifest::FileRecord {
                path: path.to_string(),
                size: bytes.len() as u64,
                sha256: HexBytes(Sha256::digest(&bytes).into()),
            },
            role,
        });
        index.files.sort_by(|a, b| a.file.path.cmp(&b.file.path));
        files.insert(path.to_string(), bytes);
    }
    files.insert(
        "evidence/index.json".into(),
        kolm_format::jcs::to_canonical_vec(&index).unwrap(),
    );
    rewrite(dest, files);
}

/// Attack (a): after sealing, the host swaps the listed TDX collateral for
/// another genuine Intel-signed set of the same FMSPC and rewrites the
/// evidence index to match. Under receipt v1 the index check accepted it;
/// under v2 the index no longer matches the signed manifest.
#[test]
fn a_swapped_genuine_collateral_set_is_rejected() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let policy = || permissive("tdx", "");
    let sealed = seal(dir.path(), "tdx", &tdx_spec(&s, TDX_2025, SpecVersion::V2));
    let r = verify_at(&sealed, "2025-07-01T00:00:00Z", policy());
    assert_eq!(
        r.status_of(ArtifactCheck::EvidenceIndex),
        Some(CheckStatus::Pass)
    );
    assert!(
        r.checks.iter().any(|c| c.id == "evidence.index"
            && c.detail
                .contains("collateral bound: the 1 collateral files")),
        "{}",
        r.to_table()
    );
    assert_only_the_sample_binding_fails(&r, "tdx.binding.report_data");

    let other = read(&s, TDX_2026, "collateral.json");
    // Both sets are genuine: the other one parses and is Intel's too.
    kolm_verifier::tdx::parse_tdx_collateral(&other).unwrap();
    let swapped = dir.path().join("swapped.zip");
    host_replaces(
        &sealed,
        &swapped,
        platform::TDX_COLLATERAL,
        Some(other.clone()),
        EvidenceRole::Collateral,
    );
    let (id, detail) = first_failure(&verify_at(&swapped, "2025-07-01T00:00:00Z", policy()));
    assert_eq!(id, "evidence.index");
    assert!(
        detail.contains(
            "collateral \"evidence/tdx-collateral.json\" differs from the signed manifest's record"
        ),
        "{detail}"
    );
    // Swapping the bytes but leaving the index: the files check catches it.
    let mut files = entries(&sealed);
    files.insert(platform::TDX_COLLATERAL.into(), other.clone());
    let bytes_only = dir.path().join("bytes-only.zip");
    rewrite(&bytes_only, files);
    let (id, _) = first_failure(&verify_at(&bytes_only, "2025-07-01T00:00:00Z", policy()));
    assert_eq!(id, "files");

    // The same swap on a receipt v1 artifact, under a policy that accepts
    // unbound collateral: the index check lets it through (the v1 hole).
    let v1 = seal(
        dir.path(),
        "tdx-v1",
        &tdx_spec(&s, TDX_2025, SpecVersion::V1),
    );
    let v1_swapped = dir.path().join("v1-swapped.zip");
    host_replaces(
        &v1,
        &v1_swapped,
        platform::TDX_COLLATERAL,
        Some(other),
        EvidenceRole::Collateral,
    );
    let r = verify_at(
        &v1_swapped,
        "2026-10-20T00:00:00Z",
        permissive("tdx", "[freshness]\nrequire_bound_collateral = false\n"),
    );
    assert_eq!(
        r.status_of(ArtifactCheck::EvidenceIndex),
        Some(CheckStatus::Unbound),
        "{}",
        r.to_table()
    );
    assert_eq!(first_failure(&r).0, "attestation");
}

/// Attack (b): the host adds a file to the evidence index that the signed
/// manifest does not list: a genuine AMD ASK/ARK chain in the SEV-SNP
/// artifact's one optional slot (under v1, a named slot was enough). Also:
/// the host drops a listed file, and relabels the index as v1.
#[test]
fn an_unlisted_file_in_the_evidence_index_is_rejected() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let policy = || permissive("sev-snp", "");
    let sealed = seal(dir.path(), "snp", &snp_spec(&s));
    assert_only_the_sample_binding_fails(
        &verify_at(&sealed, "2026-01-02T04:00:00Z", policy()),
        "snp.binding.report_data",
    );

    let added = dir.path().join("added.zip");
    host_replaces(
        &sealed,
        &added,
        platform::SNP_CHAIN,
        Some(read(&s, SNP_GCP, "ask_ark_milan.pem")),
        EvidenceRole::Collateral,
    );
    let (id, detail) = first_failure(&verify_at(&added, "2026-01-02T04:00:00Z", policy()));
    assert_eq!(id, "evidence.index");
    assert!(
        detail.contains(
            "collateral \"evidence/snp-ask-ark.pem\" is not listed in the signed manifest's evidence.collateral"
        ),
        "{detail}"
    );

    let dropped = dir.path().join("dropped.zip");
    host_replaces(
        &sealed,
        &dropped,
        platform::SNP_VCEK,
        None,
        EvidenceRole::Collateral,
    );
    let (id, detail) = first_failure(&verify_at(&dropped, "2026-01-02T04:00:00Z", policy()));
    assert_eq!(id, "evidence.index");
    assert!(
        detail.contains("listed in the signed manifest but not in the evidence index"),
        "{detail}"
    );

    // A downgrade of the unsigned index to v1, whose rules do not look at
    // the manifest's list.
    let mut files = entries(&sealed);
    let mut index = EvidenceIndex::from_canonical_bytes(&files["evidence/index.json"]).unwrap();
    index.schema = EVIDENCE_SCHEMA_V1.into();
    files.insert(
        "evidence/index.json".into(),
        index.to_canonical_bytes().unwrap(),
    );
    let relabelled = dir.path().join("relabelled.zip");
    rewrite(&relabelled, files);
    let (id, detail) = first_failure(&verify_at(&relabelled, "2026-01-02T04:00:00Z", policy()));
    assert_eq!(id, "evidence.index");
    assert!(
        detail.contains("evidence index is kolm.evidence.v1, the manifest is kolm.manifest.v2"),
        "{detail}"
    );
}

/// Attack (c): an artifact in the v1 format, whose collateral is outside
/// the signature, with hardware evidence. Under the default policy it is
/// rejected as collateral-not-bound at the index; with the policy key off
/// it passes the index check with status `unbound`. A platform without
/// collateral files (Nitro) is not affected.
#[test]
fn a_v1_artifact_with_hardware_collateral_is_rejected_unless_the_policy_allows_it() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let v1 = seal(
        dir.path(),
        "tdx-v1",
        &tdx_spec(&s, TDX_2025, SpecVersion::V1),
    );
    for policy in [Policy::production(), permissive("tdx", "")] {
        let r = verify_at(&v1, "2025-07-01T00:00:00Z", policy);
        let (id, detail) = first_failure(&r);
        assert_eq!(id, "evidence.index");
        assert!(
            detail.starts_with("freshness.require_bound_collateral: the tdx collateral is not listed in the signed manifest"),
            "{detail}"
        );
    }
    let r = verify_at(
        &v1,
        "2025-07-01T00:00:00Z",
        permissive("tdx", "[freshness]\nrequire_bound_collateral = false\n"),
    );
    let index = r.checks.iter().find(|c| c.id == "evidence.index").unwrap();
    assert_eq!(index.status, CheckStatus::Unbound, "{}", r.to_table());
    assert!(
        index.detail.contains("collateral NOT bound"),
        "{}",
        index.detail
    );
    assert_only_the_sample_binding_fails(&r, "tdx.binding.report_data");

    // Nitro: the document carries its own chain; v1 binds all there is.
    let doc = std::fs::read(s.join("nitro/nitro-euc1-2025-01-06-prod.cose")).unwrap();
    let nitro = Spec {
        platform: Platform::Nitro,
        measurement: Some(vec![0; 48]),
        evidence: vec![(
            platform::NITRO_DOC.to_string(),
            doc,
            EvidenceRole::Attestation,
        )],
        version: SpecVersion::V1,
        ..Spec::default()
    };
    let p = seal(dir.path(), "nitro-v1", &nitro);
    let r = verify_at(&p, "2025-01-06T17:00:00Z", Policy::production());
    assert_eq!(
        r.status_of(ArtifactCheck::EvidenceIndex),
        Some(CheckStatus::Pass),
        "{}",
        r.to_table()
    );
}

/// Attack (d): a host that controls the guest's clock backdates the run
/// (`finished_at`) while serving collateral issued after that instant.
/// The vendor-signed dates of the bound collateral are a lower bound on
/// `finished_at`: the artifact is rejected as backdated, whatever instant
/// it is judged at. The same dates in a v1 artifact bound nothing.
#[test]
fn a_backdated_finished_at_before_the_collateral_dates_is_rejected() {
    let Some(s) = samples() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tdx_at = |version, started_at, finished_at| Spec {
        started_at,
        finished_at,
        ..tdx_spec(&s, TDX_2025, version)
    };
    // One second before the QE identity's issueDate: backdated.
    let p = seal(
        dir.path(),
        "backdated",
        &tdx_at(
            SpecVersion::V2,
            "2025-06-19T10:00:00Z",
            "2025-06-19T10:32:26Z",
        ),
    );
    for at in ["2025-07-01T00:00:00Z", "2025-06-19T10:32:26Z"] {
        let (id, detail) = first_failure(&verify_at(&p, at, permissive("tdx", "")));
        assert_eq!(id, "binding");
        assert!(
            detail.starts_with(&format!(
                "backdated: finished_at 2025-06-19T10:32:26Z is earlier than {TDX_2025_SIGNED} \
                 (enclaveIdentity.issueDate of evidence/tdx-collateral.json)"
            )),
            "{detail}"
        );
    }
    let opts = VerifyOptions {
        policy: Some(permissive("tdx", "")),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    let r = verify_artifact(&p, &opts).unwrap();
    assert_eq!(first_failure(&r).0, "binding");
    // At the signed date itself: not backdated.
    let p = seal(
        dir.path(),
        "on-time",
        &tdx_at(SpecVersion::V2, "2025-06-19T10:00:00Z", TDX_2025_SIGNED),
    );
    let r = verify_at(&p, "2025-07-01T00:00:00Z", permissive("tdx", ""));
    let binding = r.checks.iter().find(|c| c.id == "binding").unwrap();
    assert_eq!(binding.status, CheckStatus::Pass);
    assert!(
        binding
            .detail
            .contains("no earlier than the bound collateral's latest signed date"),
        "{}",
        binding.detail
    );
    assert_only_the_sample_binding_fails(&r, "tdx.binding.report_data");
    // A v1 artifact, backdated the same way and admitted by the policy, has
    // no lower bound: the binding check passes.
    let p = seal(
        dir.path(),
        "backdated-v1",
        &tdx_at(
            SpecVersion::V1,
            "2025-06-19T10:00:00Z",
            "2025-06-19T10:32:26Z",
        ),
    );
    let r = verify_at(
        &p,
        "2025-07-01T00:00:00Z",
        permissive("tdx", "[freshness]\nrequire_bound_collateral = false\n"),
    );
    assert_eq!(r.status_of(ArtifactCheck::Binding), Some(CheckStatus::Pass));

    // SEV-SNP: the VCEK certificate's notBefore.
    let snp = Spec {
        started_at: "2025-12-01T00:00:00Z",
        finished_at: "2025-12-05T06:04:26Z",
        ..snp_spec(&s)
    };
    let p = seal(dir.path(), "snp-backdated", &snp);
    let (id, detail) = first_failure(&verify_at(
        &p,
        "2026-01-02T04:00:00Z",
        permissive("sev-snp", ""),
    ));
    assert_eq!(id, "binding");
    assert!(
        detail.starts_with(
            "backdated: finished_at 2025-12-05T06:04:26Z is earlier than 2025-12-05T06:04:27Z \
             (VCEK/VLEK notBefore of evidence/snp-vcek.der)"
        ),
        "{detail}"
    );
}
