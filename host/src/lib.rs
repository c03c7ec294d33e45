//! kolm-host: the host agent that launches enclaves, talks to them over vsock,
//! submits jobs and retrieves sealed artifacts.
//!
//! Nothing is implemented yet: this crate only fixes the dependency boundary
//! (host -> policy, verifier; never enclave or kernels). It claims no feature.
#![forbid(unsafe_code)]
