//! The simulated TEE (issue 13 section 1, `sim`): the enclave's
//! `SimulatedProvider` writes AWS-Nitro-format evidence under a
//! per-installation sim root; the verifier's Nitro code checks it against
//! that root only when the caller names it, and never calls it `verified`.
//!
//! Evidence level: the document passes `kolm_verifier::nitro`'s checks
//! pinned to its root, and fails them without the root, under another sim
//! root, as platform `nitro`, and with its user_data, a PCR or its
//! signature changed. Artifact level: a sealed `simulated` run is
//! `rejected` without the root, `simulated` (exit 1) with it, exit 0 only
//! with `--dangerous-allow-unattested` as well; relabelled `nitro` or
//! tampered, it is rejected. End to end: the `kolm-enclave` and
//! `kolm-verify` binaries.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod sim_common;

use sim_common::{SIM_POLICY, bundle, enclave_exe, entries, first_failure, opts, run_bin, seal};

use std::path::Path;

use ciborium::Value;
use coset::{CborSerializable as _, CoseSign1};
use kolm_enclave::attest::sim::{DocumentRequest, SimFormat};
use kolm_enclave::attest::{AttestError, AttestationProvider, SimulatedProvider};
use kolm_format::container::{self, EntryData};
use kolm_format::evidence::{
    EvidenceIndex, EvidenceRole, SIM_NITRO_DOC_PATH, SIM_TDX_COLLATERAL_PATH, SIM_TDX_QUOTE_PATH,
};
use kolm_format::manifest::Manifest;
use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::{Platform, Policy};
use kolm_verifier::artifact::verify_artifact;
use kolm_verifier::attested::{EvidenceVerdict, Expectations, Identity, Measurement, Outcome, Tcb};
use kolm_verifier::check::{ArtifactCheck, CheckId, CheckStatus, NitroCheck, SimCheck};
use kolm_verifier::report::{ReportWarning, Verdict};
use kolm_verifier::sim::{SimRoot, SimRootError, SimRoots};
use kolm_verifier::{nitro, sim};
use time::OffsetDateTime;

const NITRO_POLICY: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\"]\n\
                            [egress]\nmust_be_zero = false\n";

fn provider(root_dir: &Path) -> SimulatedProvider {
    SimulatedProvider::open(root_dir, &enclave_exe(), SimFormat::Nitro).unwrap()
}

fn trusted(p: &SimulatedProvider) -> SimRoots {
    SimRoots::parse(p.root().certificate_pem().as_bytes()).unwrap()
}

fn doc_at(p: &SimulatedProvider, user_data: &[u8], at: OffsetDateTime) -> Vec<u8> {
    p.document(&DocumentRequest {
        user_data,
        nonce: None,
        public_key: None,
        at,
    })
    .unwrap()
}

/// Rewrites the COSE payload's map entry `key` with `f` and keeps the
/// original signature (what a host tampering with the document does).
fn tamper_payload(doc: &[u8], key: &str, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut sign1 = CoseSign1::from_slice(doc).unwrap();
    let mut payload: Value = ciborium::de::from_reader(sign1.payload.as_deref().unwrap()).unwrap();
    let Value::Map(entries) = &mut payload else {
        panic!("payload is not a map")
    };
    let (_, v) = entries
        .iter_mut()
        .find(|(k, _)| k.as_text() == Some(key))
        .unwrap();
    f(v);
    let mut bytes = Vec::new();
    ciborium::ser::into_writer(&payload, &mut bytes).unwrap();
    sign1.payload = Some(bytes);
    sign1.to_vec().unwrap()
}

#[test]
fn sim_evidence_passes_the_nitro_code_only_against_its_own_root() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&dir.path().join("root"));
    let root = trusted(&p);
    assert_eq!(root.sha256(), p.root().sha256());
    let [only] = root.roots() else {
        panic!("one root expected")
    };
    assert_eq!(only.der(), p.root().certificate_der());
    assert_eq!(only.form(), Some(SimFormat::Nitro));
    assert_eq!(
        only.subject(),
        "CN=kolm simulated TEE root (NOT A TEE),OU=simulated TEE\\, not hardware,O=kolm"
    );
    let policy = Policy::production();
    let rd = [0x5a; 64];
    let expect = Expectations::new(&policy).with_report_data(rd.to_vec());
    let now = OffsetDateTime::now_utc();
    let doc = doc_at(&p, &rd, now);
    let at = nitro::parse_cose_document(&doc).unwrap().timestamp();

    let att = sim::verify(&doc, Some(&root), &expect, at).unwrap();
    assert_eq!(att.platform(), Platform::Simulated);
    let pcr0: [u8; 48] = p.measurement().unwrap().try_into().unwrap();
    assert_eq!(att.measurement(), &Measurement::SimPcr0(pcr0));
    assert_eq!(att.claims.tcb, Tcb::Simulated);
    assert!(!att.claims.debug);
    assert!(matches!(att.identity(), Identity::Simulated { pcrs } if pcrs.len() == 6));
    assert!(!att.is_pinned());
    let o = Outcome::Accepted(&att);
    assert_eq!(o.verdict(false), EvidenceVerdict::Simulated);
    assert_eq!(o.verdict(true), EvidenceVerdict::Simulated);
    assert_eq!(o.verdict(true).exit_code(), 1);
    assert!(
        o.verdict_reason(false)
            .unwrap()
            .starts_with("SIMULATED TEE, NOT A TEE")
    );
    let status = |id: CheckId| att.checks.status_of(id);
    assert_eq!(status(SimCheck::Trust.into()), Some(CheckStatus::Pass));
    for id in [
        NitroCheck::Format,
        NitroCheck::Chain,
        NitroCheck::Signature,
        NitroCheck::Freshness,
        NitroCheck::Debug,
        NitroCheck::BindingUserData,
    ] {
        assert_eq!(status(id.into()), Some(CheckStatus::Pass), "{id}");
    }
    assert_eq!(
        status(NitroCheck::PolicyPlatform.into()),
        Some(CheckStatus::Skip)
    );
    assert_eq!(att.fields.get("root_is_aws_g1"), Some(&false.into()));

    // No root trusted: rejected, by name.
    let r = sim::verify(&doc, None, &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "sim.trust");
    assert!(
        r.reason.contains("--dangerous-trust-sim-root"),
        "{}",
        r.reason
    );

    // Another installation's sim root: the chain is pinned by bytes.
    let other = provider(&dir.path().join("other-root"));
    let r = sim::verify(&doc, Some(&trusted(&other)), &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.chain");
    assert!(
        r.reason.contains("is not the kolm sim root given"),
        "{}",
        r.reason
    );

    // Presented as Nitro evidence: the sim root never stands in for AWS.
    let r = nitro::verify(&doc, &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.chain");
    assert!(
        r.reason.contains("it is a kolm SIMULATED TEE root"),
        "{}",
        r.reason
    );

    // Another manifest's report data.
    let r = sim::verify(&doc_at(&p, &[0x5b; 64], now), Some(&root), &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.binding.user_data");

    // After the leaf (3 hours) expired.
    let late = at + time::Duration::hours(4);
    let r = sim::verify(&doc, Some(&root), &expect, late).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.freshness");

    // Nonce and public key are bound when the document carries them.
    let with = p
        .document(&DocumentRequest {
            user_data: &rd,
            nonce: Some(b"challenge"),
            public_key: Some(b"key"),
            at: now,
        })
        .unwrap();
    let mut e2 = expect.clone();
    e2.nonce = Some(b"challenge".to_vec());
    e2.public_key = Some(b"key".to_vec());
    sim::verify(&with, Some(&root), &e2, at).unwrap();
    e2.nonce = Some(b"other".to_vec());
    let r = sim::verify(&with, Some(&root), &e2, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.binding.nonce");
}

#[test]
fn a_tampered_sim_document_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&dir.path().join("root"));
    let root = trusted(&p);
    let policy = Policy::production();
    let rd = [0x11; 64];
    let expect = Expectations::new(&policy).with_report_data(rd.to_vec());
    let doc = doc_at(&p, &rd, OffsetDateTime::now_utc());
    let at = nitro::parse_cose_document(&doc).unwrap().timestamp();
    sim::verify(&doc, Some(&root), &expect, at).unwrap();

    // user_data rewritten to what the verifier expects of another
    // manifest: the signature no longer covers the payload.
    let other = [0x22; 64];
    let forged = tamper_payload(&doc, "user_data", |v| *v = Value::Bytes(other.to_vec()));
    let expect_other = Expectations::new(&policy).with_report_data(other.to_vec());
    let r = sim::verify(&forged, Some(&root), &expect_other, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.signature");

    // PCR0 rewritten (another binary).
    let forged = tamper_payload(&doc, "pcrs", |v| {
        let Value::Map(pcrs) = v else { panic!() };
        pcrs[0].1 = Value::Bytes(vec![0xab; 48]);
    });
    let r = sim::verify(&forged, Some(&root), &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.signature");

    // The signature itself.
    let mut sign1 = CoseSign1::from_slice(&doc).unwrap();
    sign1.signature[10] ^= 1;
    let r = sim::verify(&sign1.to_vec().unwrap(), Some(&root), &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "nitro.signature");
}

#[test]
fn only_a_kolm_sim_root_is_trusted_as_one() {
    let aws = SimRoot::parse(nitro::AWS_NITRO_ROOT_G1_DER).unwrap_err();
    assert!(matches!(aws, SimRootError::NotASimRoot { .. }), "{aws}");
    assert!(matches!(
        SimRoot::parse(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        Err(SimRootError::NotACertificate { .. })
    ));
    assert!(matches!(
        SimRoot::parse(&vec![b'x'; sim::MAX_SIM_ROOT_BYTES + 1]),
        Err(SimRootError::TooLarge { .. })
    ));
    // DER works as well as PEM.
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&dir.path().join("root"));
    assert_eq!(
        SimRoots::from(SimRoot::parse(p.root().certificate_der()).unwrap()),
        trusted(&p)
    );
}

/// `--dangerous-trust-sim-root` reads the bundle `sim-root --out` writes:
/// 1..=8 certificates, each a self-signed kolm sim root, at most one per
/// form; each form's evidence is checked against its own root only, and a
/// bundle without the root of the evidence's form is rejected naming it.
#[test]
fn a_root_bundle_gives_each_form_its_own_root() {
    use kolm_enclave::attest::sim::{SimRoot as EnclaveRoot, bundle_pem};
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    let p = provider(&root_dir);
    let now = OffsetDateTime::now_utc();
    let (tdx_root, _) = EnclaveRoot::load_or_create_form(&root_dir, SimFormat::Tdx, now).unwrap();
    let (pem, _) = bundle_pem(&root_dir, false, now).unwrap();
    let bundle = SimRoots::parse(pem.as_bytes()).unwrap();
    let forms: Vec<_> = bundle.roots().iter().map(SimRoot::form).collect();
    assert_eq!(forms, [Some(SimFormat::Nitro), Some(SimFormat::Tdx)]);
    assert_eq!(
        bundle.of_form(SimFormat::Tdx).unwrap().der(),
        tdx_root.certificate_der()
    );
    assert!(
        bundle
            .of_form(SimFormat::Tdx)
            .unwrap()
            .subject()
            .starts_with("CN=kolm simulated TEE TDX root (NOT A TEE)")
    );
    assert!(bundle.of_form(SimFormat::SevSnp).is_none());

    // The Nitro-form document passes with the bundle; with the TDX root
    // alone it is rejected, naming the missing root.
    let policy = Policy::production();
    let rd = [0x11; 64];
    let expect = Expectations::new(&policy).with_report_data(rd.to_vec());
    let doc = doc_at(&p, &rd, now);
    let at = nitro::parse_cose_document(&doc).unwrap().timestamp();
    sim::verify(&doc, Some(&bundle), &expect, at).unwrap();
    let tdx_only = SimRoots::parse(tdx_root.certificate_pem().as_bytes()).unwrap();
    let r = sim::verify(&doc, Some(&tdx_only), &expect, at).unwrap_err();
    assert_eq!(first_failure(&r), "sim.trust");
    let detail = &r.first_failure().unwrap().detail;
    assert!(
        detail.contains("has no root of the nitro form")
            && detail.contains("CN=kolm simulated TEE root (NOT A TEE)"),
        "{detail}"
    );

    // Two roots of one form, nine certificates, a foreign certificate in
    // the bundle, text between the blocks: refused.
    let twice = format!("{pem}{}", tdx_root.certificate_pem());
    assert!(matches!(
        SimRoots::parse(twice.as_bytes()),
        Err(SimRootError::Duplicate {
            form: SimFormat::Tdx
        })
    ));
    let other = tempfile::tempdir().unwrap();
    let nine: String = (0..9)
        .map(|i| {
            let (r, _) =
                EnclaveRoot::load_or_create(&other.path().join(i.to_string()), now).unwrap();
            r.certificate_pem()
        })
        .collect();
    assert!(matches!(
        SimRoots::parse(nine.as_bytes()),
        Err(SimRootError::Count { max: 8, .. })
    ));
    let aws = format!(
        "{pem}{}",
        kolm_enclave::attest::sim::root::pem_encode(nitro::AWS_NITRO_ROOT_G1_DER)
    );
    assert!(matches!(
        SimRoots::parse(aws.as_bytes()),
        Err(SimRootError::NotASimRoot { .. })
    ));
    let junk = format!(
        "{}junk\n{}",
        p.root().certificate_pem(),
        tdx_root.certificate_pem()
    );
    assert!(matches!(
        SimRoots::parse(junk.as_bytes()),
        Err(SimRootError::NotACertificate { .. })
    ));
    assert!(matches!(
        SimRoots::parse(b""),
        Err(SimRootError::NotACertificate { .. })
    ));
    // SimRoot::parse is for exactly one certificate.
    assert!(matches!(
        SimRoot::parse(pem.as_bytes()),
        Err(SimRootError::Count { count: 2, max: 1 })
    ));
}

fn rewrite(dest: &Path, files: Vec<(String, Vec<u8>)>) {
    container::write_canonical_zip(
        dest,
        files
            .into_iter()
            .map(|(n, b)| (n, EntryData::Bytes(b)))
            .collect(),
    )
    .unwrap();
}

#[test]
fn a_sealed_simulated_run_is_simulated_only_with_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&dir.path().join("root"));
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
    assert_eq!(index.files.len(), 1);
    assert_eq!(index.files[0].file.path, SIM_NITRO_DOC_PATH);
    assert_eq!(index.files[0].role, EvidenceRole::Attestation);

    // Without the root: rejected, and the reason names the switch.
    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, None)).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected, "{}", rep.to_table());
    let first = rep.first_failure().unwrap();
    assert_eq!(first.id, ArtifactCheck::Attestation.as_str());
    assert!(first.detail.contains("sim.trust"), "{}", first.detail);

    // With it: `simulated`, exit 1, loudly; never `verified`.
    let mut o = opts(SIM_POLICY, Some(trusted(&p)));
    o.previous = Some(r0.artifact.clone());
    let rep = verify_artifact(&r.artifact, &o).unwrap();
    let table = rep.to_table();
    assert_eq!(rep.verdict, Verdict::Simulated, "{table}");
    assert_eq!(rep.exit_code(), 1);
    assert_eq!(
        rep.status_of(ArtifactCheck::Attestation),
        Some(CheckStatus::Simulated)
    );
    assert_eq!(rep.status_of(ArtifactCheck::Time), Some(CheckStatus::Pass));
    assert_eq!(rep.status_of(ArtifactCheck::Chain), Some(CheckStatus::Pass));
    assert!(
        rep.checks
            .get(ArtifactCheck::Chain)
            .unwrap()
            .detail
            .contains("same guest identity"),
        "{table}"
    );
    assert_eq!(
        rep.warnings(),
        vec![ReportWarning::SimulatedTee {
            root_sha256: p.root().sha256()
        }]
    );
    assert!(table.contains("[SIM!] attestation"), "{table}");
    assert!(
        table.contains("WARNING: SIMULATED TEE, NOT A TEE"),
        "{table}"
    );
    assert!(
        table.contains("verdict: SIMULATED (attestation: SIMULATED TEE"),
        "{table}"
    );

    // --dangerous-allow-unattested accepts it as it accepts `none` (exit
    // 0), the verdict still says `simulated`; the policy must allow it.
    let mut o = opts(SIM_POLICY, Some(trusted(&p)));
    o.dangerous_allow_unattested = true;
    let rep = verify_artifact(&r.artifact, &o).unwrap();
    assert_eq!((rep.verdict, rep.exit_code()), (Verdict::Simulated, 0));
    assert!(
        rep.reason
            .as_deref()
            .unwrap()
            .starts_with("accepted WITHOUT hardware attestation")
    );
    let mut o = opts(NITRO_POLICY, Some(trusted(&p)));
    o.dangerous_allow_unattested = true;
    let rep = verify_artifact(&r.artifact, &o).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    assert_eq!(rep.first_failure().unwrap().id, "policy");

    // Another installation's root.
    let other = provider(&dir.path().join("other-root"));
    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, Some(trusted(&other)))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    assert!(
        rep.first_failure().unwrap().detail.contains("nitro.chain"),
        "{}",
        rep.to_table()
    );

    // Tampered: the other run's genuine document put in this artifact,
    // the (unsigned) index updated to match it.
    let swapped_doc = entries(&r0.artifact)
        .into_iter()
        .find(|(n, _)| n == SIM_NITRO_DOC_PATH)
        .unwrap()
        .1;
    let mut index = index.clone();
    let rec =
        kolm_format::seal::file_record(SIM_NITRO_DOC_PATH, &EntryData::Bytes(swapped_doc.clone()))
            .unwrap();
    index.files[0].file = rec;
    let mut forged = files.clone();
    for (n, b) in forged.iter_mut() {
        if n == SIM_NITRO_DOC_PATH {
            *b = swapped_doc.clone();
        } else if n == "evidence/index.json" {
            *b = index.to_canonical_bytes().unwrap();
        }
    }
    let forged_path = dir.path().join("swapped.zip");
    rewrite(&forged_path, forged);
    let rep = verify_artifact(&forged_path, &opts(SIM_POLICY, Some(trusted(&p)))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    let first = rep.first_failure().unwrap();
    assert_eq!(first.id, "attestation");
    assert!(
        first.detail.contains("nitro.binding.user_data"),
        "{}",
        first.detail
    );

    // Tampered: a metric changed after sealing.
    let mut m = manifest.clone();
    m.metrics.insert("eval_loss".into(), 0.001);
    let mut forged = files.clone();
    for (n, b) in forged.iter_mut() {
        if n == "manifest.json" {
            *b = m.to_canonical_bytes().unwrap();
        }
    }
    let forged_path = dir.path().join("metric.zip");
    rewrite(&forged_path, forged);
    let rep = verify_artifact(&forged_path, &opts(SIM_POLICY, Some(trusted(&p)))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    assert_ne!(rep.verdict, Verdict::Simulated);
}

/// The simulated TEE's evidence sealed under platform `nitro`: the
/// verifier refuses it even when the caller trusts the sim root.
struct LabelledNitro(SimulatedProvider);

impl AttestationProvider for LabelledNitro {
    fn platform(&self) -> Platform {
        Platform::Nitro
    }
    fn measurement(&self) -> Option<Vec<u8>> {
        self.0.measurement()
    }
    fn collateral(&self) -> Result<CollateralBundle, AttestError> {
        Ok(CollateralBundle::empty(Platform::Nitro))
    }
    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
        let doc = self.0.document(&DocumentRequest {
            user_data: report_data,
            nonce: None,
            public_key: None,
            at: OffsetDateTime::now_utc(),
        })?;
        Ok(EvidenceBundle {
            platform: Platform::Nitro,
            files: vec![("evidence/nitro.cose".into(), doc, EvidenceRole::Attestation)],
        })
    }
}

#[test]
fn sim_evidence_labelled_nitro_is_rejected_even_with_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let p = LabelledNitro(provider(&dir.path().join("root")));
    let root = trusted(&p.0);
    let r = seal(dir.path(), NITRO_POLICY, &p);
    let mut o = opts(NITRO_POLICY, Some(root));
    o.dangerous_any_measurement = true;
    o.dangerous_allow_unattested = true;
    let rep = verify_artifact(&r.artifact, &o).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected, "{}", rep.to_table());
    let first = rep.first_failure().unwrap();
    assert_eq!(first.id, "attestation");
    assert!(first.detail.contains("nitro.chain"), "{}", first.detail);
    assert!(
        first.detail.contains("kolm SIMULATED TEE root"),
        "{}",
        first.detail
    );
    assert!(rep.warnings().is_empty());
}

/// End to end through the binaries: `kolm-enclave run --attest sim`, the
/// root exported with `kolm-enclave sim-root`, `kolm-verify` with and
/// without `--dangerous-trust-sim-root`.
#[test]
fn kolm_enclave_run_attest_sim_then_kolm_verify() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("sim-root-dir");
    let out = dir.path().join("out");
    let enclave = enclave_exe();
    let verify = kolm_testkit::workspace_binary("kolm-verify");
    let demo_policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../enclave/demo/policy.toml");
    let demo_policy = demo_policy.to_str().unwrap();

    let (rc, stdout, stderr) = run_bin(
        &enclave,
        &["run", "--attest", "sim", "--out", out.to_str().unwrap()],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stdout}{stderr}");
    assert!(stdout.contains("platform simulated"), "{stdout}");
    assert!(stderr.contains("simulated TEE (NOT A TEE)"), "{stderr}");
    let artifact = out.join("demo-bigram-0.zip");
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(root_dir.join("key.pk8"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o777, 0o600);

    let pem = dir.path().join("ROOT.pem");
    let (rc, _, stderr) = run_bin(
        &enclave,
        &["sim-root", "--out", pem.to_str().unwrap()],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stderr}");
    assert!(stderr.contains("exported"), "{stderr}");
    // The same root as the one the run created (not a new one).
    let root = SimRoots::parse(&std::fs::read(&pem).unwrap()).unwrap();
    assert_eq!(
        std::fs::read_to_string(root_dir.join("root.pem")).unwrap(),
        std::fs::read_to_string(&pem).unwrap()
    );

    let a = artifact.to_str().unwrap();
    let p = pem.to_str().unwrap();
    let (rc, stdout, _) = run_bin(&verify, &[a, "--policy", demo_policy], &root_dir);
    assert_eq!(rc, 1, "{stdout}");
    assert!(
        stdout.contains("verdict: REJECTED (attestation: simulated evidence rejected: sim.trust"),
        "{stdout}"
    );

    let (rc, stdout, stderr) = run_bin(
        &verify,
        &[a, "--policy", demo_policy, "--dangerous-trust-sim-root", p],
        &root_dir,
    );
    assert_eq!(rc, 1, "{stdout}");
    assert!(stdout.contains("verdict: SIMULATED"), "{stdout}");
    assert!(
        stdout.contains("WARNING: SIMULATED TEE, NOT A TEE"),
        "{stdout}"
    );
    assert!(stderr.contains("--dangerous-trust-sim-root"), "{stderr}");

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
    assert_eq!(doc["dangerous_trust_sim_root"], hex::encode(root.sha256()));
    let att = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "attestation")
        .unwrap();
    assert_eq!(att["status"], "simulated");
    assert_eq!(doc["fields"]["attestation"]["platform"], "simulated");
    assert_eq!(doc["fields"]["attestation"]["verdict"], "simulated");

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
    assert!(
        stdout.contains("verdict: SIMULATED (accepted WITHOUT hardware attestation"),
        "{stdout}"
    );

    // Another root file: a fresh installation's.
    let other_dir = dir.path().join("other-root-dir");
    let other_pem = dir.path().join("OTHER.pem");
    let (rc, _, stderr) = run_bin(
        &enclave,
        &["sim-root", "--out", other_pem.to_str().unwrap()],
        &other_dir,
    );
    assert_eq!(rc, 0, "{stderr}");
    assert!(stderr.contains("created"), "{stderr}");
    let (rc, stdout, _) = run_bin(
        &verify,
        &[
            a,
            "--policy",
            demo_policy,
            "--dangerous-trust-sim-root",
            other_pem.to_str().unwrap(),
        ],
        &root_dir,
    );
    assert_eq!(rc, 1, "{stdout}");
    assert!(stdout.contains("verdict: REJECTED"), "{stdout}");
    assert!(stdout.contains("nitro.chain"), "{stdout}");

    // The raw document through `kolm-verify nitro`: AWS root (rejected) or
    // the sim root (simulated).
    let mut f = std::fs::File::open(&artifact).unwrap();
    let zip = container::read_canonical_zip(&mut f).unwrap();
    let doc_bytes =
        container::read_entry(&mut f, zip.entry(SIM_NITRO_DOC_PATH).unwrap(), 1 << 16).unwrap();
    let doc_path = dir.path().join("sim-nitro.cose");
    std::fs::write(&doc_path, &doc_bytes).unwrap();
    let ts = nitro::parse_cose_document(&doc_bytes).unwrap().timestamp();
    let at = ts
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let d = doc_path.to_str().unwrap();
    let (rc, stdout, _) = run_bin(&verify, &["nitro", d, "--at", &at], &root_dir);
    assert_eq!(rc, 1, "{stdout}");
    assert!(stdout.contains("verdict: REJECT"), "{stdout}");
    let (rc, stdout, _) = run_bin(
        &verify,
        &["nitro", d, "--at", &at, "--dangerous-trust-sim-root", p],
        &root_dir,
    );
    assert_eq!(rc, 1, "{stdout}");
    assert!(stdout.contains("platform: simulated"), "{stdout}");
    assert!(stdout.contains("verdict: SIMULATED"), "{stdout}");

    // `none` still works and still says so.
    let none_out = dir.path().join("none-out");
    let (rc, stdout, stderr) = run_bin(
        &enclave,
        &[
            "run",
            "--attest",
            "none",
            "--out",
            none_out.to_str().unwrap(),
        ],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stdout}{stderr}");
    let none_artifact = none_out.join("demo-bigram-0.zip");
    let (rc, stdout, _) = run_bin(
        &verify,
        &[
            none_artifact.to_str().unwrap(),
            "--policy",
            demo_policy,
            "--dangerous-trust-sim-root",
            p,
        ],
        &root_dir,
    );
    assert_eq!(rc, 1, "{stdout}");
    assert!(stdout.contains("verdict: UNATTESTED"), "{stdout}");
}

fn tdx_provider(root_dir: &Path) -> SimulatedProvider {
    SimulatedProvider::open(root_dir, &enclave_exe(), SimFormat::Tdx).unwrap()
}

/// The TDX form: a v4 quote and its collateral pass every `tdx.*` check
/// (dcap-qvl's appraisal included) pinned to the installation's TDX format
/// root, as platform `simulated`; they are rejected without a root, with a
/// bundle lacking the TDX root, under another installation's root, as
/// real `tdx` evidence (Intel's root), with a quote byte changed, and
/// bound to other report data.
#[test]
fn tdx_form_evidence_passes_the_tdx_code_only_against_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    let p = tdx_provider(&root_dir);
    assert_eq!(p.format(), SimFormat::Tdx);
    let roots = bundle(&root_dir);
    assert_eq!(
        roots.of_form(SimFormat::Tdx).unwrap().der(),
        p.root().certificate_der()
    );
    let policy = Policy::production();
    let rd = [0x3c; 64];
    let expect = Expectations::new(&policy).with_report_data(rd.to_vec());
    let now = OffsetDateTime::now_utc();
    let collateral = p.tdx_collateral(now).unwrap();
    let quote = p.tdx_quote(&rd).unwrap();
    let ev = kolm_verifier::tdx::TdxEvidence {
        quote: &quote,
        collateral: &collateral,
    };
    let att = sim::verify_tdx(&ev, Some(&roots), &expect, now).unwrap_or_else(|r| {
        panic!("{}", r.reason);
    });
    assert_eq!(att.platform(), Platform::Simulated);
    let mrtd: [u8; 48] = p.measurement().unwrap().try_into().unwrap();
    assert_eq!(att.measurement(), &Measurement::SimMrtd(mrtd));
    assert_eq!(att.claims.tcb, Tcb::Simulated);
    assert!(!att.claims.debug);
    assert!(matches!(att.identity(), Identity::SimulatedTdx(id) if id.mrtd == mrtd));
    let o = Outcome::Accepted(&att);
    assert_eq!(o.verdict(true), EvidenceVerdict::Simulated);
    // dcap-qvl ran against the sim root and agreed; the TD pins were not
    // applied.
    use kolm_verifier::check::TdxCheck;
    assert_eq!(
        att.checks.status_of(SimCheck::Trust),
        Some(CheckStatus::Pass)
    );
    assert_eq!(
        att.checks.status_of(TdxCheck::Dcap),
        Some(CheckStatus::Pass)
    );
    assert_eq!(
        att.checks.status_of(TdxCheck::PolicyMrtd),
        Some(CheckStatus::Skip)
    );
    assert_eq!(
        att.checks.status_of(TdxCheck::BindingReportData),
        Some(CheckStatus::Pass)
    );

    let r = sim::verify_tdx(&ev, None, &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "sim.trust");
    let nitro_only = SimRoots::parse(
        kolm_enclave::attest::sim::SimRoot::load(&root_dir)
            .unwrap()
            .certificate_pem()
            .as_bytes(),
    )
    .unwrap();
    let r = sim::verify_tdx(&ev, Some(&nitro_only), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "sim.trust");
    let detail = &r.first_failure().unwrap().detail;
    assert!(
        detail.contains("no root of the tdx form")
            && detail.contains("kolm simulated TEE TDX root (NOT A TEE)"),
        "{detail}"
    );
    let other_dir = dir.path().join("other");
    tdx_provider(&other_dir);
    let r = sim::verify_tdx(&ev, Some(&bundle(&other_dir)), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "tdx.pck.chain");
    // As real TDX evidence: Intel's root, never the sim root.
    let r = kolm_verifier::tdx::verify(&ev, &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "tdx.pck.chain");
    // One byte of MRTD changed (offset 48 + 136): the signature breaks.
    let mut tampered = quote.clone();
    tampered[48 + 136] ^= 1;
    let bad = kolm_verifier::tdx::TdxEvidence {
        quote: &tampered,
        collateral: &collateral,
    };
    let r = sim::verify_tdx(&bad, Some(&roots), &expect, now).unwrap_err();
    assert_eq!(first_failure(&r), "tdx.quote.signature");
    // Another report data.
    let other_rd = Expectations::new(&policy).with_report_data(vec![0x3d; 64]);
    let r = sim::verify_tdx(&ev, Some(&roots), &other_rd, now).unwrap_err();
    assert_eq!(first_failure(&r), "tdx.binding.report_data");
    // Collateral past its nextUpdate.
    let late = now + time::Duration::days(31);
    let r = sim::verify_tdx(&ev, Some(&roots), &expect, late).unwrap_err();
    assert_eq!(first_failure(&r), "tdx.collateral.freshness");
}

/// A sealed run of the TDX form: the index holds the quote and its
/// collateral (bound in the manifest); `simulated` with the installation's
/// bundle, `rejected` without it or with a bundle lacking the TDX root.
#[test]
fn a_sealed_tdx_form_run_is_simulated_only_with_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    let p = tdx_provider(&root_dir);
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
    let paths: Vec<_> = index.files.iter().map(|f| f.file.path.as_str()).collect();
    assert_eq!(paths, [SIM_TDX_COLLATERAL_PATH, SIM_TDX_QUOTE_PATH]);
    assert_eq!(index.sim_format().unwrap(), Some(SimFormat::Tdx));

    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, Some(bundle(&root_dir)))).unwrap();
    let table = rep.to_table();
    assert_eq!(rep.verdict, Verdict::Simulated, "{table}");
    assert_eq!(rep.exit_code(), 1);
    assert!(
        table.contains("tdx-format sim evidence verified"),
        "{table}"
    );
    assert_eq!(
        rep.status_of(ArtifactCheck::Binding),
        Some(CheckStatus::Pass)
    );

    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, None)).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    assert!(rep.first_failure().unwrap().detail.contains("sim.trust"));
    let nitro_only = SimRoots::parse(
        kolm_enclave::attest::sim::SimRoot::load(&root_dir)
            .unwrap()
            .certificate_pem()
            .as_bytes(),
    )
    .unwrap();
    let rep = verify_artifact(&r.artifact, &opts(SIM_POLICY, Some(nitro_only))).unwrap();
    assert_eq!(rep.verdict, Verdict::Rejected);
    let detail = &rep.first_failure().unwrap().detail;
    assert!(detail.contains("no root of the tdx form"), "{detail}");
}

/// End to end: `kolm-enclave run --attest sim --sim-format tdx`, the
/// bundle exported with `sim-root`, `kolm-verify` with and without it; a
/// flipped quote byte is rejected; `--sim-format` without `--attest sim`
/// is a usage error naming the flag.
#[test]
fn kolm_enclave_run_sim_format_tdx_then_kolm_verify() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("sim-root-dir");
    let out = dir.path().join("out");
    let enclave = enclave_exe();
    let verify = kolm_testkit::workspace_binary("kolm-verify");
    let demo_policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../enclave/demo/policy.toml");
    let demo_policy = demo_policy.to_str().unwrap();
    let o = out.to_str().unwrap();

    let (rc, _, stderr) = run_bin(
        &enclave,
        &["run", "--attest", "none", "--sim-format", "tdx", "--out", o],
        &root_dir,
    );
    assert_eq!(rc, 2, "{stderr}");
    assert!(
        stderr.contains("--sim-format tdx is only meaningful with --attest sim"),
        "{stderr}"
    );
    let (rc, stdout, stderr) = run_bin(
        &enclave,
        &["run", "--attest", "sim", "--sim-format", "tdx", "--out", o],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stdout}{stderr}");
    assert!(root_dir.join("tdx").join("key.pk8").is_file());
    let artifact = out.join("demo-bigram-0.zip");
    let pem = dir.path().join("ROOT.pem");
    let (rc, _, stderr) = run_bin(
        &enclave,
        &["sim-root", "--out", pem.to_str().unwrap()],
        &root_dir,
    );
    assert_eq!(rc, 0, "{stderr}");
    assert!(stderr.contains("of the tdx form"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&pem)
            .unwrap()
            .matches("BEGIN CERTIFICATE")
            .count(),
        2
    );
    let a = artifact.to_str().unwrap();
    let p = pem.to_str().unwrap();
    let (rc, stdout, _) = run_bin(&verify, &[a, "--policy", demo_policy], &root_dir);
    assert_eq!(rc, 1, "{stdout}");
    assert!(stdout.contains("verdict: REJECTED"), "{stdout}");
    let (rc, stdout, stderr) = run_bin(
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
    assert_eq!(doc["verdict"], "simulated", "{stdout}");
    assert!(stderr.contains("(tdx form)"), "{stderr}");

    // One byte of the quote's TD report flipped (the index updated so the
    // container is consistent): rejected.
    let mut files = entries(&artifact);
    let quote = files
        .iter_mut()
        .find(|(n, _)| n == SIM_TDX_QUOTE_PATH)
        .unwrap();
    quote.1[48 + 200] ^= 0x80;
    let flipped = quote.1.clone();
    let (_, idx) = files
        .iter_mut()
        .find(|(n, _)| n == "evidence/index.json")
        .unwrap();
    let mut index = EvidenceIndex::from_canonical_bytes(idx).unwrap();
    let f = index
        .files
        .iter_mut()
        .find(|f| f.file.path == SIM_TDX_QUOTE_PATH)
        .unwrap();
    f.file =
        kolm_format::seal::file_record(SIM_TDX_QUOTE_PATH, &EntryData::Bytes(flipped)).unwrap();
    *idx = index.to_canonical_bytes().unwrap();
    let forged = dir.path().join("forged.zip");
    rewrite(&forged, files);
    let (rc, stdout, _) = run_bin(
        &verify,
        &[
            forged.to_str().unwrap(),
            "--policy",
            demo_policy,
            "--dangerous-trust-sim-root",
            p,
        ],
        &root_dir,
    );
    assert_eq!(rc, 1, "{stdout}");
    assert!(
        stdout.contains("verdict: REJECTED") && stdout.contains("tdx.quote.signature"),
        "{stdout}"
    );
}
