//! The egress = 0 job sandbox (design and threat model: `docs/sandbox.md`).
//!
//! A job runs as a separate process. The trusted supervisor (this process:
//! it holds the seccomp listener and, for `kolm-enclave run`, the run's
//! receipt key; there is no transport or serving path yet) starts a
//! single-threaded stage-2 helper, a fresh exec of the runtime binary, which
//! sandboxes itself and `execve`s the job:
//!
//! - **Filter A (counted)**: `socket`/`socketpair` of any family but
//!   `AF_UNIX` (every family in the strict profile) and the three `io_uring`
//!   calls return `SECCOMP_RET_USER_NOTIF`; the supervisor answers each with
//!   `EACCES` (`ENOSYS` for io_uring) and counts it by system call and
//!   address family.
//! - **Filter B (hard deny)**: new seccomp filters, ptrace, cross-process
//!   memory and fd access, bpf, perf, keyrings, the mount family, namespaces;
//!   `clone3` gets `ENOSYS`. Both filters keep seccompiler's architecture
//!   check, which kills 32-bit `int 0x80` calls.
//! - **Hygiene**: x32 self-test, `NO_NEW_PRIVS`, every fd above 2 closed,
//!   stdio as pipes, `PR_SET_PDEATHSIG(SIGKILL)`, own process group.
//! - **Isolation** (as root; `hygiene.isolation` in the record): a uid/gid
//!   leased for this run alone (`ids.rs`), the job under kolm's init of a
//!   new PID namespace (`init.rs`: every process it leaves dies with it,
//!   and the init's sentinel calls make the count exact), new IPC and empty
//!   network namespaces, non-executable memfds, and a new mount namespace
//!   whose root holds only the job's trees (`rootfs.rs`), so no socket of
//!   the host is reachable by path. Where one cannot be had, a deny filter
//!   takes its place (`deny_sysv_ipc`, `deny_memfd`) or the record says
//!   `shared: <why>`. The supervisor is a child subreaper and kills whatever
//!   of the run's uid is left.
//! - **Landlock**, best effort, with its ABI and status recorded.
//!
//! The filters come from one policy file for every architecture,
//! `enclave/seccomp/policy.json`, compiled by `build.rs`.
//!
//! The result is a [`SandboxRecord`] with `blocked_total` at the top, built
//! only from what the supervisor observed: `egress_blocked` is true only
//! when the filters were confirmed in force before the job's first
//! instruction (stage 2's report and the kernel's `/proc` status), the
//! program ran, the listener never failed and saw the last process go,
//! and the counts add up, withdrawn notifications included (`egress.rs`);
//! whether the count is exact or a lower bound is the record's `exactness`.
//!
//! This module is the only place in the crate with `unsafe`, all of it in
//! `sys.rs`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod counted;
mod egress;
mod filter;
mod gpu;
mod ids;
mod init;
mod landlock_rules;
mod protocol;
mod rootfs;
mod stage2;
mod supervisor;
#[allow(unsafe_code)]
mod sys;

pub use filter::FilterError;
pub use ids::{IdError, JOB_ID_FIRST, JOB_ID_LAST};
pub use kolm_format::sandbox_record::{
    CountExactness, Counted, Exactness, FilterRecord, HygieneRecord, IsolationRecord, JobExit,
    LandlockRecord, ListenerRecord, RECORD_PATH, RECORD_SCHEMA_V1, SandboxRecord, family_name,
};
pub use landlock_rules::LandlockError;
pub use stage2::stage2_main;

/// The hidden subcommand of `kolm-enclave` that runs stage 2.
pub const STAGE2_SUBCOMMAND: &str = "__sandbox-stage2";

/// The uid and gid every job ran as before issue 12. No job runs as it any
/// more (it is outside what [`JobIds::Auto`] leases): each run gets ids of
/// its own from [`JOB_ID_FIRST`]..=[`JOB_ID_LAST`], and the supervisor hands
/// every read-write tree's top directory to them for the run and back to its
/// owner afterwards, so callers need not `chown` anything. Kept for callers
/// that still hand their output directory to it first (harmless: it is
/// given back to this owner).
pub const JOB_UID: u32 = 65_520;

/// Which counted filter is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Counts and refuses every socket family but `AF_UNIX`.
    Default,
    /// Counts and refuses `AF_UNIX` sockets too.
    Strict,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Strict => "strict",
        }
    }
}

impl FromStr for Profile {
    type Err = SandboxError;
    fn from_str(s: &str) -> Result<Profile, SandboxError> {
        match s {
            "default" => Ok(Profile::Default),
            "strict" => Ok(Profile::Strict),
            other => Err(SandboxError::Config(format!(
                "unknown profile {other:?} (expected \"default\" or \"strict\")"
            ))),
        }
    }
}

/// Whether Landlock is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockMode {
    /// Applied as far as the kernel supports it (always, for sealed jobs).
    BestEffort,
    /// Not applied, and recorded as `dangerous_disabled` (for testing what
    /// seccomp alone covers, as on kernels without Landlock).
    DangerousDisabled,
}

/// Which ids the job runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobIds {
    /// As root: a uid/gid leased for this run alone from
    /// [`JOB_ID_FIRST`]..=[`JOB_ID_LAST`] (recorded as `per_run`); else the
    /// supervisor's own (`inherited`).
    Auto,
    /// These (the supervisor must be root).
    Fixed(u32, u32),
    /// The supervisor's own.
    Inherit,
}

/// Where the job's stdout/stderr pipe goes.
#[derive(Debug, Clone)]
pub enum OutputMode {
    /// Copied to the supervisor's own stream.
    Inherit,
    /// Kept in memory, at most `limit` bytes.
    Capture { limit: usize },
    /// Read and dropped.
    Discard,
    /// Each line (without its newline) sent to the receiver of `0`, as
    /// it comes; a line longer than [`MAX_RELAYED_LINE`] bytes is dropped
    /// whole, and lines are dropped while the receiver is gone. Nothing is
    /// kept.
    Lines(std::sync::mpsc::Sender<String>),
}

/// Longest line [`OutputMode::Lines`] passes on.
pub const MAX_RELAYED_LINE: usize = 4096;

/// One sandboxed program run.
#[derive(Debug, Clone)]
pub struct SandboxCommand {
    pub profile: Profile,
    /// The `kolm-enclave` binary that runs stage 2.
    pub runtime_exe: PathBuf,
    /// The program (an absolute or relative path; not searched in `PATH`).
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The job's whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// Trees the job may read.
    pub read_only: Vec<PathBuf>,
    /// Directories of shared libraries the job loads besides the system
    /// ones (a GPU job's CUDA user-space libraries, NVRTC and cuBLAS, when
    /// they live outside `/usr`): bound read-only with execute allowed, as
    /// the system directories are, and readable and executable under
    /// Landlock. Nothing in them is writable.
    pub library_dirs: Vec<PathBuf>,
    /// Trees the job may read and write.
    pub read_write: Vec<PathBuf>,
    /// Working directory; default: the first read-write tree, else `/`.
    pub cwd: Option<PathBuf>,
    pub landlock: LandlockMode,
    pub job_ids: JobIds,
    /// Put the job in a new, empty network namespace (root only).
    pub network_namespace: bool,
    pub stdout: OutputMode,
    pub stderr: OutputMode,
    /// Kill the job after this long.
    pub timeout: Option<Duration>,
    /// Kill the job as soon as this descriptor is readable (a [`Canceller`]
    /// was used, or dropped): the same end as a timeout, so nothing of the
    /// job survives and its record says it was killed.
    pub cancel: Option<CancelSignal>,
}

/// The job-killing side of a [`Canceller`]: readable once it fired.
#[derive(Debug, Clone)]
pub struct CancelSignal(std::sync::Arc<std::os::fd::OwnedFd>);

/// Cancels a running sandboxed job from another thread: [`Canceller::cancel`]
/// (or dropping it) makes its [`CancelSignal`] readable.
#[derive(Debug)]
pub struct Canceller(Option<std::io::PipeWriter>);

impl Canceller {
    /// A canceller and the signal a [`SandboxCommand`] waits on.
    pub fn new() -> std::io::Result<(Canceller, CancelSignal)> {
        let (r, w) = std::io::pipe()?;
        Ok((
            Canceller(Some(w)),
            CancelSignal(std::sync::Arc::new(std::os::fd::OwnedFd::from(r))),
        ))
    }

    /// Fires the signal (closes the pipe's write end).
    pub fn cancel(&mut self) {
        self.0 = None;
    }
}

impl CancelSignal {
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
}

impl SandboxCommand {
    /// A command with the defaults a sealed job gets.
    pub fn new(runtime_exe: impl Into<PathBuf>, program: impl Into<PathBuf>) -> SandboxCommand {
        SandboxCommand {
            profile: Profile::Default,
            runtime_exe: runtime_exe.into(),
            program: program.into(),
            args: Vec::new(),
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            read_only: Vec::new(),
            library_dirs: Vec::new(),
            read_write: Vec::new(),
            cwd: None,
            landlock: LandlockMode::BestEffort,
            job_ids: JobIds::Auto,
            network_namespace: true,
            stdout: OutputMode::Inherit,
            stderr: OutputMode::Inherit,
            timeout: None,
            cancel: None,
        }
    }

    /// Runs the program under the sandbox and waits for it.
    pub fn run(&self) -> Result<SandboxOutcome, SandboxError> {
        supervisor::run(self)
    }
}

/// What a sandboxed run produced.
#[derive(Debug)]
pub struct SandboxOutcome {
    /// No process of the job is left: the seccomp listener reported that no
    /// process under the filters remains (each was reaped), the same fact
    /// as `record.listener.all_processes_gone`. **A caller must not seal or
    /// read the outputs unless this is true**: a surviving process could
    /// still change them.
    pub all_processes_gone: bool,
    pub record: SandboxRecord,
    pub status: ExitStatus,
    /// The caller's timeout expired and the job was killed.
    pub timed_out: bool,
    /// Captured output ([`OutputMode::Capture`]), else empty.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Why a sandboxed run could not be made. A job never runs unsandboxed: any
/// of these means it did not start (or was killed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error("sandbox filters: {0}")]
    Filter(#[from] FilterError),
    #[error("starting stage 2 ({exe}): {error}")]
    Spawn { exe: String, error: std::io::Error },
    #[error("stage 2 could not set up the sandbox: {0}")]
    Setup(String),
    #[error("sandbox protocol: {0}")]
    Protocol(String),
    #[error("sandbox configuration: {0}")]
    Config(String),
    #[error("sandbox job ids: {0}")]
    Ids(#[from] IdError),
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: std::io::Error,
    },
}
