//! Stage 2: the single-threaded helper that sandboxes itself and then
//! `execve`s the job. It is a fresh exec of the runtime binary, so nothing of
//! the (multi-threaded) supervisor's state is in it: no `pre_exec` closure
//! ever runs between `fork` and `exec` of a threaded process.
//!
//! Order matters and is fixed here:
//!
//! 1. check there is exactly one thread; read the config;
//! 2. x32 self-test (an x32 system call number must fail with ENOSYS);
//! 3. open the program and `/dev/null`; stdin becomes `/dev/null`;
//! 4. new process group, empty network namespace (root only);
//! 5. build the Landlock ruleset (path lookups with the supervisor's ids);
//! 6. switch to the job uid/gid (root only), then `PR_SET_PDEATHSIG`
//!    (a credential change clears it) and re-check the parent;
//! 7. `NO_NEW_PRIVS`, enforce Landlock;
//! 8. install the counted filter with `NEW_LISTENER`, then the deny filters
//!    (the last one forbids `seccomp(2)` itself);
//! 9. hand the listener to the supervisor, close it, wait for the go-ahead;
//! 10. mark every descriptor above 2 close-on-exec, `execveat` the program.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::protocol::{GO, MAX_MESSAGE, PROTOCOL, Stage2Config, Stage2Message, Stage2Report};
use super::{filter, landlock_rules, sys};
use kolm_format::sandbox_record::{HygieneRecord, LandlockRecord};

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

fn setup(control: &OwnedFd, stdin: OwnedFd) -> Result<Never, Failure> {
    // 1. One thread, so every step below applies to the whole process.
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
    if sys::getppid() != cfg.supervisor_pid {
        return Err(Failure::SupervisorGone);
    }

    // 2. x32 self-test: the filters match x86_64 numbers; an x32 number
    // (bit 30 set) passes the architecture check, so the kernel must refuse
    // it. Fail closed if it does not.
    let x32_self_test = x32_self_test()?;

    // 3. The program (opened now, executed by descriptor later) and stdin.
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
    let cwd = path(&cfg.cwd);
    std::env::set_current_dir(&cwd)
        .map_err(|e| Failure::Setup(format!("cwd {}: {e}", cwd.display())))?;

    // 4. Own process group (the supervisor kills it at the end), and an
    // empty network namespace where we are allowed to make one.
    sys::new_process_group().map_err(fail("setpgid"))?;
    let network_namespace = if !cfg.network_namespace {
        "shared: not requested".to_string()
    } else if sys::geteuid() != 0 {
        "shared: needs root".to_string()
    } else {
        match sys::unshare_network() {
            Ok(()) => "empty".to_string(),
            Err(e) => format!("shared: unshare(CLONE_NEWNET): {e}"),
        }
    };

    // 5. Landlock rules, looked up with our current ids.
    let landlock_abi = sys::landlock_abi();
    let prepared = if cfg.landlock {
        let paths = landlock_rules::Paths {
            program: program_path.clone(),
            read_only: cfg.read_only.iter().map(|p| path(p)).collect(),
            read_write: cfg.read_write.iter().map(|p| path(p)).collect(),
        };
        Some(landlock_rules::prepare(&paths).map_err(fail("landlock"))?)
    } else {
        None
    };

    // 6. Ids, then the parent-death signal (an id change clears it).
    let (uid, gid) = match cfg.ids {
        Some((uid, gid)) => {
            sys::switch_ids(uid, gid).map_err(fail("switching uid/gid"))?;
            (Some(uid), Some(gid))
        }
        None => (None, None),
    };
    sys::set_parent_death_signal(libc::SIGKILL).map_err(fail("PR_SET_PDEATHSIG"))?;
    if sys::getppid() != cfg.supervisor_pid {
        // The supervisor died before the death signal was armed.
        return Err(Failure::SupervisorGone);
    }

    // 7. No new privileges, then Landlock.
    sys::set_no_new_privs().map_err(fail("PR_SET_NO_NEW_PRIVS"))?;
    let landlock = match prepared {
        Some(p) => match landlock_rules::enforce(p) {
            Ok((abi, status)) => LandlockRecord { abi, status },
            Err(e) => LandlockRecord {
                abi: landlock_abi,
                status: format!("error: {e}"),
            },
        },
        None => LandlockRecord {
            abi: landlock_abi,
            status: "dangerous_disabled".to_string(),
        },
    };
    let no_new_privs = sys::no_new_privs().map_err(fail("PR_GET_NO_NEW_PRIVS"))?;

    // 8. Filters: counted (with the listener) first, `deny` last.
    let filters = filter::for_profile(cfg.profile).map_err(fail("filters"))?;
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

    // 9. Hand over the listener; the job must not keep it.
    let report = Stage2Report {
        filters: records,
        landlock,
        hygiene: HygieneRecord {
            no_new_privs,
            fds_above_stderr_closed: true,
            parent_death_signal: "SIGKILL".to_string(),
            uid,
            gid,
            network_namespace,
            x32_self_test,
            stage2_single_threaded: threads == 1,
        },
    };
    send(control, &Stage2Message::Ready(report), Some(&listener))
        .map_err(|_| Failure::SupervisorGone)?;
    drop(listener);
    let (go, _) = sys::recv_msg(control.as_fd(), 16).map_err(|_| Failure::SupervisorGone)?;
    if go != GO {
        return Err(Failure::SupervisorGone);
    }

    // 10. Exec. The control socket is close-on-exec: the supervisor reads
    // end-of-file when execve succeeds.
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
    sys::reset_signals().map_err(fail("resetting signals"))?;
    sys::cloexec_from(3).map_err(fail("close_range"))?;
    let err = sys::execveat(program.as_fd(), &argv, &envp);
    Err(Failure::Exec(format!(
        "executing {}: {err}",
        program_path.display()
    )))
}

#[cfg(target_arch = "x86_64")]
fn x32_self_test() -> Result<String, Failure> {
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    match sys::raw_syscall0(X32_SYSCALL_BIT | libc::SYS_getpid) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok("enosys".to_string()),
        other => Err(Failure::Setup(format!(
            "x32 self-test: an x32 system call returned {other:?} instead of ENOSYS; \
             this kernel runs x32 binaries, which the filters do not cover"
        ))),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_self_test() -> Result<String, Failure> {
    Ok("not_applicable".to_string())
}
