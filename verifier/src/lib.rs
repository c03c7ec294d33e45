//! kolm-verifier: offline, pure-Rust verification of kolm receipts and sealed
//! artifacts. It owns every format kolm writes (manifest, receipt, container),
//! so the enclave writes with the same code the auditor reads with.
#![forbid(unsafe_code)]

pub mod container;
