//! The verification report: one typed result per check, the verdict, and the
//! facts an auditor wants to see. `--json` prints it as the versioned document
//! described in `docs/verify-report-v1.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// The `schema` value of a v1 report.
pub const REPORT_SCHEMA_V1: &str = "kolm.verify-report.v1";

pub use crate::check::CheckStatus;

/// One check and what it found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub id: &'static str,
    pub status: CheckStatus,
    pub detail: String,
}

/// The verdict over all checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every check passed.
    Verified,
    /// Every check that could run passed, but nothing attests the platform.
    Unattested,
    /// A check failed; `reason` names the first one.
    Rejected,
}

impl Verdict {
    /// Process exit code: 0 verified, 1 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Verified => 0,
            Verdict::Unattested | Verdict::Rejected => 1,
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub schema: &'static str,
    pub artifact: String,
    pub verdict: Verdict,
    pub reason: Option<String>,
    pub verified_at: Option<String>,
    pub dangerous_allow_unattested: bool,
    pub checks: Vec<Check>,
    pub fields: BTreeMap<&'static str, serde_json::Value>,
}

impl VerifyReport {
    pub(crate) fn new(artifact: String, dangerous_allow_unattested: bool) -> VerifyReport {
        VerifyReport {
            schema: REPORT_SCHEMA_V1,
            artifact,
            verdict: Verdict::Rejected,
            reason: None,
            verified_at: None,
            dangerous_allow_unattested,
            checks: Vec::new(),
            fields: BTreeMap::new(),
        }
    }

    pub(crate) fn push(
        &mut self,
        id: &'static str,
        status: CheckStatus,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            id,
            status,
            detail: detail.into(),
        });
    }

    pub(crate) fn field(&mut self, name: &'static str, value: impl Into<serde_json::Value>) {
        self.fields.insert(name, value.into());
    }

    /// The first failed check, if any.
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.status == CheckStatus::Fail)
    }

    /// The status of check `id`, if it was recorded.
    pub fn status_of(&self, id: &str) -> Option<CheckStatus> {
        self.checks.iter().find(|c| c.id == id).map(|c| c.status)
    }

    /// Sets verdict and reason from the checks.
    pub(crate) fn conclude(&mut self) {
        if let Some(fail) = self.first_failure() {
            self.reason = Some(format!("{}: {}", fail.id, fail.detail));
            self.verdict = Verdict::Rejected;
        } else if self
            .checks
            .iter()
            .any(|c| c.status == CheckStatus::Unattested)
        {
            if self.dangerous_allow_unattested {
                self.verdict = Verdict::Verified;
                self.reason = Some(
                    "accepted WITHOUT hardware attestation (--dangerous-allow-unattested)".into(),
                );
            } else {
                self.verdict = Verdict::Unattested;
                self.reason = Some(
                    "attestation: platform `none` carries no hardware evidence; nothing \
                     proves where this ran"
                        .into(),
                );
            }
        } else {
            self.verdict = Verdict::Verified;
            self.reason = None;
        }
    }

    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Verified => "VERIFIED",
            Verdict::Unattested => "UNATTESTED",
            Verdict::Rejected => "REJECTED",
        };
        render_table(
            &format!("artifact: {}", self.artifact),
            self.checks
                .iter()
                .map(|c| (c.id, c.status, c.detail.as_str())),
            self.fields.iter().map(|(k, v)| (*k, v)),
            verdict,
            self.reason.as_deref(),
        )
    }
}

/// The table layout shared by artifact and evidence reports: one line per
/// check, then the fields, then the verdict.
pub(crate) fn render_table<'a>(
    header: &str,
    checks: impl Iterator<Item = (&'a str, CheckStatus, &'a str)> + Clone,
    fields: impl Iterator<Item = (&'a str, &'a serde_json::Value)>,
    verdict: &str,
    reason: Option<&str>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    let width = checks.clone().map(|(id, _, _)| id.len()).max().unwrap_or(0);
    for (id, status, detail) in checks {
        let tag = match status {
            CheckStatus::Pass => "PASS",
            CheckStatus::Fail => "FAIL",
            CheckStatus::Skip => "skip",
            CheckStatus::Unattested => "NONE",
        };
        let _ = writeln!(out, "  [{tag}] {id:width$}  {detail}");
    }
    for (k, v) in fields {
        let shown = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let _ = writeln!(out, "  {k}: {shown}");
    }
    match reason {
        Some(r) => {
            let _ = writeln!(out, "verdict: {verdict} ({r})");
        }
        None => {
            let _ = writeln!(out, "verdict: {verdict}");
        }
    }
    out
}
