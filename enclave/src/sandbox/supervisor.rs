//! The supervisor side: start stage 2, take the seccomp listener, answer and
//! count every notification, wait for the job, and write the record.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kolm_format::sandbox_record::{
    Counted, JobExit, ListenerRecord, RECORD_SCHEMA_V1, SandboxRecord, family_name,
};

use super::counted::counted_syscall;
use super::protocol::{GO, MAX_MESSAGE, PROTOCOL, Stage2Config, Stage2Message};
use super::sys::{self, NotifBuffers};
use super::{
    LandlockMode, OutputMode, STAGE2_SUBCOMMAND, SandboxCommand, SandboxError, SandboxOutcome,
    filter,
};

/// How long stage 2 may take to set the sandbox up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long processes left under the filter after the job's exit (killed
/// with its process group) may take to go.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

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

/// Runs `cmd` under the sandbox and returns its record.
pub(super) fn run(cmd: &SandboxCommand) -> Result<SandboxOutcome, SandboxError> {
    let io = |what: &'static str| move |e: std::io::Error| SandboxError::Io { what, source: e };
    let filters = filter::for_profile(cmd.profile)?;
    let expected: Vec<String> = filters.iter().map(|f| hex::encode(f.sha256())).collect();

    let (control, theirs) = sys::seqpacket_pair().map_err(io("control socket"))?;
    let child = Command::new(&cmd.runtime_exe)
        .arg(STAGE2_SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| SandboxError::Spawn {
            exe: cmd.runtime_exe.display().to_string(),
            source: e,
        })?;
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
        .map(|s| relay(s, cmd.stdout, false));
    let stderr = child
        .child
        .stderr
        .take()
        .map(|s| relay(s, cmd.stderr, true));

    // 1. Config.
    let config = stage2_config(cmd, std::process::id())?;
    let bytes = serde_json::to_vec(&config).map_err(|e| SandboxError::Protocol(e.to_string()))?;
    sys::send_msg(control.as_fd(), &bytes, None).map_err(io("sending the stage-2 config"))?;

    // 2. Report + listener.
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
        Stage2Message::Ready(r) => r,
        Stage2Message::SetupFailed(m) => return Err(SandboxError::Setup(m)),
        Stage2Message::ExecFailed(m) => {
            return Err(SandboxError::Protocol(format!("exec before go-ahead: {m}")));
        }
    };
    let listener = listener
        .ok_or_else(|| SandboxError::Protocol("no listener came with the report".into()))?;
    let installed: Vec<&str> = report.filters.iter().map(|f| f.sha256.as_str()).collect();
    if installed != expected.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(SandboxError::Protocol(format!(
            "stage 2 installed filters {installed:?}, expected {expected:?} (stale runtime binary {}?)",
            cmd.runtime_exe.display()
        )));
    }

    // 3. The notification loop, then the go-ahead.
    let sync_wakeup = sys::set_sync_wakeup(listener.as_fd()).is_ok();
    let (stop_rx, stop_tx) = std::io::pipe().map_err(io("stop pipe"))?;
    let notifier = std::thread::Builder::new()
        .name("kolm-seccomp-notify".into())
        .spawn(move || notify_loop(listener, OwnedFd::from(stop_rx), pid as i32))
        .map_err(io("starting the notification thread"))?;
    sys::send_msg(control.as_fd(), GO, None).map_err(io("sending the go-ahead"))?;

    // 4. Exec result: end-of-file, or ExecFailed.
    let (msg, _) =
        sys::recv_msg(control.as_fd(), MAX_MESSAGE).map_err(io("reading exec result"))?;
    let exec_error = if msg.is_empty() {
        None
    } else {
        match serde_json::from_slice::<Stage2Message>(&msg) {
            Ok(Stage2Message::ExecFailed(m)) => Some(m),
            Ok(other) => Some(format!("unexpected stage-2 message {other:?}")),
            Err(e) => Some(format!("unreadable stage-2 message: {e}")),
        }
    };
    drop(control);

    // 5. Wait for the job (with the caller's deadline), kill what is left of
    // its process group while the group id is still held by the zombie, reap.
    let pidfd = sys::pidfd_open(pid).map_err(io("pidfd_open"))?;
    let exited = sys::poll(&[(pidfd.as_fd(), libc::POLLIN)], cmd.timeout)
        .map_err(io("waiting for the job"))?;
    let timed_out = exited.first().is_none_or(|r| *r == 0);
    let _ = sys::kill(-(pid as i32), libc::SIGKILL);
    let status: ExitStatus = child.child.wait().map_err(io("waiting for the job"))?;
    child.reaped = true;

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

    let sigsys_kills = u64::from(status.signal() == Some(libc::SIGSYS));
    let blocked_total = stats.counted.total().saturating_add(sigsys_kills);
    let record = SandboxRecord {
        schema: RECORD_SCHEMA_V1.to_string(),
        profile: cmd.profile.as_str().to_string(),
        blocked_total,
        egress_blocked: true,
        counted: stats.counted,
        sigsys_kills,
        exit: JobExit {
            code: status.code(),
            signal: status.signal(),
            exec_error,
        },
        filters: report.filters,
        filter_source: filter::source_file().to_string(),
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
    };
    Ok(SandboxOutcome {
        record,
        status,
        timed_out,
        stdout,
        stderr,
    })
}

fn stage2_config(cmd: &SandboxCommand, supervisor_pid: u32) -> Result<Stage2Config, SandboxError> {
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
    let cwd = cmd
        .cwd
        .clone()
        .or_else(|| cmd.read_write.first().cloned())
        .unwrap_or_else(|| "/".into());
    let ids = match cmd.job_ids {
        super::JobIds::Auto => (sys::geteuid() == 0).then_some((super::JOB_UID, super::JOB_UID)),
        super::JobIds::Fixed(uid, gid) => Some((uid, gid)),
        super::JobIds::Inherit => None,
    };
    Ok(Stage2Config {
        protocol: PROTOCOL,
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        supervisor_pid,
        profile: cmd.profile,
        program: bytes(&cmd.program),
        argv,
        env,
        cwd: bytes(&cwd),
        read_only: cmd.read_only.iter().map(|p| bytes(p)).collect(),
        read_write: cmd.read_write.iter().map(|p| bytes(p)).collect(),
        landlock: cmd.landlock == LandlockMode::BestEffort,
        ids,
        network_namespace: cmd.network_namespace,
    })
}

/// Copies a job pipe to our own stdout/stderr, into a capped buffer, or
/// nowhere.
fn relay<R: Read + Send + 'static>(
    mut pipe: R,
    mode: OutputMode,
    is_stderr: bool,
) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = buf.get(..n).unwrap_or_default();
            match mode {
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
            }
        }
        if mode == OutputMode::Inherit {
            let _ = std::io::stdout().flush();
        }
        kept
    })
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
    withdrawn: u64,
    all_gone: bool,
    error: Option<String>,
}

/// Fixed slots for the counted system calls, so the hot path does no map
/// lookups by string.
struct Counters {
    syscalls: Vec<(i32, &'static str, i32, u64)>,
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
            families: BTreeMap::new(),
            other: BTreeMap::new(),
        }
    }

    /// Counts one notification; returns the errno to answer with.
    fn count(&mut self, nr: i32, args: &[u64; 6]) -> i32 {
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
/// [`DRAIN_GRACE`] after `stop` closes. On any listener failure it kills the
/// job's process group: a job must not run on uncounted.
fn notify_loop(listener: OwnedFd, stop: OwnedFd, pgid: i32) -> NotifyStats {
    let mut stats = NotifyStats::default();
    let mut counters = Counters::new();
    let fail = |stats: &mut NotifyStats, msg: String| {
        let _ = sys::kill(-pgid, libc::SIGKILL);
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
                    stats.notifications = stats.notifications.saturating_add(1);
                    let errno = counters.count(n.nr, &n.args);
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
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    stats.withdrawn = stats.withdrawn.saturating_add(1);
                }
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
            deadline = Some(Instant::now() + DRAIN_GRACE);
        }
    }
    stats.counted = counters.into_counted();
    stats
}
