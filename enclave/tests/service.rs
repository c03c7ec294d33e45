//! The enclave service (`kolm-enclave start`) against a hostile or broken
//! host, spoken to directly over its unix socket: a host that says nothing
//! is timed out, a bundle over the limit is refused before any byte is
//! stored, an input whose bytes do not match its declared SHA-256 is
//! refused naming it, and a message out of turn is refused. Nothing is
//! sealed in any of these.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kolm_transport::message::{
    ErrorCode, FileName, InputChunk, InputDecl, JobSubmit, Message, PROTOCOL_VERSION,
};
use kolm_transport::{Address, AddressConnector, Channel, Connector, FrameOptions, Stream};
use sha2::{Digest, Sha256};

struct Service {
    child: Child,
    socket: PathBuf,
    state: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Service {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let state = dir.path().join("state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kolm-enclave"))
        .args(["start", "--attest", "none", "--once", "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .arg("--state")
        .arg(&state)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !socket.exists() {
        if t.elapsed() > Duration::from_secs(60) {
            // Not left waiting for a client behind the failed test.
            let _ = child.kill();
            let _ = child.wait();
            panic!("DEADLINE: the service never listened in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Service {
        child,
        socket,
        state,
        _dir: dir,
    }
}

fn connect(socket: &Path) -> Channel<Box<dyn Stream>> {
    let a = Address::parse(&format!("unix:{}", socket.display())).unwrap();
    let connector = AddressConnector::new(a).unwrap();
    // The socket file exists from bind(), a moment before listen().
    let t = Instant::now();
    let s = loop {
        match connector.connect() {
            Ok(s) => break s,
            Err(e) if t.elapsed() < Duration::from_secs(5) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let opts = FrameOptions::default()
        .with_idle_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut ch = Channel::new(s, opts);
    match ch.recv().unwrap() {
        Message::Hello(h) => assert!(h.versions.contains(&PROTOCOL_VERSION)),
        other => panic!("{other:?}"),
    }
    ch
}

/// The error report the service ends with.
fn error_of(ch: &mut Channel<Box<dyn Stream>>) -> (ErrorCode, String) {
    loop {
        match ch.recv() {
            Ok(Message::Error(e)) => return (e.code, e.message),
            Ok(Message::Progress(_)) => {}
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

fn nothing_sealed(state: &Path) {
    let sealed: Vec<_> = std::fs::read_dir(state)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        sealed
            .iter()
            .all(|n| !n.ends_with(".zip") && n != "chain-state.json"),
        "{sealed:?}"
    );
}

const SPEC: &[u8] = b"id = \"t\"\nkind = \"demo\"\ninputs = [\"corpus.txt\"]\n";
const POLICY: &[u8] = b"schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n";

fn submit(size: u64, sha256: [u8; 32]) -> Message {
    Message::JobSubmit(JobSubmit {
        spec: SPEC.to_vec(),
        inputs: vec![InputDecl {
            name: FileName::parse("corpus.txt").unwrap(),
            size,
            sha256,
        }],
        policy: POLICY.to_vec(),
        collateral: vec![],
    })
}

#[test]
fn a_silent_host_is_timed_out() {
    let s = start(&["--idle-timeout", "1"]);
    let mut ch = connect(&s.socket);
    let t = Instant::now();
    let (code, _) = error_of(&mut ch);
    assert_eq!(code, ErrorCode::Timeout);
    assert!(t.elapsed() < Duration::from_secs(10));
    nothing_sealed(&s.state);
}

#[test]
fn a_bundle_over_the_limit_is_refused_before_any_byte_is_stored() {
    let s = start(&["--max-input-bytes", "100"]);
    let mut ch = connect(&s.socket);
    ch.send(&submit(101, [0; 32])).unwrap();
    let (code, message) = error_of(&mut ch);
    assert_eq!(code, ErrorCode::BundleTooLarge, "{message}");
    // The job's scratch directory is gone with nothing in it; only the
    // state directory's lock file stays (it is held, not data).
    let left: Vec<_> = std::fs::read_dir(&s.state)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n != kolm_enclave::chain_state::LOCK_FILE)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn inputs_the_staging_directory_has_no_room_for_are_refused_before_any_byte() {
    // 2^55 bytes (32 PiB) is under the service's limit and over any disk.
    let s = start(&["--max-input-bytes", &(1u64 << 60).to_string()]);
    let mut ch = connect(&s.socket);
    ch.send(&submit(1 << 55, [0; 32])).unwrap();
    let (code, message) = error_of(&mut ch);
    assert_eq!(code, ErrorCode::BundleTooLarge, "{message}");
    assert!(message.contains("staging directory"), "{message}");
    assert!(message.contains(&(2u64 << 55).to_string()), "{message}");
    assert!(message.contains("KOLM_STAGING_DIR"), "{message}");
    nothing_sealed(&s.state);
}

#[test]
fn a_bundle_over_the_policys_limit_is_refused_too() {
    let s = start(&[]);
    let mut ch = connect(&s.socket);
    let Message::JobSubmit(mut job) = submit(11, [0; 32]) else {
        unreachable!()
    };
    job.policy = b"schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n\
                   [limits]\nmax_input_bytes = 10\n"
        .to_vec();
    ch.send(&Message::JobSubmit(job)).unwrap();
    let (code, message) = error_of(&mut ch);
    assert_eq!(code, ErrorCode::BundleTooLarge, "{message}");
    assert!(message.contains("limit of 10"), "{message}");
    nothing_sealed(&s.state);
}

#[test]
fn an_input_that_is_not_what_was_declared_is_refused_naming_it() {
    let s = start(&[]);
    let mut ch = connect(&s.socket);
    let declared: [u8; 32] = Sha256::digest(b"the real corpus").into();
    ch.send(&submit(15, declared)).unwrap();
    ch.send(&Message::InputChunk(InputChunk {
        data: b"a forged corpus".to_vec(),
        name: FileName::parse("corpus.txt").unwrap(),
        offset: 0,
    }))
    .unwrap();
    let (code, message) = error_of(&mut ch);
    assert_eq!(code, ErrorCode::DigestMismatch, "{message}");
    assert!(message.contains("corpus.txt"), "{message}");
    nothing_sealed(&s.state);
}

#[test]
fn a_message_out_of_turn_is_refused() {
    let s = start(&[]);
    let mut ch = connect(&s.socket);
    ch.send(&Message::InputChunk(InputChunk {
        data: b"x".to_vec(),
        name: FileName::parse("corpus.txt").unwrap(),
        offset: 0,
    }))
    .unwrap();
    let (code, message) = error_of(&mut ch);
    assert_eq!(code, ErrorCode::UnexpectedMessage, "{message}");
    nothing_sealed(&s.state);
}
