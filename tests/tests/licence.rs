//! Licence checks for the workspace itself (third-party licences are
//! `cargo deny check licenses`'s job, see `deny.toml`).
//!
//! - every workspace member declares `license = "Apache-2.0"`;
//! - the root `LICENSE` file is the Apache License 2.0 text;
//! - every `Cargo.lock` package without a `source` (a path crate) is a
//!   workspace member, so the SBOM's `licenseDeclared: Apache-2.0` for path
//!   crates (`kolm_enclave::sbom::WORKSPACE_LICENSE`) is true.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: `cargo` may wait for the shared
/// target directory and registry locks behind other builds; a hung one fails
/// with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(900);

const LICENSE: &str = "Apache-2.0";

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kolm-tests lives one level below the workspace root")
        .to_path_buf()
}

/// `(name, manifest_path, license)` of every workspace member.
fn workspace_members() -> Vec<(String, String, Option<String>)> {
    let args = ["metadata", "--format-version", "1", "--no-deps", "--locked"];
    let output = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(workspace_root())
        .output_within(LIMIT);
    assert!(
        output.status.success(),
        "cargo {args:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let packages = metadata["packages"]
        .as_array()
        .expect("cargo metadata has a packages array");
    assert!(!packages.is_empty(), "cargo metadata listed no packages");
    packages
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("package name").to_owned(),
                p["manifest_path"]
                    .as_str()
                    .expect("manifest path")
                    .to_owned(),
                p["license"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// Names of the `[[package]]` entries of a `Cargo.lock` with no `source`.
fn path_packages_in_lock(lock: &str) -> BTreeSet<String> {
    lock.split("[[package]]")
        .skip(1)
        .filter(|entry| !entry.lines().any(|l| l.starts_with("source = ")))
        .filter_map(|entry| {
            entry.lines().find_map(|l| {
                l.strip_prefix("name = \"")
                    .and_then(|rest| rest.strip_suffix('"'))
                    .map(str::to_owned)
            })
        })
        .collect()
}

/// Why `text` is not the Apache License 2.0, if it is not.
fn apache_2_problem(text: &str) -> Option<&'static str> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next() != Some("Apache License") {
        return Some("first line is not `Apache License`");
    }
    if lines.next() != Some("Version 2.0, January 2004") {
        return Some("second line is not `Version 2.0, January 2004`");
    }
    if !text.contains("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION") {
        return Some("the terms and conditions are missing");
    }
    if !text.contains("END OF TERMS AND CONDITIONS") {
        return Some("the text is truncated (no `END OF TERMS AND CONDITIONS`)");
    }
    None
}

#[test]
fn every_member_is_apache_2() {
    let offenders: Vec<String> = workspace_members()
        .into_iter()
        .filter(|(_, _, license)| license.as_deref() != Some(LICENSE))
        .map(|(name, path, license)| format!("{name} ({path}): license = {license:?}"))
        .collect();
    assert!(
        offenders.is_empty(),
        "workspace members must declare license = \"{LICENSE}\":\n{}",
        offenders.join("\n")
    );
}

#[test]
fn root_license_file_is_apache_2() {
    let path = workspace_root().join("LICENSE");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} must hold the Apache-2.0 text: {e}", path.display()));
    if let Some(problem) = apache_2_problem(&text) {
        panic!("{} is not the Apache-2.0 text: {problem}", path.display());
    }
}

#[test]
fn path_crates_in_lock_are_workspace_members() {
    let path = workspace_root().join("Cargo.lock");
    let lock = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let members: BTreeSet<String> = workspace_members()
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    let path_crates = path_packages_in_lock(&lock);
    assert!(path_crates.contains("kolm-enclave"));
    let strangers: Vec<&String> = path_crates.difference(&members).collect();
    assert!(
        strangers.is_empty(),
        "{}: path crates outside the workspace (the SBOM would declare them {LICENSE}): {strangers:?}",
        path.display()
    );
}

#[test]
fn checkers_reject_bad_input() {
    assert!(apache_2_problem("MIT License\n\nCopyright ...").is_some());
    assert!(apache_2_problem("   Apache License\n  Version 1.1\n").is_some());
    assert!(
        apache_2_problem(
            "Apache License\nVersion 2.0, January 2004\n\
             TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION\n"
        )
        .is_some()
    );
    assert!(
        apache_2_problem(
            "\n   Apache License\n   Version 2.0, January 2004\n\
             TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION\n\
             END OF TERMS AND CONDITIONS\n"
        )
        .is_none()
    );

    let lock = "version = 4\n\n[[package]]\nname = \"a\"\nversion = \"0.1.0\"\n\n\
                [[package]]\nname = \"b\"\nversion = \"1.0.0\"\n\
                source = \"registry+https://github.com/rust-lang/crates.io-index\"\n";
    assert_eq!(
        path_packages_in_lock(lock),
        BTreeSet::from(["a".to_owned()])
    );
}
