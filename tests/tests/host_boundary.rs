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

mod sim_hello;

use kolm_enclave::attest::sim::SimulatedProvider;
use kolm_format::binding::identity_report_data;
use kolm_policy::Platform;
use kolm_transport::Channel;
use kolm_transport::frame::FrameOptions;
use kolm_transport::message::{
    ArtifactChunk, ErrorCode, ErrorMessage, FileName, Hello, LogLine, LogStream, Message, Progress,
    SUPPORTED_VERSIONS,
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
        let provider = sim_hello::installation(dir.path());
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
        self.sim_hello_for(KEY)
    }

    /// A genuine simulated hello announcing `key`.
    fn sim_hello_for(&self, key: [u8; 32]) -> Hello {
        sim_hello::hello(&self.provider, key, identity_report_data(&key))
    }

    /// `kolm-host run job.toml --connect unix:SOCKET` plus `args`.
    fn host(&self, socket: &Path, args: &[&str]) -> Command {
        let mut c = self.host_naming_the_artifact(socket);
        c.arg("--out").arg(self.path("out/artifact.zip")).args(args);
        c
    }

    /// `kolm-host run job.toml --connect unix:SOCKET` without `--out`:
    /// the artifact goes to the default path, which the host names itself.
    fn host_naming_the_artifact(&self, socket: &Path) -> Command {
        let mut c = Command::new(kolm_testkit::workspace_binary("kolm-host"));
        c.arg("run")
            .arg(self.path("job.toml"))
            .arg("--connect")
            .arg(format!("unix:{}", socket.display()))
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

/// The fixture's job sealed by its own sim installation on the enclave's
/// run path, from the very spec, policy and input bytes the host sends
/// (so the host can accept it): the artifact and the key that signed it.
/// Sealed outside the fixture's folder, which the caller watches.
fn sealed(f: &Fixture) -> (Vec<u8>, [u8; 32]) {
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::copy(f.path("records.txt"), input.join("records.txt")).unwrap();
    let spec = std::fs::read(f.path("job.toml")).unwrap();
    let policy = std::fs::read(f.path("policy.toml")).unwrap();
    let exe = kolm_testkit::workspace_binary("kolm-enclave");
    let run = kolm_enclave::run::run(
        &kolm_enclave::run::RunRequest {
            spec: &spec,
            policy: &policy,
            input_dir: &input,
            out_dir: &work.path().join("out"),
            runtime_exe: Some(&exe),
            jobs_exe: None,
            fine_tune: Default::default(),
        },
        &f.provider,
    )
    .unwrap();
    assert_eq!(run.sequence, 0);
    let opts = kolm_verifier::artifact::VerifyOptions {
        policy: Some(
            kolm_policy::Policy::from_toml_str(std::str::from_utf8(&policy).unwrap()).unwrap(),
        ),
        dangerous_trust_sim_root: Some(sim_hello::root(&f.provider)),
        ..kolm_verifier::artifact::VerifyOptions::at(kolm_verifier::artifact::VerifyAt::ReceiptTime)
    };
    let report = kolm_verifier::artifact::verify_artifact(&run.artifact, &opts).unwrap();
    let signer = report.manifest.unwrap().signer.public_key.0;
    (std::fs::read(&run.artifact).unwrap(), signer)
}

/// Everything but directories under `dir` (files, sockets, links), so a
/// file anyone left anywhere there shows.
fn entries_under(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    let mut found = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p);
            } else {
                found.insert(p);
            }
        }
    }
    found
}

/// The enclave names the artifact it sends; the host never uses that name.
/// For each name (a plain one, one whose bidi override would show it as
/// `.exe`, the host's own default name, the name of the job's spec beside
/// it), the genuine artifact announced by the key that signed it is kept
/// as `target/kolm-host/boundary-0.zip` (`<spec id>-<sequence>.zip`), the
/// same bytes announced by another key as `boundary-0.rejected.zip`, and
/// bytes that are no artifact as `boundary-unverified.rejected.zip` (no
/// sequence to read); in each case that is the only new file in the whole
/// fixture (the host's working directory and TMPDIR included), holding
/// exactly the bytes sent, and the spec is untouched.
#[test]
fn an_artifact_name_from_the_enclave_never_becomes_a_path() {
    let f = Fixture::new("\"simulated\"");
    let root = f.path("root.pem");
    let (artifact, signer) = sealed(&f);
    let garbage = b"PK not an artifact".to_vec();
    let cases: [(&[u8], [u8; 32], &str, i32); 3] = [
        (&artifact, signer, "boundary-0.zip", 0),
        (&artifact, KEY, "boundary-0.rejected.zip", 1),
        (&garbage, signer, "boundary-unverified.rejected.zip", 1),
    ];
    for (i, name) in ["run", "x\u{202e}piz.exe", "boundary-0.zip", "job.toml"]
        .into_iter()
        .enumerate()
    {
        for (bytes, key, kept, code) in cases {
            let what = format!("{name:?}, expecting {kept:?}");
            let cwd = f.path(&format!("case-{i}-{kept}"));
            let tmp = cwd.join("tmp");
            std::fs::create_dir_all(&tmp).unwrap();
            let mut messages: Vec<Message> = bytes
                .chunks(64 << 10)
                .scan(0u64, |offset, chunk| {
                    let m = Message::ArtifactChunk(ArtifactChunk {
                        data: chunk.to_vec(),
                        name: FileName::parse(name).unwrap(),
                        total: bytes.len() as u64,
                        offset: *offset,
                    });
                    *offset += chunk.len() as u64;
                    Some(m)
                })
                .collect();
            messages.push(Message::Bye);
            let (socket, enclave) = fake(
                f.dir.path(),
                Some(f.sim_hello_for(key)),
                Script::Then(messages),
            );
            let before = entries_under(f.dir.path());
            let mut c = f.host_naming_the_artifact(&socket);
            c.arg("--dangerous-trust-sim-root")
                .arg(&root)
                .env("TMPDIR", &tmp)
                .current_dir(&cwd);
            let o = kolm_testkit::output_within(&mut c, DEADLINE);
            enclave.join().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(code), "{what}\n{err}");
            let new: Vec<PathBuf> = entries_under(f.dir.path())
                .difference(&before)
                .cloned()
                .collect();
            let expected = cwd.join("target/kolm-host").join(kept);
            assert_eq!(new, std::slice::from_ref(&expected), "{what}\n{err}");
            assert_eq!(std::fs::read(&expected).unwrap(), bytes, "{what}");
            assert_eq!(std::fs::read(f.path("job.toml")).unwrap(), SPEC.as_bytes());
        }
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
    kolm_testkit::signal("INT", pid);
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
