//! kolm-enclave: the runtime inside the TEE. It runs jobs, builds their
//! manifests, obtains attestation evidence bound to them, and seals outputs
//! into artifacts with signed receipts, using `kolm-format`, the same code
//! `kolm-verify` reads them with. It never links the TEE verifiers.
//!
//! `unsafe` is denied everywhere but five small system-call modules,
//! where each block carries a `// SAFETY:` comment: the job sandbox's
//! (`sandbox::sys`), `fsutil::openat2` (the `openat2(2)` wrapper output
//! collection opens job files with), `fsutil::statvfs` (the free space of
//! the staging directory), the attestation devices' ioctls (`providers`)
//! and the stop signals taken by one thread (`service::stop_signals`).
#![deny(unsafe_code)]

pub mod attest;
pub mod chain_state;
pub mod demo_job;
pub mod finetune;
pub mod fsutil;
pub mod inputs;
pub mod job;
pub mod providers;
pub mod run;
pub mod sandbox;
pub mod sbom;
pub mod selftest_job;
pub mod service;
pub mod train_progress;
