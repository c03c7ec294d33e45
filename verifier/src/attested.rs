//! The shape every TEE verifier has:
//!
//! ```text
//! verify(evidence, &Expectations, at) -> Result<Attested, Rejection>
//! ```
//!
//! [`Expectations`] is one type for all platforms; [`Attested`] carries the
//! typed values a caller decides on (platform, launch measurement, report
//! data, TCB, debug); [`Rejection`] names the first failing check. Both keep
//! the full [`Checklist`] and the extracted [`Fields`] for display.

use std::collections::BTreeMap;
use std::fmt;

use kolm_policy::{Platform, Policy};
use serde::Serialize;
use time::OffsetDateTime;

use crate::check::{Check, CheckStatus, Checklist};

/// What the caller expects the evidence to say, for every platform.
#[derive(Debug, Clone)]
pub struct Expectations<'a> {
    /// The policy the evidence is judged against.
    pub policy: &'a Policy,
    /// The report data the evidence must carry (kolm: the 64-byte binding
    /// of the manifest CID): Nitro `user_data`, SNP `REPORT_DATA`, TDX
    /// `REPORTDATA`, Azure runtime-data `user-data`.
    pub report_data: Option<Vec<u8>>,
    /// The verifier's challenge: Nitro `nonce`, Azure TPM quote
    /// `extraData`. Platforms without a nonce field reject evidence when
    /// one is expected (fail closed).
    pub nonce: Option<Vec<u8>>,
    /// Nitro `public_key`. Other platforms reject evidence when one is
    /// expected.
    pub public_key: Option<Vec<u8>>,
}

impl<'a> Expectations<'a> {
    /// Nothing expected but the policy.
    pub fn new(policy: &'a Policy) -> Expectations<'a> {
        Expectations {
            policy,
            report_data: None,
            nonce: None,
            public_key: None,
        }
    }

    /// The same, also expecting `report_data`.
    pub fn with_report_data(mut self, report_data: impl Into<Vec<u8>>) -> Expectations<'a> {
        self.report_data = Some(report_data.into());
        self
    }
}

/// Which verifier looked at the evidence (the `platform` of the JSON
/// document for raw evidence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EvidenceKind {
    Nitro,
    SevSnp,
    Tdx,
    Azure,
}

impl EvidenceKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Nitro => "nitro",
            EvidenceKind::SevSnp => "sev-snp",
            EvidenceKind::Tdx => "tdx",
            EvidenceKind::Azure => "azure",
        }
    }
}

impl fmt::Display for EvidenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EvidenceKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The launch measurement the hardware signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Measurement {
    /// Nitro PCR0 (the enclave image file).
    NitroPcr0([u8; 48]),
    /// SEV-SNP `MEASUREMENT` (on Azure: the paravisor's).
    Snp([u8; 48]),
    /// TDX `MRTD` (on Azure: the paravisor's).
    TdxMrtd([u8; 48]),
}

impl Measurement {
    pub fn as_bytes(&self) -> &[u8; 48] {
        match self {
            Measurement::NitroPcr0(m) | Measurement::Snp(m) | Measurement::TdxMrtd(m) => m,
        }
    }
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Measurement::NitroPcr0(_) => "PCR0",
            Measurement::Snp(_) => "MEASUREMENT",
            Measurement::TdxMrtd(_) => "MRTD",
        };
        write!(f, "{name} {}", hex::encode(self.as_bytes()))
    }
}

/// The trusted computing base level the evidence was appraised at.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tcb {
    /// Nitro has no TCB level: the chain and the PCRs are the whole story.
    Nitro,
    /// SEV-SNP `REPORTED_TCB` (raw 64-bit TCB_VERSION).
    Snp { reported: u64 },
    /// TDX: the DCAP TCB status and its advisory ids.
    Tdx {
        status: String,
        advisories: Vec<String>,
    },
}

/// Values extracted from the evidence for display, named as in the samples'
/// `expected.json`. Nothing decides on them: decisions use the typed fields
/// of [`Attested`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Fields(BTreeMap<String, serde_json::Value>);

impl Fields {
    pub fn insert(&mut self, name: &str, value: impl Into<serde_json::Value>) {
        self.0.insert(name.to_string(), value.into());
    }

    /// Inserts unless `name` is already there (a nested layer's fields do not
    /// overwrite the outer layer's).
    pub fn insert_absent(&mut self, name: String, value: serde_json::Value) {
        self.0.entry(name).or_insert(value);
    }

    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &serde_json::Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Appends another layer's fields without overwriting.
    pub fn merge(&mut self, other: Fields) {
        for (k, v) in other.0 {
            self.insert_absent(k, v);
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The typed claims a verifier extracted from evidence that parsed. Whether
/// they can be believed is what the checks say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The platform the evidence proves (Azure: `azure-sev-snp` or
    /// `azure-tdx`).
    pub platform: Platform,
    pub measurement: Measurement,
    /// The report data as the evidence carries it (Nitro `user_data`, which
    /// may be absent: empty).
    pub report_data: Vec<u8>,
    pub tcb: Tcb,
    /// A debug enclave/VM (its memory is readable by the host).
    pub debug: bool,
}

/// What a verifier found, before the verdict: the checks, the display
/// fields, and the claims when the evidence parsed.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub kind: EvidenceKind,
    pub verified_at: OffsetDateTime,
    pub checks: Checklist,
    pub fields: Fields,
    pub claims: Option<Claims>,
}

impl Evaluation {
    pub fn new(kind: EvidenceKind, verified_at: OffsetDateTime) -> Evaluation {
        Evaluation {
            kind,
            verified_at,
            checks: Checklist::new(),
            fields: Fields::default(),
            claims: None,
        }
    }

    /// Accepts only when no check failed, at least one passed, and the
    /// evidence yielded its claims.
    pub fn conclude(self) -> Result<Attested, Rejection> {
        let reason = match (self.checks.first_failure(), &self.claims) {
            (Some(f), _) => Some(format!("{}: {}", f.id, f.detail)),
            (None, _) if !self.checks.any_passed() => Some("no check ran".to_string()),
            (None, None) => Some("the evidence yielded no claims".to_string()),
            (None, Some(_)) => None,
        };
        match (reason, self.claims) {
            (None, Some(claims)) => Ok(Attested {
                kind: self.kind,
                verified_at: self.verified_at,
                claims,
                checks: self.checks,
                fields: self.fields,
            }),
            (reason, _) => Err(Rejection {
                kind: self.kind,
                verified_at: self.verified_at,
                reason: reason.unwrap_or_default(),
                checks: self.checks,
                fields: self.fields,
            }),
        }
    }
}

/// Evidence that passed every check.
#[derive(Debug, Clone)]
pub struct Attested {
    pub kind: EvidenceKind,
    pub verified_at: OffsetDateTime,
    /// Platform, measurement, report data, TCB, debug.
    pub claims: Claims,
    pub checks: Checklist,
    pub fields: Fields,
}

impl Attested {
    pub fn platform(&self) -> Platform {
        self.claims.platform
    }

    pub fn measurement(&self) -> &Measurement {
        &self.claims.measurement
    }
}

/// Evidence that failed a check (or yielded nothing to check).
#[derive(Debug, Clone)]
pub struct Rejection {
    pub kind: EvidenceKind,
    pub verified_at: OffsetDateTime,
    /// `"<check id>: <detail>"` of the first failing check, or why nothing
    /// could be accepted.
    pub reason: String,
    pub checks: Checklist,
    pub fields: Fields,
}

impl Rejection {
    /// The first failing check, when one failed.
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.first_failure()
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} evidence rejected: {}", self.kind, self.reason)
    }
}

impl std::error::Error for Rejection {}

/// The outcome of one verification, accepted or not, for callers that show
/// both alike (tables, JSON).
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    Accepted(&'a Attested),
    Rejected(&'a Rejection),
}

impl<'a> Outcome<'a> {
    pub fn of(r: &'a Result<Attested, Rejection>) -> Outcome<'a> {
        match r {
            Ok(a) => Outcome::Accepted(a),
            Err(j) => Outcome::Rejected(j),
        }
    }

    pub fn kind(self) -> EvidenceKind {
        match self {
            Outcome::Accepted(a) => a.kind,
            Outcome::Rejected(r) => r.kind,
        }
    }

    pub fn verified_at(self) -> OffsetDateTime {
        match self {
            Outcome::Accepted(a) => a.verified_at,
            Outcome::Rejected(r) => r.verified_at,
        }
    }

    pub fn checks(self) -> &'a Checklist {
        match self {
            Outcome::Accepted(a) => &a.checks,
            Outcome::Rejected(r) => &r.checks,
        }
    }

    pub fn fields(self) -> &'a Fields {
        match self {
            Outcome::Accepted(a) => &a.fields,
            Outcome::Rejected(r) => &r.fields,
        }
    }

    /// The verification instant as reports spell it: RFC 3339 UTC, whole
    /// seconds, except for Nitro, whose documents carry millisecond
    /// timestamps and are judged at them, so the fraction is kept.
    pub fn verified_at_text(self) -> String {
        let t = self.verified_at().to_offset(time::UtcOffset::UTC);
        let text = match self.kind() {
            EvidenceKind::Nitro => t
                .format(&time::format_description::well_known::Rfc3339)
                .map_err(|e| e.to_string()),
            _ => kolm_format::timefmt::format_utc_seconds(t),
        };
        text.unwrap_or_else(|_| t.to_string())
    }

    pub fn accepted(self) -> bool {
        matches!(self, Outcome::Accepted(_))
    }

    pub fn reason(self) -> Option<&'a str> {
        match self {
            Outcome::Accepted(_) => None,
            Outcome::Rejected(r) => Some(r.reason.as_str()),
        }
    }

    /// The status of check `id`.
    pub fn status_of(self, id: impl Into<crate::check::CheckId>) -> Option<CheckStatus> {
        self.checks().status_of(id)
    }
}
