//! The names, inside a sealed artifact, of the outputs an auditor re-judges
//! a job by: the evaluation report a fine-tune writes
//! ([`crate::eval_report`]) and the copies of the job spec and policy the
//! runtime seals beside the job's own files. Each is an ordinary output:
//! the manifest's `outputs` record binds its size and SHA-256, and
//! `job.spec_sha256` / `job.policy_sha256` name the spec and policy bytes.
//!
//! Jobs other than a fine-tune (the demo, the egress self-test) seal none
//! of these; their numbers are the manifest's `metrics` only.

/// The fine-tune's evaluation report (`kolm.eval-report.v1`).
pub const EVAL_REPORT_PATH: &str = "outputs/eval-report.json";

/// The sealed copy of the job spec; its SHA-256 is `job.spec_sha256`.
pub const SEALED_SPEC_PATH: &str = "outputs/job/spec.toml";

/// The sealed copy of the policy the run was gated by; its SHA-256 is
/// `job.policy_sha256`.
pub const SEALED_POLICY_PATH: &str = "outputs/job/policy.toml";

/// Largest sealed policy read back: the runtime takes a policy in one wire
/// document of at most 1 MiB, so a sealed one is never larger.
pub const MAX_SEALED_POLICY_BYTES: u64 = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::OUTPUTS_PREFIX;

    /// Every name is an output entry and a valid container name.
    #[test]
    fn names_are_output_entries() {
        for name in [EVAL_REPORT_PATH, SEALED_SPEC_PATH, SEALED_POLICY_PATH] {
            assert!(name.starts_with(OUTPUTS_PREFIX), "{name}");
            assert!(crate::container::check_entry_name(name).is_ok(), "{name}");
        }
    }
}
