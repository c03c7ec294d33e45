//! Test support shared by every crate's tests; a dev-dependency only.
//!
//! The real hardware evidence lives outside the repository, in
//! `../shared/attestation-samples/` beside the checkout (or wherever
//! [`SAMPLES_ENV`] points). Tests ask [`samples`] for it: when it is absent
//! they print `SKIP: ...` and return, unless [`REQUIRE_ENV`] is `1` (CI sets
//! it), in which case the absence is a test failure, so the samples can never
//! vanish silently.
//!
//! The real model and corpus (issue 14) are found the same way by
//! [`assets`]: `$KOLM_ASSETS` (default `~/.cache/kolm`, where
//! `scripts/fetch-assets.sh` puts them), `SKIP` when absent unless
//! [`REQUIRE_ASSETS_ENV`] is `1`.
#![forbid(unsafe_code)]

use std::path::PathBuf;

/// Environment variable naming the samples folder.
pub const SAMPLES_ENV: &str = "KOLM_SAMPLES_DIR";

/// Set to `1` to make a missing samples folder fail instead of skip.
pub const REQUIRE_ENV: &str = "KOLM_REQUIRE_SAMPLES";

/// The samples folder: [`SAMPLES_ENV`], else `../shared/attestation-samples`
/// beside the workspace.
pub fn samples_root() -> PathBuf {
    std::env::var_os(SAMPLES_ENV).map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/attestation-samples"
            ))
        },
        PathBuf::from,
    )
}

/// The samples folder if `marker` (a file path relative to it, such as
/// `nitro/expected.json`) exists. Otherwise prints `SKIP` and returns `None`;
/// panics instead when [`REQUIRE_ENV`] is `1`.
pub fn samples(marker: &str) -> Option<PathBuf> {
    let dir = samples_root();
    if dir.join(marker).is_file() {
        return Some(dir);
    }
    let why = format!(
        "attestation samples not found: {} is missing (set {SAMPLES_ENV})",
        dir.join(marker).display()
    );
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{why}, and {REQUIRE_ENV}=1 says they must be there");
    }
    skip(&why);
    None
}

/// Environment variable naming the asset cache (`scripts/fetch-assets.sh`).
pub const ASSETS_ENV: &str = "KOLM_ASSETS";

/// Set to `1` to make missing assets fail instead of skip.
pub const REQUIRE_ASSETS_ENV: &str = "KOLM_REQUIRE_ASSETS";

/// The asset cache: [`ASSETS_ENV`], else `~/.cache/kolm` (the default of
/// `scripts/fetch-assets.sh`); `None` when neither is set.
pub fn assets_root() -> Option<PathBuf> {
    std::env::var_os(ASSETS_ENV)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kolm")))
}

/// The path of asset `file` (relative to the cache, such as
/// `smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`) if it exists. Otherwise prints
/// `SKIP` with the reason and returns `None`; panics instead when
/// [`REQUIRE_ASSETS_ENV`] is `1`.
pub fn assets(file: &str) -> Option<PathBuf> {
    let why = match assets_root() {
        Some(root) if root.join(file).is_file() => return Some(root.join(file)),
        Some(root) => format!(
            "asset {} is missing (run scripts/fetch-assets.sh, or set {ASSETS_ENV})",
            root.join(file).display()
        ),
        None => format!("no asset cache: neither {ASSETS_ENV} nor HOME is set"),
    };
    if std::env::var(REQUIRE_ASSETS_ENV).is_ok_and(|v| v == "1") {
        panic!("{why}, and {REQUIRE_ASSETS_ENV}=1 says it must be there");
    }
    skip(&why);
    None
}

/// Prints `SKIP: <why>` straight to the stderr handle: libtest does not
/// capture it, so the reason shows in every run, not only in failing ones.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIP: {why}");
}

/// A binary of this workspace that `cargo test` built into the same target
/// profile directory as the running test (the one above its `deps/`), such as
/// `kolm-enclave`. Panics, naming the build command, when it is missing.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let path = exe
        .parent()
        .and_then(std::path::Path::parent)
        .map(|profile| profile.join(name))
        .unwrap_or_else(|| panic!("{} has no profile directory", exe.display()));
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p {name}`",
        path.display()
    );
    path
}

/// What a child run under a deadline ([`output_within`]) gave back.
pub use std::process::Output;

/// Runs `cmd` to its end, its stdout and stderr captured, and returns its
/// output; if it is still running after `limit`, kills it (and, when it
/// was started in a process group of its own, that group) and panics with
/// the command line, the time it ran and what it had printed. Every test
/// that runs a child uses this (or [`wait_within`]): a hung child is a
/// failing test with diagnostics, never a hung suite.
pub fn output_within(cmd: &mut std::process::Command, limit: std::time::Duration) -> Output {
    use std::process::Stdio;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    wait_within(child, &format!("{cmd:?}"), limit)
}

/// Waits for `child` (its stdout and stderr piped, or not) at most
/// `limit`, collecting what it prints; on timeout kills it (SIGKILL to
/// its pid and to the process group it leads, if it leads one) and
/// panics naming `what`, the time and the output so far.
pub fn wait_within(
    mut child: std::process::Child,
    what: &str,
    limit: std::time::Duration,
) -> Output {
    use std::io::Read;
    let start = std::time::Instant::now();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(None) => {
                kill_tree(child.id());
                let _ = child.kill();
                let _ = child.wait();
                let stdout = out.join().unwrap_or_default();
                let stderr = err.join().unwrap_or_default();
                panic!(
                    "DEADLINE: {what} still running after {:.1} s (limit {:.1} s); killed.\n\
                     --- stdout ---\n{}\n--- stderr ---\n{}",
                    start.elapsed().as_secs_f64(),
                    limit.as_secs_f64(),
                    tail(&stdout),
                    tail(&stderr)
                );
            }
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// SIGKILL to `pid`'s process group when `pid` leads one (a child started
/// with `process_group(0)`), else nothing: `kill(2)` through the `kill`
/// program, so this crate stays free of unsafe code and of libc.
fn kill_tree(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(std::process::Stdio::null())
        .status();
}

/// The last 8 KiB of `bytes`, as text.
fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(8 << 10);
    String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_child_within_its_deadline_gives_its_output() {
        let o = output_within(
            std::process::Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            std::time::Duration::from_secs(20),
        );
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.stdout, b"out\n");
        assert_eq!(o.stderr, b"err\n");
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_and_the_test_fails_with_its_output() {
        let started = std::time::Instant::now();
        let r = std::panic::catch_unwind(|| {
            output_within(
                std::process::Command::new("sh").args(["-c", "echo begun; exec sleep 60"]),
                std::time::Duration::from_millis(500),
            )
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.starts_with("DEADLINE: "), "{msg}");
        assert!(msg.contains("begun"), "{msg}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }
}
