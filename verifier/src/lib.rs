//! kolm-verifier: offline, pure-Rust verification of kolm sealed artifacts and
//! of raw TEE evidence (Nitro, SEV-SNP, TDX, Azure), and of the kolm simulated
//! TEE's evidence against a sim root the caller names (`sim`, never a TEE). The formats it reads are
//! `kolm-format`'s, the same code the enclave writes them with. No network, no
//! clock: the verification instant is an argument.
#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

pub mod artifact;
pub mod attested;
pub mod azure;
pub mod check;
pub mod collateral;
pub mod nitro;
pub mod platform;
pub mod quality;
pub mod report;
pub mod sim;
pub mod snp;
pub mod tdx;
