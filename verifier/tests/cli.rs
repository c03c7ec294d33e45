//! The `kolm-verify` binary: exit codes, `--json`, usage errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::process::Command;

fn kolm_verify() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kolm-verify"))
}

const DEV_POLICY: &str =
    "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n";

#[test]
fn exit_codes_and_json_report() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let policy = dir.path().join("dev.toml");
    std::fs::write(&policy, DEV_POLICY).unwrap();

    // Unattested: exit 1, one JSON document naming the verdict.
    let out = kolm_verify()
        .arg(&art)
        .arg("--policy")
        .arg(&policy)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "kolm.verify-report.v1");
    assert_eq!(doc["verdict"], "unattested");
    assert_eq!(doc["checks"].as_array().unwrap().len(), 13);
    assert_eq!(doc["fields"]["platform"], "none");

    // Dangerous switch with a policy allowing `none`: exit 0 and a warning.
    let out = kolm_verify()
        .arg(&art)
        .args(["--policy"])
        .arg(&policy)
        .arg("--dangerous-allow-unattested")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("WARNING"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("verdict: VERIFIED"));

    // Tampered: exit 1, reason names the check.
    let mut bytes = std::fs::read(&art).unwrap();
    let n = bytes.len() / 3;
    bytes[n] ^= 0x20;
    let bad = dir.path().join("bad.zip");
    std::fs::write(&bad, &bytes).unwrap();
    let out = kolm_verify().arg(&bad).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["verdict"], "rejected");
    assert!(doc["reason"].as_str().unwrap().contains(':'));
}

#[test]
fn usage_and_io_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let art = common::build_default(dir.path());
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["/nonexistent/a.zip".into()],
        vec![art.clone().into(), "--at".into(), "yesterday".into()],
        vec![
            art.clone().into(),
            "--policy".into(),
            "/nonexistent.toml".into(),
        ],
        vec![art.clone().into(), "--bogus".into()],
        vec![],
    ];
    for args in cases {
        let out = kolm_verify().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    // A policy with an unknown key is a usage error naming the key.
    let bad_policy = dir.path().join("p.toml");
    std::fs::write(&bad_policy, format!("{DEV_POLICY}bogus_key = 1\n")).unwrap();
    let out = kolm_verify()
        .arg(&art)
        .arg("--policy")
        .arg(&bad_policy)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus_key"));
}
