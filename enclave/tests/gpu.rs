//! A CUDA job under the sandbox: `cuInit(0)` and `cuDeviceGetCount` through
//! Python's ctypes, with Landlock on (the default) and off. It needs a GPU:
//! `/dev/nvidia*` nodes, `libcuda.so.1` and `/usr/bin/python3`; otherwise it
//! prints `SKIP:` with the reason (as it does in CI).

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
    let loads = Command::new(PYTHON)
        .args(["-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"])
        .output()
        .is_ok_and(|o| o.status.success());
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

#[test]
fn cuda_initialises_under_the_sandbox_with_and_without_landlock() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP: {why}");
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
        assert!(!run.record.landlock.status.starts_with("error"));
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
