//! Shared helpers of the SEV-SNP tests: the cases of the shared samples'
//! `sev-snp/expected.json`, running the verifier, and looking checks up in
//! its outcome.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::path::{Path, PathBuf};

use kolm_policy::{Policy, SnpPolicy};
use kolm_verifier::attested::{Attested, Expectations, Outcome, Rejection};
use kolm_verifier::check::{CheckId, CheckStatus, SnpCheck};
use kolm_verifier::snp::{self, SnpEvidence};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// What `snp::verify` returns.
pub type Verdict = Result<Attested, Rejection>;

/// The shared samples, or `None` (after `SKIP`) when they are absent.
pub fn samples_dir() -> Option<PathBuf> {
    kolm_testkit::samples("sev-snp/expected.json")
}

/// The project's own SNP fixtures (`attestation-samples/snp/`).
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../attestation-samples/snp"
    ))
}

pub fn at(s: &str) -> OffsetDateTime {
    OffsetDateTime::parse(s, &Rfc3339).unwrap()
}

/// One case of `sev-snp/expected.json`, with the leaf and chain of an
/// earlier case of the same directory filled in where it names none.
#[derive(Debug, Clone)]
pub struct Case {
    pub dir: String,
    pub report: Option<String>,
    pub leaf: String,
    pub chain: String,
    pub verify_at: String,
    pub expected: String,
    pub json: Value,
}

impl Case {
    pub fn name(&self) -> String {
        format!(
            "{}/{} @ {}",
            self.dir,
            self.report.as_deref().unwrap_or("(chain only)"),
            self.verify_at
        )
    }
    /// The report file as stored (raw bytes or hex text).
    pub fn report_file(&self, root: &Path) -> Vec<u8> {
        std::fs::read(
            root.join("sev-snp")
                .join(&self.dir)
                .join(self.report.as_ref().unwrap()),
        )
        .unwrap()
    }
    /// The report in its binary form (hex text decoded as the CLI does).
    pub fn report_bytes(&self, root: &Path) -> Vec<u8> {
        snp::decode_report_forms(&self.report_file(root))
            .unwrap()
            .into_owned()
    }
    pub fn leaf_bytes(&self, root: &Path) -> Vec<u8> {
        std::fs::read(root.join("sev-snp").join(&self.dir).join(&self.leaf)).unwrap()
    }
    pub fn chain_bytes(&self, root: &Path) -> Vec<u8> {
        std::fs::read(root.join("sev-snp").join(&self.dir).join(&self.chain)).unwrap()
    }
    pub fn at(&self) -> OffsetDateTime {
        at(&self.verify_at)
    }
    pub fn accepts(&self) -> bool {
        self.expected.starts_with("accept")
    }
    pub fn fields(&self) -> serde_json::Map<String, Value> {
        self.json
            .get("fields")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }
}

pub fn cases(root: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(root.join("sev-snp/expected.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["platform"], "sev-snp");
    let mut out: Vec<Case> = Vec::new();
    for c in doc["cases"].as_array().unwrap() {
        let dir = c["dir"].as_str().unwrap().to_string();
        let report = c.get("report").and_then(Value::as_str).map(str::to_string);
        let earlier = out.iter().find(|e| e.dir == dir).cloned();
        let pick = |key: &str, from: fn(&Case) -> &String| -> String {
            c.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| earlier.as_ref().map(|e| from(e).clone()))
                .unwrap_or_else(|| panic!("case {dir}: no {key}"))
        };
        let leaf = pick("leaf", |e| &e.leaf);
        let chain = pick("chain", |e| &e.chain);
        out.push(Case {
            dir: dir.clone(),
            report,
            leaf,
            chain,
            verify_at: c["verify_at"].as_str().unwrap().to_string(),
            expected: c["expected"].as_str().unwrap().to_string(),
            json: c.clone(),
        });
    }
    out
}

/// The accepted case of `dir` whose report file is `report`.
pub fn case(root: &Path, dir: &str, report: &str) -> Case {
    cases(root)
        .into_iter()
        .find(|c| c.dir == dir && c.report.as_deref() == Some(report) && c.accepts())
        .unwrap()
}

/// A policy that accepts what the genuine samples show (debug guests,
/// VMPL up to 3), so their expected "accept" is tested on the evidence
/// alone; production-policy outcomes are asserted separately.
pub fn permissive() -> Policy {
    Policy {
        allow_debug: true,
        sev_snp: SnpPolicy {
            max_vmpl: 3,
            ..SnpPolicy::default()
        },
        ..Policy::production()
    }
}

/// `snp::verify` with only a policy and, optionally, REPORT_DATA expected.
pub fn run(
    report: &[u8],
    vcek: &[u8],
    chain: Option<&[u8]>,
    at: OffsetDateTime,
    policy: &Policy,
    report_data: Option<&[u8]>,
) -> Verdict {
    let mut expect = Expectations::new(policy);
    expect.report_data = report_data.map(<[u8]>::to_vec);
    snp::verify(
        &SnpEvidence {
            report,
            vcek,
            chain,
        },
        &expect,
        at,
    )
}

/// The status of `id`, which must be recorded exactly once.
pub fn status(r: &Verdict, id: SnpCheck) -> CheckStatus {
    let found: Vec<_> = Outcome::of(r)
        .checks()
        .iter()
        .filter(|c| c.id == CheckId::from(id))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "check {id} recorded {} times:\n{}",
        found.len(),
        table(r)
    );
    found[0].status
}

pub fn detail(r: &Verdict, id: SnpCheck) -> &str {
    &Outcome::of(r).checks().get(id).unwrap().detail
}

/// The first failing check.
pub fn first_failure(r: &Verdict) -> Option<SnpCheck> {
    Outcome::of(r).checks().first_failure().map(|c| match c.id {
        CheckId::SnpCheck(id) => id,
        other => panic!("not an SEV-SNP check: {other}"),
    })
}

/// A display field, which must be there.
pub fn field<'a>(r: &'a Verdict, name: &str) -> &'a Value {
    Outcome::of(r)
        .fields()
        .get(name)
        .unwrap_or_else(|| panic!("no field {name}:\n{}", table(r)))
}

/// The rejection reason.
pub fn reason(r: &Verdict) -> &str {
    Outcome::of(r).reason().expect("rejected")
}

/// The checks and the verdict, for assertion messages.
pub fn table(r: &Verdict) -> String {
    let o = Outcome::of(r);
    let mut out = String::new();
    for c in o.checks() {
        out.push_str(&format!("  [{:?}] {}  {}\n", c.status, c.id, c.detail));
    }
    out.push_str(&format!("verdict: {}\n", o.reason().unwrap_or("accepted")));
    out
}

pub fn assert_accept(r: &Verdict, what: &str) {
    assert!(r.is_ok(), "{what}: expected accept\n{}", table(r));
    assert!(
        Outcome::of(r)
            .checks()
            .iter()
            .all(|c| c.status != CheckStatus::Fail)
    );
}

pub fn assert_reject(r: &Verdict, first: SnpCheck, what: &str) {
    assert!(
        r.is_err(),
        "{what}: expected reject by {first}\n{}",
        table(r)
    );
    assert_eq!(first_failure(r), Some(first), "{what}\n{}", table(r));
    let reason = reason(r);
    assert!(
        reason.starts_with(&format!("{first}: ")),
        "{what}: reason {reason}"
    );
}

/// The verdict a table row expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Accept,
    /// Rejected, this check failing first.
    Reject(SnpCheck),
}

pub fn assert_outcome(r: &Verdict, want: Expect, what: &str) {
    match want {
        Expect::Accept => assert_accept(r, what),
        Expect::Reject(id) => assert_reject(r, id, what),
    }
}

/// PEM-encodes one DER certificate.
pub fn pem(der: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out.into_bytes()
}
