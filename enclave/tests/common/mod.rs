//! Helpers for the sandbox integration tests: locate the binaries, run
//! `kolm-enclave sandbox-exec`, read its record and the program's report.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::sync::Mutex;
use std::time::Duration;

use kolm_enclave::sandbox::SandboxRecord;
use kolm_testkit::Deadline as _;
use serde_json::Value;

/// The most one `sandbox-exec` run of a test may take: the longest
/// scenario takes about 5 s on a 2-core machine under full load, so this
/// never flakes, and a hung run is a `DEADLINE` failure with the stuck
/// processes' kernel stacks in minutes (issue 20 section 6), not hours.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The most building `kolm-hostile` may take.
const BUILD_LIMIT: Duration = Duration::from_secs(1800);

/// The `kolm-enclave` binary: `KOLM_TEST_BIN_DIR/kolm-enclave` when that is
/// set (test executables staged onto a machine without cargo, such as the
/// GPU machine), else the one cargo built for this test.
pub fn enclave() -> PathBuf {
    match std::env::var_os(BIN_DIR_ENV) {
        Some(dir) => Path::new(&dir).join("kolm-enclave"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_kolm-enclave")),
    }
}

/// Where staged binaries are (`kolm-enclave`, `kolm-jobs`, `kolm-hostile`,
/// `kolm-harmless`); nothing is built when it is set.
const BIN_DIR_ENV: &str = "KOLM_TEST_BIN_DIR";

/// A `kolm-hostile` binary (`kolm-hostile` or `kolm-harmless`), built next
/// to `kolm-enclave`. `cargo test --workspace` builds it; with `-p
/// kolm-enclave` alone it is built here once.
pub fn test_program(name: &str) -> PathBuf {
    built(name, "kolm-hostile")
}

/// The job binary (`kolm-jobs`) the sandbox execs, built next to
/// `kolm-enclave` as [`test_program`] is: a run finds it there by default.
pub fn jobs() -> PathBuf {
    built("kolm-jobs", "kolm-jobs")
}

/// The binary `name` of `package`, next to `kolm-enclave`; the package is
/// built once per test process (unless the binaries are staged).
fn built(name: &str, package: &'static str) -> PathBuf {
    static BUILT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let dir = enclave()
        .parent()
        .expect("binary has a directory")
        .to_path_buf();
    let path = dir.join(name);
    if std::env::var_os(BIN_DIR_ENV).is_some() {
        assert!(path.is_file(), "{} is missing", path.display());
        return path;
    }
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.contains(&package) {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--locked", "--quiet", "-p", package]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        // Behind other builds on the shared target directory's lock this
        // can take many minutes; a build that never ends still fails.
        let status = cmd.status_within(BUILD_LIMIT);
        assert!(status.success(), "cargo build -p {package} failed");
        built.push(package);
    }
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// A directory under the system temp dir that the job uid can traverse.
pub fn shared_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix("kolm-sandbox-test-")
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir()
        .expect("tempdir")
}

/// Makes `dir` (created if needed) writable by anyone: the job's output.
pub fn writable_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
}

/// One `sandbox-exec` run.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub record: SandboxRecord,
    /// The program's last JSON line on stdout (Null if none).
    pub report: Value,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Every attempt named `what` in the program's report.
    pub fn attempts(&self) -> Vec<(String, i64, i64)> {
        self.report["attempts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        (
                            x["what"].as_str().unwrap_or_default().to_string(),
                            x["ret"].as_i64().unwrap_or(0),
                            x["errno"].as_i64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn expect_counted(&self) -> u64 {
        self.report["expect_counted"]
            .as_u64()
            .expect("expect_counted")
    }

    /// The program's expected per-family counts, with the sandbox's names.
    pub fn expect_families(&self) -> std::collections::BTreeMap<String, u64> {
        self.report["expect_families"]
            .as_object()
            .expect("expect_families")
            .iter()
            .map(|(k, v)| {
                (
                    kolm_enclave::sandbox::family_name(k.parse().expect("family number")),
                    v.as_u64().expect("count"),
                )
            })
            .collect()
    }

    /// The listener answered everything and outlived every process.
    pub fn assert_exact(&self) {
        let l = &self.record.listener;
        assert!(l.alive_whole_run, "{:?}", l);
        assert!(l.all_processes_gone, "{:?}", l);
        assert_eq!(l.withdrawn_before_read, 0, "{:?}", l);
        assert_eq!(l.notifications, self.record.counted.total());
        assert!(self.record.egress_blocked, "{:?}", self.record);
        self.assert_count_exact();
    }

    /// The record says its count is exact (issue 12 item 4): the run was
    /// bracketed by the init's sentinel calls and no filter kills.
    pub fn assert_count_exact(&self) {
        let e = &self.record.exactness;
        assert_eq!(
            e.blocked_total,
            kolm_enclave::sandbox::CountExactness::Exact,
            "{e:?}"
        );
        assert!(e.lower_bound_because.is_empty(), "{e:?}");
    }
}

/// `kolm-enclave sandbox-exec <opts> --record R -- program args...`.
pub fn sandbox_exec(opts: &[&str], program: &Path, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let record_path = dir.path().join("record.json");
    let out: Output = Command::new(enclave())
        .arg("sandbox-exec")
        .arg("--record")
        .arg(&record_path)
        .args(opts)
        .arg("--")
        .arg(program)
        .args(args)
        .output_within(RUN_LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let record_bytes = std::fs::read(&record_path)
        .unwrap_or_else(|e| panic!("no record ({e}); status {}; stderr:\n{stderr}", out.status));
    // The strict reader: schema, no unknown fields, blocked_total equal to
    // the sum of its parts.
    let record = SandboxRecord::from_json_bytes(&record_bytes).expect("record parses");
    let report = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    Run {
        status: out.status,
        record,
        report,
        stdout,
        stderr,
    }
}

/// Runs a `kolm-hostile` scenario.
pub fn hostile(opts: &[&str], args: &[&str]) -> Run {
    sandbox_exec(opts, &test_program("kolm-hostile"), args)
}

/// The pids of `pid`'s children, from every thread's `children` list.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.filter_map(Result::ok) {
            if let Ok(list) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(
                    list.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// Whether this test runs as root (the namespaces need it).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}

/// The `families` scenario's checks: every socket refused with EACCES
/// (AF_UNIX allowed unless `strict`), each counted, per family, exactly.
pub fn check_family_sweep(run: &Run, strict: bool) {
    assert!(run.status.success(), "{}", run.stderr);
    run.assert_exact();
    for (what, ret, errno) in run.attempts() {
        // AF_UNIX sockets are allowed by default; the strict profile refuses
        // socket(AF_UNIX) but still allows AF_UNIX pairs (no address, no
        // way out).
        let unix = what.contains("AF_UNIX");
        if unix && (!strict || what.starts_with("socketpair")) {
            assert!(ret >= 0, "{what}: ret {ret} errno {errno}");
        } else {
            assert_eq!((ret, errno), (-1, libc::EACCES as i64), "{what}");
        }
    }
    let rec = &run.record;
    assert_eq!(rec.blocked_total, run.expect_counted());
    assert_eq!(rec.counted.by_family, run.expect_families());
    assert_eq!(rec.counted.by_syscall["socketpair"], 1);
    assert_eq!(
        rec.counted.by_syscall["socket"],
        run.expect_counted() - 1,
        "{:?}",
        rec.counted
    );
    // The sweep covers everything the issue lists.
    for family in [
        "AF_INET",
        "AF_INET6",
        "AF_PACKET",
        "AF_NETLINK",
        "AF_VSOCK",
        "AF_XDP",
        "AF_ALG",
        "AF_2147483650",
        "AF_4294967295",
    ] {
        assert!(rec.counted.by_family.contains_key(family), "{family}");
    }
}

/// A pathname unix socket of the host that anyone may connect to: only
/// the sandbox stands in the way.
pub fn host_unix_listener(
    dir: &std::path::Path,
) -> (std::os::unix::net::UnixListener, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("host-daemon.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Anyone may connect: only the sandbox stands in the way.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    l.set_nonblocking(true).unwrap();
    (l, path)
}

/// Nobody connected to `l`.
pub fn nothing_connected(l: &std::os::unix::net::UnixListener) {
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the job reached the host's unix socket: {other:?}"),
    }
}
