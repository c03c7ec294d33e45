//! The quality gates, judged again by the auditor: an artifact's sealed
//! evaluation numbers against every `[[quality.gates]]` entry of the policy
//! the auditor gives. The auditor then need not trust the enclave's own
//! verdict, and may ask for more than the job's policy did.
//!
//! Three typed steps:
//! - [`SealedMetrics::read`]: the numbers. A fine-tune seals its eval report
//!   ([`EVAL_REPORT_PATH`], bound by the manifest's output record); its
//!   terms are the numbers, read by `kolm_format::eval_report`'s strict
//!   reader, and each must equal the manifest's `metrics` entry of the same
//!   name. An artifact without a report has the manifest's `metrics` only.
//! - [`JobPolicy::read`]: the policy the job ran under
//!   ([`SEALED_POLICY_PATH`], held to `job.policy_sha256`), to name its gate
//!   beside each of the auditor's.
//! - [`judge`]: each auditor gate by the policy crate's own rule
//!   (`QualityGate::check`), as the enclave judged the job's gates: the
//!   metric is sealed, finite and within `[min, max]` (inclusive).

use std::collections::BTreeMap;
use std::fmt;

use kolm_format::eval_report::{EvalReport, EvalReportError};
use kolm_format::hexbytes::Sha256Digest;
use kolm_format::sealed_outputs::{EVAL_REPORT_PATH, SEALED_POLICY_PATH};
use kolm_policy::{Policy, PolicyError, PolicyViolation, QualityGate};
use sha2::{Digest as _, Sha256};

/// Where the sealed numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricSource {
    /// The sealed eval report ([`EVAL_REPORT_PATH`]), whose bytes the
    /// manifest binds.
    EvalReport,
    /// The manifest's `metrics` (an artifact that seals no eval report).
    Manifest,
}

impl MetricSource {
    /// The JSON name (`quality.source`).
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricSource::EvalReport => "eval-report",
            MetricSource::Manifest => "manifest",
        }
    }
}

impl fmt::Display for MetricSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricSource::EvalReport => write!(f, "the sealed eval report ({EVAL_REPORT_PATH})"),
            MetricSource::Manifest => f.write_str("the manifest's metrics"),
        }
    }
}

/// The numbers an artifact seals, by metric name.
#[derive(Debug, Clone, PartialEq)]
pub struct SealedMetrics {
    source: MetricSource,
    values: BTreeMap<String, f64>,
}

impl SealedMetrics {
    /// The numbers of an artifact whose manifest has `manifest_metrics` and
    /// binds `eval_report` (the bytes of [`EVAL_REPORT_PATH`], when the
    /// manifest lists it). The report wins: its terms are the numbers (the
    /// enclave gated on exactly these), and each must equal the manifest's
    /// entry of the same name where the manifest has one.
    pub fn read(
        manifest_metrics: &BTreeMap<String, f64>,
        eval_report: Option<&[u8]>,
    ) -> Result<SealedMetrics, QualityError> {
        let Some(bytes) = eval_report else {
            return Ok(SealedMetrics {
                source: MetricSource::Manifest,
                values: manifest_metrics.clone(),
            });
        };
        let report = EvalReport::from_canonical_bytes(bytes)
            .map_err(|error| QualityError::EvalReport { error })?;
        let values = report.metrics();
        for (metric, &in_report) in &values {
            // `==`, not bits: both readers refuse non-finite numbers, and
            // RFC 8785 writes -0 as 0, so equal numbers are equal values.
            if let Some(&in_manifest) = manifest_metrics.get(metric)
                && in_manifest != in_report
            {
                return Err(QualityError::MetricsDisagree {
                    metric: metric.clone(),
                    report: in_report,
                    manifest: in_manifest,
                });
            }
        }
        Ok(SealedMetrics {
            source: MetricSource::EvalReport,
            values,
        })
    }

    /// Where the numbers come from.
    pub fn source(&self) -> MetricSource {
        self.source
    }

    /// The numbers, by metric name.
    pub fn values(&self) -> &BTreeMap<String, f64> {
        &self.values
    }
}

/// The policy the job ran under, as far as the artifact shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum JobPolicy {
    /// [`SEALED_POLICY_PATH`]: the bytes `job.policy_sha256` names
    /// (boxed: a policy is large beside the other variants).
    Sealed(Box<Policy>),
    /// The artifact seals no copy of its policy, only its SHA-256 (jobs
    /// other than a fine-tune).
    NotSealed,
    /// The sealed copy is the policy the job ran under, but it is not
    /// UTF-8 (the runtime would not have run under it).
    NotUtf8,
    /// The sealed copy is the policy the job ran under, but this
    /// verifier's policy reader refuses it (a newer policy format). Only
    /// the naming of the job's gates needs it: the auditor's gates are
    /// judged all the same.
    Unreadable(PolicyError),
}

impl JobPolicy {
    /// The job's policy from `sealed` (the bytes of [`SEALED_POLICY_PATH`],
    /// when the manifest lists it), which must be the bytes
    /// `policy_sha256` (`job.policy_sha256`) names: any other policy would
    /// be named as the job's without being it.
    pub fn read(
        policy_sha256: &Sha256Digest,
        sealed: Option<&[u8]>,
    ) -> Result<JobPolicy, QualityError> {
        let Some(bytes) = sealed else {
            return Ok(JobPolicy::NotSealed);
        };
        let actual: [u8; 32] = Sha256::digest(bytes).into();
        if actual != policy_sha256.0 {
            return Err(QualityError::JobPolicyNotBound {
                stated: policy_sha256.0,
                actual,
            });
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Ok(JobPolicy::NotUtf8);
        };
        Ok(match Policy::from_toml_str(text) {
            Ok(p) => JobPolicy::Sealed(Box::new(p)),
            Err(e) => JobPolicy::Unreadable(e),
        })
    }

    /// What the job's policy said about `metric`.
    pub fn gate_for(&self, metric: &str) -> JobGate {
        match self {
            // The policy reader refuses two gates on one metric.
            JobPolicy::Sealed(p) => p
                .quality
                .gates
                .iter()
                .find(|g| g.metric == metric)
                .map_or(JobGate::NoGate, |g| JobGate::Gate(g.clone())),
            JobPolicy::NotSealed => JobGate::PolicyNotSealed,
            JobPolicy::NotUtf8 | JobPolicy::Unreadable(_) => JobGate::PolicyUnreadable,
        }
    }
}

/// The job policy's gate on one metric.
#[derive(Debug, Clone, PartialEq)]
pub enum JobGate {
    /// The job's policy gated the metric so.
    Gate(QualityGate),
    /// The job's policy has no gate on the metric.
    NoGate,
    /// The artifact seals no copy of the job's policy.
    PolicyNotSealed,
    /// The sealed copy does not read here ([`JobPolicy::NotUtf8`],
    /// [`JobPolicy::Unreadable`]).
    PolicyUnreadable,
}

impl JobGate {
    /// The JSON name (`quality.gates[].job_gate.kind`).
    pub const fn as_str(&self) -> &'static str {
        match self {
            JobGate::Gate(_) => "gate",
            JobGate::NoGate => "no-gate",
            JobGate::PolicyNotSealed => "policy-not-sealed",
            JobGate::PolicyUnreadable => "policy-unreadable",
        }
    }
}

impl JobGate {
    /// What the job's policy said about `metric`, as a clause.
    pub fn describe<'a>(&'a self, metric: &'a str) -> impl fmt::Display + 'a {
        JobGateText { gate: self, metric }
    }
}

struct JobGateText<'a> {
    gate: &'a JobGate,
    metric: &'a str,
}

impl fmt::Display for JobGateText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.gate {
            JobGate::Gate(g) => write!(f, "the job's own policy gated {}", GateText(g)),
            JobGate::NoGate => write!(f, "the job's own policy had no gate on {}", self.metric),
            JobGate::PolicyNotSealed => {
                f.write_str("the artifact seals no copy of the job's policy")
            }
            JobGate::PolicyUnreadable => write!(
                f,
                "the job's sealed policy ({SEALED_POLICY_PATH}) does not read with this verifier"
            ),
        }
    }
}

/// How one sealed number fares against one gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateStatus {
    /// Sealed, finite and within the bounds.
    Pass,
    /// The artifact seals no number of that name (a misspelt metric, or
    /// one its job kind does not measure).
    Missing,
    /// NaN or infinite: no gate admits it.
    NotFinite,
    /// Below `min`.
    BelowMin,
    /// Above `max`.
    AboveMax,
}

impl GateStatus {
    /// Whether the gate holds.
    pub const fn passed(self) -> bool {
        matches!(self, GateStatus::Pass)
    }

    /// The JSON name (`quality.gates[].status`).
    pub const fn as_str(self) -> &'static str {
        match self {
            GateStatus::Pass => "pass",
            GateStatus::Missing => "missing",
            GateStatus::NotFinite => "not-finite",
            GateStatus::BelowMin => "below-min",
            GateStatus::AboveMax => "above-max",
        }
    }
}

/// One gate of the auditor's policy, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct GateJudgement {
    /// The auditor's gate.
    pub gate: QualityGate,
    /// The sealed number (`None`: not sealed).
    pub value: Option<f64>,
    pub status: GateStatus,
    /// The job policy's gate on the same metric.
    pub job_gate: JobGate,
    /// Where `value` comes from.
    pub source: MetricSource,
}

impl fmt::Display for GateJudgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gate = GateText(&self.gate);
        let metric = &self.gate.metric;
        let source = self.source;
        let job = self.job_gate.describe(metric);
        let Some(value) = self.value else {
            return write!(
                f,
                "the auditor's gate {gate} has no sealed number: {source} has no {metric:?}; {job}"
            );
        };
        let how = match self.status {
            GateStatus::Pass => "meets",
            GateStatus::Missing => "is not sealed for",
            GateStatus::NotFinite => "is not a finite number, so it misses",
            GateStatus::BelowMin => "is below",
            GateStatus::AboveMax => "is above",
        };
        write!(
            f,
            "{metric} = {value} from {source} {how} the auditor's gate {gate}; {job}"
        )
    }
}

/// Every gate of the auditor's policy, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct QualityJudgement {
    /// Where the numbers come from.
    pub source: MetricSource,
    /// In the auditor's policy order.
    pub gates: Vec<GateJudgement>,
}

impl QualityJudgement {
    /// The gates that do not hold.
    pub fn missed(&self) -> impl Iterator<Item = &GateJudgement> {
        self.gates.iter().filter(|g| !g.status.passed())
    }
}

/// Why the sealed numbers fail the auditor (the `policy` check's detail).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QualityError {
    /// The manifest binds an eval report that its strict reader refuses.
    #[error("quality.eval-report: {EVAL_REPORT_PATH} does not read: {error}")]
    EvalReport { error: EvalReportError },
    /// The eval report and the manifest's `metrics` seal two numbers for
    /// one metric.
    #[error(
        "quality.eval-report: {metric} is {report} in the sealed eval report ({EVAL_REPORT_PATH}) \
         but {manifest} in the manifest's metrics"
    )]
    MetricsDisagree {
        metric: String,
        report: f64,
        manifest: f64,
    },
    /// The sealed policy is not the one `job.policy_sha256` names.
    #[error(
        "quality.job-policy: {SEALED_POLICY_PATH} has sha256 {}, but job.policy_sha256 is {}: \
         it is not the policy the job ran under",
        hex::encode(actual),
        hex::encode(stated)
    )]
    JobPolicyNotBound { stated: [u8; 32], actual: [u8; 32] },
    /// Gates of the auditor's policy that the sealed numbers miss (every
    /// one, in policy order; the judgement holds them all).
    #[error("quality.gate: {}", missed_text(.0))]
    GatesMissed(QualityJudgement),
}

impl QualityError {
    /// The whole judgement, when the numbers were judged.
    pub fn judgement(&self) -> Option<&QualityJudgement> {
        match self {
            QualityError::GatesMissed(j) => Some(j),
            _ => None,
        }
    }
}

fn missed_text(j: &QualityJudgement) -> String {
    j.missed()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Judges every gate of `auditor` against `sealed`; `job` names the job
/// policy's gate beside each. `Err(GatesMissed)` when any gate misses.
pub fn judge(
    sealed: &SealedMetrics,
    job: &JobPolicy,
    auditor: &Policy,
) -> Result<QualityJudgement, QualityError> {
    let gates: Vec<GateJudgement> = auditor
        .quality
        .gates
        .iter()
        .map(|gate| {
            let value = sealed.values.get(&gate.metric).copied();
            GateJudgement {
                gate: gate.clone(),
                value,
                status: status_of(gate, &sealed.values),
                job_gate: job.gate_for(&gate.metric),
                source: sealed.source,
            }
        })
        .collect();
    let judgement = QualityJudgement {
        source: sealed.source,
        gates,
    };
    if judgement.missed().next().is_some() {
        return Err(QualityError::GatesMissed(judgement));
    }
    Ok(judgement)
}

/// One gate by the policy crate's own rule, `QualityGate::check` (the
/// enclave's binding gate judges each gate with it too), so a bound is
/// never read two ways; the status then says which way the number misses.
fn status_of(gate: &QualityGate, values: &BTreeMap<String, f64>) -> GateStatus {
    match gate.check(values) {
        Ok(()) => GateStatus::Pass,
        Err(PolicyViolation::MetricMissing { .. }) => GateStatus::Missing,
        Err(_) => match values.get(&gate.metric) {
            None => GateStatus::Missing,
            Some(v) if !v.is_finite() => GateStatus::NotFinite,
            Some(&v) if gate.min.is_some_and(|min| v < min) => GateStatus::BelowMin,
            Some(_) => GateStatus::AboveMax,
        },
    }
}

/// A gate as a reader writes it: `perplexity <= 40`, `k_score >= 0.05`,
/// `0.5 <= accuracy <= 1`.
#[derive(Debug, Clone, Copy)]
pub struct GateText<'a>(pub &'a QualityGate);

impl fmt::Display for GateText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.0.metric;
        match (self.0.min, self.0.max) {
            (Some(lo), Some(hi)) => write!(f, "{lo} <= {m} <= {hi}"),
            (Some(lo), None) => write!(f, "{m} >= {lo}"),
            (None, Some(hi)) => write!(f, "{m} <= {hi}"),
            // The policy reader refuses a gate without a bound.
            (None, None) => write!(f, "{m} (no bound)"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use kolm_format::hexbytes::HexBytes;

    /// A policy with these `[[quality.gates]]` (TOML bodies).
    fn policy(gates: &[&str]) -> Policy {
        let mut text = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n".to_owned();
        for g in gates {
            text.push_str("[[quality.gates]]\n");
            text.push_str(g);
            text.push('\n');
        }
        Policy::from_toml_str(&text).unwrap()
    }

    fn manifest_numbers(pairs: &[(&str, f64)]) -> SealedMetrics {
        let map = pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
        SealedMetrics::read(&map, None).unwrap()
    }

    /// The status of the one gate `gate` on `numbers`.
    fn status(numbers: &SealedMetrics, gate: &str) -> GateStatus {
        let j = match judge(numbers, &JobPolicy::NotSealed, &policy(&[gate])) {
            Ok(j) => j,
            Err(QualityError::GatesMissed(j)) => j,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(j.gates.len(), 1);
        j.gates[0].status
    }

    /// The tiny example's sealed eval report (tests/fixtures/eval-report).
    const TINY_REPORT: &[u8] = include_bytes!("../tests/fixtures/eval-report/tiny.json");

    fn report() -> EvalReport {
        EvalReport::from_canonical_bytes(TINY_REPORT).unwrap()
    }

    /// `metric = value` sealed in the manifest, judged by each gate
    /// (its bounds, TOML) with the status expected.
    fn expect(metric: &str, value: f64, cases: &[(&str, GateStatus)]) {
        let n = manifest_numbers(&[(metric, value)]);
        for (bounds, want) in cases {
            let gate = format!("metric = \"{metric}\"\n{bounds}");
            assert_eq!(status(&n, &gate), *want, "{metric} = {value}, {bounds}");
        }
    }

    #[test]
    fn a_min_gate_is_inclusive() {
        expect(
            "k_score",
            0.3,
            &[
                ("min = 0.2", GateStatus::Pass),
                ("min = 0.3", GateStatus::Pass),
                ("min = 0.31", GateStatus::BelowMin),
            ],
        );
    }

    #[test]
    fn a_max_gate_is_inclusive() {
        expect(
            "perplexity",
            27.0,
            &[
                ("max = 28", GateStatus::Pass),
                ("max = 27", GateStatus::Pass),
                ("max = 26.9", GateStatus::AboveMax),
            ],
        );
    }

    #[test]
    fn a_gate_with_both_bounds_says_which_it_misses() {
        expect(
            "accuracy",
            0.5,
            &[
                ("min = 0.4\nmax = 0.6", GateStatus::Pass),
                ("min = 0.5\nmax = 0.5", GateStatus::Pass),
                ("min = 0.6\nmax = 0.9", GateStatus::BelowMin),
                ("min = 0.1\nmax = 0.4", GateStatus::AboveMax),
            ],
        );
    }

    #[test]
    fn a_metric_not_sealed_fails_its_gate() {
        let n = manifest_numbers(&[("k_score", 0.3)]);
        let e = judge(
            &n,
            &JobPolicy::NotSealed,
            &policy(&["metric = \"k_scor\"\nmin = 0.1"]),
        )
        .unwrap_err();
        let j = e.judgement().unwrap();
        assert_eq!(j.gates[0].status, GateStatus::Missing);
        assert_eq!(j.gates[0].value, None);
        assert_eq!(
            e.to_string(),
            "quality.gate: the auditor's gate k_scor >= 0.1 has no sealed number: the \
             manifest's metrics has no \"k_scor\"; the artifact seals no copy of the job's policy"
        );
    }

    /// No gate admits NaN or an infinity, whatever its bounds.
    #[test]
    fn a_number_that_is_not_finite_fails_every_gate() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            expect(
                "m",
                bad,
                &[
                    ("min = -1e300", GateStatus::NotFinite),
                    ("max = 1e300", GateStatus::NotFinite),
                    ("min = -1e300\nmax = 1e300", GateStatus::NotFinite),
                ],
            );
        }
    }

    /// The report's terms are the numbers; a manifest entry of the same
    /// name that differs is refused, naming both; one the manifest lacks
    /// is no disagreement.
    #[test]
    fn the_report_and_the_manifest_must_agree() {
        let r = report();
        let bytes = TINY_REPORT;
        let mut manifest = r.metrics();
        manifest.insert("base_perplexity".into(), 250.0);
        let n = SealedMetrics::read(&manifest, Some(bytes)).unwrap();
        assert_eq!(n.source(), MetricSource::EvalReport);
        assert_eq!(n.values(), &r.metrics());
        // A metric only the manifest has is not a number of the report.
        assert_eq!(
            status(&n, "metric = \"base_perplexity\"\nmax = 300"),
            GateStatus::Missing
        );

        manifest.remove("accuracy");
        assert!(SealedMetrics::read(&manifest, Some(bytes)).is_ok());

        manifest.insert("perplexity".into(), 15.5);
        let e = SealedMetrics::read(&manifest, Some(bytes)).unwrap_err();
        assert!(
            matches!(&e, QualityError::MetricsDisagree { metric, report, manifest }
                if metric == "perplexity" && *report == r.perplexity.perplexity && *manifest == 15.5),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("perplexity is {}", r.perplexity.perplexity))
                && text.contains("but 15.5 in the manifest's metrics"),
            "{text}"
        );
    }

    #[test]
    fn a_report_that_does_not_read_is_refused() {
        let mut bytes = TINY_REPORT.to_vec();
        bytes.push(b' ');
        let e = SealedMetrics::read(&BTreeMap::new(), Some(&bytes)).unwrap_err();
        assert!(matches!(e, QualityError::EvalReport { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("quality.eval-report: outputs/eval-report.json")
        );
    }

    /// A missed gate names the gate, the sealed number and the job's gate;
    /// the sealed policy must be the one `job.policy_sha256` names.
    #[test]
    fn a_missed_gate_names_the_job_policy_gate() {
        let r = report();
        let n = SealedMetrics::read(&r.metrics(), Some(TINY_REPORT)).unwrap();
        let job_text = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[[quality.gates]]\nmetric = \"perplexity\"\nmax = 40.0\n";
        let digest = HexBytes(Sha256::digest(job_text.as_bytes()).into());
        let job = JobPolicy::read(&digest, Some(job_text.as_bytes())).unwrap();
        assert!(matches!(job, JobPolicy::Sealed(_)));
        let auditor = policy(&[
            "metric = \"perplexity\"\nmax = 10",
            "metric = \"accuracy\"\nmin = 0.3",
            "metric = \"k_score\"\nmin = 0.99",
        ]);
        let e = judge(&n, &job, &auditor).unwrap_err();
        let j = e.judgement().unwrap();
        let statuses: Vec<GateStatus> = j.gates.iter().map(|g| g.status).collect();
        assert_eq!(
            statuses,
            [GateStatus::AboveMax, GateStatus::Pass, GateStatus::BelowMin]
        );
        assert_eq!(
            e.to_string(),
            format!(
                "quality.gate: perplexity = {} from the sealed eval report \
                 (outputs/eval-report.json) is above the auditor's gate perplexity <= 10; the \
                 job's own policy gated perplexity <= 40; k_score = {} from the sealed eval \
                 report (outputs/eval-report.json) is below the auditor's gate k_score >= 0.99; \
                 the job's own policy had no gate on k_score",
                r.perplexity.perplexity, r.k_score
            )
        );
        // Under the job's own policy the same numbers pass.
        let job_policy = Policy::from_toml_str(job_text).unwrap();
        let ok = judge(&n, &job, &job_policy).unwrap();
        assert_eq!(ok.gates[0].status, GateStatus::Pass);

        // Another policy than the one the job ran under is refused.
        let other = HexBytes([2; 32]);
        let e = JobPolicy::read(&other, Some(job_text.as_bytes())).unwrap_err();
        assert!(matches!(e, QualityError::JobPolicyNotBound { .. }), "{e:?}");
        assert_eq!(JobPolicy::read(&other, None).unwrap(), JobPolicy::NotSealed);
        // One this reader refuses still lets the auditor's gates be judged.
        let newer = b"schema = \"kolm.policy.v9\"\n";
        let digest = HexBytes(Sha256::digest(newer).into());
        let job = JobPolicy::read(&digest, Some(newer)).unwrap();
        assert!(matches!(job, JobPolicy::Unreadable(_)));
        assert_eq!(job.gate_for("perplexity"), JobGate::PolicyUnreadable);
    }
}
