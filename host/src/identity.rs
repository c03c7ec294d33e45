//! Checking the enclave's identity before anything is sent to it
//! (`docs/sealed-run.md`, "Identity evidence").
//!
//! A `hello` names the Ed25519 key that will sign the receipt and carries
//! the platform's evidence over it (report data
//! `identity_report_data(key)`). The host judges that evidence with the
//! verifier library, exactly as `kolm-verify` judges a receipt's, before it
//! submits the job: an enclave whose key is not attested (or attested by
//! another platform, or under another launch measurement than it claims)
//! gets no spec, no policy and no input byte. The artifact is judged again
//! afterwards and must be signed by this same key (`main.rs`).

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
    /// identity for this platform (the receipt's verdict will be
    /// `unpinned`).
    Unpinned { platform: Platform, checks: usize },
    /// kolm simulated TEE evidence verified against the sim root: NOT A
    /// TEE.
    Simulated { checks: usize },
    /// Platform `none`: nothing is attested.
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
                 pins no launch measurement"
            ),
            IdentityVerdict::Simulated { checks } => format!(
                "identity key under SIMULATED evidence ({checks} checks against the sim root): \
                 NOT A TEE"
            ),
            IdentityVerdict::Unattested => "identity key NOT attested (platform none)".into(),
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
}

/// What the host trusts when it judges a hello.
pub struct IdentityTrust<'a> {
    /// The job's policy (the same one the artifact is verified under).
    pub policy: &'a Policy,
    /// The collateral bundle (`--bundle DIR`), which completes hardware
    /// evidence the enclave sent without its collateral.
    pub bundle: Option<&'a Path>,
    /// The sim root, asked for only when the enclave is `simulated`.
    pub sim_root: &'a mut dyn FnMut() -> Result<SimRoots, String>,
}

impl std::fmt::Debug for IdentityTrust<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityTrust")
            .field("bundle", &self.bundle)
            .finish_non_exhaustive()
    }
}

/// Judges `hello`'s identity evidence at `now`.
pub fn verify(
    hello: &Hello,
    trust: &mut IdentityTrust<'_>,
    now: OffsetDateTime,
) -> Result<IdentityVerdict, IdentityError> {
    if hello.platform == Platform::None {
        // The wire format admits no evidence on `none`.
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
        platform => IdentityVerdict::Unpinned { platform, checks },
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
