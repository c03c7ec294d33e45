//! The evidence slot of a sealed artifact: `evidence/index.json` lists the raw
//! attestation bytes and the offline collateral needed to verify them later.
//!
//! The attestation cannot be inside the manifest (it is requested with the
//! manifest's CID as report data, so it exists only afterwards). It is bound
//! the other way round: the index names the manifest CID and the report
//! data, and the attestation itself carries that report data.
//!
//! The collateral can be obtained before the manifest is written. In receipt
//! v2 (`kolm.evidence.v2`) the manifest lists it (`evidence.collateral`) and
//! [`EvidenceIndex::collateral_binding`] holds the index to exactly that
//! list: the one attestation file is the only file the manifest does not
//! name. In v1 (`kolm.evidence.v1`, frozen) the collateral is outside the
//! signature.

use kolm_policy::Platform;
use serde::{Deserialize, Serialize};

use crate::content_id::ContentId;
use crate::hexbytes::HexBytes;
use crate::jcs::{self, JcsError};
use crate::manifest::{FileRecord, Manifest};
use crate::version::SpecVersion;

/// The `schema` value of a v1 evidence index.
pub const EVIDENCE_SCHEMA_V1: &str = "kolm.evidence.v1";
/// The `schema` value of a v2 evidence index.
pub const EVIDENCE_SCHEMA_V2: &str = "kolm.evidence.v2";
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
    /// The index is of another receipt spec version than the manifest (a
    /// v2 manifest with a v1 index would leave its collateral unchecked).
    #[error("evidence index is {index}, the manifest is {manifest}: versions must match")]
    VersionMismatch {
        manifest: &'static str,
        index: &'static str,
    },
    /// The index lists a collateral file the signed manifest does not.
    #[error(
        "collateral {path:?} is not listed in the signed manifest's evidence.collateral (an unlisted file in the evidence slot)"
    )]
    CollateralUnlisted { path: String },
    /// The signed manifest lists a collateral file the index does not.
    #[error("collateral {path:?} is listed in the signed manifest but not in the evidence index")]
    CollateralMissing { path: String },
    /// The index's record of a collateral file differs from the signed
    /// manifest's (another file under the same name).
    #[error(
        "collateral {path:?} differs from the signed manifest's record: index says {index_size} bytes sha256 {index_sha256}, manifest says {manifest_size} bytes sha256 {manifest_sha256}"
    )]
    CollateralDiffers {
        path: String,
        index_size: u64,
        index_sha256: String,
        manifest_size: u64,
        manifest_sha256: String,
    },
}

/// How an index's collateral relates to its manifest
/// ([`EvidenceIndex::collateral_binding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollateralBinding {
    /// Receipt v2: every collateral file of the index is one the signed
    /// manifest lists, with the same size and sha256, and no other (`files`
    /// of them; 0 is possible).
    Bound { files: usize },
    /// Receipt v1 on a platform with collateral files (sev-snp, tdx,
    /// azure-tdx): the collateral is outside the signature, so a host can
    /// replace it with any other genuine set after sealing.
    Unbound,
    /// The platform has no collateral files (none, simulated, nitro,
    /// azure-sev-snp): nothing to bind, in either version.
    NoCollateral,
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

/// One file an artifact's evidence slot may hold (receipt-v1 section 6):
/// its ZIP path, its role in the index, and the most bytes it may have. The
/// writer refuses and the reader rejects an index that names any other
/// file, a file in another role, or a declared size over the cap, so a
/// verifier can refuse an oversized file before reading a byte of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvidenceSlot {
    pub path: &'static str,
    pub role: EvidenceRole,
    pub max_bytes: u64,
}

/// An SEV-SNP attestation report is exactly this long (SEV-SNP ABI
/// specification 56860, table 22: `ATTESTATION_REPORT`; the size is
/// [`kolm_tee_layouts::snp::report::SIZE`]).
pub const SNP_REPORT_BYTES: u64 = kolm_tee_layouts::snp::report::SIZE as u64;

const KIB: u64 = 1024;

const fn slot(path: &'static str, role: EvidenceRole, max_bytes: u64) -> EvidenceSlot {
    EvidenceSlot {
        path,
        role,
        max_bytes,
    }
}

/// Nitro: a COSE_Sign1 document with its chain; the samples are 4.4 to
/// 4.8 KiB, and `user_data`, `nonce` and `public_key` are at most 1 KiB
/// each (NSM API), so 64 KiB leaves room for a longer chain.
const NITRO_DOC: EvidenceSlot = slot("evidence/nitro.cose", EvidenceRole::Attestation, 64 * KIB);
/// The optional ASK/ASVK + ARK PEM bundle (samples 4.6 KiB).
const SNP_CHAIN: EvidenceSlot = slot(
    "evidence/snp-ask-ark.pem",
    EvidenceRole::Collateral,
    64 * KIB,
);
const SNP_REPORT: EvidenceSlot = slot(
    "evidence/snp-report.bin",
    EvidenceRole::Attestation,
    SNP_REPORT_BYTES,
);
/// The VCEK/VLEK (samples 1.3 KiB).
const SNP_VCEK: EvidenceSlot = slot("evidence/snp-vcek.der", EvidenceRole::Collateral, 16 * KIB);
/// QuoteCollateralV3 as JSON: TCB info, QE identity, two CRLs and their
/// chains (samples 15 to 24 KiB).
const TDX_COLLATERAL: EvidenceSlot = slot(
    "evidence/tdx-collateral.json",
    EvidenceRole::Collateral,
    1024 * KIB,
);
/// The quote with its PCK chain (samples 5.0 to 5.2 KiB).
const TDX_QUOTE: EvidenceSlot = slot(
    "evidence/tdx-quote.bin",
    EvidenceRole::Attestation,
    64 * KIB,
);
/// Simulated TEE (receipt v2 only): an AWS-Nitro-format COSE_Sign1
/// document signed under the installation's kolm sim root, not AWS's
/// (docs/attestation.md, "Simulated evidence"). The same shape and cap as
/// [`NITRO_DOC`], under its own name so that it is never read as Nitro
/// evidence.
const SIM_NITRO_DOC: EvidenceSlot = slot(SIM_NITRO_DOC_PATH, EvidenceRole::Attestation, 64 * KIB);
/// Simulated TEE, TDX form: a TDX v4 quote under the installation's TDX
/// format root, with the same cap as [`TDX_QUOTE`].
const SIM_TDX_QUOTE: EvidenceSlot = slot(SIM_TDX_QUOTE_PATH, EvidenceRole::Attestation, 64 * KIB);
/// Its `QuoteCollateralV3` JSON, the format and cap of [`TDX_COLLATERAL`].
const SIM_TDX_COLLATERAL: EvidenceSlot = slot(
    SIM_TDX_COLLATERAL_PATH,
    EvidenceRole::Collateral,
    1024 * KIB,
);
/// Simulated TEE, SEV-SNP form: an SNP v3 report (exactly as long as
/// [`SNP_REPORT`]) with a VCEK-shaped chain under the SNP format root.
const SIM_SNP_REPORT: EvidenceSlot = slot(
    SIM_SNP_REPORT_PATH,
    EvidenceRole::Attestation,
    SNP_REPORT_BYTES,
);
/// Its VCEK-shaped leaf (the cap of [`SNP_VCEK`]).
const SIM_SNP_VCEK: EvidenceSlot = slot(SIM_SNP_VCEK_PATH, EvidenceRole::Collateral, 16 * KIB);
/// Its ASK + ARK PEM pair (the cap of [`SNP_CHAIN`]).
const SIM_SNP_CHAIN: EvidenceSlot = slot(SIM_SNP_CHAIN_PATH, EvidenceRole::Collateral, 64 * KIB);

/// Zip name of a `simulated` artifact's attestation in the Nitro form
/// (receipt v2): the Nitro-format document of the kolm simulated TEE.
pub const SIM_NITRO_DOC_PATH: &str = "evidence/sim-nitro.cose";
/// Zip name of a `simulated` artifact's attestation in the TDX form: a TDX
/// v4 quote.
pub const SIM_TDX_QUOTE_PATH: &str = "evidence/sim-tdx-quote.bin";
/// Zip name of the TDX form's collateral (`QuoteCollateralV3` JSON).
pub const SIM_TDX_COLLATERAL_PATH: &str = "evidence/sim-tdx-collateral.json";
/// Zip name of a `simulated` artifact's attestation in the SEV-SNP form: an
/// SNP v3 attestation report.
pub const SIM_SNP_REPORT_PATH: &str = "evidence/sim-snp-report.bin";
/// Zip name of the SEV-SNP form's VCEK-shaped leaf (DER).
pub const SIM_SNP_VCEK_PATH: &str = "evidence/sim-snp-vcek.der";
/// Zip name of the SEV-SNP form's ASK + ARK pair (PEM).
pub const SIM_SNP_CHAIN_PATH: &str = "evidence/sim-snp-ask-ark.pem";
/// The common name of the SEV-SNP form's ASK, which the enclave writes and
/// the verifier requires (where AMD's is `SEV-<product>`); its ARK is named
/// [`SimFormat::root_common_name`].
pub const SIM_SNP_ASK_COMMON_NAME: &str = "kolm simulated TEE SEV-SNP ASK (NOT A TEE)";

/// The common name of the installation's kolm sim root certificate (the
/// P-384 root of the Nitro form), which the enclave writes and the verifier
/// requires of the root of Nitro-form `simulated` evidence.
pub const SIM_ROOT_COMMON_NAME: &str = "kolm simulated TEE root (NOT A TEE)";
/// Every kolm sim root's common name starts with this ...
pub const SIM_ROOT_CN_PREFIX: &str = "kolm simulated TEE ";
/// ... and ends with this: a certificate that names itself so says what it
/// is (the verifier trusts no sim root without such a name).
pub const SIM_ROOT_CN_SUFFIX: &str = "root (NOT A TEE)";

/// Whether `cn` is a kolm sim root's common name: [`SIM_ROOT_CN_PREFIX`],
/// then anything, then [`SIM_ROOT_CN_SUFFIX`] ([`SIM_ROOT_COMMON_NAME`]
/// and every [`SimFormat::root_common_name`] are).
pub fn is_sim_root_common_name(cn: &str) -> bool {
    // The prefix and the suffix may not overlap.
    cn.strip_prefix(SIM_ROOT_CN_PREFIX)
        .is_some_and(|rest| rest.ends_with(SIM_ROOT_CN_SUFFIX))
}

/// The real format a kolm simulated TEE writes its evidence in (`--sim-format`).
/// Each form has its own files in the evidence slot and its own root; the
/// platform is `simulated` whatever the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimFormat {
    /// An AWS-Nitro-format COSE_Sign1 document under the P-384 sim root.
    Nitro,
    /// An SEV-SNP v3 report with a VCEK-shaped chain under the SNP format root.
    SevSnp,
    /// A TDX v4 quote with `QuoteCollateralV3` collateral under the TDX
    /// format root.
    Tdx,
}

impl SimFormat {
    /// Every form, in the order a root bundle lists their roots.
    pub const ALL: [SimFormat; 3] = [SimFormat::Nitro, SimFormat::SevSnp, SimFormat::Tdx];

    /// The `--sim-format` spelling.
    pub const fn name(self) -> &'static str {
        match self {
            SimFormat::Nitro => "nitro",
            SimFormat::SevSnp => "sev-snp",
            SimFormat::Tdx => "tdx",
        }
    }

    /// Reads a `--sim-format` value.
    pub fn parse(s: &str) -> Option<SimFormat> {
        SimFormat::ALL.into_iter().find(|f| f.name() == s)
    }

    /// The common name of this form's root: the P-384 sim root for Nitro,
    /// a format root for the others.
    pub const fn root_common_name(self) -> &'static str {
        match self {
            SimFormat::Nitro => SIM_ROOT_COMMON_NAME,
            SimFormat::SevSnp => "kolm simulated TEE SEV-SNP root (NOT A TEE)",
            SimFormat::Tdx => "kolm simulated TEE TDX root (NOT A TEE)",
        }
    }

    /// The form whose root has common name `cn`, if any.
    pub fn of_root_common_name(cn: &str) -> Option<SimFormat> {
        SimFormat::ALL
            .into_iter()
            .find(|f| f.root_common_name() == cn)
    }

    /// The form's attestation file.
    pub const fn attestation_path(self) -> &'static str {
        match self {
            SimFormat::Nitro => SIM_NITRO_DOC_PATH,
            SimFormat::SevSnp => SIM_SNP_REPORT_PATH,
            SimFormat::Tdx => SIM_TDX_QUOTE_PATH,
        }
    }

    /// The evidence slots of this form (attestation and collateral).
    const fn slots(self) -> &'static [EvidenceSlot] {
        match self {
            SimFormat::Nitro => &[SIM_NITRO_DOC],
            SimFormat::SevSnp => &[SIM_SNP_CHAIN, SIM_SNP_REPORT, SIM_SNP_VCEK],
            SimFormat::Tdx => &[SIM_TDX_COLLATERAL, SIM_TDX_QUOTE],
        }
    }

    /// The form whose slot `path` is, if any.
    pub fn of_path(path: &str) -> Option<SimFormat> {
        SimFormat::ALL
            .into_iter()
            .find(|f| f.slots().iter().any(|s| s.path == path))
    }
}

impl std::fmt::Display for SimFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// vTPM quote, HCL report, runtime data, certificates (samples 8 and
/// 13 KiB).
const AZURE_EVIDENCE: EvidenceSlot = slot(
    "evidence/azure-evidence.json",
    EvidenceRole::Attestation,
    1024 * KIB,
);

/// The evidence files a platform may carry in receipt spec `version`,
/// sorted by path (receipt-v1 section 6; receipt-v2 section 6 adds the
/// `simulated` row). Which of them are required is the platform verifier's
/// concern (it names a missing one); the index admits no other file.
pub fn evidence_slots(version: SpecVersion, platform: Platform) -> &'static [EvidenceSlot] {
    match (version, platform) {
        (_, Platform::None) | (SpecVersion::V1, Platform::Simulated) => &[],
        // The three forms' files, sorted by path; an index holds one
        // form's only (checked apart, `EvidenceIndex::sim_format`).
        (SpecVersion::V2, Platform::Simulated) => &[
            SIM_NITRO_DOC,
            SIM_SNP_CHAIN,
            SIM_SNP_REPORT,
            SIM_SNP_VCEK,
            SIM_TDX_COLLATERAL,
            SIM_TDX_QUOTE,
        ],
        (_, Platform::Nitro) => &[NITRO_DOC],
        (_, Platform::SevSnp) => &[SNP_CHAIN, SNP_REPORT, SNP_VCEK],
        (_, Platform::Tdx) => &[TDX_COLLATERAL, TDX_QUOTE],
        (_, Platform::AzureSevSnp) => &[AZURE_EVIDENCE],
        (_, Platform::AzureTdx) => &[AZURE_EVIDENCE, TDX_COLLATERAL],
    }
}

/// Whether an index of receipt spec `version` for `platform` carries
/// exactly one attestation file (else none): every hardware platform, and
/// `simulated` from v2 on (its software evidence under the kolm sim root);
/// never `none`, nor a v1 `simulated` (frozen: no evidence).
pub fn carries_attestation(version: SpecVersion, platform: Platform) -> bool {
    evidence_slots(version, platform)
        .iter()
        .any(|s| s.role == EvidenceRole::Attestation)
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

    /// The receipt spec version, from `schema`.
    pub fn version(&self) -> Result<SpecVersion, EvidenceError> {
        SpecVersion::of_evidence_schema(&self.schema).ok_or_else(|| {
            field_err(
                "schema",
                format!(
                    "expected {EVIDENCE_SCHEMA_V1:?} or {EVIDENCE_SCHEMA_V2:?}, found {:?}",
                    self.schema
                ),
            )
        })
    }

    /// The rules between the index and the manifest it accompanies, beyond
    /// its own: the same receipt spec version; in v2, the index's
    /// collateral files are exactly the manifest's `evidence.collateral`
    /// (path, size, sha256), so the attestation is the only file the
    /// signed manifest does not name. The writer ([`crate::seal::seal`])
    /// refuses and the verifier rejects an index that breaks them. The
    /// platforms must already agree (both readers check that first).
    pub fn collateral_binding(
        &self,
        manifest: &Manifest,
    ) -> Result<CollateralBinding, EvidenceError> {
        let index_version = self.version()?;
        let manifest_version = manifest
            .version()
            .map_err(|e| field_err("manifest", e.to_string()))?;
        if index_version != manifest_version {
            return Err(EvidenceError::VersionMismatch {
                manifest: manifest_version.manifest_schema(),
                index: index_version.evidence_schema(),
            });
        }
        let has_collateral = evidence_slots(index_version, self.platform)
            .iter()
            .any(|s| s.role == EvidenceRole::Collateral);
        let Some(listed) = manifest.bound_collateral() else {
            return Ok(if has_collateral {
                CollateralBinding::Unbound
            } else {
                CollateralBinding::NoCollateral
            });
        };
        let in_index: Vec<&FileRecord> = self
            .files
            .iter()
            .filter(|f| f.role == EvidenceRole::Collateral)
            .map(|f| &f.file)
            .collect();
        for f in &in_index {
            match listed.iter().find(|l| l.path == f.path) {
                None => {
                    return Err(EvidenceError::CollateralUnlisted {
                        path: f.path.clone(),
                    });
                }
                Some(l) if l != *f => {
                    return Err(EvidenceError::CollateralDiffers {
                        path: f.path.clone(),
                        index_size: f.size,
                        index_sha256: f.sha256.to_hex(),
                        manifest_size: l.size,
                        manifest_sha256: l.sha256.to_hex(),
                    });
                }
                Some(_) => {}
            }
        }
        if let Some(l) = listed
            .iter()
            .find(|l| !in_index.iter().any(|f| f.path == l.path))
        {
            return Err(EvidenceError::CollateralMissing {
                path: l.path.clone(),
            });
        }
        Ok(if has_collateral {
            CollateralBinding::Bound {
                files: in_index.len(),
            }
        } else {
            CollateralBinding::NoCollateral
        })
    }

    /// The form of a `simulated` index's evidence ([`SimFormat::of_path`]
    /// of its files): `None` when it has no sim file (or is of another
    /// platform), an error naming both when files of two forms are mixed
    /// (say a Nitro-form document and a TDX-form quote): each form is
    /// checked against its own root, so one index holds one form.
    pub fn sim_format(&self) -> Result<Option<SimFormat>, EvidenceError> {
        if self.platform != Platform::Simulated {
            return Ok(None);
        }
        let mut found: Option<(SimFormat, &str)> = None;
        for (i, f) in self.files.iter().enumerate() {
            let Some(form) = SimFormat::of_path(&f.file.path) else {
                continue;
            };
            match found {
                Some((first, path)) if first != form => {
                    return Err(field_err(
                        format!("files[{i}].path"),
                        format!(
                            "mixes simulated evidence forms: {:?} is of the {form} form, {path:?} \
                             of the {first} form; an index holds one form's files",
                            f.file.path
                        ),
                    ));
                }
                Some(_) => {}
                None => found = Some((form, &f.file.path)),
            }
        }
        Ok(found.map(|(form, _)| form))
    }

    fn check(&self) -> Result<(), EvidenceError> {
        let version = self.version()?;
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
        // Only the files receipt-v1 (v2) section 6 names for this platform,
        // each in its role: nothing unlisted rides along in the evidence slot.
        let allowed = evidence_slots(version, self.platform);
        for (i, f) in self.files.iter().enumerate() {
            match allowed.iter().find(|s| s.path == f.file.path) {
                Some(s) if s.role == f.role && f.file.size > s.max_bytes => {
                    return Err(field_err(
                        format!("files[{i}].size"),
                        format!(
                            "{:?} is {} bytes, over its {}-byte cap",
                            f.file.path, f.file.size, s.max_bytes
                        ),
                    ));
                }
                Some(s) if s.role == f.role => {}
                Some(EvidenceSlot { role, .. }) => {
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
                    let names: Vec<&str> = allowed.iter().map(|s| s.path).collect();
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
        self.sim_format()?;
        let attestations = self
            .files
            .iter()
            .filter(|f| f.role == EvidenceRole::Attestation)
            .count();
        match (carries_attestation(version, self.platform), attestations) {
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
