//! The supervisor's side of a fine-tune (the job itself is `kolm-jobs`,
//! run in the sandbox; this crate links none of its ML crates):
//!
//! - [`gate`]: the job's evaluation report read strictly, checked against
//!   its metrics, and judged by the policy's binding `quality.gates`;
//! - [`failure`]: why a job failed (`failure.json`, a SIGKILL named), and
//!   the host memory reading the job's pre-flight is given;
//! - [`replay`]: `kolm-enclave replay`, a sealed fine-tune re-run and
//!   compared byte for byte.

pub mod failure;
pub mod gate;
pub mod replay;
