//! The verification report of a sealed artifact: every check of receipt spec
//! v1 section 8 as a typed [`Checklist`], the verdict, and the typed facts an
//! auditor wants to see (the manifest, its CID, the report data, the
//! attestation outcome). The `--json` document (`docs/verify-report-v1.md`)
//! is produced from it by the `kolm-verify` binary.

use std::fmt::Write as _;

use kolm_format::content_id::ContentId;
use kolm_format::manifest::Manifest;
use kolm_policy::Platform;
use time::OffsetDateTime;

use crate::attested::{Attested, EvidenceVerdict, Outcome, Rejection};
use crate::check::{ArtifactCheck, Check, Checklist};
use crate::quality::{GateText, QualityJudgement};

pub use crate::check::CheckStatus;

/// The verdict over all checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every check passed.
    Verified,
    /// Every check that could run passed, but nothing attests the platform.
    Unattested,
    /// Every check passed and the hardware evidence is genuine, but the
    /// policy pins no launch identity: any workload in a genuine TEE could
    /// have produced it.
    Unpinned,
    /// Every check passed on the kolm simulated TEE's evidence, against the
    /// sim root the caller trusts (`--dangerous-trust-sim-root`): software
    /// evidence, NOT a TEE. Never `verified`.
    Simulated,
    /// A check failed; `reason` names the first one.
    Rejected,
}

impl Verdict {
    /// The verdict's own exit code: 0 verified, 1 otherwise (a report's
    /// code can differ: [`VerifyReport::exit_code`]).
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Verified => 0,
            Verdict::Unattested | Verdict::Unpinned | Verdict::Simulated | Verdict::Rejected => 1,
        }
    }

    /// The JSON and table name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Verified => "verified",
            Verdict::Unattested => "unattested",
            Verdict::Unpinned => "unpinned",
            Verdict::Simulated => "simulated",
            Verdict::Rejected => "rejected",
        }
    }
}

/// A warning a report carries beside its verdict (the table prints each as
/// a `WARNING:` line, `--json` lists them in `warnings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReportWarning {
    /// The verdict is `simulated`: the evidence is the kolm simulated
    /// TEE's, checked against the sim root of this SHA-256.
    SimulatedTee { root_sha256: [u8; 32] },
}

impl ReportWarning {
    /// The stable id (`--json` `warnings[].id`).
    pub fn id(self) -> &'static str {
        match self {
            ReportWarning::SimulatedTee { .. } => "simulated-tee",
        }
    }
}

impl std::fmt::Display for ReportWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportWarning::SimulatedTee { root_sha256 } => write!(
                f,
                "SIMULATED TEE, NOT A TEE: this artifact's evidence was made by the kolm \
                 simulated TEE and checked against the sim root sha256 {} \
                 (--dangerous-trust-sim-root); it proves nothing about hardware or where the job \
                 ran",
                hex::encode(root_sha256)
            ),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The artifact's name as given by the caller.
    pub artifact: String,
    pub verdict: Verdict,
    /// `"<check id>: <detail>"` of the first failed check; for `unattested`,
    /// `unpinned` and a dangerous acceptance, why; `None` when verified.
    pub reason: Option<String>,
    /// The verification instant used (`None` if the manifest could not be
    /// read).
    pub verified_at: Option<OffsetDateTime>,
    /// Why that instant: the receipt's own `finished_at`, or one the caller
    /// gave (`--at`).
    pub verified_at_source: Option<crate::artifact::AtSource>,
    pub dangerous_allow_unattested: bool,
    /// Whether evidence whose identity the policy does not pin was accepted
    /// (`--dangerous-any-measurement`).
    pub dangerous_any_measurement: bool,
    /// SHA-256 of the sim root given with `--dangerous-trust-sim-root`, if
    /// one was (used for platform `simulated` only).
    pub dangerous_trust_sim_root: Option<[u8; 32]>,
    /// Every artifact check, in order, always all of them.
    pub checks: Checklist,
    /// The manifest, once it passed the manifest check.
    pub manifest: Option<Manifest>,
    /// The manifest CID, once computed.
    pub manifest_cid: Option<ContentId>,
    /// The report data bound to the CID, once the binding check ran.
    pub report_data: Option<[u8; 64]>,
    /// The platform verifier's outcome, for hardware platforms.
    pub attestation: Option<Result<Attested, Rejection>>,
    /// The auditor's quality gates on the sealed numbers, once the
    /// `policy` check judged them (missed gates included).
    pub quality: Option<QualityJudgement>,
}

impl VerifyReport {
    pub(crate) fn new(
        artifact: String,
        dangerous_allow_unattested: bool,
        dangerous_any_measurement: bool,
    ) -> VerifyReport {
        VerifyReport {
            artifact,
            verdict: Verdict::Rejected,
            reason: None,
            verified_at: None,
            verified_at_source: None,
            dangerous_allow_unattested,
            dangerous_any_measurement,
            dangerous_trust_sim_root: None,
            checks: Checklist::new(),
            manifest: None,
            manifest_cid: None,
            report_data: None,
            attestation: None,
            quality: None,
        }
    }

    /// The first failed check, if any.
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.first_failure()
    }

    /// The status of check `id`, if it was recorded.
    pub fn status_of(&self, id: ArtifactCheck) -> Option<CheckStatus> {
        self.checks.status_of(id)
    }

    /// The platform the manifest names, once it was read.
    pub fn platform(&self) -> Option<Platform> {
        self.manifest.as_ref().map(|m| m.environment.platform)
    }

    /// Sets verdict and reason from the checks.
    pub(crate) fn conclude(&mut self) {
        if let Some(fail) = self.first_failure() {
            self.reason = Some(format!("{}: {}", fail.id, fail.detail));
            self.verdict = Verdict::Rejected;
        } else if self
            .checks
            .iter()
            .any(|c| c.status == CheckStatus::Simulated)
        {
            // Never `verified`: at most accepted as unattested, out loud.
            self.verdict = Verdict::Simulated;
            let why = format!("attestation: {}", crate::attested::SIMULATED_REASON);
            self.reason = Some(if self.dangerous_allow_unattested {
                format!(
                    "accepted WITHOUT hardware attestation (--dangerous-allow-unattested); {why}"
                )
            } else {
                why
            });
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
                self.reason = Some(match self.platform() {
                    Some(Platform::Simulated) => "attestation: platform `simulated` is a \
                        simulation whose evidence is never trusted; nothing proves where \
                        this ran"
                        .into(),
                    _ => "attestation: platform `none` carries no hardware evidence; nothing \
                          proves where this ran"
                        .into(),
                });
            }
        } else if let Some(unpinned) = self
            .checks
            .iter()
            .find(|c| c.status == CheckStatus::Unpinned)
        {
            let why = format!("{}: {}", unpinned.id, unpinned.detail);
            if self.dangerous_any_measurement {
                self.verdict = Verdict::Verified;
                self.reason = Some(format!(
                    "accepted WITHOUT a pinned measurement (--dangerous-any-measurement); {why}"
                ));
            } else {
                self.verdict = Verdict::Unpinned;
                self.reason = Some(why);
            }
        } else {
            self.verdict = Verdict::Verified;
            self.reason = None;
        }
        // Collateral outside the signature, accepted by the policy: an
        // acceptance says so.
        if self.verdict == Verdict::Verified
            && let Some(unbound) = self
                .checks
                .iter()
                .find(|c| c.status == CheckStatus::Unbound)
        {
            let why = format!(
                "accepted with collateral NOT bound to the receipt \
                 (freshness.require_bound_collateral = false); {}: {}",
                unbound.id, unbound.detail
            );
            self.reason = Some(match self.reason.take() {
                Some(r) => format!("{r}; {why}"),
                None => why,
            });
        }
    }

    /// The process exit code (docs/verify-report-v1.md): 0 for `verified`,
    /// and for `simulated` when `--dangerous-allow-unattested` accepts it
    /// (as it accepts `unattested` artifacts; the policy must allow
    /// `simulated`); 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            Verdict::Simulated if self.dangerous_allow_unattested => 0,
            v => v.exit_code(),
        }
    }

    /// The warnings that go with the verdict.
    pub fn warnings(&self) -> Vec<ReportWarning> {
        match (self.verdict, self.dangerous_trust_sim_root) {
            (Verdict::Simulated, Some(root_sha256)) => {
                vec![ReportWarning::SimulatedTee { root_sha256 }]
            }
            _ => Vec::new(),
        }
    }

    /// The facts shown under the checks, as `(name, text)`, sorted by name
    /// (only those reached before a failure).
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(m) = &self.manifest {
            out.push(("job_id", m.job.id.clone()));
            out.push(("job_kind", m.job.kind.clone()));
            out.push(("platform", m.environment.platform.as_str().to_string()));
            out.push(("finished_at", m.job.finished_at.clone()));
            out.push(("sequence", m.chain.sequence.to_string()));
            out.push((
                "previous",
                m.chain
                    .previous
                    .map_or_else(|| "null".to_string(), |c| c.to_string()),
            ));
            out.push(("signer_public_key", m.signer.public_key.to_hex()));
            out.push(("outputs", m.outputs.len().to_string()));
            out.push(("policy_sha256", m.job.policy_sha256.to_hex()));
        }
        if let Some(cid) = &self.manifest_cid {
            out.push(("manifest_cid", cid.to_string()));
        }
        if let Some(rd) = &self.report_data {
            out.push(("report_data", hex::encode(rd)));
        }
        if let (Some(at), Some(source)) = (self.verified_at, self.verified_at_source) {
            let at = kolm_format::timefmt::format_utc_seconds(at).unwrap_or_default();
            let why = match source {
                crate::artifact::AtSource::FinishedAt => {
                    "the receipt's own time (finished_at), a guest clock; pass --at to judge at \
                     another instant"
                }
                crate::artifact::AtSource::Given => "the instant given with --at",
            };
            out.push(("verified_at", format!("{at} ({why})")));
        }
        if let Some(a) = &self.attestation {
            let o = Outcome::of(a);
            out.push((
                "attestation",
                format!(
                    "{} {} ({} checks)",
                    o.kind(),
                    if o.accepted() { "accepted" } else { "rejected" },
                    o.checks().len()
                ),
            ));
            match a {
                Ok(att) if att.platform() == Platform::Simulated => out.push((
                    "identity",
                    "none: simulated evidence (NOT A TEE) identifies no guest".to_string(),
                )),
                Ok(att) => out.push(("identity", att.pinning.to_string())),
                Err(_) => {}
            }
        }
        if let Some(root) = &self.dangerous_trust_sim_root {
            out.push((
                "trusted_sim_root",
                format!(
                    "sha256 {} (--dangerous-trust-sim-root; platform simulated only)",
                    hex::encode(root)
                ),
            ));
        }
        if let Some(q) = &self.quality {
            out.push(("quality_source", q.source.to_string()));
            for g in &q.gates {
                let value = g
                    .value
                    .map_or_else(|| "not sealed".to_owned(), |v| v.to_string());
                let verdict = if g.status.passed() {
                    "PASS".to_owned()
                } else {
                    format!("FAIL ({})", g.status.as_str())
                };
                out.push((
                    "quality_gate",
                    format!(
                        "{}: {value} {verdict}; {}",
                        GateText(&g.gate),
                        g.job_gate.describe(&g.gate.metric)
                    ),
                ));
            }
        }
        // Sorted by name, as the table has always shown them (a stable
        // sort: the gates stay in the policy's order).
        out.sort_by_key(|(name, _)| *name);
        out
    }

    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Verified => "VERIFIED",
            Verdict::Unattested => "UNATTESTED",
            Verdict::Unpinned => "UNPINNED",
            Verdict::Simulated => "SIMULATED",
            Verdict::Rejected => "REJECTED",
        };
        let facts = self.facts();
        let warnings: Vec<String> = self.warnings().iter().map(ToString::to_string).collect();
        render_table(
            &format!("artifact: {}", self.artifact),
            &self.checks,
            facts.iter().map(|(k, v)| (*k, v.as_str())),
            &warnings,
            verdict,
            self.reason.as_deref(),
        )
    }
}

/// The table layout shared by artifact and evidence reports: one line per
/// check, then the facts, then a `WARNING:` line per warning, then the
/// verdict.
pub fn render_table<'a>(
    header: &str,
    checks: &Checklist,
    facts: impl Iterator<Item = (&'a str, &'a str)>,
    warnings: &[String],
    verdict: &str,
    reason: Option<&str>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    let width = checks
        .iter()
        .map(|c| c.id.as_str().len())
        .max()
        .unwrap_or(0);
    for c in checks {
        let tag = match c.status {
            CheckStatus::Pass => "PASS",
            CheckStatus::Fail => "FAIL",
            CheckStatus::Skip => "skip",
            CheckStatus::Unattested => "NONE",
            CheckStatus::Unpinned => "PIN?",
            CheckStatus::Unbound => "UNBD",
            CheckStatus::Simulated => "SIM!",
        };
        let _ = writeln!(out, "  [{tag}] {:width$}  {}", c.id.as_str(), c.detail);
    }
    for (k, v) in facts {
        let _ = writeln!(out, "  {k}: {v}");
    }
    for w in warnings {
        let _ = writeln!(out, "WARNING: {w}");
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

/// Human-readable table of one platform verifier's outcome; the verdict is
/// [`Outcome::verdict`] (`dangerous_any_measurement` accepts unpinned
/// evidence, and the reason says so).
pub fn attestation_table(outcome: Outcome<'_>, dangerous_any_measurement: bool) -> String {
    let verified_at = outcome.verified_at_text();
    let fields: Vec<(&str, String)> = outcome
        .fields()
        .iter()
        .map(|(k, v)| {
            let shown = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k, shown)
        })
        .collect();
    let verdict = outcome.verdict(dangerous_any_measurement);
    let warnings = match verdict {
        EvidenceVerdict::Simulated => vec![crate::attested::SIMULATED_REASON.to_string()],
        _ => Vec::new(),
    };
    render_table(
        &format!("platform: {}  (verified at {verified_at})", outcome.kind()),
        outcome.checks(),
        fields.iter().map(|(k, v)| (*k, v.as_str())),
        &warnings,
        match verdict {
            EvidenceVerdict::Accept => "ACCEPT",
            EvidenceVerdict::Unpinned => "UNPINNED",
            EvidenceVerdict::Simulated => "SIMULATED",
            EvidenceVerdict::Reject => "REJECT",
        },
        outcome.verdict_reason(dangerous_any_measurement).as_deref(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn report(dangerous_any_measurement: bool) -> VerifyReport {
        let mut r = VerifyReport::new("a.zip".into(), false, dangerous_any_measurement);
        r.checks.pass(ArtifactCheck::Binding, "ok");
        r.checks.record(
            ArtifactCheck::Attestation,
            CheckStatus::Unpinned,
            "nitro evidence verified; no measurement pinned: any workload in a genuine TEE \
             could have produced this",
        );
        r.checks.pass(ArtifactCheck::Policy, "ok");
        r
    }

    /// Issue 12: genuine but unpinned evidence is `unpinned` (exit 1), a
    /// loud pass only with `--dangerous-any-measurement`, and a later
    /// failure still rejects.
    #[test]
    fn unpinned_attestation_gives_its_own_verdict() {
        let mut r = report(false);
        r.conclude();
        assert_eq!(r.verdict, Verdict::Unpinned);
        assert_eq!(r.verdict.exit_code(), 1);
        assert_eq!(r.verdict.as_str(), "unpinned");
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .contains("no measurement pinned")
        );
        assert!(r.to_table().contains("verdict: UNPINNED"));

        let mut r = report(true);
        r.conclude();
        assert_eq!(r.verdict, Verdict::Verified);
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .starts_with("accepted WITHOUT a pinned measurement (--dangerous-any-measurement)")
        );

        let mut r = report(true);
        r.checks.fail(ArtifactCheck::Chain, "fork");
        r.conclude();
        assert_eq!(r.verdict, Verdict::Rejected);
    }

    /// Issue 12 item 5: collateral outside the signature, accepted by the
    /// policy (`unbound` on `evidence.index`), is accepted out loud: the
    /// verdict's reason says so; otherwise the verdict is what it was.
    #[test]
    fn an_unbound_index_is_accepted_out_loud() {
        let mut r = VerifyReport::new("a.zip".into(), false, false);
        r.checks.record(
            ArtifactCheck::EvidenceIndex,
            CheckStatus::Unbound,
            "collateral NOT bound",
        );
        r.checks.pass(ArtifactCheck::Attestation, "pinned");
        r.conclude();
        assert_eq!(r.verdict, Verdict::Verified);
        let reason = r.reason.clone().unwrap();
        assert!(
            reason.starts_with("accepted with collateral NOT bound to the receipt"),
            "{reason}"
        );
        assert!(r.to_table().contains("[UNBD] evidence.index"));
        // Unpinned as well: the verdict stays `unpinned`.
        let mut r = report(false);
        r.checks
            .record(ArtifactCheck::EvidenceIndex, CheckStatus::Unbound, "x");
        r.conclude();
        assert_eq!(r.verdict, Verdict::Unpinned);
        let json = serde_json::to_string(&CheckStatus::Unbound).unwrap();
        assert_eq!(json, "\"unbound\"");
    }
}
