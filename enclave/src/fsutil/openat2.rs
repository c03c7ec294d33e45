//! `openat2(2)` (Linux 5.6+), which `std` and `libc` do not wrap: open a
//! path relative to a directory descriptor with the kernel, not the caller,
//! enforcing how it is resolved; and `unlinkat(2)`, to remove entries
//! relative to one. One of the two `unsafe` modules of `fsutil` (the other
//! is [`super::statvfs`]); each block says why it is sound.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `struct open_how` of `linux/openat2.h` (`libc::open_how` is
/// `non_exhaustive`, so it cannot be built outside `libc`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

// The kernel ABI: three u64 fields, 24 bytes (OPEN_HOW_SIZE_VER0).
const _: () = assert!(std::mem::size_of::<OpenHow>() == 24);

/// Resolution that never leaves `dir` and never follows a link: no `..`
/// above `dir`, no absolute path, no symbolic link in any component (the
/// last one included), no `/proc` magic link, no mount crossing.
pub const RESOLVE_STRICT: u64 = libc::RESOLVE_BENEATH
    | libc::RESOLVE_NO_SYMLINKS
    | libc::RESOLVE_NO_MAGICLINKS
    | libc::RESOLVE_NO_XDEV;

/// Opens `path` relative to `dir` with `flags` (`O_CLOEXEC` is always
/// added) and `resolve` (`RESOLVE_*` bits).
///
/// Errors are the kernel's: `ELOOP` for a symbolic link where
/// `RESOLVE_NO_SYMLINKS` forbids one, `EXDEV` for an escape from `dir` or a
/// mount crossing, `ENOSYS` on kernels before 5.6 (the caller fails closed).
pub fn openat2(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    let flags = u64::try_from(flags | libc::O_CLOEXEC)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "negative open flags"))?;
    let how = OpenHow {
        flags,
        mode: 0,
        resolve,
    };
    // SAFETY: `dir` is a live descriptor for the duration of the call
    // (borrowed); `c_path` is a NUL-terminated string that outlives the
    // call; `how` is a properly initialised `struct open_how` and the size
    // passed is exactly its size. The kernel only reads through both
    // pointers and returns a new descriptor or -1.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c_path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(rc)
        .map_err(|_| io::Error::other("openat2 returned an out-of-range descriptor"))?;
    // SAFETY: on success openat2 returns a descriptor newly allocated to
    // this process that nothing else owns; `OwnedFd` takes sole ownership
    // and closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `unlinkat(2)`: removes the entry `name` of `dir` (a directory entry
/// with `remove_dir`), relative to the descriptor, so a tree deeper than
/// `PATH_MAX` can be removed one level at a time.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &std::ffi::OsStr, remove_dir: bool) -> io::Result<()> {
    let c_name = CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name holds a NUL byte"))?;
    let flags = if remove_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: `dir` is a live descriptor for the duration of the call
    // (borrowed) and `c_name` a NUL-terminated string that outlives it;
    // the kernel only reads the string.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), c_name.as_ptr(), flags) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
