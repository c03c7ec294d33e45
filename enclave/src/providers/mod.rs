//! Attestation providers: one trait, [`AttestationProvider`], and one
//! error type, [`ProviderError`], for every source of evidence the run
//! path seals: `none` ([`NoneProvider`]: no TEE, no evidence; the verifier
//! reports it as `unattested`), the hardware TEEs (AWS Nitro over
//! `/dev/nsm`, AMD SEV-SNP over `/dev/sev-guest`, Intel TDX over Linux
//! configfs-tsm; [`nitro`], [`snp`], [`tdx`], each adapted by
//! [`select::Attesting`]), and, with the `sim` feature only, the simulated
//! TEE (`sim`, the adapter of the `kolm-sim-tee` crate: a software stand-in
//! whose evidence is in a real format under a per-installation root; the
//! verifier checks it only against a root the caller names and reports it
//! as `simulated`, never `verified`). [`select`] picks one at start
//! (`--attest auto|nitro|sev-snp|tdx|sim|none`). Each writes its own
//! platform name into the manifest and the evidence index, so a simulated
//! run is never reported as `none` (nor as hardware). A build without the
//! `sim` feature (a hardware image) has no simulated TEE at all: `--attest
//! sim` is refused there.
//!
//! A run calls [`AttestationProvider::collateral`] after the job ended and
//! before it reads its clock for `finished_at`, so that every date the
//! vendor signed into the collateral is no later than `finished_at`, which
//! the verifier checks (a host that serves collateral issued later than the
//! guest's clock claims gets a rejected artifact, not a backdated one).
//! Where collateral depends on the chip (SEV-SNP VCEK: chip id and reported
//! TCB; TDX: the FMSPC of the PCK certificate), a hardware provider first
//! requests a report with zero report data to learn those values.
//!
//! Each hardware provider takes the 64-byte report data that binds a
//! manifest and returns [`HardwareEvidence`]: the raw attestation bytes and
//! the offline collateral, each already named by its `kolm_format::evidence`
//! slot, plus the launch measurement the platform reported. Before anything
//! is handed back, the provider checks that the platform echoed the report
//! data it was given (and, where it applies, the nonce, public key, VMPL,
//! PCR0); a mismatch is an error naming the check, so nothing unbound is
//! ever sealed. Its two steps match the sealing flow: `collateral` runs
//! before the manifest is written (it loads and checks the offline
//! collateral bundle), `attest` after, with the manifest's report data.
//!
//! Every kernel interface sits behind a small device trait
//! ([`nitro::NsmDevice`], [`snp::SevGuestDevice`], [`tdx::TsmFs`]) whose
//! real implementation is the only code that touches the device; the tests
//! drive the providers through the faithful fakes in `fake` (feature
//! `fakes`, which only the tests turn on). The system calls themselves live
//! in `sys`, the one module here allowed `unsafe`.
//! `docs/attestation-providers.md` describes each interface and its errors.

mod collateral;
#[cfg(feature = "fakes")]
pub mod fake;
pub mod nitro;
mod none;
pub mod select;
#[cfg(feature = "sim")]
pub mod sim;
pub mod snp;
#[allow(unsafe_code)]
mod sys;
pub mod tdx;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use kolm_format::evidence::{EvidenceRole, evidence_slots};
use kolm_format::reader::ReadError;
use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;

pub use collateral::{
    CollateralOrigin, CollateralShapeError, DerShapeError, HostCollateral, HostCollateralError,
    JobCollateral, check_collateral_shape,
};
pub use none::NoneProvider;
#[cfg(feature = "sim")]
pub use sim::SimulatedProvider;

use collateral::check_der_sequence;

/// Length of the report data every platform carries.
pub const REPORT_DATA_LEN: usize = 64;

/// Length of the launch measurements kolm records (SHA-384 on all three).
pub const MEASUREMENT_LEN: usize = 48;

/// Which register or field a [`Measurement`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MeasurementKind {
    /// Nitro PCR0 (enclave image file), read with `DescribePCR`.
    NitroPcr0,
    /// SEV-SNP `MEASUREMENT` (report offset 0x90).
    SnpMeasurement,
    /// TDX `MRTD` (TD report body offset 136).
    TdxMrtd,
}

/// A launch measurement as the platform reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    pub kind: MeasurementKind,
    pub value: [u8; MEASUREMENT_LEN],
}

/// One evidence file, named by its `kolm_format::evidence` slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceBlob {
    /// ZIP path of the slot (`evidence/...`).
    pub path: &'static str,
    pub role: EvidenceRole,
    pub bytes: Vec<u8>,
}

/// Where the collateral in [`HardwareEvidence`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollateralSource {
    /// The evidence carries its own chain (Nitro).
    Embedded,
    /// The host returned it with the report (SEV-SNP extended report).
    Host,
    /// Read from the offline bundle file named here, because the platform
    /// supplied none (SEV-SNP without host certificates; TDX always).
    OfflineBundle { path: PathBuf },
    /// None: the platform supplied none and no enclave-side bundle is
    /// configured. The evidence carries no collateral; the run path
    /// completes it with the host's bundle sent with the job, or refuses
    /// (`select::Attesting`).
    Absent,
}

/// What a provider returns: everything kolm seals for one attestation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardwareEvidence {
    pub platform: Platform,
    /// The report data that was requested, and checked to be echoed.
    pub report_data: [u8; REPORT_DATA_LEN],
    /// The platform's signed report (document, report or quote).
    pub attestation: EvidenceBlob,
    /// Collateral files, sorted by path; empty when the source is
    /// [`CollateralSource::Absent`].
    pub collateral: Vec<EvidenceBlob>,
    pub collateral_source: CollateralSource,
    pub measurement: Measurement,
}

impl HardwareEvidence {
    /// The files as `kolm_format::seal` takes them, sorted by path.
    pub fn to_bundle(&self) -> EvidenceBundle {
        let mut files: Vec<_> = std::iter::once(&self.attestation)
            .chain(&self.collateral)
            .map(|b| (b.path.to_string(), b.bytes.clone(), b.role))
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        EvidenceBundle {
            platform: self.platform,
            files,
        }
    }
}

/// Builds a blob for `path`, checking that `platform` has that slot with
/// that role and that `bytes` fits its cap (the sealer would refuse it
/// later; refusing here names the provider step).
fn blob(
    platform: Platform,
    path: &'static str,
    bytes: Vec<u8>,
) -> Result<EvidenceBlob, ProviderError> {
    // Providers seal receipt v2, the version the enclave writes.
    let slot = evidence_slots(kolm_format::version::SpecVersion::V2, platform)
        .iter()
        .find(|s| s.path == path)
        .ok_or(ProviderError::Malformed {
            what: "evidence slot",
            reason: format!("{path} is not an evidence file of platform {platform}"),
        })?;
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if len > slot.max_bytes {
        return Err(ProviderError::TooLarge {
            what: path,
            len: bytes.len(),
            max: usize::try_from(slot.max_bytes).unwrap_or(usize::MAX),
        });
    }
    Ok(EvidenceBlob {
        path,
        role: slot.role,
        bytes,
    })
}

/// A source of platform evidence: the one provider trait. The run path
/// and the service take every provider (none, the hardware ones through
/// [`select::Attesting`], the simulated TEE) as one of these.
pub trait AttestationProvider {
    /// The platform this provider attests.
    fn platform(&self) -> Platform;
    /// The launch measurement the platform reports, if any.
    fn measurement(&self) -> Option<Vec<u8>>;
    /// The collateral the verifier needs offline (certificates, CRLs, TCB
    /// info), each under its evidence slot's name; empty for platforms
    /// whose attestation carries its own chain. Called before the manifest
    /// is written: the manifest lists these files.
    fn collateral(&self) -> Result<CollateralBundle, ProviderError>;
    /// The attestation whose report data is `report_data` (the attestation
    /// file only; the collateral is added from [`Self::collateral`]).
    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, ProviderError>;

    /// [`Self::collateral`] for a job whose submit carried the host's
    /// collateral `host`. A provider whose platform needs collateral (the
    /// hardware adapter, [`select::Attesting`]) uses its own where it has
    /// any (the platform's, then the enclave-side bundle's) and the host's
    /// files of its platform only where it has none. This default, for
    /// providers that need nobody's collateral (`none`, the simulated TEE,
    /// which writes its own), ignores the host's.
    fn job_collateral(&self, host: &HostCollateral) -> Result<JobCollateral, ProviderError> {
        Ok(JobCollateral {
            bundle: self.collateral()?,
            origin: CollateralOrigin::Enclave,
            ignored: host.paths(),
        })
    }

    /// The attestation of `report_data` with whatever collateral the
    /// provider has of its own, for a `hello`'s identity evidence: possibly
    /// none (a TDX guest without an enclave-side bundle), which the host
    /// completes from its bundle. This default is [`Self::collateral`] and
    /// [`Self::attest`] together.
    fn identity_evidence(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, ProviderError> {
        let collateral = self.collateral()?;
        let mut evidence = self.attest(report_data)?;
        for (path, data) in collateral.files {
            if !evidence.files.iter().any(|(p, _, _)| *p == path) {
                evidence.files.push((path, data, EvidenceRole::Collateral));
            }
        }
        Ok(evidence)
    }
}

/// What [`select::Attesting`] needs of a hardware provider (Nitro, SEV-SNP,
/// TDX): its two steps in sealing order. Not a provider trait (sealed:
/// nothing outside this module names or implements it); each hardware
/// provider has the same steps as inherent methods.
pub(crate) mod sealed {
    use super::{HardwareEvidence, Platform, ProviderError, REPORT_DATA_LEN};

    pub trait Driver {
        /// The platform this provider attests.
        fn platform(&self) -> Platform;
        /// Before the manifest: loads and checks the offline collateral the
        /// platform needs (none for Nitro). Calling it again reloads it.
        fn collateral(&mut self) -> Result<(), ProviderError>;
        /// After the manifest: evidence whose report data is `report_data`,
        /// refused unless the platform echoed it.
        fn attest(
            &mut self,
            report_data: &[u8; REPORT_DATA_LEN],
        ) -> Result<HardwareEvidence, ProviderError>;
    }
}

/// How often a device that says "busy, try again" is retried. The kernel
/// already retries throttled SEV-SNP guest requests internally; this bounds
/// what is left to user space (`EBUSY`, `EAGAIN`, `EINTR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (at least 1).
    pub max_attempts: u32,
    /// Delay before the second attempt; doubled each time after.
    pub initial_delay: Duration,
    /// Upper bound of one delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// No delays (tests).
    pub fn immediate(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            initial_delay: Duration::ZERO,
            max_delay: Duration::ZERO,
        }
    }

    /// Runs `op` until it succeeds, fails with something other than
    /// [`Retry::Busy`], or `max_attempts` are used up.
    fn run<T, E>(
        &self,
        operation: &'static str,
        mut op: impl FnMut() -> Result<T, Retry<E>>,
    ) -> Result<T, RetryError<E>> {
        let attempts = self.max_attempts.max(1);
        let mut delay = self.initial_delay;
        for attempt in 1..=attempts {
            match op() {
                Ok(v) => return Ok(v),
                Err(Retry::Fail(e)) => return Err(RetryError::Fail(e)),
                Err(Retry::Busy) if attempt < attempts => {
                    tracing::debug!(operation, attempt, "device busy, retrying");
                    if !delay.is_zero() {
                        std::thread::sleep(delay);
                    }
                    delay = delay.saturating_mul(2).min(self.max_delay);
                }
                Err(Retry::Busy) => {}
            }
        }
        Err(RetryError::Exhausted(ProviderError::Busy {
            operation,
            attempts,
        }))
    }
}

/// One attempt's outcome for [`RetryPolicy::run`].
enum Retry<E> {
    Busy,
    Fail(E),
}

enum RetryError<E> {
    Exhausted(ProviderError),
    Fail(E),
}

impl RetryError<ProviderError> {
    fn into_inner(self) -> ProviderError {
        match self {
            RetryError::Exhausted(e) | RetryError::Fail(e) => e,
        }
    }
}

/// `EBUSY`, `EAGAIN` and `EINTR`: the device asks to be asked again.
fn is_busy(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
    )
}

/// Why a provider produced no evidence: the one error type of every
/// provider. Each variant names the check or the step that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// A hardware provider's step failed on the run path
    /// ([`select::Attesting`]); `error` says which.
    #[error("attestation device: {error}")]
    Device { error: Box<ProviderError> },
    /// The run path asked for the attestation before the collateral (the
    /// probe that fixes it for the job).
    #[error("attestation device: attestation requested before the collateral")]
    AttestBeforeCollateral,
    /// The collateral of the attestation is not the probe's.
    #[error(
        "attestation device: the collateral changed between the probe and the attestation (a \
         TCB update, or the host served other certificates); nothing was sealed"
    )]
    CollateralChanged,
    /// The launch measurement of the attestation is not the probe's.
    #[error(
        "attestation device: the launch measurement changed between the probe and the attestation"
    )]
    MeasurementChanged,
    /// No source had a collateral file the platform's evidence cannot be
    /// checked offline without: nothing is sealed.
    #[error(
        "platform {platform} needs {path}: the platform supplied none, the enclave has no \
         --bundle with it, and the job's submit carried none (kolm-host run --bundle DIR \
         sends the host's)"
    )]
    MissingCollateral {
        platform: Platform,
        path: &'static str,
    },
    /// The simulated TEE could not produce its evidence.
    #[cfg(feature = "sim")]
    #[error("simulated TEE: {error}")]
    Sim { error: kolm_sim_tee::SimError },
    /// The device node or configfs directory does not exist.
    #[error("attestation device {} is missing", path.display())]
    DeviceMissing { path: PathBuf },
    /// A system call on the device failed.
    #[error("{operation} on {}: {error}", path.display())]
    Io {
        operation: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// The device stayed busy for every allowed attempt.
    #[error("{operation}: device still busy after {attempts} attempts")]
    Busy {
        operation: &'static str,
        attempts: u32,
    },
    /// A response or file ended early, had trailing bytes, or broke its format.
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    /// Something exceeded its size cap.
    #[error("{what} is {len} bytes, over its {max}-byte cap")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    /// The platform returned evidence for other report data: refused
    /// before sealing.
    #[error("{field} in the evidence differs from the requested report data")]
    ReportDataMismatch { field: &'static str },
    /// Another echoed request field (Nitro nonce or public key) differs.
    #[error("{field} in the evidence differs from the request")]
    EchoMismatch { field: &'static str },
    /// The NSM answered with an error code.
    #[error("NSM returned error {code}")]
    NsmError { code: String },
    /// The NSM answered a request with the wrong kind of response.
    #[error("NSM answered {request} with {found}")]
    UnexpectedResponse {
        request: &'static str,
        found: String,
    },
    /// A Nitro PCR check failed.
    #[error("PCR{index}: {reason}")]
    Pcr { index: u16, reason: String },
    /// The SEV-SNP guest request failed (`exitinfo2` split into its halves).
    #[error(
        "{operation} failed: errno {errno}, firmware error {fw_error:#x}, VMM error {vmm_error:#x}"
    )]
    GuestRequest {
        operation: &'static str,
        errno: i32,
        fw_error: u32,
        vmm_error: u32,
    },
    /// The SEV-SNP firmware's `MSG_REPORT_RSP` status was not success.
    #[error("SEV-SNP firmware report status {status:#x}")]
    FirmwareStatus { status: u32 },
    /// The host's certificate buffer was still too small after one retry
    /// with the length the kernel asked for.
    #[error("certificate buffer of {offered} bytes too small, host needs {needed}")]
    CertBufferTooSmall { offered: usize, needed: usize },
    /// The SEV-SNP report is not at the VMPL that was requested.
    #[error("report VMPL is {found}, requested {requested}")]
    VmplMismatch { requested: u32, found: u32 },
    /// No endorsement key certificate is available for the report.
    #[error("no {key} certificate: {reason}")]
    NoEndorsementKey { key: &'static str, reason: String },
    /// A file of the offline collateral bundle is missing or malformed.
    #[error("offline bundle {}: {reason}", path.display())]
    Bundle { path: PathBuf, reason: String },
    /// `attest` ran before `collateral`.
    #[error("collateral() must run before attest()")]
    CollateralNotLoaded,
    /// configfs-tsm reports a provider other than the one expected.
    #[error("configfs-tsm provider is {found:?}, expected {expected:?}")]
    WrongProvider {
        expected: &'static str,
        found: String,
    },
    /// configfs-tsm `generation` moved by more than our own write: another
    /// writer used the report directory concurrently.
    #[error(
        "configfs-tsm generation went from {before} to {after}, expected {expected} (concurrent writer)"
    )]
    GenerationChanged {
        before: u64,
        after: u64,
        expected: u64,
    },
}

// By hand, not `#[from]`: the cause is in the message, and a `source`
// would repeat it in a printed chain (anyhow's `{:#}`).
#[cfg(feature = "sim")]
impl From<kolm_sim_tee::SimError> for ProviderError {
    fn from(error: kolm_sim_tee::SimError) -> ProviderError {
        ProviderError::Sim { error }
    }
}

impl ProviderError {
    /// A hardware provider's step, failed on the run path.
    fn device(error: ProviderError) -> ProviderError {
        ProviderError::Device {
            error: Box::new(error),
        }
    }

    fn io(operation: &'static str, path: impl Into<PathBuf>, source: io::Error) -> ProviderError {
        let path = path.into();
        if source.kind() == io::ErrorKind::NotFound {
            ProviderError::DeviceMissing { path }
        } else {
            ProviderError::Io {
                operation,
                path,
                error: source,
            }
        }
    }

    fn malformed(what: &'static str, e: ReadError) -> ProviderError {
        ProviderError::Malformed {
            what,
            reason: e.to_string(),
        }
    }
}

/// Opens a device node read-write (both drivers require it).
fn open_device(path: PathBuf) -> Result<(PathBuf, std::fs::File), ProviderError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| ProviderError::io("open", &path, e))?;
    Ok((path, file))
}

/// Reads a file of the offline bundle, with a size cap.
fn read_bundle_file(path: &std::path::Path, max: usize) -> Result<Vec<u8>, ProviderError> {
    use std::io::Read as _;
    let err = |reason: String| ProviderError::Bundle {
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| err(e.to_string()))?;
    if bytes.len() > max {
        return Err(err(format!("over its {max}-byte cap")));
    }
    if bytes.is_empty() {
        return Err(err("empty".into()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_is_bounded() {
        let mut calls = 0;
        let r: Result<(), _> = RetryPolicy::immediate(3).run("op", || {
            calls += 1;
            Err::<(), Retry<ProviderError>>(Retry::Busy)
        });
        assert_eq!(calls, 3);
        assert!(matches!(
            r.map_err(RetryError::into_inner),
            Err(ProviderError::Busy { attempts: 3, .. })
        ));
        let mut calls = 0;
        let r = RetryPolicy::immediate(3).run("op", || {
            calls += 1;
            if calls < 3 {
                Err(Retry::<ProviderError>::Busy)
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.ok(), Some(7));
    }

    #[test]
    fn blob_checks_slot_and_cap() {
        assert!(blob(Platform::Nitro, "evidence/nitro.cose", vec![1]).is_ok());
        assert!(matches!(
            blob(Platform::Nitro, "evidence/tdx-quote.bin", vec![1]),
            Err(ProviderError::Malformed { .. })
        ));
        assert!(matches!(
            blob(Platform::SevSnp, "evidence/snp-report.bin", vec![0; 1185]),
            Err(ProviderError::TooLarge { .. })
        ));
    }
}
