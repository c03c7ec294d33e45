//! Issue 21: the auditor's quality gates, judged on the numbers an artifact
//! seals. A fine-tune-shaped artifact (the tiny example's eval report and
//! policy sealed as outputs, the manifest's metrics equal to the report's)
//! is rejected by an auditor who asks more than the job's policy did,
//! naming the gate, the sealed number and the job's gate, and accepted
//! under the job's own policy; a report that disagrees with the manifest,
//! one that does not read and a sealed policy that is not the job's are
//! each rejected by name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::{Path, PathBuf};

use common::{Spec, key, manifest_for};
use kolm_format::eval_report::EvalReport;
use kolm_format::hexbytes::HexBytes;
use kolm_format::seal::{self, EvidenceBundle};
use kolm_format::sealed_outputs::{EVAL_REPORT_PATH, SEALED_POLICY_PATH};
use kolm_policy::Policy;
use kolm_verifier::artifact::{VerifyAt, VerifyOptions, verify_artifact};
use kolm_verifier::quality::{GateStatus, JobGate, MetricSource};
use kolm_verifier::report::{Verdict, VerifyReport};
use sha2::{Digest as _, Sha256};

/// The tiny example's sealed eval report (tests/fixtures/eval-report).
const TINY_REPORT: &[u8] = include_bytes!("fixtures/eval-report/tiny.json");

/// The policy sealed as the job's: the tiny example's gates, and what the
/// test artifacts need (platform `none`, no sandbox record).
const JOB_POLICY: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n\
    [egress]\nmust_be_zero = false\n\
    [[quality.gates]]\nmetric = \"perplexity\"\nmax = 40.0\n\
    [[quality.gates]]\nmetric = \"k_score\"\nmin = 0.05\n";

/// What can be wrong with the test artifact.
#[derive(Clone, Copy, PartialEq)]
enum Flaw {
    None,
    /// The manifest's perplexity is another number than the report's.
    ManifestDisagrees,
    /// The sealed report is not a valid report.
    BadReport,
    /// `job.policy_sha256` names other bytes than the sealed policy.
    PolicyNotTheJobs,
}

/// Seals a fine-tune-shaped artifact in `dir`.
fn build(dir: &Path, flaw: Flaw) -> PathBuf {
    let report = if flaw == Flaw::BadReport {
        b"{\"schema\":\"kolm.eval-report.v1\"}".to_vec()
    } else {
        TINY_REPORT.to_vec()
    };
    let mut metrics = EvalReport::from_canonical_bytes(TINY_REPORT)
        .unwrap()
        .metrics();
    metrics.insert("base_perplexity".into(), 247.8);
    if flaw == Flaw::ManifestDisagrees {
        metrics.insert("perplexity".into(), 12.5);
    }
    let spec = Spec {
        outputs: vec![
            (EVAL_REPORT_PATH, report),
            (SEALED_POLICY_PATH, JOB_POLICY.as_bytes().to_vec()),
            ("outputs/model.safetensors", vec![0; 64]),
        ],
        metrics,
        ..Spec::default()
    };
    let (mut manifest, files) = manifest_for(&spec);
    manifest.job.kind = "fine-tune".into();
    manifest.job.policy_sha256 = if flaw == Flaw::PolicyNotTheJobs {
        HexBytes([2; 32])
    } else {
        HexBytes(Sha256::digest(JOB_POLICY.as_bytes()).into())
    };
    let p = dir.join("fine-tune.zip");
    let ev = EvidenceBundle {
        platform: spec.platform,
        files: Vec::new(),
    };
    seal::seal(&p, &manifest, files, &ev, &key(&spec.seed)).unwrap();
    p
}

/// The job's policy with `edits` (`(old, new)` text) applied.
fn auditor(edits: &[(&str, &str)]) -> Policy {
    let mut text = JOB_POLICY.to_owned();
    for (old, new) in edits {
        assert!(text.contains(old), "{old:?}");
        text = text.replace(old, new);
    }
    Policy::from_toml_str(&text).unwrap()
}

fn verify(p: &Path, policy: Policy) -> VerifyReport {
    let opts = VerifyOptions {
        policy: Some(policy),
        dangerous_allow_unattested: true,
        ..VerifyOptions::at(VerifyAt::ReceiptTime)
    };
    verify_artifact(p, &opts).unwrap()
}

fn rejection(r: &VerifyReport) -> String {
    assert_eq!(r.verdict, Verdict::Rejected, "{}", r.to_table());
    assert_eq!(r.first_failure().unwrap().id.as_str(), "policy");
    r.reason.clone().unwrap()
}

/// The rejection of an artifact with `flaw` under the job's own gates.
fn rejected_under_the_jobs_gates(flaw: Flaw) -> String {
    let dir = tempfile::tempdir().unwrap();
    rejection(&verify(&build(dir.path(), flaw), auditor(&[])))
}

#[test]
fn a_stricter_auditor_rejects_what_the_jobs_policy_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), Flaw::None);
    let report = EvalReport::from_canonical_bytes(TINY_REPORT).unwrap();

    // The job's own policy: accepted, each gate's number shown.
    let r = verify(&p, Policy::from_toml_str(JOB_POLICY).unwrap());
    assert_eq!(r.verdict, Verdict::Verified, "{}", r.to_table());
    let q = r.quality.as_ref().unwrap();
    assert_eq!(q.source, MetricSource::EvalReport);
    assert_eq!(q.gates.len(), 2);
    assert!(q.gates.iter().all(|g| g.status == GateStatus::Pass));
    assert_eq!(q.gates[0].value, Some(report.perplexity.perplexity));
    assert!(
        r.to_table().contains(&format!(
            "quality_gate: perplexity <= 40: {} PASS; the job's own policy gated perplexity <= 40",
            report.perplexity.perplexity
        )),
        "{}",
        r.to_table()
    );

    // Perplexity at most 20: rejected, naming the gate, the number and the
    // job's gate.
    let r = verify(&p, auditor(&[("max = 40.0", "max = 20.0")]));
    let reason = rejection(&r);
    assert_eq!(
        reason,
        format!(
            "policy: quality.gate: perplexity = {} from the sealed eval report \
             (outputs/eval-report.json) is above the auditor's gate perplexity <= 20; the job's \
             own policy gated perplexity <= 40",
            report.perplexity.perplexity
        )
    );
    let q = r.quality.as_ref().unwrap();
    assert_eq!(q.gates[0].status, GateStatus::AboveMax);
    assert_eq!(q.gates[1].status, GateStatus::Pass);

    // A K-score floor above the sealed one, and a gate on a metric the job's
    // policy did not gate.
    let r = verify(
        &p,
        auditor(&[(
            "min = 0.05\n",
            "min = 0.9\n[[quality.gates]]\nmetric = \"accuracy\"\nmin = 0.5\n",
        )]),
    );
    let reason = rejection(&r);
    assert!(
        reason.contains(&format!(
            "k_score = {} from the sealed eval report (outputs/eval-report.json) is below the \
             auditor's gate k_score >= 0.9; the job's own policy gated k_score >= 0.05",
            report.k_score
        )),
        "{reason}"
    );
    assert!(
        reason.contains(&format!(
            "accuracy = {} from the sealed eval report (outputs/eval-report.json) is below the \
             auditor's gate accuracy >= 0.5; the job's own policy had no gate on accuracy",
            report.qa.accuracy
        )),
        "{reason}"
    );
    let q = r.quality.as_ref().unwrap();
    assert_eq!(q.gates[2].job_gate, JobGate::NoGate);

    // A metric only the manifest has is no number of the report, which the
    // enclave gated on: missing.
    let r = verify(
        &p,
        auditor(&[("metric = \"k_score\"", "metric = \"base_perplexity\"")]),
    );
    let reason = rejection(&r);
    assert!(
        reason.contains(
            "the auditor's gate base_perplexity >= 0.05 has no sealed number: the sealed eval \
             report (outputs/eval-report.json) has no \"base_perplexity\""
        ),
        "{reason}"
    );
}

#[test]
fn a_manifest_that_disagrees_with_the_report_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), Flaw::ManifestDisagrees);
    let report = EvalReport::from_canonical_bytes(TINY_REPORT).unwrap();
    // Even with no gate at all: the numbers are not one set.
    let no_gates = Policy::from_toml_str(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\nmust_be_zero = false\n",
    )
    .unwrap();
    let r = verify(&p, no_gates);
    let reason = rejection(&r);
    assert_eq!(rejection(&verify(&p, auditor(&[]))), reason);
    assert_eq!(
        reason,
        format!(
            "policy: quality.eval-report: perplexity is {} in the sealed eval report \
             (outputs/eval-report.json) but 12.5 in the manifest's metrics",
            report.perplexity.perplexity
        )
    );
    assert!(r.quality.is_none());
}

#[test]
fn a_sealed_report_that_does_not_read_is_rejected() {
    let reason = rejected_under_the_jobs_gates(Flaw::BadReport);
    assert!(
        reason.starts_with("policy: quality.eval-report: outputs/eval-report.json does not read: "),
        "{reason}"
    );
}

#[test]
fn a_sealed_policy_that_is_not_the_jobs_is_rejected() {
    let reason = rejected_under_the_jobs_gates(Flaw::PolicyNotTheJobs);
    assert_eq!(
        reason,
        format!(
            "policy: quality.job-policy: outputs/job/policy.toml has sha256 {}, but \
             job.policy_sha256 is {}: it is not the policy the job ran under",
            hex::encode(Sha256::digest(JOB_POLICY.as_bytes())),
            hex::encode([2u8; 32])
        )
    );
}

/// An artifact that seals no eval report (the demo job): the manifest's
/// metrics are the numbers, and no copy of the job's policy is sealed.
#[test]
fn without_a_report_the_manifest_metrics_are_judged() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::build_default_v2(dir.path());
    let gate = |max: &str| {
        Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"none\"]\n[egress]\n\
             must_be_zero = false\n[[quality.gates]]\nmetric = \"eval_loss\"\nmax = {max}\n"
        ))
        .unwrap()
    };
    let r = verify(&p, gate("3.0"));
    assert_eq!(r.verdict, Verdict::Verified, "{}", r.to_table());
    let q = r.quality.as_ref().unwrap();
    assert_eq!(q.source, MetricSource::Manifest);
    assert_eq!(q.gates[0].job_gate, JobGate::PolicyNotSealed);
    let reason = rejection(&verify(&p, gate("2.0")));
    assert_eq!(
        reason,
        "policy: quality.gate: eval_loss = 2.5 from the manifest's metrics is above the \
         auditor's gate eval_loss <= 2; the artifact seals no copy of the job's policy"
    );
}
