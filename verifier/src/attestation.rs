//! TRANSITIONAL: the string-keyed report the platform verifiers returned
//! before `crate::attested` (typed `Attested` / `Rejection`). Removed once
//! every caller has moved; [`AttestationReport::from_outcome`] bridges.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::CheckStatus;

pub use crate::check::CheckKind;

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct AttestationCheck {
    /// Stable dotted id, e.g. `nitro.chain`, `snp.vcek.hwid`.
    pub id: String,
    pub kind: CheckKind,
    pub status: CheckStatus,
    pub detail: String,
}

/// Accept or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttestationVerdict {
    Accept,
    Reject,
}

/// What a platform verifier concluded.
#[derive(Debug, Clone, Serialize)]
pub struct AttestationReport {
    pub schema: &'static str,
    pub platform: &'static str,
    pub verdict: AttestationVerdict,
    /// `"<check id>: <detail>"` of the first failing check.
    pub reason: Option<String>,
    pub verified_at: String,
    pub checks: Vec<AttestationCheck>,
    /// Extracted values, named as in `attestation-samples/*/expected.json`.
    pub fields: BTreeMap<String, serde_json::Value>,
}

/// `schema` of the `--json` document for raw evidence.
pub const ATTESTATION_REPORT_SCHEMA_V1: &str = "kolm.attestation-report.v1";

impl AttestationReport {
    pub fn new(platform: &'static str, verified_at: String) -> AttestationReport {
        AttestationReport {
            schema: ATTESTATION_REPORT_SCHEMA_V1,
            platform,
            verdict: AttestationVerdict::Reject,
            reason: None,
            verified_at,
            checks: Vec::new(),
            fields: BTreeMap::new(),
        }
    }

    /// Records a passing check.
    pub fn pass(&mut self, id: &str, kind: CheckKind, detail: impl Into<String>) {
        self.push(id, kind, CheckStatus::Pass, detail);
    }

    /// Records a failing check.
    pub fn fail(&mut self, id: &str, kind: CheckKind, detail: impl Into<String>) {
        self.push(id, kind, CheckStatus::Fail, detail);
    }

    /// Records a skipped check (not applicable, or not configured by policy).
    pub fn skip(&mut self, id: &str, kind: CheckKind, detail: impl Into<String>) {
        self.push(id, kind, CheckStatus::Skip, detail);
    }

    fn push(&mut self, id: &str, kind: CheckKind, status: CheckStatus, detail: impl Into<String>) {
        self.checks.push(AttestationCheck {
            id: id.to_string(),
            kind,
            status,
            detail: detail.into(),
        });
    }

    pub fn field(&mut self, name: &str, value: impl Into<serde_json::Value>) {
        self.fields.insert(name.to_string(), value.into());
    }

    /// The first failing check.
    pub fn first_failure(&self) -> Option<&AttestationCheck> {
        self.checks.iter().find(|c| c.status == CheckStatus::Fail)
    }

    /// Sets verdict and reason from the checks: accept only when at least one
    /// check ran and none failed.
    pub fn conclude(&mut self) {
        match self.first_failure() {
            Some(f) => {
                self.reason = Some(format!("{}: {}", f.id, f.detail));
                self.verdict = AttestationVerdict::Reject;
            }
            None if self.checks.iter().any(|c| c.status == CheckStatus::Pass) => {
                self.reason = None;
                self.verdict = AttestationVerdict::Accept;
            }
            None => {
                self.reason = Some("no check ran".into());
                self.verdict = AttestationVerdict::Reject;
            }
        }
    }

    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let verdict = match self.verdict {
            AttestationVerdict::Accept => "ACCEPT",
            AttestationVerdict::Reject => "REJECT",
        };
        crate::report::render_table(
            &format!(
                "platform: {}  (verified at {})",
                self.platform, self.verified_at
            ),
            self.checks
                .iter()
                .map(|c| (c.id.as_str(), c.status, c.detail.as_str())),
            self.fields.iter().map(|(k, v)| (k.as_str(), v)),
            verdict,
            self.reason.as_deref(),
        )
    }
}

impl AttestationReport {
    /// The old report shape of a typed outcome.
    pub fn from_outcome(
        r: &Result<crate::attested::Attested, crate::attested::Rejection>,
    ) -> AttestationReport {
        let o = crate::attested::Outcome::of(r);
        let mut out = AttestationReport::new(
            o.kind().as_str(),
            kolm_format::timefmt::format_utc_seconds(o.verified_at()).unwrap_or_default(),
        );
        for c in o.checks() {
            out.push(c.id.as_str(), c.kind(), c.status, c.detail.clone());
        }
        for (k, v) in o.fields().iter() {
            out.field(k, v.clone());
        }
        out.verdict = if o.accepted() {
            AttestationVerdict::Accept
        } else {
            AttestationVerdict::Reject
        };
        out.reason = o.reason().map(str::to_string);
        out
    }
}
