//! The host's side of one sealed-run conversation (`docs/sealed-run.md`):
//! read the enclave's `hello`, submit the job (with the collateral of the
//! host's bundle for the enclave's platform: on a guest, the host's
//! `--bundle` directory is not on the enclave's file system), stream the
//! declared inputs, follow the progress, and take the sealed artifact back.
//!
//! Nothing from the enclave is taken on trust here either: the artifact is
//! only bytes until the verifier has judged it (`main.rs`), and its chunks
//! must arrive in order, for one name, within a size cap.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kolm_format::evidence::{EvidenceRole, evidence_slots};
use kolm_format::version::SpecVersion;
use kolm_policy::Platform;
use kolm_transport::message::{
    ArtifactChunk, Cancel, CollateralFile, ErrorCode, FileName, Hello, InputChunk, InputDecl,
    JobSubmit, Message, PROTOCOL_VERSION, collateral_slot,
};
use kolm_transport::{Channel, ChannelError, Stream};

use crate::identity::{IdentityError, IdentityVerdict};
use crate::job::Job;

/// Largest artifact accepted from an enclave.
pub const MAX_ARTIFACT_BYTES: u64 = 4 << 30;
/// Bytes of input per `input-chunk` (well under any frame limit a peer may
/// announce, which is at least 64 KiB).
const INPUT_CHUNK: usize = 48 * 1024;
/// How often the receive loop looks at the cancel flag (and the
/// deadlines): a Ctrl-C is acted on within this.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// How long the host waits, for each stage of the conversation. An enclave
/// that says nothing, stalls in the middle of a frame, or keeps the job
/// going (with or without progress) past its deadline ends the
/// conversation with an error; none can make the host wait forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// From the connection to the end of `hello`.
    pub hello: Duration,
    /// From the last input byte sent to the end of the artifact: the
    /// job's run, its sealing and the artifact's transfer.
    pub job: Duration,
    /// How long a cancelled enclave may take to confirm.
    pub cancel_grace: Duration,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines {
            hello: Duration::from_secs(60),
            job: Duration::from_secs(24 * 3600),
            cancel_grace: Duration::from_millis(700),
        }
    }
}

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
    /// How far the enclave says training is (its numbers, unchecked).
    Train {
        step: u64,
        steps: u64,
        /// The loss, in millionths.
        loss_micros: u64,
        tokens_per_s: u64,
        eta_s: u64,
    },
    /// A log line from the enclave (public text).
    Log { line: String },
    /// Artifact bytes received so far.
    Received { done: u64, total: u64 },
}

/// Why the conversation failed. Causes are part of the message, never a
/// `source` too: `kolm-host` prints the chain (anyhow's `{:#}`), and a
/// source would repeat them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("transport: {0}")]
    Channel(ChannelError),
    #[error("the enclave speaks protocol versions {theirs:?}, this host {ours}")]
    Version { theirs: Vec<u32>, ours: u32 },
    /// The enclave's own words: shown escaped and bounded
    /// ([`crate::peer_text::shown`]), never raw.
    #[error(
        "the enclave reported {code}: {} {}",
        crate::peer_text::ENCLAVE_SAYS,
        crate::peer_text::shown(message)
    )]
    Enclave { code: ErrorCode, message: String },
    #[error("the enclave sent no hello within {0:?}: nothing was sent to it")]
    HelloTimeout(Duration),
    #[error(
        "the job did not end within its deadline of {0:?} (the policy's \
         limits.max_job_seconds plus time to seal, or --job-timeout): the enclave was told to \
         cancel; no artifact"
    )]
    JobDeadline(Duration),
    #[error("unexpected {kind} from the enclave {when}")]
    Unexpected {
        kind: &'static str,
        when: &'static str,
    },
    #[error("artifact chunk refused: {0}")]
    Artifact(String),
    #[error("reading input {name}: {error}")]
    Input { name: String, error: std::io::Error },
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

impl From<ChannelError> for SessionError {
    fn from(e: ChannelError) -> SessionError {
        SessionError::Channel(e)
    }
}

/// A collateral bundle directory that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("collateral bundle {path}: {reason}")]
pub struct BundleError {
    /// The directory or file.
    pub path: String,
    pub reason: String,
}

/// The files of a collateral bundle directory (`--bundle DIR`: the
/// [`crate::bundle::BUNDLE_FILES`] it holds, each missing one skipped),
/// under their receipt-v2 slot paths (`snp-vcek.der` ->
/// `evidence/snp-vcek.der`), each read with its slot's size cap. Their
/// content is the enclave's to check for shape and the verifier's to
/// judge.
pub fn read_bundle(dir: &Path) -> Result<Vec<CollateralFile>, BundleError> {
    let meta = std::fs::metadata(dir).map_err(|e| BundleError {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    if !meta.is_dir() {
        return Err(BundleError {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    let mut files = Vec::new();
    for name in crate::bundle::BUNDLE_FILES {
        let slot_path = format!("evidence/{name}");
        // Every bundle file but the AMD CRL is a collateral slot (a unit
        // test says so); the CRL is checked on the host (`bundle fetch`,
        // `bundle inspect`) and not sent.
        let Some(slot) = collateral_slot(&slot_path) else {
            continue;
        };
        let path = dir.join(name);
        let err = |reason: String| BundleError {
            path: path.display().to_string(),
            reason,
        };
        let f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(err(e.to_string())),
        };
        let mut data = Vec::new();
        f.take(slot.max_bytes.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| err(e.to_string()))?;
        if data.len() as u64 > slot.max_bytes {
            return Err(err(format!(
                "larger than its evidence slot's {} bytes",
                slot.max_bytes
            )));
        }
        if data.is_empty() {
            return Err(err("empty".into()));
        }
        files.push(CollateralFile {
            data,
            path: slot_path,
        });
    }
    Ok(files)
}

/// The files of `bundle` that are collateral of `platform` (none for a
/// platform whose evidence carries its chain, or the simulated TEE, which
/// writes its own).
pub fn platform_collateral(platform: Platform, bundle: &[CollateralFile]) -> Vec<CollateralFile> {
    let slots = evidence_slots(SpecVersion::V2, platform);
    bundle
        .iter()
        .filter(|f| {
            slots
                .iter()
                .any(|s| s.role == EvidenceRole::Collateral && s.path == f.path)
        })
        .cloned()
        .collect()
}

/// What the enclave sent back.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub hello: Hello,
    /// What the host concluded about the enclave's identity key.
    pub identity: IdentityVerdict,
    /// The artifact's file name as the enclave named it: the peer's text,
    /// never used as a path (the host names the file itself, `main.rs`).
    pub name: String,
    pub artifact: Vec<u8>,
}

/// Runs `job` through the enclave at the other end of `ch`.
/// `check_identity` judges the hello's identity evidence before anything
/// is sent: when it refuses, the enclave gets an `identity-rejected` error
/// and nothing else. `bundle` is the host's collateral ([`read_bundle`]);
/// its files of the enclave's platform go with the job. `cancelled` is
/// looked at between input chunks and every [`CANCEL_POLL`] while the job
/// runs: once set, the enclave gets `cancel`. `deadlines` bound every wait.
pub fn submit<S: Stream>(
    ch: &mut Channel<S>,
    job: &Job,
    bundle: &[CollateralFile],
    check_identity: &mut dyn FnMut(&Hello) -> Result<IdentityVerdict, IdentityError>,
    cancelled: &AtomicBool,
    deadlines: Deadlines,
    on_event: &mut dyn FnMut(Event),
) -> Result<Outcome, SessionError> {
    let hello = receive_hello(ch, cancelled, deadlines)?;
    check_version(ch, &hello)?;
    let identity = judge_identity(ch, &hello, check_identity)?;
    on_event(Event::Hello {
        platform: hello.platform.to_string(),
        identity_key: hello.identity_key,
        identity: identity.describe(),
    });

    send_job(ch, job, &hello, bundle)?;
    send_inputs(ch, job, cancelled, deadlines, on_event)?;

    let (name, artifact) = receive_artifact(ch, cancelled, deadlines, on_event)?;
    Ok(Outcome {
        hello,
        identity,
        name,
        artifact,
    })
}

/// Waits (up to the hello deadline, looking at the cancel flag) for the
/// enclave's first message, which must be its `hello`. Nothing is sent.
fn receive_hello<S: Stream>(
    ch: &mut Channel<S>,
    cancelled: &AtomicBool,
    deadlines: Deadlines,
) -> Result<Hello, SessionError> {
    let hello_by = Instant::now() + deadlines.hello;
    let first = loop {
        if cancelled.load(Ordering::SeqCst) {
            // Nothing was sent: there is no job to cancel.
            return Err(SessionError::Cancelled);
        }
        if Instant::now() >= hello_by {
            return Err(SessionError::HelloTimeout(deadlines.hello));
        }
        if let Some(m) = ch.recv_within(CANCEL_POLL)? {
            break m;
        }
    };
    match first {
        Message::Hello(h) => Ok(h),
        Message::Error(e) => Err(enclave(e)),
        other => Err(SessionError::Unexpected {
            kind: other.kind().as_str(),
            when: "instead of hello",
        }),
    }
}

/// Refuses (with an `unsupported-version` error to the enclave) a hello
/// that does not offer this host's protocol version.
fn check_version<S: Stream>(ch: &mut Channel<S>, hello: &Hello) -> Result<(), SessionError> {
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
    Ok(())
}

/// Judges the hello's identity evidence with `check_identity`; when it
/// refuses, the enclave gets an `identity-rejected` error and nothing else.
fn judge_identity<S: Stream>(
    ch: &mut Channel<S>,
    hello: &Hello,
    check_identity: &mut dyn FnMut(&Hello) -> Result<IdentityVerdict, IdentityError>,
) -> Result<IdentityVerdict, SessionError> {
    match check_identity(hello) {
        Ok(v) => Ok(v),
        Err(e) => {
            // The reason stays with the host: the peer learns only that it
            // was refused, nothing of the job or its policy.
            ch.fail(
                ErrorCode::IdentityRejected,
                "the host refused this enclave's identity evidence; nothing was sent",
            );
            Err(e.into())
        }
    }
}

/// Sends `job-submit`: the spec, the inputs' declarations (every name
/// checked before anything is sent), the policy, and the bundle's
/// collateral for the enclave's platform.
fn send_job<S: Stream>(
    ch: &mut Channel<S>,
    job: &Job,
    hello: &Hello,
    bundle: &[CollateralFile],
) -> Result<(), SessionError> {
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
        collateral: platform_collateral(hello.platform, bundle),
    }))?;
    Ok(())
}

/// Follows the running job (up to the job deadline, sending `cancel` when
/// the flag is set or the deadline passes) until `bye`, reporting progress,
/// and returns the artifact's name and bytes.
fn receive_artifact<S: Stream>(
    ch: &mut Channel<S>,
    cancelled: &AtomicBool,
    deadlines: Deadlines,
    on_event: &mut dyn FnMut(Event),
) -> Result<(String, Vec<u8>), SessionError> {
    let job_by = Instant::now() + deadlines.job;
    let mut artifact = Artifact::default();
    loop {
        if cancelled.load(Ordering::SeqCst) {
            return Err(cancel(ch, deadlines));
        }
        if Instant::now() >= job_by {
            let _ = cancel(ch, deadlines);
            return Err(SessionError::JobDeadline(deadlines.job));
        }
        let Some(message) = ch.recv_within(CANCEL_POLL)? else {
            continue;
        };
        match message {
            Message::Progress(p) => on_event(Event::Progress {
                phase: p.phase,
                done: p.done,
                total: p.total,
            }),
            Message::TrainProgress(t) => on_event(Event::Train {
                step: t.step,
                steps: t.steps,
                loss_micros: t.loss_micros,
                tokens_per_s: t.tokens_per_s,
                eta_s: t.eta_s,
            }),
            Message::Log(l) => on_event(Event::Log { line: l.line }),
            Message::ArtifactChunk(c) => artifact.take(c, on_event)?,
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
    artifact.finish()
}

/// The artifact as its chunks arrive: the name and size the first chunk
/// gave, and the bytes so far.
#[derive(Default)]
struct Artifact {
    bytes: Vec<u8>,
    name: Option<String>,
    total: Option<u64>,
}

impl Artifact {
    /// Takes one chunk: for the first chunk's name and size (within
    /// [`MAX_ARTIFACT_BYTES`]), at the next offset, not past the size.
    fn take(
        &mut self,
        c: ArtifactChunk,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), SessionError> {
        let n = c.name.as_str().to_string();
        match (&self.name, self.total) {
            (None, None) => {
                if c.total > MAX_ARTIFACT_BYTES {
                    return Err(SessionError::Artifact(format!(
                        "{} bytes is over the limit of {MAX_ARTIFACT_BYTES}",
                        c.total
                    )));
                }
                self.name = Some(n);
                self.total = Some(c.total);
            }
            (Some(have), Some(t)) if *have == n && t == c.total => {}
            _ => {
                return Err(SessionError::Artifact(
                    "a chunk names another artifact or size".into(),
                ));
            }
        }
        if c.offset != self.bytes.len() as u64 {
            return Err(SessionError::Artifact(format!(
                "chunk at offset {}, expected {}",
                c.offset,
                self.bytes.len()
            )));
        }
        self.bytes.extend_from_slice(&c.data);
        let t = self.total.unwrap_or(0);
        if self.bytes.len() as u64 > t {
            return Err(SessionError::Artifact(format!("more than {t} bytes")));
        }
        on_event(Event::Received {
            done: self.bytes.len() as u64,
            total: t,
        });
        Ok(())
    }

    /// The name and bytes once `bye` came: the whole artifact, or an error
    /// saying what is missing.
    fn finish(self) -> Result<(String, Vec<u8>), SessionError> {
        match (self.name, self.total) {
            (Some(name), Some(t)) if self.bytes.len() as u64 == t => Ok((name, self.bytes)),
            (Some(_), Some(t)) => Err(SessionError::Artifact(format!(
                "the enclave said bye after {} of {t} bytes",
                self.bytes.len()
            ))),
            _ => Err(SessionError::Artifact(
                "the enclave said bye without an artifact".into(),
            )),
        }
    }
}

/// Sends `cancel` and waits (a while) for the enclave to confirm with its
/// error report or to close.
fn cancel<S: Stream>(ch: &mut Channel<S>, deadlines: Deadlines) -> SessionError {
    let sent = ch.send(&Message::Cancel(Cancel {
        reason: "the user interrupted kolm-host".into(),
    }));
    if sent.is_ok() {
        let end = Instant::now() + deadlines.cancel_grace;
        while Instant::now() < end {
            match ch.recv_within(CANCEL_POLL) {
                Ok(None)
                | Ok(Some(Message::Progress(_) | Message::TrainProgress(_) | Message::Log(_))) => {}
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
    deadlines: Deadlines,
    on_event: &mut dyn FnMut(Event),
) -> Result<(), SessionError> {
    let total = job.input_bytes();
    let mut sent = 0u64;
    let mut buf = vec![0u8; INPUT_CHUNK];
    for input in &job.inputs {
        let name = file_name(&input.name)?;
        let io = |error| SessionError::Input {
            name: input.name.clone(),
            error,
        };
        let mut f = std::fs::File::open(&input.path).map_err(io)?;
        let mut offset = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            if cancelled.load(Ordering::SeqCst) {
                return Err(cancel(ch, deadlines));
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use std::path::PathBuf;

    use kolm_transport::FrameOptions;
    use kolm_transport::memory;
    use kolm_transport::message::{HelloEvidence, MIN_MAX_FRAME};

    use super::*;
    use crate::identity::IdentityVerdict;

    const DER: &[u8] = &[0x30, 0x03, 0x02, 0x01, 0x00];

    fn bundle_dir(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, data) in files {
            std::fs::write(dir.path().join(name), data).unwrap();
        }
        dir
    }

    /// Each error as `kolm-host` prints it (anyhow's `{:#}`): no cause
    /// said twice.
    #[test]
    fn no_cause_is_printed_twice() {
        let os = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let frame = kolm_transport::FrameError::Io(os());
        for e in [
            SessionError::Channel(ChannelError::Receive(frame)),
            SessionError::Input {
                name: "corpus.txt".into(),
                error: os(),
            },
        ] {
            let shown = format!("{:#}", anyhow::Error::from(e));
            let cause = os().to_string();
            assert_eq!(shown.matches(&cause).count(), 1, "{shown}");
        }
    }

    #[test]
    fn every_bundle_file_but_the_crl_is_a_collateral_slot() {
        for name in crate::bundle::BUNDLE_FILES {
            assert_eq!(
                collateral_slot(&format!("evidence/{name}")).is_some(),
                name != crate::bundle::SNP_CRL,
                "{name}"
            );
        }
    }

    #[test]
    fn a_bundle_is_read_under_its_slot_paths_within_their_caps() {
        let dir = bundle_dir(&[
            ("snp-vcek.der", DER),
            ("tdx-collateral.json", b"{}"),
            ("unrelated.txt", b"ignored"),
        ]);
        let files = read_bundle(dir.path()).unwrap();
        assert_eq!(
            files,
            [
                CollateralFile {
                    data: DER.to_vec(),
                    path: "evidence/snp-vcek.der".into()
                },
                CollateralFile {
                    data: b"{}".to_vec(),
                    path: "evidence/tdx-collateral.json".into()
                },
            ]
        );
        assert!(read_bundle(bundle_dir(&[]).path()).unwrap().is_empty());

        let big = vec![0x30; 16 * 1024 + 1];
        let dir = bundle_dir(&[("snp-vcek.der", &big)]);
        let e = read_bundle(dir.path()).unwrap_err();
        assert!(e.path.ends_with("snp-vcek.der"), "{e}");
        assert!(
            e.to_string()
                .contains("larger than its evidence slot's 16384 bytes"),
            "{e}"
        );
        let dir = bundle_dir(&[("snp-ask-ark.pem", b"")]);
        let e = read_bundle(dir.path()).unwrap_err();
        assert!(e.to_string().ends_with("snp-ask-ark.pem: empty"), "{e}");
        let missing = dir.path().join("absent");
        let e = read_bundle(&missing).unwrap_err();
        assert_eq!(e.path, missing.display().to_string());
        let e = read_bundle(&dir.path().join("snp-ask-ark.pem")).unwrap_err();
        assert!(e.to_string().ends_with("not a directory"), "{e}");
    }

    /// The host's end of `submit` against a scripted enclave of
    /// `platform` that reads the job-submit and refuses it: what the
    /// enclave received.
    fn submitted(platform: Platform, bundle: &[CollateralFile]) -> JobSubmit {
        let (host_end, enclave_end) = memory::pipe();
        let opts = FrameOptions::default();
        let enclave = std::thread::spawn(move || {
            let mut ch = Channel::new(enclave_end, opts);
            let evidence = match platform {
                Platform::Tdx => vec![HelloEvidence {
                    data: vec![4; 100],
                    path: "evidence/tdx-quote.bin".into(),
                }],
                Platform::SevSnp => vec![HelloEvidence {
                    data: vec![2; kolm_format::evidence::SNP_REPORT_BYTES as usize],
                    path: "evidence/snp-report.bin".into(),
                }],
                _ => vec![HelloEvidence {
                    data: vec![0x84; 100],
                    path: kolm_format::evidence::SIM_NITRO_DOC_PATH.into(),
                }],
            };
            ch.send(&Message::Hello(Hello {
                versions: vec![PROTOCOL_VERSION],
                platform,
                max_frame: MIN_MAX_FRAME,
                measurement: vec![1; 48],
                identity_key: [9; 32],
                evidence,
            }))
            .unwrap();
            let Message::JobSubmit(j) = ch.recv().unwrap() else {
                panic!("no job-submit")
            };
            ch.fail(ErrorCode::Busy, "scripted");
            j
        });
        let job = Job {
            spec_path: PathBuf::from("job.toml"),
            spec: b"id = \"t\"".to_vec(),
            policy_path: PathBuf::from("policy.toml"),
            policy: b"schema = \"kolm.policy.v1\"".to_vec(),
            inputs: Vec::new(),
        };
        let mut ch = Channel::new(host_end, opts);
        let result = submit(
            &mut ch,
            &job,
            bundle,
            &mut |h: &Hello| {
                Ok(IdentityVerdict::Unpinned {
                    platform: h.platform,
                    checks: 0,
                })
            },
            &AtomicBool::new(false),
            Deadlines::default(),
            &mut |_| {},
        );
        assert!(
            matches!(
                result,
                Err(SessionError::Enclave {
                    code: ErrorCode::Busy,
                    ..
                })
            ),
            "{result:?}"
        );
        drop(ch);
        enclave.join().unwrap()
    }

    #[test]
    fn submit_carries_the_bundles_collateral_of_the_enclaves_platform() {
        let dir = bundle_dir(&[
            ("snp-vcek.der", DER),
            ("snp-ask-ark.pem", b"-----BEGIN CERTIFICATE-----"),
            ("tdx-collateral.json", b"{\"tcb_info\": \"x\"}"),
        ]);
        let bundle = read_bundle(dir.path()).unwrap();
        let paths = |j: &JobSubmit| {
            j.collateral
                .iter()
                .map(|f| f.path.clone())
                .collect::<Vec<_>>()
        };

        let tdx = submitted(Platform::Tdx, &bundle);
        assert_eq!(
            tdx.collateral,
            [CollateralFile {
                data: b"{\"tcb_info\": \"x\"}".to_vec(),
                path: "evidence/tdx-collateral.json".into()
            }]
        );
        let snp = submitted(Platform::SevSnp, &bundle);
        assert_eq!(
            paths(&snp),
            ["evidence/snp-vcek.der", "evidence/snp-ask-ark.pem"]
        );
        assert_eq!(snp.collateral[0].data, DER);
        // The simulated TEE writes its own; no bundle, nothing.
        assert!(
            submitted(Platform::Simulated, &bundle)
                .collateral
                .is_empty()
        );
        assert!(submitted(Platform::Tdx, &[]).collateral.is_empty());
    }
}
