//! The enclave service (`kolm-enclave start --listen ADDR`): the supervisor
//! as a long-lived process that takes jobs from the host agent over a
//! transport (`kolm-transport`), one at a time, runs each exactly as
//! `kolm-enclave run` does (the same sandbox, the same sealing), and sends
//! the artifact back.
//!
//! One connection is one job (`docs/sealed-run.md`, "Conversation"):
//!
//! 1. enclave: `hello` (protocol versions, platform, frame limit, launch
//!    measurement, the identity key that signs this enclave's receipts, and
//!    the platform's evidence over that key, made for this connection);
//! 2. host: `job-submit` (spec, policy, declared inputs, the host's
//!    collateral bundle), or `bye`; each collateral file is checked for its
//!    shape before anything else happens;
//! 3. host: `input-chunk`s, in order, until every declared byte arrived;
//!    each input is checked against its SHA-256 before the job starts
//!    (`inputs.rs`); a bundle over `max_input_bytes` is refused before any
//!    byte is stored;
//! 4. enclave: `progress` while it runs the job; then the sealed artifact as
//!    `artifact-chunk`s and `bye`, or an `error` (no artifact). A `cancel`
//!    (or the host going away) while the job runs kills it: no artifact.
//!
//! Nothing the host sends is trusted: every message is decoded strictly,
//! every input is hashed, and the host never sees anything but the sealed
//! artifact and public error texts. The host's collateral is used only
//! where the platform and the enclave-side bundle have none
//! ([`AttestationProvider::job_collateral`]); the receipt binds whatever is
//! used, and the verifier judges it. A job that fails, or a service that is
//! killed mid-job, leaves no artifact and does not advance the chain state
//! (the artifact and the state are written atomically at the very end, by
//! `run.rs`); the job's processes die with the sandbox (`sandbox/init.rs`).
//!
//! No plaintext outlives its job: inputs are staged under
//! [`fsutil::staging_root`] (memory-backed `/dev/shm` where there is one)
//! in directories the service locks while it holds them; the service sweeps
//! unheld ones (a killed supervisor's) at start and after every job, and
//! SIGINT, SIGTERM and SIGHUP cancel the running job, remove its files and
//! exit ([`handle_stop_signals`]). One job at a time holds the state
//! directory ([`StateLock`]); a cancel races the job's commit point
//! ([`run::CommitPoint`]), and the host is told which side won.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kolm_format::binding::identity_report_data;
use kolm_format::evidence::EvidenceRole;
use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;
use kolm_transport::frame::FrameOptions;
use kolm_transport::message::{
    ArtifactChunk, ErrorCode, FileName, Hello, HelloEvidence, IDENTITY_KEY_LEN, JobSubmit, LogLine,
    LogStream, MAX_HELLO_EVIDENCE, Message, Progress, SUPPORTED_VERSIONS,
};
use kolm_transport::{Channel, Listener, Stream};
use ring::signature::{Ed25519KeyPair, KeyPair};

use crate::attest::{
    AttestError, AttestationProvider, CollateralOrigin, HostCollateral, JobCollateral,
};
use crate::chain_state::{ChainStateError, StateLock};
use crate::fsutil;
use crate::inputs::InputReceiver;
use crate::run::{self, CommitPoint, RunRequest};
use crate::train_progress;

/// Bytes of an artifact per `artifact-chunk`.
const ARTIFACT_CHUNK: usize = 1 << 20;
/// How often the service looks at the connection while a job runs.
const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Where artifacts and the chain state live (the run's `out_dir`), and
    /// each job's scratch directory while it runs.
    pub state_dir: PathBuf,
    /// The largest bundle of inputs accepted, in bytes.
    pub max_input_bytes: u64,
    /// Frame limit and timeouts.
    pub frames: FrameOptions,
    /// Serve one connection, then return.
    pub once: bool,
    /// The `kolm-enclave` binary that runs the sandbox's stage 2 (`None`:
    /// this process's own).
    pub runtime_exe: Option<PathBuf>,
    /// The job binary the sandbox execs (`None`: `kolm-jobs` beside the
    /// runtime binary).
    pub jobs_exe: Option<PathBuf>,
}

/// Why the service stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    #[error(transparent)]
    Transport(#[from] kolm_transport::TransportError),
    #[error("state directory {path}: {error}")]
    State { path: String, error: std::io::Error },
    #[error("runtime binary {path}: {error}")]
    Runtime { path: String, error: std::io::Error },
    /// The job binary could not be opened at start: no job can run (the
    /// service starts all the same and refuses each job with this message).
    #[error(
        "jobs binary {path}: {error} (every job runs from it: build it beside kolm-enclave with \
         `cargo build --locked --bins`, or name it with --jobs-bin PATH)"
    )]
    Jobs { path: String, error: std::io::Error },
}

/// Why the platform's evidence over the identity key could not be made
/// ([`Service::identity_evidence`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityEvidenceError {
    #[error("attesting the identity key: {error}")]
    Attest { error: AttestError },
}

/// Why a job cannot run from a pinned binary ([`Pinned::for_job`]); `what`
/// names the binary (`runtime binary`, `jobs binary`).
#[derive(Debug, thiserror::Error)]
enum PinnedError {
    #[error("fstat of the {what} opened at start: {error}")]
    Fstat {
        what: &'static str,
        error: std::io::Error,
    },
    #[error("a directory for the {what}'s copy: {error}")]
    CopyDir {
        what: &'static str,
        error: std::io::Error,
    },
    #[error("copying the {what} to {target}: {error}")]
    Copy {
        what: &'static str,
        target: String,
        error: std::io::Error,
    },
}

/// How one connection ended, for the service's log (public: names what
/// happened, never job data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The artifact was sent.
    Sealed { artifact: PathBuf },
    /// The host said goodbye before submitting a job.
    NoJob,
    /// The connection ended with an error report (sent, or received).
    Failed { code: ErrorCode, message: String },
}

/// The service: a provider chosen at start and the identity key that signs
/// every receipt it seals.
pub struct Service<'a> {
    provider: &'a (dyn AttestationProvider + Send + Sync),
    key: Ed25519KeyPair,
    config: ServiceConfig,
    runtime: Pinned,
    /// The job binary, or why it could not be opened at start (every job
    /// is then refused with that message; the service still answers).
    jobs: Result<Pinned, ServiceError>,
}

/// A binary jobs run from, opened at start: the `kolm-enclave` binary this
/// service was started from (stage 2 of the sandbox), and the job binary
/// (`kolm-jobs`) the sandbox execs. While the file at its path is still
/// that file, jobs run from the path; once it was replaced or deleted (a
/// rebuild under a running service), the service writes its own copy of
/// the very file it opened (from the descriptor, so the same bytes) into a
/// locked directory of the state directory and runs every later job from
/// that, so a rebuild changes nothing for it.
struct Pinned {
    /// `runtime binary` or `jobs binary`, for messages.
    what: &'static str,
    path: PathBuf,
    file: std::fs::File,
    copy: Mutex<Option<(fsutil::JobDir, PathBuf)>>,
}

/// Prefix of the directories holding the service's copies of its binaries.
const RUNTIME_COPY_PREFIX: &str = ".kolm-runtime-";

impl Pinned {
    /// The job binary: `configured`, or `kolm-jobs` beside `runtime` (the
    /// path the runtime binary was started from).
    fn open_jobs(configured: Option<&Path>, runtime: &Path) -> Result<Pinned, ServiceError> {
        let path = match configured {
            Some(p) => p.to_path_buf(),
            None => runtime
                .parent()
                .unwrap_or(Path::new("."))
                .join(run::JOBS_BINARY),
        };
        let error = |error| ServiceError::Jobs {
            path: path.display().to_string(),
            error,
        };
        let file = std::fs::File::open(&path).map_err(error)?;
        if !file.metadata().map_err(error)?.is_file() {
            return Err(error(std::io::Error::other("not a regular file")));
        }
        Ok(Pinned {
            what: "jobs binary",
            path,
            file,
            copy: Mutex::new(None),
        })
    }

    fn open_runtime(configured: Option<&Path>) -> Result<Pinned, ServiceError> {
        let (path, fixed) = match configured {
            Some(p) => (p.to_path_buf(), true),
            None => (
                std::env::current_exe().map_err(|source| ServiceError::Runtime {
                    path: "/proc/self/exe".into(),
                    error: source,
                })?,
                false,
            ),
        };
        let open_path: &Path = if fixed {
            &path
        } else {
            // The running binary itself, whatever has happened to its path
            // since exec.
            Path::new("/proc/self/exe")
        };
        let file = std::fs::File::open(open_path).map_err(|source| ServiceError::Runtime {
            path: path.display().to_string(),
            error: source,
        })?;
        Ok(Pinned {
            what: "runtime binary",
            path,
            file,
            copy: Mutex::new(None),
        })
    }

    /// The path the next job runs from (see [`Pinned`]).
    fn for_job(&self, state_dir: &Path) -> Result<PathBuf, PinnedError> {
        use std::os::unix::fs::MetadataExt;
        let mut copy = self
            .copy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, p)) = copy.as_ref() {
            return Ok(p.clone());
        }
        let opened = self.file.metadata().map_err(|error| PinnedError::Fstat {
            what: self.what,
            error,
        })?;
        let same = std::fs::metadata(&self.path)
            .is_ok_and(|m| m.dev() == opened.dev() && m.ino() == opened.ino());
        if same {
            return Ok(self.path.clone());
        }
        let base = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().replace(" (deleted)", ""))
            .unwrap_or_else(|| "kolm-enclave".into());
        let dir =
            fsutil::JobDir::create(state_dir, RUNTIME_COPY_PREFIX, 0o755).map_err(|error| {
                PinnedError::CopyDir {
                    what: self.what,
                    error,
                }
            })?;
        let target = dir.path().join(base);
        let written = (|| {
            use std::io::{Seek, Write};
            use std::os::unix::fs::OpenOptionsExt;
            let mut src = self.file.try_clone()?;
            src.rewind()?;
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o755)
                .open(&target)?;
            std::io::copy(&mut src, &mut out)?;
            out.flush()?;
            out.sync_all()
        })();
        written.map_err(|error| PinnedError::Copy {
            what: self.what,
            target: target.display().to_string(),
            error,
        })?;
        tracing::warn!(
            binary = self.what,
            original = %self.path.display(),
            copy = %target.display(),
            "a binary was replaced or deleted since the service started: jobs run from a copy \
             of the file the service opened at start"
        );
        *copy = Some((dir, target.clone()));
        Ok(target)
    }
}

/// The job of a running connection, for a stop signal: its canceller
/// and commit point.
struct Running {
    /// Which connection's job ([`NEXT_JOB`]).
    id: u64,
    canceller: crate::sandbox::Canceller,
    commit: Arc<CommitPoint>,
}

/// Each connection's job from its start to the end of its connection.
/// One entry per connection, never one slot for all: dropping a
/// [`Running`] fires its canceller, so a second service in the process (the
/// tests run several) must never replace the first's entry.
static RUNNING: Mutex<Vec<Running>> = Mutex::new(Vec::new());
/// The id the next registered job gets.
static NEXT_JOB: AtomicU64 = AtomicU64::new(1);
thread_local! {
    /// The job this thread's connection registered, removed at its end.
    static THIS_JOB: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}
/// A stop signal arrived: the service ends after this connection.
static STOPPING: AtomicBool = AtomicBool::new(false);

fn running() -> std::sync::MutexGuard<'static, Vec<Running>> {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Makes SIGINT, SIGTERM and SIGHUP stop the service cleanly: the running
/// job is cancelled (unless it passed its commit point: then it is
/// sealed first), every job directory of this process is removed, and the
/// process exits with 128 + the signal. Call it before any other thread
/// starts (the signals are blocked in every thread and taken by one).
pub fn handle_stop_signals() -> std::io::Result<()> {
    stop_signals::block()?;
    std::thread::Builder::new()
        .name("kolm-stop-signals".into())
        .spawn(|| {
            let sig = stop_signals::wait();
            STOPPING.store(true, Ordering::SeqCst);
            tracing::warn!(
                signal = sig,
                "stop signal: cancelling the running job, removing its files, exiting"
            );
            let mut sealing = false;
            for r in running().iter_mut() {
                if r.commit.cancel() {
                    r.canceller.cancel();
                } else {
                    sealing = true;
                }
            }
            // The job thread ends once the sandbox killed the job; a job
            // past its commit point is let finish sealing.
            let t = Instant::now();
            while !running().is_empty() && (sealing || t.elapsed() < Duration::from_secs(10)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            // Held until exit: no new job directory can be made.
            let _held = fsutil::remove_live_job_dirs();
            std::process::exit(128 + sig);
        })?;
    Ok(())
}

/// The signals that stop the service, taken by one thread.
#[allow(unsafe_code)]
mod stop_signals {
    const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

    fn set() -> libc::sigset_t {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it fully
        // before sigaddset reads it; both only write through the pointer.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            set
        }
    }

    /// Blocks the signals in the calling thread and the threads it starts
    /// later (children get an empty mask: `std::process::Command` resets it).
    pub(super) fn block() -> std::io::Result<()> {
        let set = set();
        // SAFETY: `set` is an initialised sigset_t; the old mask is not
        // asked for (null).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    /// Waits for one of the signals; returns its number.
    pub(super) fn wait() -> libc::c_int {
        let set = set();
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is initialised and `sig` a valid place for the
        // kernel to write the signal number.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        if rc != 0 { libc::SIGTERM } else { sig }
    }
}

impl std::fmt::Debug for Service<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("platform", &self.provider.platform())
            .field("identity_key", &hex::encode(self.identity_key()))
            .field("config", &self.config)
            .finish()
    }
}

impl<'a> Service<'a> {
    /// A service with a fresh identity key (it never leaves this process).
    pub fn new(
        provider: &'a (dyn AttestationProvider + Send + Sync),
        config: ServiceConfig,
    ) -> Result<Service<'a>, ServiceError> {
        std::fs::create_dir_all(&config.state_dir).map_err(|source| ServiceError::State {
            path: config.state_dir.display().to_string(),
            error: source,
        })?;
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| ServiceError::State {
            path: "identity key".into(),
            error: std::io::Error::other("generating the identity key failed"),
        })?;
        let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| ServiceError::State {
            path: "identity key".into(),
            error: std::io::Error::other("loading the identity key failed"),
        })?;
        let runtime = Pinned::open_runtime(config.runtime_exe.as_deref())?;
        let jobs = Pinned::open_jobs(config.jobs_exe.as_deref(), &runtime.path).inspect_err(|e| {
            tracing::warn!(error = %e, "no job can run: every job is refused");
        });
        let service = Service {
            provider,
            key,
            config,
            runtime,
            jobs,
        };
        service.sweep("start");
        Ok(service)
    }

    /// Removes job directories a killed supervisor left behind (unheld
    /// ones of this user), in the staging root and the state directory.
    fn sweep(&self, when: &str) {
        let root = fsutil::staging_root();
        let places: [(&Path, &[&str]); 2] = [
            (&root, &[fsutil::JOB_DIR_PREFIX, fsutil::INPUTS_DIR_PREFIX]),
            (
                &self.config.state_dir,
                &[fsutil::LEGACY_INPUTS_PREFIX, RUNTIME_COPY_PREFIX],
            ),
        ];
        for (dir, prefixes) in places {
            match fsutil::sweep_leftovers(dir, prefixes) {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    dir = %dir.display(),
                    removed = n,
                    when,
                    "removed job directories left by a killed supervisor"
                ),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, when, "sweeping job directories")
                }
            }
        }
    }

    /// The identity key's public half, as `hello` announces it.
    pub fn identity_key(&self) -> [u8; IDENTITY_KEY_LEN] {
        let mut k = [0u8; IDENTITY_KEY_LEN];
        k.copy_from_slice(self.key.public_key().as_ref());
        k
    }

    /// The platform's evidence over the identity key for a `hello`, made
    /// afresh for each connection (a Nitro document is judged by its own
    /// timestamp): the attestation of
    /// `identity_report_data(identity_key)`, with the provider's own
    /// collateral when it has any and it fits [`MAX_HELLO_EVIDENCE`] (else
    /// the host completes it from its bundle). Nothing on platform `none`.
    pub fn identity_evidence(&self) -> Result<Vec<HelloEvidence>, IdentityEvidenceError> {
        if self.provider.platform() == Platform::None {
            return Ok(Vec::new());
        }
        let bundle = self
            .provider
            .identity_evidence(&identity_report_data(&self.identity_key()))
            .map_err(|error| IdentityEvidenceError::Attest { error })?;
        let (attestation, collateral): (Vec<_>, Vec<_>) = bundle
            .files
            .into_iter()
            .partition(|(_, _, role)| *role == EvidenceRole::Attestation);
        let mut files: Vec<HelloEvidence> = attestation
            .into_iter()
            .map(|(path, data, _)| HelloEvidence { data, path })
            .collect();
        let used: usize = files.iter().map(|f| f.data.len()).sum();
        let extra: usize = collateral.iter().map(|(_, d, _)| d.len()).sum();
        if used.saturating_add(extra) <= MAX_HELLO_EVIDENCE {
            files.extend(
                collateral
                    .into_iter()
                    .map(|(path, data, _)| HelloEvidence { data, path }),
            );
        }
        Ok(files)
    }

    /// Accepts connections one after another (one job at a time); with
    /// `once`, returns after the first.
    pub fn serve(&self, listener: &dyn Listener) -> Result<(), ServiceError> {
        loop {
            let stream = listener.accept()?;
            let outcome = self.handle(stream);
            tracing::info!(?outcome, "connection ended");
            self.sweep("after a job");
            if STOPPING.load(Ordering::SeqCst) {
                // The stop-signal thread removes what is left and exits
                // with 128 + the signal.
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            if self.config.once {
                return Ok(());
            }
        }
    }

    /// Runs one conversation to its end.
    pub fn handle<S: Stream>(&self, stream: S) -> Outcome {
        let mut ch = Channel::new(stream, self.config.frames);
        let mut job: Option<JobLog> = None;
        let outcome = match self.converse(&mut ch, &mut job) {
            Ok(outcome) => outcome,
            Err((code, message)) => {
                ch.fail(code, &message);
                Outcome::Failed { code, message }
            }
        };
        if let Some(j) = job {
            let seconds = j.started.elapsed().as_secs_f64();
            match &outcome {
                Outcome::Sealed { artifact } => tracing::info!(
                    job = %j.id,
                    kind = %j.kind,
                    outcome = "sealed",
                    seconds = format!("{seconds:.1}"),
                    artifact = %artifact.display(),
                    "job ended"
                ),
                Outcome::Failed { code, message } => tracing::warn!(
                    job = %j.id,
                    kind = %j.kind,
                    outcome = code.as_str(),
                    seconds = format!("{seconds:.1}"),
                    reason = %message,
                    "job failed"
                ),
                Outcome::NoJob => {}
            }
        }
        if let Some(id) = THIS_JOB.take() {
            running().retain(|r| r.id != id);
        }
        outcome
    }

    /// One connection's conversation (module header): `hello`, the
    /// host's `job-submit`, its inputs, the job, the artifact.
    fn converse<S: Stream>(
        &self,
        ch: &mut Channel<S>,
        log: &mut Option<JobLog>,
    ) -> Result<Outcome, (ErrorCode, String)> {
        self.send_hello(ch)?;
        let job = match receive_job(ch)? {
            Submitted::Job(job) => job,
            Submitted::Ended(outcome) => return Ok(outcome),
        };

        // Garbage in the host's collateral is refused before any input
        // byte is stored.
        let host_collateral = HostCollateral::parse(&job.collateral)
            .map_err(|e| (ErrorCode::InputRejected, e.to_string()))?;
        let named = JobLog::of(&job.spec);
        tracing::info!(job = %named.id, kind = %named.kind, "job started");
        let job_id = named.id.clone();
        *log = Some(named);
        let claimed = self.claim(&job_id)?;

        // A directory of this job alone, memory-backed where possible,
        // removed whatever happens (and swept if this process is killed).
        let scratch =
            fsutil::JobDir::create(&fsutil::staging_root(), fsutil::INPUTS_DIR_PREFIX, 0o700)
                .map_err(|e| (ErrorCode::Internal, format!("input directory: {e}")))?;
        let input_dir = scratch.path().join("inputs");
        std::fs::create_dir(&input_dir)
            .map_err(|e| (ErrorCode::Internal, format!("input directory: {e}")))?;
        self.receive_inputs(ch, &job, &input_dir)?;

        progress(ch, "job", 0, 1)?;
        // A fine-tune job's stdout, line by line, for its training progress.
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        let req = RunRequest {
            spec: &job.spec,
            policy: &job.policy,
            input_dir: &input_dir,
            out_dir: &self.config.state_dir,
            runtime_exe: Some(&claimed.runtime_exe),
            jobs_exe: Some(&claimed.jobs_exe),
            fine_tune: run::FineTuneRunOptions {
                progress_lines: Some(lines_tx),
                ..Default::default()
            },
        };
        let provider = ForJob {
            inner: self.provider,
            host: host_collateral,
            used: Mutex::new(None),
        };
        let (result, late_cancel) =
            self.run_watching(ch, &claimed.lock, &req, &provider, &lines_rx)?;
        drop(scratch);
        send_job_log(ch, &job_id, &result, late_cancel, &provider)?;
        if let Some(g) = &result.gate_failure {
            // Sealed so the failure is on record, but not handed out as a
            // result: the host gets the reason.
            return Err((ErrorCode::JobFailed, format!("quality gate failed: {g}")));
        }
        progress(ch, "job", 1, 1)?;
        send_artifact(ch, &result.artifact)?;
        ch.close().map_err(channel_err)?;
        Ok(Outcome::Sealed {
            artifact: result.artifact,
        })
    }

    /// `hello`: versions, platform, frame limit, measurement, the identity
    /// key and the platform's evidence over it.
    fn send_hello<S: Stream>(&self, ch: &mut Channel<S>) -> Result<(), (ErrorCode, String)> {
        let evidence = self
            .identity_evidence()
            .map_err(|e| (ErrorCode::Internal, e.to_string()))?;
        let hello = Hello {
            versions: SUPPORTED_VERSIONS.to_vec(),
            platform: self.provider.platform(),
            max_frame: self.config.frames.max_frame(),
            measurement: measurement(self.provider),
            identity_key: self.identity_key(),
            evidence,
        };
        ch.send(&Message::Hello(hello)).map_err(channel_err)
    }

    /// The state directory, for job `job_id`, and the binaries it runs
    /// from: the state directory is this job's until its artifact and chain
    /// state are written (a second job is refused before any of its bytes
    /// is stored), and the binaries are ready before the host sends its
    /// inputs.
    fn claim(&self, job_id: &str) -> Result<Claimed, (ErrorCode, String)> {
        let holder = format!(
            "kolm-enclave start (pid {}), job {job_id}",
            std::process::id(),
        );
        let lock = StateLock::acquire(&self.config.state_dir, &holder).map_err(|e| match e {
            ChainStateError::Busy { .. } => (ErrorCode::Busy, e.to_string()),
            other => (ErrorCode::Internal, other.to_string()),
        })?;
        let runtime_exe = self
            .runtime
            .for_job(&self.config.state_dir)
            .map_err(|e| (ErrorCode::Internal, format!("runtime binary: {e}")))?;
        let jobs_exe = self
            .jobs
            .as_ref()
            .map_err(|e| (ErrorCode::Internal, e.to_string()))?
            .for_job(&self.config.state_dir)
            .map_err(|e| (ErrorCode::Internal, format!("jobs binary: {e}")))?;
        Ok(Claimed {
            lock,
            runtime_exe,
            jobs_exe,
        })
    }

    /// Runs the job while watching the connection: a `cancel` from the
    /// host, anything else it sends, or the host going away kills the job
    /// (nothing is sealed, the chain state does not advance), unless the
    /// job passed its commit point ([`CommitPoint`]): then it is sealed,
    /// and a cancel's reason comes back as the second value (the caller
    /// tells the host, and sends the artifact). The job's stdout lines
    /// (`lines`) become the host's `train-progress` ([`train_progress`]).
    fn run_watching<S: Stream>(
        &self,
        ch: &mut Channel<S>,
        lock: &StateLock,
        req: &RunRequest<'_>,
        provider: &ForJob<'_>,
        lines: &std::sync::mpsc::Receiver<String>,
    ) -> Result<(run::RunResult, Option<String>), (ErrorCode, String)> {
        let mut relay = train_progress::Relay::default();
        // A failed send is the host gone: the next receive says so.
        let mut relay_lines = |ch: &mut Channel<S>| {
            let now = Instant::now();
            let due = lines
                .try_iter()
                .filter_map(|l| relay.line(&l, now))
                .last()
                .or_else(|| relay.due(now));
            if let Some(p) = due {
                let _ = ch.send(&Message::TrainProgress(p));
            }
        };
        let (canceller, signal) = crate::sandbox::Canceller::new()
            .map_err(|e| (ErrorCode::Internal, format!("cancel pipe: {e}")))?;
        let commit = Arc::new(CommitPoint::new());
        let id = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = THIS_JOB.replace(Some(id)) {
            running().retain(|r| r.id != old);
        }
        running().push(Running {
            id,
            canceller,
            commit: commit.clone(),
        });
        // A stop signal that came before the job was registered.
        if STOPPING.load(Ordering::SeqCst) {
            return Err((ErrorCode::Cancelled, "the service is stopping".into()));
        }
        let cancel = |reason: &str| -> bool {
            match running().iter_mut().find(|r| r.id == id) {
                Some(r) if r.commit.cancel() => {
                    r.canceller.cancel();
                    true
                }
                Some(_) => false,
                None => true,
            }
            .then(|| tracing::info!(%reason, "job cancelled before its commit point"))
            .is_some()
        };
        std::thread::scope(|scope| {
            let job = scope.spawn(|| {
                run::run_held(
                    lock,
                    req,
                    provider,
                    Some(&self.key),
                    Some(signal),
                    Some(&commit),
                )
            });
            let mut why: Option<(ErrorCode, String)> = None;
            let mut late: Option<String> = None;
            while !job.is_finished() {
                relay_lines(ch);
                if STOPPING.load(Ordering::SeqCst) {
                    // The signal thread cancelled (or lets it seal).
                    std::thread::sleep(WATCH_INTERVAL);
                    continue;
                }
                if late.is_some() {
                    // Past the commit point: only the job's end matters.
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let stop = match ch.recv_within(WATCH_INTERVAL) {
                    Ok(None) => continue,
                    Ok(Some(Message::Cancel(c))) => {
                        (ErrorCode::Cancelled, format!("cancelled: {}", c.reason))
                    }
                    Ok(Some(other)) => (
                        ErrorCode::UnexpectedMessage,
                        format!("{} while the job runs", other.kind().as_str()),
                    ),
                    Err(e) => (ErrorCode::Cancelled, format!("the host went away: {e}")),
                };
                if cancel(&stop.1) {
                    why = Some(stop);
                    break;
                }
                late = Some(stop.1);
            }
            let result = job
                .join()
                .map_err(|_| (ErrorCode::Internal, "the job thread panicked".to_string()))?;
            // The job's last reports (its last step among them).
            relay_lines(ch);
            if STOPPING.load(Ordering::SeqCst) && why.is_none() && result.is_err() {
                why = Some((
                    ErrorCode::Cancelled,
                    "the service is stopping (signal): the job was cancelled, nothing sealed"
                        .into(),
                ));
            }
            match (why, result) {
                (Some(stop), _) => Err(stop),
                (None, Ok(r)) => Ok((r, late)),
                (None, Err(e)) => Err((ErrorCode::JobFailed, e.to_string())),
            }
        })
    }

    /// Takes `input-chunk`s until every declared byte arrived, then checks
    /// each input is complete and has its SHA-256.
    fn receive_inputs<S: Stream>(
        &self,
        ch: &mut Channel<S>,
        job: &JobSubmit,
        dir: &Path,
    ) -> Result<(), (ErrorCode, String)> {
        let total = job.total_input_bytes().ok_or((
            ErrorCode::BundleTooLarge,
            "declared input sizes overflow".to_string(),
        ))?;
        // The policy's limit, if lower than the service's.
        let policy = std::str::from_utf8(&job.policy)
            .ok()
            .and_then(|t| kolm_policy::Policy::from_toml_str(t).ok());
        let limit = policy
            .and_then(|p| p.limits.max_input_bytes)
            .map_or(self.config.max_input_bytes, |l| {
                l.min(self.config.max_input_bytes)
            });
        let mut receiver =
            InputReceiver::new(dir, &job.inputs, limit).map_err(|e| (e.code(), e.to_string()))?;
        // Staged twice at once: here, and by the run in the job's own
        // directory (this one is dropped after the run).
        fsutil::check_room(&fsutil::staging_root(), total.saturating_mul(2))
            .map_err(|e| (ErrorCode::BundleTooLarge, e.to_string()))?;
        let mut received = 0u64;
        // Progress in sixteenths: the host is busy sending, and a message
        // per chunk would fill its receive buffer.
        let sixteenths = |n: u64| u128::from(n) * 16 / u128::from(total.max(1));
        progress(ch, "inputs", 0, total)?;
        while received < total {
            match ch.recv() {
                Ok(Message::InputChunk(c)) => {
                    receiver.accept(&c).map_err(|e| (e.code(), e.to_string()))?;
                    let before = sixteenths(received);
                    received = received.saturating_add(c.data.len() as u64);
                    if sixteenths(received) != before {
                        progress(ch, "inputs", received.min(total), total)?;
                    }
                }
                Ok(Message::Cancel(c)) => {
                    return Err((ErrorCode::Cancelled, format!("cancelled: {}", c.reason)));
                }
                Ok(other) => {
                    return Err((
                        ErrorCode::UnexpectedMessage,
                        format!("expected input-chunk, got {}", other.kind().as_str()),
                    ));
                }
                Err(e) => return Err((e.code().unwrap_or(ErrorCode::Internal), e.to_string())),
            }
        }
        receiver.finish().map_err(|e| (e.code(), e.to_string()))?;
        Ok(())
    }
}

/// What the host answered `hello` with.
enum Submitted {
    Job(JobSubmit),
    /// No job: the conversation ends with this.
    Ended(Outcome),
}

/// The host's `job-submit`, or the end of the conversation (`bye`, the
/// host's error report); anything else is refused.
fn receive_job<S: Stream>(ch: &mut Channel<S>) -> Result<Submitted, (ErrorCode, String)> {
    match ch.recv().map_err(channel_err)? {
        Message::JobSubmit(j) => Ok(Submitted::Job(j)),
        Message::Bye => Ok(Submitted::Ended(Outcome::NoJob)),
        Message::Cancel(c) => Err((ErrorCode::Cancelled, format!("cancelled: {}", c.reason))),
        Message::Error(e) => Ok(Submitted::Ended(Outcome::Failed {
            code: e.code,
            message: e.message,
        })),
        other => Err((
            ErrorCode::UnexpectedMessage,
            format!("expected job-submit, got {}", other.kind().as_str()),
        )),
    }
}

/// What a job holds while it runs ([`Service::claim`]).
struct Claimed {
    lock: StateLock,
    runtime_exe: PathBuf,
    jobs_exe: PathBuf,
}

/// A channel failure as the error report the host gets.
fn channel_err(e: kolm_transport::ChannelError) -> (ErrorCode, String) {
    (e.code().unwrap_or(ErrorCode::Internal), e.to_string())
}

/// The job's public log lines to the host (and the service log): a new
/// receipt chain, a cancel that came too late, where the collateral came
/// from.
fn send_job_log<S: Stream>(
    ch: &mut Channel<S>,
    job_id: &str,
    result: &run::RunResult,
    late_cancel: Option<String>,
    provider: &ForJob<'_>,
) -> Result<(), (ErrorCode, String)> {
    let mut lines = result.notices.clone();
    if let Some(reason) = late_cancel {
        lines.push(format!(
            "cancel ({reason}) came after the commit point (sealing had begun): the job is \
             sealed, the chain advanced, and the artifact follows"
        ));
    }
    for line in &lines {
        tracing::warn!(job = job_id, %line, "job notice");
    }
    lines.extend(provider.report());
    for line in lines {
        tracing::info!(%line, "job collateral");
        ch.send(&Message::Log(LogLine {
            line,
            stream: LogStream::Supervisor,
        }))
        .map_err(|e| (ErrorCode::Internal, e.to_string()))?;
    }
    Ok(())
}

/// The service's provider for one job: the run path's
/// [`AttestationProvider::collateral`] is the job's
/// ([`AttestationProvider::job_collateral`] with the collateral the host
/// sent), and what became of the host's is kept for the job's log.
struct ForJob<'a> {
    inner: &'a (dyn AttestationProvider + Send + Sync),
    host: HostCollateral,
    used: Mutex<Option<UsedCollateral>>,
}

/// What a job's collateral was, for its log.
#[derive(Debug, Clone)]
struct UsedCollateral {
    origin: CollateralOrigin,
    /// The slot paths sealed.
    files: Vec<String>,
    /// The host's files not used.
    ignored: Vec<&'static str>,
}

impl ForJob<'_> {
    /// Public lines for the job's log: where the collateral came from when
    /// it was the host's, and which of the host's files were not used.
    fn report(&self) -> Vec<String> {
        let used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(UsedCollateral {
            origin,
            files,
            ignored,
        }) = used
        else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        if origin == CollateralOrigin::HostBundle {
            lines.push(format!(
                "collateral from the host's bundle (job-submit): {}; the platform and the \
                 enclave supplied none",
                files.join(", ")
            ));
        }
        if !ignored.is_empty() {
            lines.push(format!(
                "the host's collateral not used: {} (the enclave's own is, or it is not {}'s)",
                ignored.join(", "),
                self.inner.platform()
            ));
        }
        lines
    }
}

impl AttestationProvider for ForJob<'_> {
    fn platform(&self) -> Platform {
        self.inner.platform()
    }

    fn measurement(&self) -> Option<Vec<u8>> {
        self.inner.measurement()
    }

    fn collateral(&self) -> Result<CollateralBundle, AttestError> {
        let JobCollateral {
            bundle,
            origin,
            ignored,
        } = self.inner.job_collateral(&self.host)?;
        let files = bundle.files.iter().map(|(p, _)| p.clone()).collect();
        *self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(UsedCollateral {
            origin,
            files,
            ignored,
        });
        Ok(bundle)
    }

    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
        self.inner.attest(report_data)
    }
}

/// The launch measurement for `hello`, if the platform has one now (a
/// hardware provider learns it with its collateral, at the first job).
fn measurement(provider: &dyn AttestationProvider) -> Vec<u8> {
    match provider.platform() {
        Platform::None => Vec::new(),
        _ => provider.measurement().unwrap_or_default(),
    }
}

fn progress<S: Stream>(
    ch: &mut Channel<S>,
    phase: &str,
    done: u64,
    total: u64,
) -> Result<(), (ErrorCode, String)> {
    ch.send(&Message::Progress(Progress {
        done,
        phase: phase.to_string(),
        total,
    }))
    .map_err(|e| (ErrorCode::Internal, e.to_string()))
}

/// Streams the sealed artifact in chunks.
fn send_artifact<S: Stream>(ch: &mut Channel<S>, path: &Path) -> Result<(), (ErrorCode, String)> {
    let bytes = std::fs::read(path)
        .map_err(|e| (ErrorCode::Internal, format!("reading the artifact: {e}")))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| FileName::parse(n).ok())
        .ok_or((ErrorCode::Internal, "the artifact has no plain name".into()))?;
    let total = bytes.len() as u64;
    let mut offset = 0usize;
    loop {
        let end = offset.saturating_add(ARTIFACT_CHUNK).min(bytes.len());
        let data = bytes.get(offset..end).unwrap_or_default().to_vec();
        ch.send(&Message::ArtifactChunk(ArtifactChunk {
            data,
            name: name.clone(),
            total,
            offset: offset as u64,
        }))
        .map_err(|e| (ErrorCode::Internal, e.to_string()))?;
        offset = end;
        if offset >= bytes.len() {
            return Ok(());
        }
    }
}

/// What the service log says about a job: never its data.
struct JobLog {
    id: String,
    kind: String,
    started: Instant,
}

impl JobLog {
    /// The spec's `id` and `kind`, read loosely (the run reads it
    /// strictly), escaped and bounded for the log.
    fn of(spec: &[u8]) -> JobLog {
        #[derive(serde::Deserialize)]
        struct Named {
            id: Option<String>,
            kind: Option<String>,
        }
        let named = std::str::from_utf8(spec)
            .ok()
            .and_then(|t| toml::from_str::<Named>(t).ok());
        let clean = |v: Option<String>| {
            let v = v.unwrap_or_else(|| "?".into());
            v.chars()
                .take(64)
                .collect::<String>()
                .escape_debug()
                .to_string()
        };
        let (id, kind) = named.map_or((None, None), |n| (n.id, n.kind));
        JobLog {
            id: clean(id),
            kind: clean(kind),
            started: Instant::now(),
        }
    }
}
