//! `hello`, enclave to host, first on every connection: the versions it
//! speaks, its platform, frame limit, measurement, identity key and the
//! evidence over that key. Its codec and its rules.

use std::collections::BTreeSet;

use kolm_policy::Platform;

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError, MAX_NAME, fixed, invalid};
use super::files::{FileEntry, encode_files, read_files};
use super::message::MIN_MAX_FRAME;
use super::rules::{Invalid, Rule, check_slot_file, max_len};

/// Most versions a hello may list.
pub const MAX_VERSIONS: usize = 16;
/// Longest launch measurement (SNP, TDX and Nitro use 48 bytes).
pub const MAX_MEASUREMENT: usize = 64;
/// An Ed25519 public key.
pub const IDENTITY_KEY_LEN: usize = 32;
/// Most bytes of identity evidence a hello carries (all files together):
/// a hello must fit the smallest frame limit, [`MIN_MAX_FRAME`]. Real
/// attestations are 1.2 KiB (SNP) to 5 KiB (Nitro, TDX); with collateral
/// that does not fit, the enclave sends the attestation alone and the host
/// completes it from its own bundle.
pub const MAX_HELLO_EVIDENCE: usize = 60 * 1024;
/// Most evidence files a hello carries.
pub const MAX_HELLO_EVIDENCE_FILES: usize = 8;

/// The enclave introduces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol versions the enclave speaks: 1 to [`MAX_VERSIONS`]
    /// numbers, each at least 1, strictly ascending.
    pub versions: Vec<u32>,
    /// The TEE platform the enclave runs on.
    pub platform: Platform,
    /// The largest frame payload the enclave accepts (at least
    /// [`MIN_MAX_FRAME`]).
    pub max_frame: u32,
    /// The launch measurement (empty on platform `none`), at most
    /// [`MAX_MEASUREMENT`] bytes.
    pub measurement: Vec<u8>,
    /// The enclave's attested Ed25519 identity public key.
    pub identity_key: [u8; IDENTITY_KEY_LEN],
    /// The platform's evidence over the identity key: report data
    /// [`kolm_format::binding::identity_report_data`]`(identity_key)`, in the
    /// files and binary forms of the receipt-v2 evidence slots of
    /// `platform` (exactly one attestation, optionally collateral). Empty
    /// on platform `none`, which proves nothing.
    pub evidence: Vec<HelloEvidence>,
}

/// One file of a hello's identity evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloEvidence {
    /// Its content.
    pub data: Vec<u8>,
    /// Its receipt-v2 evidence slot path (`evidence/nitro.cose`, ...).
    pub path: String,
}

impl Hello {
    /// The highest version both this hello and `ours` list.
    pub fn common_version(&self, ours: &[u32]) -> Option<u32> {
        self.versions
            .iter()
            .rev()
            .find(|v| ours.contains(v))
            .copied()
    }
}

impl FileEntry for HelloEvidence {
    const NAMES: [&'static str; 3] = [
        "hello.evidence",
        "hello.evidence.data",
        "hello.evidence.path",
    ];
    const MAX_FILES: usize = MAX_HELLO_EVIDENCE_FILES;
    const MAX_DATA: usize = MAX_HELLO_EVIDENCE;

    fn new(data: Vec<u8>, path: String) -> Self {
        HelloEvidence { data, path }
    }

    fn data(&self) -> &[u8] {
        &self.data
    }

    fn path(&self) -> &str {
        &self.path
    }
}

impl Codec for Hello {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("evidence");
        encode_files(e, &self.evidence);
        e.key("platform");
        e.text(self.platform.as_str());
        e.key("versions");
        e.array(self.versions.len());
        for v in &self.versions {
            e.uint((*v).into());
        }
        e.key("max_frame");
        e.uint(self.max_frame.into());
        e.key("measurement");
        e.bytes(&self.measurement);
        e.key("identity_key");
        e.bytes(&self.identity_key);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("hello", Self::FIELDS)?;
        d.key(&mut m, "evidence")?;
        let evidence = read_files::<HelloEvidence>(d)?;
        d.key(&mut m, "platform")?;
        let value = d.text("hello.platform", MAX_NAME)?;
        let platform = Platform::parse(value).map_err(|_| {
            invalid(
                "hello.platform",
                Invalid::UnknownPlatform {
                    value: value.to_owned(),
                },
            )
        })?;
        d.key(&mut m, "versions")?;
        let n = d.array("hello.versions", MAX_VERSIONS)?;
        let mut versions = Vec::with_capacity(n);
        for _ in 0..n {
            let v = d.uint("hello.versions")?;
            versions.push(
                u32::try_from(v)
                    .map_err(|_| invalid("hello.versions", Invalid::NotU32 { value: v }))?,
            );
        }
        d.key(&mut m, "max_frame")?;
        let v = d.uint("hello.max_frame")?;
        let max_frame = u32::try_from(v)
            .map_err(|_| invalid("hello.max_frame", Invalid::NotU32 { value: v }))?;
        d.key(&mut m, "measurement")?;
        let measurement = d.bytes("hello.measurement", MAX_MEASUREMENT)?.to_vec();
        d.key(&mut m, "identity_key")?;
        let identity_key = fixed::<IDENTITY_KEY_LEN>(d, "hello.identity_key")?;
        d.end(m)?;
        Ok(Hello {
            versions,
            platform,
            max_frame,
            measurement,
            identity_key,
            evidence,
        })
    }
}

impl Body for Hello {
    const FIELDS: &'static [&'static str] = &[
        "evidence",
        "platform",
        "versions",
        "max_frame",
        "measurement",
        "identity_key",
    ];

    fn check(&self) -> Rule {
        let ascending = self
            .versions
            .windows(2)
            .all(|w| matches!(w, [a, b] if a < b));
        if self.versions.is_empty()
            || self.versions.len() > MAX_VERSIONS
            || self.versions.contains(&0)
            || !ascending
        {
            return Err(("hello.versions", Invalid::Versions));
        }
        if self.max_frame < MIN_MAX_FRAME {
            return Err((
                "hello.max_frame",
                Invalid::MaxFrameTooSmall {
                    value: self.max_frame,
                },
            ));
        }
        max_len("hello.measurement", self.measurement.len(), MAX_MEASUREMENT)?;
        check_hello_evidence(self)
    }
}

/// A hello's evidence: receipt-v2 slots of its platform, each once and
/// within its cap, [`MAX_HELLO_EVIDENCE`] bytes in all, exactly one
/// attestation (none on platform `none`).
fn check_hello_evidence(h: &Hello) -> Rule {
    use kolm_format::evidence::{EvidenceRole, evidence_slots};
    use kolm_format::version::SpecVersion;
    const FIELD: &str = "hello.evidence";
    if h.evidence.len() > MAX_HELLO_EVIDENCE_FILES {
        return Err((
            FIELD,
            Invalid::TooLong {
                len: h.evidence.len(),
                max: MAX_HELLO_EVIDENCE_FILES,
            },
        ));
    }
    let slots = evidence_slots(SpecVersion::V2, h.platform);
    let mut seen = BTreeSet::new();
    let mut total = 0usize;
    let mut attestations = 0usize;
    for f in &h.evidence {
        let slot = slots.iter().find(|s| s.path == f.path).ok_or_else(|| {
            (
                FIELD,
                Invalid::EvidenceSlot {
                    path: f.path.clone(),
                    platform: h.platform,
                },
            )
        })?;
        check_slot_file(FIELD, &mut seen, &f.path, f.data.len(), slot)?;
        total = total.saturating_add(f.data.len());
        if slot.role == EvidenceRole::Attestation {
            attestations = attestations.saturating_add(1);
        }
    }
    max_len(FIELD, total, MAX_HELLO_EVIDENCE)?;
    let want = usize::from(h.platform != Platform::None);
    if attestations != want {
        return Err((
            FIELD,
            Invalid::EvidenceAttestations {
                count: attestations,
                want,
                platform: h.platform,
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use ciborium::Value;
    use kolm_policy::Platform;

    use crate::wire::message::*;
    use crate::wire::test_support::*;

    #[test]
    fn declared_lengths_over_a_field_cap_are_refused_from_the_head() {
        // A measurement declared 2^31 bytes long in a 40-byte frame.
        let mut bytes = mutated(&hello(), |i| body(i)[4].1 = Value::Bytes(vec![]));
        let at = bytes.iter().position(|&b| b == 0x40).unwrap();
        bytes.splice(at..=at, [0x5a, 0x80, 0, 0, 0]);
        assert_eq!(
            Message::decode(&bytes),
            Err(DecodeError::TooLong {
                what: "hello.measurement",
                len: 1 << 31,
                max: MAX_MEASUREMENT
            })
        );
    }

    #[test]
    fn common_version_is_the_highest_both_speak() {
        let Message::Hello(mut h) = hello() else {
            panic!()
        };
        h.versions = vec![1, 3, 4];
        assert_eq!(h.common_version(&[1, 3]), Some(3));
        assert_eq!(h.common_version(&[2]), None);
    }

    /// The evidence rules hold both ways: what encode refuses, decode
    /// refuses (the field is named), and a valid hello round-trips.
    #[test]
    fn hello_evidence_is_slots_of_its_platform_once_each_with_one_attestation() {
        use kolm_format::evidence::{SIM_NITRO_DOC_PATH, SNP_REPORT_BYTES};
        let Message::Hello(base) = hello() else {
            panic!()
        };
        let ev = |path: &str, len: usize| HelloEvidence {
            data: vec![1; len],
            path: path.into(),
        };
        let with = |platform: Platform, evidence: Vec<HelloEvidence>| {
            Message::Hello(Hello {
                platform,
                evidence,
                ..base.clone()
            })
        };
        let good = [
            with(Platform::None, vec![]),
            with(Platform::Simulated, vec![ev(SIM_NITRO_DOC_PATH, 4000)]),
            with(
                Platform::SevSnp,
                vec![
                    ev("evidence/snp-report.bin", SNP_REPORT_BYTES as usize),
                    ev("evidence/snp-vcek.der", 1300),
                    ev("evidence/snp-ask-ark.pem", 4600),
                ],
            ),
            with(Platform::Tdx, vec![ev("evidence/tdx-quote.bin", 5000)]),
        ];
        for m in good {
            let bytes = m.encode().unwrap();
            assert_eq!(Message::decode(&bytes).unwrap(), m);
        }
        let bad = [
            (with(Platform::Simulated, vec![]), "EvidenceAttestations"),
            (
                with(Platform::None, vec![ev(SIM_NITRO_DOC_PATH, 10)]),
                "EvidenceSlot",
            ),
            (
                with(Platform::Nitro, vec![ev(SIM_NITRO_DOC_PATH, 10)]),
                "EvidenceSlot",
            ),
            (
                with(Platform::Tdx, vec![ev("evidence/tdx-collateral.json", 10)]),
                "EvidenceAttestations",
            ),
            (
                with(
                    Platform::Nitro,
                    vec![ev("evidence/nitro.cose", 10), ev("evidence/nitro.cose", 10)],
                ),
                "DuplicateEvidence",
            ),
            (
                with(Platform::SevSnp, vec![ev("evidence/snp-report.bin", 1185)]),
                "EvidenceTooLarge",
            ),
            (
                with(
                    Platform::Tdx,
                    vec![
                        ev("evidence/tdx-quote.bin", 10),
                        ev("evidence/tdx-collateral.json", MAX_HELLO_EVIDENCE),
                    ],
                ),
                "TooLong",
            ),
        ];
        for (m, class) in bad {
            let EncodeError::Invalid { field, problem } = m.encode().unwrap_err();
            assert_eq!(field, "hello.evidence");
            assert!(format!("{problem:?}").starts_with(class), "{problem:?}");
            // The same message, forced onto the wire, is refused on decode.
            let Message::Hello(h) = &m else { panic!() };
            let bytes = mutated(&hello(), |i| {
                let b = body(i);
                b[0].1 = file_entries(h.evidence.iter().map(|f| (&f.data[..], &f.path[..])));
                b[1].1 = text(h.platform.as_str());
            });
            let err = Message::decode(&bytes).unwrap_err();
            assert!(
                matches!(
                    &err,
                    DecodeError::Invalid {
                        field: "hello.evidence",
                        ..
                    }
                ),
                "{class}: {err:?}"
            );
        }
    }

    #[test]
    fn identity_report_data_has_its_own_domain() {
        use kolm_format::binding::{identity_report_data, report_data_for};
        let key = [9u8; 32];
        let rd = identity_report_data(&key);
        assert_ne!(rd, identity_report_data(&[8u8; 32]));
        let cid = kolm_format::content_id::ContentId::from_sha256(key);
        assert_ne!(
            rd,
            report_data_for(kolm_format::version::SpecVersion::V2, &cid)
        );
    }
}
