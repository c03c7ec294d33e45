//! `job-submit`, host to enclave: the job spec, the policy, the inputs
//! that will follow (each declared with its size and SHA-256) and the
//! host's collateral. Its codec and its rules.

use std::collections::BTreeSet;

use kolm_policy::Platform;

use super::cbor::{Decoder, Encoder};
use super::codec::{Body, Codec, DecodeError, file_name, fixed};
use super::file_name::FileName;
use super::files::{FileEntry, encode_files, read_files};
use super::rules::{Invalid, Rule, check_slot_file, max_len};

/// Largest job spec and largest policy.
pub const MAX_DOCUMENT: usize = 1024 * 1024;
/// Most collateral files a job-submit carries.
pub const MAX_SUBMIT_COLLATERAL_FILES: usize = 8;
/// Largest collateral file a job-submit carries, whatever its slot: the
/// largest collateral slot's cap (TDX `QuoteCollateralV3` JSON). Each file
/// is also held to its own slot's cap; a unit test keeps the two in step.
pub const MAX_SUBMIT_COLLATERAL_FILE: usize = 1024 * 1024;
/// Most inputs one job may declare.
pub const MAX_INPUTS: usize = 4096;

/// A SHA-256 digest.
pub type Sha256Digest = [u8; 32];

/// A job and the inputs the host will stream after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSubmit {
    /// The job spec (TOML), at most [`MAX_DOCUMENT`] bytes.
    pub spec: Vec<u8>,
    /// The inputs, at most [`MAX_INPUTS`], names distinct.
    pub inputs: Vec<InputDecl>,
    /// The policy (TOML), at most [`MAX_DOCUMENT`] bytes.
    pub policy: Vec<u8>,
    /// The host's offline collateral (`kolm-host run --bundle DIR`), for an
    /// enclave whose platform supplies none and that has no bundle of its
    /// own (on a guest, the host's directory is not on the enclave's file
    /// system): at most [`MAX_SUBMIT_COLLATERAL_FILES`] files, each under
    /// a receipt-v2 collateral slot path of some hardware platform
    /// ([`collateral_slot`]), each path once, each within its slot's cap.
    /// Empty when the host has no bundle. Untrusted like everything the
    /// host sends: the enclave checks each file's shape, and the verifier
    /// judges the collateral the receipt binds.
    pub collateral: Vec<CollateralFile>,
}

/// One file of the host's collateral bundle, sent with a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollateralFile {
    /// Its content.
    pub data: Vec<u8>,
    /// Its receipt-v2 evidence slot path (`evidence/tdx-collateral.json`,
    /// ...).
    pub path: String,
}

/// One declared input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputDecl {
    /// Its file name in the job's input directory.
    pub name: FileName,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of its content.
    pub sha256: Sha256Digest,
}

impl JobSubmit {
    /// The declared inputs' sizes added up (checked by encode and decode
    /// not to overflow).
    pub fn total_input_bytes(&self) -> Option<u64> {
        self.inputs
            .iter()
            .try_fold(0u64, |sum, i| sum.checked_add(i.size))
    }
}

impl FileEntry for CollateralFile {
    const NAMES: [&'static str; 3] = [
        "job-submit.collateral",
        "job-submit.collateral.data",
        "job-submit.collateral.path",
    ];
    const MAX_FILES: usize = MAX_SUBMIT_COLLATERAL_FILES;
    const MAX_DATA: usize = MAX_SUBMIT_COLLATERAL_FILE;

    fn new(data: Vec<u8>, path: String) -> Self {
        CollateralFile { data, path }
    }

    fn data(&self) -> &[u8] {
        &self.data
    }

    fn path(&self) -> &str {
        &self.path
    }
}

/// An input declaration's keys, in deterministic key order.
pub(super) const INPUT_DECL: &[&str] = &["name", "size", "sha256"];

impl Codec for InputDecl {
    fn encode(&self, e: &mut Encoder) {
        e.map(INPUT_DECL);
        e.key("name");
        e.text(self.name.as_str());
        e.key("size");
        e.uint(self.size);
        e.key("sha256");
        e.bytes(&self.sha256);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut im = d.map("job-submit.inputs", INPUT_DECL)?;
        d.key(&mut im, "name")?;
        let name = file_name(d, "job-submit.inputs.name")?;
        d.key(&mut im, "size")?;
        let size = d.uint("job-submit.inputs.size")?;
        d.key(&mut im, "sha256")?;
        let sha256 = fixed::<32>(d, "job-submit.inputs.sha256")?;
        d.end(im)?;
        Ok(InputDecl { name, size, sha256 })
    }
}

impl Codec for JobSubmit {
    fn encode(&self, e: &mut Encoder) {
        e.map(Self::FIELDS);
        e.key("spec");
        e.bytes(&self.spec);
        e.key("inputs");
        e.array(self.inputs.len());
        for i in &self.inputs {
            i.encode(e);
        }
        e.key("policy");
        e.bytes(&self.policy);
        e.key("collateral");
        encode_files(e, &self.collateral);
    }

    fn read(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let mut m = d.map("job-submit", Self::FIELDS)?;
        d.key(&mut m, "spec")?;
        let spec = d.bytes("job-submit.spec", MAX_DOCUMENT)?.to_vec();
        d.key(&mut m, "inputs")?;
        let n = d.array("job-submit.inputs", MAX_INPUTS)?;
        // Grown as entries decode: a short frame declaring many entries costs nothing.
        let mut inputs = Vec::new();
        for _ in 0..n {
            inputs.push(InputDecl::read(d)?);
        }
        d.key(&mut m, "policy")?;
        let policy = d.bytes("job-submit.policy", MAX_DOCUMENT)?.to_vec();
        d.key(&mut m, "collateral")?;
        let collateral = read_files::<CollateralFile>(d)?;
        d.end(m)?;
        Ok(JobSubmit {
            spec,
            inputs,
            policy,
            collateral,
        })
    }
}

impl Body for JobSubmit {
    const FIELDS: &'static [&'static str] = &["spec", "inputs", "policy", "collateral"];

    fn check(&self) -> Rule {
        max_len("job-submit.spec", self.spec.len(), MAX_DOCUMENT)?;
        max_len("job-submit.policy", self.policy.len(), MAX_DOCUMENT)?;
        if self.inputs.len() > MAX_INPUTS {
            return Err((
                "job-submit.inputs",
                Invalid::TooLong {
                    len: self.inputs.len(),
                    max: MAX_INPUTS,
                },
            ));
        }
        let mut names = BTreeSet::new();
        for i in &self.inputs {
            if !names.insert(&i.name) {
                return Err((
                    "job-submit.inputs",
                    Invalid::DuplicateInput {
                        name: i.name.as_str().to_owned(),
                    },
                ));
            }
        }
        if self.total_input_bytes().is_none() {
            return Err(("job-submit.inputs", Invalid::TotalOverflow));
        }
        check_submit_collateral(self)
    }
}

/// The receipt-v2 collateral slot at `path` of some hardware platform
/// (`evidence/snp-vcek.der`, `evidence/snp-ask-ark.pem`,
/// `evidence/tdx-collateral.json`): the paths a job-submit's collateral may
/// use. Never a simulated TEE's (it writes its own) nor an attestation.
pub fn collateral_slot(path: &str) -> Option<kolm_format::evidence::EvidenceSlot> {
    hardware_collateral_slots()
        .find(|s| s.path == path)
        .copied()
}

/// The receipt-v2 collateral slots of every hardware platform (a slot
/// two platforms share, once per platform).
fn hardware_collateral_slots() -> impl Iterator<Item = &'static kolm_format::evidence::EvidenceSlot>
{
    use kolm_format::evidence::{EvidenceRole, evidence_slots};
    Platform::HARDWARE
        .into_iter()
        .flat_map(|p| evidence_slots(kolm_format::version::SpecVersion::V2, p))
        .filter(|s| s.role == EvidenceRole::Collateral)
}

/// Every path [`collateral_slot`] admits, sorted.
pub(super) fn collateral_paths() -> Vec<&'static str> {
    let paths: BTreeSet<&'static str> = hardware_collateral_slots().map(|s| s.path).collect();
    paths.into_iter().collect()
}

/// A job-submit's collateral: at most [`MAX_SUBMIT_COLLATERAL_FILES`]
/// files, each a hardware platform's collateral slot, once, within its cap.
fn check_submit_collateral(j: &JobSubmit) -> Rule {
    const FIELD: &str = "job-submit.collateral";
    max_len(FIELD, j.collateral.len(), MAX_SUBMIT_COLLATERAL_FILES)?;
    let mut seen = BTreeSet::new();
    for f in &j.collateral {
        let slot = collateral_slot(&f.path).ok_or_else(|| {
            (
                FIELD,
                Invalid::CollateralSlot {
                    path: f.path.clone(),
                },
            )
        })?;
        check_slot_file(FIELD, &mut seen, &f.path, f.data.len(), &slot)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use ciborium::Value;

    use super::{collateral_paths, hardware_collateral_slots};
    use crate::wire::message::*;
    use crate::wire::test_support::*;

    /// The job-submit's collateral rules hold both ways: what encode
    /// refuses, decode refuses naming the field, and a valid submit
    /// round-trips.
    #[test]
    fn submit_collateral_is_hardware_collateral_slots_once_each_within_their_caps() {
        let Message::JobSubmit(base) = job() else {
            panic!()
        };
        let file = |path: &str, len: usize| CollateralFile {
            data: vec![0x30; len],
            path: path.into(),
        };
        let with = |collateral: Vec<CollateralFile>| {
            Message::JobSubmit(JobSubmit {
                collateral,
                ..base.clone()
            })
        };
        let good = [
            with(vec![]),
            with(vec![file("evidence/tdx-collateral.json", 20_000)]),
            // Every slot at its cap, in any order.
            with(vec![
                file("evidence/tdx-collateral.json", 1024 * 1024),
                file("evidence/snp-vcek.der", 16 * 1024),
                file("evidence/snp-ask-ark.pem", 64 * 1024),
            ]),
        ];
        for m in good {
            let bytes = m.encode().unwrap();
            assert_eq!(Message::decode(&bytes).unwrap(), m);
        }
        let nine: Vec<CollateralFile> = (0..9).map(|_| file("evidence/snp-vcek.der", 10)).collect();
        let bad = [
            // A simulated TEE's collateral: it writes its own.
            (
                with(vec![file("evidence/sim-tdx-collateral.json", 10)]),
                "CollateralSlot",
            ),
            // An attestation, the index, a path out of the slot.
            (
                with(vec![file("evidence/tdx-quote.bin", 10)]),
                "CollateralSlot",
            ),
            (
                with(vec![file("evidence/index.json", 10)]),
                "CollateralSlot",
            ),
            (
                with(vec![file("evidence/../tdx-collateral.json", 10)]),
                "CollateralSlot",
            ),
            (with(vec![file("snp-vcek.der", 10)]), "CollateralSlot"),
            (
                with(vec![
                    file("evidence/snp-vcek.der", 10),
                    file("evidence/snp-ask-ark.pem", 10),
                    file("evidence/snp-vcek.der", 10),
                ]),
                "DuplicateEvidence",
            ),
            (
                with(vec![file("evidence/snp-vcek.der", 16 * 1024 + 1)]),
                "EvidenceTooLarge",
            ),
            (with(nine), "TooLong"),
        ];
        for (m, class) in bad {
            let EncodeError::Invalid { field, problem } = m.encode().unwrap_err();
            assert_eq!(field, "job-submit.collateral");
            assert!(format!("{problem:?}").starts_with(class), "{problem:?}");
            // The same message, forced onto the wire, is refused on decode.
            let Message::JobSubmit(j) = &m else { panic!() };
            let bytes = mutated(&job(), |i| {
                body(i)[3].1 =
                    file_entries(j.collateral.iter().map(|f| (&f.data[..], &f.path[..])));
            });
            let err = Message::decode(&bytes).unwrap_err();
            let named = match &err {
                DecodeError::Invalid { field, .. } => *field,
                // Nine files: refused from the array's head.
                DecodeError::TooLong { what, .. } => what,
                _ => "",
            };
            assert_eq!(named, "job-submit.collateral", "{class}: {err:?}");
        }
        let e = with(vec![file("evidence/tdx-quote.bin", 1)])
            .encode()
            .unwrap_err();
        assert!(
            e.to_string().contains(
                "(allowed: evidence/snp-ask-ark.pem, evidence/snp-vcek.der, \
                 evidence/tdx-collateral.json)"
            ),
            "{e}"
        );
        // A file over the largest cap is refused from its head, before its
        // bytes are read.
        let mut huge = mutated(&job(), |i| {
            body(i)[3].1 = Value::Array(vec![Value::Map(vec![
                (text("data"), Value::Bytes(vec![])),
                (text("path"), text("evidence/tdx-collateral.json")),
            ])]);
        });
        let at = huge.windows(5).position(|w| w == b"\x64data").unwrap() + 5;
        huge.splice(at..=at, [0x5a, 0x00, 0x10, 0x00, 0x01]);
        assert_eq!(
            Message::decode(&huge),
            Err(DecodeError::TooLong {
                what: "job-submit.collateral.data",
                len: (1 << 20) + 1,
                max: MAX_SUBMIT_COLLATERAL_FILE
            })
        );
        // The entries' own fields: exactly data and path, typed.
        let extra = mutated(&job(), |i| {
            let Value::Array(files) = &mut body(i)[3].1 else {
                panic!()
            };
            let Value::Map(first) = &mut files[0] else {
                panic!()
            };
            first.push((text("role"), text("collateral")));
        });
        assert!(matches!(
            Message::decode(&extra),
            Err(DecodeError::UnknownField { message: "job-submit.collateral", ref field, .. })
                if field == "role"
        ));
        let as_text = mutated(&job(), |i| {
            let Value::Array(files) = &mut body(i)[3].1 else {
                panic!()
            };
            let Value::Map(first) = &mut files[0] else {
                panic!()
            };
            first[0].1 = text("{}");
        });
        assert!(matches!(
            Message::decode(&as_text),
            Err(DecodeError::WrongType {
                what: "job-submit.collateral.data",
                expected: "byte string",
                ..
            })
        ));
        // A submit of before this field is refused, naming it.
        let without = mutated(&job(), |i| {
            body(i).pop();
        });
        assert_eq!(
            Message::decode(&without),
            Err(DecodeError::MissingField {
                message: "job-submit",
                field: "collateral"
            })
        );
    }

    #[test]
    fn the_largest_submitted_collateral_file_is_the_largest_slot_cap() {
        let largest = hardware_collateral_slots()
            .map(|s| s.max_bytes)
            .max()
            .unwrap();
        assert_eq!(largest, MAX_SUBMIT_COLLATERAL_FILE as u64);
        assert_eq!(
            collateral_paths(),
            [
                "evidence/snp-ask-ark.pem",
                "evidence/snp-vcek.der",
                "evidence/tdx-collateral.json"
            ]
        );
        assert!(collateral_slot("evidence/sim-snp-vcek.der").is_none());
        assert!(collateral_slot("evidence/azure-evidence.json").is_none());
    }
}
