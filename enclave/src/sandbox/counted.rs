//! The system calls the counted filter hands to the supervisor, and the
//! errno each attempt gets back. The record format that carries the counts
//! is `kolm_format::sandbox_record`.

/// The name under which every call of a foreign ABI (32-bit `int 0x80` on
/// x86_64, AArch32 on arm64) is counted, whatever its number: `socketcall`
/// hides every socket operation behind one number, and the filters match
/// native numbers only, so each is refused with `ENOSYS`.
pub(super) const FOREIGN_ABI: (&str, i32) = ("foreign_abi", libc::ENOSYS);

/// The counted system calls of the native ABI: name and the errno the job
/// gets back.
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
