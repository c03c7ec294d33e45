//! kolm-host: the host agent. It launches the enclave service (a local
//! one, or a Nitro enclave, SEV-SNP or TDX guest from its launch recipe:
//! `launch`), submits a job over the transport (`kolm-transport`),
//! receives the sealed artifact, writes it atomically and verifies it with
//! the verifier library before it reports success. `bundle` fetches the
//! offline collateral for SEV-SNP and TDX, its only use of the network.
//!
//! The host is never trusted: everything it sends (spec, policy, inputs) is
//! checked by the enclave, and what it gets back is a sealed artifact it can
//! only verify, not forge. It never links the enclave (the boundary test).
#![forbid(unsafe_code)]

pub mod accept;
pub mod bundle;
pub mod fsutil;
pub mod identity;
pub mod instances;
pub mod job;
pub mod launch;
pub mod output;
pub mod peer_text;
pub mod session;
