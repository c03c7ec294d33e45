//! Checking the enclave's identity before anything is sent to it
//! (`docs/sealed-run.md`, "Identity evidence").
//!
//! A `hello` names the Ed25519 key that will sign the receipt and carries
//! the platform's evidence over it (report data
//! `identity_report_data(key)`). The host judges that evidence with the
//! verifier library, exactly as `kolm-verify` judges a receipt's, before it
//! submits the job: an enclave whose key is not attested (or attested by
//! another platform, or under another launch measurement than it claims)
//! gets no spec, no policy and no input byte. The decision is the host's
//! own, from verified evidence and the job's policy: the platform must be
//! one the policy allows; platform `none` is refused unless the operator
//! allowed it (`--dangerous-allow-unattested`, or `--attest none` on an
//! enclave this host started itself); simulated evidence needs a sim root
//! the operator trusts; hardware evidence whose launch measurement the
//! policy does not pin is refused unless `--dangerous-any-measurement`.
//! What the enclave says about itself decides nothing. The artifact is
//! judged again afterwards and must be signed by this same key
//! (`main.rs`).

use std::collections::BTreeMap;
use std::path::Path;

use kolm_format::binding::identity_report_data;
use kolm_policy::{Platform, Policy};
use kolm_transport::message::Hello;
use kolm_verifier::artifact::VerifyAt;
use kolm_verifier::sim::SimRoots;
use time::OffsetDateTime;

/// What the host concluded about the enclave's identity key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityVerdict {
    /// Hardware evidence verified, bound to the key, and the policy pins
    /// the launch measurement.
    Attested { platform: Platform, checks: usize },
    /// Hardware evidence verified and bound, but the policy pins no launch
    /// identity for this platform, accepted only because the operator said
    /// `--dangerous-any-measurement` (the receipt's verdict will be
    /// `unpinned`).
    Unpinned { platform: Platform, checks: usize },
    /// kolm simulated TEE evidence verified against the sim root: NOT A
    /// TEE.
    Simulated { checks: usize },
    /// Platform `none`: nothing is attested; accepted only because the
    /// operator allowed it.
    Unattested,
}

impl IdentityVerdict {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            IdentityVerdict::Attested { platform, checks } => {
                format!("identity key attested by {platform} evidence ({checks} checks)")
            }
            IdentityVerdict::Unpinned { platform, checks } => format!(
                "identity key attested by {platform} evidence ({checks} checks); the policy \
                 pins no launch measurement (accepted: --dangerous-any-measurement)"
            ),
            IdentityVerdict::Simulated { checks } => format!(
                "identity key under SIMULATED evidence ({checks} checks against the sim root): \
                 NOT A TEE"
            ),
            IdentityVerdict::Unattested => {
                "identity key NOT attested (platform none; accepted: unattested allowed)".into()
            }
        }
    }

    /// The word for `--json`.
    pub fn name(&self) -> &'static str {
        match self {
            IdentityVerdict::Attested { .. } => "attested",
            IdentityVerdict::Unpinned { .. } => "unpinned",
            IdentityVerdict::Simulated { .. } => "simulated",
            IdentityVerdict::Unattested => "unattested",
        }
    }
}

/// Why the enclave's identity is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    #[error("the enclave's identity evidence is incomplete: {0}")]
    Incomplete(String),
    #[error("the enclave's identity evidence was rejected: {0}")]
    Rejected(String),
    #[error("the identity evidence proves platform {proved}, the enclave says {claimed}")]
    PlatformMismatch { proved: Platform, claimed: Platform },
    #[error(
        "the enclave claims launch measurement {claimed}, its identity evidence attests {attested}"
    )]
    MeasurementMismatch { claimed: String, attested: String },
    #[error(
        "the enclave runs the kolm simulated TEE, but no sim root is available to check it \
         ({0})"
    )]
    NoSimRoot(String),
    #[error("reading the collateral bundle {path}: {reason}")]
    Bundle { path: String, reason: String },
    /// The job's policy does not allow the platform the enclave runs on.
    #[error(
        "the job's policy does not allow platform {platform} (allowed_platforms = [{allowed}]): \
         nothing was sent"
    )]
    PlatformNotAllowed { platform: Platform, allowed: String },
    /// Platform `none`, and the operator did not allow unattested runs.
    #[error(
        "the enclave runs without attestation (platform none): nothing proves what it is, so \
         nothing was sent (allow it with --dangerous-allow-unattested)"
    )]
    Unattested,
    /// Hardware evidence verified, but the policy pins no launch
    /// measurement and the operator did not accept any.
    #[error(
        "the {platform} evidence verifies, but the job's policy pins no launch measurement \
         for it, so any workload in a genuine TEE could be this enclave: nothing was sent \
         (pin the measurement {measurement} in the policy, or pass \
         --dangerous-any-measurement)"
    )]
    Unpinned {
        platform: Platform,
        measurement: String,
    },
}

/// What the host trusts when it judges a hello.
pub struct IdentityTrust<'a> {
    /// The job's policy (the same one the artifact is verified under).
    pub policy: &'a Policy,
    /// The collateral bundle (`--bundle DIR`), which completes hardware
    /// evidence the enclave sent without its collateral.
    pub bundle: Option<&'a Path>,
    /// The sim root the operator trusts, asked for only when the enclave
    /// is `simulated`; an error (such as "not trusted") refuses the
    /// enclave.
    pub sim_root: &'a mut dyn FnMut() -> Result<SimRoots, String>,
    /// Platform `none` is accepted (if the policy allows it).
    pub dangerous_allow_unattested: bool,
    /// Hardware evidence is accepted without a pinned launch measurement.
    pub dangerous_any_measurement: bool,
}

impl std::fmt::Debug for IdentityTrust<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityTrust")
            .field("bundle", &self.bundle)
            .field(
                "dangerous_allow_unattested",
                &self.dangerous_allow_unattested,
            )
            .field("dangerous_any_measurement", &self.dangerous_any_measurement)
            .finish_non_exhaustive()
    }
}

/// Judges `hello`'s identity evidence at `now`, and whether the job may go
/// to it: `Ok` only when it may.
pub fn verify(
    hello: &Hello,
    trust: &mut IdentityTrust<'_>,
    now: OffsetDateTime,
) -> Result<IdentityVerdict, IdentityError> {
    // The policy first: an enclave on a platform the job's policy forbids
    // gets nothing, however good its evidence.
    trust
        .policy
        .check_platform(hello.platform)
        .map_err(|_| IdentityError::PlatformNotAllowed {
            platform: hello.platform,
            allowed: trust
                .policy
                .allowed_platforms
                .iter()
                .map(|p| format!("{:?}", p.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    if hello.platform == Platform::None {
        // The wire format admits no evidence on `none`.
        if !trust.dangerous_allow_unattested {
            return Err(IdentityError::Unattested);
        }
        return Ok(IdentityVerdict::Unattested);
    }
    let mut files: BTreeMap<String, Vec<u8>> = hello
        .evidence
        .iter()
        .map(|f| (f.path.clone(), f.data.clone()))
        .collect();
    if let Some(dir) = trust.bundle {
        for (path, bytes) in bundle_files(dir, hello.platform)? {
            files.entry(path).or_insert(bytes);
        }
    }
    let sim_root = if hello.platform == Platform::Simulated {
        Some((trust.sim_root)().map_err(IdentityError::NoSimRoot)?)
    } else {
        None
    };
    let outcome = kolm_verifier::platform::verify_slot(
        hello.platform,
        &files,
        VerifyAt::Instant(now),
        now,
        trust.policy,
        &identity_report_data(&hello.identity_key),
        sim_root.as_ref(),
    )
    .map_err(|e| IdentityError::Incomplete(e.to_string()))?;
    let att = outcome.map_err(|r| IdentityError::Rejected(r.reason))?;
    if att.platform() != hello.platform {
        return Err(IdentityError::PlatformMismatch {
            proved: att.platform(),
            claimed: hello.platform,
        });
    }
    let attested = att.measurement().as_bytes();
    if attested.as_slice() != hello.measurement.as_slice() {
        return Err(IdentityError::MeasurementMismatch {
            claimed: hex::encode(&hello.measurement),
            attested: hex::encode(attested),
        });
    }
    let checks = att.checks.len();
    Ok(match hello.platform {
        Platform::Simulated => IdentityVerdict::Simulated { checks },
        platform if att.is_pinned() => IdentityVerdict::Attested { platform, checks },
        platform if trust.dangerous_any_measurement => {
            IdentityVerdict::Unpinned { platform, checks }
        }
        platform => {
            return Err(IdentityError::Unpinned {
                platform,
                measurement: hex::encode(attested),
            });
        }
    })
}

/// The bundle's files that are collateral slots of `platform`, under
/// their slot paths (`snp-vcek.der` -> `evidence/snp-vcek.der`).
fn bundle_files(dir: &Path, platform: Platform) -> Result<Vec<(String, Vec<u8>)>, IdentityError> {
    let bundle = crate::session::read_bundle(dir).map_err(|e| IdentityError::Bundle {
        path: e.path,
        reason: e.reason,
    })?;
    Ok(crate::session::platform_collateral(platform, &bundle)
        .into_iter()
        .map(|f| (f.path, f.data))
        .collect())
}
