//! The quality gate: the eval report against the policy's
//! `quality.gates`. It is binding: [`check`] has no override, and a
//! caller that gets [`GateVerdict::Fail`] must not seal a success artifact
//! (a signed failure record at most).
//!
//! A gate names one of the metrics of
//! [`kolm_format::eval_report::METRIC_NAMES`]; each gate is judged by the
//! policy's own rule (`QualityGate::check`: the value is reported,
//! finite and within `[min, max]`), and every violated gate is listed, not
//! only the first.

use kolm_format::eval_report::EvalReport;
use kolm_policy::{PolicyViolation, QualityGate, QualityPolicy};

/// The gate's verdict.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum GateVerdict {
    /// Every gate holds (or the policy has none).
    Pass,
    /// These gates do not hold, in the policy's order.
    Fail(Vec<GateFailure>),
}

/// One violated gate.
#[derive(Debug, Clone, PartialEq)]
pub struct GateFailure {
    /// The gate as the policy states it.
    pub gate: QualityGate,
    /// Why it fails (`MetricMissing` for a metric the report does not
    /// have, such as a misspelt name; `MetricOutOfBounds` otherwise).
    pub violation: PolicyViolation,
}

impl GateVerdict {
    /// Whether every gate holds.
    pub fn passed(&self) -> bool {
        matches!(self, GateVerdict::Pass)
    }
}

/// Judges `report` against `quality`, listing every violated gate.
pub fn check(report: &EvalReport, quality: &QualityPolicy) -> GateVerdict {
    let metrics = report.metrics();
    let failures: Vec<GateFailure> = quality
        .gates
        .iter()
        .filter_map(|gate| {
            gate.check(&metrics).err().map(|violation| GateFailure {
                gate: gate.clone(),
                violation,
            })
        })
        .collect();
    if failures.is_empty() {
        GateVerdict::Pass
    } else {
        GateVerdict::Fail(failures)
    }
}
