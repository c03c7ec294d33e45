//! kolm-format: every format kolm writes and reads, each with its writer and
//! its strict reader side by side, so the enclave writes with exactly the code
//! the auditor's verifier reads with.
//!
//! | module | format |
//! |---|---|
//! | [`manifest`] | `manifest.json` (`kolm.manifest.v1`, `kolm.manifest.v2`; RFC 8785 canonical) |
//! | [`evidence`] | `evidence/index.json` (`kolm.evidence.v1`, `kolm.evidence.v2`) |
//! | [`version`] | the receipt spec versions and the names each fixes |
//! | [`container`] | the canonical ZIP profile of a sealed artifact |
//! | [`receipt`] | `receipt.cose` (COSE_Sign1, Ed25519): sign and check the signature |
//! | [`eval_report`] | the evaluation report (`kolm.eval-report.v1`; RFC 8785 canonical) |
//! | [`job_spec`] | the job spec (`job.toml`): one strict reader for every kind ([`job_spec::JobSpec`]) |
//! | [`job_io`] | between the supervisor and the job binary: the job's command line, `failure.json`, `memory-estimate` |
//! | [`environment`] | `environment.json`: the hardware/software tuple a fine-tune ran on |
//! | [`sandbox_record`] | `governance/sandbox-record.json` (`kolm.sandbox-record.v1`) |
//! | [`sbom`] | `governance/sbom.spdx.json`: the SPDX 2.3 subset the runtime writes |
//! | [`seal`] | a whole artifact: the writer that puts the above together |
//! | [`content_id`], [`binding`], [`jcs`], [`timefmt`], [`hexbytes`] | the manifest CID, report-data binding, canonical JSON, time and hex forms |
//! | [`reader`] | the bounds-checked byte reader every binary parser uses |
//!
//! No TEE crate, no I/O beyond the files being written or read, no clock:
//! instants are arguments.
#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

pub mod binding;
pub mod container;
pub mod content_id;
pub mod environment;
pub mod eval_report;
pub mod evidence;
pub mod hexbytes;
pub mod jcs;
pub mod job_io;
pub mod job_spec;
pub mod manifest;
pub mod model_card;
pub mod reader;
pub mod receipt;
pub mod sandbox_record;
pub mod sbom;
pub mod seal;
pub mod sealed_outputs;
pub mod timefmt;
pub mod version;
