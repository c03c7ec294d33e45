//! kolm-enclave: the trusted supervisor inside the TEE. It holds the
//! identity key, runs each job in the egress = 0 sandbox (the job itself is
//! the separate `kolm-jobs` binary, which links the ML crates; this crate
//! links none of them), builds the manifests, obtains attestation evidence
//! bound to them, and seals outputs into artifacts with signed receipts,
//! using `kolm-format`, the same code `kolm-verify` reads them with. It
//! never links the TEE verifiers.
//!
//! The attestation providers (one trait, one error type) are
//! [`providers`]. The simulated TEE is another crate, `kolm-sim-tee`,
//! linked only with the `sim` feature (on by default, for tests and
//! demos); a hardware image is built with `--no-default-features` and then
//! holds no simulated-TEE code: `--attest sim` and `sim-root` are refused.
//!
//! `unsafe` is denied everywhere but five small system-call modules,
//! where each block carries a `// SAFETY:` comment: the job sandbox's
//! (`sandbox::sys`), `fsutil::openat2` (the `openat2(2)` wrapper output
//! collection opens job files with), `fsutil::statvfs` (the free space of
//! the staging directory), the attestation devices' ioctls (`providers`)
//! and the stop signals taken by one thread (`service::stop_signals`).
#![deny(unsafe_code)]

pub mod chain_state;
pub mod finetune;
pub mod fsutil;
pub mod inputs;
pub mod job;
pub mod providers;
pub mod run;
pub mod sandbox;
pub mod sbom;
pub mod service;
pub mod train_progress;

/// The attestation providers' former path, kept for the code that names
/// it (the run path, the service, the tests): everything here is
/// [`providers`]'s, and `attest::AttestError` is [`providers::ProviderError`].
pub mod attest {
    /// The simulated TEE (feature `sim`).
    #[cfg(feature = "sim")]
    pub use crate::providers::sim::{self, SimulatedProvider};
    pub use crate::providers::{
        AttestationProvider, CollateralOrigin, HostCollateral, HostCollateralError, JobCollateral,
        NoneProvider, ProviderError as AttestError,
    };
}
