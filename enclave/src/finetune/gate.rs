//! The supervisor's side of a fine-tune: the job's evaluation report read
//! strictly, checked against the metrics it claims, and judged by the
//! policy's `quality.gates`. The gate is binding: a failing model is never
//! sealed, and there is no flag to override it.
//!
//! What the job wrote is untrusted: the verifier's lint set holds (no
//! unwrap, no indexing, no unchecked arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use kolm_format::eval_report::EvalReport;
use kolm_format::manifest::{GpuEnvironment, OUTPUTS_PREFIX};
use kolm_policy::Policy;

use kolm_format::environment::{ENVIRONMENT_FILE as ENVIRONMENT, Tuple};
use kolm_format::job_io::EVAL_REPORT_FILE as EVAL_REPORT;

use crate::job::Collected;
use crate::run::{JobError, RunError};

/// What the supervisor takes from a fine-tune that passed its gate.
#[derive(Debug)]
pub struct Judged {
    pub report: EvalReport,
    /// For the manifest's `environment.gpu`.
    pub gpu: Option<GpuEnvironment>,
}

/// Why a fine-tune's model is not sealed: its K-score and perplexity
/// against the base model's, and every gate of the policy it missed.
#[derive(Debug, Clone, PartialEq)]
pub struct GateFailure {
    pub k_score: f64,
    /// Held-out perplexity of the fine-tuned model.
    pub perplexity: f64,
    /// The base model's, when the job reported it.
    pub base_perplexity: Option<f64>,
    /// Each missed gate, judged by the policy's own rule.
    pub violations: Vec<kolm_policy::PolicyViolation>,
}

impl std::fmt::Display for GateFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let base = self
            .base_perplexity
            .map_or_else(|| "?".to_owned(), |p| format!("{p:.3}"));
        write!(
            f,
            "K-score {:.4}, held-out perplexity {:.3} (base model {base}); ",
            self.k_score, self.perplexity
        )?;
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

fn file<'a>(output: &'a Collected, name: &'static str) -> Result<&'a [u8], RunError> {
    let path = format!("{OUTPUTS_PREFIX}{name}");
    output
        .files
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, b)| b.as_slice())
        .ok_or(RunError::Job(JobError::MissingFile { name }))
}

/// Reads the report and the tuple, and applies the gate.
pub fn judge(output: &Collected, policy: &Policy) -> Result<Judged, RunError> {
    let report = EvalReport::from_canonical_bytes(file(output, EVAL_REPORT)?).map_err(|error| {
        RunError::Job(JobError::EvalReport {
            file: EVAL_REPORT,
            error,
        })
    })?;
    // The manifest's metrics come from metrics.json: the report's own
    // terms must be exactly there, so the receipt cannot show other
    // numbers than the report it seals.
    for (name, value) in report.metrics() {
        match output.metrics.get(&name) {
            Some(v) if v.to_bits() == value.to_bits() => {}
            other => {
                return Err(RunError::Job(JobError::MetricDisagrees {
                    claimed: other.copied(),
                    name,
                    file: EVAL_REPORT,
                    value,
                }));
            }
        }
    }
    let tuple = Tuple::from_json_bytes(file(output, ENVIRONMENT)?)
        .map_err(|error| RunError::Job(JobError::Environment { error }))?;
    // Every violated gate is named, each judged by the policy's own rule.
    let metrics = report.metrics();
    let violations: Vec<kolm_policy::PolicyViolation> = policy
        .quality
        .gates
        .iter()
        .filter_map(|gate| gate.check(&metrics).err())
        .collect();
    if !violations.is_empty() {
        return Err(RunError::QualityGate(GateFailure {
            k_score: report.k_score,
            perplexity: report.perplexity.perplexity,
            base_perplexity: output.metrics.get("base_perplexity").copied(),
            violations,
        }));
    }
    Ok(Judged {
        report,
        gpu: tuple.gpu,
    })
}
