//! `kolm-host run --dry-run`: reads and checks the job, starts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::process::Command;

use kolm_testkit::Deadline as _;

/// The most one child of these tests may take: each command ends in about a
/// second; a hung one fails with `DEADLINE` (issue 20 section 6).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kolm-host"))
}

#[test]
fn dry_run_starts_nothing_and_names_the_inputs() {
    let (dir, job) = quickstart();
    let o = host()
        .args([
            "run",
            "--dry-run",
            "--json",
            "--enclave-bin",
            "/nonexistent",
        ])
        .arg(&job)
        .output_within(LIMIT);
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
        .output_within(LIMIT);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("corpus.txt"));
}

#[test]
fn incomplete_recipes_and_a_missing_enclave_are_clear_errors() {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart/job.toml");
    let o = host()
        .args(["run", "--platform", "nitro"])
        .arg(&src)
        .output_within(LIMIT);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--eif is required for --platform nitro"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = host()
        .args(["run", "--enclave-bin", "/nonexistent/kolm-enclave"])
        .arg(&src)
        .output_within(LIMIT);
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
            .output_within(LIMIT)
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

/// Exit 2 (an error), saying `text`.
fn fails_with(o: &std::process::Output, text: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(text), "{err:?} lacks {text:?}");
}

/// A job directory with the quickstart's files.
fn quickstart() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    for f in ["job.toml", "corpus.txt", "policy.toml"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let job = dir.path().join("job.toml");
    (dir, job)
}

/// An executable shell script standing in for nitro-cli or QEMU.
fn fake(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn dry_run_prints_the_launch_recipe_and_starts_nothing() {
    let (dir, job) = quickstart();
    let eif = dir.path().join("kolm.eif");
    std::fs::write(&eif, b"eif").unwrap();
    let eif = std::fs::canonicalize(eif).unwrap();
    // The launcher would leave a mark if it ran.
    let marker = dir.path().join("ran");
    let nitro = fake(
        dir.path(),
        "nitro-cli",
        &format!("touch {}", marker.display()),
    );
    let o = host()
        .args([
            "run",
            "--dry-run",
            "--json",
            "--platform",
            "nitro",
            "--cid",
            "21",
        ])
        .args(["--cpus", "4", "--memory-mib", "2048", "--eif"])
        .arg(&eif)
        .arg("--nitro-cli")
        .arg(&nitro)
        .arg(&job)
        .output_within(LIMIT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let argv: Vec<String> = serde_json::from_value(plan["argv"].clone()).unwrap();
    assert_eq!(
        argv,
        [
            nitro.display().to_string(),
            "run-enclave".into(),
            "--eif-path".into(),
            eif.display().to_string(),
            "--cpu-count".into(),
            "4".into(),
            "--memory".into(),
            "2048".into(),
            "--enclave-cid".into(),
            "21".into(),
        ]
    );
    assert_eq!(plan["connect"], "vsock://21:5005");
    assert!(!marker.exists());

    // Text: the command as one shell line, then the address.
    for f in ["OVMF.fd", "vmlinuz"] {
        std::fs::write(dir.path().join(f), f).unwrap();
    }
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let o = host()
        .args(["run", "--dry-run", "--platform", "qemu-snp", "--cid", "9"])
        .arg("--firmware")
        .arg(root.join("OVMF.fd"))
        .arg("--kernel")
        .arg(root.join("vmlinuz"))
        .args(["--append", "console=ttyS0 quiet", "--runtime-dir"])
        .arg(&root)
        .arg(&job)
        .output_within(LIMIT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("would start: "))
        .unwrap();
    assert!(
        line.starts_with("qemu-system-x86_64 -accel kvm -cpu EPYC-v4 -smp 2 -m 4096M "),
        "{line}"
    );
    assert!(
        line.contains(
            "-object sev-snp-guest,id=sev0,policy=0x30000,cbitpos=51,reduced-phys-bits=1,kernel-hashes=on "
        ),
        "{line}"
    );
    assert!(line.contains(" -append 'console=ttyS0 quiet' "), "{line}");
    assert!(out.contains("then connect to: vsock://9:5005"), "{out}");

    // A refused option names its flag, exit 2, before anything runs.
    let o = host()
        .args([
            "run",
            "--dry-run",
            "--platform",
            "qemu-snp",
            "--snp-policy",
            "0xb0000",
        ])
        .arg("--firmware")
        .arg(root.join("OVMF.fd"))
        .arg("--kernel")
        .arg(root.join("vmlinuz"))
        .arg(&job)
        .output_within(LIMIT);
    fails_with(&o, "--snp-policy 0xb0000");
}

#[test]
fn a_failing_launcher_stops_the_run_naming_the_command_and_its_stderr() {
    let (dir, job) = quickstart();
    let eif = dir.path().join("kolm.eif");
    std::fs::write(&eif, b"eif").unwrap();
    let nitro = fake(
        dir.path(),
        "nitro-cli",
        "echo '[ E26 ] Insufficient memory requested.' >&2; exit 26",
    );
    let run_nitro = |extra: &[&str]| {
        host()
            .args(["run", "--platform", "nitro"])
            .args(extra)
            .arg("--eif")
            .arg(&eif)
            .arg("--nitro-cli")
            .arg(&nitro)
            .arg(&job)
            .output_within(LIMIT)
    };
    let o = run_nitro(&[]);
    fails_with(&o, &format!("{} run-enclave failed", nitro.display()));
    fails_with(&o, "exit status: 26");
    fails_with(&o, "E26 ] Insufficient memory requested.");

    for f in ["TDVF.fd", "vmlinuz"] {
        std::fs::write(dir.path().join(f), f).unwrap();
    }
    let qemu = fake(
        dir.path(),
        "qemu-system-x86_64",
        "echo 'qemu-system-x86_64: -object tdx-guest,id=tdx0: TDX is not supported' >&2; exit 1",
    );
    let o = host()
        .args(["run", "--platform", "qemu-tdx", "--firmware"])
        .arg(dir.path().join("TDVF.fd"))
        .arg("--kernel")
        .arg(dir.path().join("vmlinuz"))
        .arg("--qemu")
        .arg(&qemu)
        .arg("--runtime-dir")
        .arg(dir.path().join("run"))
        .arg(&job)
        .output_within(LIMIT);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{} failed", qemu.display())), "{err}");
    assert!(err.contains("TDX is not supported"), "{err}");

    // The host's say over a guest's provider is refused, not ignored.
    let o = run_nitro(&["--attest", "sim"]);
    fails_with(&o, "apply to local enclaves only");
}

#[test]
fn launch_refuses_platforms_other_than_local() {
    let o = host()
        .args(["launch", "--platform", "qemu-snp", "--name", "x"])
        .output_within(LIMIT);
    fails_with(&o, "long-lived local enclaves only");
    let o = host()
        .args(["launch", "--platform", "sgx"])
        .output_within(LIMIT);
    fails_with(&o, "expected local, nitro");
}
