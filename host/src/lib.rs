//! kolm-host: the host agent. It launches the enclave service (today: a
//! local one, `--platform local`), submits a job over the transport
//! (`kolm-transport`), receives the sealed artifact, writes it atomically
//! and verifies it with the verifier library before it reports success.
//!
//! The host is never trusted: everything it sends (spec, policy, inputs) is
//! checked by the enclave, and what it gets back is a sealed artifact it can
//! only verify, not forge. It never links the enclave (the boundary test).
#![forbid(unsafe_code)]

pub mod bundle;
pub mod fsutil;
pub mod instances;
pub mod job;
pub mod launch;
pub mod session;
