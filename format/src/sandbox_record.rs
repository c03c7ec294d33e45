//! The sandbox record: what the sandbox saw and enforced during one job,
//! sealed into the artifact as `governance/sandbox-record.json` and
//! summarised in the manifest. Documented field by field in
//! `docs/sandbox.md`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Largest record accepted on read (a record is a few KiB).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// Why a sandbox record was refused: on read ([`SandboxRecord::from_json_bytes`])
/// or by the consistency rules ([`SandboxRecord::check`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxRecordError {
    #[error("sandbox record is {len} bytes, over the {max}-byte cap")]
    TooLarge { len: usize, max: usize },
    /// Not JSON, an unknown or missing field, or a value outside its field's
    /// closed set (the message names the field: `hygiene.network_namespace
    /// is "x", expected ...`).
    #[error("sandbox record is not a valid {RECORD_SCHEMA_V1} document: {error}")]
    Json { error: serde_json::Error },
    #[error("sandbox record schema is {0:?}, expected {RECORD_SCHEMA_V1}")]
    Schema(String),
    #[error(
        "sandbox record blocked_total is {stated}, but its parts (counted.by_syscall {counted} + \
         listener.withdrawn_before_read {withdrawn} + sigsys_kills {sigsys_kills}) add up to {sum}"
    )]
    BlockedTotal {
        stated: u64,
        counted: u64,
        withdrawn: u64,
        sigsys_kills: u64,
        sum: String,
    },
    #[error(
        "sandbox record counts {by_family} socket attempts by family but {by_syscall} \
         socket/socketpair calls"
    )]
    FamilyTotal { by_family: u64, by_syscall: u64 },
    #[error(
        "sandbox record is not in its one byte form (pretty JSON as the supervisor writes it: \
         fields in order, no duplicate keys, final newline); first difference at byte {offset}"
    )]
    NotCanonical { offset: usize },
    #[error(
        "sandbox record exactness says {level:?} with {reasons} lower-bound reason(s): `exact` \
         takes none, `lower_bound` at least one"
    )]
    Exactness {
        level: CountExactness,
        reasons: usize,
    },
    // The rules of `check`: what the supervisor applies to every run.
    #[error("sandbox record: hygiene.no_new_privs is false")]
    NewPrivsAllowed,
    #[error("sandbox record: hygiene.fds_above_stderr_closed is false")]
    DescriptorsLeftOpen,
    #[error("sandbox record: hygiene.uid/gid: the job ran as root")]
    RanAsRoot { uid: Option<u32>, gid: Option<u32> },
    #[error(
        "sandbox record: landlock.status \"pending\" is unknown (stage 2's placeholder before \
         the job's own process enforced Landlock, never a run's status)"
    )]
    LandlockPending,
    #[error("sandbox record: landlock.status is \"{status}\" with ABI 0")]
    LandlockWithoutAbi { status: LandlockStatus },
    #[error(
        "sandbox record: listener.replies_to_departed {replies_to_departed} exceeds \
         listener.notifications {notifications}"
    )]
    RepliesExceedNotifications {
        replies_to_departed: u64,
        notifications: u64,
    },
    #[error("sandbox record: exit: exactly one of code, signal and exec_error must be set")]
    ExitNotOneEnd {
        code: Option<i32>,
        signal: Option<i32>,
        exec_error: Option<String>,
    },
    #[error("sandbox record: sigsys_kills is {sigsys_kills} but exit.signal is {signal:?}")]
    SigsysKills {
        sigsys_kills: u64,
        signal: Option<i32>,
    },
    // `egress_blocked: true` must show every condition it stands for.
    #[error(
        "sandbox record: claims egress_blocked, but its filters are {}, not the profile's {}",
        spellings(.roles),
        spellings(&FILTER_ROLES)
    )]
    ClaimFilterRoles { roles: Vec<FilterRole> },
    #[error(
        "sandbox record: claims egress_blocked, but filter {name:?} ({role}) is not the \
         {expected} filter (name, instructions, sha256)"
    )]
    ClaimFilter {
        name: String,
        role: FilterRole,
        expected: String,
    },
    #[error("sandbox record: claims egress_blocked, but exit.exec_error is {exec_error:?}")]
    ClaimExecError { exec_error: String },
    #[error("sandbox record: claims egress_blocked, but listener.alive_whole_run is false")]
    ClaimListenerDied,
    #[error("sandbox record: claims egress_blocked, but listener.error is {listener_error:?}")]
    ClaimListenerError { listener_error: String },
    #[error("sandbox record: claims egress_blocked, but listener.all_processes_gone is false")]
    ClaimProcessesLeft,
    #[error(
        "sandbox record: claims egress_blocked, but listener.notifications {notifications} \
         differs from the counted total"
    )]
    ClaimNotifications {
        notifications: u64,
        counted: Option<u64>,
    },
    #[error("sandbox record: claims egress_blocked, but hygiene.stage2_single_threaded is false")]
    ClaimStage2Threads,
}

/// `["a", "b"]`: the JSON spellings, as the messages print them.
fn spellings(roles: &[FilterRole]) -> String {
    format!("{:?}", roles.iter().map(|r| r.as_str()).collect::<Vec<_>>())
}

/// `schema` of the current record format.
pub const RECORD_SCHEMA_V1: &str = "kolm.sandbox-record.v1";

/// Path of the record inside a sealed artifact.
pub const RECORD_PATH: &str = "governance/sandbox-record.json";

/// The full record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRecord {
    /// Always [`RECORD_SCHEMA_V1`].
    pub schema: String,
    /// `default` or `strict`.
    pub profile: SandboxProfile,
    /// Sum of every counted attempt (`counted.by_syscall`), of the
    /// notifications withdrawn before they were read
    /// (`listener.withdrawn_before_read`: attempts interrupted by a signal,
    /// never executed) and of the SIGSYS kills seen (`sigsys_kills`).
    /// Whether it is exact or a lower bound is `exactness`.
    pub blocked_total: u64,
    /// Decided by the supervisor from what it observed, never a constant.
    /// True only when all of these held: (1) stage 2 reported exactly the
    /// profile's counted, `deny_enosys` and `deny` filters (the programs
    /// compiled into the runtime, by sha256) before the job's `execve`, and
    /// the kernel's `/proc/<pid>/status` confirmed them (filter mode, the
    /// reported count); (2) stage 2 was single-threaded, so they bind every
    /// process of the job; (3) the program was executed (`exit.exec_error`
    /// is null); (4) the seccomp listener never failed (`listener.error`
    /// null): every notification read was refused and counted; (5) it saw
    /// the last process under the filter go (`listener.all_processes_gone`);
    /// (6) the notifications read equal the counted total, `sigsys_kills`
    /// covers the job process's death, and `blocked_total` is the exact sum
    /// of its parts. A notification withdrawn before it was read (its call
    /// was interrupted and never ran) is blocked too, and is in
    /// `blocked_total`.
    ///
    /// It does not cover channels outside the filters (`AF_UNIX` in the
    /// default profile, covert channels, the outputs), and it does not say
    /// the count is exact: that is `exactness`. `false` does not
    /// mean data left (filters cannot be removed; without a listener the
    /// kernel answers `ENOSYS`): it means the supervisor cannot vouch for
    /// this run. `docs/sandbox.md`, "What `egress_blocked` means".
    pub egress_blocked: bool,
    /// Attempts answered by the supervisor through the seccomp listener.
    pub counted: Counted,
    /// Processes of the job seen killed by SIGSYS (the architecture check:
    /// a 32-bit `int 0x80` call): the job's own process, through `waitpid`,
    /// and each descendant whose exit the supervisor saw (see `exactness`
    /// for when that is every one).
    pub sigsys_kills: u64,
    /// Whether `blocked_total` is every blocked attempt of the run, or only
    /// a lower bound, and why.
    pub exactness: Exactness,
    /// How the job's process ended.
    pub exit: JobExit,
    /// Every filter installed, in order.
    pub filters: Vec<FilterRecord>,
    /// The architecture's policy document the filters were compiled from
    /// (`seccomp/<arch>.json`, composed at build time from the enclave's one
    /// source, `enclave/seccomp/policy.json`).
    pub filter_source: FilterSource,
    /// Landlock, best effort.
    pub landlock: LandlockRecord,
    /// The seccomp listener the counts come from.
    pub listener: ListenerRecord,
    /// Process hygiene applied before `execve`.
    pub hygiene: HygieneRecord,
}

impl SandboxRecord {
    /// The record as sealed: pretty JSON and a final newline.
    pub fn to_json_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = serde_json::to_vec_pretty(self)?;
        out.push(b'\n');
        Ok(out)
    }

    /// The strict reader: the schema, every closed set's value (the
    /// profile, the filter roles, Landlock's status, ...: an unknown one is
    /// refused with the field named), no unknown fields, no trailing bytes, `blocked_total` equal to the sum of its parts
    /// (`counted.by_syscall`, `listener.withdrawn_before_read` and
    /// `sigsys_kills`, without overflow), `counted.by_family` adding up to
    /// the `socket` and `socketpair` counts, and `exactness` consistent
    /// (`exact` with no reason, `lower_bound` with at least one). The bytes
    /// must be exactly [`SandboxRecord::to_json_bytes`] of what they parse
    /// to: one byte form, so a duplicate key (which serde
    /// resolves silently inside `counted`'s maps), re-ordered fields or
    /// other spellings of the same numbers are refused.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<SandboxRecord, SandboxRecordError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(SandboxRecordError::TooLarge {
                len: bytes.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        let rec: SandboxRecord =
            serde_json::from_slice(bytes).map_err(|error| SandboxRecordError::Json { error })?;
        if rec.schema != RECORD_SCHEMA_V1 {
            return Err(SandboxRecordError::Schema(rec.schema));
        }
        if rec.exactness.is_exact() != rec.exactness.lower_bound_because.is_empty() {
            return Err(SandboxRecordError::Exactness {
                level: rec.exactness.blocked_total,
                reasons: rec.exactness.lower_bound_because.len(),
            });
        }
        let counted = rec.counted.checked_total();
        let withdrawn = rec.listener.withdrawn_before_read;
        let sum = counted
            .and_then(|c| c.checked_add(withdrawn))
            .and_then(|c| c.checked_add(rec.sigsys_kills));
        if sum != Some(rec.blocked_total) {
            return Err(SandboxRecordError::BlockedTotal {
                stated: rec.blocked_total,
                counted: counted.unwrap_or(u64::MAX),
                withdrawn,
                sigsys_kills: rec.sigsys_kills,
                sum: sum.map_or_else(|| "more than 2^64 - 1".to_string(), |s| s.to_string()),
            });
        }
        let sockets = ["socket", "socketpair"]
            .iter()
            .filter_map(|k| rec.counted.by_syscall.get(*k))
            .try_fold(0u64, |a, b| a.checked_add(*b));
        let families = rec
            .counted
            .by_family
            .values()
            .try_fold(0u64, |a, b| a.checked_add(*b));
        match (families, sockets) {
            (Some(f), Some(s)) if f == s => {}
            (f, s) => {
                return Err(SandboxRecordError::FamilyTotal {
                    by_family: f.unwrap_or(u64::MAX),
                    by_syscall: s.unwrap_or(u64::MAX),
                });
            }
        }
        let canonical = rec
            .to_json_bytes()
            .map_err(|error| SandboxRecordError::Json { error })?;
        if canonical != bytes {
            let offset = canonical
                .iter()
                .zip(bytes)
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| canonical.len().min(bytes.len()));
            return Err(SandboxRecordError::NotCanonical { offset });
        }
        Ok(rec)
    }

    /// Checks every field of the record against the others and against
    /// what the supervisor writes (docs/sandbox.md, "What `egress_blocked`
    /// means"): the hygiene the supervisor applies to every run (it refuses
    /// to run otherwise, so a record without it was not written by it), and,
    /// when the record claims `egress_blocked`, each condition of that
    /// claim. The first broken rule is returned. The values of the closed
    /// sets were checked by the reader already; the policy then judges the
    /// facts.
    pub fn check(&self) -> Result<(), SandboxRecordError> {
        self.check_hygiene()?;
        self.check_landlock()?;
        self.check_counts_and_exit()?;
        if self.egress_blocked {
            self.check_egress_claim()?;
        }
        Ok(())
    }

    fn check_hygiene(&self) -> Result<(), SandboxRecordError> {
        let h = &self.hygiene;
        if !h.no_new_privs {
            return Err(SandboxRecordError::NewPrivsAllowed);
        }
        if !h.fds_above_stderr_closed {
            return Err(SandboxRecordError::DescriptorsLeftOpen);
        }
        if h.uid == Some(0) || h.gid == Some(0) {
            return Err(SandboxRecordError::RanAsRoot {
                uid: h.uid,
                gid: h.gid,
            });
        }
        Ok(())
    }

    fn check_landlock(&self) -> Result<(), SandboxRecordError> {
        let ll = &self.landlock;
        match &ll.status {
            LandlockStatus::Pending => Err(SandboxRecordError::LandlockPending),
            status @ (LandlockStatus::FullyEnforced | LandlockStatus::PartiallyEnforced)
                if ll.abi == 0 =>
            {
                Err(SandboxRecordError::LandlockWithoutAbi {
                    status: status.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    fn check_counts_and_exit(&self) -> Result<(), SandboxRecordError> {
        let l = &self.listener;
        if l.replies_to_departed > l.notifications {
            return Err(SandboxRecordError::RepliesExceedNotifications {
                replies_to_departed: l.replies_to_departed,
                notifications: l.notifications,
            });
        }
        let x = &self.exit;
        let ends = [x.code.is_some(), x.signal.is_some(), x.exec_error.is_some()];
        if ends.iter().filter(|b| **b).count() != 1 {
            return Err(SandboxRecordError::ExitNotOneEnd {
                code: x.code,
                signal: x.signal,
                exec_error: x.exec_error.clone(),
            });
        }
        if (self.sigsys_kills == 1) != (x.signal == Some(SIGSYS)) {
            return Err(SandboxRecordError::SigsysKills {
                sigsys_kills: self.sigsys_kills,
                signal: x.signal,
            });
        }
        Ok(())
    }

    /// `egress_blocked: true` must show every condition it stands for.
    fn check_egress_claim(&self) -> Result<(), SandboxRecordError> {
        let roles: Vec<FilterRole> = self.filters.iter().map(|f| f.role).collect();
        if roles != FILTER_ROLES {
            return Err(SandboxRecordError::ClaimFilterRoles { roles });
        }
        let counted_name = format!("counted_{}", self.profile);
        for (f, name) in self
            .filters
            .iter()
            .zip([counted_name.as_str(), "deny_enosys", "deny"])
        {
            let hex_ok = f.sha256.len() == 64
                && f.sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if f.name != name || f.instructions == 0 || !hex_ok {
                return Err(SandboxRecordError::ClaimFilter {
                    name: f.name.clone(),
                    role: f.role,
                    expected: name.to_string(),
                });
            }
        }
        if let Some(e) = &self.exit.exec_error {
            return Err(SandboxRecordError::ClaimExecError {
                exec_error: e.clone(),
            });
        }
        let l = &self.listener;
        if !l.alive_whole_run {
            return Err(SandboxRecordError::ClaimListenerDied);
        }
        if let Some(e) = &l.error {
            return Err(SandboxRecordError::ClaimListenerError {
                listener_error: e.clone(),
            });
        }
        if !l.all_processes_gone {
            return Err(SandboxRecordError::ClaimProcessesLeft);
        }
        // Withdrawn notifications (a signal interrupted the call before the
        // supervisor read it) do not break the claim: the call never ran.
        // They are in blocked_total and make the count a lower bound
        // (`exactness`).
        let counted = self.counted.checked_total();
        if counted != Some(l.notifications) {
            return Err(SandboxRecordError::ClaimNotifications {
                notifications: l.notifications,
                counted,
            });
        }
        if !self.hygiene.stage2_single_threaded {
            return Err(SandboxRecordError::ClaimStage2Threads);
        }
        Ok(())
    }
}

/// SIGSYS on every architecture kolm runs on (x86_64, aarch64).
const SIGSYS: i32 = 31;

/// The filters every profile installs, in order; the counted filter's name
/// is `counted_<profile>` (enclave/seccomp/policy.json).
const FILTER_ROLES: [FilterRole; 3] = [
    FilterRole::Counted,
    FilterRole::DenyEnosys,
    FilterRole::Deny,
];

/// Whether a count is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountExactness {
    /// Every blocked attempt of the run is in the count.
    Exact,
    /// Attempts may be missing from the count; never more than counted.
    LowerBound,
}

/// `blocked_total`'s exactness. The unit counted is one entry of a job
/// thread into a counted system call (a call the kernel restarts after a
/// signal handler installed with `SA_RESTART` enters, and is counted,
/// again), plus one per process killed by the architecture check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exactness {
    /// `exact` or `lower_bound`.
    pub blocked_total: CountExactness,
    /// Why it is a lower bound, one sentence per path that was not
    /// observed completely; empty exactly when `exact`.
    pub lower_bound_because: Vec<String>,
}

impl Exactness {
    /// `exact` when `reasons` is empty, else `lower_bound` with them.
    pub fn from_reasons(reasons: Vec<String>) -> Exactness {
        Exactness {
            blocked_total: if reasons.is_empty() {
                CountExactness::Exact
            } else {
                CountExactness::LowerBound
            },
            lower_bound_because: reasons,
        }
    }

    /// `blocked_total` is exact.
    pub fn is_exact(&self) -> bool {
        self.blocked_total == CountExactness::Exact
    }
}

/// Counts of the attempts the counted filter stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counted {
    /// By system call name (`socket`, `socketpair`, `io_uring_setup`, ...).
    pub by_syscall: BTreeMap<String, u64>,
    /// `socket`/`socketpair` attempts by address family (`AF_INET`, ...;
    /// `AF_<n>` for numbers without a name), from the low 32 bits of the
    /// first argument as the kernel reads it.
    pub by_family: BTreeMap<String, u64>,
}

impl Counted {
    /// Sum over `by_syscall`, saturating (the supervisor's counters
    /// saturate too).
    pub fn total(&self) -> u64 {
        self.by_syscall
            .values()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Sum over `by_syscall`; `None` if it overflows.
    pub fn checked_total(&self) -> Option<u64> {
        self.by_syscall
            .values()
            .try_fold(0u64, |a, b| a.checked_add(*b))
    }
}

/// The job process's end, from `waitpid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobExit {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal killed it.
    pub signal: Option<i32>,
    /// Set when the program could not be executed at all.
    pub exec_error: Option<String>,
}

/// One installed filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterRecord {
    /// Name in the policy file.
    pub name: String,
    /// `counted`, `deny` or `deny_enosys`.
    pub role: FilterRole,
    /// Number of BPF instructions.
    pub instructions: usize,
    /// sha256 of the installed program (8 bytes per instruction, as the
    /// kernel's `struct sock_filter`, little-endian), lowercase hex.
    pub sha256: String,
}

/// Landlock's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockRecord {
    /// The kernel's Landlock ABI version; 0 when Landlock is absent.
    pub abi: u32,
    /// `fully_enforced`, `partially_enforced`, `not_enforced`,
    /// `dangerous_disabled` (switched off on the command line), or
    /// `error: ...`.
    pub status: LandlockStatus,
}

/// The seccomp listener's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerRecord {
    /// The listener never failed: the supervisor held it from before the
    /// job's `execve` and answered every notification it read. (Whether
    /// every process under the filter had gone is `all_processes_gone`.)
    pub alive_whole_run: bool,
    /// Notifications received (equals `counted` when nothing went wrong).
    pub notifications: u64,
    /// Replies the kernel refused because the caller had already gone (a
    /// killed thread); the attempt is still counted.
    pub replies_to_departed: u64,
    /// Notifications the kernel withdrew before the supervisor read them:
    /// the calling thread was interrupted by a signal (the call returned
    /// `EINTR`, or was restarted and notified again) or killed while it
    /// waited; the call never ran. Part of `blocked_total`; not in
    /// `counted`, because their system call and arguments were never seen.
    pub withdrawn_before_read: u64,
    /// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` was set.
    pub sync_wakeup: bool,
    /// The listener reported that no process was left under the filter
    /// (orphaned descendants included) before the record was closed.
    pub all_processes_gone: bool,
    /// Why the listener failed, if it did (the job was then killed).
    pub error: Option<String>,
}

/// What was done to the process before `execve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HygieneRecord {
    /// `PR_SET_NO_NEW_PRIVS` was set.
    pub no_new_privs: bool,
    /// Every descriptor above 2 was closed at `execve`; stdin is
    /// `/dev/null`, stdout and stderr are pipes to the supervisor.
    pub fds_above_stderr_closed: bool,
    /// Signal sent to the job when the supervisor dies (`SIGKILL`).
    pub parent_death_signal: DeathSignal,
    /// uid/gid the job ran as when the supervisor could switch (root).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `empty` (a new network namespace with only a down loopback) or
    /// `shared: <why>`.
    pub network_namespace: NetworkNamespace,
    /// `enosys` when an x32 system call number failed with ENOSYS before the
    /// filters went in, `not_applicable` off x86_64.
    pub x32_self_test: X32SelfTest,
    /// The stage-2 helper had exactly one thread when it set up the sandbox.
    pub stage2_single_threaded: bool,
    /// How the job was kept apart from other jobs and from the host's
    /// sockets. Absent only in records written before it existed
    /// (`kolm.sandbox-record.v1` from before issue 12); a reader must treat
    /// an absent value as "not isolated". The runtime always writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationRecord>,
}

/// The job's isolation from other jobs and from the host (issue 12, items 2,
/// 3 and 11). Every string is either the isolated value named below or
/// `shared: <why>` / another value saying what was done instead, so a policy
/// can require the isolated values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IsolationRecord {
    /// `per_run`: the uid/gid in `hygiene.uid`/`gid` was leased for this run
    /// alone (no other job held it while this one ran); `fixed`: chosen by
    /// the caller; `inherited`: the supervisor's own (not root).
    pub job_ids: JobIdOrigin,
    /// `private`: the job's process ran under kolm's init of a new PID
    /// namespace, so it saw no other process and every process it left was
    /// killed when it ended; or `shared: <why>`.
    pub pid_namespace: PidNamespace,
    /// `private`: a new IPC namespace (SysV IPC and POSIX message queues of
    /// its own); or `shared: <why>`, in which case the SysV IPC system calls
    /// are denied by the `deny_sysv_ipc` filter.
    pub ipc_namespace: IpcNamespace,
    /// `private_root`: a new mount namespace whose root holds only the
    /// system directories, the program, the job's trees, a fresh `/proc` and
    /// a few device nodes, so no socket path of the host exists in it; or
    /// `shared: <why>`.
    pub mount_namespace: MountNamespace,
    /// `noexec_seal`: `vm.memfd_noexec = 1` in the job's PID namespace (every
    /// memfd is created non-executable and sealed) and `memfd_create` with
    /// `MFD_EXEC` denied; or `denied`: `memfd_create` denied outright by the
    /// `deny_memfd` filter.
    pub memfd_exec: MemfdExec,
}

/// Serde, `Display` and comparison with a `&str` through the JSON spelling
/// of a closed set; an unknown spelling is refused with the record field
/// named (`{field} is "x", expected ...`).
macro_rules! json_spelling {
    ($name:ident, $field:literal, $expected:literal) => {
        impl $name {
            /// The record field that holds this set, as error messages name it.
            pub const FIELD: &'static str = $field;
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.spelling())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.spelling())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let text = String::deserialize(d)?;
                $name::from_spelling(&text).ok_or_else(|| {
                    serde::de::Error::custom(format_args!(
                        "{} is {text:?}, expected {}",
                        $field, $expected
                    ))
                })
            }
        }

        /// Equal when `text` is the JSON spelling.
        impl PartialEq<str> for $name {
            fn eq(&self, text: &str) -> bool {
                *self.spelling() == *text
            }
        }

        /// Equal when `text` is the JSON spelling.
        impl PartialEq<&str> for $name {
            fn eq(&self, text: &&str) -> bool {
                *self.spelling() == **text
            }
        }

        /// Equal when `text` is the JSON spelling.
        impl PartialEq<String> for $name {
            fn eq(&self, text: &String) -> bool {
                *self.spelling() == **text
            }
        }
    };
}

/// A closed set of fixed spellings.
macro_rules! unit_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($field:literal, expected $expected:literal) {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The JSON spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The JSON spelling (as [`Self::as_str`]).
            pub fn spelling(&self) -> &'static str {
                self.as_str()
            }

            /// The value spelt `text`, if any.
            pub fn from_spelling(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        json_spelling!($name, $field, $expected);
    };
}

/// A closed set of fixed spellings and one `<prefix><free text>` form
/// (`shared: <why>`, `error: <why>`), written first (declared last).
macro_rules! text_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($field:literal, expected $expected:literal) {
            $(#[$tmeta:meta])* $tvariant:ident(prefix $prefix:literal),
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            $(#[$tmeta])* $tvariant(String),
        }

        impl $name {
            /// The JSON spelling.
            pub fn spelling(&self) -> Cow<'_, str> {
                match self {
                    $($name::$variant => Cow::Borrowed($text),)+
                    $name::$tvariant(why) => Cow::Owned(format!("{}{why}", $prefix)),
                }
            }

            /// The value spelt `text`, if any.
            pub fn from_spelling(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    other => other
                        .strip_prefix($prefix)
                        .map(|why| $name::$tvariant(why.to_string())),
                }
            }
        }

        json_spelling!($name, $field, $expected);
    };
}

unit_set! {
    /// `profile`: which counted filter was installed.
    pub enum SandboxProfile ("profile", expected "\"default\" or \"strict\"") {
        /// Counts and refuses every socket family but `AF_UNIX`.
        Default = "default",
        /// Counts and refuses `AF_UNIX` sockets too.
        Strict = "strict",
    }
}

unit_set! {
    /// `filters[].role`: what a filter does to the calls it matches.
    pub enum FilterRole (
        "filters[].role",
        expected "\"counted\", \"deny\" or \"deny_enosys\""
    ) {
        /// `SECCOMP_RET_USER_NOTIF`, answered and counted by the supervisor.
        Counted = "counted",
        /// `SECCOMP_RET_ERRNO(EPERM)` from the kernel alone.
        Deny = "deny",
        /// `SECCOMP_RET_ERRNO(ENOSYS)` (clone3, so libc falls back to clone).
        DenyEnosys = "deny_enosys",
    }
}

unit_set! {
    /// `filter_source`: the architecture's policy document the filters were
    /// compiled from.
    pub enum FilterSource ("filter_source", expected "seccomp/<x86_64|aarch64>.json") {
        X86_64 = "seccomp/x86_64.json",
        Aarch64 = "seccomp/aarch64.json",
    }
}

text_set! {
    /// `landlock.status`.
    pub enum LandlockStatus (
        "landlock.status",
        expected "\"fully_enforced\", \"partially_enforced\", \"not_enforced\", \
                  \"dangerous_disabled\" or \"error: <why>\""
    ) {
        /// Landlock could not be applied, and why; the job ran under
        /// seccomp alone.
        Error(prefix "error: "),
        FullyEnforced = "fully_enforced",
        PartiallyEnforced = "partially_enforced",
        NotEnforced = "not_enforced",
        /// Switched off on the command line.
        DangerousDisabled = "dangerous_disabled",
        /// Stage 2's placeholder in its report when the job's own process
        /// enforces Landlock after the fork (the supervisor replaces it);
        /// never a run's status: [`SandboxRecord::check`] refuses it.
        Pending = "pending",
    }
}

unit_set! {
    /// `hygiene.parent_death_signal`: the signal the job gets when the
    /// supervisor dies.
    pub enum DeathSignal ("hygiene.parent_death_signal", expected "\"SIGKILL\"") {
        Sigkill = "SIGKILL",
    }
}

text_set! {
    /// `hygiene.network_namespace`.
    pub enum NetworkNamespace (
        "hygiene.network_namespace",
        expected "\"empty\" or \"shared: <why>\""
    ) {
        /// The host's, and why.
        Shared(prefix "shared: "),
        /// A new network namespace with only a down loopback.
        Empty = "empty",
    }
}

unit_set! {
    /// `hygiene.x32_self_test`.
    pub enum X32SelfTest (
        "hygiene.x32_self_test",
        expected "\"enosys\" or \"not_applicable\""
    ) {
        /// An x32 system call number failed with ENOSYS before the filters
        /// went in.
        Enosys = "enosys",
        /// Off x86_64.
        NotApplicable = "not_applicable",
    }
}

unit_set! {
    /// `hygiene.isolation.job_ids`: where the job's uid/gid came from.
    pub enum JobIdOrigin (
        "hygiene.isolation.job_ids",
        expected "\"per_run\", \"fixed\" or \"inherited\""
    ) {
        /// Leased for this run alone.
        PerRun = "per_run",
        /// Chosen by the caller.
        Fixed = "fixed",
        /// The supervisor's own (not root).
        Inherited = "inherited",
    }
}

text_set! {
    /// `hygiene.isolation.pid_namespace`.
    pub enum PidNamespace (
        "hygiene.isolation.pid_namespace",
        expected "\"private\" or \"shared: <why>\""
    ) {
        /// The host's, and why.
        Shared(prefix "shared: "),
        /// Under kolm's init of a new PID namespace.
        Private = "private",
    }
}

text_set! {
    /// `hygiene.isolation.ipc_namespace`.
    pub enum IpcNamespace (
        "hygiene.isolation.ipc_namespace",
        expected "\"private\" or \"shared: <why>\""
    ) {
        /// The host's, and why (the SysV IPC calls are then denied).
        Shared(prefix "shared: "),
        /// A new IPC namespace.
        Private = "private",
    }
}

text_set! {
    /// `hygiene.isolation.mount_namespace`.
    pub enum MountNamespace (
        "hygiene.isolation.mount_namespace",
        expected "\"private_root\" or \"shared: <why>\""
    ) {
        /// The host's, and why.
        Shared(prefix "shared: "),
        /// A new mount namespace with a root of its own.
        PrivateRoot = "private_root",
    }
}

unit_set! {
    /// `hygiene.isolation.memfd_exec`.
    pub enum MemfdExec (
        "hygiene.isolation.memfd_exec",
        expected "\"noexec_seal\" or \"denied\""
    ) {
        /// `vm.memfd_noexec = 1` in the job's PID namespace, `MFD_EXEC`
        /// denied.
        NoexecSeal = "noexec_seal",
        /// `memfd_create` denied outright.
        Denied = "denied",
    }
}

/// Name of an address family number.
pub fn family_name(family: u32) -> String {
    let name = match family {
        0 => "AF_UNSPEC",
        1 => "AF_UNIX",
        2 => "AF_INET",
        3 => "AF_AX25",
        4 => "AF_IPX",
        5 => "AF_APPLETALK",
        6 => "AF_NETROM",
        7 => "AF_BRIDGE",
        8 => "AF_ATMPVC",
        9 => "AF_X25",
        10 => "AF_INET6",
        11 => "AF_ROSE",
        12 => "AF_DECnet",
        13 => "AF_NETBEUI",
        14 => "AF_SECURITY",
        15 => "AF_KEY",
        16 => "AF_NETLINK",
        17 => "AF_PACKET",
        18 => "AF_ASH",
        19 => "AF_ECONET",
        20 => "AF_ATMSVC",
        21 => "AF_RDS",
        22 => "AF_SNA",
        23 => "AF_IRDA",
        24 => "AF_PPPOX",
        25 => "AF_WANPIPE",
        26 => "AF_LLC",
        27 => "AF_IB",
        28 => "AF_MPLS",
        29 => "AF_CAN",
        30 => "AF_TIPC",
        31 => "AF_BLUETOOTH",
        32 => "AF_IUCV",
        33 => "AF_RXRPC",
        34 => "AF_ISDN",
        35 => "AF_PHONET",
        36 => "AF_IEEE802154",
        37 => "AF_CAIF",
        38 => "AF_ALG",
        39 => "AF_NFC",
        40 => "AF_VSOCK",
        41 => "AF_KCM",
        42 => "AF_QIPCRTR",
        43 => "AF_SMC",
        44 => "AF_XDP",
        45 => "AF_MCTP",
        _ => return format!("AF_{family}"),
    };
    name.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn families_have_names_and_unknown_numbers_are_kept() {
        assert_eq!(family_name(2), "AF_INET");
        assert_eq!(family_name(40), "AF_VSOCK");
        assert_eq!(family_name(44), "AF_XDP");
        assert_eq!(family_name(0x8000_0002), "AF_2147483650");
    }

    fn record(by_syscall: &[(&str, u64)], by_family: &[(&str, u64)], sigsys: u64) -> SandboxRecord {
        let counted = Counted {
            by_syscall: by_syscall
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            by_family: by_family.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        };
        SandboxRecord {
            schema: RECORD_SCHEMA_V1.into(),
            profile: SandboxProfile::Default,
            blocked_total: counted.total().saturating_add(sigsys),
            egress_blocked: true,
            counted,
            sigsys_kills: sigsys,
            exactness: Exactness::from_reasons(Vec::new()),
            exit: JobExit {
                code: None,
                signal: Some(31),
                exec_error: None,
            },
            filters: Vec::new(),
            filter_source: FilterSource::X86_64,
            landlock: LandlockRecord {
                abi: 4,
                status: LandlockStatus::FullyEnforced,
            },
            listener: ListenerRecord {
                alive_whole_run: true,
                notifications: 0,
                replies_to_departed: 0,
                withdrawn_before_read: 0,
                sync_wakeup: true,
                all_processes_gone: true,
                error: None,
            },
            hygiene: HygieneRecord {
                no_new_privs: true,
                fds_above_stderr_closed: true,
                parent_death_signal: DeathSignal::Sigkill,
                uid: Some(65520),
                gid: Some(65520),
                network_namespace: NetworkNamespace::Empty,
                x32_self_test: X32SelfTest::Enosys,
                stage2_single_threaded: true,
                isolation: Some(IsolationRecord {
                    job_ids: JobIdOrigin::PerRun,
                    pid_namespace: PidNamespace::Private,
                    ipc_namespace: IpcNamespace::Private,
                    mount_namespace: MountNamespace::PrivateRoot,
                    memfd_exec: MemfdExec::NoexecSeal,
                }),
            },
        }
    }

    #[test]
    fn a_record_from_before_isolation_still_reads_and_says_none() {
        let mut r = record(&[], &[], 0);
        r.hygiene.isolation = None;
        let bytes = r.to_json_bytes().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("isolation"));
        assert_eq!(reread(&r).unwrap().hygiene.isolation, None);
        let with = record(&[], &[], 0);
        assert_eq!(reread(&with).unwrap(), with);
    }

    fn reread(r: &SandboxRecord) -> Result<SandboxRecord, SandboxRecordError> {
        SandboxRecord::from_json_bytes(&r.to_json_bytes().unwrap())
    }

    #[test]
    fn a_consistent_record_round_trips() {
        let r = record(
            &[("socket", 5), ("socketpair", 1), ("io_uring_setup", 2)],
            &[("AF_INET", 4), ("AF_INET6", 2)],
            1,
        );
        assert_eq!(r.blocked_total, 9);
        assert_eq!(reread(&r).unwrap(), r);
    }

    #[test]
    fn blocked_total_must_equal_its_parts() {
        let mut r = record(&[("socket", 3)], &[("AF_INET", 3)], 0);
        r.blocked_total = 0;
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::BlockedTotal {
                stated: 0,
                counted: 3,
                ..
            })
        ));
        let mut r = record(&[("socket", 3)], &[("AF_INET", 3)], 1);
        r.blocked_total = 3;
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::BlockedTotal { .. })
        ));
        // Withdrawn notifications are part of the total.
        let mut r = record(&[("socket", 3)], &[("AF_INET", 3)], 0);
        r.listener.withdrawn_before_read = 2;
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::BlockedTotal { withdrawn: 2, .. })
        ));
        r.blocked_total = 5;
        assert_eq!(reread(&r).unwrap(), r);
        // Several descendants can die of SIGSYS.
        let r = record(&[], &[], 3);
        assert_eq!(reread(&r).unwrap(), r);
        // Parts that overflow cannot add up to anything.
        let mut r = record(
            &[("socket", u64::MAX), ("io_uring_enter", 2)],
            &[("AF_INET", u64::MAX)],
            0,
        );
        r.blocked_total = 1;
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::BlockedTotal { .. })
        ));
    }

    #[test]
    fn families_must_add_up_to_the_socket_calls() {
        let r = record(&[("socket", 3)], &[("AF_INET", 2)], 0);
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::FamilyTotal {
                by_family: 2,
                by_syscall: 3
            })
        ));
    }

    #[test]
    fn schema_profile_unknown_fields_and_trailing_bytes_are_refused() {
        let mut r = record(&[], &[], 0);
        r.schema = "kolm.sandbox-record.v2".into();
        assert!(matches!(reread(&r), Err(SandboxRecordError::Schema(_))));
        // A profile outside its closed set is refused on read, the field
        // named.
        let good = String::from_utf8(record(&[], &[], 0).to_json_bytes().unwrap()).unwrap();
        let lenient = good.replacen("\"profile\": \"default\"", "\"profile\": \"lenient\"", 1);
        assert_ne!(lenient, good);
        let err = SandboxRecord::from_json_bytes(lenient.as_bytes()).unwrap_err();
        assert!(matches!(err, SandboxRecordError::Json { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("profile is \"lenient\", expected \"default\" or \"strict\""),
            "{err}"
        );
        let mut r = record(&[], &[], 0);
        r.exactness.blocked_total = CountExactness::LowerBound;
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::Exactness { reasons: 0, .. })
        ));
        let mut r = record(&[], &[], 0);
        r.exactness.lower_bound_because = vec!["a path was not watched".into()];
        assert!(matches!(
            reread(&r),
            Err(SandboxRecordError::Exactness { reasons: 1, .. })
        ));

        let good = record(&[], &[], 0).to_json_bytes().unwrap();
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"{}");
        assert!(matches!(
            SandboxRecord::from_json_bytes(&trailing),
            Err(SandboxRecordError::Json { .. })
        ));
        let text = String::from_utf8(good).unwrap();
        let extra = text.replacen('{', "{\"extra\": 1,", 1);
        assert!(matches!(
            SandboxRecord::from_json_bytes(extra.as_bytes()),
            Err(SandboxRecordError::Json { .. })
        ));
        let extra_isolation = text.replacen("\"memfd_exec\"", "\"extra\": 1, \"memfd_exec\"", 1);
        assert_ne!(extra_isolation, text);
        assert!(matches!(
            SandboxRecord::from_json_bytes(extra_isolation.as_bytes()),
            Err(SandboxRecordError::Json { .. })
        ));
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(
            SandboxRecord::from_json_bytes(&big),
            Err(SandboxRecordError::TooLarge { .. })
        ));
    }

    /// Every closed set writes the spelling the String fields held, reads
    /// it back, and refuses any other value naming its field.
    #[test]
    fn closed_sets_keep_their_spellings_and_name_the_field_of_an_unknown_value() {
        fn spelt<T: Serialize + for<'de> Deserialize<'de> + PartialEq + fmt::Debug>(
            value: T,
            text: &str,
        ) {
            let json = serde_json::to_string(&value).unwrap();
            assert_eq!(json, format!("{text:?}"));
            assert_eq!(serde_json::from_str::<T>(&json).unwrap(), value);
        }
        spelt(SandboxProfile::Strict, "strict");
        spelt(FilterRole::DenyEnosys, "deny_enosys");
        spelt(FilterSource::Aarch64, "seccomp/aarch64.json");
        spelt(LandlockStatus::PartiallyEnforced, "partially_enforced");
        spelt(LandlockStatus::Error("EPERM".into()), "error: EPERM");
        spelt(DeathSignal::Sigkill, "SIGKILL");
        spelt(
            NetworkNamespace::Shared("needs root".into()),
            "shared: needs root",
        );
        spelt(X32SelfTest::NotApplicable, "not_applicable");
        spelt(JobIdOrigin::Inherited, "inherited");
        spelt(PidNamespace::Shared("".into()), "shared: ");
        spelt(IpcNamespace::Private, "private");
        spelt(MountNamespace::PrivateRoot, "private_root");
        spelt(MemfdExec::Denied, "denied");
        assert_eq!(PidNamespace::Private, "private");
        assert_eq!(LandlockStatus::Error("x".into()).to_string(), "error: x");

        let good = String::from_utf8(record(&[], &[], 0).to_json_bytes().unwrap()).unwrap();
        for (from, to, field) in [
            (
                "\"seccomp/x86_64.json\"",
                "\"seccomp/riscv64.json\"",
                "filter_source",
            ),
            ("\"fully_enforced\"", "\"sort_of\"", "landlock.status"),
            ("\"SIGKILL\"", "\"SIGTERM\"", "hygiene.parent_death_signal"),
            (
                "\"empty\"",
                "\"shared:no-space\"",
                "hygiene.network_namespace",
            ),
            ("\"enosys\"", "\"eperm\"", "hygiene.x32_self_test"),
            ("\"per_run\"", "\"borrowed\"", "hygiene.isolation.job_ids"),
            (
                "\"pid_namespace\": \"private\"",
                "\"pid_namespace\": \"host\"",
                "hygiene.isolation.pid_namespace",
            ),
            (
                "\"ipc_namespace\": \"private\"",
                "\"ipc_namespace\": \"Private\"",
                "hygiene.isolation.ipc_namespace",
            ),
            (
                "\"private_root\"",
                "\"private\"",
                "hygiene.isolation.mount_namespace",
            ),
            (
                "\"noexec_seal\"",
                "\"allowed\"",
                "hygiene.isolation.memfd_exec",
            ),
        ] {
            let bad = good.replacen(from, to, 1);
            assert_ne!(bad, good, "{field}");
            let err = SandboxRecord::from_json_bytes(bad.as_bytes()).unwrap_err();
            assert!(matches!(err, SandboxRecordError::Json { .. }), "{err}");
            assert!(
                err.to_string().contains(&format!("{field} is ")),
                "{field}: {err}"
            );
        }
    }

    #[test]
    fn check_names_the_first_broken_rule() {
        let good = record(&[], &[], 1);
        // `record` has no filters: not a claim of egress_blocked.
        let mut claim = good.clone();
        claim.egress_blocked = false;
        assert!(claim.check().is_ok());
        type Change = fn(&mut SandboxRecord);
        let cases: Vec<(Change, &str)> = vec![
            (
                |r| r.hygiene.no_new_privs = false,
                "hygiene.no_new_privs is false",
            ),
            (|r| r.hygiene.gid = Some(0), "the job ran as root"),
            (
                |r| r.landlock.status = LandlockStatus::Pending,
                "\"pending\" is unknown",
            ),
            (
                |r| r.landlock.abi = 0,
                "landlock.status is \"fully_enforced\" with ABI 0",
            ),
            (
                |r| r.listener.replies_to_departed = 1,
                "exceeds listener.notifications 0",
            ),
            (
                |r| r.exit.code = Some(0),
                "exactly one of code, signal and exec_error",
            ),
            (
                |r| r.sigsys_kills = 2,
                "sigsys_kills is 2 but exit.signal is Some(31)",
            ),
            (
                |r| r.egress_blocked = true,
                "its filters are [], not the profile's [\"counted\", \"deny_enosys\", \"deny\"]",
            ),
        ];
        for (change, needle) in cases {
            let mut r = claim.clone();
            change(&mut r);
            let err = r.check().unwrap_err().to_string();
            assert!(err.starts_with("sandbox record: "), "{err}");
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn duplicate_keys_and_other_spellings_are_refused() {
        let r = record(&[("socket", 3)], &[("AF_INET", 3)], 0);
        let good = String::from_utf8(r.to_json_bytes().unwrap()).unwrap();
        assert_eq!(reread(&r).unwrap(), r);
        // serde keeps the last of two equal map keys: without the byte-form
        // check this record would read as blocked_total 3 = socket 3 while
        // it also says socket 1000.
        let dup_map = good.replacen("\"socket\": 3", "\"socket\": 1000,\n      \"socket\": 3", 1);
        assert_ne!(dup_map, good);
        let lenient: SandboxRecord = serde_json::from_str(&dup_map).unwrap();
        assert_eq!(lenient, r, "serde alone accepts the duplicate");
        assert!(matches!(
            SandboxRecord::from_json_bytes(dup_map.as_bytes()),
            Err(SandboxRecordError::NotCanonical { .. })
        ));
        // A duplicate top-level key (serde's derive refuses it too).
        let dup_top = good.replacen(
            "\"egress_blocked\": true",
            "\"egress_blocked\": false,\n  \"egress_blocked\": true",
            1,
        );
        assert!(SandboxRecord::from_json_bytes(dup_top.as_bytes()).is_err());
        // Compact JSON, CRLF, no final newline, reordered fields.
        let compact = serde_json::to_vec(&r).unwrap();
        let crlf = good.replace('\n', "\r\n");
        let no_newline = good.trim_end();
        let reordered = good.replacen(
            "\"schema\": \"kolm.sandbox-record.v1\",\n  \"profile\": \"default\",",
            "\"profile\": \"default\",\n  \"schema\": \"kolm.sandbox-record.v1\",",
            1,
        );
        assert_ne!(reordered, good);
        for bad in [
            compact.as_slice(),
            crlf.as_bytes(),
            no_newline.as_bytes(),
            reordered.as_bytes(),
        ] {
            assert!(
                matches!(
                    SandboxRecord::from_json_bytes(bad),
                    Err(SandboxRecordError::NotCanonical { .. })
                ),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
