//! Messages between the supervisor and the stage-2 helper over their
//! `SOCK_SEQPACKET` control socket (stage 2's stdin until it execs).
//!
//! 1. supervisor -> stage 2: [`Stage2Config`] (JSON).
//! 2. stage 2 -> supervisor: [`Stage2Message::Ready`] with the seccomp
//!    listener attached (`SCM_RIGHTS`), or [`Stage2Message::SetupFailed`].
//! 3. supervisor -> stage 2: [`GO`], once its notification loop runs.
//! 4. Without a PID namespace of its own, stage 2 execs the job; the socket
//!    is close-on-exec, so the supervisor reads end-of-file, or
//!    [`Stage2Message::ExecFailed`] if `execve` failed.
//!
//!    As the init of one (root), stage 2 stays (`init.rs`): it makes the
//!    start sentinel call, forks the job (which enforces Landlock on itself)
//!    and sends [`Stage2Message::Landlock`], then [`Stage2Message::Started`]
//!    or [`Stage2Message::ExecFailed`]; the supervisor may send [`STOP`]
//!    (deadline); when the job has ended and every other process of the
//!    namespace is gone, stage 2 makes the end sentinel call and sends
//!    [`Stage2Message::Ended`].

use serde::{Deserialize, Serialize};

use super::Profile;
use kolm_format::sandbox_record::{
    FilterRecord, HygieneRecord, JobIdOrigin, LandlockRecord, PidNamespace,
};

/// Bumped on any change to these messages; a runtime binary of another
/// version refuses to act as stage 2.
pub(super) const PROTOCOL: u32 = 3;

/// Largest control message.
pub(super) const MAX_MESSAGE: usize = 256 * 1024;

/// The go-ahead.
pub(super) const GO: &[u8] = b"go";

/// The deadline passed: kill the job and everything in its namespace.
pub(super) const STOP: &[u8] = b"stop";

/// What stage 2 sets up. Paths and strings are raw bytes (Unix paths need
/// not be UTF-8).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stage2Config {
    pub protocol: u32,
    pub runtime_version: String,
    pub supervisor_pid: u32,
    pub profile: Profile,
    pub program: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    /// `KEY=VALUE` entries; the job gets nothing else.
    pub env: Vec<Vec<u8>>,
    pub cwd: Vec<u8>,
    pub read_only: Vec<Vec<u8>>,
    pub read_write: Vec<Vec<u8>>,
    /// `SandboxCommand::library_dirs`.
    #[serde(default)]
    pub library_dirs: Vec<Vec<u8>>,
    pub landlock: bool,
    pub ids: Option<(u32, u32)>,
    /// `per_run`, `fixed` or `inherited` (the record's `isolation.job_ids`).
    pub job_ids: JobIdOrigin,
    pub network_namespace: bool,
    /// Stage 2 was started as the init of a new PID namespace (`private`),
    /// or why not (`shared: <why>`): the supervisor made it.
    pub pid_namespace: PidNamespace,
}

/// What stage 2 reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) enum Stage2Message {
    Ready(Box<Stage2Report>),
    SetupFailed(String),
    ExecFailed(String),
    /// Landlock as the job's process enforced it (init mode; sent before
    /// `Started` or `ExecFailed`, replacing the report's `pending`).
    Landlock(LandlockRecord),
    /// The job was executed (init mode).
    Started,
    /// The job ended and nothing else is left in its namespace (init mode).
    Ended(JobEnded),
}

/// How the job ended, as the init of its PID namespace saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobEnded {
    /// The job process's raw wait status (`waitpid`).
    pub wait_status: i32,
}

/// The sandbox as stage 2 installed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stage2Report {
    pub filters: Vec<FilterRecord>,
    pub landlock: LandlockRecord,
    pub hygiene: HygieneRecord,
}
