//! Shared helpers of the SEV-SNP tests: locating the shared samples, the
//! cases of `sev-snp/expected.json`, and looking checks up in a report.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};

use kolm_policy::{Policy, SnpPolicy};
use kolm_verifier::attestation::{AttestationReport, AttestationVerdict};
use kolm_verifier::report::CheckStatus;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The shared samples (`KOLM_SAMPLES_DIR`, else `../../shared/attestation-samples`
/// beside the checkout), or `None` after printing `SKIP` when absent.
pub fn samples_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KOLM_SAMPLES_DIR").map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/attestation-samples"
            ))
        },
        PathBuf::from,
    );
    if dir.join("sev-snp/expected.json").is_file() {
        Some(dir)
    } else {
        {
            // Straight to the stderr handle: libtest does not capture it, so
            // the reason shows in every run, not only in failing ones.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: attestation samples not found at {}",
                dir.display()
            );
        };
        None
    }
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
    pub fn report_bytes(&self, root: &Path) -> Vec<u8> {
        std::fs::read(
            root.join("sev-snp")
                .join(&self.dir)
                .join(self.report.as_ref().unwrap()),
        )
        .unwrap()
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

pub fn status(r: &AttestationReport, id: &str) -> CheckStatus {
    let found: Vec<_> = r.checks.iter().filter(|c| c.id == id).collect();
    assert_eq!(
        found.len(),
        1,
        "check {id} recorded {} times:\n{}",
        found.len(),
        r.to_table()
    );
    found[0].status
}

pub fn detail<'a>(r: &'a AttestationReport, id: &str) -> &'a str {
    &r.checks.iter().find(|c| c.id == id).unwrap().detail
}

pub fn first_failure(r: &AttestationReport) -> Option<&str> {
    r.first_failure().map(|c| c.id.as_str())
}

pub fn assert_accept(r: &AttestationReport, what: &str) {
    assert_eq!(
        r.verdict,
        AttestationVerdict::Accept,
        "{what}: expected accept\n{}",
        r.to_table()
    );
    assert!(r.reason.is_none());
    assert!(r.checks.iter().all(|c| c.status != CheckStatus::Fail));
}

pub fn assert_reject(r: &AttestationReport, first: &str, what: &str) {
    assert_eq!(
        r.verdict,
        AttestationVerdict::Reject,
        "{what}: expected reject by {first}\n{}",
        r.to_table()
    );
    assert_eq!(first_failure(r), Some(first), "{what}\n{}", r.to_table());
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with(&format!("{first}: ")),
        "{what}: reason {reason}"
    );
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
