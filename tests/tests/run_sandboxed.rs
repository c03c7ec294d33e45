//! The run path: the job runs as a separate sandboxed process, the sandbox
//! record is sealed into the artifact and summarised in the manifest, and a
//! policy requiring `egress.must_be_zero` accepts it. A job that fails, is
//! killed, or leaves a process behind is never sealed (issue 12 item 7).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use kolm_enclave::attest::NoneProvider;
use kolm_enclave::run::{self, NotSealable, RunError, RunRequest};
use kolm_enclave::sandbox::{RECORD_PATH, SandboxRecord};
use kolm_format::container;
use kolm_format::manifest::Manifest;
use kolm_policy::Policy;
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::check::ArtifactCheck;
use kolm_verifier::report::{CheckStatus, Verdict};

const SPEC: &[u8] = b"id = \"s\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\neval_every = 3\n";
const POLICY: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n\
                      [egress]\nmust_be_zero = true\n";

/// The `kolm-enclave` binary (it runs the sandboxed job).
fn runtime_exe() -> PathBuf {
    kolm_testkit::workspace_binary("kolm-enclave")
}

fn entry(zip: &Path, name: &str) -> Vec<u8> {
    let mut f = std::fs::File::open(zip).unwrap();
    let c = container::read_canonical_zip(&mut f).unwrap();
    let e = c.entry(name).unwrap().clone();
    container::read_entry(&mut f, &e, 16 << 20).unwrap()
}

#[test]
fn a_sealed_run_carries_its_sandbox_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(
        input.join("corpus.txt"),
        "the quick brown fox\njumps over\nthe lazy dog\nand the fox\nruns far away\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let exe = runtime_exe();
    let req = RunRequest {
        spec: SPEC,
        policy: POLICY.as_bytes(),
        input_dir: &input,
        out_dir: &out,
        runtime_exe: Some(&exe),
        jobs_exe: None,
        fine_tune: Default::default(),
    };
    let r = run::run(&req, &NoneProvider).unwrap();

    let manifest = Manifest::from_canonical_bytes(&entry(&r.artifact, "manifest.json")).unwrap();
    let summary = manifest
        .environment
        .sandbox
        .clone()
        .expect("sandbox summary");
    assert_eq!(summary.profile, "default");
    assert!(summary.egress_blocked);
    assert_eq!(summary.blocked_total, 0);
    assert_eq!(summary.record.path, RECORD_PATH);

    let record_bytes = entry(&r.artifact, RECORD_PATH);
    let record = SandboxRecord::from_json_bytes(&record_bytes).unwrap();
    assert_eq!(record.blocked_total, summary.blocked_total);
    assert_eq!(record.exit.code, Some(0));
    assert!(record.listener.alive_whole_run);
    assert!(record.listener.all_processes_gone);
    assert_eq!(manifest.job.exit_code, 0);
    assert_eq!(record.filters.len(), 3);
    // The sealing decision on this (real) record, and on the same record
    // saying what a failed or unfinished job would have left.
    assert_eq!(run::check_sealable(&record), Ok(0));
    let refused = |f: &dyn Fn(&mut SandboxRecord)| {
        let mut r = record.clone();
        f(&mut r);
        run::check_sealable(&r).unwrap_err()
    };
    assert_eq!(
        refused(&|r| r.listener.all_processes_gone = false),
        NotSealable::ProcessesSurvived
    );
    assert_eq!(
        refused(&|r| r.exit.code = Some(1)),
        NotSealable::ExitCode(1)
    );
    assert_eq!(
        refused(&|r| {
            r.exit.code = None;
            r.exit.signal = Some(9);
        }),
        NotSealable::Signal(9)
    );
    assert_eq!(refused(&|r| r.exit.code = None), NotSealable::NoExitStatus);
    assert!(matches!(
        refused(&|r| r.listener.alive_whole_run = false),
        NotSealable::ListenerFailed(_)
    ));
    let sums = String::from_utf8(entry(&r.artifact, "governance/SHA256SUMS")).unwrap();
    assert!(sums.contains(RECORD_PATH), "{sums}");

    let opts = VerifyOptions {
        policy: Some(Policy::from_toml_str(POLICY).unwrap()),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    let report = verify_artifact(&r.artifact, &opts).unwrap();
    assert_eq!(report.verdict, Verdict::Unattested, "{}", report.to_table());
    assert_eq!(
        report.status_of(ArtifactCheck::Policy),
        Some(CheckStatus::Pass)
    );

    // A limit on blocked attempts: shown kept when the count is exact (as
    // root, the run is bracketed by the init's sentinel calls), never when
    // it is only a lower bound (docs/sandbox.md, "Counting exactness").
    let limited = VerifyOptions {
        policy: Some(
            Policy::from_toml_str(&format!("{POLICY}max_blocked_attempts = 0\n")).unwrap(),
        ),
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    let report = verify_artifact(&r.artifact, &limited).unwrap();
    match record.exactness.blocked_total {
        kolm_format::sandbox_record::CountExactness::LowerBound => {
            assert_eq!(report.first_failure().unwrap().id, "policy");
            assert!(
                report.reason.as_deref().unwrap().contains("lower bound"),
                "{}",
                report.to_table()
            );
        }
        kolm_format::sandbox_record::CountExactness::Exact => {
            assert_eq!(record.blocked_total, 0);
            assert_eq!(
                report.status_of(ArtifactCheck::Policy),
                Some(CheckStatus::Pass),
                "{}",
                report.to_table()
            );
        }
    }
    let own_pid_namespace = record
        .hygiene
        .isolation
        .as_ref()
        .is_some_and(|i| i.pid_namespace == "private");
    if own_pid_namespace {
        assert_eq!(
            record.exactness.blocked_total,
            kolm_format::sandbox_record::CountExactness::Exact,
            "{:?}",
            record.exactness
        );
    }

    // Same job in-process gives the same outputs: the sandbox changes
    // nothing a well-behaved job computes.
    let text = std::fs::read_to_string(input.join("corpus.txt")).unwrap();
    let direct = kolm_jobs::demo_job::run(&text, 3).unwrap();
    assert_eq!(r.metrics, direct.metrics);
}

#[test]
fn a_runtime_that_is_not_kolm_enclave_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("corpus.txt"), "a\nb\nc\nd\n").unwrap();
    let out = dir.path().join("out");
    let not_runtime = Path::new("/bin/true");
    let jobs = kolm_testkit::workspace_binary("kolm-jobs");
    let req = RunRequest {
        spec: SPEC,
        policy: POLICY.as_bytes(),
        input_dir: &input,
        out_dir: &out,
        runtime_exe: Some(not_runtime),
        jobs_exe: Some(&jobs),
        fine_tune: Default::default(),
    };
    let err = run::run(&req, &NoneProvider).unwrap_err();
    assert!(matches!(err, run::RunError::Sandbox(_)), "{err}");
    assert!(!out.exists());
}

/// The job binary is looked for beside the runtime binary (or where
/// `jobs_exe` says): a missing one is refused before anything is staged,
/// naming the path and how to build it; nothing is written.
#[test]
fn a_missing_jobs_binary_is_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("corpus.txt"), "a\nb\nc\nd\n").unwrap();
    let out = dir.path().join("out");
    let exe = runtime_exe();
    let missing = dir.path().join("no-such-kolm-jobs");
    for (jobs_exe, named) in [
        (Some(missing.as_path()), missing.clone()),
        // /bin/true's directory has no kolm-jobs.
        (None, Path::new("/bin").join(run::JOBS_BINARY)),
    ] {
        let runtime = if jobs_exe.is_some() {
            exe.as_path()
        } else {
            Path::new("/bin/true")
        };
        let req = RunRequest {
            spec: SPEC,
            policy: POLICY.as_bytes(),
            input_dir: &input,
            out_dir: &out,
            runtime_exe: Some(runtime),
            jobs_exe,
            fine_tune: Default::default(),
        };
        let err = run::run(&req, &NoneProvider).unwrap_err();
        assert!(matches!(err, RunError::JobsExe { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&named.display().to_string()) && text.contains("--jobs-bin"),
            "{text}"
        );
        assert!(!out.exists());
    }
}

/// A job that exits non-zero (the demo job finds no evaluation line in a
/// one-line corpus and exits 1) is refused after the sandbox: no artifact,
/// no chain state, and the reason names the exit status.
#[test]
fn a_job_that_fails_is_not_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("corpus.txt"), "only one line\n").unwrap();
    let out = dir.path().join("out");
    let exe = runtime_exe();
    let req = RunRequest {
        spec: SPEC,
        policy: POLICY.as_bytes(),
        input_dir: &input,
        out_dir: &out,
        runtime_exe: Some(&exe),
        jobs_exe: None,
        fine_tune: Default::default(),
    };
    let err = run::run(&req, &NoneProvider).unwrap_err();
    assert!(
        matches!(err, RunError::NotSealable(NotSealable::ExitCode(1))),
        "{err}"
    );
    assert!(!out.exists());
}
