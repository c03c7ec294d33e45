//! The evidence slot of a sealed artifact: `evidence/index.json` lists the raw
//! attestation bytes and the offline collateral needed to verify them later.
//!
//! The evidence cannot be inside the manifest (the attestation is requested
//! with the manifest's CID as report data, so it exists only afterwards).
//! It is bound the other way round: the index names the manifest CID and the
//! report data, and the attestation itself carries that report data.

use kolm_policy::Platform;
use serde::{Deserialize, Serialize};

use crate::content_id::ContentId;
use crate::hexbytes::HexBytes;
use crate::jcs::{self, JcsError};
use crate::manifest::FileRecord;

/// The `schema` value of a v1 evidence index.
pub const EVIDENCE_SCHEMA_V1: &str = "kolm.evidence.v1";
/// Zip name of the evidence index.
pub const EVIDENCE_INDEX_PATH: &str = "evidence/index.json";
/// Largest evidence file the verifier reads into memory.
pub const MAX_EVIDENCE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why an evidence index is rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvidenceError {
    #[error("evidence index canonical form: {0}")]
    Canonical(#[from] JcsError),
    #[error("evidence index schema: {0}")]
    Schema(String),
    #[error("evidence index field {field}: {reason}")]
    Field { field: String, reason: String },
}

/// What an evidence file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvidenceRole {
    /// The platform's signed report (Nitro document, SNP report, TDX quote).
    Attestation,
    /// Certificates, CRLs, TCB info needed to check it offline.
    Collateral,
}

/// One evidence file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceFile {
    #[serde(flatten)]
    pub file: FileRecord,
    pub role: EvidenceRole,
}

/// `evidence/index.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceIndex {
    pub schema: String,
    pub platform: Platform,
    pub manifest_cid: ContentId,
    pub report_data: HexBytes<64>,
    pub files: Vec<EvidenceFile>,
}

/// The evidence files a platform may carry, with their roles (receipt-v1
/// section 6). Which of them are required is the platform verifier's
/// concern (it names a missing one); the index admits no other file.
pub fn platform_files(platform: Platform) -> &'static [(&'static str, EvidenceRole)] {
    use EvidenceRole::{Attestation, Collateral};
    match platform {
        Platform::None | Platform::Simulated => &[],
        Platform::Nitro => &[("evidence/nitro.cose", Attestation)],
        Platform::SevSnp => &[
            ("evidence/snp-ask-ark.pem", Collateral),
            ("evidence/snp-report.bin", Attestation),
            ("evidence/snp-vcek.der", Collateral),
        ],
        Platform::Tdx => &[
            ("evidence/tdx-collateral.json", Collateral),
            ("evidence/tdx-quote.bin", Attestation),
        ],
        Platform::AzureSevSnp => &[("evidence/azure-evidence.json", Attestation)],
        Platform::AzureTdx => &[
            ("evidence/azure-evidence.json", Attestation),
            ("evidence/tdx-collateral.json", Collateral),
        ],
    }
}

fn role_name(role: EvidenceRole) -> &'static str {
    match role {
        EvidenceRole::Attestation => "attestation",
        EvidenceRole::Collateral => "collateral",
    }
}

fn field_err(field: impl Into<String>, reason: impl Into<String>) -> EvidenceError {
    EvidenceError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

impl EvidenceIndex {
    /// Reads an index: canonical form, schema, then the rules.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<EvidenceIndex, EvidenceError> {
        let value = jcs::parse_canonical(bytes)?;
        // `flatten` and `deny_unknown_fields` do not combine in serde, so the
        // file objects are checked for extra keys by the canonical round trip.
        let index: EvidenceIndex = serde_json::from_value(value.clone())
            .map_err(|e| EvidenceError::Schema(e.to_string()))?;
        let round =
            serde_json::to_value(&index).map_err(|e| EvidenceError::Schema(e.to_string()))?;
        if round != value {
            return Err(EvidenceError::Schema("unknown or extra fields".into()));
        }
        index.check()?;
        Ok(index)
    }

    /// Canonical bytes, after checking the rules.
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, EvidenceError> {
        self.check()?;
        Ok(jcs::to_canonical_vec(self)?)
    }

    fn check(&self) -> Result<(), EvidenceError> {
        if self.schema != EVIDENCE_SCHEMA_V1 {
            return Err(field_err(
                "schema",
                format!("expected {EVIDENCE_SCHEMA_V1:?}, found {:?}", self.schema),
            ));
        }
        for (i, f) in self.files.iter().enumerate() {
            crate::container::check_entry_name(&f.file.path)
                .map_err(|e| field_err(format!("files[{i}].path"), e.to_string()))?;
            if !f.file.path.starts_with("evidence/") || f.file.path == EVIDENCE_INDEX_PATH {
                return Err(field_err(
                    format!("files[{i}].path"),
                    "must be under evidence/ and not the index itself",
                ));
            }
            if f.file.size > MAX_EVIDENCE_FILE_BYTES {
                return Err(field_err(format!("files[{i}].size"), "over the 64 MiB cap"));
            }
        }
        for pair in self.files.windows(2) {
            if let [a, b] = pair
                && a.file.path.as_bytes() >= b.file.path.as_bytes()
            {
                return Err(field_err("files", "not sorted by path or duplicate"));
            }
        }
        // Only the files receipt-v1 section 6 names for this platform, each
        // in its role: nothing unlisted rides along in the evidence slot.
        let allowed = platform_files(self.platform);
        for (i, f) in self.files.iter().enumerate() {
            match allowed.iter().find(|(path, _)| *path == f.file.path) {
                Some((_, role)) if *role == f.role => {}
                Some((_, role)) => {
                    return Err(field_err(
                        format!("files[{i}].role"),
                        format!(
                            "{:?} is {} evidence of platform {}, not {}",
                            f.file.path,
                            role_name(*role),
                            self.platform,
                            role_name(f.role)
                        ),
                    ));
                }
                None => {
                    let names: Vec<&str> = allowed.iter().map(|(p, _)| *p).collect();
                    return Err(field_err(
                        format!("files[{i}].path"),
                        format!(
                            "{:?} is not an evidence file of platform {} (allowed: {})",
                            f.file.path,
                            self.platform,
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
        let attestations = self
            .files
            .iter()
            .filter(|f| f.role == EvidenceRole::Attestation)
            .count();
        match (self.platform.is_attested(), attestations) {
            (false, 0) | (true, 1) => Ok(()),
            (false, n) => Err(field_err(
                "files",
                format!(
                    "platform {} carries no attestation, found {n}",
                    self.platform
                ),
            )),
            (true, n) => Err(field_err(
                "files",
                format!(
                    "platform {} needs exactly one attestation, found {n}",
                    self.platform
                ),
            )),
        }
    }
}
