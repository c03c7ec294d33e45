//! kolm-verifier: offline, pure-Rust verification of kolm receipts and sealed
//! artifacts. It owns every format kolm writes (manifest, evidence index,
//! receipt, container), so the enclave writes with the same code the auditor
//! reads with. No network, no clock: the verification instant is an argument.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod artifact;
pub mod attestation;
pub mod azure;
pub mod binding;
pub mod collateral;
pub mod container;
pub mod content_id;
pub mod evidence;
pub mod hexbytes;
pub mod jcs;
pub mod manifest;
pub mod nitro;
pub mod platform;
pub mod receipt;
pub mod report;
pub mod snp;
pub mod tdx;
pub mod timefmt;
