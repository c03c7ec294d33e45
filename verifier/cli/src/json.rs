//! The `--json` documents, built from the library's typed results (the only
//! place JSON is produced). Field names are documented in
//! docs/verify-report-v1.md and docs/attestation.md and do not change
//! within a schema version.

use kolm_format::timefmt;
use kolm_verifier::attested::Outcome;
use kolm_verifier::report::VerifyReport;
use serde_json::{Map, Value, json};

/// `schema` of the artifact report.
pub const VERIFY_REPORT_V1: &str = "kolm.verify-report.v1";
/// `schema` of a platform verifier's report.
pub const ATTESTATION_REPORT_V1: &str = "kolm.attestation-report.v1";

fn time_text(t: time::OffsetDateTime) -> String {
    timefmt::format_utc_seconds(t).unwrap_or_default()
}

/// `kolm.attestation-report.v1`.
pub fn attestation_report(o: Outcome<'_>) -> Value {
    let checks: Vec<Value> = o
        .checks()
        .iter()
        .map(|c| json!({"id": c.id, "kind": c.kind(), "status": c.status, "detail": c.detail}))
        .collect();
    json!({
        "schema": ATTESTATION_REPORT_V1,
        "platform": o.kind(),
        "verdict": if o.accepted() { "accept" } else { "reject" },
        "reason": o.reason(),
        "verified_at": o.verified_at_text(),
        "checks": checks,
        "fields": o.fields(),
    })
}

/// `kolm.verify-report.v1`.
pub fn verify_report(r: &VerifyReport) -> Value {
    let checks: Vec<Value> = r
        .checks
        .iter()
        .map(|c| json!({"id": c.id, "status": c.status, "detail": c.detail}))
        .collect();
    let mut fields = Map::new();
    if let Some(m) = &r.manifest {
        fields.insert("job_id".into(), m.job.id.clone().into());
        fields.insert("job_kind".into(), m.job.kind.clone().into());
        fields.insert("platform".into(), m.environment.platform.as_str().into());
        fields.insert("finished_at".into(), m.job.finished_at.clone().into());
        fields.insert("sequence".into(), m.chain.sequence.into());
        fields.insert(
            "previous".into(),
            m.chain
                .previous
                .map_or(Value::Null, |c| c.to_string().into()),
        );
        fields.insert(
            "signer_public_key".into(),
            m.signer.public_key.to_hex().into(),
        );
        fields.insert("outputs".into(), m.outputs.len().into());
        fields.insert("policy_sha256".into(), m.job.policy_sha256.to_hex().into());
    }
    if let Some(cid) = &r.manifest_cid {
        fields.insert("manifest_cid".into(), cid.to_string().into());
    }
    if let Some(rd) = &r.report_data {
        fields.insert("report_data".into(), hex::encode(rd).into());
    }
    if let Some(a) = &r.attestation {
        fields.insert("attestation".into(), attestation_report(Outcome::of(a)));
    }
    json!({
        "schema": VERIFY_REPORT_V1,
        "artifact": r.artifact,
        "verdict": r.verdict.as_str(),
        "reason": r.reason,
        "verified_at": r.verified_at.map(time_text),
        "dangerous_allow_unattested": r.dangerous_allow_unattested,
        "checks": checks,
        "fields": fields,
    })
}
