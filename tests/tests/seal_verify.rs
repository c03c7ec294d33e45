//! Whole runs: the enclave seals with the verifier's code, the verifier reads
//! it back; chain links across runs; refusals leave nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use kolm_enclave::attest::NoneProvider;
use kolm_enclave::run::{self, RunError, RunRequest};
use kolm_format::container::{self, EntryData};
use kolm_format::evidence::EvidenceIndex;
use kolm_format::hexbytes::HexBytes;
use kolm_format::manifest::Manifest;
use kolm_policy::Policy;
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::check::ArtifactCheck;
use kolm_verifier::report::{CheckStatus, Verdict};

const SPEC: &[u8] = b"id = \"t\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\neval_every = 3\n";
const POLICY: &str =
    "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n";

fn setup(dir: &Path) {
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(
        dir.join("in/corpus.txt"),
        "the quick brown fox\njumps over\nthe lazy dog\nand the fox\nruns far away\nfrom the dog\n",
    )
    .unwrap();
}

/// The `kolm-enclave` binary (it runs the sandboxed job).
fn runtime_exe() -> PathBuf {
    kolm_testkit::workspace_binary("kolm-enclave")
}

fn run_once(dir: &Path) -> Result<run::RunResult, RunError> {
    let input_dir = dir.join("in");
    let out_dir = dir.join("out");
    let runtime = runtime_exe();
    let req = RunRequest {
        spec: SPEC,
        policy: POLICY.as_bytes(),
        input_dir: &input_dir,
        out_dir: &out_dir,
        runtime_exe: Some(&runtime),
        jobs_exe: None,
        fine_tune: Default::default(),
    };
    run::run(&req, &NoneProvider)
}

fn opts(previous: Option<&Path>) -> VerifyOptions {
    VerifyOptions {
        policy: Some(Policy::from_toml_str(POLICY).unwrap()),
        previous: previous.map(Path::to_path_buf),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    }
}

#[test]
fn a_run_seals_an_artifact_the_verifier_accepts_as_unattested() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let r = run_once(dir.path()).unwrap();
    let report = verify_artifact(&r.artifact, &opts(None)).unwrap();
    assert_eq!(report.verdict, Verdict::Unattested, "{}", report.to_table());
    assert_eq!(report.manifest_cid, Some(r.cid));
    assert!(r.metrics["eval_loss"].is_finite());
    // Input hashes are recorded, input bytes are not sealed.
    let zip = std::fs::read(&r.artifact).unwrap();
    assert!(!zip.windows(9).any(|w| w == b"lazy dog\n"));
}

#[test]
fn consecutive_runs_form_a_chain_and_rollback_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let r0 = run_once(dir.path()).unwrap();
    let r1 = run_once(dir.path()).unwrap();
    let r2 = run_once(dir.path()).unwrap();
    assert_eq!((r0.sequence, r1.sequence, r2.sequence), (0, 1, 2));
    let rep = verify_artifact(&r2.artifact, &opts(Some(&r1.artifact))).unwrap();
    assert_eq!(
        rep.status_of(ArtifactCheck::Chain),
        Some(CheckStatus::Pass),
        "{}",
        rep.to_table()
    );
    // Skipping a receipt is visible.
    let rep = verify_artifact(&r2.artifact, &opts(Some(&r0.artifact))).unwrap();
    assert_eq!(rep.first_failure().unwrap().id, "chain");

    // Roll the enclave state back to before r1: the next receipt claims to
    // follow r0 at sequence 1, which an auditor holding r1 sees as a fork.
    let state = dir.path().join("out").join(run::CHAIN_STATE_FILE);
    let rolled = format!("{{\"previous\":\"{}\",\"sequence\":1}}", r0.cid);
    std::fs::write(&state, rolled).unwrap();
    let forked = run_once(dir.path()).unwrap();
    let rep = verify_artifact(&forked.artifact, &opts(Some(&r1.artifact))).unwrap();
    assert_eq!(rep.first_failure().unwrap().id, "chain");
}

#[test]
fn the_enclave_refuses_a_platform_its_policy_forbids_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let input_dir = dir.path().join("in");
    let out_dir = dir.path().join("out");
    let runtime = runtime_exe();
    let production =
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\"]\n";
    let req = RunRequest {
        spec: SPEC,
        policy: production.as_bytes(),
        input_dir: &input_dir,
        out_dir: &out_dir,
        runtime_exe: Some(&runtime),
        jobs_exe: None,
        fine_tune: Default::default(),
    };
    let err = run::run(&req, &NoneProvider).unwrap_err();
    assert!(matches!(err, RunError::PolicyViolation(_)), "{err}");
    assert!(!out_dir.exists());
}

#[test]
fn bad_specs_and_inputs_are_named_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let input_dir = dir.path().join("in");
    let out_dir = dir.path().join("out");
    let runtime = runtime_exe();
    let cases: [(&[u8], &str); 4] = [
        (
            b"id = \"t\"\nkind = \"demo\"\ninputs = [\"missing.txt\"]\n",
            "missing.txt",
        ),
        (
            b"id = \"t\"\nkind = \"demo\"\ninputs = [\"../etc/passwd\"]\n",
            "../etc/passwd",
        ),
        (
            b"id = \"t\"\nkind = \"train\"\ninputs = []\n",
            "not supported",
        ),
        (
            b"id = \"t\"\nkind = \"demo\"\ninputs = []\nextra = 1\n",
            "extra",
        ),
    ];
    for (spec, needle) in cases {
        let req = RunRequest {
            spec,
            policy: POLICY.as_bytes(),
            input_dir: &input_dir,
            out_dir: &out_dir,
            runtime_exe: Some(&runtime),
            jobs_exe: None,
            fine_tune: Default::default(),
        };
        let err = run::run(&req, &NoneProvider).unwrap_err().to_string();
        assert!(err.contains(needle), "{err}");
        assert!(!out_dir.exists());
    }
}

/// Every entry of an artifact, by name.
fn entries(zip: &Path) -> Vec<(String, Vec<u8>)> {
    let mut f = std::fs::File::open(zip).unwrap();
    let c = container::read_canonical_zip(&mut f).unwrap();
    c.entries
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                container::read_entry(&mut f, e, 64 << 20).unwrap(),
            )
        })
        .collect()
}

/// A CBOR byte-string head for `len` bytes (RFC 8949, minimal).
fn bstr_head(len: usize) -> Vec<u8> {
    match len {
        0..=23 => vec![0x40 | len as u8],
        24..=0xff => vec![0x58, len as u8],
        0x100..=0xffff => vec![0x59, (len >> 8) as u8, len as u8],
        _ => {
            let mut v = vec![0x5a];
            v.extend((len as u32).to_be_bytes());
            v
        }
    }
}

/// Issue 12 item 8, end to end: a forger takes a sealed artifact, claims
/// different results in the manifest, names the Ed25519 identity point as
/// signer and "signs" with R = identity, S = 0, which satisfies the
/// equation for every message. Everything else is made consistent (CID,
/// report data, checksums unchanged). Before strict verification this
/// artifact passed every check (verdict `unattested`, like the genuine
/// one); now the receipt signature check refuses it.
#[test]
fn an_identity_key_forgery_of_a_sealed_artifact_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let r = run_once(dir.path()).unwrap();
    let mut files = entries(&r.artifact);
    let get = |files: &[(String, Vec<u8>)], n: &str| {
        files.iter().find(|(p, _)| p == n).unwrap().1.clone()
    };
    let mut manifest = Manifest::from_canonical_bytes(&get(&files, "manifest.json")).unwrap();
    // The enclave seals receipt v2: the forgery uses v2's names throughout.
    let version = manifest.version().unwrap();
    assert_eq!(version, kolm_format::version::SpecVersion::V2);
    manifest.metrics.insert("eval_loss".into(), 0.001);
    let mut identity = [0u8; 32];
    identity[0] = 1;
    manifest.signer.public_key = HexBytes(identity);
    let manifest_bytes = manifest.to_canonical_bytes().unwrap();
    let cid = manifest.content_id().unwrap();
    let mut index =
        EvidenceIndex::from_canonical_bytes(&get(&files, "evidence/index.json")).unwrap();
    index.manifest_cid = cid;
    index.report_data = HexBytes(kolm_format::binding::report_data_for(version, &cid));
    let protected = kolm_format::receipt::protected_header_bytes_for(version, &identity);
    let mut receipt = vec![0xd2, 0x84];
    receipt.extend(bstr_head(protected.len()));
    receipt.extend(&protected);
    receipt.push(0xa0);
    receipt.extend(bstr_head(manifest_bytes.len()));
    receipt.extend(&manifest_bytes);
    receipt.extend([0x58, 0x40, 0x01]);
    receipt.extend([0u8; 63]);
    for (name, bytes) in files.iter_mut() {
        match name.as_str() {
            "manifest.json" => *bytes = manifest_bytes.clone(),
            "evidence/index.json" => *bytes = index.to_canonical_bytes().unwrap(),
            "receipt.cose" => *bytes = receipt.clone(),
            _ => {}
        }
    }
    let forged = dir.path().join("forged.zip");
    container::write_canonical_zip(
        &forged,
        files
            .into_iter()
            .map(|(n, b)| (n, EntryData::Bytes(b)))
            .collect(),
    )
    .unwrap();
    let report = verify_artifact(&forged, &opts(None)).unwrap();
    assert_eq!(report.verdict, Verdict::Rejected, "{}", report.to_table());
    let first = report.first_failure().unwrap();
    assert_eq!(first.id, ArtifactCheck::ReceiptSignature.as_str());
    assert!(first.detail.contains("small order"), "{}", first.detail);
}

/// A fine-tune spec is read by its own strict reader before any work: an
/// invalid one is refused naming the key and line; a valid one whose input
/// is missing is refused naming the input. Nothing is written either way
/// (the runs themselves: tests/tests/fine_tune.rs).
#[test]
fn fine_tune_specs_are_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let input_dir = dir.path().join("in");
    let out_dir = dir.path().join("out");
    let runtime = runtime_exe();
    let valid = "id = \"ft\"\nkind = \"fine-tune\"\ninputs = [\"corpus.txt\", \"held.txt\"]\n\
                 [model]\ninit = \"random\"\nconfig = \"tiny\"\nseed = 1\n\
                 [data]\nformat = \"text\"\ntrain = [\"corpus.txt\"]\n\
                 [method]\nkind = \"full\"\n\
                 [train]\nsteps = 10\nbatch = 2\nseq_len = 32\nlr = 0.001\nseed = 1\ndevice = \"cpu\"\n\
                 [eval]\nheldout = [\"held.txt\"]\nqa_questions = 4\n\
                 latency_budget_tokens_per_s = 10.0\nmax_new_tokens = 8\n";
    let invalid = valid.replace("lr = 0.001", "lr = 5.0");
    for (spec, needle) in [
        (valid.to_string(), "input held.txt"),
        (
            invalid,
            "`train.lr` (line 17): must be > 0 and < 1, found 5",
        ),
    ] {
        let req = RunRequest {
            spec: spec.as_bytes(),
            policy: POLICY.as_bytes(),
            input_dir: &input_dir,
            out_dir: &out_dir,
            runtime_exe: Some(&runtime),
            jobs_exe: None,
            fine_tune: Default::default(),
        };
        let err = run::run(&req, &NoneProvider).unwrap_err();
        assert!(
            matches!(err, RunError::Spec(_) | RunError::Input { .. }),
            "{err}"
        );
        assert!(err.to_string().contains(needle), "{err}");
        assert!(!out_dir.exists());
    }
}
