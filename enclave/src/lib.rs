//! kolm-enclave: the runtime inside the TEE.
#![forbid(unsafe_code)]

pub mod sbom;
