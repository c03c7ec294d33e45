//! kolm-enclave: the runtime inside the TEE. It runs jobs, builds their
//! manifests, obtains attestation evidence bound to them, and seals outputs
//! into artifacts with signed receipts, using the verifier crate's format code
//! so that what is written is exactly what `kolm-verify` reads.
#![forbid(unsafe_code)]

pub mod attest;
pub mod chain_state;
pub mod demo_job;
pub mod fsutil;
pub mod run;
pub mod sbom;
