//! AMD SEV-SNP: the Linux sev-guest driver (`/dev/sev-guest`).
//!
//! Interface (`include/uapi/linux/sev-guest.h`; `Documentation/virt/coco/
//! sev-guest.rst`): `SNP_GET_EXT_REPORT` and `SNP_GET_REPORT`, each an
//! `_IOWR('S', n, struct snp_guest_request_ioctl)` whose `req_data` points
//! at a `struct snp_ext_report_req` / `struct snp_report_req` and whose
//! `resp_data` points at a 4000-byte `struct snp_report_resp`. The driver
//! writes `exitinfo2` back: firmware error in bits 31:0, VMM error in bits
//! 63:32 (`SNP_GUEST_VMM_ERR_INVALID_LEN` = 1, `SNP_GUEST_VMM_ERR_BUSY` = 2).
//!
//! The response buffer holds the firmware's `MSG_REPORT_RSP` (SEV-SNP
//! Firmware ABI specification 56860, "MSG_REPORT_RSP Message Structure"):
//! `STATUS` u32, `REPORT_SIZE` u32, reserved bytes, then the
//! `ATTESTATION_REPORT`, laid out by [`kolm_tee_layouts::snp`] (the tables
//! the verifier reads with). The extended request also fills a
//! certificate buffer the guest supplies (`certs_address`, `certs_len`, a
//! multiple of the 4 KiB page): a table of 24-byte entries `{GUID[16],
//! offset u32, length u32}` terminated by an all-zero entry, offsets counted
//! from the buffer's start (GHCB specification 56421, "SNP Extended Guest
//! Request", certificate table). GUIDs are stored in RFC 4122 byte order
//! (the byte order of their text form), as AMD's sev-tool, go-sev-guest and
//! the `sev` crate read them.
//!
//! Errors handled: the buffer too small (`EIO` with VMM error
//! `INVALID_LEN`; the kernel writes the length it needs into `certs_len`,
//! one retry with it), throttling (`EAGAIN`/`EBUSY`/`EINTR`, or `EIO` with
//! VMM error `BUSY` from kernels before the driver retried itself: bounded
//! retries), no extended request (`ENOTTY`/`EOPNOTSUPP`: `SNP_GET_REPORT`).
//! When the host supplies no certificates, the VCEK comes from the
//! enclave-side offline bundle file and [`CollateralSource::OfflineBundle`]
//! says so; without that bundle the evidence carries no collateral
//! ([`CollateralSource::Absent`]) and the run path completes it with the
//! host's bundle sent with the job, or refuses (`select::Attesting`).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use kolm_format::reader::Reader;
use kolm_policy::Platform;
use kolm_tee_layouts::LayoutError;
use kolm_tee_layouts::snp::{msg_report_rsp, report};

use super::collateral::CollateralShapeError;
use super::sealed::Driver;
use super::{
    CollateralSource, EvidenceBlob, HardwareEvidence, MEASUREMENT_LEN, Measurement,
    MeasurementKind, ProviderError, REPORT_DATA_LEN, Retry, RetryPolicy, blob, check_der_sequence,
    is_busy, open_device, read_bundle_file, sys,
};

/// The sev-guest device node.
pub const SEV_GUEST_DEVICE: &str = "/dev/sev-guest";
/// `msg_version` of every request (the only version the firmware defines).
pub const SNP_MSG_VERSION: u8 = 1;
/// The VMPL every report is requested at.
pub const REQUESTED_VMPL: u32 = 0;
/// `ATTESTATION_REPORT` size (spec 56860, table 22).
pub const SNP_REPORT_LEN: usize = report::SIZE;
/// `struct snp_report_resp.data`.
pub const SNP_RESP_DATA_LEN: usize = 4000;
/// Offset of the report inside `MSG_REPORT_RSP`.
pub const MSG_REPORT_RSP_REPORT_OFFSET: usize = msg_report_rsp::REPORT.offset();
/// The guest page size certificate buffers are counted in.
pub const PAGE_SIZE: usize = 4096;
/// `SNP_GUEST_VMM_ERR_INVALID_LEN`: certificate buffer too small.
pub const SNP_GUEST_VMM_ERR_INVALID_LEN: u32 = 1;
/// `SNP_GUEST_VMM_ERR_BUSY`: the host throttled the request.
pub const SNP_GUEST_VMM_ERR_BUSY: u32 = 2;
/// Largest certificate buffer asked for (the kernel's own cap is smaller).
pub const MAX_CERTS_LEN: usize = 1024 * 1024;

/// Certificate table GUIDs, RFC 4122 byte order (GHCB spec 56421).
pub mod guid {
    /// VCEK `63da758d-e664-4564-adc5-f4b93be8accd`.
    pub const VCEK: [u8; 16] = [
        0x63, 0xda, 0x75, 0x8d, 0xe6, 0x64, 0x45, 0x64, 0xad, 0xc5, 0xf4, 0xb9, 0x3b, 0xe8, 0xac,
        0xcd,
    ];
    /// VLEK `a8074bc2-a25a-483e-aae6-39c045a0b8a1`.
    pub const VLEK: [u8; 16] = [
        0xa8, 0x07, 0x4b, 0xc2, 0xa2, 0x5a, 0x48, 0x3e, 0xaa, 0xe6, 0x39, 0xc0, 0x45, 0xa0, 0xb8,
        0xa1,
    ];
    /// ASK `4ab7b379-bbac-4fe4-a02f-05aef327c782`.
    pub const ASK: [u8; 16] = [
        0x4a, 0xb7, 0xb3, 0x79, 0xbb, 0xac, 0x4f, 0xe4, 0xa0, 0x2f, 0x05, 0xae, 0xf3, 0x27, 0xc7,
        0x82,
    ];
    /// ARK `c0b406a4-a803-4952-9743-3fb6014cd0ae`.
    pub const ARK: [u8; 16] = [
        0xc0, 0xb4, 0x06, 0xa4, 0xa8, 0x03, 0x49, 0x52, 0x97, 0x43, 0x3f, 0xb6, 0x01, 0x4c, 0xd0,
        0xae,
    ];
}

/// `struct snp_report_req` (96 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnpReportReq {
    /// Report data, copied into the report's `REPORT_DATA`.
    pub user_data: [u8; 64],
    /// VMPL of the report.
    pub vmpl: u32,
    /// Must be zero (key selection 0: whichever the firmware uses).
    pub rsvd: [u8; 28],
}

impl SnpReportReq {
    pub fn new(user_data: [u8; 64], vmpl: u32) -> SnpReportReq {
        SnpReportReq {
            user_data,
            vmpl,
            rsvd: [0; 28],
        }
    }
}

/// `struct snp_report_resp` (4000 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpReportResp {
    pub data: [u8; SNP_RESP_DATA_LEN],
}

impl Default for SnpReportResp {
    fn default() -> SnpReportResp {
        SnpReportResp {
            data: [0; SNP_RESP_DATA_LEN],
        }
    }
}

/// `struct snp_ext_report_req` (112 bytes: 96 + u64 + u32 + 4 bytes of
/// tail padding, spelled out here so it is zeroed).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnpExtReportReq {
    pub data: SnpReportReq,
    /// Guest address of the certificate buffer (set by the device).
    pub certs_address: u64,
    /// Its length; on `INVALID_LEN` the kernel writes the needed length.
    pub certs_len: u32,
    pub tail_padding: [u8; 4],
}

impl SnpExtReportReq {
    pub fn new(data: SnpReportReq) -> SnpExtReportReq {
        SnpExtReportReq {
            data,
            certs_address: 0,
            certs_len: 0,
            tail_padding: [0; 4],
        }
    }
}

/// `struct snp_guest_request_ioctl` (32 bytes; the 7 bytes after
/// `msg_version` are alignment padding, spelled out so they are zeroed).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnpGuestRequestIoctl {
    pub msg_version: u8,
    pub padding: [u8; 7],
    pub req_data: u64,
    pub resp_data: u64,
    /// Firmware error (bits 31:0) and VMM error (bits 63:32).
    pub exitinfo2: u64,
}

impl SnpGuestRequestIoctl {
    pub(super) fn new(req_data: u64, resp_data: u64) -> SnpGuestRequestIoctl {
        SnpGuestRequestIoctl {
            msg_version: SNP_MSG_VERSION,
            padding: [0; 7],
            req_data,
            resp_data,
            exitinfo2: 0,
        }
    }
}

/// A failed sev-guest ioctl: `errno` and the `exitinfo2` written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestRequestError {
    pub errno: i32,
    pub exitinfo2: u64,
}

impl GuestRequestError {
    pub fn fw_error(&self) -> u32 {
        (self.exitinfo2 & 0xffff_ffff) as u32
    }

    pub fn vmm_error(&self) -> u32 {
        (self.exitinfo2 >> 32) as u32
    }
}

/// The sev-guest ioctls, behind a trait so the tests can answer them.
pub trait SevGuestDevice {
    /// The device path, for error messages.
    fn path(&self) -> &Path;
    /// `SNP_GET_REPORT`.
    fn get_report(
        &self,
        req: &SnpReportReq,
        resp: &mut SnpReportResp,
    ) -> Result<(), GuestRequestError>;
    /// `SNP_GET_EXT_REPORT` with `certs` as the certificate buffer
    /// (`certs_address`/`certs_len` are set from it).
    fn get_ext_report(
        &self,
        req: &mut SnpExtReportReq,
        resp: &mut SnpReportResp,
        certs: &mut [u8],
    ) -> Result<(), GuestRequestError>;
}

/// The real `/dev/sev-guest`.
#[derive(Debug)]
pub struct SevGuestFile {
    path: PathBuf,
    file: File,
}

impl SevGuestFile {
    /// Opens the device read-write.
    pub fn open(path: impl Into<PathBuf>) -> Result<SevGuestFile, ProviderError> {
        let (path, file) = open_device(path.into())?;
        Ok(SevGuestFile { path, file })
    }
}

fn guest_error(f: sys::GuestIoctlFailure) -> GuestRequestError {
    GuestRequestError {
        errno: f.error.raw_os_error().unwrap_or(libc::EIO),
        exitinfo2: f.exitinfo2,
    }
}

impl SevGuestDevice for SevGuestFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn get_report(
        &self,
        req: &SnpReportReq,
        resp: &mut SnpReportResp,
    ) -> Result<(), GuestRequestError> {
        sys::snp_get_report(self.file.as_fd(), req, resp).map_err(guest_error)
    }

    fn get_ext_report(
        &self,
        req: &mut SnpExtReportReq,
        resp: &mut SnpReportResp,
        certs: &mut [u8],
    ) -> Result<(), GuestRequestError> {
        sys::snp_get_ext_report(self.file.as_fd(), req, resp, certs).map_err(guest_error)
    }
}

/// Offline bundle files used when the host supplies no certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpBundle {
    /// The VCEK of this chip at its reported TCB, DER (as AMD KDS serves it).
    pub vcek_der: PathBuf,
    /// Optional PEM of the ASK and ARK (the verifier otherwise uses its
    /// embedded roots).
    pub ask_ark_pem: Option<PathBuf>,
}

/// Provider settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpOptions {
    /// Fallback collateral; `None`: the VCEK comes from the host (extended
    /// report) or from the host's bundle sent with the job.
    pub bundle: Option<SnpBundle>,
    /// First certificate buffer offered, in bytes (a multiple of
    /// [`PAGE_SIZE`]); the kernel says when it needs more.
    pub initial_certs_len: usize,
    pub retry: RetryPolicy,
}

impl Default for SnpOptions {
    fn default() -> SnpOptions {
        SnpOptions {
            bundle: None,
            initial_certs_len: 4 * PAGE_SIZE,
            retry: RetryPolicy::default(),
        }
    }
}

/// Loaded bundle contents.
#[derive(Debug, Clone)]
struct LoadedBundle {
    vcek_path: PathBuf,
    vcek: Vec<u8>,
    ask_ark: Option<Vec<u8>>,
}

/// The SEV-SNP provider.
#[derive(Debug)]
pub struct SnpProvider<D> {
    device: D,
    options: SnpOptions,
    bundle: Option<LoadedBundle>,
    collateral_loaded: bool,
}

/// Which key signed the report (`KEY_INFO.SIGNING_KEY`, bits 4:2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SigningKey {
    Vcek,
    Vlek,
}

/// The certificates the host returned, by GUID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCertificates {
    pub vcek: Option<Vec<u8>>,
    pub vlek: Option<Vec<u8>>,
    pub ask: Option<Vec<u8>>,
    pub ark: Option<Vec<u8>>,
    /// Entries with other GUIDs (kept out of the evidence).
    pub other: usize,
}

impl HostCertificates {
    fn is_empty(&self) -> bool {
        self.vcek.is_none() && self.vlek.is_none() && self.ask.is_none() && self.ark.is_none()
    }
}

/// A checked report: the fields the provider uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpReport {
    pub bytes: Vec<u8>,
    pub version: u32,
    pub vmpl: u32,
    pub signing_key: SigningKey,
    pub report_data: [u8; REPORT_DATA_LEN],
    pub measurement: [u8; MEASUREMENT_LEN],
}

const REPORT_WHAT: &str = "SEV-SNP attestation report";

impl SnpReport {
    /// Reads the fields of a report (exactly [`SNP_REPORT_LEN`] bytes).
    pub fn parse(bytes: &[u8]) -> Result<SnpReport, ProviderError> {
        let raw = report::exact(bytes).map_err(|_| ProviderError::Malformed {
            what: REPORT_WHAT,
            reason: format!("{} bytes, expected {SNP_REPORT_LEN}", bytes.len()),
        })?;
        let version = report::VERSION.u32_le(raw);
        if version < 2 {
            return Err(ProviderError::Malformed {
                what: REPORT_WHAT,
                reason: format!("VERSION {version}, expected 2 or later"),
            });
        }
        let vmpl = report::VMPL.u32_le(raw);
        let algo = report::SIGNATURE_ALGO.u32_le(raw);
        if algo != report::SIGNATURE_ALGO_ECDSA_P384_SHA384 {
            return Err(ProviderError::Malformed {
                what: REPORT_WHAT,
                reason: format!("SIGNATURE_ALGO {algo}, expected 1 (ECDSA P-384 with SHA-384)"),
            });
        }
        let key_info = report::KEY_INFO.u32_le(raw);
        let signing_key = match (key_info >> report::KEY_INFO_SIGNING_KEY_SHIFT)
            & report::KEY_INFO_SIGNING_KEY_MASK
        {
            report::SIGNING_KEY_VCEK => SigningKey::Vcek,
            report::SIGNING_KEY_VLEK => SigningKey::Vlek,
            other => {
                return Err(ProviderError::NoEndorsementKey {
                    key: "VCEK/VLEK",
                    reason: format!("report KEY_INFO.SIGNING_KEY is {other} (unsigned report)"),
                });
            }
        };
        let report_data = report::REPORT_DATA.get(raw);
        let measurement = report::MEASUREMENT.get(raw);
        Ok(SnpReport {
            bytes: bytes.to_vec(),
            version,
            vmpl,
            signing_key,
            report_data,
            measurement,
        })
    }
}

/// Reads `MSG_REPORT_RSP` out of the 4000-byte response: status 0, size
/// [`SNP_REPORT_LEN`], reserved bytes and everything after the report zero.
pub fn parse_report_response(resp: &SnpReportResp) -> Result<SnpReport, ProviderError> {
    const WHAT: &str = "MSG_REPORT_RSP";
    const _: () = assert!(msg_report_rsp::SIZE <= SNP_RESP_DATA_LEN);
    let m = |e: LayoutError| ProviderError::Malformed {
        what: WHAT,
        reason: e.to_string(),
    };
    let data = &resp.data;
    let status = msg_report_rsp::STATUS.read_u32_le(data).map_err(m)?;
    if status != 0 {
        return Err(ProviderError::FirmwareStatus { status });
    }
    let size = msg_report_rsp::REPORT_SIZE.read_u32_le(data).map_err(m)?;
    if usize::try_from(size).ok() != Some(SNP_REPORT_LEN) {
        return Err(ProviderError::Malformed {
            what: WHAT,
            reason: format!("REPORT_SIZE {size}, expected {SNP_REPORT_LEN}"),
        });
    }
    let reserved = msg_report_rsp::RESERVED_08.read(data).map_err(m)?;
    if reserved.iter().any(|b| *b != 0) {
        return Err(ProviderError::Malformed {
            what: WHAT,
            reason: format!(
                "reserved bytes {:#04x}..{:#04x} are not zero",
                msg_report_rsp::RESERVED_08.offset(),
                msg_report_rsp::RESERVED_08.end()
            ),
        });
    }
    let report = msg_report_rsp::REPORT.read(data).map_err(m)?;
    let after = data.get(msg_report_rsp::SIZE..).unwrap_or_default();
    if let Some(i) = after.iter().position(|b| *b != 0) {
        return Err(ProviderError::Malformed {
            what: WHAT,
            reason: format!(
                "non-zero byte at offset {} after the report",
                msg_report_rsp::SIZE + i
            ),
        });
    }
    SnpReport::parse(&report)
}

/// Parses the certificate table at the start of `buf`: 24-byte entries up
/// to an all-zero one, each pointing inside `buf` after the table, no GUID
/// twice. An all-zero first entry means no certificates.
pub fn parse_cert_table(buf: &[u8]) -> Result<HostCertificates, ProviderError> {
    const WHAT: &str = "certificate table";
    const ENTRY: usize = 24;
    let bad = |reason: String| ProviderError::Malformed { what: WHAT, reason };
    let mut r = Reader::new(buf);
    let mut entries = Vec::new();
    loop {
        let guid: [u8; 16] = r
            .array("entry GUID")
            .map_err(|_| bad("no terminating all-zero entry".into()))?;
        let offset = r
            .u32_le("entry offset")
            .map_err(|_| bad("no terminating all-zero entry".into()))?;
        let length = r
            .u32_le("entry length")
            .map_err(|_| bad("no terminating all-zero entry".into()))?;
        if guid == [0; 16] && offset == 0 && length == 0 {
            break;
        }
        entries.push((guid, offset, length));
    }
    let table_end = entries.len().saturating_add(1).saturating_mul(ENTRY);
    let mut certs = HostCertificates::default();
    for (i, (g, offset, length)) in entries.iter().enumerate() {
        let start = usize::try_from(*offset).unwrap_or(usize::MAX);
        let len = usize::try_from(*length).unwrap_or(usize::MAX);
        if *g == [0; 16] || len == 0 || start < table_end {
            return Err(bad(format!(
                "entry {i}: zero GUID, empty, or pointing into the table"
            )));
        }
        let data = start
            .checked_add(len)
            .and_then(|end| buf.get(start..end))
            .ok_or_else(|| {
                bad(format!(
                    "entry {i}: {len} bytes at offset {start} run past the {}-byte buffer",
                    buf.len()
                ))
            })?;
        let slot = match *g {
            guid::VCEK => &mut certs.vcek,
            guid::VLEK => &mut certs.vlek,
            guid::ASK => &mut certs.ask,
            guid::ARK => &mut certs.ark,
            _ => {
                certs.other = certs.other.saturating_add(1);
                continue;
            }
        };
        if slot.is_some() {
            return Err(bad(format!("entry {i}: GUID {} repeated", hex::encode(g))));
        }
        check_der_sequence(data).map_err(|e| bad(format!("entry {i}: {e}")))?;
        *slot = Some(data.to_vec());
    }
    Ok(certs)
}

/// Checks that an ASK/ARK file holds two PEM certificates (ASK, ARK), as
/// AMD KDS serves them; the certificates are the verifier's to judge.
pub fn check_ask_ark_pem(pem: &[u8]) -> Result<(), CollateralShapeError> {
    let count = String::from_utf8_lossy(pem)
        .matches("-----BEGIN CERTIFICATE-----")
        .count();
    if count != 2 {
        return Err(CollateralShapeError::PemCount { count });
    }
    Ok(())
}

/// PEM `CERTIFICATE` blocks of `ders`, in order, 64 columns.
fn pem_certificates(ders: &[&[u8]]) -> Vec<u8> {
    let mut out = String::new();
    for der in ders {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        for chunk in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out.into_bytes()
}

/// What one attempt of the extended request produced.
struct Obtained {
    resp: Box<SnpReportResp>,
    /// `None`: `SNP_GET_REPORT` was used (no extended request).
    certs: Option<Vec<u8>>,
}

impl<D: SevGuestDevice> SnpProvider<D> {
    pub fn new(device: D, options: SnpOptions) -> SnpProvider<D> {
        SnpProvider {
            device,
            options,
            bundle: None,
            collateral_loaded: false,
        }
    }

    /// The device, for tests that inspect a fake.
    pub fn device(&self) -> &D {
        &self.device
    }

    fn request_error(&self, operation: &'static str, e: GuestRequestError) -> ProviderError {
        if e.errno == libc::ENOENT || e.errno == libc::ENODEV || e.errno == libc::ENXIO {
            return ProviderError::DeviceMissing {
                path: self.device.path().to_path_buf(),
            };
        }
        ProviderError::GuestRequest {
            operation,
            errno: e.errno,
            fw_error: e.fw_error(),
            vmm_error: e.vmm_error(),
        }
    }

    fn is_throttled(e: &GuestRequestError) -> bool {
        is_busy(&io::Error::from_raw_os_error(e.errno))
            || (e.errno == libc::EIO && e.vmm_error() == SNP_GUEST_VMM_ERR_BUSY)
    }

    /// One request with the certificate-buffer retry inside it.
    fn obtain_once(
        &self,
        req: &SnpReportReq,
        certs_len: &mut usize,
        grown: &mut bool,
    ) -> Result<Obtained, Retry<ProviderError>> {
        loop {
            let mut ext = SnpExtReportReq::new(*req);
            let mut resp = Box::<SnpReportResp>::default();
            let mut certs = vec![0u8; *certs_len];
            match self.device.get_ext_report(&mut ext, &mut resp, &mut certs) {
                Ok(()) => {
                    return Ok(Obtained {
                        resp,
                        certs: Some(certs),
                    });
                }
                Err(e)
                    if e.errno == libc::EIO && e.vmm_error() == SNP_GUEST_VMM_ERR_INVALID_LEN =>
                {
                    let needed = usize::try_from(ext.certs_len).unwrap_or(usize::MAX);
                    if *grown || needed <= *certs_len || needed > MAX_CERTS_LEN {
                        return Err(Retry::Fail(ProviderError::CertBufferTooSmall {
                            offered: *certs_len,
                            needed,
                        }));
                    }
                    tracing::debug!(needed, "sev-guest: certificate buffer too small, growing");
                    *certs_len = needed.next_multiple_of(PAGE_SIZE);
                    *grown = true;
                }
                Err(e) if matches!(e.errno, libc::ENOTTY | libc::EOPNOTSUPP) => {
                    tracing::info!("sev-guest: no SNP_GET_EXT_REPORT, using SNP_GET_REPORT");
                    let mut resp = Box::<SnpReportResp>::default();
                    return match self.device.get_report(req, &mut resp) {
                        Ok(()) => Ok(Obtained { resp, certs: None }),
                        Err(e) if Self::is_throttled(&e) => Err(Retry::Busy),
                        Err(e) => Err(Retry::Fail(self.request_error("SNP_GET_REPORT", e))),
                    };
                }
                Err(e) if Self::is_throttled(&e) => return Err(Retry::Busy),
                Err(e) => return Err(Retry::Fail(self.request_error("SNP_GET_EXT_REPORT", e))),
            }
        }
    }
}

/// The two steps of a hardware provider, in sealing order (the run path
/// takes them through [`Attesting`](super::select::Attesting)).
impl<D: SevGuestDevice> SnpProvider<D> {
    /// The platform this provider attests.
    pub fn platform(&self) -> Platform {
        Platform::SevSnp
    }

    /// Loads the offline bundle, if one is configured: the VCEK must be one
    /// DER certificate, the ASK/ARK file PEM text.
    pub fn collateral(&mut self) -> Result<(), ProviderError> {
        self.bundle = match &self.options.bundle {
            None => None,
            Some(b) => {
                let vcek = read_bundle_file(&b.vcek_der, 16 * 1024)?;
                check_der_sequence(&vcek).map_err(|reason| ProviderError::Bundle {
                    path: b.vcek_der.clone(),
                    reason: format!("VCEK is not one DER certificate: {reason}"),
                })?;
                let ask_ark = match &b.ask_ark_pem {
                    None => None,
                    Some(p) => {
                        let pem = read_bundle_file(p, 64 * 1024)?;
                        check_ask_ark_pem(&pem).map_err(|reason| ProviderError::Bundle {
                            path: p.clone(),
                            reason: reason.to_string(),
                        })?;
                        Some(pem)
                    }
                };
                Some(LoadedBundle {
                    vcek_path: b.vcek_der.clone(),
                    vcek,
                    ask_ark,
                })
            }
        };
        self.collateral_loaded = true;
        Ok(())
    }

    /// After the collateral: evidence whose report data is `report_data`,
    /// refused unless the platform echoed it.
    pub fn attest(
        &mut self,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<HardwareEvidence, ProviderError> {
        if !self.collateral_loaded {
            return Err(ProviderError::CollateralNotLoaded);
        }
        let req = SnpReportReq::new(*report_data, REQUESTED_VMPL);
        let mut certs_len = self
            .options
            .initial_certs_len
            .max(PAGE_SIZE)
            .next_multiple_of(PAGE_SIZE);
        let mut grown = false;
        let obtained = self
            .options
            .retry
            .run("sev-guest report", || {
                self.obtain_once(&req, &mut certs_len, &mut grown)
            })
            .map_err(super::RetryError::into_inner)?;

        let report = parse_report_response(&obtained.resp)?;
        if report.report_data != *report_data {
            return Err(ProviderError::ReportDataMismatch {
                field: "REPORT_DATA",
            });
        }
        if report.vmpl != REQUESTED_VMPL {
            return Err(ProviderError::VmplMismatch {
                requested: REQUESTED_VMPL,
                found: report.vmpl,
            });
        }
        let host = match &obtained.certs {
            Some(buf) => parse_cert_table(buf)?,
            None => HostCertificates::default(),
        };

        let (key, source) = match (report.signing_key, &host) {
            (SigningKey::Vcek, HostCertificates { vcek: Some(v), .. }) => {
                (Some(v.clone()), CollateralSource::Host)
            }
            (SigningKey::Vlek, HostCertificates { vlek: Some(v), .. }) => {
                (Some(v.clone()), CollateralSource::Host)
            }
            (SigningKey::Vlek, _) => {
                return Err(ProviderError::NoEndorsementKey {
                    key: "VLEK",
                    reason: "the report is VLEK-signed and the host supplied no VLEK".into(),
                });
            }
            (SigningKey::Vcek, _) => match &self.bundle {
                Some(b) => {
                    tracing::info!(
                        bundle = %b.vcek_path.display(),
                        host_certificates = !host.is_empty(),
                        "sev-guest: host supplied no VCEK, using the offline bundle"
                    );
                    (
                        Some(b.vcek.clone()),
                        CollateralSource::OfflineBundle {
                            path: b.vcek_path.clone(),
                        },
                    )
                }
                // No VCEK here: the run path takes the host's bundle sent
                // with the job, or refuses (`select::Attesting`).
                None => {
                    tracing::info!(
                        host_certificates = !host.is_empty(),
                        "sev-guest: host supplied no VCEK and no enclave-side bundle is configured"
                    );
                    (None, CollateralSource::Absent)
                }
            },
        };

        let chain = match (&source, &host.ask, &host.ark) {
            (CollateralSource::Host, Some(ask), Some(ark)) => {
                Some(pem_certificates(&[ask.as_slice(), ark.as_slice()]))
            }
            _ => self.bundle.as_ref().and_then(|b| b.ask_ark.clone()),
        };
        let mut collateral: Vec<EvidenceBlob> = Vec::new();
        if let Some(key) = key {
            if let Some(chain) = chain {
                collateral.push(blob(Platform::SevSnp, "evidence/snp-ask-ark.pem", chain)?);
            }
            collateral.push(blob(Platform::SevSnp, "evidence/snp-vcek.der", key)?);
        }

        Ok(HardwareEvidence {
            platform: Platform::SevSnp,
            report_data: *report_data,
            measurement: Measurement {
                kind: MeasurementKind::SnpMeasurement,
                value: report.measurement,
            },
            attestation: blob(Platform::SevSnp, "evidence/snp-report.bin", report.bytes)?,
            collateral,
            collateral_source: source,
        })
    }
}

impl<D: SevGuestDevice> Driver for SnpProvider<D> {
    fn platform(&self) -> Platform {
        SnpProvider::platform(self)
    }

    fn collateral(&mut self) -> Result<(), ProviderError> {
        SnpProvider::collateral(self)
    }

    fn attest(
        &mut self,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<HardwareEvidence, ProviderError> {
        SnpProvider::attest(self, report_data)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::*;

    /// Byte layouts of `include/uapi/linux/sev-guest.h` (x86-64).
    #[test]
    fn uapi_layouts() {
        assert_eq!(size_of::<SnpReportReq>(), 96);
        assert_eq!(offset_of!(SnpReportReq, user_data), 0);
        assert_eq!(offset_of!(SnpReportReq, vmpl), 64);
        assert_eq!(offset_of!(SnpReportReq, rsvd), 68);

        assert_eq!(size_of::<SnpReportResp>(), 4000);

        assert_eq!(size_of::<SnpExtReportReq>(), 112);
        assert_eq!(align_of::<SnpExtReportReq>(), 8);
        assert_eq!(offset_of!(SnpExtReportReq, data), 0);
        assert_eq!(offset_of!(SnpExtReportReq, certs_address), 96);
        assert_eq!(offset_of!(SnpExtReportReq, certs_len), 104);

        assert_eq!(size_of::<SnpGuestRequestIoctl>(), 32);
        assert_eq!(offset_of!(SnpGuestRequestIoctl, msg_version), 0);
        assert_eq!(offset_of!(SnpGuestRequestIoctl, req_data), 8);
        assert_eq!(offset_of!(SnpGuestRequestIoctl, resp_data), 16);
        assert_eq!(offset_of!(SnpGuestRequestIoctl, exitinfo2), 24);
    }

    /// `MSG_REPORT_RSP` and the report fit the response buffer; the report
    /// fields sit where spec 56860 puts them.
    #[test]
    fn firmware_layouts() {
        const { assert!(MSG_REPORT_RSP_REPORT_OFFSET + SNP_REPORT_LEN <= SNP_RESP_DATA_LEN) };
        assert_eq!(MSG_REPORT_RSP_REPORT_OFFSET, 0x20);
        assert_eq!(report::REPORT_DATA.offset(), 0x50);
        assert_eq!(report::MEASUREMENT.offset(), 0x90);
        assert_eq!(report::REPORT_DATA.size(), REPORT_DATA_LEN);
        assert_eq!(report::MEASUREMENT.size(), MEASUREMENT_LEN);
        assert_eq!(report::REPORT_DATA.end(), report::MEASUREMENT.offset());
    }

    /// The GUID constants are the text GUIDs in RFC 4122 byte order.
    #[test]
    fn guids_match_their_text_form() {
        for (bytes, text) in [
            (guid::VCEK, "63da758d-e664-4564-adc5-f4b93be8accd"),
            (guid::VLEK, "a8074bc2-a25a-483e-aae6-39c045a0b8a1"),
            (guid::ASK, "4ab7b379-bbac-4fe4-a02f-05aef327c782"),
            (guid::ARK, "c0b406a4-a803-4952-9743-3fb6014cd0ae"),
        ] {
            assert_eq!(hex::encode(bytes), text.replace('-', ""));
        }
    }

    #[test]
    fn exitinfo2_halves() {
        let e = GuestRequestError {
            errno: libc::EIO,
            exitinfo2: (u64::from(SNP_GUEST_VMM_ERR_INVALID_LEN) << 32) | 0x16,
        };
        assert_eq!(e.vmm_error(), 1);
        assert_eq!(e.fw_error(), 0x16);
    }

    fn table(entries: &[([u8; 16], u32, u32)], len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        for (i, (g, o, l)) in entries.iter().enumerate() {
            let at = i * 24;
            buf[at..at + 16].copy_from_slice(g);
            buf[at + 16..at + 20].copy_from_slice(&o.to_le_bytes());
            buf[at + 20..at + 24].copy_from_slice(&l.to_le_bytes());
        }
        buf
    }

    #[test]
    fn cert_table_rules() {
        let cert = [0x30u8, 0x01, 0x00];
        // One VCEK after a two-entry table (VCEK + terminator = 48 bytes).
        let mut buf = table(&[(guid::VCEK, 48, 3)], 64);
        buf[48..51].copy_from_slice(&cert);
        let certs = parse_cert_table(&buf).expect("table");
        assert_eq!(certs.vcek.as_deref(), Some(&cert[..]));
        assert!(certs.ask.is_none());

        // Empty table.
        assert!(parse_cert_table(&[0u8; 4096]).expect("empty").is_empty());
        // No terminator.
        let full = table(&[(guid::ASK, 0, 1)], 24);
        assert!(parse_cert_table(&full).is_err());
        // Pointing into the table.
        assert!(parse_cert_table(&table(&[(guid::VCEK, 24, 3)], 64)).is_err());
        // Past the end.
        assert!(parse_cert_table(&table(&[(guid::VCEK, 48, 17)], 64)).is_err());
        // Repeated GUID.
        let mut rep = table(&[(guid::VCEK, 72, 3), (guid::VCEK, 72, 3)], 96);
        rep[72..75].copy_from_slice(&cert);
        assert!(parse_cert_table(&rep).is_err());
        // Not DER.
        assert!(parse_cert_table(&table(&[(guid::VCEK, 48, 3)], 64)).is_err());
    }

    #[test]
    fn pem_wraps_at_64_columns() {
        let pem = String::from_utf8(pem_certificates(&[&[0u8; 100], &[1u8; 3]])).expect("utf8");
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2].len(), 64);
        assert_eq!(lines[3], "AAAAAA=="); // 100 bytes: 136 base64 characters
        assert_eq!(lines[4], "-----END CERTIFICATE-----");
        assert_eq!(lines[6], "AQEB");
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 2);
    }
}
