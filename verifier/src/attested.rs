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

use kolm_policy::{Pinning, Platform, Policy};
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
    /// The kolm simulated TEE's Nitro-format evidence, checked against a
    /// caller-given sim root ([`crate::sim`]): not a TEE.
    Simulated,
}

impl EvidenceKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Nitro => "nitro",
            EvidenceKind::SevSnp => "sev-snp",
            EvidenceKind::Tdx => "tdx",
            EvidenceKind::Azure => "azure",
            EvidenceKind::Simulated => "simulated",
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
    /// The kolm simulated TEE's PCR0: the SHA-384 of the `kolm-enclave`
    /// binary that produced it, a stand-in and no enclave image
    /// measurement (and signed by a software root).
    SimPcr0([u8; 48]),
    /// The kolm simulated TEE's MRTD (TDX form): the same stand-in, the
    /// SHA-384 of the `kolm-enclave` binary.
    SimMrtd([u8; 48]),
}

impl Measurement {
    pub fn as_bytes(&self) -> &[u8; 48] {
        match self {
            Measurement::NitroPcr0(m)
            | Measurement::Snp(m)
            | Measurement::TdxMrtd(m)
            | Measurement::SimPcr0(m)
            | Measurement::SimMrtd(m) => m,
        }
    }
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Measurement::NitroPcr0(_) => "PCR0",
            Measurement::Snp(_) => "MEASUREMENT",
            Measurement::TdxMrtd(_) => "MRTD",
            Measurement::SimPcr0(_) => "simulated PCR0",
            Measurement::SimMrtd(_) => "simulated MRTD",
        };
        write!(f, "{name} {}", hex::encode(self.as_bytes()))
    }
}

/// The values that identify the launched guest, as the evidence carries
/// them. Which of them the policy compared is [`Pinning`]; the chain check
/// compares two of them with [`Identity::same_guest`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Identity {
    /// Every PCR of the Nitro document.
    Nitro { pcrs: BTreeMap<u8, Vec<u8>> },
    /// The SEV-SNP report's identity fields.
    Snp {
        measurement: [u8; 48],
        host_data: [u8; 32],
        id_key_digest: [u8; 48],
        author_key_digest: [u8; 48],
    },
    /// The TDX TD report's identity fields.
    Tdx(Box<TdxIdentity>),
    /// An Azure CVM: the hardware report's identity (the paravisor's) and
    /// the vTPM PCRs the TPM quote covers (index to SHA-256 value); PCRs
    /// reported but not quoted are left out.
    Azure {
        hardware: Box<Identity>,
        pcrs: BTreeMap<u8, [u8; 32]>,
    },
    /// Every PCR of a kolm simulated TEE document (compared as Nitro's).
    Simulated { pcrs: BTreeMap<u8, Vec<u8>> },
    /// The TD report fields of a kolm simulated TEE quote, TDX form
    /// (compared as a TD's).
    SimulatedTdx(Box<TdxIdentity>),
}

/// The TDX TD report's identity fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdxIdentity {
    pub mrtd: [u8; 48],
    pub rtmr: [[u8; 48]; 4],
    pub mrconfigid: [u8; 48],
    pub mrowner: [u8; 48],
    pub mrownerconfig: [u8; 48],
}

/// Nitro PCRs that stay fixed for an enclave's life: image, kernel,
/// application, parent IAM role, parent instance, signing certificate
/// (PCR16..31 may be extended at run time).
const NITRO_STABLE_PCRS: [u8; 6] = [0, 1, 2, 3, 4, 8];

/// vTPM PCRs fixed once the guest booted: firmware, boot loader, kernel,
/// initrd, command line, UKI, shim (PCR10 is IMA's, PCR15..23 change at run
/// time).
const AZURE_STABLE_PCRS: [u8; 14] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14];

/// Why two [`Identity`]s are not the same launched guest
/// ([`Identity::same_guest`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GuestMismatch {
    /// A field that cannot change while the guest runs differs.
    #[error("{field} differs")]
    FieldDiffers {
        /// The field (`MEASUREMENT`, `RTMR1`, `vTPM PCR4 (or whether it is
        /// quoted)`, ...).
        field: String,
    },
    /// One is evidence of another kind (platform) than the other.
    #[error("the evidence types differ")]
    EvidenceTypes,
}

impl Identity {
    /// Whether `self` and `other` describe the same launched guest (for the
    /// receipt chain: one enclave signs every link). Compares every field
    /// that cannot change while the guest runs: Nitro PCR0..4 and PCR8; SNP
    /// MEASUREMENT, HOST_DATA, ID_KEY_DIGEST, AUTHOR_KEY_DIGEST; TDX MRTD,
    /// RTMR0..2, MRCONFIGID, MROWNER, MROWNERCONFIG (RTMR3 is extended at
    /// run time); Azure the hardware identity and vTPM PCR0..9 and 11..14.
    /// `Err` names the first field that differs.
    pub fn same_guest(&self, other: &Identity) -> Result<(), GuestMismatch> {
        let differ = |field: String| Err(GuestMismatch::FieldDiffers { field });
        match (self, other) {
            (Identity::Nitro { pcrs: a }, Identity::Nitro { pcrs: b })
            | (Identity::Simulated { pcrs: a }, Identity::Simulated { pcrs: b }) => {
                for i in NITRO_STABLE_PCRS {
                    if a.get(&i) != b.get(&i) {
                        return differ(format!("PCR{i}"));
                    }
                }
                Ok(())
            }
            (
                Identity::Snp {
                    measurement: m1,
                    host_data: h1,
                    id_key_digest: i1,
                    author_key_digest: a1,
                },
                Identity::Snp {
                    measurement: m2,
                    host_data: h2,
                    id_key_digest: i2,
                    author_key_digest: a2,
                },
            ) => {
                if m1 != m2 {
                    differ("MEASUREMENT".into())
                } else if h1 != h2 {
                    differ("HOST_DATA".into())
                } else if i1 != i2 {
                    differ("ID_KEY_DIGEST".into())
                } else if a1 != a2 {
                    differ("AUTHOR_KEY_DIGEST".into())
                } else {
                    Ok(())
                }
            }
            (Identity::Tdx(a), Identity::Tdx(b))
            | (Identity::SimulatedTdx(a), Identity::SimulatedTdx(b)) => {
                let (t1, r1, c1, o1, oc1) = (
                    &a.mrtd,
                    &a.rtmr,
                    &a.mrconfigid,
                    &a.mrowner,
                    &a.mrownerconfig,
                );
                let (t2, r2, c2, o2, oc2) = (
                    &b.mrtd,
                    &b.rtmr,
                    &b.mrconfigid,
                    &b.mrowner,
                    &b.mrownerconfig,
                );
                if t1 != t2 {
                    return differ("MRTD".into());
                }
                for (i, (x, y)) in r1.iter().zip(r2).take(3).enumerate() {
                    if x != y {
                        return differ(format!("RTMR{i}"));
                    }
                }
                if c1 != c2 {
                    differ("MRCONFIGID".into())
                } else if o1 != o2 {
                    differ("MROWNER".into())
                } else if oc1 != oc2 {
                    differ("MROWNERCONFIG".into())
                } else {
                    Ok(())
                }
            }
            (
                Identity::Azure {
                    hardware: h1,
                    pcrs: p1,
                },
                Identity::Azure {
                    hardware: h2,
                    pcrs: p2,
                },
            ) => {
                h1.same_guest(h2)?;
                for i in AZURE_STABLE_PCRS {
                    if p1.get(&i) != p2.get(&i) {
                        return differ(format!("vTPM PCR{i} (or whether it is quoted)"));
                    }
                }
                Ok(())
            }
            _ => Err(GuestMismatch::EvidenceTypes),
        }
    }

    /// The SEV-SNP MEASUREMENT of bare SEV-SNP evidence (what
    /// [`Policy::pinning`] needs to tell a guest image from a firmware).
    fn snp_measurement(&self) -> Option<&[u8; 48]> {
        match self {
            Identity::Snp { measurement, .. } => Some(measurement),
            _ => None,
        }
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
    /// The kolm simulated TEE: no TCB at all.
    Simulated,
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
    /// The guest's identity fields.
    pub identity: Identity,
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
    /// evidence yielded its claims. An accepted result carries whether
    /// `policy` (the one the checks ran with) pins its identity.
    pub fn conclude(self, policy: &Policy) -> Result<Attested, Rejection> {
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
                pinning: policy.pinning(claims.platform, claims.identity.snp_measurement()),
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

/// Evidence that passed every check. Genuine evidence of *some* guest: it
/// is evidence of *ours* only when [`Attested::pinning`] says the policy
/// pinned the guest's identity (see [`EvidenceVerdict`]).
#[derive(Debug, Clone)]
pub struct Attested {
    pub kind: EvidenceKind,
    pub verified_at: OffsetDateTime,
    /// Platform, measurement, report data, TCB, debug, identity.
    pub claims: Claims,
    /// Whether the policy's allow-lists identify the guest.
    pub pinning: Pinning,
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

    pub fn identity(&self) -> &Identity {
        &self.claims.identity
    }

    pub fn is_pinned(&self) -> bool {
        self.pinning.is_pinned()
    }
}

/// The verdict on one piece of raw evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvidenceVerdict {
    /// Every check passed and the policy pins the guest's identity (or
    /// `--dangerous-any-measurement` accepted it unpinned).
    Accept,
    /// Every check passed, but the policy pins no identity: any workload in
    /// a genuine TEE could have produced it.
    Unpinned,
    /// Every check passed on kolm simulated TEE evidence under the sim
    /// root the caller trusts: software evidence, NOT a TEE.
    Simulated,
    /// A check failed.
    Reject,
}

impl EvidenceVerdict {
    /// The JSON name (`kolm.attestation-report.v1` `verdict`).
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceVerdict::Accept => "accept",
            EvidenceVerdict::Unpinned => "unpinned",
            EvidenceVerdict::Simulated => "simulated",
            EvidenceVerdict::Reject => "reject",
        }
    }

    /// Process exit code: 0 accept, 1 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            EvidenceVerdict::Accept => 0,
            EvidenceVerdict::Unpinned | EvidenceVerdict::Simulated | EvidenceVerdict::Reject => 1,
        }
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

/// Why simulated evidence that passed every check is still not a TEE's.
pub const SIMULATED_REASON: &str = "SIMULATED TEE, NOT A TEE: the evidence passed every check \
    against the kolm sim root given with --dangerous-trust-sim-root, a software root on the \
    machine that made it; it proves nothing about hardware or where the job ran";

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
            EvidenceKind::Nitro | EvidenceKind::Simulated => t
                .format(&time::format_description::well_known::Rfc3339)
                .ok(),
            _ => kolm_format::timefmt::format_utc_seconds(t).ok(),
        };
        text.unwrap_or_else(|| t.to_string())
    }

    /// Whether every check passed (pinned or not: see [`Outcome::verdict`]).
    pub fn accepted(self) -> bool {
        matches!(self, Outcome::Accepted(_))
    }

    /// The verdict: evidence that passed every check but whose identity
    /// the policy does not pin is [`EvidenceVerdict::Unpinned`], unless
    /// `dangerous_any_measurement`.
    pub fn verdict(self, dangerous_any_measurement: bool) -> EvidenceVerdict {
        match self {
            Outcome::Rejected(_) => EvidenceVerdict::Reject,
            // Simulated evidence is never accepted as a TEE's, whatever
            // the measurement switch says.
            Outcome::Accepted(a) if a.platform() == Platform::Simulated => {
                EvidenceVerdict::Simulated
            }
            Outcome::Accepted(a) if a.is_pinned() || dangerous_any_measurement => {
                EvidenceVerdict::Accept
            }
            Outcome::Accepted(_) => EvidenceVerdict::Unpinned,
        }
    }

    /// Why the verdict is what it is: the first failing check, the
    /// unpinned identity, or a dangerous acceptance; `None` for an accepted,
    /// pinned result.
    pub fn verdict_reason(self, dangerous_any_measurement: bool) -> Option<String> {
        match self {
            Outcome::Rejected(r) => Some(r.reason.clone()),
            Outcome::Accepted(a) if a.platform() == Platform::Simulated => {
                Some(SIMULATED_REASON.to_string())
            }
            Outcome::Accepted(a) => match &a.pinning {
                Pinning::Pinned { .. } => None,
                unpinned if dangerous_any_measurement => Some(format!(
                    "accepted WITHOUT a pinned measurement (--dangerous-any-measurement): {unpinned}"
                )),
                unpinned => Some(unpinned.to_string()),
            },
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn snp(m: u8, h: u8) -> Identity {
        Identity::Snp {
            measurement: [m; 48],
            host_data: [h; 32],
            id_key_digest: [0; 48],
            author_key_digest: [0; 48],
        }
    }

    /// The chain check: one guest signs every link; a link from a guest
    /// with the same MEASUREMENT but other HOST_DATA (another launch of
    /// the same image) is another guest.
    #[test]
    fn same_guest_compares_every_stable_identity_field() {
        assert_eq!(snp(1, 2).same_guest(&snp(1, 2)), Ok(()));
        assert_eq!(
            snp(1, 2).same_guest(&snp(1, 3)).map_err(|e| e.to_string()),
            Err("HOST_DATA differs".to_string())
        );
        let tdx = |rtmr3: u8, owner: u8| {
            Identity::Tdx(Box::new(TdxIdentity {
                mrtd: [1; 48],
                rtmr: [[2; 48], [3; 48], [4; 48], [rtmr3; 48]],
                mrconfigid: [0; 48],
                mrowner: [owner; 48],
                mrownerconfig: [0; 48],
            }))
        };
        // RTMR3 is extended at run time: not compared.
        assert_eq!(tdx(5, 0).same_guest(&tdx(6, 0)), Ok(()));
        assert_eq!(
            tdx(5, 0).same_guest(&tdx(5, 1)).map_err(|e| e.to_string()),
            Err("MROWNER differs".to_string())
        );
        let nitro = |pcr4: u8, pcr16: u8| Identity::Nitro {
            pcrs: [(0, vec![1; 48]), (4, vec![pcr4; 48]), (16, vec![pcr16; 48])].into(),
        };
        assert_eq!(nitro(1, 1).same_guest(&nitro(1, 2)), Ok(()));
        assert!(nitro(1, 1).same_guest(&nitro(2, 1)).is_err());
        let azure = |pcr9: u8, pcr10: u8| Identity::Azure {
            hardware: Box::new(snp(1, 0)),
            pcrs: [(4, [4; 32]), (9, [pcr9; 32]), (10, [pcr10; 32])].into(),
        };
        assert_eq!(azure(9, 1).same_guest(&azure(9, 2)), Ok(()));
        assert!(azure(9, 1).same_guest(&azure(8, 1)).is_err());
        assert!(snp(1, 2).same_guest(&tdx(0, 0)).is_err());
    }
}
