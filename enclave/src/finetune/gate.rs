//! The supervisor's side of a fine-tune: the job's evaluation report read
//! strictly, checked against the metrics it claims, and judged by the
//! policy's `quality.gates`. The gate is binding: a failing model is never
//! sealed, and there is no flag to override it.

use kolm_format::eval_report::EvalReport;
use kolm_format::manifest::{GpuEnvironment, OUTPUTS_PREFIX};
use kolm_policy::Policy;

use kolm_format::environment::{ENVIRONMENT_FILE as ENVIRONMENT, Tuple};
use kolm_format::job_io::EVAL_REPORT_FILE as EVAL_REPORT;

use crate::job::Collected;
use crate::run::RunError;

/// What the supervisor takes from a fine-tune that passed its gate.
#[derive(Debug)]
pub struct Judged {
    pub report: EvalReport,
    /// For the manifest's `environment.gpu`.
    pub gpu: Option<GpuEnvironment>,
}

fn file<'a>(output: &'a Collected, name: &str) -> Result<&'a [u8], RunError> {
    let path = format!("{OUTPUTS_PREFIX}{name}");
    output
        .files
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, b)| b.as_slice())
        .ok_or_else(|| RunError::Job(format!("the fine-tune job wrote no {name}")))
}

/// Reads the report and the tuple, and applies the gate.
pub fn judge(output: &Collected, policy: &Policy) -> Result<Judged, RunError> {
    let report = EvalReport::from_canonical_bytes(file(output, EVAL_REPORT)?)
        .map_err(|e| RunError::Job(format!("{EVAL_REPORT}: {e}")))?;
    // The manifest's metrics come from metrics.json: the report's own
    // terms must be exactly there, so the receipt cannot show other
    // numbers than the report it seals.
    for (name, value) in report.metrics() {
        match output.metrics.get(&name) {
            Some(v) if v.to_bits() == value.to_bits() => {}
            other => {
                return Err(RunError::Job(format!(
                    "metrics.json {name} = {other:?} disagrees with {EVAL_REPORT} ({value})"
                )));
            }
        }
    }
    let tuple = Tuple::from_json_bytes(file(output, ENVIRONMENT)?)
        .map_err(|e| RunError::Job(e.to_string()))?;
    // Every violated gate is named, each judged by the policy's own rule.
    let metrics = report.metrics();
    let list: Vec<String> = policy
        .quality
        .gates
        .iter()
        .filter_map(|gate| gate.check(&metrics).err().map(|v| v.to_string()))
        .collect();
    if !list.is_empty() {
        let base = output
            .metrics
            .get("base_perplexity")
            .map_or_else(|| "?".to_owned(), |p| format!("{p:.3}"));
        return Err(RunError::QualityGate(format!(
            "K-score {:.4}, held-out perplexity {:.3} (base model {base}); {}",
            report.k_score,
            report.perplexity.perplexity,
            list.join("; ")
        )));
    }
    Ok(Judged {
        report,
        gpu: tuple.gpu,
    })
}
