//! The host's side of one sealed-run conversation (`docs/sealed-run.md`):
//! read the enclave's `hello`, submit the job, stream the declared inputs,
//! follow the progress, and take the sealed artifact back.
//!
//! Nothing from the enclave is taken on trust here either: the artifact is
//! only bytes until the verifier has judged it (`main.rs`), and its chunks
//! must arrive in order, for one name, within a size cap.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kolm_transport::message::{
    Cancel, ErrorCode, FileName, Hello, InputChunk, InputDecl, JobSubmit, Message, PROTOCOL_VERSION,
};
use kolm_transport::{Channel, ChannelError, Stream};

use crate::identity::{IdentityError, IdentityVerdict};
use crate::job::Job;

/// Largest artifact accepted from an enclave.
pub const MAX_ARTIFACT_BYTES: u64 = 4 << 30;
/// Bytes of input per `input-chunk` (well under any frame limit a peer may
/// announce, which is at least 64 KiB).
const INPUT_CHUNK: usize = 48 * 1024;
/// How often the receive loop looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(200);
/// How long a cancelled enclave may take to confirm.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// What happened, for the progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The enclave introduced itself.
    Hello {
        platform: String,
        identity_key: [u8; 32],
        /// What the host concluded about the key (`identity.rs`).
        identity: String,
    },
    /// Input bytes sent so far.
    Sent { done: u64, total: u64 },
    /// The enclave's progress.
    Progress {
        phase: String,
        done: u64,
        total: u64,
    },
    /// A log line from the enclave (public text).
    Log { line: String },
    /// Artifact bytes received so far.
    Received { done: u64, total: u64 },
}

/// Why the conversation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("transport: {0}")]
    Channel(#[from] ChannelError),
    #[error("the enclave speaks protocol versions {theirs:?}, this host {ours}")]
    Version { theirs: Vec<u32>, ours: u32 },
    #[error("the enclave reported {code:?}: {message}")]
    Enclave { code: ErrorCode, message: String },
    #[error("unexpected {kind} from the enclave {when}")]
    Unexpected {
        kind: &'static str,
        when: &'static str,
    },
    #[error("artifact chunk refused: {0}")]
    Artifact(String),
    #[error("reading input {name}: {source}")]
    Input {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("input name {name:?}: {reason}")]
    InputName { name: String, reason: String },
    /// The enclave's identity evidence did not verify: nothing was sent
    /// to it.
    #[error(transparent)]
    Identity(#[from] crate::identity::IdentityError),
    /// The user cancelled (Ctrl-C); the enclave was told and killed the
    /// job, or went away.
    #[error("cancelled: the enclave killed the job; no artifact")]
    Cancelled,
}

/// What the enclave sent back.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub hello: Hello,
    /// What the host concluded about the enclave's identity key.
    pub identity: IdentityVerdict,
    /// The artifact's file name as the enclave named it.
    pub name: String,
    pub artifact: Vec<u8>,
}

/// Runs `job` through the enclave at the other end of `ch`.
/// `check_identity` judges the hello's identity evidence before anything
/// is sent: when it refuses, the enclave gets an `identity-rejected` error
/// and nothing else. `cancelled` is looked at between input chunks and
/// every [`CANCEL_POLL`] while the job runs: once set, the enclave gets
/// `cancel`.
pub fn submit<S: Stream>(
    ch: &mut Channel<S>,
    job: &Job,
    check_identity: &mut dyn FnMut(&Hello) -> Result<IdentityVerdict, IdentityError>,
    cancelled: &AtomicBool,
    on_event: &mut dyn FnMut(Event),
) -> Result<Outcome, SessionError> {
    let hello = match ch.recv()? {
        Message::Hello(h) => h,
        Message::Error(e) => return Err(enclave(e)),
        other => {
            return Err(SessionError::Unexpected {
                kind: other.kind().as_str(),
                when: "instead of hello",
            });
        }
    };
    if !hello.versions.contains(&PROTOCOL_VERSION) {
        let theirs = hello.versions.clone();
        ch.fail(
            ErrorCode::UnsupportedVersion,
            "this host speaks protocol version 1 only",
        );
        return Err(SessionError::Version {
            theirs,
            ours: PROTOCOL_VERSION,
        });
    }
    let identity = match check_identity(&hello) {
        Ok(v) => v,
        Err(e) => {
            ch.fail(ErrorCode::IdentityRejected, &e.to_string());
            return Err(e.into());
        }
    };
    on_event(Event::Hello {
        platform: hello.platform.to_string(),
        identity_key: hello.identity_key,
        identity: identity.describe(),
    });
    let identity_verdict = identity;

    let mut decls = Vec::with_capacity(job.inputs.len());
    for i in &job.inputs {
        decls.push(InputDecl {
            name: file_name(&i.name)?,
            size: i.size,
            sha256: i.sha256,
        });
    }
    ch.send(&Message::JobSubmit(JobSubmit {
        spec: job.spec.clone(),
        inputs: decls,
        policy: job.policy.clone(),
    }))?;
    send_inputs(ch, job, cancelled, on_event)?;

    let mut artifact: Vec<u8> = Vec::new();
    let mut name: Option<String> = None;
    let mut total: Option<u64> = None;
    loop {
        let Some(message) = ch.recv_within(CANCEL_POLL)? else {
            if cancelled.load(Ordering::SeqCst) {
                return Err(cancel(ch));
            }
            continue;
        };
        match message {
            Message::Progress(p) => on_event(Event::Progress {
                phase: p.phase,
                done: p.done,
                total: p.total,
            }),
            Message::Log(l) => on_event(Event::Log { line: l.line }),
            Message::ArtifactChunk(c) => {
                let n = c.name.as_str().to_string();
                match (&name, total) {
                    (None, None) => {
                        if c.total > MAX_ARTIFACT_BYTES {
                            return Err(SessionError::Artifact(format!(
                                "{} bytes is over the limit of {MAX_ARTIFACT_BYTES}",
                                c.total
                            )));
                        }
                        name = Some(n);
                        total = Some(c.total);
                    }
                    (Some(have), Some(t)) if *have == n && t == c.total => {}
                    _ => {
                        return Err(SessionError::Artifact(
                            "a chunk names another artifact or size".into(),
                        ));
                    }
                }
                if c.offset != artifact.len() as u64 {
                    return Err(SessionError::Artifact(format!(
                        "chunk at offset {}, expected {}",
                        c.offset,
                        artifact.len()
                    )));
                }
                artifact.extend_from_slice(&c.data);
                let t = total.unwrap_or(0);
                if artifact.len() as u64 > t {
                    return Err(SessionError::Artifact(format!("more than {t} bytes")));
                }
                on_event(Event::Received {
                    done: artifact.len() as u64,
                    total: t,
                });
            }
            Message::Bye => break,
            Message::Error(e) => return Err(enclave(e)),
            other => {
                return Err(SessionError::Unexpected {
                    kind: other.kind().as_str(),
                    when: "while the job ran",
                });
            }
        }
    }
    match (name, total) {
        (Some(name), Some(t)) if artifact.len() as u64 == t => Ok(Outcome {
            hello,
            identity: identity_verdict,
            name,
            artifact,
        }),
        (Some(_), Some(t)) => Err(SessionError::Artifact(format!(
            "the enclave said bye after {} of {t} bytes",
            artifact.len()
        ))),
        _ => Err(SessionError::Artifact(
            "the enclave said bye without an artifact".into(),
        )),
    }
}

/// Sends `cancel` and waits (a while) for the enclave to confirm with its
/// error report or to close.
fn cancel<S: Stream>(ch: &mut Channel<S>) -> SessionError {
    let sent = ch.send(&Message::Cancel(Cancel {
        reason: "the user interrupted kolm-host".into(),
    }));
    if sent.is_ok() {
        let end = std::time::Instant::now() + CANCEL_GRACE;
        while std::time::Instant::now() < end {
            match ch.recv_within(CANCEL_POLL) {
                Ok(None) | Ok(Some(Message::Progress(_) | Message::Log(_))) => {}
                _ => break,
            }
        }
    }
    SessionError::Cancelled
}

fn enclave(e: kolm_transport::message::ErrorMessage) -> SessionError {
    SessionError::Enclave {
        code: e.code,
        message: e.message,
    }
}

fn file_name(name: &str) -> Result<FileName, SessionError> {
    FileName::parse(name).map_err(|e| SessionError::InputName {
        name: name.to_string(),
        reason: e.to_string(),
    })
}

/// Streams every declared input, in the declared order, in chunks.
fn send_inputs<S: Stream>(
    ch: &mut Channel<S>,
    job: &Job,
    cancelled: &AtomicBool,
    on_event: &mut dyn FnMut(Event),
) -> Result<(), SessionError> {
    let total = job.input_bytes();
    let mut sent = 0u64;
    let mut buf = vec![0u8; INPUT_CHUNK];
    for input in &job.inputs {
        let name = file_name(&input.name)?;
        let io = |source| SessionError::Input {
            name: input.name.clone(),
            source,
        };
        let mut f = std::fs::File::open(&input.path).map_err(io)?;
        let mut offset = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            if cancelled.load(Ordering::SeqCst) {
                return Err(cancel(ch));
            }
            ch.send(&Message::InputChunk(InputChunk {
                data: buf[..n].to_vec(),
                name: name.clone(),
                offset,
            }))?;
            offset = offset.saturating_add(n as u64);
            sent = sent.saturating_add(n as u64);
            on_event(Event::Sent { done: sent, total });
        }
    }
    Ok(())
}
