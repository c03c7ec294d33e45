//! The `kolm-jobs` binary as the supervisor runs it: its command line is
//! `kolm_format::job_io::JobArgs` (the supervisor writes it with the same
//! code), what it does comes from the staged spec, and a command line the
//! supervisor never writes (a `--kind`, a missing `--spec`) is refused
//! with exit status 2 before anything runs.
//!
//! Being an integration test, this also makes `cargo test --workspace`
//! build the `kolm-jobs` binary, which the enclave's and kolm-tests' runs
//! find beside `kolm-enclave`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kolm_format::job_io::{JobArgs, METRICS_FILE};
use kolm_format::manifest::OUTPUTS_PREFIX;

fn args(dir: &Path, spec: &str) -> JobArgs {
    let (input, output) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&output).unwrap();
    std::fs::write(dir.join("job.toml"), spec).unwrap();
    JobArgs::new(dir.join("job.toml"), input, output)
}

fn kolm_jobs(args: &[std::ffi::OsString]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kolm-jobs"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_demo_runs_from_its_staged_spec() {
    let dir = tempfile::tempdir().unwrap();
    let a = args(
        dir.path(),
        "id = \"d\"\nkind = \"demo\"\ninputs = [\"c.txt\"]\neval_every = 2\n",
    );
    let corpus = "abab\nabab\nabab\nbaba\n";
    std::fs::write(a.input_dir.join("c.txt"), corpus).unwrap();
    let out = kolm_jobs(&a.to_args());
    assert!(out.status.success(), "{out:?}");
    // What the binary wrote is what the demo computes in-process.
    let in_process = kolm_jobs::demo_job::run(corpus, 2).unwrap();
    for (path, bytes) in &in_process.files {
        let rel = path.strip_prefix(OUTPUTS_PREFIX).unwrap();
        assert_eq!(
            &std::fs::read(a.output_dir.join(rel)).unwrap(),
            bytes,
            "{rel}"
        );
    }
    let metrics: BTreeMap<String, f64> =
        serde_json::from_slice(&std::fs::read(a.output_dir.join(METRICS_FILE)).unwrap()).unwrap();
    assert_eq!(metrics, in_process.metrics);
}

#[test]
fn a_command_line_the_supervisor_never_writes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = args(dir.path(), "id = \"d\"\nkind = \"demo\"\ninputs = []\n");
    let mut with_kind = vec!["--kind".into(), "demo".into()];
    with_kind.extend(a.to_args());
    for bad in [with_kind, a.to_args().split_off(2)] {
        let out = kolm_jobs(&bad);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("run by kolm-enclave"), "{stderr}");
    }
    assert_eq!(std::fs::read_dir(&a.output_dir).unwrap().count(), 0);
}

#[test]
fn an_unsupported_kind_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = args(dir.path(), "id = \"t\"\nkind = \"train\"\ninputs = []\n");
    let out = kolm_jobs(&a.to_args());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"train\" is not supported"), "{stderr}");
}
