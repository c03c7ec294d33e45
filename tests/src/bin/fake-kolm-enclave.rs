//! A stand-in for `kolm-enclave start`, for the tests of `kolm-host
//! launch`: it listens where `--listen unix:PATH` says and answers every
//! connection with bytes the test prepared, so that a test can make the
//! service slow to answer, or die once it listens, which the real service
//! never is on cue. Its name ends in `kolm-enclave`, as `kolm-host` asks
//! of the command line of a live service. Test-only; never shipped.
//!
//! What it does comes from the environment (`kolm-host` passes its own on):
//!
//! - `KOLM_FAKE_HELLO=FILE`: the bytes sent on each connection (a `hello`
//!   frame the test encoded); nothing is sent without it.
//! - `KOLM_FAKE_HELLO_DELAY_MS=N`: how long it waits, once it listens,
//!   before it answers anyone (connections wait in the backlog meanwhile).
//! - `KOLM_FAKE_MARK=FILE`: a line appended just before each answer is
//!   sent, so a test can tell whether one was under way by some moment.
//! - `KOLM_FAKE_EXIT=N`: exits with status N as soon as it listens,
//!   saying so on stderr (a service that dies at once).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const NAME: &str = "fake-kolm-enclave";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(socket) = args
        .windows(2)
        .find(|w| w.first().is_some_and(|a| a == "--listen"))
        .and_then(|w| w.get(1))
        .and_then(|a| a.strip_prefix("unix:"))
        .map(PathBuf::from)
    else {
        eprintln!("{NAME}: expected --listen unix:PATH in {args:?}");
        return ExitCode::from(2);
    };
    let listener = match UnixListener::bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{NAME}: listening on {}: {e}", socket.display());
            return ExitCode::from(2);
        }
    };
    eprintln!("{NAME}: listening on {}", socket.display());
    if let Some(code) = env("KOLM_FAKE_EXIT").and_then(|c| c.parse::<u8>().ok()) {
        eprintln!("{NAME}: exiting with status {code} (KOLM_FAKE_EXIT)");
        return ExitCode::from(code);
    }
    let hello = match env("KOLM_FAKE_HELLO").map(std::fs::read).transpose() {
        Ok(h) => h.unwrap_or_default(),
        Err(e) => {
            eprintln!("{NAME}: KOLM_FAKE_HELLO: {e}");
            return ExitCode::from(2);
        }
    };
    let delay = env("KOLM_FAKE_HELLO_DELAY_MS")
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or(0);
    std::thread::sleep(Duration::from_millis(delay));
    let mark = env("KOLM_FAKE_MARK").map(PathBuf::from);
    // Until it is signalled, as the real service.
    for stream in listener.incoming().filter_map(Result::ok) {
        let hello = hello.clone();
        let mark = mark.clone();
        std::thread::spawn(move || answer(stream, &hello, mark.as_deref()));
    }
    ExitCode::SUCCESS
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The mark first, then the answer, then whatever the peer sends until it
/// closes (a host's `bye`), for at most a while.
fn answer(mut stream: UnixStream, hello: &[u8], mark: Option<&std::path::Path>) {
    if let Some(path) = mark {
        let line = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "hello"));
        if let Err(e) = line {
            eprintln!("{NAME}: KOLM_FAKE_MARK {}: {e}", path.display());
        }
    }
    // A peer that already gave up makes these fail: nothing to do then.
    let _ = stream.write_all(hello);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut sink = Vec::new();
    let _ = stream.read_to_end(&mut sink);
}
