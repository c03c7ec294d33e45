//! Attestation providers: given the 64-byte report data that binds a
//! manifest, produce the platform's evidence.
//!
//! Only the `none` provider exists so far: it produces no evidence at all and
//! the verifier reports such artifacts as `unattested`. Hardware providers
//! (Nitro NSM, SEV-SNP sev-guest, TDX configfs-tsm) come with the attestation
//! issues.

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
