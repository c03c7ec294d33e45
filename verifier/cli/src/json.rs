//! The `--json` documents, built from the library's typed results (the only
//! place JSON is produced). Field names are documented in
//! docs/verify-report-v1.md and docs/attestation.md and do not change
//! within a schema version.

use kolm_format::timefmt;
use kolm_policy::Pinning;
use kolm_verifier::attested::{EvidenceKind, EvidenceVerdict, Fields, Outcome};
use kolm_verifier::check::{CheckId, CheckKind, CheckStatus};
use kolm_verifier::quality::{JobGate, QualityJudgement};
use kolm_verifier::report::{ReportWarning, VerifyReport};
use serde::Serialize;
use std::collections::BTreeMap;

use serde_json::Value;

/// `schema` of the artifact report.
pub const VERIFY_REPORT_V1: &str = "kolm.verify-report.v1";
/// `schema` of a platform verifier's report.
pub const ATTESTATION_REPORT_V1: &str = "kolm.attestation-report.v1";

fn time_text(t: time::OffsetDateTime) -> String {
    timefmt::format_utc_seconds(t).unwrap_or_default()
}

// Field order is that of the documents as first published (it is not
// significant, but keeping it keeps the output byte-stable).

#[derive(Serialize)]
struct AttestationCheck<'a> {
    id: CheckId,
    kind: CheckKind,
    status: CheckStatus,
    detail: &'a str,
}

#[derive(Serialize)]
struct PinningDoc {
    pinned: bool,
    compared: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    needs: Option<&'static str>,
}

/// One entry of `warnings`.
#[derive(Serialize)]
struct WarningDoc {
    id: &'static str,
    message: String,
}

impl From<ReportWarning> for WarningDoc {
    fn from(w: ReportWarning) -> WarningDoc {
        WarningDoc {
            id: w.id(),
            message: w.to_string(),
        }
    }
}

#[derive(Serialize)]
pub struct AttestationReport<'a> {
    schema: &'static str,
    platform: EvidenceKind,
    verdict: &'static str,
    reason: Option<String>,
    /// Loud notes beside the verdict (`simulated`: NOT A TEE); added with
    /// the simulated TEE, older readers ignore it.
    warnings: Vec<WarningDoc>,
    verified_at: String,
    /// Whether the policy pins the guest's identity (`null` when rejected).
    pinning: Option<PinningDoc>,
    checks: Vec<AttestationCheck<'a>>,
    fields: &'a Fields,
}

/// `kolm.attestation-report.v1`.
pub fn attestation_report(
    o: Outcome<'_>,
    dangerous_any_measurement: bool,
) -> AttestationReport<'_> {
    let pinning = match o {
        Outcome::Accepted(a) => Some(PinningDoc {
            pinned: a.pinning.is_pinned(),
            compared: a
                .pinning
                .compared()
                .iter()
                .map(ToString::to_string)
                .collect(),
            needs: match &a.pinning {
                Pinning::Unpinned { needs, .. } => Some(needs),
                Pinning::Pinned { .. } => None,
            },
        }),
        Outcome::Rejected(_) => None,
    };
    let verdict = o.verdict(dangerous_any_measurement);
    let warnings = match verdict {
        EvidenceVerdict::Simulated => vec![WarningDoc {
            id: "simulated-tee",
            message: kolm_verifier::attested::SIMULATED_REASON.to_string(),
        }],
        _ => Vec::new(),
    };
    AttestationReport {
        schema: ATTESTATION_REPORT_V1,
        platform: o.kind(),
        verdict: verdict.as_str(),
        reason: o.verdict_reason(dangerous_any_measurement),
        warnings,
        verified_at: o.verified_at_text(),
        pinning,
        checks: o
            .checks()
            .iter()
            .map(|c| AttestationCheck {
                id: c.id,
                kind: c.kind(),
                status: c.status,
                detail: &c.detail,
            })
            .collect(),
        fields: o.fields(),
    }
}

#[derive(Serialize)]
struct ArtifactCheck<'a> {
    id: CheckId,
    status: CheckStatus,
    detail: &'a str,
}

#[derive(Serialize)]
pub struct VerifyReportDoc<'a> {
    schema: &'static str,
    artifact: &'a str,
    verdict: &'static str,
    reason: Option<&'a str>,
    verified_at: Option<String>,
    verified_at_source: Option<&'static str>,
    dangerous_allow_unattested: bool,
    dangerous_any_measurement: bool,
    /// SHA-256 (hex) of the root given with `--dangerous-trust-sim-root`.
    dangerous_trust_sim_root: Option<String>,
    /// Loud notes beside the verdict (`simulated`: NOT A TEE).
    warnings: Vec<WarningDoc>,
    checks: Vec<ArtifactCheck<'a>>,
    /// Sorted by name, as the document has always been.
    fields: BTreeMap<&'static str, Value>,
    /// The auditor's quality gates on the sealed numbers; null until the
    /// `policy` check judged them. Added in issue 21; older readers ignore
    /// it.
    quality: Option<QualityDoc<'a>>,
}

/// `quality`.
#[derive(Serialize)]
struct QualityDoc<'a> {
    /// `eval-report` or `manifest`.
    source: &'static str,
    gates: Vec<GateDoc<'a>>,
}

/// `quality.gates[]`: one gate of the auditor's policy.
#[derive(Serialize)]
struct GateDoc<'a> {
    metric: &'a str,
    min: Option<f64>,
    max: Option<f64>,
    /// The sealed number; null when not sealed (or not finite: JSON has no
    /// NaN, and the readers refuse one before it gets here).
    value: Option<f64>,
    passed: bool,
    status: &'static str,
    job_gate: JobGateDoc,
}

/// `quality.gates[].job_gate`: what the job's own policy said.
#[derive(Serialize)]
struct JobGateDoc {
    /// `gate`, `no-gate`, `policy-not-sealed`, `policy-unreadable`.
    kind: &'static str,
    min: Option<f64>,
    max: Option<f64>,
}

impl From<&JobGate> for JobGateDoc {
    fn from(g: &JobGate) -> JobGateDoc {
        let (min, max) = match g {
            JobGate::Gate(g) => (g.min, g.max),
            JobGate::NoGate | JobGate::PolicyNotSealed | JobGate::PolicyUnreadable => (None, None),
        };
        JobGateDoc {
            kind: g.as_str(),
            min,
            max,
        }
    }
}

fn quality_doc(q: &QualityJudgement) -> QualityDoc<'_> {
    QualityDoc {
        source: q.source.as_str(),
        gates: q
            .gates
            .iter()
            .map(|g| GateDoc {
                metric: &g.gate.metric,
                min: g.gate.min,
                max: g.gate.max,
                value: g.value.filter(|v| v.is_finite()),
                passed: g.status.passed(),
                status: g.status.as_str(),
                job_gate: (&g.job_gate).into(),
            })
            .collect(),
    }
}

/// `kolm.verify-report.v1`.
pub fn verify_report(r: &VerifyReport) -> anyhow::Result<VerifyReportDoc<'_>> {
    let mut fields = BTreeMap::new();
    if let Some(m) = &r.manifest {
        fields.insert("job_id", m.job.id.clone().into());
        fields.insert("job_kind", m.job.kind.clone().into());
        fields.insert("platform", m.environment.platform.as_str().into());
        fields.insert("finished_at", m.job.finished_at.clone().into());
        fields.insert("sequence", m.chain.sequence.into());
        fields.insert(
            "previous",
            m.chain
                .previous
                .map_or(Value::Null, |c| c.to_string().into()),
        );
        fields.insert("signer_public_key", m.signer.public_key.to_hex().into());
        fields.insert("outputs", m.outputs.len().into());
        fields.insert("policy_sha256", m.job.policy_sha256.to_hex().into());
    }
    if let Some(cid) = &r.manifest_cid {
        fields.insert("manifest_cid", cid.to_string().into());
    }
    if let Some(rd) = &r.report_data {
        fields.insert("report_data", hex::encode(rd).into());
    }
    if let Some(a) = &r.attestation {
        fields.insert(
            "attestation",
            serde_json::to_value(attestation_report(
                Outcome::of(a),
                r.dangerous_any_measurement,
            ))?,
        );
    }
    Ok(VerifyReportDoc {
        schema: VERIFY_REPORT_V1,
        artifact: &r.artifact,
        verdict: r.verdict.as_str(),
        reason: r.reason.as_deref(),
        verified_at: r.verified_at.map(time_text),
        verified_at_source: r.verified_at_source.map(|s| s.as_str()),
        dangerous_allow_unattested: r.dangerous_allow_unattested,
        dangerous_any_measurement: r.dangerous_any_measurement,
        dangerous_trust_sim_root: r.dangerous_trust_sim_root.map(hex::encode),
        warnings: r.warnings().into_iter().map(WarningDoc::from).collect(),
        checks: r
            .checks
            .iter()
            .map(|c| ArtifactCheck {
                id: c.id,
                status: c.status,
                detail: &c.detail,
            })
            .collect(),
        fields,
        quality: r.quality.as_ref().map(quality_doc),
    })
}
