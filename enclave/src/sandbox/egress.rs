//! The record's `egress_blocked`, decided from what the supervisor observed
//! during the run (never written as a constant), and the kernel's own view
//! of a process's seccomp filters that one of those observations comes from.
//!
//! `egress_blocked` is true only when every condition of [`check`] holds;
//! `docs/sandbox.md` ("What `egress_blocked` means") says the same in prose,
//! with what it does not mean.

use kolm_format::sandbox_record::{Counted, FilterRecord};

/// The facts `egress_blocked` is decided from, as the supervisor observed
/// them during one run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Observed<'a> {
    /// The filters stage 2 reported installed, in order. The report arrives
    /// before the supervisor sends the go-ahead, so before the job's
    /// `execve`.
    pub installed: &'a [FilterRecord],
    /// The filters of the run's profile as compiled into this binary, in
    /// installation order (counted, `deny_enosys`, `deny`).
    pub expected: &'a [FilterRecord],
    /// The kernel's `/proc/<pid>/status` of stage 2, read after its report
    /// and before the go-ahead, shows seccomp filter mode and exactly the
    /// reported number of filters on top of the supervisor's own.
    pub kernel_confirmed_filters: bool,
    /// Stage 2 had one thread when it installed the filters (a filter
    /// installed without `TSYNC` binds only the calling thread).
    pub stage2_single_threaded: bool,
    /// The program was executed: stage 2 reported no exec failure.
    pub job_started: bool,
    /// The notification loop failed (its error), so the job was killed and
    /// any notification after that was answered by the kernel, uncounted.
    pub listener_error: Option<&'a str>,
    /// The listener reported no process left under the filter (`POLLHUP`)
    /// before the loop stopped.
    pub all_processes_gone: bool,
    /// Notifications the kernel withdrew before the supervisor read them
    /// (interrupted or killed calls that never ran: blocked, and part of
    /// `blocked_total`).
    pub withdrawn_before_read: u64,
    /// Notifications read.
    pub notifications: u64,
    /// What they were counted as.
    pub counted: &'a Counted,
    /// The signal that ended the job's process, from `waitpid`.
    pub job_signal: Option<i32>,
    /// SIGSYS deaths of the job's descendants seen.
    pub descendant_sigsys: u64,
    /// SIGSYS kills recorded.
    pub sigsys_kills: u64,
    /// `blocked_total` as recorded.
    pub blocked_total: u64,
    /// `withdrawn_before_read` is every notification withdrawn before it was
    /// read: the start and end sentinel calls were the first and the last
    /// notification read (`init.rs`, `supervisor::Sentinels`).
    pub withdrawals_all_seen: bool,
    /// No installed filter kills or traps (`filter.rs`), so no blocked call
    /// ends in a SIGSYS death that only a parent would see.
    pub filters_never_kill: bool,
}

/// The first condition of `egress_blocked` that did not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NotBlocked {
    #[error("stage 2 did not report the profile's counted, deny_enosys and deny filters installed")]
    FiltersNotReported,
    #[error("the kernel's /proc status did not confirm the filters on the job's process")]
    FiltersNotConfirmed,
    #[error("stage 2 was not single-threaded when it installed the filters")]
    Stage2Threads,
    #[error("the program was never executed")]
    JobNotStarted,
    #[error("the seccomp listener failed: {0}")]
    ListenerFailed(String),
    #[error("a process under the filter outlived the listener")]
    ProcessesLeft,
    #[error("{notifications} notifications read but {counted} counted")]
    CountMismatch { notifications: u64, counted: String },
    #[error(
        "the job's process ended with signal {signal:?} and {descendants} descendant(s) died of \
         SIGSYS, but sigsys_kills is {sigsys_kills}"
    )]
    SigsysMismatch {
        signal: Option<i32>,
        descendants: u64,
        sigsys_kills: u64,
    },
    #[error(
        "blocked_total {0} is not the exact sum of the counts, the withdrawn notifications and \
         the SIGSYS kills"
    )]
    TotalMismatch(u64),
}

/// The roles of a profile's filters in order; a run without private IPC
/// or PID namespaces adds `deny` filters (`deny_sysv_ipc`, `deny_memfd`)
/// before the last one (`filter::for_profile`).
const ROLES: [&str; 3] = ["counted", "deny_enosys", "deny"];

/// `counted`, `deny_enosys`, then one or more `deny`, the last one named
/// `deny` (it forbids `seccomp(2)`, so nothing can follow it).
fn roles_in_order(installed: &[FilterRecord]) -> bool {
    let roles: Vec<&str> = installed.iter().map(|f| f.role.as_str()).collect();
    roles.len() >= ROLES.len()
        && roles.get(..2) == ROLES.get(..2)
        && roles
            .get(2..)
            .is_some_and(|r| r.iter().all(|r| *r == "deny"))
        && installed.last().is_some_and(|f| f.name == "deny")
}

/// Every condition of `egress_blocked: true`, in the order they are
/// checked; the first that fails is returned.
///
/// 1. Stage 2 reported exactly the expected filters (names, roles,
///    instruction counts, sha256), the counted one and both deny ones, and
///    the kernel confirmed them on the process that became the job.
/// 2. Stage 2 was single-threaded, so the filters bind the whole process
///    and, through inheritance, everything it starts.
/// 3. The program was executed under them.
/// 4. The listener never failed: every notification it read was answered
///    with an error (never allowed) and counted.
/// 5. It saw the last process under the filter go, so no attempt came
///    after the loop stopped counting.
/// 6. The counts add up: every notification read is counted once, every
///    SIGSYS death seen is counted once, and `blocked_total` is their sum
///    with the withdrawn notifications (no saturation).
///
/// A notification withdrawn before it was read is not a failure: its call
/// was interrupted (or its thread killed) before it ran. Whether every
/// attempt is in the count is a separate question, [`lower_bound_reasons`].
pub(super) fn check(o: &Observed<'_>) -> Result<(), NotBlocked> {
    if o.installed.is_empty() || o.installed != o.expected || !roles_in_order(o.installed) {
        return Err(NotBlocked::FiltersNotReported);
    }
    if !o.kernel_confirmed_filters {
        return Err(NotBlocked::FiltersNotConfirmed);
    }
    if !o.stage2_single_threaded {
        return Err(NotBlocked::Stage2Threads);
    }
    if !o.job_started {
        return Err(NotBlocked::JobNotStarted);
    }
    if let Some(e) = o.listener_error {
        return Err(NotBlocked::ListenerFailed(e.to_string()));
    }
    if !o.all_processes_gone {
        return Err(NotBlocked::ProcessesLeft);
    }
    let counted = o.counted.checked_total();
    if counted != Some(o.notifications) {
        return Err(NotBlocked::CountMismatch {
            notifications: o.notifications,
            counted: counted.map_or_else(|| "more than 2^64 - 1".into(), |c| c.to_string()),
        });
    }
    if u64::from(o.job_signal == Some(libc::SIGSYS)).checked_add(o.descendant_sigsys)
        != Some(o.sigsys_kills)
    {
        return Err(NotBlocked::SigsysMismatch {
            signal: o.job_signal,
            descendants: o.descendant_sigsys,
            sigsys_kills: o.sigsys_kills,
        });
    }
    if counted
        .and_then(|c| c.checked_add(o.withdrawn_before_read))
        .and_then(|c| c.checked_add(o.sigsys_kills))
        != Some(o.blocked_total)
    {
        return Err(NotBlocked::TotalMismatch(o.blocked_total));
    }
    Ok(())
}

/// Why `blocked_total` may miss attempts; empty when it is exact (the
/// record's `exactness`). Each path that was not observed completely is
/// named:
///
/// - the listener failed, or a process under the filter outlived the job:
///   attempts after that were answered by the kernel, uncounted;
/// - notifications withdrawn before they were read (a signal interrupted
///   the call, or its thread was killed) are counted from the gaps between
///   the ids read; one withdrawn before the first or after the last read
///   leaves no gap, unless the sentinel calls bracket the run (as the init
///   of a PID namespace only);
/// - a filter kills: a descendant killed by it is seen only by its parent
///   (the compiled filters never do; see `filter.rs`);
/// - the counts do not add up (a counter saturated).
pub(super) fn lower_bound_reasons(o: &Observed<'_>) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(e) = o.listener_error {
        why.push(format!(
            "the seccomp listener failed ({e}); later attempts were answered by the kernel, \
             uncounted"
        ));
    }
    if !o.all_processes_gone {
        why.push(
            "a process under the filter outlived the job; its later attempts are not counted"
                .to_string(),
        );
    }
    if !o.withdrawals_all_seen {
        why.push(
            "notifications withdrawn before they were read (calls interrupted by a signal, or \
             whose thread was killed) are counted from the gaps between the notification ids \
             read; without the sentinel calls that bracket a run in a PID namespace of its \
             own, those before the first or after the last one read are not seen"
                .to_string(),
        );
    }
    if !o.filters_never_kill {
        why.push(
            "a filter kills with SIGSYS: a descendant killed by it is seen only by its parent"
                .to_string(),
        );
    }
    let sum = o
        .counted
        .checked_total()
        .and_then(|c| c.checked_add(o.withdrawn_before_read))
        .and_then(|c| c.checked_add(o.sigsys_kills));
    if o.counted.checked_total() != Some(o.notifications) || sum != Some(o.blocked_total) {
        why.push("a counter saturated or the counts do not add up".to_string());
    }
    why
}

/// `egress_blocked` as recorded: every condition of [`check`] held.
pub(super) fn egress_blocked(o: &Observed<'_>) -> bool {
    check(o).is_ok()
}

/// The seccomp lines of a `/proc/<pid>/status` (or `thread-self`) file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeccompStatus {
    /// `Seccomp:` 0 none, 1 strict, 2 filter (Linux 3.8+).
    pub mode: Option<u32>,
    /// `Seccomp_filters:` the number of filters attached (Linux 5.9+).
    pub filters: Option<u64>,
}

impl SeccompStatus {
    /// Reads the two lines; a line that is absent or malformed is `None`.
    pub(super) fn parse(status: &str) -> SeccompStatus {
        let field = |name: &str| {
            status.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .map(str::trim)
            })
        };
        SeccompStatus {
            mode: field("Seccomp").and_then(|v| v.parse().ok()),
            filters: field("Seccomp_filters").and_then(|v| v.parse().ok()),
        }
    }

    /// Whether `job` (stage 2 after its report) runs in filter mode with
    /// exactly `installed` filters on top of those of `own` (the supervisor
    /// thread that started it, which stage 2 inherited). A kernel before
    /// 5.9 reports no count for either; then only the mode is checked.
    pub(super) fn confirms(own: SeccompStatus, job: SeccompStatus, installed: usize) -> bool {
        let count_ok = match (own.filters, job.filters) {
            (Some(own), Some(job)) => {
                u64::try_from(installed)
                    .ok()
                    .and_then(|n| own.checked_add(n))
                    == Some(job)
            }
            (None, None) => true,
            _ => false,
        };
        job.mode == Some(2) && count_ok
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kolm_format::sandbox_record::FilterRole;

    use super::*;

    fn filters() -> Vec<FilterRecord> {
        ROLES
            .iter()
            .enumerate()
            .map(|(i, role)| FilterRecord {
                name: if i == 0 { "counted_default" } else { role }.to_string(),
                role: FilterRole::from_spelling(role).unwrap(),
                instructions: 10 + i,
                sha256: format!("{i:064x}"),
            })
            .collect()
    }

    fn counted(socket: u64, io_uring: u64) -> Counted {
        let mut by_syscall = BTreeMap::new();
        let mut by_family = BTreeMap::new();
        if socket > 0 {
            by_syscall.insert("socket".to_string(), socket);
            by_family.insert("AF_INET".to_string(), socket);
        }
        if io_uring > 0 {
            by_syscall.insert("io_uring_setup".to_string(), io_uring);
        }
        Counted {
            by_syscall,
            by_family,
        }
    }

    /// One change to a clean run's observations, and what it must give.
    struct Case {
        what: &'static str,
        change: fn(&mut Owned),
        want: Result<(), NotBlocked>,
    }

    /// Owned observations a case can change.
    struct Owned {
        installed: Vec<FilterRecord>,
        expected: Vec<FilterRecord>,
        kernel_confirmed_filters: bool,
        stage2_single_threaded: bool,
        job_started: bool,
        listener_error: Option<String>,
        all_processes_gone: bool,
        withdrawn_before_read: u64,
        notifications: u64,
        counted: Counted,
        job_signal: Option<i32>,
        descendant_sigsys: u64,
        sigsys_kills: u64,
        blocked_total: u64,
        withdrawals_all_seen: bool,
        filters_never_kill: bool,
    }

    impl Owned {
        /// A hostile run that tried 5 sockets and 2 io_uring setups and
        /// exited 0: everything observed, everything counted.
        fn clean() -> Owned {
            Owned {
                installed: filters(),
                expected: filters(),
                kernel_confirmed_filters: true,
                stage2_single_threaded: true,
                job_started: true,
                listener_error: None,
                all_processes_gone: true,
                withdrawn_before_read: 0,
                notifications: 7,
                counted: counted(5, 2),
                job_signal: None,
                descendant_sigsys: 0,
                sigsys_kills: 0,
                blocked_total: 7,
                withdrawals_all_seen: true,
                filters_never_kill: true,
            }
        }

        fn observed(&self) -> Observed<'_> {
            Observed {
                installed: &self.installed,
                expected: &self.expected,
                kernel_confirmed_filters: self.kernel_confirmed_filters,
                stage2_single_threaded: self.stage2_single_threaded,
                job_started: self.job_started,
                listener_error: self.listener_error.as_deref(),
                all_processes_gone: self.all_processes_gone,
                withdrawn_before_read: self.withdrawn_before_read,
                notifications: self.notifications,
                counted: &self.counted,
                job_signal: self.job_signal,
                descendant_sigsys: self.descendant_sigsys,
                sigsys_kills: self.sigsys_kills,
                blocked_total: self.blocked_total,
                withdrawals_all_seen: self.withdrawals_all_seen,
                filters_never_kill: self.filters_never_kill,
            }
        }
    }

    #[test]
    fn egress_blocked_holds_only_when_every_condition_does() {
        let cases = [
            Case {
                what: "clean run",
                change: |_| {},
                want: Ok(()),
            },
            Case {
                what: "nothing tried",
                change: |o| {
                    o.counted = Counted::default();
                    o.notifications = 0;
                    o.blocked_total = 0;
                },
                want: Ok(()),
            },
            Case {
                what: "killed by SIGSYS (int 0x80) and counted",
                change: |o| {
                    o.job_signal = Some(libc::SIGSYS);
                    o.sigsys_kills = 1;
                    o.blocked_total = 8;
                },
                want: Ok(()),
            },
            Case {
                what: "killed by SIGKILL (timeout)",
                change: |o| o.job_signal = Some(libc::SIGKILL),
                want: Ok(()),
            },
            Case {
                what: "no filters reported",
                change: |o| o.installed.clear(),
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "no filters expected either",
                change: |o| {
                    o.installed.clear();
                    o.expected.clear();
                },
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "deny filter missing",
                change: |o| {
                    o.installed.pop();
                    o.expected.pop();
                },
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "counted filter missing",
                change: |o| {
                    o.installed.remove(0);
                    o.expected.remove(0);
                },
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "a different program installed",
                change: |o| o.installed[2].sha256 = format!("{:064x}", 9),
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "filters in another order",
                change: |o| {
                    o.installed.swap(1, 2);
                    o.expected.swap(1, 2);
                },
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "an extra deny filter before deny (no private IPC namespace)",
                change: |o| {
                    let extra = FilterRecord {
                        name: "deny_sysv_ipc".into(),
                        role: FilterRole::Deny,
                        instructions: 20,
                        sha256: format!("{:064x}", 7),
                    };
                    o.installed.insert(2, extra.clone());
                    o.expected.insert(2, extra);
                },
                want: Ok(()),
            },
            Case {
                what: "an extra deny filter after deny",
                change: |o| {
                    let extra = FilterRecord {
                        name: "deny_memfd".into(),
                        role: FilterRole::Deny,
                        instructions: 20,
                        sha256: format!("{:064x}", 7),
                    };
                    o.installed.push(extra.clone());
                    o.expected.push(extra);
                },
                want: Err(NotBlocked::FiltersNotReported),
            },
            Case {
                what: "the kernel did not confirm them",
                change: |o| o.kernel_confirmed_filters = false,
                want: Err(NotBlocked::FiltersNotConfirmed),
            },
            Case {
                what: "stage 2 had threads",
                change: |o| o.stage2_single_threaded = false,
                want: Err(NotBlocked::Stage2Threads),
            },
            Case {
                what: "exec failed",
                change: |o| {
                    o.job_started = false;
                    o.counted = Counted::default();
                    o.notifications = 0;
                    o.blocked_total = 0;
                },
                want: Err(NotBlocked::JobNotStarted),
            },
            Case {
                what: "listener failed",
                change: |o| o.listener_error = Some("SECCOMP_IOCTL_NOTIF_RECV: EINVAL".into()),
                want: Err(NotBlocked::ListenerFailed(
                    "SECCOMP_IOCTL_NOTIF_RECV: EINVAL".into(),
                )),
            },
            Case {
                what: "a process outlived the listener",
                change: |o| o.all_processes_gone = false,
                want: Err(NotBlocked::ProcessesLeft),
            },
            Case {
                what: "a notification withdrawn unread, counted",
                change: |o| {
                    o.withdrawn_before_read = 1;
                    o.blocked_total = 8;
                },
                want: Ok(()),
            },
            Case {
                what: "a notification withdrawn unread, left out of the total",
                change: |o| o.withdrawn_before_read = 1,
                want: Err(NotBlocked::TotalMismatch(7)),
            },
            Case {
                what: "two descendants killed by SIGSYS, counted",
                change: |o| {
                    o.descendant_sigsys = 2;
                    o.sigsys_kills = 2;
                    o.blocked_total = 9;
                },
                want: Ok(()),
            },
            Case {
                what: "a descendant's SIGSYS death seen but not counted",
                change: |o| o.descendant_sigsys = 1,
                want: Err(NotBlocked::SigsysMismatch {
                    signal: None,
                    descendants: 1,
                    sigsys_kills: 0,
                }),
            },
            Case {
                what: "drain not proven (a lower bound, still blocked)",
                change: |o| o.withdrawals_all_seen = false,
                want: Ok(()),
            },
            Case {
                what: "a notification read but not counted",
                change: |o| o.notifications = 8,
                want: Err(NotBlocked::CountMismatch {
                    notifications: 8,
                    counted: "7".into(),
                }),
            },
            Case {
                what: "counts saturated",
                change: |o| {
                    o.counted = counted(u64::MAX, 1);
                    o.notifications = u64::MAX;
                    o.blocked_total = u64::MAX;
                },
                want: Err(NotBlocked::CountMismatch {
                    notifications: u64::MAX,
                    counted: "more than 2^64 - 1".into(),
                }),
            },
            Case {
                what: "SIGSYS death not counted",
                change: |o| o.job_signal = Some(libc::SIGSYS),
                want: Err(NotBlocked::SigsysMismatch {
                    signal: Some(libc::SIGSYS),
                    descendants: 0,
                    sigsys_kills: 0,
                }),
            },
            Case {
                what: "SIGSYS counted without a SIGSYS death",
                change: |o| {
                    o.sigsys_kills = 1;
                    o.blocked_total = 8;
                },
                want: Err(NotBlocked::SigsysMismatch {
                    signal: None,
                    descendants: 0,
                    sigsys_kills: 1,
                }),
            },
            Case {
                what: "blocked_total short of its parts",
                change: |o| o.blocked_total = 6,
                want: Err(NotBlocked::TotalMismatch(6)),
            },
            Case {
                what: "blocked_total saturated",
                change: |o| {
                    o.counted = counted(u64::MAX, 0);
                    o.notifications = u64::MAX;
                    o.job_signal = Some(libc::SIGSYS);
                    o.sigsys_kills = 1;
                    o.blocked_total = u64::MAX;
                },
                want: Err(NotBlocked::TotalMismatch(u64::MAX)),
            },
        ];
        for case in cases {
            let mut o = Owned::clean();
            (case.change)(&mut o);
            let got = check(&o.observed());
            assert_eq!(got, case.want, "{}", case.what);
            assert_eq!(
                egress_blocked(&o.observed()),
                case.want.is_ok(),
                "{}",
                case.what
            );
        }
    }

    #[test]
    fn the_count_is_exact_only_when_every_path_was_observed() {
        let reasons = |change: fn(&mut Owned)| {
            let mut o = Owned::clean();
            change(&mut o);
            lower_bound_reasons(&o.observed())
        };
        assert!(reasons(|_| {}).is_empty());
        // Withdrawn notifications, every one seen: still exact.
        assert!(
            reasons(|o| {
                o.withdrawn_before_read = 40;
                o.blocked_total = 47;
            })
            .is_empty()
        );
        let one = |change: fn(&mut Owned), word: &str| {
            let r = reasons(change);
            assert_eq!(r.len(), 1, "{r:?}");
            assert!(r[0].contains(word), "{r:?}");
        };
        one(|o| o.withdrawals_all_seen = false, "withdrawn");
        one(|o| o.filters_never_kill = false, "SIGSYS");
        one(|o| o.all_processes_gone = false, "outlived");
        one(|o| o.listener_error = Some("EIO".into()), "listener failed");
        one(|o| o.blocked_total = 6, "add up");
    }

    #[test]
    fn proc_status_lines_are_read_and_compared() {
        let status = |mode: &str, filters: Option<&str>| {
            let mut s = format!("Name:\tkolm-enclave\nNoNewPrivs:\t1\nSeccomp:\t{mode}\n");
            if let Some(f) = filters {
                s.push_str(&format!("Seccomp_filters:\t{f}\n"));
            }
            s.push_str("Speculation_Store_Bypass:\tthread vulnerable\n");
            SeccompStatus::parse(&s)
        };
        let own = status("0", Some("0"));
        assert_eq!(
            own,
            SeccompStatus {
                mode: Some(0),
                filters: Some(0)
            }
        );
        // A supervisor that itself runs under one filter (a container's).
        let own_filtered = status("2", Some("1"));
        let cases = [
            (own, status("2", Some("3")), true),
            (own_filtered, status("2", Some("4")), true),
            (own_filtered, status("2", Some("3")), false),
            (own, status("2", Some("2")), false),
            (own, status("2", Some("4")), false),
            (own, status("0", Some("3")), false),
            (own, status("1", Some("3")), false),
            (own, status("x", Some("3")), false),
            // Before Linux 5.9: no count on either side, mode only.
            (status("0", None), status("2", None), true),
            (status("0", None), status("0", None), false),
            (own, status("2", None), false),
            (own, status("2", Some("three")), false),
        ];
        for (i, (own, job, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                SeccompStatus::confirms(own, job, 3),
                want,
                "case {i}: {job:?}"
            );
        }
        assert_eq!(
            SeccompStatus::parse(""),
            SeccompStatus {
                mode: None,
                filters: None
            }
        );
        // A line that only starts with the name is not the field.
        assert_eq!(SeccompStatus::parse("Seccomp_x:\t2\n").mode, None);
    }
}
