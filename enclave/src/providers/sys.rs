//! The two ioctls the hardware providers need: `NSM_IOCTL_RAW` on
//! `/dev/nsm` and the sev-guest `SNP_GET_REPORT` / `SNP_GET_EXT_REPORT` on
//! `/dev/sev-guest`. This is the only file of the providers with `unsafe`;
//! every block says why it is sound. The argument structs are `#[repr(C)]`
//! with their layouts asserted against the uapi headers (in `snp.rs` and
//! here). (configfs-tsm needs no ioctl: it is plain file I/O.)

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::snp::{SnpExtReportReq, SnpGuestRequestIoctl, SnpReportReq, SnpReportResp};

/// `_IOWR(ty, nr, size)` of `include/uapi/asm-generic/ioctl.h`: direction
/// read|write (3) in bits 31:30, size in bits 29:16, type in 15:8, number
/// in 7:0.
pub(super) const fn iowr(ty: u8, nr: u8, size: usize) -> u32 {
    (3 << 30) | (((size as u32) & 0x3fff) << 16) | ((ty as u32) << 8) | nr as u32
}

/// `struct nsm_iovec` of `include/uapi/linux/nsm.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct NsmIovec {
    pub(super) addr: u64,
    pub(super) len: u64,
}

/// `struct nsm_raw` of `include/uapi/linux/nsm.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct NsmRaw {
    pub(super) request: NsmIovec,
    pub(super) response: NsmIovec,
}

/// `NSM_IOCTL_RAW = _IOWR(NSM_MAGIC = 0x0A, 0x0, struct nsm_raw)`.
pub(super) const NSM_IOCTL_RAW: u32 = iowr(0x0A, 0, std::mem::size_of::<NsmRaw>());

/// `SNP_GUEST_REQ_IOC_TYPE` (`'S'`).
const SNP_GUEST_REQ_IOC_TYPE: u8 = b'S';
/// `SNP_GET_REPORT = _IOWR('S', 0x0, struct snp_guest_request_ioctl)`.
pub(super) const SNP_GET_REPORT: u32 = iowr(
    SNP_GUEST_REQ_IOC_TYPE,
    0,
    std::mem::size_of::<SnpGuestRequestIoctl>(),
);
/// `SNP_GET_EXT_REPORT = _IOWR('S', 0x2, struct snp_guest_request_ioctl)`.
pub(super) const SNP_GET_EXT_REPORT: u32 = iowr(
    SNP_GUEST_REQ_IOC_TYPE,
    2,
    std::mem::size_of::<SnpGuestRequestIoctl>(),
);

fn ioctl_result(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `NSM_IOCTL_RAW`: sends `request` (CBOR) and receives the response into
/// `response`; returns the response length the driver wrote back.
pub(super) fn nsm_raw(
    fd: BorrowedFd<'_>,
    request: &[u8],
    response: &mut [u8],
) -> io::Result<usize> {
    let mut raw = NsmRaw {
        request: NsmIovec {
            addr: request.as_ptr() as u64,
            len: request.len() as u64,
        },
        response: NsmIovec {
            addr: response.as_mut_ptr() as u64,
            len: response.len() as u64,
        },
    };
    // SAFETY: `raw` is a valid `struct nsm_raw`; its request iovec points at
    // `request.len()` readable bytes and its response iovec at
    // `response.len()` writable bytes, both borrowed for the whole call; the
    // driver reads the first and writes at most `len` bytes into the second,
    // then writes the struct back (response.len = bytes written).
    ioctl_result(unsafe {
        libc::ioctl(fd.as_raw_fd(), NSM_IOCTL_RAW as _, &mut raw as *mut NsmRaw)
    })?;
    usize::try_from(raw.response.len)
        .ok()
        .filter(|len| *len <= response.len())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "driver reported a {}-byte response for a {}-byte buffer",
                    raw.response.len,
                    response.len()
                ),
            )
        })
}

/// The outcome of a sev-guest ioctl: the error and the `exitinfo2` the
/// kernel wrote back (firmware error in bits 31:0, VMM error in 63:32).
pub(super) struct GuestIoctlFailure {
    pub(super) error: io::Error,
    pub(super) exitinfo2: u64,
}

/// One sev-guest request: `request` is `SNP_GET_REPORT` or
/// `SNP_GET_EXT_REPORT`, `req_data`/`resp_data` the addresses of its
/// request and response structs.
///
/// # Safety
///
/// `req_data` must point at a live, writable request struct of the kind
/// `request` takes (`struct snp_report_req` or `struct snp_ext_report_req`,
/// whose certificate buffer, if any, must be live and writable for
/// `certs_len` bytes) and `resp_data` at a live, writable
/// `struct snp_report_resp`, all for the duration of the call.
unsafe fn snp_guest_request(
    fd: BorrowedFd<'_>,
    request: u32,
    req_data: u64,
    resp_data: u64,
) -> Result<(), GuestIoctlFailure> {
    let mut arg = SnpGuestRequestIoctl::new(req_data, resp_data);
    // SAFETY: `arg` is a valid `struct snp_guest_request_ioctl` that lives
    // across the call (the driver writes `exitinfo2` back into it); the
    // buffers it points at are valid per this function's contract.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            request as _,
            &mut arg as *mut SnpGuestRequestIoctl,
        )
    };
    ioctl_result(rc).map_err(|error| GuestIoctlFailure {
        error,
        exitinfo2: arg.exitinfo2,
    })
}

/// `SNP_GET_REPORT` with message version 1.
pub(super) fn snp_get_report(
    fd: BorrowedFd<'_>,
    req: &SnpReportReq,
    resp: &mut SnpReportResp,
) -> Result<(), GuestIoctlFailure> {
    // SAFETY: `req` is a live `struct snp_report_req` (the driver only
    // reads it) and `resp` a live, writable `struct snp_report_resp`, both
    // borrowed for the whole call.
    unsafe {
        snp_guest_request(
            fd,
            SNP_GET_REPORT,
            req as *const SnpReportReq as u64,
            resp as *mut SnpReportResp as u64,
        )
    }
}

/// `SNP_GET_EXT_REPORT` with message version 1. `req.certs_address` and
/// `req.certs_len` are set here from `certs`; on `EIO` with VMM error
/// `INVALID_LEN` the kernel writes the length it needs into
/// `req.certs_len`.
pub(super) fn snp_get_ext_report(
    fd: BorrowedFd<'_>,
    req: &mut SnpExtReportReq,
    resp: &mut SnpReportResp,
    certs: &mut [u8],
) -> Result<(), GuestIoctlFailure> {
    req.certs_len = u32::try_from(certs.len()).map_err(|_| GuestIoctlFailure {
        error: io::Error::from_raw_os_error(libc::EINVAL),
        exitinfo2: 0,
    })?;
    req.certs_address = if certs.is_empty() {
        0
    } else {
        certs.as_mut_ptr() as u64
    };
    // SAFETY: `req` is a live, writable `struct snp_ext_report_req` whose
    // certs_address/certs_len describe `certs` exactly (a live, writable
    // buffer borrowed for the call, or address 0 and length 0); `resp` is a
    // live, writable `struct snp_report_resp`.
    unsafe {
        snp_guest_request(
            fd,
            SNP_GET_EXT_REPORT,
            req as *mut SnpExtReportReq as u64,
            resp as *mut SnpReportResp as u64,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    #[test]
    fn nsm_raw_layout_matches_uapi() {
        // include/uapi/linux/nsm.h: two { __u64 addr; __u64 len; }.
        assert_eq!(size_of::<NsmIovec>(), 16);
        assert_eq!(size_of::<NsmRaw>(), 32);
        assert_eq!(offset_of!(NsmRaw, request), 0);
        assert_eq!(offset_of!(NsmRaw, response), 16);
        assert_eq!(offset_of!(NsmIovec, addr), 0);
        assert_eq!(offset_of!(NsmIovec, len), 8);
        assert_eq!(NSM_IOCTL_RAW, 0xC020_0A00);
    }

    #[test]
    fn sev_guest_ioctl_numbers() {
        // _IOWR('S', 0|2, 32 bytes).
        assert_eq!(SNP_GET_REPORT, 0xC020_5300);
        assert_eq!(SNP_GET_EXT_REPORT, 0xC020_5302);
    }
}
