//! `--attest none`: no TEE, no evidence.

use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;

use super::{AttestationProvider, ProviderError};

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

    fn collateral(&self) -> Result<CollateralBundle, ProviderError> {
        Ok(CollateralBundle::empty(Platform::None))
    }

    fn attest(&self, _report_data: &[u8; 64]) -> Result<EvidenceBundle, ProviderError> {
        Ok(EvidenceBundle {
            platform: Platform::None,
            files: Vec::new(),
        })
    }
}
