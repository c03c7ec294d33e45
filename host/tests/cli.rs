//! `kolm-host run --dry-run`: reads and checks the job, starts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::process::Command;

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kolm-host"))
}

#[test]
fn dry_run_starts_nothing_and_names_the_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    for f in ["job.toml", "corpus.txt", "policy.toml"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let job = dir.path().join("job.toml");
    let o = host()
        .args([
            "run",
            "--dry-run",
            "--json",
            "--enclave-bin",
            "/nonexistent",
        ])
        .arg(&job)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["event"], "plan");
    assert_eq!(plan["inputs"][0]["name"], "corpus.txt");
    assert_eq!(plan["inputs"][0]["size"], 1250);
    assert_eq!(plan["input_bytes"], 1250);
    // A missing input fails before anything starts, naming it (exit 2).
    std::fs::remove_file(dir.path().join("corpus.txt")).unwrap();
    let o = host()
        .args(["run", "--dry-run"])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("corpus.txt"));
}

#[test]
fn unbuilt_platforms_and_a_missing_enclave_are_clear_errors() {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart/job.toml");
    let o = host()
        .args(["run", "--platform", "nitro"])
        .arg(&src)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not built yet"));
    let o = host()
        .args(["run", "--enclave-bin", "/nonexistent/kolm-enclave"])
        .arg(&src)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/kolm-enclave"));
}

#[test]
fn bundle_inspect_reads_what_the_verifier_reads() {
    let Some(root) = kolm_testkit::samples("sev-snp/expected.json") else {
        return;
    };
    let sample = root.join("sev-snp/milan-v2-gosevguest");
    let dir = tempfile::tempdir().unwrap();
    let inspect = |dir: &std::path::Path| {
        host()
            .args(["bundle", "inspect", "--json"])
            .arg(dir)
            .output()
            .unwrap()
    };
    // Empty: nothing to use.
    let o = inspect(dir.path());
    assert_eq!(o.status.code(), Some(1));
    std::fs::copy(sample.join("vcek.der"), dir.path().join("snp-vcek.der")).unwrap();
    std::fs::copy(
        sample.join("ask_ark_milan.pem"),
        dir.path().join("snp-ask-ark.pem"),
    )
    .unwrap();
    let o = inspect(dir.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert!(
        items.iter().all(|i| i["kind"] == "x509-certificates"),
        "{v}"
    );
    assert!(v["common_window"].is_array(), "{v}");
    // A file that is not collateral is named unknown: exit 1.
    std::fs::write(dir.path().join("tdx-collateral.json"), b"{}").unwrap();
    let o = inspect(dir.path());
    assert_eq!(o.status.code(), Some(1));
}
