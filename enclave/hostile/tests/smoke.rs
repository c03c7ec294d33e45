//! The test programs themselves work outside the sandbox (so a failure under
//! the sandbox is the sandbox's doing). Running them here also makes
//! `cargo test` build both binaries for `kolm-enclave`'s hostile suite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: each scenario run natively takes
/// well under a second; a hung one fails with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

#[test]
fn harmless_runs_outside_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("a.txt"), "hello").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kolm-harmless"))
        .args([input.as_os_str(), output.as_os_str(), "4".as_ref()])
        .output_within(LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(output.join("result.txt").is_file());
}

#[test]
fn hostile_x32_scenario_runs_outside_the_sandbox() {
    let out = Command::new(env!("CARGO_BIN_EXE_kolm-hostile"))
        .arg("x32")
        .output_within(LIMIT);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scenario"], "x32");
}
