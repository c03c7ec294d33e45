//! `statvfs(3)`, which `std` does not wrap: how much room a file system
//! has left, so the service can refuse a job whose inputs would not fit in
//! the staging directory before the host sends a byte of them
//! ([`super::check_room`]). One `unsafe` block; it says why it is sound.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Bytes a process without `CAP_SYS_RESOURCE` can still write on the file
/// system holding `path`: `f_bavail` blocks of `f_frsize` bytes. The blocks
/// reserved for root are left out, so a service running as root is told
/// less than it could use, never more.
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call
    // and `st` points to writable memory of exactly `struct statvfs`'s size
    // and alignment; the C library only reads the string and writes the
    // struct.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `statvfs` returned 0, and on success it fills every field.
    let st = unsafe { st.assume_init() };
    // `f_frsize` is the unit of the block counts; a file system that
    // leaves it 0 (some FUSE ones) counts in `f_bsize`.
    let block = if st.f_frsize != 0 {
        st.f_frsize
    } else {
        st.f_bsize
    };
    // Both are `u64` on 64-bit Linux and `u32` on some 32-bit targets: the
    // conversion is lossless everywhere and a no-op here.
    #[allow(clippy::useless_conversion)]
    let bytes = u64::from(st.f_bavail).saturating_mul(u64::from(block));
    Ok(bytes)
}
