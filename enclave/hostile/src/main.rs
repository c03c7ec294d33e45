//! `kolm-hostile`: a test-only program that tries to get data out of the
//! kolm job sandbox every way the sandbox is meant to stop, one scenario per
//! invocation, using raw system calls (no libc socket wrappers).
//!
//! Each scenario prints one JSON object to stdout: the scenario name, every
//! attempt with its return value and errno, and what the sandbox should have
//! counted (`expect_counted`, and `expect_families` keyed by family number),
//! so the integration tests in `enclave/tests/hostile.rs` can compare it
//! with the sandbox record exactly.
//!
//! It never sends traffic: every address it names is loopback, it never
//! connects to a vsock CID, and under the sandbox no network socket exists.
//! Run outside the sandbox it only creates sockets and closes them.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use serde_json::{Value, json};

/// Raw system call with up to six arguments; returns `(ret, errno)` with
/// errno 0 on success.
fn sys(nr: libc::c_long, a: [u64; 6]) -> (i64, i32) {
    // SAFETY: test program; every caller passes arguments that are plain
    // integers or pointers to live, correctly sized buffers for `nr`.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        (
            -1,
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        )
    } else {
        (r, 0)
    }
}

fn close(fd: i64) {
    if fd >= 0 {
        sys(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    }
}

/// Collects attempts and expectations; prints them as JSON.
#[derive(Default)]
struct Report {
    attempts: Vec<Value>,
    counted: u64,
    families: BTreeMap<u32, u64>,
    extra: serde_json::Map<String, Value>,
}

impl Report {
    fn attempt(&mut self, what: &str, (ret, errno): (i64, i32)) -> (i64, i32) {
        self.attempts
            .push(json!({"what": what, "ret": ret, "errno": errno}));
        (ret, errno)
    }

    /// A socket()/socketpair() the sandbox must count (family != AF_UNIX
    /// unless `strict`).
    fn socket(&mut self, what: &str, domain: u64, ty: u64, proto: u64, strict: bool) {
        let r = sys(libc::SYS_socket, [domain, ty, proto, 0, 0, 0]);
        close(r.0);
        self.attempt(what, r);
        let family = domain as u32;
        if family != libc::AF_UNIX as u32 || strict {
            self.counted += 1;
            *self.families.entry(family).or_default() += 1;
        }
    }

    fn print(self, scenario: &str) {
        let fams: BTreeMap<String, u64> = self
            .families
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let mut v = json!({
            "scenario": scenario,
            "attempts": self.attempts,
            "expect_counted": self.counted,
            "expect_families": fams,
        });
        if let Some(obj) = v.as_object_mut() {
            obj.extend(self.extra);
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // `gpu-then SCENARIO ...`: bring CUDA up first (a context, device
    // memory, a memset on the GPU), keep it up, then run the scenario: the
    // attacks of a GPU job, with the driver's threads and sockets alive.
    if args.first().is_some_and(|a| a == "gpu-then") {
        args.remove(0);
        gpu_up();
    }
    let scenario = args.first().map(String::as_str).unwrap_or("");
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let strict = std::env::var("KOLM_HOSTILE_STRICT").is_ok_and(|v| v == "1");
    let mut r = Report::default();
    match scenario {
        "families" => families(&mut r, strict),
        "io-uring" => io_uring(&mut r),
        "int80" => int80(),
        "int80-child" => int80_child(&mut r),
        "escape" => escape(&mut r, &arg(1)),
        "x32" => x32(&mut r),
        "threads" => threads(&mut r),
        "fork-exec" => fork_exec(&mut r),
        "fds" => fds(&mut r, arg(1).parse().ok()),
        "fd-theft" => fd_theft(&mut r),
        "listener" => listener(&mut r),
        "kill-supervisor" => kill_supervisor(&mut r),
        "dns" => dns(&mut r, &arg(1)),
        "unshare" => unshare(&mut r),
        "kernel" => kernel(&mut r),
        "flood" => flood(&mut r, arg(1).parse().unwrap_or(1000)),
        "read-files" => read_files(&mut r, &args[1..]),
        "heartbeat" => heartbeat(&arg(1)),
        "deadline" => deadline(&arg(1)),
        "signal-storm" => signal_storm(&mut r, arg(1).parse().unwrap_or(100_000), &arg(2)),
        "timer-storm" => timer_storm(
            &mut r,
            arg(1).parse().unwrap_or(5000),
            arg(2).parse().unwrap_or(8000),
        ),
        "int80-children" => int80_children(&mut r, arg(1).parse().unwrap_or(10), &arg(2)),
        "bench-syscalls" => bench_syscalls(&mut r, arg(1).parse().unwrap_or(1_000_000), &arg(2)),
        "ids" => ids(&mut r),
        "ipc-plant" => ipc_plant(&mut r, &arg(1)),
        "ipc-probe" => ipc_probe(&mut r, &args[1..]),
        "unix-connect" => unix_connect(&mut r, &arg(1)),
        "abstract-connect" => abstract_connect(&mut r, &arg(1)),
        "memfd-exec" => memfd_exec(&mut r, &arg(1)),
        "memfd-payload" => memfd_payload(),
        other => {
            eprintln!("kolm-hostile: unknown scenario {other:?}");
            std::process::exit(2);
        }
    }
    r.print(scenario);
}

/// Every address family with every common type, MPTCP, and domains with
/// high bits set.
fn families(r: &mut Report, strict: bool) {
    const IPPROTO_MPTCP: u64 = 262;
    let types = [
        ("STREAM", libc::SOCK_STREAM),
        ("DGRAM", libc::SOCK_DGRAM),
        ("RAW", libc::SOCK_RAW),
        ("SEQPACKET", libc::SOCK_SEQPACKET),
    ];
    for family in 0u64..=45 {
        if family == libc::AF_UNIX as u64 {
            continue;
        }
        for (tname, ty) in types {
            r.socket(
                &format!("family {family} {tname}"),
                family,
                ty as u64,
                0,
                strict,
            );
        }
    }
    let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
    let named = [
        (
            "AF_INET tcp nonblock cloexec",
            libc::AF_INET as u64,
            libc::SOCK_STREAM as u64 | flags,
            0,
        ),
        (
            "AF_INET MPTCP",
            libc::AF_INET as u64,
            libc::SOCK_STREAM as u64,
            IPPROTO_MPTCP,
        ),
        (
            "AF_INET6 MPTCP",
            libc::AF_INET6 as u64,
            libc::SOCK_STREAM as u64,
            IPPROTO_MPTCP,
        ),
        (
            "AF_INET raw icmp",
            libc::AF_INET as u64,
            libc::SOCK_RAW as u64,
            libc::IPPROTO_ICMP as u64,
        ),
        (
            "AF_PACKET raw ETH_P_ALL",
            libc::AF_PACKET as u64,
            libc::SOCK_RAW as u64,
            0x0300,
        ),
        (
            "AF_NETLINK route",
            libc::AF_NETLINK as u64,
            libc::SOCK_RAW as u64,
            0,
        ),
        (
            "AF_VSOCK stream",
            libc::AF_VSOCK as u64,
            libc::SOCK_STREAM as u64,
            0,
        ),
        ("AF_XDP", libc::AF_XDP as u64, libc::SOCK_RAW as u64, 0),
        (
            "AF_ALG",
            libc::AF_ALG as u64,
            libc::SOCK_SEQPACKET as u64,
            0,
        ),
        // High bits: the kernel reads an int, so these are AF_INET/AF_INET6.
        (
            "AF_INET with high bits",
            0x0000_0001_0000_0002,
            libc::SOCK_STREAM as u64,
            0,
        ),
        (
            "AF_INET6 with high bits",
            0xffff_ffff_0000_000a,
            libc::SOCK_DGRAM as u64,
            0,
        ),
        // Bit 31 set in the int itself: an invalid family, still counted.
        ("bit 31 domain", 0x8000_0002, libc::SOCK_STREAM as u64, 0),
        ("all ones domain", u64::MAX, libc::SOCK_STREAM as u64, 0),
    ];
    for (what, d, t, p) in named {
        r.socket(what, d, t, p, strict);
    }
    // AF_UNIX with high bits is AF_UNIX to the kernel: allowed by default.
    r.socket(
        "AF_UNIX with high bits",
        0x0000_0001_0000_0001,
        libc::SOCK_STREAM as u64,
        0,
        strict,
    );
    r.socket(
        "AF_UNIX",
        libc::AF_UNIX as u64,
        libc::SOCK_STREAM as u64,
        0,
        strict,
    );
    // socketpair: only AF_UNIX pairs exist; anything else is counted.
    let mut sv = [0i32; 2];
    let p = sys(
        libc::SYS_socketpair,
        [
            libc::AF_INET as u64,
            libc::SOCK_STREAM as u64,
            0,
            sv.as_mut_ptr() as u64,
            0,
            0,
        ],
    );
    r.attempt("socketpair AF_INET", p);
    r.counted += 1;
    *r.families.entry(libc::AF_INET as u32).or_default() += 1;
    let p = sys(
        libc::SYS_socketpair,
        [
            libc::AF_UNIX as u64,
            libc::SOCK_STREAM as u64,
            0,
            sv.as_mut_ptr() as u64,
            0,
            0,
        ],
    );
    r.attempt("socketpair AF_UNIX", p);
    if p.0 == 0 {
        close(i64::from(sv[0]));
        close(i64::from(sv[1]));
    }
}

/// io_uring opens and connects sockets without socket(2): the ring itself
/// is refused (and counted), so IORING_OP_SOCKET/CONNECT cannot be queued.
fn io_uring(r: &mut Report) {
    let mut params = [0u8; 120];
    r.attempt(
        "io_uring_setup",
        sys(
            libc::SYS_io_uring_setup,
            [8, params.as_mut_ptr() as u64, 0, 0, 0, 0],
        ),
    );
    r.attempt(
        "io_uring_enter",
        sys(libc::SYS_io_uring_enter, [0, 1, 0, 0, 0, 0]),
    );
    r.attempt(
        "io_uring_register",
        sys(libc::SYS_io_uring_register, [0, 0, 0, 0, 0, 0]),
    );
    r.counted += 3;
}

/// 32-bit `int 0x80` socketcall(SYS_SOCKET): the counted filter hands every
/// foreign-ABI call to the supervisor, which counts it and answers
/// `ENOSYS` (-38) before the call runs. (Until issue 12 the architecture
/// check killed the process with SIGSYS.)
fn int80() {
    println!("{{\"scenario\":\"int80\",\"before\":true}}");
    let _ = std::io::stdout().flush();
    #[cfg(target_arch = "x86_64")]
    {
        let ret = int80_socketcall();
        println!("{{\"scenario\":\"int80\",\"survived\":true,\"ret\":{ret}}}");
    }
    std::process::exit(0);
}

/// socketcall(SYS_SOCKET, AF_INET, SOCK_STREAM) through the i386 gate.
#[cfg(target_arch = "x86_64")]
fn int80_socketcall() -> i32 {
    let args: [u32; 3] = [libc::AF_INET as u32, libc::SOCK_STREAM as u32, 0];
    let ret: i32;
    // SAFETY: int 0x80 is the i386 system call gate; socketcall (102)
    // reads three u32 arguments from `args`, which is live. The sandbox
    // kills the process before the kernel looks at it.
    unsafe {
        std::arch::asm!(
            "xchg {call:r}, rbx",
            "int 0x80",
            "xchg {call:r}, rbx",
            call = inout(reg) 1u64 => _,
            inlateout("eax") 102i32 => ret,
            in("rcx") args.as_ptr(),
            options(nostack)
        );
    }
    ret
}

/// The same 32-bit call from a forked child, which reports what it got
/// back as its exit code (`child_ret`: 38 for `ENOSYS`) and how it ended
/// (`child_signal`). Until issue 12 the child died of SIGSYS, seen only by
/// this process, and the record did not count it.
fn int80_child(r: &mut Report) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: this process is single-threaded here; the child makes one
        // raw system call and `_exit`s if it survives.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ret = int80_socketcall();
            // SAFETY: _exit ends the child without running destructors.
            unsafe { libc::_exit(-ret) };
        }
        let mut status = 0;
        // SAFETY: `status` is a valid int for waitpid to write.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let signal = if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            0
        };
        r.extra.insert("child_signal".into(), json!(signal));
        if libc::WIFEXITED(status) {
            r.extra
                .insert("child_ret".into(), json!(-libc::WEXITSTATUS(status)));
        }
    }
}

/// A child leaves the job's process group (`setsid`), so the kill at the
/// job's end misses it, and outlives the listener: it waits for `dir/go`
/// (the test writes it once `sandbox-exec` has exited), then tries a socket
/// and writes what it got to `dir/after.json`. Nothing is counted: the
/// attempt comes after the listener closed.
fn escape(r: &mut Report, dir: &str) {
    // SAFETY: this process is single-threaded here; the child only sleeps,
    // touches files and makes raw system calls before `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: setsid takes no arguments; it fails only for a group
        // leader, which a fresh child is not.
        unsafe { libc::setsid() };
        let dir = std::path::Path::new(dir);
        let start = Instant::now();
        while !dir.join("go").exists() && start.elapsed().as_secs() < 60 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let (ret, errno) = sys(
            libc::SYS_socket,
            [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0],
        );
        close(ret);
        let _ = std::fs::write(
            dir.join("after.json"),
            json!({"ret": ret, "errno": errno}).to_string(),
        );
        // SAFETY: _exit ends the child without running destructors.
        unsafe { libc::_exit(0) };
    }
    // Leave only once the child is out of the group, or the kill at the
    // job's end may still catch it.
    // SAFETY: getpgid/getpgrp take plain ids and touch no memory.
    while unsafe { libc::getpgid(pid) == libc::getpgrp() } {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    r.extra.insert("escaped_pid".into(), json!(pid));
}

/// x32 system call numbers (bit 30 set) pass the x86_64 architecture check;
/// the kernel must answer ENOSYS (the sandbox's start-up self-test).
fn x32(r: &mut Report) {
    const X32: libc::c_long = 0x4000_0000;
    r.attempt(
        "x32 socket",
        sys(
            X32 | libc::SYS_socket,
            [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        ),
    );
    r.attempt("x32 getpid", sys(X32 | libc::SYS_getpid, [0; 6]));
    // x32-only numbers (512+): recvmsg, sendmsg.
    r.attempt("x32 recvmsg (519)", sys(X32 | 519, [0; 6]));
    r.attempt("x32 sendmsg (518)", sys(X32 | 518, [0; 6]));
}

fn socket_burst(n: u64) -> u64 {
    let mut refused = 0;
    for _ in 0..n {
        let (fd, errno) = sys(
            libc::SYS_socket,
            [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        );
        close(fd);
        if errno == libc::EACCES {
            refused += 1;
        }
    }
    refused
}

/// Attempts from threads created before and after the first attempt.
fn threads(r: &mut Report) {
    let early = std::thread::spawn(|| socket_burst(1000));
    let main_first = socket_burst(500);
    let late: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(|| socket_burst(700)))
        .collect();
    let mut refused = main_first + early.join().unwrap_or(0);
    for t in late {
        refused += t.join().unwrap_or(0);
    }
    let total = 1000 + 500 + 3 * 700;
    r.counted += total;
    *r.families.entry(libc::AF_INET as u32).or_default() += total;
    r.extra.insert("refused".into(), json!(refused));
}

/// A forked child and an exec'd grandchild try too; both are counted.
fn fork_exec(r: &mut Report) {
    // SAFETY: this process is single-threaded here; the child only makes
    // raw system calls and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let n = socket_burst(100);
        // SAFETY: _exit ends the child without running destructors.
        unsafe { libc::_exit(if n == 100 { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid int for waitpid to write.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    r.extra.insert("fork_child_status".into(), json!(status));
    // Through the magic link: no path walk (and so no directory permission
    // check as the job uid) between here and the binary.
    let out = std::process::Command::new("/proc/self/exe")
        .args(["flood", "250"])
        .output();
    let ok = out.as_ref().is_ok_and(|o| o.status.success());
    r.extra.insert("exec_child_ok".into(), json!(ok));
    if let Ok(o) = out {
        let child: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        r.extra.insert("exec_child".into(), child);
    }
    r.counted += 350;
    *r.families.entry(libc::AF_INET as u32).or_default() += 350;
}

/// Lists open descriptors above 2 and tries to send on `inherited`, a
/// descriptor number the test left open (without CLOEXEC) in the
/// supervisor's parent. It must not exist here.
fn fds(r: &mut Report, inherited: Option<u64>) {
    let mut open = Vec::new();
    for fd in 3..=4096u64 {
        if sys(libc::SYS_fcntl, [fd, libc::F_GETFD as u64, 0, 0, 0, 0]).0 >= 0 {
            open.push(fd);
        }
    }
    r.extra.insert("open_fds".into(), json!(open));
    if let Some(fd) = inherited {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 9u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let msg = b"x";
        r.attempt(
            "sendto inherited fd",
            sys(
                libc::SYS_sendto,
                [
                    fd,
                    msg.as_ptr() as u64,
                    1,
                    0,
                    &addr as *const libc::sockaddr_in as u64,
                    std::mem::size_of::<libc::sockaddr_in>() as u64,
                ],
            ),
        );
    }
}

/// Steal a descriptor from the supervisor or read its memory.
fn fd_theft(r: &mut Report) {
    // SAFETY: getppid cannot fail.
    let ppid = unsafe { libc::getppid() } as u64;
    let (pidfd, _) = r.attempt(
        "pidfd_open(parent)",
        sys(libc::SYS_pidfd_open, [ppid, 0, 0, 0, 0, 0]),
    );
    for target in 0..8u64 {
        r.attempt(
            &format!("pidfd_getfd(parent, {target})"),
            sys(
                libc::SYS_pidfd_getfd,
                [pidfd.max(0) as u64, target, 0, 0, 0, 0],
            ),
        );
    }
    close(pidfd);
    r.attempt(
        "ptrace(ATTACH, parent)",
        sys(
            libc::SYS_ptrace,
            [libc::PTRACE_ATTACH as u64, ppid, 0, 0, 0, 0],
        ),
    );
    r.attempt(
        "ptrace(TRACEME)",
        sys(
            libc::SYS_ptrace,
            [libc::PTRACE_TRACEME as u64, 0, 0, 0, 0, 0],
        ),
    );
    let mut buf = [0u8; 16];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: 0x1000 as *mut libc::c_void,
        iov_len: 16,
    };
    r.attempt(
        "process_vm_readv(parent)",
        sys(
            libc::SYS_process_vm_readv,
            [
                ppid,
                &local as *const _ as u64,
                1,
                &remote as *const _ as u64,
                1,
                0,
            ],
        ),
    );
    r.attempt(
        "process_vm_writev(parent)",
        sys(
            libc::SYS_process_vm_writev,
            [
                ppid,
                &local as *const _ as u64,
                1,
                &remote as *const _ as u64,
                1,
                0,
            ],
        ),
    );
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() } as u64;
    r.attempt(
        "kcmp(self, parent, KCMP_FILE)",
        sys(libc::SYS_kcmp, [me, ppid, 0, 0, 0, 0]),
    );
}

/// A classic-BPF program, as `struct sock_filter`.
#[repr(C)]
struct Insn(u16, u8, u8, u32);
#[repr(C)]
struct Fprog {
    len: u16,
    filter: *const Insn,
}

/// Install a filter of its own: with a listener (to answer its own
/// notifications), or one that returns EPERM for socket() so its attempts
/// never reach the supervisor's counter. Then one socket() that must still
/// be counted.
fn listener(r: &mut Report) {
    let allow = [Insn(0x06, 0, 0, 0x7fff_0000)];
    let prog = Fprog {
        len: 1,
        filter: allow.as_ptr(),
    };
    r.attempt(
        "seccomp(SET_MODE_FILTER, NEW_LISTENER)",
        sys(
            libc::SYS_seccomp,
            [
                libc::SECCOMP_SET_MODE_FILTER as u64,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const Fprog as u64,
                0,
                0,
                0,
            ],
        ),
    );
    // ld nr; jeq socket ? errno(EPERM) : allow
    let hide = [
        Insn(0x20, 0, 0, 0),
        Insn(0x15, 0, 1, libc::SYS_socket as u32),
        Insn(0x06, 0, 0, 0x0005_0001),
        Insn(0x06, 0, 0, 0x7fff_0000),
    ];
    let prog = Fprog {
        len: 4,
        filter: hide.as_ptr(),
    };
    r.attempt(
        "seccomp(SET_MODE_FILTER) hiding socket()",
        sys(
            libc::SYS_seccomp,
            [
                libc::SECCOMP_SET_MODE_FILTER as u64,
                0,
                &prog as *const Fprog as u64,
                0,
                0,
                0,
            ],
        ),
    );
    r.attempt(
        "prctl(PR_SET_SECCOMP) hiding socket()",
        sys(
            libc::SYS_prctl,
            [
                libc::PR_SET_SECCOMP as u64,
                libc::SECCOMP_MODE_FILTER as u64,
                &prog as *const Fprog as u64,
                0,
                0,
                0,
            ],
        ),
    );
    r.socket(
        "socket after",
        libc::AF_INET as u64,
        libc::SOCK_STREAM as u64,
        0,
        false,
    );
}

/// Kill the supervisor (the parent), then keep trying.
fn kill_supervisor(r: &mut Report) {
    // SAFETY: getppid cannot fail.
    let ppid = unsafe { libc::getppid() } as u64;
    r.extra.insert("ppid".into(), json!(ppid));
    if ppid == 0 {
        // The job is the init of a PID namespace: its parent, the
        // supervisor, lies outside it and has no pid here to signal (and
        // kill(0, ...) would signal the job's own group).
        r.socket(
            "socket after",
            libc::AF_INET as u64,
            libc::SOCK_STREAM as u64,
            0,
            false,
        );
        return;
    }
    r.attempt(
        "kill(parent, 0)",
        sys(libc::SYS_kill, [ppid, 0, 0, 0, 0, 0]),
    );
    r.attempt(
        "kill(parent, SIGKILL)",
        sys(libc::SYS_kill, [ppid, libc::SIGKILL as u64, 0, 0, 0, 0]),
    );
    r.attempt(
        "kill(parent, SIGSTOP)",
        sys(libc::SYS_kill, [ppid, libc::SIGSTOP as u64, 0, 0, 0, 0]),
    );
    r.socket(
        "socket after",
        libc::AF_INET as u64,
        libc::SOCK_STREAM as u64,
        0,
        false,
    );
}

/// Name resolution through the C library: whatever sockets it tries are
/// refused and counted; the lookup fails.
fn dns(r: &mut Report, name: &str) {
    let host = std::ffi::CString::new(name).unwrap_or_default();
    let port = c"80";
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: host and port are NUL-terminated; hints may be NULL; `res` is
    // a valid out-pointer, freed below if set.
    let rc = unsafe { libc::getaddrinfo(host.as_ptr(), port.as_ptr(), std::ptr::null(), &mut res) };
    if !res.is_null() {
        // SAFETY: `res` came from getaddrinfo.
        unsafe { libc::freeaddrinfo(res) };
    }
    r.extra.insert("getaddrinfo_rc".into(), json!(rc));
}

/// New namespaces: unshare, setns, clone with namespace flags, clone3.
fn unshare(r: &mut Report) {
    let user_net = (libc::CLONE_NEWUSER | libc::CLONE_NEWNET) as u64;
    r.attempt(
        "unshare(NEWUSER|NEWNET)",
        sys(libc::SYS_unshare, [user_net, 0, 0, 0, 0, 0]),
    );
    r.attempt(
        "unshare(NEWNET)",
        sys(
            libc::SYS_unshare,
            [libc::CLONE_NEWNET as u64, 0, 0, 0, 0, 0],
        ),
    );
    r.attempt(
        "setns(0, NEWNET)",
        sys(libc::SYS_setns, [0, libc::CLONE_NEWNET as u64, 0, 0, 0, 0]),
    );
    let flags = user_net | libc::SIGCHLD as u64;
    let c = r.attempt(
        "clone(NEWUSER|NEWNET)",
        sys(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]),
    );
    if c.0 == 0 {
        // SAFETY: we are the (unexpected) child: leave at once.
        unsafe { libc::_exit(0) };
    }
    // struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, ...
    let mut args = [0u64; 11];
    args[0] = user_net;
    args[4] = libc::SIGCHLD as u64;
    let c = r.attempt(
        "clone3(NEWUSER|NEWNET)",
        sys(libc::SYS_clone3, [args.as_mut_ptr() as u64, 88, 0, 0, 0, 0]),
    );
    if c.0 == 0 {
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
}

/// Kernel surfaces the deny filter removes.
fn kernel(r: &mut Report) {
    r.attempt("bpf(PROG_LOAD)", sys(libc::SYS_bpf, [5, 0, 0, 0, 0, 0]));
    r.attempt(
        "perf_event_open",
        sys(libc::SYS_perf_event_open, [0, 0, u64::MAX, u64::MAX, 0, 0]),
    );
    let (ty, desc, data) = (c"user", c"kolm", c"secret");
    r.attempt(
        "add_key",
        sys(
            libc::SYS_add_key,
            [
                ty.as_ptr() as u64,
                desc.as_ptr() as u64,
                data.as_ptr() as u64,
                6,
                (-2i64) as u64,
                0,
            ],
        ),
    );
    r.attempt(
        "keyctl(GET_KEYRING_ID)",
        sys(libc::SYS_keyctl, [0, (-2i64) as u64, 0, 0, 0, 0]),
    );
    let (src, dst, fs) = (c"none", c"/tmp", c"tmpfs");
    r.attempt(
        "mount(tmpfs)",
        sys(
            libc::SYS_mount,
            [
                src.as_ptr() as u64,
                dst.as_ptr() as u64,
                fs.as_ptr() as u64,
                0,
                0,
                0,
            ],
        ),
    );
    r.attempt(
        "umount2(/)",
        sys(libc::SYS_umount2, [c"/".as_ptr() as u64, 0, 0, 0, 0, 0]),
    );
    r.attempt(
        "open_by_handle_at",
        sys(libc::SYS_open_by_handle_at, [0, 0, 0, 0, 0, 0]),
    );
    r.attempt(
        "fsopen(tmpfs)",
        sys(libc::SYS_fsopen, [fs.as_ptr() as u64, 0, 0, 0, 0, 0]),
    );
}

/// `n` socket() calls; every one must be counted.
fn flood(r: &mut Report, n: u64) {
    let start = Instant::now();
    let refused = socket_burst(n);
    let ns = start.elapsed().as_nanos() as u64;
    r.counted += n;
    *r.families.entry(libc::AF_INET as u32).or_default() += n;
    r.extra.insert("refused".into(), json!(refused));
    r.extra.insert("elapsed_ns".into(), json!(ns));
}

/// Opens each path for reading; reports the errno (Landlock's view).
fn read_files(r: &mut Report, paths: &[String]) {
    for p in paths {
        let res = std::fs::read(p);
        let errno = res
            .as_ref()
            .err()
            .and_then(|e| e.raw_os_error())
            .unwrap_or(0);
        r.attempt(
            &format!("read {p}"),
            (if res.is_ok() { 0 } else { -1 }, errno),
        );
    }
}

/// Writes its pid to `path`, then waits to be killed (the parent-death
/// test).
/// Runs forever: a `setsid()` child makes `socket(AF_INET)` calls in a loop
/// and writes to `dir/child` how many it has started (before each call),
/// while this process sleeps. For the deadline test.
fn deadline(dir: &str) -> ! {
    // SAFETY: single-threaded here; the child only loops on system calls
    // and file writes.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: setsid takes no arguments.
        unsafe { libc::setsid() };
        let mut n = 0u64;
        loop {
            n += 1;
            let _ = std::fs::write(format!("{dir}/child"), n.to_string());
            sys(libc::SYS_socket, [libc::AF_INET as u64, 1, 0, 0, 0, 0]);
        }
    }
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn heartbeat(path: &str) {
    let _ = std::fs::write(path, std::process::id().to_string());
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `n` iterations of getpid + read(stdin, 1 byte) (stdin is /dev/null):
/// allowed system calls, for the overhead benchmark. With `allow-filter`
/// (outside the sandbox) it first installs a one-instruction ALLOW filter,
/// to measure what any seccomp filter costs, whatever its rules.
fn bench_syscalls(r: &mut Report, n: u64, mode: &str) {
    if mode == "allow-filter" {
        let allow = [Insn(0x06, 0, 0, 0x7fff_0000)];
        let prog = Fprog {
            len: 1,
            filter: allow.as_ptr(),
        };
        r.attempt(
            "prctl(PR_SET_NO_NEW_PRIVS)",
            sys(
                libc::SYS_prctl,
                [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0, 0],
            ),
        );
        r.attempt(
            "seccomp(allow-all)",
            sys(
                libc::SYS_seccomp,
                [
                    libc::SECCOMP_SET_MODE_FILTER as u64,
                    0,
                    &prog as *const Fprog as u64,
                    0,
                    0,
                    0,
                ],
            ),
        );
    }
    let mut b = [0u8; 1];
    let start = Instant::now();
    for _ in 0..n {
        sys(libc::SYS_getpid, [0; 6]);
        sys(libc::SYS_read, [0, b.as_mut_ptr() as u64, 1, 0, 0, 0]);
    }
    let ns = start.elapsed().as_nanos() as u64;
    r.extra.insert("iterations".into(), json!(n));
    r.extra.insert("elapsed_ns".into(), json!(ns));
}

/// The job's view of itself: pid, parent, ids (issue 12, item 2: a PID
/// namespace of its own and ids of its own).
fn ids(r: &mut Report) {
    // SAFETY: these take no arguments and cannot fail.
    let (pid, ppid, uid, gid) = unsafe {
        (
            libc::getpid(),
            libc::getppid(),
            libc::getuid(),
            libc::getgid(),
        )
    };
    r.extra.insert("pid".into(), json!(pid));
    r.extra.insert("ppid".into(), json!(ppid));
    r.extra.insert("uid".into(), json!(uid));
    r.extra.insert("gid".into(), json!(gid));
}

fn parse_key(key: &str) -> u64 {
    let k = key.trim_start_matches("0x");
    i32::from_str_radix(k, 16).unwrap_or(0) as u32 as u64
}

/// Leaves a SysV shared-memory segment and a message queue holding a
/// secret under `key` (hex), and does not remove them: the next job must
/// not find them (issue 12, item 2).
fn ipc_plant(r: &mut Report, key: &str) {
    let key = parse_key(key);
    let create = (libc::IPC_CREAT | 0o666) as u64;
    let (shm, _) = r.attempt(
        "shmget(IPC_CREAT)",
        sys(libc::SYS_shmget, [key, 4096, create, 0, 0, 0]),
    );
    if shm >= 0 {
        let (addr, _) = r.attempt("shmat", sys(libc::SYS_shmat, [shm as u64, 0, 0, 0, 0, 0]));
        if addr > 0 {
            let secret = b"kolm-secret";
            // SAFETY: `addr` is a fresh 4096-byte mapping of the segment.
            unsafe {
                std::ptr::copy_nonoverlapping(secret.as_ptr(), addr as *mut u8, secret.len())
            };
            sys(libc::SYS_shmdt, [addr as u64, 0, 0, 0, 0, 0]);
        }
    }
    let (q, _) = r.attempt(
        "msgget(IPC_CREAT)",
        sys(libc::SYS_msgget, [key, create, 0, 0, 0, 0]),
    );
    if q >= 0 {
        // struct msgbuf { long mtype; char mtext[16]; }
        let mut msg = [0u8; 24];
        msg[..8].copy_from_slice(&1i64.to_ne_bytes());
        msg[8..19].copy_from_slice(b"kolm-secret");
        r.attempt(
            "msgsnd",
            sys(
                libc::SYS_msgsnd,
                [
                    q as u64,
                    msg.as_ptr() as u64,
                    16,
                    libc::IPC_NOWAIT as u64,
                    0,
                    0,
                ],
            ),
        );
    }
}

/// Looks for SysV objects under each key (hex) without creating them.
fn ipc_probe(r: &mut Report, keys: &[String]) {
    for k in keys {
        let key = parse_key(k);
        r.attempt(
            &format!("shmget({k})"),
            sys(libc::SYS_shmget, [key, 0, 0, 0, 0, 0]),
        );
        r.attempt(
            &format!("msgget({k})"),
            sys(libc::SYS_msgget, [key, 0, 0, 0, 0, 0]),
        );
    }
}

/// Connects an AF_UNIX stream socket (allowed in the default profile) to
/// `addr` and, if that works, sends a byte and waits briefly for a
/// descriptor (`SCM_RIGHTS`), which it then tries to send on: the host
/// daemon egress of issue 12, item 3.
fn unix_connect_to(r: &mut Report, addr: &libc::sockaddr_un, len: usize) {
    let (fd, _) = r.attempt(
        "socket(AF_UNIX)",
        sys(
            libc::SYS_socket,
            [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        ),
    );
    if fd < 0 {
        return;
    }
    let (c, _) = r.attempt(
        "connect",
        sys(
            libc::SYS_connect,
            [fd as u64, addr as *const _ as u64, len as u64, 0, 0, 0],
        ),
    );
    if c == 0 {
        let b = b"x";
        r.attempt(
            "send",
            sys(libc::SYS_sendto, [fd as u64, b.as_ptr() as u64, 1, 0, 0, 0]),
        );
        let mut data = [0u8; 16];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        let mut control = [0u64; 8];
        // SAFETY: an all-zero msghdr is valid; fields are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        let (n, _) = r.attempt(
            "recvmsg(SCM_RIGHTS)",
            sys(
                libc::SYS_recvmsg,
                [
                    fd as u64,
                    &mut msg as *mut _ as u64,
                    libc::MSG_DONTWAIT as u64,
                    0,
                    0,
                    0,
                ],
            ),
        );
        if n > 0 && msg.msg_controllen > 0 {
            // SAFETY: the kernel filled a control message; the first one's
            // data is an int when it is SCM_RIGHTS.
            let got = unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                if !cmsg.is_null() && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    Some(std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<i32>(),
                    ))
                } else {
                    None
                }
            };
            if let Some(passed) = got {
                r.attempt(
                    "send on the received fd",
                    sys(
                        libc::SYS_sendto,
                        [passed as u64, b.as_ptr() as u64, 1, 0, 0, 0],
                    ),
                );
            }
        }
    }
    close(fd);
}

/// A pathname unix socket outside the job's trees.
fn unix_connect(r: &mut Report, path: &str) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_bytes();
    let n = bytes.len().min(addr.sun_path.len() - 1);
    for (d, s) in addr.sun_path.iter_mut().zip(&bytes[..n]) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + n + 1;
    unix_connect_to(r, &addr, len);
}

/// An abstract unix socket (a name in the network namespace, no file).
fn abstract_connect(r: &mut Report, name: &str) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    let n = bytes.len().min(addr.sun_path.len() - 1);
    // sun_path[0] stays 0: abstract.
    for (d, s) in addr.sun_path[1..].iter_mut().zip(&bytes[..n]) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + n;
    unix_connect_to(r, &addr, len);
}

/// What `memfd-exec` runs if an exec works: prints a marker, exits 42.
fn memfd_payload() -> ! {
    println!("{{\"payload\":\"ran\"}}");
    let _ = std::io::stdout().flush();
    std::process::exit(42);
}

/// In a forked child, runs `exec` (which replaces the child with this
/// program's `memfd-payload` scenario if it works) and reports `(0, 0)` if
/// the payload ran, else `(-1, errno)` of the failed exec.
fn exec_in_child(r: &mut Report, what: &str, exec: &dyn Fn() -> i32) {
    // SAFETY: this process is single-threaded here; the child only makes
    // raw system calls and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let errno = exec();
        // SAFETY: _exit ends the child without running destructors.
        unsafe { libc::_exit(errno.clamp(1, 41)) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid int for waitpid to write.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    r.attempt(what, if code == 42 { (0, 0) } else { (-1, code) });
}

/// Runs code that is not on the execute allow-list: its own binary copied
/// into a memfd and executed by descriptor (`execveat(AT_EMPTY_PATH)`, as
/// `fexecve` does) and through `/proc/self/fd/N`; an `MFD_EXEC` memfd; and a
/// copy written into the read-write tree `dir` (issue 12, item 11).
fn memfd_exec(r: &mut Report, dir: &str) {
    const MFD_CLOEXEC: u64 = 0x1;
    const MFD_EXEC: u64 = 0x10;
    let image = std::env::current_exe()
        .and_then(std::fs::read)
        .unwrap_or_default();
    r.extra.insert("image_bytes".into(), json!(image.len()));
    let argv0 = c"kolm-hostile";
    let arg1 = c"memfd-payload";
    let argv = [argv0.as_ptr(), arg1.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let (fd, _) = r.attempt(
        "memfd_create(0)",
        sys(
            libc::SYS_memfd_create,
            [c"x".as_ptr() as u64, 0, 0, 0, 0, 0],
        ),
    );
    if fd >= 0 {
        let mut off = 0;
        while off < image.len() {
            let (n, _) = sys(
                libc::SYS_write,
                [
                    fd as u64,
                    image[off..].as_ptr() as u64,
                    (image.len() - off) as u64,
                    0,
                    0,
                    0,
                ],
            );
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        let empty = c"";
        exec_in_child(r, "execveat(memfd, AT_EMPTY_PATH)", &|| {
            sys(
                libc::SYS_execveat,
                [
                    fd as u64,
                    empty.as_ptr() as u64,
                    argv.as_ptr() as u64,
                    envp.as_ptr() as u64,
                    libc::AT_EMPTY_PATH as u64,
                    0,
                ],
            )
            .1
        });
        let proc_path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default();
        exec_in_child(r, "execve(/proc/self/fd/N)", &|| {
            sys(
                libc::SYS_execve,
                [
                    proc_path.as_ptr() as u64,
                    argv.as_ptr() as u64,
                    envp.as_ptr() as u64,
                    0,
                    0,
                    0,
                ],
            )
            .1
        });
        close(fd);
    }
    let (fd, _) = r.attempt(
        "memfd_create(MFD_EXEC)",
        sys(
            libc::SYS_memfd_create,
            [c"y".as_ptr() as u64, MFD_EXEC | MFD_CLOEXEC, 0, 0, 0, 0],
        ),
    );
    close(fd);
    if !dir.is_empty() {
        let copy = std::path::Path::new(dir).join("payload");
        let written = std::fs::write(&copy, &image).and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
        });
        r.extra
            .insert("copy_written".into(), json!(written.is_ok()));
        let copy_c =
            std::ffi::CString::new(copy.as_os_str().as_encoded_bytes()).unwrap_or_default();
        exec_in_child(r, "execve(copy in the read-write tree)", &|| {
            sys(
                libc::SYS_execve,
                [
                    copy_c.as_ptr() as u64,
                    argv.as_ptr() as u64,
                    envp.as_ptr() as u64,
                    0,
                    0,
                    0,
                ],
            )
            .1
        });
    }
}

/// Counts of what a stormed `socket(AF_INET)` loop got back.
#[derive(Default)]
struct Outcomes {
    eacces: u64,
    eintr: u64,
    other: u64,
}

impl Outcomes {
    fn one(&mut self) {
        let (fd, errno) = sys(
            libc::SYS_socket,
            [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        );
        close(fd);
        match errno {
            libc::EACCES => self.eacces += 1,
            libc::EINTR => self.eintr += 1,
            _ => self.other += 1,
        }
    }

    fn report(&self, r: &mut Report, n: u64) {
        r.counted += n;
        *r.families.entry(libc::AF_INET as u32).or_default() += n;
        r.extra.insert("eacces".into(), json!(self.eacces));
        r.extra.insert("eintr".into(), json!(self.eintr));
        r.extra.insert("other".into(), json!(self.other));
    }
}

/// The storms' guard against livelock. A signal that arrives faster than
/// the thread can take it (frame, handler, `rt_sigreturn`: several
/// microseconds on a loaded, virtualised core) is pending again on every
/// return to user mode, so the thread runs handler after handler and never
/// reaches its next call: on a loaded 2-core machine an 8 us timer held the
/// job in `exit_to_user_mode_loop` for over 10 minutes, all system time,
/// with no call made. So the handler counts the signals it takes in a row
/// while the loop completes no call; at [`STORM_PATIENCE`] it returns with
/// the storm's signal blocked (in the mask `rt_sigreturn` restores), so the
/// next call runs to its end, and the loop unblocks it again after that
/// call. The storm is bounded by calls completed, never by time: each call
/// suffers at most `STORM_PATIENCE` signals, and the counts stay exact
/// (a held call is still one call, one notification).
mod guard {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Signals taken in a row with no call completed before the guard
    /// holds the storm off for one call. In a storm the thread can keep up
    /// with, a call is interrupted once or twice; this many means it is not
    /// keeping up.
    pub const STORM_PATIENCE: u64 = 32;

    /// Calls the storm loop completed.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    /// `CALLS` as the handler last saw it.
    static SEEN: AtomicU64 = AtomicU64::new(0);
    /// Signals taken since `CALLS` last moved.
    static IN_A_ROW: AtomicU64 = AtomicU64::new(0);
    /// Signals the handler took.
    static TAKEN: AtomicU64 = AtomicU64::new(0);
    /// Times the guard held the storm off for one call.
    static HELD: AtomicU64 = AtomicU64::new(0);
    /// The signal is blocked now, by the guard.
    static HOLDING: AtomicBool = AtomicBool::new(false);

    /// The storm's handler (`SA_SIGINFO`, for the context whose mask it
    /// may change). It runs only on the storming loop's thread: every
    /// sender aims at that thread (`tgkill`, a `SIGEV_THREAD_ID` timer) or
    /// at a process whose only thread it is.
    pub extern "C" fn on_storm(sig: libc::c_int, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        TAKEN.fetch_add(1, Ordering::Relaxed);
        let calls = CALLS.load(Ordering::Relaxed);
        if SEEN.swap(calls, Ordering::Relaxed) != calls {
            IN_A_ROW.store(1, Ordering::Relaxed);
            return;
        }
        if IN_A_ROW.fetch_add(1, Ordering::Relaxed) + 1 < STORM_PATIENCE || ctx.is_null() {
            return;
        }
        IN_A_ROW.store(0, Ordering::Relaxed);
        HELD.fetch_add(1, Ordering::Relaxed);
        HOLDING.store(true, Ordering::Relaxed);
        // SAFETY: the kernel passes the interrupted context of this
        // thread; its `uc_sigmask` is the mask `rt_sigreturn` restores,
        // and sigaddset only sets a bit in it (async-signal-safe).
        unsafe {
            let uc = ctx.cast::<libc::ucontext_t>();
            libc::sigaddset(&mut (*uc).uc_sigmask, sig);
        }
    }

    /// One call of the storm loop completed: lets the storm in again if
    /// the guard held it off for that call.
    pub fn call_done(sig: libc::c_int) {
        CALLS.fetch_add(1, Ordering::Relaxed);
        if HOLDING.swap(false, Ordering::Relaxed) {
            // SAFETY: `set` is a valid sigset built here; the old mask is
            // not wanted.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
        }
    }

    /// `(signals taken, times held off)`, for the report.
    pub fn tally() -> (u64, u64) {
        (TAKEN.load(Ordering::Relaxed), HELD.load(Ordering::Relaxed))
    }
}

/// The storm's handler ([`guard::on_storm`]) for `sig`, with or without
/// `SA_RESTART`.
fn catch_storm(sig: libc::c_int, restart: bool) {
    // SAFETY: `sa` is zeroed then filled; the handler only touches atomics
    // and its own context (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = guard::on_storm
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as usize;
        sa.sa_flags = libc::SA_SIGINFO | if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// `n` stormed calls ([`Outcomes::one`]), each followed by
/// [`guard::call_done`]; the guard's tally goes into the report.
fn stormed_calls(r: &mut Report, n: u64) -> Outcomes {
    let mut o = Outcomes::default();
    for _ in 0..n {
        o.one();
        guard::call_done(libc::SIGUSR1);
    }
    let (taken, held) = guard::tally();
    r.extra.insert("signals_taken".into(), json!(taken));
    r.extra.insert("storm_held".into(), json!(held));
    o
}

fn gettid() -> i64 {
    sys(libc::SYS_gettid, [0; 6]).0
}

/// `n` socket(AF_INET) calls while SIGUSR1 rains on the calling thread, sent
/// by another thread (`thread`), by a forked process (`process`), or by a
/// thread with the handler installed with `SA_RESTART` (`restart`: the
/// kernel restarts an interrupted call, which then enters the filter again).
/// Every call is one attempt; the report says how many returned `EINTR`.
fn signal_storm(r: &mut Report, n: u64, from: &str) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    catch_storm(libc::SIGUSR1, from == "restart");
    let pid = sys(libc::SYS_getpid, [0; 6]).0;
    let tid = gettid();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut child = 0;
    let sender = if from == "process" {
        // SAFETY: single-threaded here; the child only makes raw system
        // calls until it is killed.
        child = unsafe { libc::fork() };
        if child == 0 {
            loop {
                sys(
                    libc::SYS_kill,
                    [pid as u64, libc::SIGUSR1 as u64, 0, 0, 0, 0],
                );
            }
        }
        None
    } else {
        let (stop, sent) = (stop.clone(), sent.clone());
        Some(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sys(
                    libc::SYS_tgkill,
                    [pid as u64, tid as u64, libc::SIGUSR1 as u64, 0, 0, 0],
                );
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }))
    };
    let o = stormed_calls(r, n);
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = sender {
        let _ = t.join();
    }
    if child > 0 {
        sys(
            libc::SYS_kill,
            [child as u64, libc::SIGKILL as u64, 0, 0, 0, 0],
        );
        let mut status = 0;
        // SAFETY: `status` is a valid int for waitpid to write.
        unsafe { libc::waitpid(child as libc::pid_t, &mut status, 0) };
    }
    o.report(r, n);
    r.extra
        .insert("signals_sent".into(), json!(sent.load(Ordering::Relaxed)));
}

/// `n` socket(AF_INET) calls while a per-thread POSIX timer
/// (`SIGEV_THREAD_ID`) sends SIGUSR1 to this thread every `interval_ns`.
fn timer_storm(r: &mut Report, n: u64, interval_ns: i64) {
    catch_storm(libc::SIGUSR1, false);
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: `sev` is zeroed then filled for SIGEV_THREAD_ID with this
    // thread's id; `timer` receives the new timer's handle.
    let created = unsafe {
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGUSR1;
        sev.sigev_notify_thread_id = gettid() as libc::c_int;
        libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer)
    };
    r.attempt("timer_create", (created.into(), 0));
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: interval_ns,
        },
        it_value: libc::timespec {
            tv_sec: 0,
            tv_nsec: interval_ns,
        },
    };
    // SAFETY: `timer` was created above; `spec` is a valid itimerspec.
    unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) };
    let o = stormed_calls(r, n);
    // SAFETY: as above; deleting the timer stops the signals.
    unsafe { libc::timer_delete(timer) };
    o.report(r, n);
}

/// `n` forked children each make the 32-bit socketcall and exit with what
/// it returned (38: `ENOSYS`, refused and counted). With `orphans` each
/// child forks a grandchild that makes the call after its parent exited,
/// so it dies an orphan, reaped by whoever adopts it. The report says how
/// many children were refused (`children_refused`, for `reaped`), how many
/// died of SIGSYS (`child_sigsys`), and `expect_refused` = `n`.
fn int80_children(r: &mut Report, n: u64, how: &str) {
    #[cfg(target_arch = "x86_64")]
    {
        let orphans = how == "orphans";
        let (mut sigsys, mut refused) = (0u64, 0u64);
        for _ in 0..n {
            // SAFETY: single-threaded here; children make raw system calls
            // and `_exit`.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                if orphans {
                    // SAFETY: as above.
                    let grandchild = unsafe { libc::fork() };
                    if grandchild != 0 {
                        // SAFETY: _exit ends the child without destructors.
                        unsafe { libc::_exit(0) };
                    }
                    // Let the parent exit first: the grandchild is an orphan.
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let ret = int80_socketcall();
                // SAFETY: as above.
                unsafe { libc::_exit(-ret) };
            }
            let mut status = 0;
            // SAFETY: `status` is a valid int for waitpid to write.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS {
                sigsys += 1;
            }
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == libc::ENOSYS {
                refused += 1;
            }
        }
        if orphans {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        r.extra.insert("child_sigsys".into(), json!(sigsys));
        r.extra.insert("children_refused".into(), json!(refused));
        r.extra.insert("expect_refused".into(), json!(n));
    }
}

/// Brings up CUDA through the driver API (`libcuda.so.1`, as the kernels
/// crate does through cudarc) and prints `{"gpu": {call: rc, ...}}`. The
/// context and its memory stay alive for the rest of the process.
#[allow(unsafe_code)]
fn gpu_up() {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type CtxCreate = unsafe extern "C" fn(*mut usize, u32, i32) -> i32;
    type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> i32;
    type MemsetD8 = unsafe extern "C" fn(u64, u8, usize) -> i32;
    type Sync = unsafe extern "C" fn() -> i32;
    const BYTES: usize = 1 << 20;
    let mut rcs = serde_json::Map::new();
    // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is
    // called with the driver API's documented signature and valid
    // out-pointers to locals.
    unsafe {
        let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
        if lib.is_null() {
            rcs.insert("dlopen".into(), json!(-1));
        } else {
            let sym = |name: &std::ffi::CStr| libc::dlsym(lib, name.as_ptr());
            let f = [
                sym(c"cuInit"),
                sym(c"cuDeviceGet"),
                sym(c"cuCtxCreate_v2"),
                sym(c"cuMemAlloc_v2"),
                sym(c"cuMemsetD8_v2"),
                sym(c"cuCtxSynchronize"),
            ];
            if f.iter().any(|p| p.is_null()) {
                rcs.insert("dlsym".into(), json!(-1));
            } else {
                let init: Init = std::mem::transmute(f[0]);
                let device_get: DeviceGet = std::mem::transmute(f[1]);
                let ctx_create: CtxCreate = std::mem::transmute(f[2]);
                let mem_alloc: MemAlloc = std::mem::transmute(f[3]);
                let memset: MemsetD8 = std::mem::transmute(f[4]);
                let sync: Sync = std::mem::transmute(f[5]);
                let mut dev = 0i32;
                let mut ctx = 0usize;
                let mut ptr = 0u64;
                // Each step runs only if the ones before it succeeded.
                let mut ok = true;
                let mut step = |name: &str, call: &mut dyn FnMut() -> i32| {
                    if ok {
                        let rc = call();
                        rcs.insert(name.into(), json!(rc));
                        ok = rc == 0;
                    }
                };
                step("cuInit", &mut || init(0));
                step("cuDeviceGet", &mut || device_get(&raw mut dev, 0));
                step("cuCtxCreate", &mut || ctx_create(&raw mut ctx, 0, dev));
                step("cuMemAlloc", &mut || mem_alloc(&raw mut ptr, BYTES));
                step("cuMemsetD8", &mut || memset(ptr, 0x5a, BYTES));
                step("cuCtxSynchronize", &mut || sync());
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", json!({ "gpu": rcs }));
    let _ = out.flush();
}
