//! `--attest sim` (feature `sim` only): the simulated TEE of the
//! `kolm-sim-tee` crate as an [`AttestationProvider`]. It is a software
//! stand-in that proves nothing about where a job ran: its evidence is in a
//! real format (Nitro, SEV-SNP or TDX, `--sim-format`) under this
//! installation's own root, sealed under platform `simulated`, and the
//! verifier reports it as `simulated`, never `verified`. A build without
//! the feature has neither this module nor the crate.

use kolm_format::seal::{CollateralBundle, EvidenceBundle};
use kolm_policy::Platform;

/// The simulated TEE, under the name the run path knew it by.
pub use kolm_sim_tee::SimTee as SimulatedProvider;
pub use kolm_sim_tee::*;

use super::{AttestationProvider, ProviderError};

impl AttestationProvider for SimTee {
    fn platform(&self) -> Platform {
        Platform::Simulated
    }

    /// The SHA-384 of the `kolm-enclave` binary (a stand-in, not an
    /// enclave image measurement): what the verifier reads as the launch
    /// measurement of every form (the Nitro form's PCR0).
    fn measurement(&self) -> Option<Vec<u8>> {
        Some(self.launch_measurement().to_vec())
    }

    fn collateral(&self) -> Result<CollateralBundle, ProviderError> {
        Ok(self.collateral_bundle()?)
    }

    fn attest(&self, report_data: &[u8; 64]) -> Result<EvidenceBundle, ProviderError> {
        Ok(self.evidence(report_data)?)
    }
}
