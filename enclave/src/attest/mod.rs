//! Attestation providers: the platform's collateral, obtained before the
//! manifest is written (receipt v2 lists it in the signed manifest), and,
//! given the 64-byte report data that binds the manifest, the attestation.
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
//! Two software providers live here: `none` (no TEE at all, no evidence;
//! the verifier reports it as `unattested`) and `simulated` ([`sim`]: a
//! software TEE whose evidence is an AWS-Nitro-format document under a
//! per-installation sim root; the verifier checks it only against a root
//! the caller names and reports it as `simulated`, never `verified`). Each
//! writes its own platform name into the manifest and the evidence index,
//! so a simulated run is never reported as `none` (nor as hardware).
//! Hardware providers (Nitro NSM, SEV-SNP sev-guest, TDX configfs-tsm)
//! come with the attestation issues.

pub mod sim;

use kolm_format::evidence::EvidenceRole;
use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;

pub use sim::SimulatedProvider;

/// Why evidence could not be obtained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttestError {
    #[error("attestation device: {0}")]
    Device(String),
    /// The simulated TEE could not produce its evidence.
    #[error("simulated TEE: {0}")]
    Sim(#[from] sim::SimError),
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
}

/// The host's collateral bundle as a job's submit carried it
/// (`job-submit.collateral`), each file checked for its shape
/// ([`HostCollateral::parse`]): a DER certificate, a PEM pair, a
/// `QuoteCollateralV3` JSON object. Whether it is genuine, current and
/// for this chip is the verifier's to judge: the receipt binds what is
/// used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCollateral {
    /// `(slot path, bytes)`, in the order the host sent them.
    files: Vec<(&'static str, Vec<u8>)>,
}

/// A file of the host's collateral that is refused (the job is refused
/// before any input byte is stored).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the host's collateral {path:?}: {reason}")]
pub struct HostCollateralError {
    pub path: String,
    pub reason: String,
}

// The host's bytes: the verifier's lint set holds.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
impl HostCollateral {
    /// Checks each submitted file against its slot's shape. The wire
    /// decoder already held the paths to hardware collateral slots, once
    /// each, within their caps; that is checked again here, so this type
    /// holds whatever way the files arrived.
    pub fn parse(
        files: &[kolm_transport::message::CollateralFile],
    ) -> Result<HostCollateral, HostCollateralError> {
        let mut out: Vec<(&'static str, Vec<u8>)> = Vec::with_capacity(files.len());
        for f in files {
            let err = |reason: String| HostCollateralError {
                path: f.path.clone(),
                reason,
            };
            let slot = kolm_transport::message::collateral_slot(&f.path)
                .ok_or_else(|| err("not a collateral file of any hardware platform".into()))?;
            if out.iter().any(|(p, _)| *p == slot.path) {
                return Err(err("sent twice".into()));
            }
            if u64::try_from(f.data.len()).map_or(true, |n| n > slot.max_bytes) {
                return Err(err(format!(
                    "{} bytes, over its slot's {}",
                    f.data.len(),
                    slot.max_bytes
                )));
            }
            crate::providers::check_collateral_shape(slot.path, &f.data).map_err(err)?;
            out.push((slot.path, f.data.clone()));
        }
        Ok(HostCollateral { files: out })
    }

    /// No files (the host has no bundle).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The files' slot paths, in the order sent.
    pub fn paths(&self) -> Vec<&'static str> {
        self.files.iter().map(|(p, _)| *p).collect()
    }

    /// The files, `(slot path, bytes)`.
    pub fn files(&self) -> &[(&'static str, Vec<u8>)] {
        &self.files
    }
}

/// Where a job's collateral came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollateralOrigin {
    /// The enclave's own: the platform (the SEV-SNP host's extended-report
    /// certificates), the enclave-side `--bundle`, or none needed (the
    /// evidence carries its chain, or there is no TEE).
    Enclave,
    /// The host's bundle, sent with the job: neither the platform nor the
    /// enclave had any.
    HostBundle,
}

/// A job's collateral ([`AttestationProvider::job_collateral`]) and what
/// became of the host's.
#[derive(Debug, Clone)]
pub struct JobCollateral {
    /// What the manifest lists and the evidence slot holds.
    pub bundle: CollateralBundle,
    pub origin: CollateralOrigin,
    /// The host's files not used (the enclave's own won, or they are not
    /// this platform's).
    pub ignored: Vec<&'static str>,
}

/// A source of platform evidence.
pub trait AttestationProvider {
    /// The platform this provider attests.
    fn platform(&self) -> Platform;
    /// The launch measurement the platform reports, if any.
    fn measurement(&self) -> Option<Vec<u8>>;
    /// The collateral the verifier needs offline (certificates, CRLs, TCB
    /// info), each under its evidence slot's name; empty for platforms
    /// whose attestation carries its own chain. Called before the manifest
    /// is written: the manifest lists these files.
    fn collateral(&self) -> Result<CollateralBundle, AttestError>;
    /// The attestation whose report data is `report_data` (the attestation
    /// file only; the collateral is added from [`Self::collateral`]).
    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError>;

    /// [`Self::collateral`] for a job whose submit carried the host's
    /// collateral `host`. A provider whose platform needs collateral (the
    /// hardware adapter, `providers::select::Attesting`) uses its own where
    /// it has any (the platform's, then the enclave-side bundle's) and the
    /// host's files of its platform only where it has none. This default,
    /// for providers that need nobody's collateral (`none`, the simulated
    /// TEE, which writes its own), ignores the host's.
    fn job_collateral(&self, host: &HostCollateral) -> Result<JobCollateral, AttestError> {
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
    fn identity_evidence(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
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

/// No TEE: no evidence. Artifacts sealed with it verify as `unattested`.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoneProvider;

impl AttestationProvider for NoneProvider {
    fn platform(&self) -> Platform {
        Platform::None
    }

    fn measurement(&self) -> Option<Vec<u8>> {
        None
    }

    fn collateral(&self) -> Result<CollateralBundle, AttestError> {
        Ok(CollateralBundle::empty(Platform::None))
    }

    fn attest(&self, _report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
        Ok(EvidenceBundle {
            platform: Platform::None,
            files: Vec::new(),
        })
    }
}
