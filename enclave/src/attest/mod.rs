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
