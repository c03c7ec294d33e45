//! Stage 2 as the init of the job's PID namespace (runs as root only). It
//! does not exec the job itself but forks it, and stays, so that the count
//! has two fixed edges (issue 12 item 4).
//!
//! The kernel numbers a listener's notifications one after another, and a
//! notification withdrawn before the supervisor read it (a signal
//! interrupted the call, or its thread was killed) leaves a gap in the ids
//! the supervisor reads. A gap only shows between two reads. The start and
//! the end sentinel calls ([`sys::sentinel_call`]) are made by this process
//! while nothing else is under the filter: before the job exists, and after
//! every other process of the namespace is gone. So they are the first and
//! the last notification of the run, every withdrawn notification lies
//! between them, and the supervisor's count is exact.
//!
//! 1. (stage 2, before this module) the start sentinel;
//! 2. become undumpable: a job process of the same uid can neither trace
//!    this one nor open its `/proc/1/mem` (`ptrace` is also denied by the
//!    filters); drop the Rust runtime's SIGSEGV/SIGBUS handlers: as a
//!    namespace's init it then receives no signal from inside the
//!    namespace at all;
//! 3. fork the job (pid 2), which enforces Landlock on itself (its
//!    `/proc/self` rules must name it; the init runs no job code and is not
//!    confined by it) and execs the program; the Landlock record and any
//!    exec failure come back over a close-on-exec pipe; tell the supervisor
//!    `Landlock`, then `Started` or `ExecFailed`;
//! 4. wait for the job to exit, for the supervisor's `STOP` (deadline) or
//!    for the supervisor to go;
//! 5. `kill(-1, SIGKILL)` (every process of the namespace but this one;
//!    a fork racing it fails), then reap until `ECHILD`: orphans are
//!    re-parented to this process, so at `ECHILD` nothing else is left;
//! 6. the end sentinel, then `Ended` with the job's wait status.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use kolm_format::sandbox_record::{LandlockRecord, LandlockStatus};

use super::landlock_rules;
use super::protocol::{JobEnded, STOP, Stage2Message};
use super::sys::{self, Forked};

/// Exit status of the forked job process when `execve` failed.
const EXEC_FAILED: i32 = 127;
/// Exit status of the init when something after the fork failed; the
/// supervisor then has no `Ended` and records the count as a lower bound.
const INIT_FAILED: i32 = 126;

fn send(control: &OwnedFd, msg: &Stage2Message) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    sys::send_msg(control.as_fd(), &bytes, None)
}

/// Runs the job under this init; never returns. `program` and `control`
/// are close-on-exec; so is every descriptor above stderr once the child
/// runs [`sys::cloexec_from`].
pub(super) fn run(
    control: &OwnedFd,
    program: &File,
    program_name: &str,
    argv: &[CString],
    envp: &[CString],
    landlock: Option<landlock_rules::Prepared>,
    probed_abi: u32,
) -> ! {
    // Before the job exists (the job's execve makes it dumpable again).
    if let Err(e) = sys::set_not_dumpable().and_then(|()| sys::default_fault_signals()) {
        let _ = send(
            control,
            &Stage2Message::ExecFailed(format!("making the init untouchable: {e}")),
        );
        std::process::exit(INIT_FAILED)
    }
    let Ok((exec_rd, exec_wr)) = sys::pipe_cloexec() else {
        let _ = send(
            control,
            &Stage2Message::ExecFailed("pipe2 for the exec result".into()),
        );
        std::process::exit(INIT_FAILED)
    };
    let job = match sys::fork_single_threaded() {
        Ok(Forked::Child) => {
            drop(exec_rd);
            let mut w = File::from(exec_wr);
            // Landlock on the job's own process, then its record as the
            // pipe's first line.
            let record = landlock_rules::enforce_on_self(landlock, probed_abi);
            let mut line = serde_json::to_vec(&record).unwrap_or_default();
            line.push(b'\n');
            let _ = w.write_all(&line);
            let err = match sys::reset_signals().and_then(|()| sys::cloexec_from(3)) {
                Ok(()) => sys::execveat(program.as_fd(), argv, envp),
                Err(e) => e,
            };
            let _ = w.write_all(format!("executing {program_name}: {err}").as_bytes());
            sys::exit_now(EXEC_FAILED)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => {
            let _ = send(control, &Stage2Message::ExecFailed(format!("fork: {e}")));
            std::process::exit(INIT_FAILED)
        }
    };
    drop(exec_wr);
    drop(landlock);
    let mut from_job = Vec::new();
    let _ = File::from(exec_rd).read_to_end(&mut from_job);
    let (record, exec_error) = match from_job.iter().position(|&b| b == b'\n') {
        Some(i) => (&from_job[..i], &from_job[i + 1..]),
        None => (&from_job[..], &[][..]),
    };
    let record = serde_json::from_slice(record).unwrap_or_else(|e| LandlockRecord {
        abi: probed_abi,
        status: LandlockStatus::Error(format!("the job process did not report Landlock ({e})")),
    });
    let _ = send(control, &Stage2Message::Landlock(record));
    let started = if exec_error.is_empty() {
        Stage2Message::Started
    } else {
        Stage2Message::ExecFailed(String::from_utf8_lossy(exec_error).into_owned())
    };
    let _ = send(control, &started);

    wait_for_job_or_stop(control, job);
    // Everything of the namespace but this process; then reap all.
    let _ = sys::kill(-1, libc::SIGKILL);
    let mut job_status = None;
    loop {
        match sys::wait_any(-1) {
            Ok((pid, status)) if pid == job => job_status = Some(status),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => break,
            Err(_) => kill_all_and_exit(),
        }
    }
    let Some(wait_status) = job_status else {
        kill_all_and_exit()
    };
    // Nothing else is under the filter now: the last notification.
    if sys::sentinel_call().is_err() {
        std::process::exit(INIT_FAILED);
    }
    let _ = send(control, &Stage2Message::Ended(JobEnded { wait_status }));
    std::process::exit(0)
}

/// Waits until the job process has exited, or the supervisor said [`STOP`]
/// or went away. The job is not reaped here: its status is collected with
/// the others.
fn wait_for_job_or_stop(control: &OwnedFd, job: i32) {
    // Without a way to watch it, the job is ended at once.
    let Ok(pidfd) = sys::pidfd_open(job as u32) else {
        return;
    };
    loop {
        let Ok(r) = sys::poll(
            &[
                (pidfd.as_fd(), libc::POLLIN),
                (control.as_fd(), libc::POLLIN),
            ],
            None,
        ) else {
            return;
        };
        if r.first().is_some_and(|r| *r != 0) {
            return;
        }
        if r.get(1).is_some_and(|r| *r != 0) {
            // STOP, anything else, or end-of-file: the supervisor gave up on
            // the job (or is gone); end it.
            let _ = sys::recv_msg(control.as_fd(), STOP.len());
            return;
        }
    }
}

/// Something after the fork failed: end the namespace (this process's exit
/// kills every process left in it) without an `Ended`.
fn kill_all_and_exit() -> ! {
    let _ = sys::kill(-1, libc::SIGKILL);
    std::process::exit(INIT_FAILED)
}
