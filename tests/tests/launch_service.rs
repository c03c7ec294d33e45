//! `kolm-host launch`, `status` and `stop` of a long-lived local enclave
//! service (`docs/sealed-run.md`, "Long-lived enclaves"):
//!
//! - `launch` returns only after the service answered a `hello`, not when
//!   its socket appears: against a stand-in service that listens at once
//!   but answers late (`fake-kolm-enclave`, a binary of this crate, so
//!   `cargo test` builds it), the answer was under way before `launch`
//!   returned; one that dies once it listens is an error quoting its log;
//! - a socket file no live service answers on (with a record whose pid is
//!   dead) is removed and the service starts, and a job connects at once;
//!   a socket another process answers on is refused, named, and left to
//!   it;
//! - `status` exits 0 up, 1 down (no record, or its pid gone); `stop` 0
//!   when it stopped a running service, 1 when none ran (a dead one's
//!   record and socket then removed).
//!
//! Every child has a deadline; each test has its own runtime directory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kolm_policy::Platform;
use kolm_testkit::Deadline as _;
use kolm_transport::message::{Hello, Message, SUPPORTED_VERSIONS};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

fn bin(name: &str) -> PathBuf {
    kolm_testkit::workspace_binary(name)
}

struct Runtime {
    dir: tempfile::TempDir,
}

impl Runtime {
    fn new() -> Runtime {
        Runtime {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Where `launch` keeps sockets, logs and records.
    fn run_dir(&self) -> PathBuf {
        self.path("run")
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.run_dir().join(format!("{name}.sock"))
    }

    fn record(&self, name: &str) -> PathBuf {
        self.run_dir().join(format!("{name}.json"))
    }

    /// `kolm-host ARGS --runtime-dir RUN`.
    fn host(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("kolm-host"));
        c.args(args).arg("--runtime-dir").arg(self.run_dir());
        c
    }

    /// `kolm-host launch --name NAME --attest none` of `enclave`.
    fn launch_command(&self, name: &str, enclave: &Path) -> Command {
        let mut c = self.host(&["launch", "--name", name, "--attest", "none"]);
        c.arg("--state")
            .arg(self.path(&format!("{name}-state")))
            .arg("--enclave-bin")
            .arg(enclave);
        c
    }

    fn launch(&self, name: &str) -> Output {
        self.launch_command(name, &bin("kolm-enclave"))
            .output_within(LIMIT)
    }

    /// `status --json`: its exit code and document.
    fn status(&self, name: &str) -> (Option<i32>, Value) {
        let o = self
            .host(&["status", "--name", name, "--json"])
            .output_within(LIMIT);
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        });
        (o.status.code(), v)
    }

    /// `stop`: its exit code and stderr.
    fn stop(&self, name: &str) -> (Option<i32>, String) {
        let o = self.host(&["stop", "--name", name]).output_within(LIMIT);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

impl Drop for Runtime {
    /// A service a failing test left running is stopped (SIGTERM, then
    /// SIGKILL) rather than outliving the suite.
    fn drop(&mut self) {
        let dir = self.run_dir().display().to_string();
        for pid in kolm_testkit::processes_with(&[&dir]) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &pid.to_string()])
                .output_within(LIMIT);
        }
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits until `pid` runs nothing (gone, or a zombie nobody reaped).
fn gone(pid: u32) {
    let t = Instant::now();
    while !kolm_testkit::command_line(pid).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "pid {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `hello` as one frame (length, then the message), as the stand-in
/// service sends it.
fn hello_frame(key: [u8; 32]) -> Vec<u8> {
    let body = Message::Hello(Hello {
        versions: SUPPORTED_VERSIONS.to_vec(),
        platform: Platform::None,
        max_frame: 64 << 20,
        measurement: Vec::new(),
        identity_key: key,
        evidence: Vec::new(),
    })
    .encode()
    .unwrap();
    let mut frame = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// The stand-in listens at once and answers 1.5 s later (what a slow
/// provider would do); it notes each answer just before sending it. When
/// `launch` returns, the note is there: it waited for the hello, not for
/// the socket file. `status` then reports what that hello said.
#[test]
fn launch_returns_only_once_the_service_has_said_hello() {
    let rt = Runtime::new();
    let key = [0x3c; 32];
    std::fs::write(rt.path("hello.frame"), hello_frame(key)).unwrap();
    let mark = rt.path("answered");
    let started = Instant::now();
    let o = rt
        .launch_command("slow", &bin("fake-kolm-enclave"))
        .env("KOLM_FAKE_HELLO", rt.path("hello.frame"))
        .env("KOLM_FAKE_HELLO_DELAY_MS", "1500")
        .env("KOLM_FAKE_MARK", &mark)
        .output_within(LIMIT);
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        mark.exists(),
        "launch returned after {took:?}, before the service answered: {}",
        stderr(&o)
    );
    let (code, v) = rt.status("slow");
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["up"], true, "{v}");
    assert_eq!(v["platform"], "none", "{v}");
    assert_eq!(v["identity_key"], hex::encode(key), "{v}");
    let pid = u32::try_from(v["pid"].as_u64().unwrap()).unwrap();
    assert_eq!(rt.stop("slow").0, Some(0));
    gone(pid);
}

/// A service that dies as soon as it listens is an error that quotes the
/// last lines of its log, and nothing is recorded.
#[test]
fn a_service_that_dies_once_it_listens_fails_the_launch_with_its_log() {
    let rt = Runtime::new();
    let o = rt
        .launch_command("dies", &bin("fake-kolm-enclave"))
        .env("KOLM_FAKE_EXIT", "3")
        .output_within(LIMIT);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("exited before it listened"), "{err}");
    assert!(err.contains("exit status: 3"), "{err}");
    assert!(
        err.contains("exiting with status 3 (KOLM_FAKE_EXIT)"),
        "the log's last lines are not quoted: {err}"
    );
    assert!(!rt.record("dies").exists());
    let (code, v) = rt.status("dies");
    assert_eq!((code, &v["up"]), (Some(1), &Value::Bool(false)), "{v}");
}

/// A service that dies before it listens (its state directory is a file):
/// its stderr went to the log, and the launch error quotes the log.
#[test]
fn a_service_that_dies_before_it_listens_fails_the_launch_with_its_log() {
    let rt = Runtime::new();
    std::fs::create_dir_all(rt.run_dir()).unwrap();
    std::fs::write(rt.path("early-state"), b"a file, not a directory").unwrap();
    let o = rt.launch("early");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("exited before it listened"), "{err}");
    let tail = err
        .split_once("exited before it listened")
        .map(|(_, t)| t)
        .unwrap_or_default();
    assert!(
        tail.contains("early-state"),
        "the log's last lines are not quoted: {err}"
    );
    assert!(!rt.record("early").exists());
}

/// A socket file left by a service that is gone (its record naming a dead
/// pid) is removed and the new service starts on it: a job's connection
/// gets a hello at once, and the record names the new pid.
#[test]
fn launch_over_a_stale_socket_removes_it_and_starts() {
    let rt = Runtime::new();
    std::fs::create_dir_all(rt.run_dir()).unwrap();
    // Bound, then dropped: the file stays, nobody answers on it.
    drop(UnixListener::bind(rt.socket("t")).unwrap());
    assert!(std::os::unix::net::UnixStream::connect(rt.socket("t")).is_err());
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    let record = serde_json::json!({
        "name": "t",
        "pid": dead,
        "socket": rt.socket("t"),
        "state": rt.path("t-state"),
        "attest": "none",
    });
    std::fs::write(rt.record("t"), record.to_string()).unwrap();
    let o = rt.launch("t");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let hello = kolm_host::instances::hello(&rt.socket("t"), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("no hello right after launch: {e}\n{}", stderr(&o)));
    assert_eq!(hello.platform, Platform::None);
    let (code, v) = rt.status("t");
    assert_eq!(code, Some(0), "{v}");
    let pid = u32::try_from(v["pid"].as_u64().unwrap()).unwrap();
    assert_ne!(pid, dead);
    assert!(kolm_host::instances::alive(pid));
    assert_eq!(rt.stop("t").0, Some(0));
    gone(pid);
}

/// A socket another process answers on is refused, naming it, not taken
/// over and not reported as a launch: that process keeps it, nothing is
/// recorded and no service is left running for the name.
#[test]
fn launch_over_a_socket_in_use_is_refused_and_leaves_it_alone() {
    let rt = Runtime::new();
    std::fs::create_dir_all(rt.run_dir()).unwrap();
    let other = UnixListener::bind(rt.socket("busy")).unwrap();
    // The other service's log is its own: not truncated by the refusal.
    let log = rt.run_dir().join("busy.log");
    std::fs::write(&log, b"the other service's log\n").unwrap();
    let o = rt.launch("busy");
    let err = stderr(&o);
    assert_eq!(
        std::fs::read(&log).unwrap(),
        b"the other service's log\n",
        "the refused launch truncated the log"
    );
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a service already answers on"), "{err}");
    assert!(
        err.contains(&rt.socket("busy").display().to_string()),
        "{err}"
    );
    assert!(!err.contains("launched"), "{err}");
    assert!(!rt.record("busy").exists());
    // Still the other process's.
    let _client = std::os::unix::net::UnixStream::connect(rt.socket("busy")).unwrap();
    other.set_nonblocking(true).unwrap();
    assert!(
        other.accept().is_ok(),
        "the socket is no longer the other's"
    );
    assert!(
        kolm_testkit::processes_with(&[&rt.socket("busy").display().to_string()]).is_empty(),
        "a service was left running"
    );
    let (code, _) = rt.status("busy");
    assert_eq!(code, Some(1));
}

/// `status` and `stop` as documented: never launched (1 and 1), up (0),
/// its process killed behind the host's back (status 1 naming the pid;
/// stop 1, removing the record and socket; then 1 and 1), stopped (stop 0,
/// the process gone; then 1 and 1).
#[test]
fn stop_and_status_of_a_dead_or_stopped_service_exit_as_documented() {
    let rt = Runtime::new();
    let (code, v) = rt.status("svc");
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["up"], false, "{v}");
    assert!(v["why"].as_str().unwrap().contains("no record"), "{v}");
    let (code, err) = rt.stop("svc");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not running"), "{err}");

    // Killed behind the host's back.
    let o = rt.launch("svc");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (code, v) = rt.status("svc");
    assert_eq!((code, &v["up"]), (Some(0), &Value::Bool(true)), "{v}");
    let pid = u32::try_from(v["pid"].as_u64().unwrap()).unwrap();
    kolm_testkit::signal("KILL", pid);
    gone(pid);
    let (code, v) = rt.status("svc");
    assert_eq!((code, &v["up"]), (Some(1), &Value::Bool(false)), "{v}");
    assert!(
        v["why"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {pid} is not running")),
        "{v}"
    );
    let (code, err) = rt.stop("svc");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("was not running"), "{err}");
    assert!(!rt.record("svc").exists());
    assert!(std::fs::symlink_metadata(rt.socket("svc")).is_err());
    assert_eq!(rt.status("svc").0, Some(1));
    assert_eq!(rt.stop("svc").0, Some(1));

    // Stopped.
    let o = rt.launch("svc");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (code, v) = rt.status("svc");
    assert_eq!(code, Some(0), "{v}");
    let pid = u32::try_from(v["pid"].as_u64().unwrap()).unwrap();
    let (code, err) = rt.stop("svc");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("stopped svc (pid {pid})")), "{err}");
    gone(pid);
    let (code, v) = rt.status("svc");
    assert_eq!((code, &v["up"]), (Some(1), &Value::Bool(false)), "{v}");
    assert!(v["why"].as_str().unwrap().contains("no record"), "{v}");
    assert_eq!(rt.stop("svc").0, Some(1));
}
