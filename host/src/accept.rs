//! Whether `kolm-host run` takes an artifact as its job's result: the
//! verifier's verdict is one of the three the host may accept for the
//! platform the enclave's hello claimed, the receipt is signed by the
//! identity key the host judged before it sent anything, and the manifest
//! binds the spec, policy and inputs the host sent. Anything else is kept
//! as `NAME.rejected.zip` and the run exits 1.

use kolm_format::manifest::Manifest;
use kolm_policy::Platform;
use kolm_verifier::report::{Verdict, VerifyReport};

use crate::job::Job;
use crate::output::JobMismatch;

/// What the host concluded about an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptance {
    /// The verifier's verdict.
    pub verdict: Verdict,
    /// The receipt's signer is the hello's identity key.
    pub signed_by_the_enclave: bool,
    /// The manifest binds what was sent (or why not).
    pub for_this_job: Result<(), JobMismatch>,
    /// All three hold: the artifact is the job's result.
    pub accepted: bool,
}

/// Judges the verifier's `report` on an artifact from the enclave whose
/// hello claimed `platform` and `identity_key`, for `job`.
pub fn judge(
    report: &VerifyReport,
    platform: Platform,
    identity_key: &[u8; 32],
    job: &Job,
    dangerous_any_measurement: bool,
) -> Acceptance {
    let signed_by_the_enclave = report
        .manifest
        .as_ref()
        .is_some_and(|m| m.signer.public_key.to_hex() == hex::encode(identity_key));
    let for_this_job = report.manifest.as_ref().map_or_else(
        || Err(JobMismatch::NoManifest),
        |m: &Manifest| crate::output::matches_job(m, job),
    );
    let accepted = signed_by_the_enclave
        && for_this_job.is_ok()
        && verdict_accepted(report.verdict, platform, dangerous_any_measurement);
    Acceptance {
        verdict: report.verdict,
        signed_by_the_enclave,
        for_this_job,
        accepted,
    }
}

/// The verdicts the host takes for a claimed platform: `verified` on any;
/// `simulated` only from an enclave that said it is the simulated TEE,
/// `unattested` only from one that said `none` (the host judged the hello
/// under the same switches, so these are what it agreed to talk to);
/// `unpinned` from hardware only under `--dangerous-any-measurement`.
/// Never `rejected`.
pub fn verdict_accepted(
    verdict: Verdict,
    platform: Platform,
    dangerous_any_measurement: bool,
) -> bool {
    match verdict {
        Verdict::Verified => true,
        Verdict::Simulated => platform == Platform::Simulated,
        Verdict::Unattested => platform == Platform::None,
        Verdict::Unpinned => {
            dangerous_any_measurement && !matches!(platform, Platform::None | Platform::Simulated)
        }
        Verdict::Rejected => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HARDWARE: [Platform; 5] = [
        Platform::Nitro,
        Platform::SevSnp,
        Platform::Tdx,
        Platform::AzureSevSnp,
        Platform::AzureTdx,
    ];

    #[test]
    fn a_rejected_artifact_is_never_taken() {
        for p in HARDWARE
            .into_iter()
            .chain([Platform::None, Platform::Simulated])
        {
            for dangerous in [false, true] {
                assert!(!verdict_accepted(Verdict::Rejected, p, dangerous), "{p}");
            }
        }
    }

    #[test]
    fn simulated_and_unattested_only_from_the_platform_that_said_so() {
        assert!(verdict_accepted(
            Verdict::Simulated,
            Platform::Simulated,
            false
        ));
        assert!(verdict_accepted(Verdict::Unattested, Platform::None, false));
        for p in HARDWARE {
            assert!(!verdict_accepted(Verdict::Simulated, p, true), "{p}");
            assert!(!verdict_accepted(Verdict::Unattested, p, true), "{p}");
        }
        assert!(!verdict_accepted(
            Verdict::Unattested,
            Platform::Simulated,
            true
        ));
        assert!(!verdict_accepted(Verdict::Simulated, Platform::None, true));
    }

    #[test]
    fn unpinned_hardware_only_under_the_dangerous_switch() {
        for p in HARDWARE {
            assert!(!verdict_accepted(Verdict::Unpinned, p, false), "{p}");
            assert!(verdict_accepted(Verdict::Unpinned, p, true), "{p}");
        }
        for p in [Platform::None, Platform::Simulated] {
            assert!(!verdict_accepted(Verdict::Unpinned, p, true), "{p}");
        }
    }

    #[test]
    fn verified_is_taken_from_any_platform() {
        for p in HARDWARE
            .into_iter()
            .chain([Platform::None, Platform::Simulated])
        {
            assert!(verdict_accepted(Verdict::Verified, p, false), "{p}");
        }
    }
}
