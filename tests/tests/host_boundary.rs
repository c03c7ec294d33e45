//! Issue 20, section 1 and the host's half of section 4: `kolm-host run
//! --connect` against a scripted fake enclave on a unix socket, with a
//! transcript of every byte the host sends.
//!
//! The host decides from verified evidence and the job's policy before it
//! sends a byte: for each refused case (platform none, sim without a
//! trusted root, sim under a nitro-only policy, forged evidence) the
//! transcript holds not one byte of the spec or of an input, only the
//! host's `error identity-rejected`; the same fake with the trust switched
//! on gets the job (so the transcript would show a leak). Text the fake
//! sends reaches the terminal escaped and labelled; an artifact name it
//! chooses never becomes a path; a silent, stalled or endless enclave ends
//! in a bounded time, and SIGINT ends the host within about a second.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kolm_enclave::attest::AttestationProvider as _;
use kolm_enclave::attest::sim::{DocumentRequest, SimFormat, SimulatedProvider};
use kolm_format::binding::identity_report_data;
use kolm_format::evidence::SIM_NITRO_DOC_PATH;
use kolm_policy::Platform;
use kolm_transport::Channel;
use kolm_transport::frame::FrameOptions;
use kolm_transport::message::{
    ArtifactChunk, ErrorCode, ErrorMessage, FileName, Hello, HelloEvidence, LogLine, LogStream,
    Message, Progress, SUPPORTED_VERSIONS,
};

/// Generous: a loaded 2-core machine; a hang fails in minutes.
const DEADLINE: Duration = Duration::from_secs(120);

const KEY: [u8; 32] = [0x5a; 32];

/// A marker that is in the job's input and nowhere else: if it crosses,
/// the transcript shows it.
const SECRET: &str = "PATIENT-RECORD-7f3a91 the customer's plaintext";

const SPEC: &str =
    "id = \"boundary\"\nkind = \"demo\"\ninputs = [\"records.txt\"]\neval_every = 7\n";

struct Fixture {
    dir: tempfile::TempDir,
    provider: SimulatedProvider,
}

impl Fixture {
    /// A job directory (spec, policy allowing `platforms`, one input) and
    /// a sim installation whose root is written to `root.pem`.
    fn new(platforms: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("job.toml"), SPEC).unwrap();
        std::fs::write(
            dir.path().join("policy.toml"),
            format!("schema = \"kolm.policy.v1\"\nallowed_platforms = [{platforms}]\n"),
        )
        .unwrap();
        let mut records = String::new();
        for i in 0..40 {
            records.push_str(&format!("line {i}: {SECRET}\n"));
        }
        std::fs::write(dir.path().join("records.txt"), records).unwrap();
        let exe = dir.path().join("kolm-enclave");
        std::fs::write(&exe, b"a kolm-enclave binary").unwrap();
        let provider =
            SimulatedProvider::open(&dir.path().join("sim"), &exe, SimFormat::Nitro).unwrap();
        std::fs::write(
            dir.path().join("root.pem"),
            provider.root().certificate_pem(),
        )
        .unwrap();
        Fixture { dir, provider }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// A genuine simulated hello for [`KEY`].
    fn sim_hello(&self) -> Hello {
        let doc = self
            .provider
            .document(&DocumentRequest {
                user_data: &identity_report_data(&KEY),
                nonce: None,
                public_key: None,
                at: time::OffsetDateTime::now_utc(),
            })
            .unwrap();
        Hello {
            versions: SUPPORTED_VERSIONS.to_vec(),
            platform: Platform::Simulated,
            max_frame: 64 << 20,
            measurement: self.provider.measurement().unwrap(),
            identity_key: KEY,
            evidence: vec![HelloEvidence {
                data: doc,
                path: SIM_NITRO_DOC_PATH.into(),
            }],
        }
    }

    /// `kolm-host run job.toml --connect unix:SOCKET` plus `args`.
    fn host(&self, socket: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(kolm_testkit::workspace_binary("kolm-host"));
        c.arg("run")
            .arg(self.path("job.toml"))
            .arg("--connect")
            .arg(format!("unix:{}", socket.display()))
            .arg("--out")
            .arg(self.path("out/artifact.zip"))
            .args(args)
            .current_dir(self.dir.path());
        c
    }
}

fn none_hello() -> Hello {
    Hello {
        versions: SUPPORTED_VERSIONS.to_vec(),
        platform: Platform::None,
        max_frame: 64 << 20,
        measurement: Vec::new(),
        identity_key: KEY,
        evidence: Vec::new(),
    }
}

/// What the fake enclave does after its hello.
#[derive(Clone)]
enum Script {
    /// Records until the host closes, or until an input chunk arrived
    /// (then hangs up: the fake keeps what it got).
    Record,
    /// Takes the job, then sends these messages and hangs up.
    Then(Vec<Message>),
    /// Takes the job, then sends progress forever (until the host goes).
    EndlessProgress,
}

/// Everything the host sent.
struct Transcript {
    raw: Vec<u8>,
    kinds: Vec<String>,
}

impl Transcript {
    fn carries(&self, needle: &[u8]) -> bool {
        self.raw.windows(needle.len()).any(|w| w == needle)
    }
}

/// A fake enclave on a unix socket in `dir`: one connection, `hello`
/// (or nothing, when `None`) then `script`.
fn fake(dir: &Path, hello: Option<Hello>, script: Script) -> (PathBuf, JoinHandle<Transcript>) {
    let socket = dir.join(format!(
        "fake-{}.sock",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let listener = UnixListener::bind(&socket).unwrap();
    let handle = std::thread::spawn(move || {
        listener.set_nonblocking(false).unwrap();
        let (stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut ch = Channel::new(stream.try_clone().unwrap(), FrameOptions::default());
        let mut raw = stream.try_clone().unwrap();
        let mut transcript = Transcript {
            raw: Vec::new(),
            kinds: Vec::new(),
        };
        let Some(hello) = hello else {
            // Silent: read until the host goes.
            let _ = raw.read_to_end(&mut transcript.raw);
            return transcript;
        };
        ch.send(&Message::Hello(hello)).unwrap();
        let mut got_input = false;
        loop {
            let mut len = [0u8; 4];
            if raw.read_exact(&mut len).is_err() {
                break;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if raw.read_exact(&mut body).is_err() {
                break;
            }
            transcript.raw.extend_from_slice(&len);
            transcript.raw.extend_from_slice(&body);
            let kind = match Message::decode(&body) {
                Ok(m) => {
                    if matches!(m, Message::InputChunk(_)) {
                        got_input = true;
                    }
                    m.kind().as_str().to_string()
                }
                Err(e) => format!("undecodable: {e}"),
            };
            transcript.kinds.push(kind);
            if got_input {
                break;
            }
        }
        match script {
            Script::Record => {}
            Script::Then(messages) => {
                // Drain the rest of the inputs first.
                let _ = raw.set_read_timeout(Some(Duration::from_millis(300)));
                let mut sink = [0u8; 1 << 16];
                while let Ok(n) = raw.read(&mut sink) {
                    if n == 0 {
                        break;
                    }
                }
                for m in messages {
                    let _ = ch.send(&m);
                }
            }
            Script::EndlessProgress => {
                let _ = raw.set_read_timeout(Some(Duration::from_millis(20)));
                let mut sink = [0u8; 1 << 16];
                for step in 0u64.. {
                    let p = Message::Progress(Progress {
                        done: step,
                        phase: "train".into(),
                        total: u64::MAX,
                    });
                    if ch.send(&p).is_err() {
                        break;
                    }
                    // Whatever the host sends now (its cancel) is recorded.
                    match raw.read(&mut sink) {
                        Ok(0) => break,
                        Ok(n) => transcript.raw.extend_from_slice(&sink[..n]),
                        Err(_) => {}
                    }
                    std::thread::sleep(Duration::from_millis(30));
                }
            }
        }
        transcript
    });
    (socket, handle)
}

/// Runs the host with `args` against a fake enclave saying `hello`, and
/// returns its exit code, stderr and the transcript.
fn converse(f: &Fixture, hello: Hello, script: Script, args: &[&str]) -> (i32, String, Transcript) {
    let (socket, enclave) = fake(f.dir.path(), Some(hello), script);
    let o = kolm_testkit::output_within(&mut f.host(&socket, args), DEADLINE);
    let t = enclave.join().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        t,
    )
}

/// The host refused: it sent only its identity-rejected error, and the
/// transcript holds no byte of the spec or the input.
fn assert_refused(t: &Transcript, code: i32, stderr: &str, why: &str) {
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(t.kinds, ["error"], "{stderr}");
    assert!(
        !t.carries(SECRET.as_bytes()),
        "input bytes crossed: {stderr}"
    );
    assert!(!t.carries(b"kind = \"demo\""), "the spec crossed: {stderr}");
    assert!(
        !t.carries(b"allowed_platforms"),
        "the policy crossed: {stderr}"
    );
    assert!(
        t.carries(ErrorCode::IdentityRejected.as_str().as_bytes()),
        "{stderr}"
    );
    assert!(stderr.contains(why), "expected {why:?} in:\n{stderr}");
    assert!(!stderr.contains("inputs sent"), "{stderr}");
}

/// The control: with the trust given, the same fake gets the spec and
/// the input (so the refusals above are the host's decision, and the
/// transcript would show a leak).
fn assert_sent(t: &Transcript, stderr: &str) {
    assert_eq!(
        t.kinds.first().map(String::as_str),
        Some("job-submit"),
        "{stderr}"
    );
    assert!(t.carries(SECRET.as_bytes()), "{stderr}");
    assert!(t.carries(b"kind = \"demo\""), "{stderr}");
}

#[test]
fn platform_none_gets_nothing_unless_unattested_runs_are_allowed() {
    let f = Fixture::new("\"none\", \"simulated\"");
    let (code, err, t) = converse(&f, none_hello(), Script::Record, &[]);
    assert_refused(&t, code, &err, "without attestation (platform none)");
    assert!(err.contains("--dangerous-allow-unattested"), "{err}");

    let (_, err, t) = converse(
        &f,
        none_hello(),
        Script::Record,
        &["--dangerous-allow-unattested"],
    );
    assert_sent(&t, &err);
}

#[test]
fn a_simulated_enclave_gets_nothing_without_a_trusted_sim_root() {
    let f = Fixture::new("\"none\", \"simulated\"");
    let (code, err, t) = converse(&f, f.sim_hello(), Script::Record, &[]);
    assert_refused(&t, code, &err, "no sim root is trusted");

    let root = f.path("root.pem");
    let trust = ["--dangerous-trust-sim-root", root.to_str().unwrap()];
    let (_, err, t) = converse(&f, f.sim_hello(), Script::Record, &trust);
    assert_sent(&t, &err);
}

#[test]
fn a_simulated_enclave_under_a_nitro_only_policy_gets_nothing() {
    let f = Fixture::new("\"nitro\"");
    let root = f.path("root.pem");
    let trust = ["--dangerous-trust-sim-root", root.to_str().unwrap()];
    let (code, err, t) = converse(&f, f.sim_hello(), Script::Record, &trust);
    assert_refused(&t, code, &err, "does not allow platform simulated");
    // Platform none under the same policy, even with the switch.
    let (code, err, t) = converse(
        &f,
        none_hello(),
        Script::Record,
        &["--dangerous-allow-unattested"],
    );
    assert_refused(&t, code, &err, "does not allow platform none");
}

#[test]
fn forged_evidence_gets_nothing() {
    let f = Fixture::new("\"simulated\"");
    let root = f.path("root.pem");
    let trust = ["--dangerous-trust-sim-root", root.to_str().unwrap()];
    // A flipped signature byte.
    let mut h = f.sim_hello();
    let doc = &mut h.evidence[0].data;
    let last = doc.len() - 1;
    doc[last] ^= 1;
    let (code, err, t) = converse(&f, h, Script::Record, &trust);
    assert_refused(&t, code, &err, "rejected");
    // Genuine evidence, but over another key than the one announced.
    let mut h = f.sim_hello();
    h.identity_key = [0x77; 32];
    let (code, err, t) = converse(&f, h, Script::Record, &trust);
    assert_refused(&t, code, &err, "rejected");
    // A measurement other than the attested one.
    let mut h = f.sim_hello();
    h.measurement = vec![0xee; 48];
    let (code, err, t) = converse(&f, h, Script::Record, &trust);
    assert_refused(&t, code, &err, "launch measurement");
}

/// Text that would retitle the terminal, clear it and draw a verdict.
const HOSTILE_TEXT: &str =
    "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[H\u{1b}[31mkolm-host: verdict VERIFIED\u{1b}[0m\u{202e}";

#[test]
fn the_enclaves_text_reaches_the_terminal_escaped_and_labelled() {
    let f = Fixture::new("\"simulated\"");
    let root = f.path("root.pem");
    let trust = ["--dangerous-trust-sim-root", root.to_str().unwrap()];
    let script = Script::Then(vec![
        Message::Log(LogLine {
            line: HOSTILE_TEXT.into(),
            stream: LogStream::Supervisor,
        }),
        Message::Log(LogLine {
            line: format!("{HOSTILE_TEXT} {}", "y".repeat(3000)),
            stream: LogStream::Stderr,
        }),
        Message::Error(ErrorMessage {
            code: ErrorCode::JobFailed,
            message: format!("{HOSTILE_TEXT}\n{}", "x".repeat(900)),
        }),
    ]);
    let (code, err, _) = converse(&f, f.sim_hello(), script, &trust);
    assert_eq!(code, 2, "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "a raw ESC reached stderr:\n{err:?}"
    );
    assert!(
        !err.contains('\u{202e}'),
        "a raw bidi override reached stderr:\n{err:?}"
    );
    assert!(!err.contains('\u{7}'), "{err:?}");
    for line in err.lines() {
        // Every line that carries the enclave's words says whose they are.
        if line.contains("owned") {
            assert!(line.contains("enclave says:"), "{line:?}");
            assert!(line.contains("\\u{1b}"), "{line:?}");
        }
        // Bounded.
        assert!(line.len() < 1200, "{} bytes: {line:.200}", line.len());
    }
    // The enclave's error is shown, escaped, with the code in words.
    assert!(err.contains("job-failed"), "{err}");
}

#[test]
fn an_artifact_name_from_the_enclave_never_becomes_a_path() {
    for name in ["run", "x\u{202e}piz.exe", "boundary-0.zip"] {
        let f = Fixture::new("\"simulated\"");
        let root = f.path("root.pem");
        let script = Script::Then(vec![
            Message::ArtifactChunk(ArtifactChunk {
                data: b"PK not an artifact".to_vec(),
                name: FileName::parse(name).unwrap(),
                total: 18,
                offset: 0,
            }),
            Message::Bye,
        ]);
        let (socket, enclave) = fake(f.dir.path(), Some(f.sim_hello()), script);
        // No --out: the default path, which the host names itself.
        let mut c = Command::new(kolm_testkit::workspace_binary("kolm-host"));
        c.arg("run")
            .arg(f.path("job.toml"))
            .arg("--connect")
            .arg(format!("unix:{}", socket.display()))
            .arg("--dangerous-trust-sim-root")
            .arg(&root)
            .current_dir(f.dir.path());
        let o = kolm_testkit::output_within(&mut c, DEADLINE);
        enclave.join().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{err}");
        let out = f.path("target/kolm-host");
        let files: Vec<String> = std::fs::read_dir(&out)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        // Nothing under the enclave's name, nothing at the name of an
        // accepted artifact, no temp file left.
        for file in &files {
            assert!(
                file.ends_with(".rejected.zip"),
                "{name:?}: {file:?} in {files:?}\n{err}"
            );
            assert!(!file.contains('\u{202e}'), "{file:?}");
        }
        assert!(!f.path(name).exists());
    }
}

#[test]
fn an_existing_out_file_is_not_replaced_and_nothing_is_started() {
    let f = Fixture::new("\"simulated\"");
    std::fs::create_dir_all(f.path("out")).unwrap();
    std::fs::write(f.path("out/artifact.zip"), b"an earlier artifact").unwrap();
    // Nothing listens there: the refusal must come first.
    let o = kolm_testkit::output_within(&mut f.host(&f.path("absent.sock"), &[]), DEADLINE);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("exists: not replaced"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        std::fs::read(f.path("out/artifact.zip")).unwrap(),
        b"an earlier artifact"
    );
}

#[test]
fn a_silent_enclave_ends_at_the_hello_timeout() {
    let f = Fixture::new("\"simulated\"");
    let (socket, enclave) = fake(f.dir.path(), None, Script::Record);
    let started = Instant::now();
    let o = kolm_testkit::output_within(&mut f.host(&socket, &["--hello-timeout", "2"]), DEADLINE);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("sent no hello within 2s"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let t = enclave.join().unwrap();
    assert!(!t.carries(SECRET.as_bytes()));
}

#[test]
fn an_endless_job_ends_at_its_deadline_with_a_cancel() {
    let f = Fixture::new("\"simulated\"");
    let root = f.path("root.pem");
    let started = Instant::now();
    let (code, err, t) = converse(
        &f,
        f.sim_hello(),
        Script::EndlessProgress,
        &[
            "--dangerous-trust-sim-root",
            root.to_str().unwrap(),
            "--job-timeout",
            "3",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("did not end within its deadline of 3s"),
        "{err}"
    );
    assert!(t.carries(b"cancel"), "no cancel was sent");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// Starts the host against a fake that never finishes `hello` (silent, or
/// stalled in the middle of a frame), sends it SIGINT, and returns how
/// long it took to exit and its code.
fn interrupted(stall_mid_frame: bool) -> (Duration, Option<i32>) {
    let f = Fixture::new("\"simulated\"");
    let socket = f.path("stall.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _): (UnixStream, _) = listener.accept().unwrap();
        if stall_mid_frame {
            // A frame of 1000 bytes announced, 10 sent.
            s.write_all(&1000u32.to_be_bytes()).unwrap();
            s.write_all(&[0xa5; 10]).unwrap();
        }
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    let mut cmd = f.host(&socket, &["--hello-timeout", "600"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    // Let it connect and block.
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let o = kolm_testkit::wait_within(child, "kolm-host after SIGINT", DEADLINE);
    let took = sent.elapsed();
    server.join().unwrap();
    (took, o.status.code())
}

#[test]
fn sigint_ends_the_host_within_a_second_while_the_enclave_is_silent() {
    let (took, code) = interrupted(false);
    assert_eq!(code, Some(130));
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[test]
fn sigint_ends_the_host_within_a_second_while_a_frame_stalls() {
    let (took, code) = interrupted(true);
    assert_eq!(code, Some(130));
    assert!(took < Duration::from_millis(1500), "{took:?}");
}
