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
use kolm_verifier::attested::Identity;
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
         ({error})"
    )]
    NoSimRoot { error: SimRootLoadError },
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

/// Why no sim root is at hand to check a simulated enclave: what
/// [`IdentityTrust::sim_root`] returns instead of one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimRootLoadError {
    /// The operator trusts no sim root.
    #[error(
        "no sim root is trusted: the simulated TEE proves nothing, so the host sends it \
         nothing unless told to trust a sim root (--dangerous-trust-sim-root ROOT.pem, or \
         --attest sim on an enclave this host starts itself)"
    )]
    NotTrusted,
    // The causes below are part of the message, not a `source`: shown with
    // anyhow's `{:#}`, a source would print them twice.
    /// The root file the operator named cannot be read.
    #[error("--dangerous-trust-sim-root {path}: {error}")]
    Unreadable { path: String, error: std::io::Error },
    /// The root file the operator named holds no valid sim roots.
    #[error("--dangerous-trust-sim-root {path}: {error}")]
    Invalid {
        path: String,
        error: kolm_verifier::sim::SimRootError,
    },
    /// The roots of the enclave binary this host launches could not be
    /// exported or read (the whole chain of the exporter's error).
    #[error("{}", chain(.error.as_ref()))]
    Installation {
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `error` and its sources, joined by `: ` (as anyhow's `{:#}` prints
/// them).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
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
    pub sim_root: &'a mut dyn FnMut() -> Result<SimRoots, SimRootLoadError>,
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
    check_platform(trust.policy, hello.platform)?;
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
        Some((trust.sim_root)().map_err(|error| IdentityError::NoSimRoot { error })?)
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
    // Bare SEV-SNP's MEASUREMENT tells the policy a guest image from a
    // firmware (`Policy::pinning`); Azure's hardware report describes the
    // paravisor and never pins, so it is not passed.
    let snp_measurement = match att.identity() {
        Identity::Snp { measurement, .. } => Some(measurement),
        _ => None,
    };
    judge(
        Claimed {
            platform: hello.platform,
            measurement: &hello.measurement,
        },
        Proven {
            platform: att.platform(),
            measurement: att.measurement().as_bytes(),
            snp_measurement,
            checks: att.checks.len(),
        },
        trust.policy,
        trust.dangerous_any_measurement,
    )
}

/// What the enclave's `hello` says it is.
#[derive(Debug, Clone, Copy)]
pub struct Claimed<'a> {
    pub platform: Platform,
    pub measurement: &'a [u8],
}

/// What evidence that passed every check of the verifier (under the same
/// policy) proves: the part of its typed result the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct Proven<'a> {
    pub platform: Platform,
    /// The launch measurement the evidence attests.
    pub measurement: &'a [u8],
    /// Bare SEV-SNP's MEASUREMENT (`None` on every other platform, Azure
    /// included), which `Policy::pinning` compares with the policy's
    /// guest-image and firmware lists.
    pub snp_measurement: Option<&'a [u8; 48]>,
    /// How many checks passed.
    pub checks: usize,
}

/// The host's decision once the evidence verified: whether the job may go
/// to an enclave that claims `claimed` and whose evidence proves `proven`,
/// under `policy`. Pure (no evidence, clock or I/O), so that every branch
/// is tested without a TEE: genuine hardware evidence cannot be made to
/// bind a test key.
///
/// The evidence must prove the platform and the launch measurement the
/// enclave claims, on a platform the policy allows; simulated evidence is
/// accepted as `Simulated` (its root was the operator's to trust); hardware
/// evidence only when the policy pins the guest's launch identity on that
/// platform (`Policy::pinning`: a value pinned for another platform pins
/// nothing here), or `dangerous_any_measurement` accepts it `Unpinned`.
/// The pinned values themselves were compared by the verifier, which
/// rejects evidence that differs from them.
pub fn judge(
    claimed: Claimed<'_>,
    proven: Proven<'_>,
    policy: &Policy,
    dangerous_any_measurement: bool,
) -> Result<IdentityVerdict, IdentityError> {
    if proven.platform != claimed.platform {
        return Err(IdentityError::PlatformMismatch {
            proved: proven.platform,
            claimed: claimed.platform,
        });
    }
    if proven.measurement != claimed.measurement {
        return Err(IdentityError::MeasurementMismatch {
            claimed: hex::encode(claimed.measurement),
            attested: hex::encode(proven.measurement),
        });
    }
    // `verify` checked the claimed platform before it looked at the
    // evidence; checked again here so that this decision stands on its own.
    check_platform(policy, proven.platform)?;
    let checks = proven.checks;
    Ok(match proven.platform {
        // Platform `none` carries no evidence: nothing can have verified.
        Platform::None => return Err(IdentityError::Unattested),
        Platform::Simulated => IdentityVerdict::Simulated { checks },
        platform if policy.pinning(platform, proven.snp_measurement).is_pinned() => {
            IdentityVerdict::Attested { platform, checks }
        }
        platform if dangerous_any_measurement => IdentityVerdict::Unpinned { platform, checks },
        platform => {
            return Err(IdentityError::Unpinned {
                platform,
                measurement: hex::encode(proven.measurement),
            });
        }
    })
}

/// `platform` is one of the policy's `allowed_platforms`.
fn check_platform(policy: &Policy, platform: Platform) -> Result<(), IdentityError> {
    policy
        .check_platform(platform)
        .map_err(|_| IdentityError::PlatformNotAllowed {
            platform,
            allowed: policy
                .allowed_platforms
                .iter()
                .map(|p| format!("{:?}", p.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
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

#[cfg(test)]
mod tests {
    //! The decision after verification, branch by branch: what a genuine
    //! TEE's evidence would prove is given as [`Proven`] (no TEE here can
    //! make evidence over a test key).
    use super::*;

    const PINNED: [u8; 48] = [0xa1; 48];
    const OTHER: [u8; 48] = [0xb2; 48];

    fn policy(toml: &str) -> Policy {
        let text = format!("schema = \"kolm.policy.v1\"\n{toml}");
        Policy::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// Allows every platform; pins `PINNED` for nitro (PCR0), bare
    /// SEV-SNP (MEASUREMENT) and TDX (MRTD and RTMR0..2).
    fn pinning_all() -> Policy {
        let m = hex::encode(PINNED);
        policy(&format!(
            "allowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\", \"azure-sev-snp\", \
             \"simulated\"]\n\
             [nitro.pcrs]\n0 = [\"{m}\"]\n\
             [sev_snp]\nmeasurements = [\"{m}\"]\n\
             [tdx]\nmrtd = [\"{m}\"]\nrtmr0 = [\"{m}\"]\nrtmr1 = [\"{m}\"]\nrtmr2 = [\"{m}\"]\n"
        ))
    }

    /// `platform` proven with `measurement` and claimed the same.
    fn decide(
        policy: &Policy,
        platform: Platform,
        measurement: &[u8; 48],
        any: bool,
    ) -> Result<IdentityVerdict, IdentityError> {
        let snp_measurement = (platform == Platform::SevSnp).then_some(measurement);
        judge(
            Claimed {
                platform,
                measurement,
            },
            Proven {
                platform,
                measurement,
                snp_measurement,
                checks: 7,
            },
            policy,
            any,
        )
    }

    #[test]
    fn an_unpinned_measurement_is_refused_naming_it_and_the_switch() {
        let p = policy("allowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\"]\n");
        for platform in [Platform::Nitro, Platform::SevSnp, Platform::Tdx] {
            let e = decide(&p, platform, &OTHER, false).unwrap_err();
            match &e {
                IdentityError::Unpinned {
                    platform: named,
                    measurement,
                } => {
                    assert_eq!(*named, platform);
                    assert_eq!(*measurement, hex::encode(OTHER));
                }
                other => panic!("{platform}: {other:?}"),
            }
            let text = e.to_string();
            assert!(text.contains(&hex::encode(OTHER)), "{text}");
            assert!(text.contains("--dangerous-any-measurement"), "{text}");
            assert!(text.contains("nothing was sent"), "{text}");
        }
    }

    #[test]
    fn a_pinned_measurement_is_accepted_as_attested() {
        let p = pinning_all();
        for platform in [Platform::Nitro, Platform::SevSnp, Platform::Tdx] {
            assert_eq!(
                decide(&p, platform, &PINNED, false).unwrap(),
                IdentityVerdict::Attested {
                    platform,
                    checks: 7
                }
            );
            // The switch never turns a pinned identity into an unpinned one.
            assert_eq!(
                decide(&p, platform, &PINNED, true).unwrap().name(),
                "attested"
            );
        }
    }

    #[test]
    fn dangerous_any_measurement_accepts_an_unpinned_one_as_unpinned() {
        let p = policy("allowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\"]\n");
        for platform in [Platform::Nitro, Platform::SevSnp, Platform::Tdx] {
            let v = decide(&p, platform, &OTHER, true).unwrap();
            assert_eq!(
                v,
                IdentityVerdict::Unpinned {
                    platform,
                    checks: 7
                }
            );
            assert!(
                v.describe().contains("--dangerous-any-measurement"),
                "{}",
                v.describe()
            );
        }
    }

    #[test]
    fn a_measurement_pinned_for_another_platform_pins_nothing() {
        // PINNED is pinned for bare SEV-SNP only.
        let p = policy(&format!(
            "allowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\", \"azure-sev-snp\"]\n\
             [sev_snp]\nmeasurements = [\"{}\"]\n",
            hex::encode(PINNED)
        ));
        assert_eq!(
            decide(&p, Platform::SevSnp, &PINNED, false).unwrap().name(),
            "attested"
        );
        for platform in [Platform::Tdx, Platform::Nitro, Platform::AzureSevSnp] {
            let e = decide(&p, platform, &PINNED, false).unwrap_err();
            assert!(
                matches!(&e, IdentityError::Unpinned { platform: named, .. } if *named == platform),
                "{platform}: {e:?}"
            );
        }
    }

    #[test]
    fn a_pin_of_another_snp_measurement_or_of_the_firmware_pins_nothing() {
        let p = policy(&format!(
            "allowed_platforms = [\"sev-snp\"]\n[sev_snp]\nmeasurements = [\"{}\"]\n\
             firmware_measurements = [\"{}\"]\n",
            hex::encode(PINNED),
            hex::encode(OTHER)
        ));
        // OTHER is only a firmware: it does not say which guest runs.
        let e = decide(&p, Platform::SevSnp, &OTHER, false).unwrap_err();
        assert!(
            matches!(&e, IdentityError::Unpinned { measurement, .. }
                if *measurement == hex::encode(OTHER)),
            "{e:?}"
        );
        let third = [0xc3; 48];
        let e = decide(&p, Platform::SevSnp, &third, false).unwrap_err();
        assert!(
            matches!(&e, IdentityError::Unpinned { measurement, .. }
                if *measurement == hex::encode(third)),
            "{e:?}"
        );
    }

    #[test]
    fn the_evidence_must_prove_the_claimed_platform_and_measurement() {
        let p = pinning_all();
        let proven = Proven {
            platform: Platform::Nitro,
            measurement: &PINNED,
            snp_measurement: None,
            checks: 7,
        };
        let e = judge(
            Claimed {
                platform: Platform::Tdx,
                measurement: &PINNED,
            },
            proven,
            &p,
            true,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                IdentityError::PlatformMismatch {
                    proved: Platform::Nitro,
                    claimed: Platform::Tdx
                }
            ),
            "{e:?}"
        );
        let e = judge(
            Claimed {
                platform: Platform::Nitro,
                measurement: &OTHER,
            },
            proven,
            &p,
            true,
        )
        .unwrap_err();
        match e {
            IdentityError::MeasurementMismatch { claimed, attested } => {
                assert_eq!(claimed, hex::encode(OTHER));
                assert_eq!(attested, hex::encode(PINNED));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_platform_the_policy_does_not_allow_is_refused_whatever_the_switches() {
        let p = policy(&format!(
            "allowed_platforms = [\"nitro\"]\n[tdx]\nmrtd = [\"{m}\"]\nrtmr0 = [\"{m}\"]\n\
             rtmr1 = [\"{m}\"]\nrtmr2 = [\"{m}\"]\n",
            m = hex::encode(PINNED)
        ));
        for any in [false, true] {
            let e = decide(&p, Platform::Tdx, &PINNED, any).unwrap_err();
            assert!(
                matches!(&e, IdentityError::PlatformNotAllowed { platform: Platform::Tdx, allowed }
                    if allowed == "\"nitro\""),
                "{e:?}"
            );
        }
    }

    #[test]
    fn simulated_evidence_is_simulated_never_attested_nor_unpinned() {
        for any in [false, true] {
            assert_eq!(
                decide(&pinning_all(), Platform::Simulated, &PINNED, any).unwrap(),
                IdentityVerdict::Simulated { checks: 7 }
            );
        }
    }

    #[test]
    fn a_sim_root_the_installation_cannot_give_is_named_with_its_whole_chain() {
        let export = anyhow::anyhow!("exit status 1").context("exporting the sim roots");
        let e = IdentityError::NoSimRoot {
            error: SimRootLoadError::Installation {
                error: export.into(),
            },
        };
        assert_eq!(
            e.to_string(),
            "the enclave runs the kolm simulated TEE, but no sim root is available to check it \
             (exporting the sim roots: exit status 1)"
        );
        assert!(
            std::error::Error::source(&e).is_none(),
            "the cause is printed once"
        );
    }
}
