//! kolm-jobs: the untrusted side of a sealed run. The supervisor
//! (`kolm-enclave`, which holds the identity key and seals) stages a job's
//! spec, policy and inputs read-only and execs the `kolm-jobs` binary under
//! the egress = 0 sandbox (docs/sandbox.md), the way Firecracker's jailer
//! execs the VMM: confiner and confined are separate crates and binaries,
//! and the process that holds the keys links none of the ML crates
//! (candle, tokenizers, cudarc, kolm-model/train/eval/kernels), which live
//! here.
//!
//! The command line is `kolm_format::job_io::JobArgs` (file names only);
//! what to do comes from the staged spec, read with the supervisor's own
//! reader (`kolm_format::job_spec::JobSpec`). Every file the job writes is
//! untrusted input to the supervisor.
//!
//! - [`job`]: read the spec, run the job of its kind;
//! - [`demo_job`]: the bundled character-bigram demo;
//! - [`selftest_job`]: the egress self-test's network probes;
//! - [`finetune`]: the fine-tune (base model, data, training, evaluation,
//!   model card).
#![forbid(unsafe_code)]

pub mod demo_job;
pub mod finetune;
pub mod job;
pub mod selftest_job;
