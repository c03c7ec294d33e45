//! A CUDA job under the sandbox: `cuInit(0)` and `cuDeviceGetCount` through
//! Python's ctypes, with Landlock on (the default) and off; and the hostile
//! suite's network and unix-socket attacks made by a job that has brought
//! CUDA up first (a context, device memory, a memset on the GPU), so the
//! driver's threads and sockets are alive while it attacks. It needs a GPU:
//! `/dev/nvidia*` nodes, `libcuda.so.1` and `/usr/bin/python3`; otherwise it
//! prints `SKIP:` with the reason (as it does in CI), or fails under
//! `KOLM_REQUIRE_GPU=1` (the GPU machine's runs).

mod common;

use std::path::Path;
use std::process::Command;

const PYTHON: &str = "/usr/bin/python3";

/// Prints `cuInit=<rc> devices=<n>`; the count only after a successful
/// `cuInit`.
const SCRIPT: &str = r#"import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)
n = ctypes.c_int(-1)
if rc == 0:
    assert cuda.cuDeviceGetCount(ctypes.byref(n)) == 0
print(f"cuInit={rc} devices={n.value}", flush=True)
"#;

/// Why this machine cannot run the check, if it cannot.
fn skip_reason() -> Option<String> {
    let nodes = std::fs::read_dir("/dev")
        .map(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.file_name().as_encoded_bytes().starts_with(b"nvidia"))
        })
        .unwrap_or(false);
    if !nodes {
        return Some("no /dev/nvidia* node (no GPU)".into());
    }
    if !Path::new(PYTHON).exists() {
        return Some(format!("{PYTHON} is missing"));
    }
    // Under a deadline: a driver that hangs on load is a failure, not a
    // hung suite (issue 20 section 6).
    let loads = Command::new(PYTHON)
        .args(["-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .is_ok_and(|c| {
            kolm_testkit::wait_within(
                c,
                "loading libcuda.so.1",
                std::time::Duration::from_secs(120),
            )
            .status
            .success()
        });
    if !loads {
        return Some("libcuda.so.1 cannot be loaded".into());
    }
    None
}

/// `(cuInit's return code, device count)` from the script's line.
fn parse(stdout: &str) -> Option<(i64, i64)> {
    let line = stdout.lines().find(|l| l.starts_with("cuInit="))?;
    let mut it = line.split_whitespace();
    let rc = it.next()?.strip_prefix("cuInit=")?.parse().ok()?;
    let n = it.next()?.strip_prefix("devices=")?.parse().ok()?;
    Some((rc, n))
}

/// Whether this machine cannot run the GPU checks: prints SKIP with the
/// reason, or fails when `KOLM_REQUIRE_GPU=1` says a GPU must be here.
fn skip() -> bool {
    let Some(why) = skip_reason() else {
        return false;
    };
    assert!(
        std::env::var("KOLM_REQUIRE_GPU").as_deref() != Ok("1"),
        "KOLM_REQUIRE_GPU=1 but {why}"
    );
    eprintln!("SKIP: {why}");
    true
}

/// The `{"gpu": ...}` line of a `kolm-hostile gpu-then` run: every driver
/// call it made returned 0, and it made all of them.
fn assert_gpu_up(run: &common::Run) {
    let line = run
        .stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .filter(|v| v.get("gpu").is_some())
        })
        .unwrap_or_else(|| panic!("no gpu line: {run:?}"));
    let rcs = line["gpu"].as_object().unwrap();
    let calls: Vec<&str> = rcs.keys().map(String::as_str).collect();
    for call in [
        "cuInit",
        "cuDeviceGet",
        "cuCtxCreate",
        "cuMemAlloc",
        "cuMemsetD8",
        "cuCtxSynchronize",
    ] {
        assert_eq!(
            rcs.get(call).and_then(|v| v.as_i64()),
            Some(0),
            "{call} in {calls:?}: {run:?}"
        );
    }
}

/// Issue 14 item 3: a job with CUDA up still cannot open a network socket
/// (every family refused and counted exactly, with Landlock and without),
/// nor reach a host daemon's pathname or abstract unix socket.
#[test]
fn a_gpu_job_still_cannot_reach_the_network_or_an_outside_unix_socket() {
    if skip() {
        return;
    }
    for opts in [&[][..], &["--dangerous-no-landlock"]] {
        let run = common::hostile(opts, &["gpu-then", "families"]);
        assert_gpu_up(&run);
        common::check_family_sweep(&run, false);
        eprintln!(
            "{opts:?}: blocked_total {} landlock {}",
            run.record.blocked_total, run.record.landlock.status
        );
    }
    let dir = common::shared_tempdir();
    let (listener, path) = common::host_unix_listener(dir.path());
    let run = common::hostile(&[], &["gpu-then", "unix-connect", path.to_str().unwrap()]);
    connect_refused(&run, &listener);

    use std::os::linux::net::SocketAddrExt;
    let name = format!("kolm-gpu-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let abstract_listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    abstract_listener.set_nonblocking(true).unwrap();
    let run = common::hostile(&[], &["gpu-then", "abstract-connect", &name]);
    connect_refused(&run, &abstract_listener);
}

/// A `gpu-then *-connect` run: CUDA came up, the connect failed, nothing
/// reached `listener`, the count is exact.
fn connect_refused(run: &common::Run, listener: &std::os::unix::net::UnixListener) {
    assert_gpu_up(run);
    common::nothing_connected(listener);
    run.assert_exact();
    let connect = run
        .attempts()
        .into_iter()
        .find(|(w, _, _)| w == "connect")
        .unwrap();
    assert_eq!(connect.1, -1, "{connect:?}");
}

#[test]
fn cuda_initialises_under_the_sandbox_with_and_without_landlock() {
    if skip() {
        return;
    }
    let dir = common::shared_tempdir();
    let script = dir.path().join("cuinit.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let tree = dir.path().to_str().unwrap();
    for opts in [&[][..], &["--dangerous-no-landlock"]] {
        let mut all = vec!["--read-only", tree];
        all.extend_from_slice(opts);
        let run = common::sandbox_exec(&all, Path::new(PYTHON), &[script.to_str().unwrap()]);
        let got = parse(&run.stdout);
        eprintln!(
            "{opts:?}: {got:?} landlock.status {} blocked_total {}",
            run.record.landlock.status, run.record.blocked_total
        );
        assert!(run.status.success(), "{opts:?}: {run:?}");
        let (rc, n) = got.unwrap_or_else(|| panic!("{opts:?}: no result: {run:?}"));
        assert_eq!(rc, 0, "{opts:?}: cuInit failed: {run:?}");
        assert!(n >= 1, "{opts:?}: no device");
        assert!(!run.record.landlock.status.to_string().starts_with("error"));
        // The driver's two AF_UNIX sockets are allowed; nothing is counted.
        assert_eq!(run.record.blocked_total, 0);
        run.assert_exact();
    }
}

#[test]
fn the_result_line_is_parsed() {
    assert_eq!(parse("x\ncuInit=0 devices=2\n"), Some((0, 2)));
    assert_eq!(parse("cuInit=304 devices=-1"), Some((304, -1)));
    assert_eq!(parse("Traceback"), None);
}
