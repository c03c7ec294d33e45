//! Whole runs: the enclave seals with the verifier's code, the verifier reads
//! it back; chain links across runs; refusals leave nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use kolm_enclave::attest::NoneProvider;
use kolm_enclave::run::{self, RunError, RunRequest};
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
        };
        let err = run::run(&req, &NoneProvider).unwrap_err().to_string();
        assert!(err.contains(needle), "{err}");
        assert!(!out_dir.exists());
    }
}
