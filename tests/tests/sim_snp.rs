//! The simulated TEE's SEV-SNP form (`--sim-format sev-snp`): the
//! enclave's `SimulatedProvider` writes an SNP v3 ATTESTATION_REPORT with a
//! VCEK-shaped certificate and an ASK/ARK pair under the installation's
//! sim ARK; the verifier's SEV-SNP code checks it with the chain anchored
//! at that ARK only when the caller trusts it, and never calls it
//! `verified`.
//!
//! Evidence level: the report passes the SEV-SNP checks anchored at its
//! ARK and fails them without the root, with a bundle lacking the SEV-SNP
//! root, under another installation's ARK, as platform `sev-snp` (AMD's
//! roots), with a report byte flipped, and with other report data; genuine
//! AMD evidence never passes as the sim form.
//! Artifact level: a sealed run is `rejected` without the bundle,
//! `simulated` (exit 1) with it, rejected when the report is tampered with
//! or swapped. End to end: the `kolm-enclave` and `kolm-verify` binaries.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod sim_common;

use sim_common::{SIM_POLICY, bundle, enclave_exe, entries, first_failure, opts, run_bin, seal};

use std::path::Path;

use kolm_enclave::attest::sim::SimFormat;
use kolm_enclave::attest::{AttestationProvider, SimulatedProvider};
use kolm_format::container::{self, EntryData};
use kolm_format::evidence::{
    EvidenceIndex, EvidenceRole, SIM_SNP_CHAIN_PATH, SIM_SNP_REPORT_PATH, SIM_SNP_VCEK_PATH,
};
use kolm_format::manifest::Manifest;
use kolm_policy::{Platform, Policy};
use kolm_verifier::artifact::verify_artifact;
use kolm_verifier::attested::{Expectations, Identity, Measurement, Tcb};
use kolm_verifier::check::{ArtifactCheck, CheckStatus, SimCheck, SnpCheck};
use kolm_verifier::report::Verdict;
use kolm_verifier::sim::{self, SimRoots};
use kolm_verifier::snp::SnpEvidence;
use time::OffsetDateTime;

fn provider(root_dir: &Path) -> SimulatedProvider {
    SimulatedProvider::open(root_dir, &enclave_exe(), SimFormat::SevSnp).unwrap()
}

/// `(report, VCEK DER, ASK/ARK PEM)` for `report_data`.
fn evidence(p: &SimulatedProvider, report_data: &[u8; 64]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let bundle = p.attest(report_data).unwrap();
    let collateral = p.collateral().unwrap();
    let get = |path: &str| {
        collateral
            .files
            .iter()
            .find(|(p, _)| p == path)
            .unwrap()
            .1
            .clone()
    };
    (
        bundle.files[0].1.clone(),
        get(SIM_SNP_VCEK_PATH),
        get(SIM_SNP_CHAIN_PATH),
    )
}

fn ev<'a>(e: &'a (Vec<u8>, Vec<u8>, Vec<u8>)) -> SnpEvidence<'a> {
    SnpEvidence {
        report: &e.0,
        vcek: &e.1,
        chain: Some(&e.2),
    }
}

#[test]
fn sim_snp_evidence_passes_the_snp_code_only_against_its_ark() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    let p = provider(&root_dir);
    let roots = bundle(&root_dir);
    let snp_root = roots.of_form(SimFormat::SevSnp).unwrap();
    assert_eq!(snp_root.der(), p.snp_root().unwrap().ark_der());
    assert!(
        snp_root
            .subject()
            .contains("CN=kolm simulated TEE SEV-SNP root (NOT A TEE)"),
        "{}",
        snp_root.subject()
    );
    let policy = Policy::production();
    let rd = [0x5A; 64];
    let expect = Expectations::new(&policy).with_report_data(rd.to_vec());
    let now = OffsetDateTime::now_utc();
    let e = evidence(&p, &rd);

    // With the bundle: every SEV-SNP check that does not pin AMD's
    // products passes; the claims are the simulated TEE's.
    let ok = sim::verify_snp(&ev(&e), Some(&roots), &expect, now).unwrap();
    assert_eq!(ok.claims.platform, Platform::Simulated);
    let m: [u8; 48] = p.measurement().unwrap().try_into().unwrap();
    assert_eq!(ok.claims.measurement, Measurement::SimPcr0(m));
    assert_eq!(ok.claims.tcb, Tcb::Simulated);
    assert_eq!(ok.claims.report_data, rd.to_vec());
    assert!(!ok.claims.debug);
    assert_eq!(
        ok.claims.identity,
        Identity::Simulated {
            pcrs: [(0u8, m.to_vec())].into()
        }
    );
    for (id, status) in [
        (SnpCheck::ReportFormat, CheckStatus::Pass),
        (SnpCheck::VcekFormat, CheckStatus::Pass),
        (SnpCheck::ChainFormat, CheckStatus::Pass),
        (SnpCheck::Product, CheckStatus::Pass),
        (SnpCheck::ChainArk, CheckStatus::Pass),
        (SnpCheck::ChainAsk, CheckStatus::Pass),
        (SnpCheck::ChainVcek, CheckStatus::Pass),
        (SnpCheck::Freshness, CheckStatus::Pass),
        (SnpCheck::Signature, CheckStatus::Pass),
        (SnpCheck::SigningKey, CheckStatus::Pass),
        (SnpCheck::VcekHwid, CheckStatus::Pass),
        (SnpCheck::VcekTcb, CheckStatus::Pass),
        (SnpCheck::Debug, CheckStatus::Pass),
        (SnpCheck::PolicyPlatform, CheckStatus::Skip),
        (SnpCheck::PolicyMeasurement, CheckStatus::Skip),
        (SnpCheck::PolicyTcb, CheckStatus::Skip),
        (SnpCheck::PolicyMigration, CheckStatus::Pass),
        (SnpCheck::PolicyVmpl, CheckStatus::Pass),
        (SnpCheck::BindingReportData, CheckStatus::Pass),
    ] {
        assert_eq!(ok.checks.status_of(id), Some(status), "{id}");
    }
    assert_eq!(
        ok.checks.status_of(SimCheck::Trust),
        Some(CheckStatus::Pass)
    );
    let ark = &ok.checks.get(SnpCheck::ChainArk).unwrap().detail;
    assert!(ark.contains("NOT AMD's"), "{ark}");

    // A policy pinning real guests and AMD firmware does not judge the
    // stand-ins (the artifact's checks compare the sim measurement).
    let mut pinned = Policy::production();
    pinned.sev_snp.measurements.insert([0xEE; 48]);
    pinned.sev_snp.min_tcb = Some(kolm_policy::SnpTcb {
        bootloader: 255,
        tee: 255,
        snp: 255,
        microcode: 255,
        fmc: None,
    });
    let pinned_expect = Expectations::new(&pinned).with_report_data(rd.to_vec());
    sim::verify_snp(&ev(&e), Some(&roots), &pinned_expect, now).unwrap();

    // Without a root, or with a bundle that has no SEV-SNP root.
    let r = sim::verify_snp(&ev(&e), None, &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "sim.trust");
    let nitro_only = SimRoots::parse(p.root().certificate_pem().as_bytes()).unwrap();
    let r = sim::verify_snp(&ev(&e), Some(&nitro_only), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "sim.trust");
    let detail = &r.first_failure().unwrap().detail;
    assert!(
        detail.contains("has no root of the sev-snp form"),
        "{detail}"
    );

    // Another installation's ARK.
    let other_dir = dir.path().join("other");
    provider(&other_dir);
    let r = sim::verify_snp(&ev(&e), Some(&bundle(&other_dir)), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "snp.chain.ark");

    // As platform sev-snp: AMD's roots only; the sim ARK is not one.
    let r = kolm_verifier::snp::verify(&ev(&e), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "snp.chain.ark");

    // A flipped byte of the signed report (MEASUREMENT).
    let mut flipped = e.clone();
    flipped.0[0x90] ^= 1;
    let r = sim::verify_snp(&ev(&flipped), Some(&roots), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "snp.signature");

    // Other report data expected.
    let other_expect = Expectations::new(&policy).with_report_data(vec![0xA5; 64]);
    let r = sim::verify_snp(&ev(&e), Some(&roots), &other_expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "snp.binding.report_data");

    // The chain left out.
    let no_chain = SnpEvidence {
        chain: None,
        ..ev(&e)
    };
    let r = sim::verify_snp(&no_chain, Some(&roots), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "snp.chain.format");
}

/// `files` with the report replaced by `report` and the (unsigned)
/// evidence index updated to match, written to `dest`.
fn with_report(dest: &Path, files: &[(String, Vec<u8>)], report: &[u8]) {
    let get = |n: &str| files.iter().find(|(p, _)| p == n).unwrap().1.clone();
    let mut index = EvidenceIndex::from_canonical_bytes(&get("evidence/index.json")).unwrap();
    let rec =
        kolm_format::seal::file_record(SIM_SNP_REPORT_PATH, &EntryData::Bytes(report.to_vec()))
            .unwrap();
    for f in index.files.iter_mut() {
        if f.file.path == SIM_SNP_REPORT_PATH {
            f.file = rec.clone();
        }
    }
    let forged: Vec<(String, EntryData)> = files
        .iter()
        .map(|(n, b)| {
            let b = match n.as_str() {
                SIM_SNP_REPORT_PATH => report.to_vec(),
                "evidence/index.json" => index.to_canonical_bytes().unwrap(),
                _ => b.clone(),
            };
            (n.clone(), EntryData::Bytes(b))
        })
        .collect();
    container::write_canonical_zip(dest, forged).unwrap();
}

#[test]
fn a_sealed_sev_snp_run_is_simulated_only_with_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    let p = provider(&root_dir);
    let r0 = seal(dir.path(), SIM_POLICY, &p);
    let r = seal(dir.path(), SIM_POLICY, &p);
    let files = entries(&r.artifact);
    let get = |n: &str| files.iter().find(|(p, _)| p == n).unwrap().1.clone();
    let manifest = Manifest::from_canonical_bytes(&get("manifest.json")).unwrap();
    assert_eq!(manifest.environment.platform, Platform::Simulated);
    assert_eq!(
        manifest
            .environment
            .measurement
            .as_ref()
            .map(|m| m.0.clone()),
        p.measurement()
    );
    let index = EvidenceIndex::from_canonical_bytes(&get("evidence/index.json")).unwrap();
    let listed: Vec<(&str, EvidenceRole)> = index
        .files
        .iter()
        .map(|f| (f.file.path.as_str(), f.role))
        .collect();
    assert_eq!(
        listed,
        [
            (SIM_SNP_CHAIN_PATH, EvidenceRole::Collateral),
            (SIM_SNP_REPORT_PATH, EvidenceRole::Attestation),
            (SIM_SNP_VCEK_PATH, EvidenceRole::Collateral),
        ]
    );
    assert_eq!(index.sim_format().unwrap(), Some(SimFormat::SevSnp));
    assert_eq!(
        get(SIM_SNP_REPORT_PATH).len() as u64,
        kolm_format::evidence::SNP_REPORT_BYTES
    );

    // Without the root: rejected, naming sim.trust.
    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, None)).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected, "{}", rep.to_table());
    let first = rep.first_failure().unwrap();
    assert_eq!(first.id, ArtifactCheck::Attestation.as_str());
    assert!(first.detail.contains("sim.trust"), "{}", first.detail);

    // With the installation's bundle: `simulated`, exit 1, and the chain
    // of the two runs holds (same sim guest).
    let mut o = opts(SIM_POLICY, Some(bundle(&root_dir)));
    o.previous = Some(r0.artifact.clone());
    let rep = verify_artifact(&r.artifact, &o).unwrap();
    let table = rep.to_table();
    assert_eq!(rep.verdict, Verdict::Simulated, "{table}");
    assert_eq!(rep.exit_code(), 1);
    assert_eq!(
        rep.status_of(ArtifactCheck::Attestation),
        Some(CheckStatus::Simulated)
    );
    assert_eq!(rep.status_of(ArtifactCheck::Chain), Some(CheckStatus::Pass));
    let att = &rep.checks.get(ArtifactCheck::Attestation).unwrap().detail;
    assert!(att.contains("sev-snp-format sim evidence"), "{att}");
    assert!(
        table.contains("WARNING: SIMULATED TEE, NOT A TEE"),
        "{table}"
    );

    // A bundle without the SEV-SNP root.
    let nitro_only = SimRoots::parse(p.root().certificate_pem().as_bytes()).unwrap();
    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, Some(nitro_only))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    let detail = &rep.first_failure().unwrap().detail;
    assert!(
        detail.contains("sim.trust") && detail.contains("sev-snp"),
        "{detail}"
    );

    // A flipped report byte (REPORT_DATA), the index updated to match.
    let mut flipped = get(SIM_SNP_REPORT_PATH);
    flipped[0x50] ^= 0x80;
    let forged = dir.path().join("flipped.zip");
    with_report(&forged, &files, &flipped);
    let rep = verify_artifact(&forged, &opts(SIM_POLICY, Some(bundle(&root_dir)))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected, "{}", rep.to_table());
    let detail = &rep.first_failure().unwrap().detail;
    assert!(detail.contains("snp.signature"), "{detail}");

    // The other run's genuine report: its REPORT_DATA binds the other
    // manifest.
    let swapped = entries(&r0.artifact)
        .into_iter()
        .find(|(n, _)| n == SIM_SNP_REPORT_PATH)
        .unwrap()
        .1;
    let forged = dir.path().join("swapped.zip");
    with_report(&forged, &files, &swapped);
    let rep = verify_artifact(&forged, &opts(SIM_POLICY, Some(bundle(&root_dir)))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected, "{}", rep.to_table());
    let detail = &rep.first_failure().unwrap().detail;
    assert!(detail.contains("snp.binding.report_data"), "{detail}");
}

/// End to end: `kolm-enclave run --attest sim --sim-format sev-snp`, the
/// bundle exported with `kolm-enclave sim-root`, `kolm-verify` with and
/// without it.
#[test]
fn kolm_enclave_run_sim_format_sev_snp_then_kolm_verify() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("sim-root-dir");
    let out = dir.path().join("out");
    let enclave = enclave_exe();
    let verify = kolm_testkit::workspace_binary("kolm-verify");
    let demo_policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../enclave/demo/policy.toml");
    let demo_policy = demo_policy.to_str().unwrap();

    let (rc, stdout, stderr) = run_bin(
        &enclave,
        &[
            "run",
            "--attest",
            "sim",
            "--sim-format",
            "sev-snp",
            "--out",
            out.to_str().unwrap(),
        ],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stdout}{stderr}");
    assert!(stdout.contains("platform simulated"), "{stdout}");
    let artifact = out.join("demo-bigram-0.zip");
    let names: Vec<String> = entries(&artifact).into_iter().map(|(n, _)| n).collect();
    for slot in [SIM_SNP_REPORT_PATH, SIM_SNP_VCEK_PATH, SIM_SNP_CHAIN_PATH] {
        assert!(names.iter().any(|n| n == slot), "{slot} in {names:?}");
    }
    for key in ["key.pk8", "ask.pk8", "vcek.pk8"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(root_dir.join("sev-snp").join(key))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }

    let pem = dir.path().join("ROOTS.pem");
    let (rc, _, stderr) = run_bin(
        &enclave,
        &["sim-root", "--out", pem.to_str().unwrap()],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stderr}");
    let roots = SimRoots::parse(&std::fs::read(&pem).unwrap()).unwrap();
    assert_eq!(
        roots.of_form(SimFormat::SevSnp).unwrap().der(),
        kolm_enclave::attest::sim::SimSnpRoot::load(&root_dir.join("sev-snp"))
            .unwrap()
            .ark_der()
    );

    let a = artifact.to_str().unwrap();
    let p = pem.to_str().unwrap();
    let (rc, stdout, _) = run_bin(&verify, &[a, "--policy", demo_policy], &root_dir);
    assert_eq!(rc, 1, "{stdout}");
    assert!(
        stdout.contains("verdict: REJECTED (attestation: simulated evidence rejected: sim.trust"),
        "{stdout}"
    );

    let (rc, stdout, _) = run_bin(
        &verify,
        &[
            a,
            "--policy",
            demo_policy,
            "--dangerous-trust-sim-root",
            p,
            "--json",
        ],
        &root_dir,
    );
    assert_eq!(rc, 1, "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["verdict"], "simulated");
    assert_eq!(doc["warnings"][0]["id"], "simulated-tee");
    assert_eq!(doc["fields"]["attestation"]["platform"], "simulated");
    let att = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "attestation")
        .unwrap();
    assert_eq!(att["status"], "simulated");

    let (rc, stdout, _) = run_bin(
        &verify,
        &[
            a,
            "--policy",
            demo_policy,
            "--dangerous-trust-sim-root",
            p,
            "--dangerous-allow-unattested",
        ],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stdout}");
    assert!(stdout.contains("verdict: SIMULATED"), "{stdout}");
}

/// Genuine AMD evidence checked as the sim form (`sim::verify_snp` with
/// the installation's bundle) is rejected at `snp.chain.ark`: the sim
/// anchor takes the sim ARK only, never AMD's (nor the other way round).
#[test]
fn genuine_amd_evidence_never_passes_as_the_sim_form() {
    let Some(samples) = kolm_testkit::samples("sev-snp/milan-v5-gcp/report.bin") else {
        return;
    };
    let case = samples.join("sev-snp/milan-v5-gcp");
    let report = std::fs::read(case.join("report.bin")).unwrap();
    let vcek = std::fs::read(case.join("vcek.pem")).unwrap();
    let chain = std::fs::read(case.join("ask_ark_milan.pem")).unwrap();
    let genuine = SnpEvidence {
        report: &report,
        vcek: &vcek,
        chain: Some(&chain),
    };
    let at = kolm_format::timefmt::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let policy = Policy::production();
    let expect = Expectations::new(&policy);
    // The sample verifies as what it is.
    kolm_verifier::snp::verify(&genuine, &expect, at).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    provider(&root_dir);
    let r = sim::verify_snp(&genuine, Some(&bundle(&root_dir)), &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "snp.chain.ark");
    let detail = &r.first_failure().unwrap().detail;
    assert!(
        detail.contains("is not the trusted kolm sim SEV-SNP root"),
        "{detail}"
    );
}
