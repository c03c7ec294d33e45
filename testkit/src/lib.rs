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

pub mod fuzz_corpus;

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
        "{} is missing: build it with `cargo build --locked --bins` (`cargo test -p \
         kolm-tests` does not build other crates' binaries)",
        path.display()
    );
    path
}

/// Whether this process runs as root (the job sandbox needs it).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The command line of `pid`, its arguments joined by NUL as the kernel
/// keeps them (`/proc/PID/cmdline`); empty when the process is gone, or a
/// zombie waiting to be reaped (which runs nothing).
pub fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .unwrap_or_default()
}

/// The live processes whose command line ([`command_line`]) contains
/// every one of `marks`: how a test finds what a child it did not start
/// itself (an enclave service, a sandboxed job) is still running. A mark
/// may hold a NUL to span two arguments (`"--linger-seconds\0{n}"`).
pub fn processes_with(marks: &[&str]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let line = command_line(pid);
            !line.is_empty() && marks.iter().all(|m| line.contains(m))
        })
        .collect()
}

/// Sends `signal` (a name such as `INT`, or a number) to `pid`, through
/// the `kill` program (this crate stays free of unsafe code and libc);
/// panics, naming both, when it cannot.
pub fn signal(signal: &str, pid: u32) {
    send(signal, &pid.to_string());
}

/// Sends `signal` to every process of the process group `pgid`: what a
/// terminal's Ctrl-C does to its foreground group. A child started with
/// `process_group(0)` leads a group whose id is its pid.
pub fn signal_group(signal: &str, pgid: u32) {
    send(signal, &format!("-{pgid}"));
}

fn send(signal: &str, target: &str) {
    let out = output_within(
        Command::new("kill").args([&format!("-{signal}"), "--", target]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "kill -{signal} -- {target}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// What a child run under a deadline ([`output_within`]) gave back.
pub use std::process::Output;

use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Runs `cmd` to its end, its stdout and stderr captured, and returns its
/// output; if it is still running after `limit`, kills it and every
/// process below it, and panics with `DEADLINE:`, the command line, the
/// time it ran, what each stuck process was doing and what it had printed.
/// Every test that runs a child uses this (or [`wait_within`], or the
/// [`Deadline`] methods): a hung child is a failing test with diagnostics,
/// never a hung suite.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    use std::process::Stdio;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    wait_within(child, &format!("{cmd:?}"), limit)
}

/// The [`output_within`] family as methods of [`Command`], so that a
/// test's `cmd.output().unwrap()` reads `cmd.output_within(limit)`.
pub trait Deadline {
    /// [`output_within`].
    fn output_within(&mut self, limit: Duration) -> Output;
    /// Like `Command::status`, under `limit`: the child's stdout and
    /// stderr are captured and copied to the test's own output (which
    /// libtest shows when the test fails) instead of the terminal.
    fn status_within(&mut self, limit: Duration) -> ExitStatus;
}

impl Deadline for Command {
    fn output_within(&mut self, limit: Duration) -> Output {
        output_within(self, limit)
    }

    fn status_within(&mut self, limit: Duration) -> ExitStatus {
        let o = output_within(self, limit);
        // `print!`/`eprint!`, not the raw handles: libtest captures these.
        print!("{}", String::from_utf8_lossy(&o.stdout));
        eprint!("{}", String::from_utf8_lossy(&o.stderr));
        o.status
    }
}

/// Waits for `child` (its stdout and stderr piped, or not) at most
/// `limit`, collecting what it prints; on timeout kills it and its
/// descendants ([`kill_tree`]) and panics naming `what`, the time, each
/// stuck process's state and kernel stack, and the output so far. A child
/// that ends while something it started still holds its output pipes
/// open is a `DEADLINE` failure too, once `limit` is up.
pub fn wait_within(mut child: Child, what: &str, limit: Duration) -> Output {
    let start = Instant::now();
    let out = Drain::start(child.stdout.take());
    let err = Drain::start(child.stderr.take());
    let deadline = |stuck: &str, processes: &str, out: &Drain, err: &Drain| -> ! {
        panic!(
            "DEADLINE: {what} {stuck} after {:.1} s (limit {:.1} s); killed.\n\
             --- processes ---\n{processes}--- stdout ---\n{}\n--- stderr ---\n{}",
            start.elapsed().as_secs_f64(),
            limit.as_secs_f64(),
            tail(&out.so_far()),
            tail(&err.so_far())
        )
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let tree = kill_tree(child.id());
                let _ = child.kill();
                let _ = child.wait();
                // Killed: the pipes close unless an escaped process holds them.
                let _ = out.finish(Duration::from_secs(2));
                let _ = err.finish(Duration::from_secs(2));
                deadline("still running", &tree, &out, &err);
            }
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    let left = || limit.saturating_sub(start.elapsed());
    match (out.finish(left()), err.finish(left())) {
        (Some(stdout), Some(stderr)) => Output {
            status,
            stdout,
            stderr,
        },
        _ => deadline(
            &format!("ended ({status}) but its output pipes are still open"),
            "  (the child is gone; whatever holds its pipes left its tree)\n",
            &out,
            &err,
        ),
    }
}

/// A thread reading one of a child's pipes to its end, its bytes shared
/// so that a deadline can show what came so far.
struct Drain {
    bytes: Arc<Mutex<Vec<u8>>>,
    done: mpsc::Receiver<()>,
}

impl Drain {
    fn start<R: std::io::Read + Send + 'static>(pipe: Option<R>) -> Drain {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let shared = bytes.clone();
        std::thread::spawn(move || {
            if let Some(mut p) = pipe {
                let mut buf = [0u8; 8192];
                loop {
                    match p.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if let Ok(mut b) = shared.lock() {
                                b.extend_from_slice(buf.get(..n).unwrap_or_default());
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            }
            let _ = tx.send(());
        });
        Drain { bytes, done }
    }

    /// Everything read, once the pipe reached its end within `wait`.
    fn finish(&self, wait: Duration) -> Option<Vec<u8>> {
        self.done.recv_timeout(wait).ok().map(|()| self.so_far())
    }

    fn so_far(&self) -> Vec<u8> {
        self.bytes.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

/// Stops `pid` and every process below it (found through the parent ids
/// in `/proc`, so a grandchild in a process group or session of its own is
/// found too), notes what each was doing, then SIGKILLs them all, through
/// the `kill` program, so this crate stays free of unsafe code and of
/// libc. Stopping first keeps a forking tree from growing while it is
/// killed. Returns the notes: one line per process with its state and
/// kernel wait channel, and its kernel stack where readable (root), which
/// tells a livelock (`R`, in `exit_to_user_mode_loop`) from a wait (`S`).
fn kill_tree(pid: u32) -> String {
    let signal = |sig: &str, pids: &[u32]| {
        if pids.is_empty() {
            return;
        }
        let _ = Command::new("kill")
            .arg(sig)
            .arg("--")
            .args(pids.iter().map(u32::to_string))
            .stderr(std::process::Stdio::null())
            .status();
    };
    // Noted before they are stopped: stopped, all would read `T`.
    let first = descendants(pid);
    let mut notes: String = first.iter().map(|&p| describe(p)).collect();
    signal("-STOP", &first);
    // Whatever forked meanwhile.
    let tree = descendants(pid);
    signal("-STOP", &tree);
    for &p in tree.iter().filter(|p| !first.contains(p)) {
        notes.push_str(&describe(p));
    }
    signal("-KILL", &tree);
    // And its process group, when it leads one (a child started with
    // `process_group(0)`): members that already left the tree.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(std::process::Stdio::null())
        .status();
    notes
}

/// `pid` and its descendants, parents first.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.filter_map(Result::ok) {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = stat_field(p, 1).and_then(|f| f.parse::<u32>().ok()) {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while let Some(&p) = tree.get(i) {
        for &(c, pp) in &parent_of {
            if pp == p && !tree.contains(&c) {
                tree.push(c);
            }
        }
        i += 1;
    }
    tree
}

/// Field `n` after the command name of `/proc/PID/stat` (0: state,
/// 1: ppid).
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(n).map(str::to_owned)
}

/// One process of a stuck tree: pid and name, then each thread's name,
/// state, wait channel and kernel stack (readable as root).
fn describe(pid: u32) -> String {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
    let mut out = format!("  pid {pid} {}\n", read("comm").trim());
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    tids.sort_unstable();
    // A thread pool would bury the rest.
    for tid in tids.iter().take(MAX_THREADS_SHOWN) {
        let task = |f: &str| read(&format!("task/{tid}/{f}"));
        let state = task("stat")
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
            .unwrap_or_default();
        out.push_str(&format!(
            "    tid {tid} {} state {state} wchan {}\n",
            task("comm").trim(),
            task("wchan").trim()
        ));
        for l in task("stack").lines().take(6) {
            out.push_str(&format!("        {l}\n"));
        }
    }
    if tids.len() > MAX_THREADS_SHOWN {
        out.push_str(&format!(
            "    ... {} more threads\n",
            tids.len() - MAX_THREADS_SHOWN
        ));
    }
    out
}

/// Threads of one stuck process shown in a `DEADLINE` message.
const MAX_THREADS_SHOWN: usize = 8;

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

    #[test]
    fn a_stuck_grandchild_in_a_session_of_its_own_is_killed_too() {
        let dir = std::env::temp_dir().join(format!("kolm-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pidfile = dir.join("grandchild");
        let r = std::panic::catch_unwind(|| {
            output_within(
                Command::new("sh").arg("-c").arg(format!(
                    "setsid sh -c 'echo $$ > {}; exec sleep 60' & wait",
                    pidfile.display()
                )),
                Duration::from_millis(1500),
            )
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.starts_with("DEADLINE: "), "{msg}");
        assert!(
            msg.contains("sleep"),
            "the stuck processes are named: {msg}"
        );
        let gc: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let state = stat_field(gc, 0);
        assert!(
            state.is_none() || state.as_deref() == Some("Z"),
            "grandchild {gc} survived: {state:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_child_whose_pipes_outlive_it_fails_at_the_deadline() {
        let started = Instant::now();
        let r = std::panic::catch_unwind(|| {
            output_within(
                Command::new("sh").args(["-c", "echo begun; sleep 5 & exit 0"]),
                Duration::from_millis(800),
            )
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("output pipes are still open"), "{msg}");
        assert!(msg.contains("begun"), "{msg}");
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[test]
    fn status_within_gives_the_status() {
        let s = Command::new("sh")
            .args(["-c", "echo shown; exit 4"])
            .status_within(Duration::from_secs(20));
        assert_eq!(s.code(), Some(4));
    }
}
