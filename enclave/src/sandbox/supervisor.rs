//! The supervisor side: lease the run's ids, start stage 2 (as root: as the
//! init of a new PID namespace, from a thread that stays until the run
//! ends), take the seccomp listener, check with the kernel that the filters
//! are in place, answer and count every notification, wait for the job, kill
//! whatever of it is left, and write the record from what it observed
//! (`egress_blocked` included, see [`super::egress`]).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kolm_format::sandbox_record::{
    Counted, Exactness, FilterRecord, FilterSource, IpcNamespace, JobExit, JobIdOrigin,
    LandlockRecord, LandlockStatus, ListenerRecord, MemfdExec, PidNamespace, RECORD_SCHEMA_V1,
    SandboxProfile, SandboxRecord, family_name,
};

use super::counted::{FOREIGN_ABI, counted_syscall};
use super::egress::{self, SeccompStatus};
use super::ids::{self, Handover};
use super::protocol::{
    GO, JobEnded, MAX_MESSAGE, PROTOCOL, STOP, Stage2Config, Stage2Message, Stage2Report,
};
use super::sys::{self, NotifBuffers};
use super::{
    JobIds, LandlockMode, MAX_RELAYED_LINE, OutputMode, Profile, STAGE2_SUBCOMMAND, SandboxCommand,
    SandboxError, SandboxOutcome, filter,
};

/// How long stage 2 may take to set the sandbox up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long processes left under the filter after the job's exit (killed
/// with its process group) may take to go.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long the init of the job's PID namespace may take, after [`STOP`],
/// to kill and reap the namespace and report; then it is killed itself
/// (and the count is a lower bound).
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Stage 2 that is killed and reaped if the supervisor returns early.
struct Stage2Child {
    child: Child,
    reaped: bool,
}

impl Drop for Stage2Child {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = sys::kill(self.child.id() as i32, libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// The thread stage 2 was started from. A parent-death signal fires when
/// the creating *thread* ends, and the thread that made the PID namespace
/// can start no threads of its own, so it stays, parked, until the run is
/// over (dropping this ends it, after stage 2 was reaped: `Stage2Child` is
/// declared after it and dropped first).
struct ParentThread {
    done: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for ParentThread {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What the parent thread reports back.
type Spawned = (
    std::io::Result<Child>,
    PidNamespace,
    std::io::Result<SeccompStatus>,
);

/// Starts stage 2 from a dedicated thread; as root, that thread first
/// makes a new PID namespace, so stage 2 (and with it the job) is its init.
/// Returns the child, the record's `pid_namespace` and the seccomp status of
/// the thread that started it (which stage 2 inherited).
fn spawn_stage2(
    exe: &Path,
    theirs: OwnedFd,
    new_pid_namespace: bool,
) -> Result<(Child, PidNamespace, SeccompStatus, ParentThread), SandboxError> {
    let (tx, rx) = mpsc::channel::<Spawned>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let exe_owned = exe.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("kolm-stage2-parent".into())
        .spawn(move || {
            let own = seccomp_status("/proc/thread-self/status");
            let pid_namespace = if !new_pid_namespace {
                PidNamespace::Shared("needs root".to_string())
            } else {
                match sys::unshare(libc::CLONE_NEWPID) {
                    Ok(()) => PidNamespace::Private,
                    Err(e) => PidNamespace::Shared(format!("unshare(CLONE_NEWPID): {e}")),
                }
            };
            let child = Command::new(&exe_owned)
                .arg(STAGE2_SUBCOMMAND)
                .env_clear()
                .stdin(Stdio::from(theirs))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            let _ = tx.send((child, pid_namespace, own));
            // Until the run is over (the sender is dropped).
            let _ = done_rx.recv();
        })
        .map_err(|e| SandboxError::Io {
            what: "starting the stage-2 parent thread",
            error: e,
        })?;
    let parent = ParentThread {
        done: Some(done_tx),
        handle: Some(handle),
    };
    let (child, pid_namespace, own) = rx
        .recv()
        .map_err(|_| SandboxError::Protocol("the stage-2 parent thread ended".into()))?;
    let child = child.map_err(|e| SandboxError::Spawn {
        exe: exe.display().to_string(),
        error: e,
    })?;
    let own = own.map_err(|e| SandboxError::Io {
        what: "reading /proc/thread-self/status",
        error: e,
    })?;
    Ok((child, pid_namespace, own, parent))
}

/// Gives the read-write trees back to their owners when dropped: after
/// `Stage2Child` (declared later, dropped earlier) has killed and reaped
/// stage 2, so no job process is left to race the walk.
struct HandoverGuard(Option<Handover>);

impl Drop for HandoverGuard {
    fn drop(&mut self) {
        if let Some(h) = self.0.take()
            && let Err(e) = h.give_back()
        {
            tracing::warn!(error = %e, "giving the read-write trees back to their owners");
        }
    }
}

/// Trees a job may never be given: they hold the host's sockets, devices or
/// every process, which the private root exists to hide.
const REFUSED_TREES: [&str; 8] = [
    "/", "/proc", "/sys", "/dev", "/run", "/var/run", "/tmp", "/var/tmp",
];

fn canonical(p: &Path, what: &str) -> Result<PathBuf, SandboxError> {
    let c = std::fs::canonicalize(p)
        .map_err(|e| SandboxError::Config(format!("{what} {}: {e}", p.display())))?;
    if REFUSED_TREES.iter().any(|r| c == Path::new(r)) && what != "program" {
        return Err(SandboxError::Config(format!(
            "{what} {} is {}, which holds the host's sockets, devices or processes; \
             give the job a directory of its own",
            p.display(),
            c.display()
        )));
    }
    Ok(c)
}

/// Processes whose real uid is `uid`, with their parent pid.
fn processes_of(uid: u32) -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<i64>().ok())
        };
        if field("Uid:") == Some(i64::from(uid)) {
            out.push((pid, field("PPid:").unwrap_or(0) as i32));
        }
    }
    out
}

/// Kills every process of the run's own uid (leased for this run alone, so
/// they are all the job's) and reaps those adopted by this process (the
/// supervisor is a child subreaper). With a PID namespace nothing is left
/// by now; this holds the line where there is none. True when none is left.
fn sweep_uid(uid: u32) -> bool {
    let me = std::process::id() as i32;
    for _ in 0..100 {
        let left = processes_of(uid);
        if left.is_empty() {
            return true;
        }
        for (pid, ppid) in left {
            let _ = sys::kill(pid, libc::SIGKILL);
            if ppid == me {
                let _ = sys::reap(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    processes_of(uid).is_empty()
}

/// An I/O failure of the supervisor, naming what it was doing.
fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e: std::io::Error| SandboxError::Io { what, error: e }
}

/// Runs `cmd` under the sandbox and returns its record.
pub(super) fn run(cmd: &SandboxCommand) -> Result<SandboxOutcome, SandboxError> {
    // Refuse an architecture without filters before anything starts.
    filter::for_profile(cmd.profile, filter::Extra::default())?;
    let filter_source = filter_source()?;
    let root = sys::geteuid() == 0;
    become_subreaper();
    let JobIdChoice {
        ids,
        origin: job_ids,
        lease,
    } = job_ids(cmd, root)?;
    let paths = Paths::of(cmd)?;
    // Declared before stage 2 and its parent thread: dropped after them.
    let _handover = hand_over_trees(&paths, ids)?;

    let (control, theirs) = sys::seqpacket_pair().map_err(io("control socket"))?;
    let (child, pid_namespace, own_seccomp, _parent) =
        spawn_stage2(&cmd.runtime_exe, theirs, root)?;
    // The Command (and with it our copy of stage 2's end) is gone here, so
    // end-of-file on `control` means stage 2 exited or exec'ed.
    let mut child = Stage2Child {
        child,
        reaped: false,
    };
    let pid = child.child.id();
    let stdout = child
        .child
        .stdout
        .take()
        .map(|s| relay(s, cmd.stdout.clone(), false));
    let stderr = child
        .child
        .stderr
        .take()
        .map(|s| relay(s, cmd.stderr.clone(), true));

    // 1. Config. In a PID namespace of its own, stage 2 stays as the job's
    // init and brackets the run with the sentinel calls (`init.rs`).
    let init_mode = pid_namespace == PidNamespace::Private;
    let config = stage2_config(cmd, &paths, ids, job_ids, pid_namespace)?;
    let bytes = serde_json::to_vec(&config).map_err(|e| SandboxError::Protocol(e.to_string()))?;
    sys::send_msg(control.as_fd(), &bytes, None).map_err(io("sending the stage-2 config"))?;

    // 2. Report + listener, and the filters they show.
    let (report, listener) = receive_report(&control, &mut child, cmd)?;
    let expected = check_reported_filters(cmd, &report, pid, own_seccomp)?;

    // 3. The notification loop, then the go-ahead.
    let sync_wakeup = sys::set_sync_wakeup(listener.as_fd()).is_ok();
    let (notifier, stop_tx) = start_notifier(listener, pid, init_mode)?;
    sys::send_msg(control.as_fd(), GO, None).map_err(io("sending the go-ahead"))?;

    // 4. Exec result (and, as init, Landlock as the job enforced it).
    let (report, exec_error) = receive_exec_result(&control, init_mode, report)?;

    // 5. Wait for the job, end what is left of it.
    let (status, timed_out) = wait_for_job(cmd, control, &mut child, init_mode)?;
    // Whatever still runs as the run's own uid is the job's: kill it.
    if let Some(lease) = &lease
        && !sweep_uid(lease.id)
    {
        tracing::warn!("processes of the run's uid survived SIGKILL");
    }

    // 6. Let the notifier drain what is left, then stop it.
    drop(stop_tx);
    let stats = notifier
        .join()
        .map_err(|_| SandboxError::Protocol("notification thread panicked".into()))?;
    let (stdout, stderr) = if stats.all_gone {
        (join_relay(stdout), join_relay(stderr))
    } else {
        // Something under the filter outlived the job and may hold the
        // pipes; do not wait for it.
        (Vec::new(), Vec::new())
    };

    let record = build_record(RunFacts {
        profile: cmd.profile,
        filters_never_kill: expected.never_kill,
        expected: expected.records,
        report,
        // Checked above: a mismatch stops the run before the go-ahead.
        kernel_confirmed_filters: true,
        exec_error,
        status,
        stats,
        sync_wakeup,
        filter_source,
    });
    Ok(SandboxOutcome {
        all_processes_gone: record.listener.all_processes_gone,
        record,
        status,
        timed_out,
        stdout,
        stderr,
    })
}

/// Orphaned job processes come to us, not to the host's init, where they
/// would be out of sight (without a PID namespace).
fn become_subreaper() {
    static SUBREAPER: std::sync::Once = std::sync::Once::new();
    SUBREAPER.call_once(|| {
        if let Err(e) = sys::set_child_subreaper() {
            tracing::warn!(error = %e, "PR_SET_CHILD_SUBREAPER");
        }
    });
}

/// The ids the job runs as, where they came from (the record's
/// `isolation.job_ids`), and the lease that holds them for this run alone.
struct JobIdChoice {
    ids: Option<(u32, u32)>,
    origin: JobIdOrigin,
    lease: Option<ids::Lease>,
}

fn job_ids(cmd: &SandboxCommand, root: bool) -> Result<JobIdChoice, SandboxError> {
    let (ids, origin, lease) = match cmd.job_ids {
        JobIds::Auto if root => {
            let lease = ids::lease()?;
            (Some((lease.id, lease.id)), JobIdOrigin::PerRun, Some(lease))
        }
        JobIds::Auto | JobIds::Inherit => (None, JobIdOrigin::Inherited, None),
        JobIds::Fixed(uid, gid) => (Some((uid, gid)), JobIdOrigin::Fixed, None),
    };
    Ok(JobIdChoice { ids, origin, lease })
}

/// Hands the read-write trees to the job's ids for the run (back to their
/// owners when the guard drops).
fn hand_over_trees(paths: &Paths, ids: Option<(u32, u32)>) -> Result<HandoverGuard, SandboxError> {
    Ok(HandoverGuard(match ids {
        Some((uid, gid)) => Some(
            Handover::give(&paths.read_write, uid, gid)
                .map_err(io("handing the read-write trees to the job's ids"))?,
        ),
        None => None,
    }))
}

/// Stage 2's report and the seccomp listener that comes with it, received
/// within [`SETUP_TIMEOUT`].
fn receive_report(
    control: &OwnedFd,
    child: &mut Stage2Child,
    cmd: &SandboxCommand,
) -> Result<(Stage2Report, OwnedFd), SandboxError> {
    let ready = sys::poll(&[(control.as_fd(), libc::POLLIN)], Some(SETUP_TIMEOUT))
        .map_err(io("waiting for stage 2"))?;
    if ready.first().is_none_or(|r| *r == 0) {
        return Err(SandboxError::Protocol(format!(
            "stage 2 did not report within {SETUP_TIMEOUT:?}"
        )));
    }
    let (msg, listener) =
        sys::recv_msg(control.as_fd(), MAX_MESSAGE).map_err(io("reading the stage-2 report"))?;
    if msg.is_empty() {
        let status = child.child.wait().map_err(io("waiting for stage 2"))?;
        child.reaped = true;
        return Err(SandboxError::Protocol(format!(
            "stage 2 exited ({status}) before reporting; is {} a kolm-enclave binary of this version?",
            cmd.runtime_exe.display()
        )));
    }
    let report = match serde_json::from_slice::<Stage2Message>(&msg)
        .map_err(|e| SandboxError::Protocol(format!("stage-2 report: {e}")))?
    {
        Stage2Message::Ready(r) => *r,
        Stage2Message::SetupFailed(m) => return Err(SandboxError::Setup(m)),
        Stage2Message::ExecFailed(m) => {
            return Err(SandboxError::Protocol(format!("exec before go-ahead: {m}")));
        }
        other @ (Stage2Message::Landlock(_) | Stage2Message::Started | Stage2Message::Ended(_)) => {
            return Err(SandboxError::Protocol(format!(
                "stage 2 sent {other:?} before the go-ahead"
            )));
        }
    };
    let listener = listener
        .ok_or_else(|| SandboxError::Protocol("no listener came with the report".into()))?;
    Ok((report, listener))
}

/// The filters this run must have, as compiled into this binary.
struct ExpectedFilters {
    records: Vec<FilterRecord>,
    /// No filter kills or traps ([`filter::Filter::kills`]).
    never_kill: bool,
}

/// The filters this run must have (the profile's, and a deny filter for
/// each isolation stage 2 could not set up) are exactly those stage 2
/// reported, and the kernel shows them on the process that becomes the
/// job (stage 2 waits for the go-ahead, its filters cannot be removed):
/// filter mode, and exactly the reported filters on top of ours.
fn check_reported_filters(
    cmd: &SandboxCommand,
    report: &Stage2Report,
    pid: u32,
    own_seccomp: SeccompStatus,
) -> Result<ExpectedFilters, SandboxError> {
    let isolation = report
        .hygiene
        .isolation
        .as_ref()
        .ok_or_else(|| SandboxError::Protocol("stage 2 reported no isolation record".into()))?;
    let extra = filter::Extra {
        deny_sysv_ipc: isolation.ipc_namespace != IpcNamespace::Private,
        deny_memfd: isolation.memfd_exec != MemfdExec::NoexecSeal,
    };
    let compiled = filter::for_profile(cmd.profile, extra)?;
    let never_kill = !compiled.iter().any(filter::Filter::kills);
    let expected: Vec<FilterRecord> = compiled.iter().map(filter::Filter::record).collect();
    if report.filters != expected {
        let shas = |f: &[FilterRecord]| f.iter().map(|f| f.sha256.clone()).collect::<Vec<_>>();
        return Err(SandboxError::Protocol(format!(
            "stage 2 installed filters {:?}, expected {:?} (stale runtime binary {}?)",
            shas(&report.filters),
            shas(&expected),
            cmd.runtime_exe.display()
        )));
    }
    let stage2_seccomp = seccomp_status(&format!("/proc/{pid}/status"))
        .map_err(io("reading stage 2's /proc status"))?;
    if !SeccompStatus::confirms(own_seccomp, stage2_seccomp, report.filters.len()) {
        return Err(SandboxError::Protocol(format!(
            "the kernel reports {stage2_seccomp:?} for stage 2 and {own_seccomp:?} for the \
             supervisor, not the {} filters stage 2 reported",
            report.filters.len()
        )));
    }
    Ok(ExpectedFilters {
        records: expected,
        never_kill,
    })
}

/// Starts the notification loop on `listener`; it stops (after draining)
/// when the returned pipe end is dropped.
fn start_notifier(
    listener: OwnedFd,
    pid: u32,
    init_mode: bool,
) -> Result<(JoinHandle<NotifyStats>, std::io::PipeWriter), SandboxError> {
    let (stop_rx, stop_tx) = std::io::pipe().map_err(io("stop pipe"))?;
    let sentinel_pid = init_mode.then_some(pid);
    let notifier = std::thread::Builder::new()
        .name("kolm-seccomp-notify".into())
        .spawn(move || {
            notify_loop(
                listener,
                OwnedFd::from(stop_rx),
                pid as i32,
                sentinel_pid,
                DRAIN_GRACE,
            )
        })
        .map_err(io("starting the notification thread"))?;
    Ok((notifier, stop_tx))
}

/// After the go-ahead: end-of-file (exec'ed), or ExecFailed; as init,
/// Landlock as the job's own process enforced it (into `report`), then
/// Started or ExecFailed. Returns the report and the exec error, if any.
fn receive_exec_result(
    control: &OwnedFd,
    init_mode: bool,
    mut report: Stage2Report,
) -> Result<(Stage2Report, Option<String>), SandboxError> {
    let (mut msg, _) =
        sys::recv_msg(control.as_fd(), MAX_MESSAGE).map_err(io("reading exec result"))?;
    if init_mode {
        // Landlock as the job's own process enforced it comes first.
        report.landlock = match serde_json::from_slice::<Stage2Message>(&msg) {
            Ok(Stage2Message::Landlock(l)) => {
                msg = sys::recv_msg(control.as_fd(), MAX_MESSAGE)
                    .map_err(io("reading exec result"))?
                    .0;
                l
            }
            _ => LandlockRecord {
                abi: report.landlock.abi,
                status: LandlockStatus::Error("the init reported no Landlock status".to_string()),
            },
        };
    }
    let exec_error = match (msg.is_empty(), init_mode) {
        (true, false) => None,
        (true, true) => Some("stage 2 ended before the job started".to_string()),
        (false, _) => match serde_json::from_slice::<Stage2Message>(&msg) {
            Ok(Stage2Message::Started) if init_mode => None,
            Ok(Stage2Message::ExecFailed(m)) => Some(m),
            Ok(other) => Some(format!("unexpected stage-2 message {other:?}")),
            Err(e) => Some(format!("unreadable stage-2 message: {e}")),
        },
    };
    Ok((report, exec_error))
}

/// Waits for the job (with the caller's deadline). As init, stage 2 exits
/// once the job and everything else in its namespace is gone; at the
/// deadline it is told to end them. Then kills what is left of its process
/// group while the group id is still held by the zombie, and reaps it.
/// Returns the job's wait status and whether the deadline passed; the
/// control socket is closed on return.
fn wait_for_job(
    cmd: &SandboxCommand,
    control: OwnedFd,
    child: &mut Stage2Child,
    init_mode: bool,
) -> Result<(ExitStatus, bool), SandboxError> {
    let pid = child.child.id();
    let pidfd = sys::pidfd_open(pid).map_err(io("pidfd_open"))?;
    let mut waits = vec![(pidfd.as_fd(), libc::POLLIN)];
    if let Some(c) = &cmd.cancel {
        // A cancel is a pipe whose writer closed: POLLHUP.
        waits.push((c.fd(), libc::POLLIN | libc::POLLHUP));
    }
    let exited = sys::poll(&waits, cmd.timeout).map_err(io("waiting for the job"))?;
    let timed_out = exited.first().is_none_or(|r| *r == 0);
    if timed_out && init_mode && sys::send_msg(control.as_fd(), STOP, None).is_ok() {
        let _ = sys::poll(&[(pidfd.as_fd(), libc::POLLIN)], Some(STOP_GRACE));
    }
    // Stage 2 (the job, or its init) is the init of its PID namespace (as
    // root): killing it kills every process in the namespace, `setsid()`
    // or not. Its group too, for runs without a PID namespace.
    let _ = sys::kill(pid as i32, libc::SIGKILL);
    let _ = sys::kill(-(pid as i32), libc::SIGKILL);
    let stage2_status: ExitStatus = child.child.wait().map_err(io("waiting for the job"))?;
    child.reaped = true;
    // The init's report, sent before it exited (it held the only other
    // end, so this cannot block).
    let ended = if init_mode {
        read_ended(&control)
    } else {
        None
    };
    drop(control);
    let status = match &ended {
        Some(e) => ExitStatus::from_raw(e.wait_status),
        None => stage2_status,
    };
    Ok((status, timed_out))
}

/// The init's [`Stage2Message::Ended`], if it sent one before it exited.
fn read_ended(control: &OwnedFd) -> Option<JobEnded> {
    let (msg, _) = sys::recv_msg(control.as_fd(), MAX_MESSAGE).ok()?;
    match serde_json::from_slice::<Stage2Message>(&msg) {
        Ok(Stage2Message::Ended(e)) => Some(e),
        _ => None,
    }
}

/// The seccomp lines of a `/proc` status file.
fn seccomp_status(path: &str) -> std::io::Result<SeccompStatus> {
    std::fs::read_to_string(path).map(|s| SeccompStatus::parse(&s))
}

/// Everything the supervisor observed in one run that the record is made
/// of.
#[derive(Debug)]
struct RunFacts {
    profile: Profile,
    /// The profile's filters as compiled into this binary.
    expected: Vec<FilterRecord>,
    /// Stage 2's report, received before the go-ahead.
    report: Stage2Report,
    /// `/proc/<pid>/status` of stage 2 matched the report before the
    /// go-ahead ([`SeccompStatus::confirms`]).
    kernel_confirmed_filters: bool,
    /// Stage 2's exec failure, if it reported one.
    exec_error: Option<String>,
    /// The job process's wait status.
    status: ExitStatus,
    stats: NotifyStats,
    sync_wakeup: bool,
    /// No installed filter kills or traps ([`filter::Filter::kills`]).
    filters_never_kill: bool,
    /// The policy document the filters were compiled from.
    filter_source: FilterSource,
}

/// The record's `profile`.
fn record_profile(profile: Profile) -> SandboxProfile {
    match profile {
        Profile::Default => SandboxProfile::Default,
        Profile::Strict => SandboxProfile::Strict,
    }
}

/// The record's `filter_source`: the policy document this binary's filters
/// were compiled from, as the build names it (none on an architecture
/// without filters, where the sandbox refuses to start).
fn filter_source() -> Result<FilterSource, SandboxError> {
    FilterSource::from_spelling(filter::source_file())
        .ok_or(filter::FilterError::UnsupportedArch(std::env::consts::ARCH))
        .map_err(SandboxError::from)
}

/// The record of one run, made only of what the supervisor observed;
/// `egress_blocked` is [`egress::egress_blocked`] of those observations.
fn build_record(facts: RunFacts) -> SandboxRecord {
    let RunFacts {
        profile,
        expected,
        report,
        kernel_confirmed_filters,
        exec_error,
        status,
        stats,
        sync_wakeup,
        filters_never_kill,
        filter_source,
    } = facts;
    let sigsys_kills =
        u64::from(status.signal() == Some(libc::SIGSYS)).saturating_add(stats.descendant_sigsys);
    let blocked_total = stats
        .counted
        .total()
        .saturating_add(stats.withdrawn)
        .saturating_add(sigsys_kills);
    let observed = egress::Observed {
        installed: &report.filters,
        expected: &expected,
        kernel_confirmed_filters,
        stage2_single_threaded: report.hygiene.stage2_single_threaded,
        job_started: exec_error.is_none(),
        listener_error: stats.error.as_deref(),
        all_processes_gone: stats.all_gone,
        withdrawn_before_read: stats.withdrawn,
        notifications: stats.notifications,
        counted: &stats.counted,
        job_signal: status.signal(),
        descendant_sigsys: stats.descendant_sigsys,
        sigsys_kills,
        blocked_total,
        // Withdrawn before the first or after the last one read leave no
        // gap: exact only when the sentinels were those two.
        withdrawals_all_seen: stats.sentinels.bracket(),
        filters_never_kill,
    };
    let egress_blocked = egress::egress_blocked(&observed);
    let exactness = Exactness::from_reasons(egress::lower_bound_reasons(&observed));
    if let Err(why) = egress::check(&observed) {
        // Public: names a condition, never job data.
        tracing::warn!(%why, "sandbox record: egress_blocked is false");
    }
    SandboxRecord {
        schema: RECORD_SCHEMA_V1.to_string(),
        profile: record_profile(profile),
        blocked_total,
        egress_blocked,
        counted: stats.counted,
        sigsys_kills,
        exactness,
        exit: JobExit {
            code: status.code(),
            signal: status.signal(),
            exec_error,
        },
        filters: report.filters,
        filter_source,
        landlock: report.landlock,
        listener: ListenerRecord {
            alive_whole_run: stats.error.is_none(),
            notifications: stats.notifications,
            replies_to_departed: stats.replies_to_departed,
            withdrawn_before_read: stats.withdrawn,
            sync_wakeup,
            all_processes_gone: stats.all_gone,
            error: stats.error,
        },
        hygiene: report.hygiene,
    }
}

/// The run's paths, canonical (no links, absolute): what stage 2 binds into
/// the job's root and gives Landlock.
struct Paths {
    program: PathBuf,
    read_only: Vec<PathBuf>,
    read_write: Vec<PathBuf>,
    library_dirs: Vec<PathBuf>,
}

impl Paths {
    /// `cmd`'s paths, canonical, none of them a tree that holds the host's
    /// sockets, devices or processes ([`REFUSED_TREES`]).
    fn of(cmd: &SandboxCommand) -> Result<Paths, SandboxError> {
        let all = |list: &[PathBuf], what: &str| -> Result<Vec<PathBuf>, SandboxError> {
            list.iter().map(|p| canonical(p, what)).collect()
        };
        Ok(Paths {
            program: canonical(&cmd.program, "program")?,
            read_only: all(&cmd.read_only, "read-only tree")?,
            read_write: all(&cmd.read_write, "read-write tree")?,
            library_dirs: all(&cmd.library_dirs, "library directory")?,
        })
    }
}

fn stage2_config(
    cmd: &SandboxCommand,
    paths: &Paths,
    ids: Option<(u32, u32)>,
    job_ids: JobIdOrigin,
    pid_namespace: PidNamespace,
) -> Result<Stage2Config, SandboxError> {
    let bytes = |p: &std::path::Path| p.as_os_str().as_bytes().to_vec();
    let mut argv = vec![bytes(&cmd.program)];
    argv.extend(cmd.args.iter().map(|a| a.as_bytes().to_vec()));
    let env = cmd
        .env
        .iter()
        .map(|(k, v)| {
            if k.as_bytes().contains(&b'=') || k.is_empty() {
                return Err(SandboxError::Config(format!(
                    "environment name {k:?} is empty or contains '='"
                )));
            }
            let mut e = k.as_bytes().to_vec();
            e.push(b'=');
            e.extend_from_slice(v.as_bytes());
            Ok(e)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = match &cmd.cwd {
        Some(c) => canonical(c, "working directory")?,
        None => paths
            .read_write
            .first()
            .cloned()
            .unwrap_or_else(|| "/".into()),
    };
    Ok(Stage2Config {
        protocol: PROTOCOL,
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        supervisor_pid: std::process::id(),
        profile: cmd.profile,
        program: bytes(&paths.program),
        argv,
        env,
        cwd: bytes(&cwd),
        read_only: paths.read_only.iter().map(|p| bytes(p)).collect(),
        read_write: paths.read_write.iter().map(|p| bytes(p)).collect(),
        library_dirs: paths.library_dirs.iter().map(|p| bytes(p)).collect(),
        landlock: cmd.landlock == LandlockMode::BestEffort,
        ids,
        job_ids,
        network_namespace: cmd.network_namespace,
        pid_namespace,
    })
}

/// Copies a job pipe to our own stdout/stderr, into a capped buffer, to a
/// line receiver, or nowhere.
fn relay<R: Read + Send + 'static>(
    mut pipe: R,
    mode: OutputMode,
    is_stderr: bool,
) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut lines = LineSplitter::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = buf.get(..n).unwrap_or_default();
            match &mode {
                OutputMode::Inherit => {
                    let _ = if is_stderr {
                        std::io::stderr().write_all(chunk)
                    } else {
                        std::io::stdout().write_all(chunk)
                    };
                }
                OutputMode::Capture { limit } => {
                    let room = limit.saturating_sub(kept.len());
                    kept.extend_from_slice(chunk.get(..n.min(room)).unwrap_or_default());
                }
                OutputMode::Discard => {}
                OutputMode::Lines(tx) => lines.feed(chunk, |line| {
                    // The receiver may be gone: the pipe is still drained.
                    let _ = tx.send(line);
                }),
            }
        }
        if matches!(mode, OutputMode::Inherit) {
            let _ = std::io::stdout().flush();
        }
        kept
    })
}

/// Cuts a byte stream into lines of at most [`MAX_RELAYED_LINE`] bytes of
/// UTF-8; a longer or non-UTF-8 line is dropped whole, and so is a last
/// line without its newline (the job may have been cut off mid-line).
#[derive(Debug, Default)]
struct LineSplitter {
    line: Vec<u8>,
    /// The current line passed the cap: dropped up to its newline.
    overlong: bool,
}

impl LineSplitter {
    fn feed(&mut self, mut chunk: &[u8], mut out: impl FnMut(String)) {
        while !chunk.is_empty() {
            let (part, rest, ended) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (
                    chunk.get(..i).unwrap_or_default(),
                    chunk.get(i.saturating_add(1)..).unwrap_or_default(),
                    true,
                ),
                None => (chunk, &[][..], false),
            };
            chunk = rest;
            if !self.overlong {
                if self.line.len().saturating_add(part.len()) > MAX_RELAYED_LINE {
                    self.overlong = true;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if ended {
                let line = std::mem::take(&mut self.line);
                let overlong = std::mem::take(&mut self.overlong);
                if let (false, Ok(text)) = (overlong, String::from_utf8(line)) {
                    out(text);
                }
            }
        }
    }
}

fn join_relay(h: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    h.and_then(|h| h.join().ok()).unwrap_or_default()
}

/// What the notification loop saw.
#[derive(Debug, Default)]
struct NotifyStats {
    counted: Counted,
    notifications: u64,
    replies_to_departed: u64,
    /// Notifications withdrawn before they were read, as far as seen
    /// ([`Withdrawals`]).
    withdrawn: u64,
    all_gone: bool,
    error: Option<String>,
    /// Descendants of the job killed by a filter with SIGSYS: none can be
    /// (no installed filter kills, [`filter::Filter::kills`]), so 0; a
    /// SIGSYS a job process sends another is not a blocked call.
    descendant_sigsys: u64,
    sentinels: Sentinels,
}

/// The sentinel calls of the job's init (`init.rs`): recognised by its pid,
/// answered, never counted. The count's edges are fixed when the first
/// notification read was the start sentinel and the last one the end
/// sentinel.
#[derive(Debug, Default)]
struct Sentinels {
    /// Sentinel calls read.
    seen: u64,
    /// The first notification read was a sentinel call.
    first: bool,
    /// The last notification read was the second sentinel call.
    last: bool,
}

impl Sentinels {
    /// Notes one notification read; true if it is a sentinel call.
    fn read(&mut self, from_init: bool, first_read: bool) -> bool {
        if from_init {
            self.seen = self.seen.saturating_add(1);
        }
        if first_read {
            self.first = from_init;
        }
        self.last = from_init && self.seen == 2;
        from_init
    }

    /// Both edges were seen in place.
    fn bracket(&self) -> bool {
        self.first && self.last && self.seen == 2
    }
}

/// Notifications the kernel withdrew before the supervisor read them: a
/// signal interrupted the waiting call (the job sees `EINTR`, or the call
/// restarts and notifies again) or its thread was killed.
///
/// The kernel numbers a listener's notifications one after another
/// (`next_id++`, from a random start) and hands them out in that order, so
/// every number skipped between two notifications read is one withdrawn.
/// Withdrawn before the first one read or after the last one read leave no
/// gap; of those, only the ones the supervisor happened to try to receive
/// (`ENOENT`) are seen.
#[derive(Debug, Default)]
struct Withdrawals {
    last_id: Option<u64>,
    /// Gaps between ids read, plus `ENOENT`s before the first read.
    counted: u64,
    /// `ENOENT`s since the last read: their ids lie above it, in the next
    /// gap if another is read, else uncounted otherwise.
    enoent_since_read: u64,
}

impl Withdrawals {
    fn read(&mut self, id: u64) {
        match self.last_id {
            Some(last) => {
                // Ids only grow (modulo 2^64), one per notification.
                let gap = id.wrapping_sub(last).wrapping_sub(1);
                self.counted = self.counted.saturating_add(gap);
            }
            None => self.counted = self.counted.saturating_add(self.enoent_since_read),
        }
        self.enoent_since_read = 0;
        self.last_id = Some(id);
    }

    fn enoent(&mut self) {
        self.enoent_since_read = self.enoent_since_read.saturating_add(1);
    }

    fn total(&self) -> u64 {
        self.counted.saturating_add(self.enoent_since_read)
    }
}

/// Fixed slots for the counted system calls, so the hot path does no map
/// lookups by string.
struct Counters {
    syscalls: Vec<(i32, &'static str, i32, u64)>,
    foreign_abi: u64,
    families: BTreeMap<u32, u64>,
    other: BTreeMap<i32, u64>,
}

impl Counters {
    fn new() -> Counters {
        let nrs = [
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ];
        let syscalls = nrs
            .iter()
            .filter_map(|&nr| {
                let nr = i32::try_from(nr).ok()?;
                counted_syscall(nr).map(|(name, errno)| (nr, name, errno, 0))
            })
            .collect();
        Counters {
            syscalls,
            foreign_abi: 0,
            families: BTreeMap::new(),
            other: BTreeMap::new(),
        }
    }

    /// Counts one notification; returns the errno to answer with.
    fn count(&mut self, arch: u32, nr: i32, args: &[u64; 6]) -> i32 {
        if arch != filter::AUDIT_ARCH_NATIVE {
            self.foreign_abi = self.foreign_abi.saturating_add(1);
            return FOREIGN_ABI.1;
        }
        for slot in &mut self.syscalls {
            if slot.0 == nr {
                slot.3 = slot.3.saturating_add(1);
                if nr as libc::c_long == libc::SYS_socket
                    || nr as libc::c_long == libc::SYS_socketpair
                {
                    // The kernel reads `int family`: low 32 bits.
                    let family = args[0] as u32;
                    let c = self.families.entry(family).or_default();
                    *c = c.saturating_add(1);
                }
                return slot.2;
            }
        }
        // Not in the policy file's counted set: cannot happen with the
        // compiled filters; count it by number and refuse it.
        let c = self.other.entry(nr).or_default();
        *c = c.saturating_add(1);
        libc::ENOSYS
    }

    fn into_counted(self) -> Counted {
        let mut by_syscall: BTreeMap<String, u64> = self
            .syscalls
            .iter()
            .filter(|s| s.3 > 0)
            .map(|s| (s.1.to_string(), s.3))
            .collect();
        for (nr, n) in self.other {
            by_syscall.insert(format!("nr_{nr}"), n);
        }
        if self.foreign_abi > 0 {
            by_syscall.insert(FOREIGN_ABI.0.to_string(), self.foreign_abi);
        }
        let mut by_family = BTreeMap::new();
        for (f, n) in self.families {
            by_family.insert(family_name(f), n);
        }
        Counted {
            by_syscall,
            by_family,
        }
    }
}

/// Answers every notification with its errno and counts it, until the
/// listener reports no process left under the filter, or until
/// `drain_grace` ([`DRAIN_GRACE`]) after `stop` closes. On any listener
/// failure it kills the job's process group `pgid`: a job must not run on
/// uncounted.
fn notify_loop(
    listener: OwnedFd,
    stop: OwnedFd,
    pgid: i32,
    sentinel_pid: Option<u32>,
    drain_grace: Duration,
) -> NotifyStats {
    let mut stats = NotifyStats::default();
    let mut counters = Counters::new();
    let mut withdrawals = Withdrawals::default();
    let fail = |stats: &mut NotifyStats, msg: String| {
        // Never `kill(0)` or `kill(-1)`: our own group, or everything.
        if pgid > 1 {
            let _ = sys::kill(-pgid, libc::SIGKILL);
        }
        stats.error = Some(msg);
    };
    let mut bufs = match NotifBuffers::new() {
        Ok(b) => b,
        Err(e) => {
            fail(&mut stats, format!("SECCOMP_GET_NOTIF_SIZES: {e}"));
            stats.counted = counters.into_counted();
            return stats;
        }
    };
    let mut deadline: Option<Instant> = None;
    loop {
        let timeout = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                Some(left)
            }
            None => None,
        };
        let revents = if deadline.is_none() {
            sys::poll(
                &[
                    (listener.as_fd(), libc::POLLIN),
                    (stop.as_fd(), libc::POLLIN),
                ],
                timeout,
            )
        } else {
            sys::poll(&[(listener.as_fd(), libc::POLLIN)], timeout)
        };
        let revents = match revents {
            Ok(r) => r,
            Err(e) => {
                fail(&mut stats, format!("poll: {e}"));
                break;
            }
        };
        let l = revents.first().copied().unwrap_or(0);
        if l & libc::POLLIN != 0 {
            match bufs.recv(listener.as_fd()) {
                Ok(n) => {
                    let first_read = withdrawals.last_id.is_none();
                    withdrawals.read(n.id);
                    let from_init = sentinel_pid == Some(n.pid);
                    let errno = if stats.sentinels.read(from_init, first_read) {
                        libc::EACCES
                    } else {
                        stats.notifications = stats.notifications.saturating_add(1);
                        counters.count(n.arch, n.nr, &n.args)
                    };
                    match bufs.send_error(listener.as_fd(), n.id, errno) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                            stats.replies_to_departed = stats.replies_to_departed.saturating_add(1);
                        }
                        Err(e) => {
                            fail(&mut stats, format!("SECCOMP_IOCTL_NOTIF_SEND: {e}"));
                            break;
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => withdrawals.enoent(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    fail(&mut stats, format!("SECCOMP_IOCTL_NOTIF_RECV: {e}"));
                    break;
                }
            }
            continue;
        }
        if l & libc::POLLHUP != 0 {
            stats.all_gone = true;
            break;
        }
        if l & (libc::POLLERR | libc::POLLNVAL) != 0 {
            fail(&mut stats, format!("listener poll error {l:#x}"));
            break;
        }
        if deadline.is_none() && revents.get(1).copied().unwrap_or(0) != 0 {
            deadline = Some(Instant::now() + drain_grace);
        }
    }
    stats.counted = counters.into_counted();
    stats.withdrawn = withdrawals.total();
    stats
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use kolm_format::sandbox_record::{
        DeathSignal, HygieneRecord, IsolationRecord, LandlockRecord, MountNamespace,
        NetworkNamespace, X32SelfTest,
    };

    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |l| out.push(l));
        }
        out
    }

    #[test]
    fn lines_are_cut_at_newlines_across_reads_and_overlong_ones_are_dropped_whole() {
        assert_eq!(split(&[b"a\nb", b"c\n\nd"]), ["a", "bc", ""]);
        let long = vec![b'x'; MAX_RELAYED_LINE + 1];
        assert_eq!(split(&[&long, b"tail\nok\n"]), ["ok"]);
        let exact = vec![b'y'; MAX_RELAYED_LINE];
        assert_eq!(split(&[&exact[..10], &exact[10..], b"\n"]).len(), 1);
        // Not UTF-8: dropped; the next line is kept.
        assert_eq!(split(&[b"\xff\xfe\nfine\n"]), ["fine"]);
    }

    fn expected() -> Vec<FilterRecord> {
        filter::for_profile(Profile::Default, filter::Extra::default())
            .unwrap()
            .iter()
            .map(filter::Filter::record)
            .collect()
    }

    /// What stage 2 reports for a run as root with Landlock.
    fn report() -> Stage2Report {
        Stage2Report {
            filters: expected(),
            landlock: LandlockRecord {
                abi: 7,
                status: LandlockStatus::FullyEnforced,
            },
            hygiene: HygieneRecord {
                no_new_privs: true,
                fds_above_stderr_closed: true,
                parent_death_signal: DeathSignal::Sigkill,
                uid: Some(65_001),
                gid: Some(65_001),
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

    /// A loop that saw `sockets` AF_INET sockets and the last process go.
    fn stats(sockets: u64) -> NotifyStats {
        let mut counters = Counters::new();
        for _ in 0..sockets {
            let errno = counters.count(
                filter::AUDIT_ARCH_NATIVE,
                libc::SYS_socket as i32,
                &[2, 1, 0, 0, 0, 0],
            );
            assert_eq!(errno, libc::EACCES);
        }
        NotifyStats {
            counted: counters.into_counted(),
            notifications: sockets,
            all_gone: true,
            ..NotifyStats::default()
        }
    }

    fn facts(stats: NotifyStats, status: ExitStatus) -> RunFacts {
        RunFacts {
            profile: Profile::Default,
            expected: expected(),
            report: report(),
            kernel_confirmed_filters: true,
            exec_error: None,
            status,
            stats,
            sync_wakeup: true,
            filters_never_kill: false,
            filter_source: filter_source().unwrap(),
        }
    }

    #[test]
    fn withdrawn_notifications_are_the_gaps_between_ids_read() {
        let mut w = Withdrawals::default();
        // An ENOENT before anything was read: one withdrawn.
        w.enoent();
        w.read(u64::MAX - 1);
        assert_eq!(w.total(), 1);
        // Consecutive ids: nothing withdrawn; ids wrap at 2^64.
        w.read(u64::MAX);
        w.read(0);
        assert_eq!(w.total(), 1);
        // 1..=3 withdrawn; an ENOENT seen meanwhile is one of them.
        w.enoent();
        w.read(4);
        assert_eq!(w.total(), 4);
        // After the last read only the ENOENTs are seen.
        w.enoent();
        assert_eq!(w.total(), 5);
    }

    #[test]
    fn the_sentinels_fix_the_edges_only_as_first_and_last_read() {
        let run = |reads: &[bool]| {
            let mut s = Sentinels::default();
            for (i, &from_init) in reads.iter().enumerate() {
                s.read(from_init, i == 0);
            }
            s.bracket()
        };
        assert!(run(&[true, false, false, true]));
        assert!(run(&[true, true]));
        // Something read before the start or after the end sentinel.
        assert!(!run(&[false, true, false, true]));
        assert!(!run(&[true, false, true, false]));
        // An edge missing, or a third call from the init's pid.
        assert!(!run(&[true, false]));
        assert!(!run(&[false, true]));
        assert!(!run(&[true, false, true, true]));
    }

    /// The record as sealed and read back by the strict reader.
    fn reread(r: &SandboxRecord) -> SandboxRecord {
        SandboxRecord::from_json_bytes(&r.to_json_bytes().unwrap()).unwrap()
    }

    #[test]
    fn records_say_what_the_supervisor_observed() {
        struct Case {
            what: &'static str,
            change: fn(&mut RunFacts),
            egress_blocked: bool,
            blocked_total: u64,
        }
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        let cases = [
            Case {
                what: "three sockets, exit 0",
                change: |_| {},
                egress_blocked: true,
                blocked_total: 3,
            },
            Case {
                what: "killed by the architecture check",
                change: |f| f.status = ExitStatus::from_raw(libc::SIGSYS),
                egress_blocked: true,
                blocked_total: 4,
            },
            Case {
                what: "listener failed",
                change: |f| f.stats.error = Some("SECCOMP_IOCTL_NOTIF_SEND: EIO".into()),
                egress_blocked: false,
                blocked_total: 3,
            },
            Case {
                what: "a process outlived the listener",
                change: |f| f.stats.all_gone = false,
                egress_blocked: false,
                blocked_total: 3,
            },
            Case {
                // Its call was interrupted before it ran: blocked, counted.
                what: "a notification withdrawn unread",
                change: |f| f.stats.withdrawn = 1,
                egress_blocked: true,
                blocked_total: 4,
            },
            Case {
                what: "exec failed",
                change: |f| f.exec_error = Some("executing /x: EACCES".into()),
                egress_blocked: false,
                blocked_total: 3,
            },
            Case {
                what: "the kernel did not confirm the filters",
                change: |f| f.kernel_confirmed_filters = false,
                egress_blocked: false,
                blocked_total: 3,
            },
            Case {
                what: "stage 2 reported no deny filter",
                change: |f| {
                    f.report.filters.pop();
                },
                egress_blocked: false,
                blocked_total: 3,
            },
            Case {
                what: "stage 2 had threads",
                change: |f| f.report.hygiene.stage2_single_threaded = false,
                egress_blocked: false,
                blocked_total: 3,
            },
        ];
        for case in cases {
            let mut f = facts(stats(3), exited(0));
            (case.change)(&mut f);
            let error = f.stats.error.clone();
            let r = build_record(f);
            assert_eq!(r.egress_blocked, case.egress_blocked, "{}", case.what);
            assert_eq!(r.blocked_total, case.blocked_total, "{}", case.what);
            assert_eq!(r.listener.alive_whole_run, error.is_none(), "{}", case.what);
            assert_eq!(r.listener.error, error, "{}", case.what);
            assert_eq!(r.filter_source, filter::source_file(), "{}", case.what);
            // These facts have no sentinels and a killing filter.
            assert!(!r.exactness.is_exact(), "{}", case.what);
            // Whatever it says, the verifier's strict reader takes it.
            assert_eq!(reread(&r), r, "{}", case.what);
        }
    }

    /// Exact only with both sentinels in place and filters that never
    /// kill; each missing piece is named.
    #[test]
    fn the_count_is_exact_only_when_bracketed_and_nothing_kills() {
        let bracketed = || {
            let mut s = stats(3);
            s.sentinels = Sentinels {
                seen: 2,
                first: true,
                last: true,
            };
            s
        };
        let exact = |stats: NotifyStats, never_kill: bool| {
            let mut f = facts(stats, ExitStatus::from_raw(0));
            f.filters_never_kill = never_kill;
            let r = build_record(f);
            assert!(r.egress_blocked);
            (r.exactness.is_exact(), r.exactness.lower_bound_because)
        };
        assert_eq!(exact(bracketed(), true), (true, vec![]));
        let (e, why) = exact(bracketed(), false);
        assert!(!e && why.len() == 1 && why[0].contains("SIGSYS"), "{why:?}");
        let (e, why) = exact(stats(3), true);
        assert!(
            !e && why.len() == 1 && why[0].contains("sentinel"),
            "{why:?}"
        );
    }

    #[test]
    fn a_failing_listener_kills_the_job_group_and_the_record_says_so() {
        // A pipe with a byte in it stands in for the listener: poll says
        // readable and SECCOMP_IOCTL_NOTIF_RECV fails on it (ENOTTY), as on
        // a listener that broke.
        let (listener, mut writer) = std::io::pipe().unwrap();
        writer.write_all(b"x").unwrap();
        let (stop, _stop_writer) = std::io::pipe().unwrap();
        let mut job = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let start = Instant::now();
        let stats = notify_loop(
            OwnedFd::from(listener),
            OwnedFd::from(stop),
            job.id() as i32,
            None,
            Duration::from_millis(50),
        );
        let status = job.wait().unwrap();
        assert!(start.elapsed() < Duration::from_secs(20));
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "the job's group was killed"
        );
        let error = stats.error.clone().unwrap();
        assert!(error.starts_with("SECCOMP_IOCTL_NOTIF_RECV"), "{error}");
        let r = build_record(facts(stats, status));
        assert!(!r.egress_blocked);
        assert!(!r.listener.alive_whole_run);
        assert_eq!(r.listener.error, Some(error));
        assert_eq!(reread(&r), r);
    }

    #[test]
    fn the_loop_ends_on_hangup_or_gives_up_after_the_grace() {
        // Hang-up is how the listener says no process is left under the
        // filter. pgid 0: there is no group to kill (and none is killed).
        let (listener, writer) = std::io::pipe().unwrap();
        drop(writer);
        let (stop, _stop_writer) = std::io::pipe().unwrap();
        let grace = Duration::from_millis(50);
        let stats = notify_loop(OwnedFd::from(listener), OwnedFd::from(stop), 0, None, grace);
        assert!(stats.all_gone && stats.error.is_none(), "{stats:?}");
        let r = build_record(facts(stats, ExitStatus::from_raw(0)));
        assert!(r.egress_blocked);
        assert_eq!(r.blocked_total, 0);

        // Something still holds the listener's other end after the job
        // ended (stop closed): the loop stops counting after the grace.
        let (listener, _writer) = std::io::pipe().unwrap();
        let (stop, stop_writer) = std::io::pipe().unwrap();
        drop(stop_writer);
        let start = Instant::now();
        let stats = notify_loop(OwnedFd::from(listener), OwnedFd::from(stop), 0, None, grace);
        assert!(start.elapsed() >= grace);
        assert!(!stats.all_gone && stats.error.is_none(), "{stats:?}");
        let r = build_record(facts(stats, ExitStatus::from_raw(0)));
        assert!(!r.egress_blocked);
        assert!(r.listener.alive_whole_run);
        assert!(!r.listener.all_processes_gone);
    }
}
