//! Thin wrappers over the system calls the sandbox needs that neither `std`
//! nor the `landlock` crate offers. This is the only file of the sandbox with
//! `unsafe`; every block says why it is sound. Each wrapper returns
//! `std::io::Error` from `errno`; callers attach context.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::filter::Insn;

/// `-1` with `errno` to `io::Error`, anything else to `Ok`.
fn cvt(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cvt_int(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A connected `AF_UNIX`/`SOCK_SEQPACKET` pair, both ends close-on-exec.
pub(super) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as socketpair(2)
    // requires; the kernel writes two new descriptors into it on success.
    cvt_int(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: on success both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Space for one `SCM_RIGHTS` message carrying one descriptor.
const CMSG_SPACE_ONE_FD: usize = 64;

/// Sends one message, optionally with one descriptor attached.
pub(super) fn send_msg(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // u64 elements keep the control buffer aligned for `cmsghdr`.
    let mut control = [0u64; CMSG_SPACE_ONE_FD / 8];
    // SAFETY: an all-zero msghdr is a valid "no name, no iov, no control"
    // value; the fields are filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        let raw = fd.as_raw_fd();
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        debug_assert!(space <= CMSG_SPACE_ONE_FD);
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` zeroed, aligned bytes that
        // outlive this call, so CMSG_FIRSTHDR returns a valid header inside
        // it, and CMSG_DATA points at room for one int after that header.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), raw);
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` and `control`, both alive for the
        // call; the kernel only reads them.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        match cvt(rc as libc::c_long) {
            Ok(n) if n as usize == data.len() => return Ok(()),
            Ok(_) => return Err(io::Error::other("short sendmsg on a seqpacket socket")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Receives one message of at most `max` bytes and the descriptor attached
/// to it, if any. An empty result means the peer closed its end.
pub(super) fn recv_msg(sock: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut buf = vec![0u8; max];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; CMSG_SPACE_ONE_FD / 8];
    // SAFETY: all-zero msghdr is valid; fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE_ONE_FD;
    let n = loop {
        // SAFETY: `msg` points at `buf` (max bytes) and `control`, both
        // writable and alive for the call. MSG_CMSG_CLOEXEC makes any
        // received descriptor close-on-exec.
        let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        match cvt(rc as libc::c_long) {
            Ok(n) => break n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    let mut fd = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`;
    // CMSG_FIRSTHDR/CMSG_NXTHDR walk only within that length, and
    // SCM_RIGHTS data is an array of ints of the length the header gives.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let header = libc::CMSG_LEN(0) as usize;
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(header)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    // Each received descriptor is new and ours; keep the
                    // first, close any others.
                    let owned = OwnedFd::from_raw_fd(raw);
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::other(format!("message longer than {max} bytes")));
    }
    buf.truncate(n);
    Ok((buf, fd))
}

/// Polls `fds` for `events`; returns the `revents` of each. `None` waits
/// forever.
pub(super) fn poll(
    fds: &[(BorrowedFd<'_>, libc::c_short)],
    timeout: Option<Duration>,
) -> io::Result<Vec<libc::c_short>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, events)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: *events,
            revents: 0,
        })
        .collect();
    let ms = match timeout {
        None => -1,
        Some(t) => libc::c_int::try_from(t.as_millis()).unwrap_or(libc::c_int::MAX),
    };
    loop {
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        match cvt_int(rc) {
            Ok(_) => return Ok(pfds.iter().map(|p| p.revents).collect()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `pidfd_open(pid, 0)`: readable once the process has exited.
pub(super) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new fd.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })?;
    // SAFETY: on success the descriptor is new and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `kill(pid, sig)`; a negative `pid` signals a process group.
pub(super) fn kill(pid: i32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes plain integers.
    cvt_int(unsafe { libc::kill(pid, sig) }).map(drop)
}

pub(super) fn getppid() -> u32 {
    // SAFETY: getppid cannot fail and touches no memory.
    unsafe { libc::getppid() as u32 }
}

pub(super) fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// `prctl(PR_SET_PDEATHSIG, sig)`.
pub(super) fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes the signal by value.
    cvt_int(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub(super) fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    cvt_int(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

/// `prctl(PR_GET_NO_NEW_PRIVS)`.
pub(super) fn no_new_privs() -> io::Result<bool> {
    // SAFETY: PR_GET_NO_NEW_PRIVS takes integers only and returns 0 or 1.
    cvt_int(unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) }).map(|v| v == 1)
}

/// Issues the raw system call `nr` with no arguments and returns its result
/// (the x32 self-test: an x32 number must fail with `ENOSYS`).
pub(super) fn raw_syscall0(nr: libc::c_long) -> io::Result<libc::c_long> {
    // SAFETY: only called with system call numbers that take no pointer
    // arguments (getpid and its x32 alias); extra registers are ignored.
    cvt(unsafe { libc::syscall(nr) })
}

/// `dup2(old, new)`.
pub(super) fn dup2(old: BorrowedFd<'_>, new: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes integers; `new` is one of the stdio numbers, which
    // this single-threaded process owns and intends to replace.
    cvt_int(unsafe { libc::dup2(old.as_raw_fd(), new) }).map(drop)
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, 3)`: a close-on-exec copy above stdio.
pub(super) fn dup_cloexec_above_stdio(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes integers and returns a new descriptor.
    let new = cvt_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: the descriptor is new and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Takes ownership of a standard descriptor number (0, 1 or 2).
pub(super) fn own_stdio(fd: RawFd) -> OwnedFd {
    debug_assert!((0..=2).contains(&fd));
    // SAFETY: stage 2 is started with its stdio set up by the supervisor and
    // nothing else in the process holds these numbers as owned handles.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`: every descriptor from
/// `first` up is closed by the coming `execve`.
pub(super) fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range takes integers; marking descriptors close-on-exec
    // does not invalidate any handle this process still uses.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })
    .map(drop)
}

/// `setpgid(0, 0)`: the caller leads a new process group.
pub(super) fn new_process_group() -> io::Result<()> {
    // SAFETY: setpgid takes integers.
    cvt_int(unsafe { libc::setpgid(0, 0) }).map(drop)
}

/// `unshare(CLONE_NEWNET)`: an empty network namespace (loopback only, down).
pub(super) fn unshare_network() -> io::Result<()> {
    // SAFETY: unshare takes flags by value; the process is single-threaded.
    cvt_int(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// Drops supplementary groups and sets real, effective and saved ids.
pub(super) fn switch_ids(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: setgroups with size 0 reads no memory.
    cvt_int(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: setresgid/setresuid take integers.
    cvt_int(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: as above.
    cvt_int(unsafe { libc::setresuid(uid, uid, uid) })?;
    // SAFETY: getuid/getgid cannot fail.
    let (now_uid, now_gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if now_uid != uid || now_gid != gid {
        return Err(io::Error::other("ids did not change"));
    }
    Ok(())
}

/// Restores the default action of SIGPIPE (the Rust runtime ignores it, and
/// an ignored signal stays ignored across `execve`) and unblocks all signals.
pub(super) fn reset_signals() -> io::Result<()> {
    // SAFETY: installing SIG_DFL runs no handler code.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `set` is a valid sigset_t that sigemptyset initialises before
    // sigprocmask reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        cvt_int(libc::sigprocmask(
            libc::SIG_SETMASK,
            &set,
            std::ptr::null_mut(),
        ))?;
    }
    Ok(())
}

/// The kernel's `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const Insn,
}

/// Installs a seccomp filter on the calling thread. With `new_listener` it
/// passes `SECCOMP_FILTER_FLAG_NEW_LISTENER` and returns the listener.
pub(super) fn install_filter(program: &[Insn], new_listener: bool) -> io::Result<Option<OwnedFd>> {
    let len = libc::c_ushort::try_from(program.len())
        .map_err(|_| io::Error::other("filter longer than 65535 instructions"))?;
    let prog = SockFprog {
        len,
        filter: program.as_ptr(),
    };
    let flags = if new_listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: `prog` points at `program`, a live slice of `len` instructions
    // laid out as the kernel's `struct sock_filter` (Insn is repr(C) with the
    // same fields); the kernel copies it before returning.
    let rc = cvt(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const SockFprog,
        )
    })?;
    if new_listener {
        // SAFETY: with NEW_LISTENER the return value is a new descriptor.
        Ok(Some(unsafe { OwnedFd::from_raw_fd(rc as RawFd) }))
    } else {
        Ok(None)
    }
}

/// `(sizeof seccomp_notif, sizeof seccomp_notif_resp)` as the kernel has them.
pub(super) fn notif_sizes() -> io::Result<(usize, usize)> {
    let mut sizes = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: SECCOMP_GET_NOTIF_SIZES writes one seccomp_notif_sizes into the
    // valid, writable struct passed.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_NOTIF_SIZES,
            0,
            &mut sizes as *mut libc::seccomp_notif_sizes,
        )
    })?;
    Ok((
        usize::from(sizes.seccomp_notif),
        usize::from(sizes.seccomp_notif_resp),
    ))
}

/// One pending notification, as far as the supervisor reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Notification {
    pub id: u64,
    /// The calling thread, as this (the supervisor's) PID namespace
    /// numbers it.
    pub pid: u32,
    /// `AUDIT_ARCH_*` of the call's ABI.
    pub arch: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

/// Buffers for `SECCOMP_IOCTL_NOTIF_RECV`/`SEND`, sized for the running
/// kernel's structs (which may be larger than the ones `libc` knows).
#[derive(Debug)]
pub(super) struct NotifBuffers {
    recv: Vec<u64>,
    resp: Vec<u64>,
}

impl NotifBuffers {
    pub(super) fn new() -> io::Result<NotifBuffers> {
        let (notif, resp) = notif_sizes()?;
        let notif = notif.max(std::mem::size_of::<libc::seccomp_notif>());
        let resp = resp.max(std::mem::size_of::<libc::seccomp_notif_resp>());
        Ok(NotifBuffers {
            recv: vec![0; notif.div_ceil(8)],
            resp: vec![0; resp.div_ceil(8)],
        })
    }

    /// `SECCOMP_IOCTL_NOTIF_RECV`. `ENOENT` means the caller went away
    /// between the wake-up and this call.
    pub(super) fn recv(&mut self, listener: BorrowedFd<'_>) -> io::Result<Notification> {
        // The kernel rejects a buffer that is not zeroed.
        self.recv.fill(0);
        // SAFETY: `recv` is a zeroed, 8-byte aligned buffer at least as large
        // as the kernel's `struct seccomp_notif` (checked in `new`), which
        // the ioctl fills.
        cvt_int(unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                self.recv.as_mut_ptr(),
            )
        })?;
        // SAFETY: the buffer holds an initialised `seccomp_notif` (plain
        // integers, any bit pattern valid), suitably aligned and sized.
        let n: libc::seccomp_notif = unsafe { std::ptr::read(self.recv.as_ptr().cast()) };
        Ok(Notification {
            id: n.id,
            pid: n.pid,
            arch: n.data.arch,
            nr: n.data.nr,
            args: n.data.args,
        })
    }

    /// `SECCOMP_IOCTL_NOTIF_SEND` failing the call with `-errno`.
    pub(super) fn send_error(
        &mut self,
        listener: BorrowedFd<'_>,
        id: u64,
        errno: i32,
    ) -> io::Result<()> {
        self.resp.fill(0);
        let resp = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        };
        // SAFETY: `resp` is 8-byte aligned and at least
        // size_of::<seccomp_notif_resp>() bytes (checked in `new`).
        unsafe { std::ptr::write(self.resp.as_mut_ptr().cast(), resp) };
        // SAFETY: the buffer holds an initialised `seccomp_notif_resp` the
        // size the kernel expects (any tail beyond libc's struct is zero).
        cvt_int(unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND as _,
                self.resp.as_mut_ptr(),
            )
        })
        .map(drop)
    }
}

/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS(SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)`
/// (Linux 6.6+): the kernel hands the CPU straight from the blocked job
/// thread to the supervisor and back, which halves the cost of a counted
/// attempt.
pub(super) fn set_sync_wakeup(listener: BorrowedFd<'_>) -> io::Result<()> {
    const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
    // SAFETY: SET_FLAGS takes the flags word by value as its argument.
    cvt_int(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    })
    .map(drop)
}

/// `execveat(fd, "", argv, envp, AT_EMPTY_PATH)`; returns only on failure.
pub(super) fn execveat(program: BorrowedFd<'_>, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    let empty = c"";
    // SAFETY: argv and envp are NULL-terminated arrays of pointers to
    // NUL-terminated strings, all alive for the call; `empty` with
    // AT_EMPTY_PATH makes the kernel execute `program` itself.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            program.as_raw_fd(),
            empty.as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    io::Error::last_os_error()
}

/// Number of threads of the calling process, from `/proc/self/task`.
pub(super) fn thread_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// The kernel's Landlock ABI version, 0 when Landlock is absent or disabled.
pub(super) fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag,
    // landlock_create_ruleset reads no memory and returns the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// `unshare(flags)` (namespace flags only; the caller is single-threaded
/// where the flag requires it).
pub(super) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags by value and touches no memory.
    cvt_int(unsafe { libc::unshare(flags) }).map(drop)
}

pub(super) fn getpid() -> u32 {
    // SAFETY: getpid cannot fail and touches no memory.
    unsafe { libc::getpid() as u32 }
}

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`: orphaned descendants are reparented
/// to this process instead of the host's init.
pub(super) fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integers only.
    cvt_int(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

fn path_cstring(p: &std::path::Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// `mount(2)`.
pub(super) fn mount(
    source: Option<&std::path::Path>,
    target: &std::path::Path,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    let source = source.map(path_cstring).transpose()?;
    let target = path_cstring(target)?;
    // SAFETY: every pointer is NULL or a NUL-terminated string alive for the
    // call; the kernel copies them.
    cvt_int(unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    })
    .map(drop)
}

/// `umount2(target, flags)`.
pub(super) fn umount2(target: &std::path::Path, flags: libc::c_int) -> io::Result<()> {
    let target = path_cstring(target)?;
    // SAFETY: `target` is a NUL-terminated string alive for the call.
    cvt_int(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

/// `pivot_root(new_root, put_old)`.
pub(super) fn pivot_root(new_root: &std::path::Path, put_old: &std::path::Path) -> io::Result<()> {
    let new_root = path_cstring(new_root)?;
    let put_old = path_cstring(put_old)?;
    // SAFETY: both are NUL-terminated strings alive for the call.
    cvt(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

/// The kernel's `struct mount_attr` (Linux 5.12+).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(super) const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE, {attr_set})`: sets mount
/// flags on the mount at `path` and every mount below it.
pub(super) fn mount_setattr_recursive(path: &std::path::Path, attr_set: u64) -> io::Result<()> {
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let path = path_cstring(path)?;
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a NUL-terminated string and `attr` a live struct of
    // the size passed; the kernel only reads them.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `waitpid(pid, __WALL)`: reaps one (killed) child adopted by this
/// subreaper.
pub(super) fn reap(pid: i32) -> io::Result<()> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int for waitpid to write.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        match cvt_int(rc) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `waitpid(pid, __WALL)` returning the reaped pid and its raw wait status;
/// `pid` -1 reaps any child. `ECHILD` when there is none.
pub(super) fn wait_any(pid: i32) -> io::Result<(i32, i32)> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int for waitpid to write.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        match cvt_int(rc) {
            Ok(reaped) => return Ok((reaped, status)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Which side of a `fork` this is.
pub(super) enum Forked {
    Child,
    /// The child's pid.
    Parent(i32),
}

/// `fork()`. Only for a single-threaded caller (stage 2), so the child may
/// run ordinary code until it execs.
pub(super) fn fork_single_threaded() -> io::Result<Forked> {
    // SAFETY: the caller is single-threaded (stage 2 checks it first), so
    // no lock or allocator state of another thread is copied half-held.
    match cvt_int(unsafe { libc::fork() })? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// `prctl(PR_SET_DUMPABLE, 0)`: no process without `CAP_SYS_PTRACE` may
/// trace this one or open its `/proc/<pid>/mem`, even one of the same uid.
pub(super) fn set_not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    cvt_int(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }).map(drop)
}

/// SIGSEGV and SIGBUS back to their default action. The Rust runtime
/// catches them (stack-overflow reports); the init of a PID namespace
/// receives no signal from inside it that it has no handler for, so with
/// none installed a job process cannot make it run code by signalling it.
pub(super) fn default_fault_signals() -> io::Result<()> {
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        // SAFETY: installing SIG_DFL runs no handler code.
        if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A close-on-exec pipe: (read end, write end).
pub(super) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `_exit(code)`: ends a forked child without running the parent's exit
/// handlers or flushing its buffers a second time.
pub(super) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no memory of ours.
    unsafe { libc::_exit(code) }
}

/// The sandbox's exactness sentinel: `socket(AF_INET, SOCK_DGRAM |
/// SOCK_CLOEXEC, 0)`, which the counted filter of every profile hands to
/// the supervisor. The supervisor knows the caller's pid, answers `EACCES`
/// and does not count it. Anything but `EACCES` means the counted filter
/// or the supervisor is not what stage 2 expects.
pub(super) fn sentinel_call() -> io::Result<()> {
    // SAFETY: socket takes plain integers and returns a descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd >= 0 {
        // SAFETY: the descriptor was just made and is owned by nobody else.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        return Err(io::Error::other(
            "the sentinel socket(AF_INET) succeeded: the counted filter is not in place",
        ));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EACCES) {
        Ok(())
    } else {
        Err(e)
    }
}
