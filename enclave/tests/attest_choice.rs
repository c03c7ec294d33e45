//! `kolm-enclave run --attest`: a machine without a TEE device never falls
//! back from `auto` to `none`, and an unknown provider is named.

use std::process::Command;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: `kolm-enclave run` refusing at
/// once takes well under a second; a hung one fails with `DEADLINE` (issue 20
/// section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kolm-enclave"))
        .arg("run")
        .arg("--out")
        .arg(out_dir.path())
        .args(args)
        .output_within(LIMIT);
    let nothing_sealed = std::fs::read_dir(out_dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .all(|e| !e.file_name().to_string_lossy().ends_with(".zip"));
    assert!(nothing_sealed, "an artifact was written");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn auto_without_a_tee_device_is_an_error_not_none() {
    let present = [
        "/dev/nsm",
        "/dev/sev-guest",
        "/sys/kernel/config/tsm/report",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    if present {
        eprintln!("SKIP: this machine has a TEE device");
        return;
    }
    let (code, stderr) = run(&["--attest", "auto"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no TEE device found"), "{stderr}");
    assert!(stderr.contains("--attest sim or --attest none"), "{stderr}");
}

#[test]
fn an_unknown_provider_is_named() {
    let (code, stderr) = run(&["--attest", "snp"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("\"snp\""), "{stderr}");
}

#[test]
fn a_named_device_that_is_missing_is_an_error() {
    if std::path::Path::new("/dev/nsm").exists() {
        eprintln!("SKIP: this machine has /dev/nsm");
        return;
    }
    let (code, stderr) = run(&["--attest", "nitro"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--attest nitro"), "{stderr}");
}
