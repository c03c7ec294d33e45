//! Sealing: writing a whole artifact (used by the enclave). `kolm-verifier`
//! reads it back with the same types (`kolm_verifier::artifact`).
//!
//! An artifact is a canonical ZIP (`container`) holding `manifest.json`, the
//! outputs, `governance/` (SBOM, checksum list, sandbox record),
//! `receipt.cose` and `evidence/`. Nothing else may be in it.
//!
//! The manifest's `schema` picks the receipt spec version, and with it the
//! index schema, the receipt's content type and AAD, and the report-data
//! domain ([`crate::version::SpecVersion`]). The enclave writes v2: it obtains the
//! collateral first ([`CollateralBundle`]), lists it in the manifest
//! ([`CollateralBundle::binding`]), requests the attestation for the
//! manifest's report data, and seals both; [`seal`] refuses evidence whose
//! collateral is not exactly what the manifest lists.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use kolm_policy::Platform;
use ring::signature::{Ed25519KeyPair, KeyPair};
use sha2::{Digest, Sha256};

use crate::binding;
use crate::container::{self, ContainerError, EntryData};
use crate::content_id::ContentId;
use crate::evidence::{EVIDENCE_INDEX_PATH, EvidenceFile, EvidenceIndex, EvidenceRole};
use crate::hexbytes::HexBytes;
use crate::manifest::{EvidenceBinding, FileRecord, Manifest, ManifestError};
use crate::receipt;

/// Zip name of the manifest.
pub const MANIFEST_PATH: &str = "manifest.json";
/// Zip name of the signed receipt.
pub const RECEIPT_PATH: &str = "receipt.cose";

/// Why sealing failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    #[error("manifest: {0}")]
    Manifest(ManifestError),
    #[error("evidence: {0}")]
    Evidence(crate::evidence::EvidenceError),
    #[error("receipt: {0}")]
    Receipt(receipt::ReceiptError),
    #[error("container: {0}")]
    Container(ContainerError),
    #[error("file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("signing key does not match manifest signer.public_key")]
    WrongKey,
    #[error("evidence index names manifest {found}, sealing {expected}")]
    EvidenceMismatch { expected: String, found: String },
}

// By hand, not `#[from]`: the cause is in each message, and a `source`
// would repeat it in a printed chain (anyhow's `{:#}`).
impl From<ManifestError> for SealError {
    fn from(e: ManifestError) -> SealError {
        SealError::Manifest(e)
    }
}
impl From<crate::evidence::EvidenceError> for SealError {
    fn from(e: crate::evidence::EvidenceError) -> SealError {
        SealError::Evidence(e)
    }
}
impl From<receipt::ReceiptError> for SealError {
    fn from(e: receipt::ReceiptError) -> SealError {
        SealError::Receipt(e)
    }
}
impl From<ContainerError> for SealError {
    fn from(e: ContainerError) -> SealError {
        SealError::Container(e)
    }
}

/// Raw evidence for one manifest: in v2, the collateral the manifest lists
/// plus the attestation produced for its report data.
#[derive(Debug, Clone)]
pub struct EvidenceBundle {
    pub platform: Platform,
    /// `(zip path under evidence/, bytes, role)`.
    pub files: Vec<(String, Vec<u8>, crate::evidence::EvidenceRole)>,
}

impl EvidenceBundle {
    /// This bundle (an attestation) with `collateral` added, each file in
    /// the collateral role.
    pub fn with_collateral(mut self, collateral: CollateralBundle) -> Result<Self, SealError> {
        if collateral.platform != self.platform {
            return Err(SealError::EvidenceMismatch {
                expected: self.platform.to_string(),
                found: collateral.platform.to_string(),
            });
        }
        self.files.extend(
            collateral
                .files
                .into_iter()
                .map(|(p, b)| (p, b, EvidenceRole::Collateral)),
        );
        Ok(self)
    }
}

/// The collateral an attestation provider obtained before the manifest is
/// written (receipt v2): certificates, CRLs, TCB info, each under its
/// evidence slot's name.
#[derive(Debug, Clone)]
pub struct CollateralBundle {
    pub platform: Platform,
    /// `(zip path under evidence/, bytes)`.
    pub files: Vec<(String, Vec<u8>)>,
}

impl CollateralBundle {
    /// No collateral (platforms `none`, `simulated`, `nitro`,
    /// `azure-sev-snp`).
    pub fn empty(platform: Platform) -> CollateralBundle {
        CollateralBundle {
            platform,
            files: Vec::new(),
        }
    }

    /// The manifest's `evidence` field for this collateral: its file
    /// records, sorted by path (the manifest's rules then check each is a
    /// collateral slot of the platform within its cap).
    pub fn binding(&self) -> Result<EvidenceBinding, SealError> {
        let mut collateral = self
            .files
            .iter()
            .map(|(p, b)| file_record(p, &EntryData::Bytes(b.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        collateral.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(EvidenceBinding { collateral })
    }
}

/// sha256 and size of an entry's content, streamed.
pub fn file_record(path: &str, data: &EntryData) -> Result<FileRecord, SealError> {
    let err = |e: std::io::Error| SealError::File {
        path: path.to_string(),
        reason: e.to_string(),
    };
    let (sha256, size) = match data {
        EntryData::Bytes(b) => (Sha256::digest(b).into(), b.len() as u64),
        EntryData::File(p) => {
            let mut f = File::open(p).map_err(err)?;
            hash_reader(&mut f).map_err(err)?
        }
    };
    Ok(FileRecord {
        path: path.to_string(),
        size,
        sha256: HexBytes(sha256),
    })
}

fn hash_reader<R: Read>(r: &mut R) -> std::io::Result<([u8; 32], u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n: u64 = 0;
    loop {
        let k = r.read(&mut buf)?;
        if k == 0 {
            break;
        }
        h.update(buf.get(..k).unwrap_or_default());
        n = n.saturating_add(k as u64);
    }
    Ok((h.finalize().into(), n))
}

/// `governance/SHA256SUMS`: one `sha256sum` line per sealed file except
/// itself, sorted by path, so `sha256sum -c` works in the unpacked tree.
pub fn checksums_text(files: &[&FileRecord]) -> Vec<u8> {
    let mut lines: Vec<String> = files
        .iter()
        .filter(|f| f.path != crate::manifest::CHECKSUMS_PATH)
        .map(|f| format!("{}  {}\n", f.sha256, f.path))
        .collect();
    lines.sort_by(|a, b| a.get(66..).cmp(&b.get(66..)));
    lines.concat().into_bytes()
}

/// Writes a sealed artifact atomically. `files` must be exactly the manifest's
/// sealed files (outputs, governance, sandbox record) with matching content;
/// `evidence` must have been produced for this manifest's CID.
pub fn seal(
    dest: &Path,
    manifest: &Manifest,
    files: Vec<(String, EntryData)>,
    evidence: &EvidenceBundle,
    key: &Ed25519KeyPair,
) -> Result<ContentId, SealError> {
    if key.public_key().as_ref() != manifest.signer.public_key.0.as_slice() {
        return Err(SealError::WrongKey);
    }
    let version = manifest.version()?;
    let manifest_bytes = manifest.to_canonical_bytes()?;
    let cid = ContentId::for_json(&manifest_bytes);

    let want: BTreeSet<&str> = manifest
        .sealed_files()
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    let have: BTreeSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    if want != have {
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have.difference(&want).collect();
        return Err(SealError::File {
            path: format!("{missing:?}{extra:?}"),
            reason: format!(
                "file set differs from the manifest: missing {missing:?}, extra {extra:?}"
            ),
        });
    }
    for (path, data) in &files {
        let rec = file_record(path, data)?;
        let listed = manifest
            .sealed_files()
            .into_iter()
            .find(|f| &f.path == path);
        if listed != Some(&rec) {
            return Err(SealError::File {
                path: path.clone(),
                reason: "content differs from the manifest's size/sha256".into(),
            });
        }
    }

    let mut ev_files = Vec::new();
    let mut entries: Vec<(String, EntryData)> = files;
    for (path, bytes, role) in &evidence.files {
        ev_files.push(EvidenceFile {
            file: file_record(path, &EntryData::Bytes(bytes.clone()))?,
            role: *role,
        });
        entries.push((path.clone(), EntryData::Bytes(bytes.clone())));
    }
    ev_files.sort_by(|a, b| a.file.path.cmp(&b.file.path));
    let index = EvidenceIndex {
        schema: version.evidence_schema().to_string(),
        platform: evidence.platform,
        manifest_cid: cid,
        report_data: HexBytes(binding::report_data_for(version, &cid)),
        files: ev_files,
    };
    if index.platform != manifest.environment.platform {
        return Err(SealError::EvidenceMismatch {
            expected: manifest.environment.platform.to_string(),
            found: index.platform.to_string(),
        });
    }
    // v2: the evidence's collateral is exactly what the manifest lists.
    index.collateral_binding(manifest)?;
    let receipt_bytes = receipt::sign_for(version, &manifest_bytes, key)?;
    entries.push((
        EVIDENCE_INDEX_PATH.to_string(),
        EntryData::Bytes(index.to_canonical_bytes()?),
    ));
    entries.push((MANIFEST_PATH.to_string(), EntryData::Bytes(manifest_bytes)));
    entries.push((RECEIPT_PATH.to_string(), EntryData::Bytes(receipt_bytes)));
    container::write_canonical_zip(dest, entries)?;
    Ok(cid)
}
