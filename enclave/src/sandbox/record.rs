//! The sandbox record: what the sandbox saw and enforced during one job,
//! sealed into the artifact as `governance/sandbox-record.json` and
//! summarised in the manifest. Documented field by field in
//! `docs/sandbox.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    pub profile: String,
    /// Sum of every counted attempt (`counted.by_syscall`) and of the
    /// SIGSYS kills seen (`sigsys_kills`).
    pub blocked_total: u64,
    /// The counted and deny filters were installed before the job's first
    /// instruction and stayed in force until its last one (seccomp filters
    /// cannot be removed). Never true for a job that did not start.
    pub egress_blocked: bool,
    /// Attempts answered by the supervisor through the seccomp listener.
    pub counted: Counted,
    /// 1 if the job's process was killed by SIGSYS (the architecture check:
    /// a 32-bit `int 0x80` call), seen through `waitpid`; else 0.
    pub sigsys_kills: u64,
    /// How the job's process ended.
    pub exit: JobExit,
    /// Every filter installed, in order.
    pub filters: Vec<FilterRecord>,
    /// The policy file the filters were compiled from (`seccomp/<arch>.json`).
    pub filter_source: String,
    /// Landlock, best effort.
    pub landlock: LandlockRecord,
    /// The seccomp listener the counts come from.
    pub listener: ListenerRecord,
    /// Process hygiene applied before `execve`.
    pub hygiene: HygieneRecord,
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
    /// Sum over `by_syscall`.
    pub fn total(&self) -> u64 {
        self.by_syscall
            .values()
            .fold(0u64, |a, b| a.saturating_add(*b))
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
    pub role: String,
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
    pub status: String,
}

/// The seccomp listener's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerRecord {
    /// The supervisor held the listener and answered every notification
    /// from before the job's `execve` until every process under the filter
    /// had gone: the counts are exact.
    pub alive_whole_run: bool,
    /// Notifications received (equals `counted` when nothing went wrong).
    pub notifications: u64,
    /// Replies the kernel refused because the caller had already gone (a
    /// killed thread); the attempt is still counted.
    pub replies_to_departed: u64,
    /// Notifications withdrawn by the kernel before the supervisor could
    /// read them (the calling process was killed while the call was
    /// pending; the call never returned to it). Not counted: their system
    /// call number was never seen.
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
    pub parent_death_signal: String,
    /// uid/gid the job ran as when the supervisor could switch (root).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `empty` (a new network namespace with only a down loopback) or
    /// `shared: <why>`.
    pub network_namespace: String,
    /// `enosys` when an x32 system call number failed with ENOSYS before the
    /// filters went in, `not_applicable` off x86_64.
    pub x32_self_test: String,
    /// The stage-2 helper had exactly one thread when it set up the sandbox.
    pub stage2_single_threaded: bool,
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

/// The counted system calls: name and the errno the job gets back.
pub(super) fn counted_syscall(nr: i32) -> Option<(&'static str, i32)> {
    let nr = libc::c_long::from(nr);
    if nr == libc::SYS_socket {
        Some(("socket", libc::EACCES))
    } else if nr == libc::SYS_socketpair {
        Some(("socketpair", libc::EACCES))
    } else if nr == libc::SYS_io_uring_setup {
        Some(("io_uring_setup", libc::ENOSYS))
    } else if nr == libc::SYS_io_uring_enter {
        Some(("io_uring_enter", libc::ENOSYS))
    } else if nr == libc::SYS_io_uring_register {
        Some(("io_uring_register", libc::ENOSYS))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_names_and_unknown_numbers_are_kept() {
        assert_eq!(family_name(2), "AF_INET");
        assert_eq!(family_name(40), "AF_VSOCK");
        assert_eq!(family_name(44), "AF_XDP");
        assert_eq!(family_name(0x8000_0002), "AF_2147483650");
    }

    #[test]
    fn counted_syscalls_answer_eacces_or_enosys() {
        assert_eq!(
            counted_syscall(libc::SYS_socket as i32),
            Some(("socket", libc::EACCES))
        );
        assert_eq!(
            counted_syscall(libc::SYS_io_uring_enter as i32),
            Some(("io_uring_enter", libc::ENOSYS))
        );
        assert_eq!(counted_syscall(libc::SYS_getpid as i32), None);
    }
}
