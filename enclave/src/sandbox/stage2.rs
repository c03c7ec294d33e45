//! Stage 2: the single-threaded helper that sandboxes itself and then
//! `execve`s the job. It is a fresh exec of the runtime binary, so nothing of
//! the (multi-threaded) supervisor's state is in it: no `pre_exec` closure
//! ever runs between `fork` and `exec` of a threaded process.
//!
//! Order matters and is fixed here:
//!
//! 1. check there is exactly one thread; read the config; check the
//!    supervisor is there (as root, stage 2 is the init of a new PID
//!    namespace the supervisor made, so it checks it is pid 1 and the
//!    control socket has not hung up instead of comparing `getppid`);
//! 2. x32 self-test (an x32 system call number must fail with ENOSYS);
//! 3. open the program and `/dev/null`; stdin becomes `/dev/null`;
//! 4. new process group; as root: empty network namespace, new IPC
//!    namespace, `vm.memfd_noexec = 1` in the PID namespace, and a new mount
//!    namespace whose root holds only the job's trees (`rootfs.rs`); then
//!    `chdir` to the working directory;
//! 5. build the Landlock ruleset (path lookups with the supervisor's ids);
//! 6. switch to the job uid/gid (root only), then `PR_SET_PDEATHSIG`
//!    (a credential change clears it) and re-check the parent;
//! 7. `NO_NEW_PRIVS`, enforce Landlock;
//! 8. install the counted filter with `NEW_LISTENER`, then the deny filters
//!    (`deny_sysv_ipc` when the IPC namespace is shared, `deny_memfd` when
//!    memfds could not be made non-executable; the last one, `deny`, forbids
//!    `seccomp(2)` itself);
//! 9. hand the listener to the supervisor, close it, wait for the go-ahead;
//! 10. mark every descriptor above 2 close-on-exec, `execveat` the program;
//!     as the init of a PID namespace: the start sentinel call, then fork
//!     the job and stay as its init (`init.rs`).

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::protocol::{GO, MAX_MESSAGE, PROTOCOL, Stage2Config, Stage2Message, Stage2Report};
use super::{filter, init, landlock_rules, rootfs, sys};
use kolm_format::sandbox_record::{
    DeathSignal, FilterRecord, HygieneRecord, IpcNamespace, IsolationRecord, LandlockRecord,
    LandlockStatus, MemfdExec, MountNamespace, NetworkNamespace, PidNamespace, X32SelfTest,
};

/// Exit status of stage 2 when setup failed (the job never ran).
const SETUP_FAILED: i32 = 125;
/// Exit status when `execve` failed.
const EXEC_FAILED: i32 = 127;

/// Entry point of the hidden stage-2 subcommand; never returns.
pub fn stage2_main() -> ! {
    // The control socket arrives as stdin. Move it above stdio first so
    // stdin can become /dev/null.
    let stdin = sys::own_stdio(0);
    let control = match sys::dup_cloexec_above_stdio(stdin.as_fd()) {
        Ok(c) => c,
        Err(_) => std::process::exit(SETUP_FAILED),
    };
    // Keep fd 0 itself open (as `stdin`) until /dev/null replaces it, so no
    // new descriptor can land on 0 meanwhile.
    match setup(&control, stdin) {
        Ok(never) => match never {},
        Err(Failure::Setup(msg)) => {
            let _ = send(&control, &Stage2Message::SetupFailed(msg), None);
            std::process::exit(SETUP_FAILED)
        }
        Err(Failure::Exec(msg)) => {
            let _ = send(&control, &Stage2Message::ExecFailed(msg), None);
            std::process::exit(EXEC_FAILED)
        }
        Err(Failure::SupervisorGone) => std::process::exit(SETUP_FAILED),
    }
}

enum Failure {
    Setup(String),
    Exec(String),
    SupervisorGone,
}

enum Never {}

fn fail<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| Failure::Setup(format!("{what}: {e}"))
}

fn send(control: &OwnedFd, msg: &Stage2Message, fd: Option<&OwnedFd>) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    sys::send_msg(control.as_fd(), &bytes, fd.map(|f| f.as_fd()))
}

fn cstring(bytes: &[u8], what: &'static str) -> Result<CString, Failure> {
    CString::new(bytes.to_vec()).map_err(|_| Failure::Setup(format!("{what} contains a NUL byte")))
}

fn path(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

/// The ten steps of the module header, in that order: each step below
/// relies on the ones before it (the namespaces are made while we may
/// still make them, Landlock paths are looked up before the ids change,
/// the death signal is armed after the id change that would clear it, the
/// filters come last because `deny` forbids `seccomp(2)` itself).
fn setup(control: &OwnedFd, stdin: OwnedFd) -> Result<Never, Failure> {
    let checked = check_start(control)?;
    let cfg = &checked.cfg;
    let pid_private = checked.pid_private;
    // 2. x32 self-test: the filters match x86_64 numbers; an x32 number
    // (bit 30 set) passes the architecture check, so the kernel must refuse
    // it. Fail closed if it does not.
    let x32_self_test = x32_self_test()?;
    let (program_path, program) = open_program_and_stdin(cfg, stdin)?;
    let isolation = isolate(cfg, pid_private, &program_path)?;
    let landlock_abi = sys::landlock_abi();
    let prepared = prepare_landlock(cfg, &program_path)?;
    let (uid, gid) = switch_ids(control, cfg)?;
    let restricted = restrict(pid_private, prepared, landlock_abi)?;
    let (records, listener) = install_filters(cfg, &isolation)?;

    // 9. Hand over the listener; the job must not keep it.
    let report = Stage2Report {
        filters: records,
        landlock: restricted.landlock,
        hygiene: HygieneRecord {
            no_new_privs: restricted.no_new_privs,
            fds_above_stderr_closed: true,
            parent_death_signal: DeathSignal::Sigkill,
            uid,
            gid,
            network_namespace: isolation.network_namespace,
            x32_self_test,
            stage2_single_threaded: checked.threads == 1,
            isolation: Some(IsolationRecord {
                job_ids: cfg.job_ids,
                pid_namespace: cfg.pid_namespace.clone(),
                ipc_namespace: isolation.ipc_namespace,
                mount_namespace: isolation.mount_namespace,
                memfd_exec: isolation.memfd_exec,
            }),
        },
    };
    hand_over(control, report, listener)?;
    exec(
        control,
        cfg,
        pid_private,
        &program_path,
        &program,
        restricted.for_job,
        landlock_abi,
    )
}

/// Step 1's outcome: the config, read and checked.
struct Checked {
    cfg: Stage2Config,
    threads: usize,
    pid_private: bool,
}

/// Step 1: One thread, so every step below applies to the whole process; the
/// config, of this runtime's protocol; the supervisor still there.
fn check_start(control: &OwnedFd) -> Result<Checked, Failure> {
    let threads = sys::thread_count().map_err(fail("counting threads"))?;
    if threads != 1 {
        return Err(Failure::Setup(format!(
            "stage 2 must be single-threaded, found {threads} threads"
        )));
    }
    let (bytes, _) = sys::recv_msg(control.as_fd(), MAX_MESSAGE).map_err(fail("reading config"))?;
    if bytes.is_empty() {
        return Err(Failure::SupervisorGone);
    }
    let cfg: Stage2Config = serde_json::from_slice(&bytes).map_err(fail("config"))?;
    if cfg.protocol != PROTOCOL || cfg.runtime_version != env!("CARGO_PKG_VERSION") {
        return Err(Failure::Setup(format!(
            "protocol mismatch: supervisor speaks {} ({}), this runtime {} ({})",
            cfg.protocol,
            cfg.runtime_version,
            PROTOCOL,
            env!("CARGO_PKG_VERSION")
        )));
    }
    let pid_private = cfg.pid_namespace == PidNamespace::Private;
    if pid_private && sys::getpid() != 1 {
        return Err(Failure::Setup(format!(
            "the supervisor made a PID namespace, but stage 2 is pid {} in it, not 1",
            sys::getpid()
        )));
    }
    if !supervisor_alive(control, &cfg) {
        return Err(Failure::SupervisorGone);
    }
    Ok(Checked {
        cfg,
        threads,
        pid_private,
    })
}

/// Step 3: The program (opened now, executed by descriptor later) and stdin,
/// which becomes `/dev/null`.
fn open_program_and_stdin(
    cfg: &Stage2Config,
    stdin: OwnedFd,
) -> Result<(PathBuf, std::fs::File), Failure> {
    let program_path = path(&cfg.program);
    let program = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&program_path)
        .map_err(|e| Failure::Setup(format!("opening {}: {e}", program_path.display())))?;
    let meta = program
        .metadata()
        .map_err(|e| Failure::Setup(format!("{}: {e}", program_path.display())))?;
    if !meta.is_file() {
        return Err(Failure::Setup(format!(
            "{} is not a regular file",
            program_path.display()
        )));
    }
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(fail("opening /dev/null"))?;
    sys::dup2(devnull.as_fd(), 0).map_err(fail("stdin from /dev/null"))?;
    drop(devnull);
    // fd 0 is now /dev/null; forget the old handle without closing 0.
    std::mem::forget(stdin);
    Ok((program_path, program))
}

/// What step 4 made, or why not, as the record says it.
struct Isolation {
    network_namespace: NetworkNamespace,
    ipc_namespace: IpcNamespace,
    memfd_exec: MemfdExec,
    mount_namespace: MountNamespace,
}

/// Step 4: Own process group (the supervisor kills it at the end), and, where
/// we are allowed to make them, an empty network namespace, an IPC
/// namespace, non-executable memfds and a private root; then the working
/// directory (inside the new root).
fn isolate(
    cfg: &Stage2Config,
    pid_private: bool,
    program_path: &std::path::Path,
) -> Result<Isolation, Failure> {
    sys::new_process_group().map_err(fail("setpgid"))?;
    let root = sys::geteuid() == 0;
    let network_namespace = if !cfg.network_namespace {
        NetworkNamespace::Shared("not requested".to_string())
    } else if !root {
        NetworkNamespace::Shared("needs root".to_string())
    } else {
        match sys::unshare_network() {
            Ok(()) => NetworkNamespace::Empty,
            Err(e) => NetworkNamespace::Shared(format!("unshare(CLONE_NEWNET): {e}")),
        }
    };
    let ipc_namespace = if !root {
        IpcNamespace::Shared("needs root".to_string())
    } else {
        match sys::unshare(libc::CLONE_NEWIPC) {
            Ok(()) => IpcNamespace::Private,
            Err(e) => IpcNamespace::Shared(format!("unshare(CLONE_NEWIPC): {e}")),
        }
    };
    let memfd_exec = if pid_private && memfd_noexec().is_ok() {
        MemfdExec::NoexecSeal
    } else {
        MemfdExec::Denied
    };
    let mount_namespace = if !root {
        MountNamespace::Shared("needs root".to_string())
    } else {
        match sys::unshare(libc::CLONE_NEWNS) {
            Ok(()) => {
                let layout = rootfs::Layout {
                    program: program_path.to_path_buf(),
                    read_only: cfg.read_only.iter().map(|p| path(p)).collect(),
                    read_write: cfg.read_write.iter().map(|p| path(p)).collect(),
                    library_dirs: cfg.library_dirs.iter().map(|p| path(p)).collect(),
                    fresh_proc: pid_private,
                };
                rootfs::enter(&layout).map_err(fail("private root"))?;
                MountNamespace::PrivateRoot
            }
            Err(e) => MountNamespace::Shared(format!("unshare(CLONE_NEWNS): {e}")),
        }
    };
    let cwd = path(&cfg.cwd);
    std::env::set_current_dir(&cwd)
        .map_err(|e| Failure::Setup(format!("cwd {}: {e}", cwd.display())))?;
    Ok(Isolation {
        network_namespace,
        ipc_namespace,
        memfd_exec,
        mount_namespace,
    })
}

/// Step 5: Landlock rules, looked up with our current ids (before step 6
/// changes them).
fn prepare_landlock(
    cfg: &Stage2Config,
    program_path: &std::path::Path,
) -> Result<Option<landlock_rules::Prepared>, Failure> {
    if !cfg.landlock {
        return Ok(None);
    }
    let paths = landlock_rules::Paths {
        program: program_path.to_path_buf(),
        read_only: cfg.read_only.iter().map(|p| path(p)).collect(),
        read_write: cfg.read_write.iter().map(|p| path(p)).collect(),
        library_dirs: cfg.library_dirs.iter().map(|p| path(p)).collect(),
    };
    Ok(Some(
        landlock_rules::prepare(&paths).map_err(fail("landlock"))?,
    ))
}

/// Step 6: Ids, then the parent-death signal (an id change clears it), then the
/// parent checked again. Returns the ids switched to, for the record.
fn switch_ids(
    control: &OwnedFd,
    cfg: &Stage2Config,
) -> Result<(Option<u32>, Option<u32>), Failure> {
    let (uid, gid) = match cfg.ids {
        Some((uid, gid)) => {
            sys::switch_ids(uid, gid).map_err(fail("switching uid/gid"))?;
            (Some(uid), Some(gid))
        }
        None => (None, None),
    };
    sys::set_parent_death_signal(libc::SIGKILL).map_err(fail("PR_SET_PDEATHSIG"))?;
    if !supervisor_alive(control, cfg) {
        // The supervisor died before the death signal was armed.
        return Err(Failure::SupervisorGone);
    }
    Ok((uid, gid))
}

/// Step 7's outcome.
struct Restricted {
    /// The record's Landlock entry (`pending` in init mode).
    landlock: LandlockRecord,
    /// Init mode: the rules the job's own process enforces after the fork.
    for_job: Option<Option<landlock_rules::Prepared>>,
    no_new_privs: bool,
}

/// Step 7: No new privileges, then Landlock: here, or, as the init of a PID
/// namespace, in the job's own process after the fork (its rules for
/// `/proc/self` must name the job, and the init runs no job code).
fn restrict(
    pid_private: bool,
    prepared: Option<landlock_rules::Prepared>,
    landlock_abi: u32,
) -> Result<Restricted, Failure> {
    sys::set_no_new_privs().map_err(fail("PR_SET_NO_NEW_PRIVS"))?;
    let (landlock, for_job) = if pid_private {
        let pending = LandlockRecord {
            abi: landlock_abi,
            status: LandlockStatus::Pending,
        };
        (pending, Some(prepared))
    } else {
        (
            landlock_rules::enforce_on_self(prepared, landlock_abi),
            None,
        )
    };
    let no_new_privs = sys::no_new_privs().map_err(fail("PR_GET_NO_NEW_PRIVS"))?;
    Ok(Restricted {
        landlock,
        for_job,
        no_new_privs,
    })
}

/// Step 8: Filters: counted (with the listener) first, `deny` last (it forbids
/// `seccomp(2)`, so nothing can be installed after it). Returns their
/// records and the listener.
fn install_filters(
    cfg: &Stage2Config,
    isolation: &Isolation,
) -> Result<(Vec<FilterRecord>, OwnedFd), Failure> {
    let extra = filter::Extra {
        deny_sysv_ipc: isolation.ipc_namespace != IpcNamespace::Private,
        deny_memfd: isolation.memfd_exec != MemfdExec::NoexecSeal,
    };
    let filters = filter::for_profile(cfg.profile, extra).map_err(fail("filters"))?;
    let mut listener = None;
    let mut records = Vec::with_capacity(filters.len());
    for f in &filters {
        let counted = f.role == filter::Role::Counted;
        let fd = sys::install_filter(&f.program, counted)
            .map_err(|e| Failure::Setup(format!("installing filter {}: {e}", f.name)))?;
        if counted {
            listener = fd;
        }
        records.push(f.record());
    }
    let listener =
        listener.ok_or_else(|| Failure::Setup("no counted filter was installed".into()))?;
    Ok((records, listener))
}

/// Step 9: The report and the listener to the supervisor; the listener closed
/// here (the job must not keep it); then the go-ahead.
fn hand_over(control: &OwnedFd, report: Stage2Report, listener: OwnedFd) -> Result<(), Failure> {
    send(
        control,
        &Stage2Message::Ready(Box::new(report)),
        Some(&listener),
    )
    .map_err(|_| Failure::SupervisorGone)?;
    drop(listener);
    let (go, _) = sys::recv_msg(control.as_fd(), 16).map_err(|_| Failure::SupervisorGone)?;
    if go != GO {
        return Err(Failure::SupervisorGone);
    }
    Ok(())
}

/// Step 10: Exec. The control socket is close-on-exec: the supervisor reads
/// end-of-file when execve succeeds. As the init of a PID namespace,
/// make the start sentinel call first and fork the job instead
/// (`init.rs`).
fn exec(
    control: &OwnedFd,
    cfg: &Stage2Config,
    pid_private: bool,
    program_path: &std::path::Path,
    program: &std::fs::File,
    for_job: Option<Option<landlock_rules::Prepared>>,
    landlock_abi: u32,
) -> Result<Never, Failure> {
    let argv = cfg
        .argv
        .iter()
        .map(|a| cstring(a, "an argument"))
        .collect::<Result<Vec<_>, _>>()?;
    let envp = cfg
        .env
        .iter()
        .map(|e| cstring(e, "an environment entry"))
        .collect::<Result<Vec<_>, _>>()?;
    if pid_private {
        sys::sentinel_call().map_err(fail("the start sentinel call"))?;
        let name = program_path.display().to_string();
        let landlock = for_job.ok_or_else(|| Failure::Setup("no Landlock plan".into()))?;
        init::run(
            control,
            program,
            &name,
            &argv,
            &envp,
            landlock,
            landlock_abi,
        )
    }
    sys::reset_signals().map_err(fail("resetting signals"))?;
    sys::cloexec_from(3).map_err(fail("close_range"))?;
    let err = sys::execveat(program.as_fd(), &argv, &envp);
    Err(Failure::Exec(format!(
        "executing {}: {err}",
        program_path.display()
    )))
}

/// Whether the supervisor is still there. Without a PID namespace: our
/// parent is still the supervisor (not a reaper that adopted us). In one,
/// `getppid` is 0 (the parent lives outside it), so: the supervisor's end of
/// the control socket is still open (it holds the only copy).
fn supervisor_alive(control: &OwnedFd, cfg: &Stage2Config) -> bool {
    if cfg.pid_namespace != PidNamespace::Private {
        return sys::getppid() == cfg.supervisor_pid;
    }
    match sys::poll(
        &[(control.as_fd(), libc::POLLRDHUP)],
        Some(std::time::Duration::ZERO),
    ) {
        Ok(r) => r
            .first()
            .is_some_and(|r| r & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) == 0),
        Err(_) => false,
    }
}

/// `vm.memfd_noexec` at least 1 in this (new) PID namespace: a memfd made
/// without `MFD_EXEC` is non-executable and sealed so, and `MFD_EXEC` is
/// denied by the `deny` filter. The sysctl is per PID namespace (Linux
/// 6.3+) and can only be raised below the host's value.
fn memfd_noexec() -> std::io::Result<()> {
    const SYSCTL: &str = "/proc/sys/vm/memfd_noexec";
    let read = || -> std::io::Result<u32> {
        std::fs::read_to_string(SYSCTL)?
            .trim()
            .parse()
            .map_err(std::io::Error::other)
    };
    if read()? == 0 {
        std::fs::write(SYSCTL, b"1")?;
    }
    if read()? >= 1 {
        Ok(())
    } else {
        Err(std::io::Error::other("vm.memfd_noexec did not change"))
    }
}

#[cfg(target_arch = "x86_64")]
fn x32_self_test() -> Result<X32SelfTest, Failure> {
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    match sys::raw_syscall0(X32_SYSCALL_BIT | libc::SYS_getpid) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(X32SelfTest::Enosys),
        other => Err(Failure::Setup(format!(
            "x32 self-test: an x32 system call returned {other:?} instead of ENOSYS; \
             this kernel runs x32 binaries, which the filters do not cover"
        ))),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_self_test() -> Result<X32SelfTest, Failure> {
    Ok(X32SelfTest::NotApplicable)
}
