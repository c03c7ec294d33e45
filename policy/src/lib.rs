//! kolm-policy: the `kolm.policy.v1` policy format shared by the enclave
//! (what it enforces) and the verifier (what an auditor accepts).
//!
//! A policy is a TOML document parsed into a typed [`Policy`] by
//! [`Policy::from_toml_str`]; the result is already valid (unknown keys, bad
//! hex, duplicate allow-list entries and inconsistent gates are
//! [`PolicyError`]s). The `check_*` methods compare evidence the caller has
//! already authenticated against the policy and report the first rule that
//! fails as a [`PolicyViolation`] with a stable rule id.
//!
//! This crate does no I/O, reads no clock and depends on no other kolm crate.
//! The format is documented in `docs/policy.md`.
//!
//! ```
//! use kolm_policy::{Platform, Policy, PolicyViolation};
//!
//! let policy = Policy::from_toml_str(
//!     r#"
//! schema = "kolm.policy.v1"
//! allowed_platforms = ["sev-snp", "azure-sev-snp"]
//!
//! [sev_snp]
//! min_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }
//! "#,
//! )?;
//! assert!(policy.check_platform(Platform::SevSnp).is_ok());
//! let violation = policy.check_platform(Platform::Tdx).unwrap_err();
//! assert_eq!(violation.rule(), "platform.allowed");
//! assert_eq!(policy.check_egress(None, None), Err(PolicyViolation::EgressRecordMissing));
//! # Ok::<(), kolm_policy::PolicyError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

mod error;
mod format;
mod pinning;
mod platform;
mod policy;
mod violation;

pub use error::PolicyError;
pub use pinning::{IdentityField, Pinning, UNPINNED_REASON};
pub use platform::{Platform, TdxTcbStatus};
pub use policy::{
    AzurePolicy, DEFAULT_NITRO_MAX_SKEW_SECONDS, DEFAULT_TDX_MIN_TCB_EVALUATION_DATA_NUMBER,
    EgressPolicy, FreshnessPolicy, IsolationFacts, JobEnd, LimitsPolicy, NitroPolicy, Policy,
    QualityGate, QualityPolicy, SCHEMA_V1, SandboxFacts, SnpPolicy, SnpTcb, TdxPolicy,
};
pub use violation::{PolicyViolation, TdxConfigField};
