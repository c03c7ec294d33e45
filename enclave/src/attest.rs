//! Attestation providers: given the 64-byte report data that binds a
//! manifest, produce the platform's evidence.
//!
//! Two software providers exist so far, neither with evidence: `none` (no
//! TEE at all) and `simulated` (a software stand-in for a TEE, for tests).
//! Each writes its own platform name into the manifest and the evidence
//! index, so a simulated run is never reported as `none` (nor as hardware);
//! the verifier reports both as `unattested`. Hardware providers (Nitro NSM,
//! SEV-SNP sev-guest, TDX configfs-tsm) come with the attestation issues.

use kolm_format::seal::EvidenceBundle;
use kolm_policy::Platform;

/// Why evidence could not be obtained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttestError {
    #[error("attestation device: {0}")]
    Device(String),
}

/// A source of platform evidence.
pub trait AttestationProvider {
    /// The platform this provider attests.
    fn platform(&self) -> Platform;
    /// The launch measurement the platform reports, if any.
    fn measurement(&self) -> Option<Vec<u8>>;
    /// Evidence whose report data is `report_data`.
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

    fn attest(&self, _report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
        Ok(EvidenceBundle {
            platform: Platform::None,
            files: Vec::new(),
        })
    }
}

/// A simulated TEE (tests only): no evidence, no measurement. Artifacts
/// sealed with it say platform `simulated` and verify as `unattested`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SimulatedProvider;

impl AttestationProvider for SimulatedProvider {
    fn platform(&self) -> Platform {
        Platform::Simulated
    }

    fn measurement(&self) -> Option<Vec<u8>> {
        None
    }

    fn attest(&self, _report_data: &[u8; 64]) -> Result<EvidenceBundle, AttestError> {
        Ok(EvidenceBundle {
            platform: Platform::Simulated,
            files: Vec::new(),
        })
    }
}
