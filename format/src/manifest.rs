//! The receipt manifest (receipt spec v1, `docs/receipt-v1.md`, and v2,
//! `docs/receipt-v2.md`): the five-step chain inputs -> job/policy ->
//! environment -> outputs -> binding, as one canonical JSON document named
//! by its CID.
//!
//! [`Manifest::from_canonical_bytes`] is the only way to read one: it checks
//! the canonical form, dispatches on `schema` (`kolm.manifest.v1` or
//! `kolm.manifest.v2`), then the fields of that version (unknown fields
//! rejected) and every semantic rule, so a `Manifest` value in hand is
//! always valid. The two versions differ in one field: v2 adds
//! `evidence.collateral`, the file records of the evidence collateral,
//! which v1 leaves outside the signature.

use std::collections::{BTreeMap, BTreeSet};

use kolm_policy::Platform;
use serde::{Deserialize, Serialize};

use crate::content_id::ContentId;
use crate::evidence::{EvidenceRole, evidence_slots};
use crate::hexbytes::{HexBytes, HexVec, Sha256Digest};
use crate::jcs::{self, JcsError};
use crate::timefmt;
use crate::version::SpecVersion;

/// The `schema` value of a v1 manifest.
pub const MANIFEST_SCHEMA_V1: &str = "kolm.manifest.v1";
/// The `schema` value of a v2 manifest.
pub const MANIFEST_SCHEMA_V2: &str = "kolm.manifest.v2";
/// Largest manifest the verifier reads into memory.
pub const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;
/// Largest integer JSON carries exactly (RFC 8785 numbers are IEEE doubles).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// Zip name of the SBOM.
pub const SBOM_PATH: &str = "governance/sbom.spdx.json";
/// Zip name of the checksum list.
pub const CHECKSUMS_PATH: &str = "governance/SHA256SUMS";
/// Prefix of every output entry.
pub const OUTPUTS_PREFIX: &str = "outputs/";

/// Why a manifest is rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    #[error("manifest is {size} bytes, over the {MAX_MANIFEST_BYTES}-byte cap")]
    TooLarge { size: u64 },
    #[error("manifest canonical form: {0}")]
    Canonical(#[from] JcsError),
    #[error("manifest schema: {0}")]
    Schema(String),
    #[error("manifest field {field}: {reason}")]
    Field { field: String, reason: String },
}

fn field_err(field: impl Into<String>, reason: impl Into<String>) -> ManifestError {
    ManifestError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

/// A sealed run's manifest. Field order here is irrelevant: bytes are JCS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub job: JobRecord,
    pub inputs: Vec<FileRecord>,
    pub environment: Environment,
    pub outputs: Vec<FileRecord>,
    pub metrics: BTreeMap<String, f64>,
    pub governance: Governance,
    pub chain: ChainLink,
    pub signer: Signer,
    /// v2 only (required there, absent in v1): the evidence files bound
    /// under the signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceBinding>,
}

/// `evidence` (v2): what of the evidence slot the manifest binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceBinding {
    /// The collateral files (certificates, CRLs, TCB info) the enclave
    /// obtained before writing the manifest: sorted by path, unique, each a
    /// collateral slot of the platform (receipt-v2 section 6); `[]` for
    /// platforms without collateral files. The evidence index must list
    /// exactly these, with the same size and sha256.
    pub collateral: Vec<FileRecord>,
}

/// Step 2: what ran, under which policy, when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    pub id: String,
    pub kind: String,
    pub spec_sha256: Sha256Digest,
    pub policy_sha256: Sha256Digest,
    pub started_at: String,
    pub finished_at: String,
    pub exit_code: i32,
    /// What a fine-tune enabled (`kolm.manifest.v2` only; absent for other
    /// jobs and never written as `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub techniques: Option<Techniques>,
}

/// The techniques a fine-tune job enabled, as its receipt states them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Techniques {
    /// `full` or `lora`.
    pub method: String,
    /// The LoRA rank (1 to 256), present exactly when `method` is `lora`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u32>,
    /// Compute precision: `f32` or `bf16` (master weights are f32 either way).
    pub precision: String,
    /// `cpu` or `gpu`.
    pub device: String,
    /// `bitwise-on-recorded-tuple`: the outputs repeat bit for bit on the
    /// hardware/software tuple the run records (`kolm-enclave replay`).
    pub determinism: String,
}

/// The one determinism mode a fine-tune has today.
pub const DETERMINISM_BITWISE_ON_RECORDED_TUPLE: &str = "bitwise-on-recorded-tuple";

fn check_techniques(t: &Techniques) -> Result<(), ManifestError> {
    let one_of = |field: &str, value: &str, allowed: &[&str]| {
        if allowed.contains(&value) {
            Ok(())
        } else {
            Err(field_err(
                field,
                format!("{value:?} is not one of {}", allowed.join(", ")),
            ))
        }
    };
    one_of("job.techniques.method", &t.method, &["full", "lora"])?;
    one_of("job.techniques.precision", &t.precision, &["f32", "bf16"])?;
    one_of("job.techniques.device", &t.device, &["cpu", "gpu"])?;
    one_of(
        "job.techniques.determinism",
        &t.determinism,
        &[DETERMINISM_BITWISE_ON_RECORDED_TUPLE],
    )?;
    match (t.method.as_str(), t.lora_rank) {
        ("lora", Some(r)) if (1..=256).contains(&r) => Ok(()),
        ("lora", Some(r)) => Err(field_err(
            "job.techniques.lora_rank",
            format!("{r}: must be 1 to 256"),
        )),
        ("lora", None) => Err(field_err("job.techniques.lora_rank", "required with lora")),
        (_, Some(_)) => Err(field_err(
            "job.techniques.lora_rank",
            "only with method lora",
        )),
        _ => Ok(()),
    }
}

/// Steps 1 and 4: one input or output file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRecord {
    pub path: String,
    pub size: u64,
    pub sha256: Sha256Digest,
}

/// Step 3: where it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub platform: Platform,
    /// The launch measurement the platform reports (PCR0, MEASUREMENT, MRTD);
    /// null when the platform has none (`none`).
    pub measurement: Option<HexVec>,
    pub runtime: Runtime,
    /// Summary of the job sandbox; null until a sandboxed run fills it.
    pub sandbox: Option<SandboxSummary>,
    /// GPU/driver/library tuple; null for CPU-only runs.
    pub gpu: Option<GpuEnvironment>,
}

/// The runtime that produced the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    pub name: String,
    pub version: String,
}

/// What the sandbox recorded; the full record is the file named in `record`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSummary {
    pub profile: String,
    pub egress_blocked: bool,
    pub blocked_total: u64,
    pub record: FileRecord,
}

/// GPU, driver and library versions the job ran with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEnvironment {
    pub devices: Vec<String>,
    pub driver_version: String,
    pub cuda_version: String,
    pub libraries: BTreeMap<String, String>,
}

/// Governance files carried in every artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Governance {
    pub sbom: FileRecord,
    pub checksums: FileRecord,
}

/// Link to the enclave's previous receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainLink {
    pub previous: Option<ContentId>,
    pub sequence: u64,
}

/// The per-run receipt signing key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signer {
    pub alg: String,
    pub public_key: HexBytes<32>,
}

impl Manifest {
    /// Reads a manifest: canonical form, schema, then every semantic rule.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge { size });
        }
        let value = jcs::parse_canonical(bytes)?;
        // Dispatch on `schema` before the field parse: `evidence` is a v2
        // field, unknown to v1 (present in any form, even null, it is
        // rejected), required in v2.
        let version = value
            .get("schema")
            .and_then(serde_json::Value::as_str)
            .and_then(SpecVersion::of_manifest_schema);
        if version == Some(SpecVersion::V1) && value.get("evidence").is_some() {
            return Err(ManifestError::Schema(format!(
                "unknown field `evidence` in a {MANIFEST_SCHEMA_V1} manifest"
            )));
        }
        if version == Some(SpecVersion::V2)
            && value.get("evidence").is_none_or(serde_json::Value::is_null)
        {
            return Err(ManifestError::Schema(format!(
                "missing field `evidence` in a {MANIFEST_SCHEMA_V2} manifest"
            )));
        }
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|e| ManifestError::Schema(e.to_string()))?;
        manifest.check()?;
        Ok(manifest)
    }

    /// The receipt spec version, from `schema` (a manifest that was read
    /// or written always has one; a hand-built value with another schema
    /// is refused by every reader and writer).
    pub fn version(&self) -> Result<SpecVersion, ManifestError> {
        SpecVersion::of_manifest_schema(&self.schema).ok_or_else(|| {
            field_err(
                "schema",
                format!(
                    "expected {MANIFEST_SCHEMA_V1:?} or {MANIFEST_SCHEMA_V2:?}, found {:?}",
                    self.schema
                ),
            )
        })
    }

    /// The collateral records the manifest binds: `Some` for v2 (possibly
    /// empty), `None` for v1, which binds none.
    pub fn bound_collateral(&self) -> Option<&[FileRecord]> {
        self.evidence.as_ref().map(|e| e.collateral.as_slice())
    }

    /// The canonical bytes (after checking every rule, so the enclave can
    /// never write a manifest the verifier would refuse).
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, ManifestError> {
        self.check()?;
        Ok(jcs::to_canonical_vec(self)?)
    }

    /// CID of the canonical bytes.
    pub fn content_id(&self) -> Result<ContentId, ManifestError> {
        Ok(ContentId::for_json(&self.to_canonical_bytes()?))
    }

    /// Every zip entry the manifest names (outputs, governance, sandbox record).
    pub fn sealed_files(&self) -> Vec<&FileRecord> {
        let mut files: Vec<&FileRecord> = self.outputs.iter().collect();
        files.push(&self.governance.sbom);
        files.push(&self.governance.checksums);
        if let Some(sb) = &self.environment.sandbox {
            files.push(&sb.record);
        }
        files
    }

    /// Every rule of the manifest, part by part: what the spec version
    /// allows, the job, the files, the environment, the metrics, the chain
    /// and signer, then the sealed files' names.
    fn check(&self) -> Result<(), ManifestError> {
        let version = self.version()?;
        self.check_version_fields(version)?;
        self.check_job()?;
        self.check_files()?;
        self.check_environment(version)?;
        self.check_metrics()?;
        self.check_chain_and_signer()?;
        self.check_sealed_names()?;
        Ok(())
    }

    /// The fields that only one spec version has: `evidence` (v2, its
    /// collateral checked) and `job.techniques` (v2 only).
    fn check_version_fields(&self, version: SpecVersion) -> Result<(), ManifestError> {
        match (version, &self.evidence) {
            (SpecVersion::V1, None) => {}
            (SpecVersion::V1, Some(_)) => {
                return Err(field_err(
                    "evidence",
                    format!("not a field of {MANIFEST_SCHEMA_V1}"),
                ));
            }
            (SpecVersion::V2, None) => {
                return Err(field_err(
                    "evidence",
                    format!("required in {MANIFEST_SCHEMA_V2}"),
                ));
            }
            (SpecVersion::V2, Some(ev)) => {
                check_collateral(version, self.environment.platform, &ev.collateral)?;
            }
        }
        match (version, &self.job.techniques) {
            (_, None) => {}
            (SpecVersion::V1, Some(_)) => {
                return Err(field_err(
                    "job.techniques",
                    format!("not a field of {MANIFEST_SCHEMA_V1}"),
                ));
            }
            (SpecVersion::V2, Some(t)) => check_techniques(t)?,
        }
        Ok(())
    }

    /// `job`: its id and kind, its times in order, and exit status 0.
    fn check_job(&self) -> Result<(), ManifestError> {
        check_token("job.id", &self.job.id, 128)?;
        check_token("job.kind", &self.job.kind, 32)?;
        let started = timefmt::parse_utc_seconds(&self.job.started_at)
            .map_err(|e| field_err("job.started_at", e.to_string()))?;
        let finished = timefmt::parse_utc_seconds(&self.job.finished_at)
            .map_err(|e| field_err("job.finished_at", e.to_string()))?;
        if finished < started {
            return Err(field_err("job.finished_at", "earlier than job.started_at"));
        }
        // A job that failed (non-zero exit, or killed: the sandbox record's
        // exit) is never sealed, so a manifest records only success.
        if self.job.exit_code != 0 {
            return Err(field_err(
                "job.exit_code",
                format!(
                    "{}: only a job that exited with status 0 is sealed",
                    self.job.exit_code
                ),
            ));
        }
        Ok(())
    }

    /// `inputs`, `outputs` and the governance files at their fixed paths.
    fn check_files(&self) -> Result<(), ManifestError> {
        check_file_list("inputs", &self.inputs, None)?;
        check_file_list("outputs", &self.outputs, Some(OUTPUTS_PREFIX))?;
        check_file("governance.sbom", &self.governance.sbom)?;
        if self.governance.sbom.path != SBOM_PATH {
            return Err(field_err(
                "governance.sbom.path",
                format!("must be {SBOM_PATH:?}"),
            ));
        }
        check_file("governance.checksums", &self.governance.checksums)?;
        if self.governance.checksums.path != CHECKSUMS_PATH {
            return Err(field_err(
                "governance.checksums.path",
                format!("must be {CHECKSUMS_PATH:?}"),
            ));
        }
        Ok(())
    }

    /// `environment`: the measurement where the platform attests, the runtime,
    /// the sandbox and the GPU.
    fn check_environment(&self, version: SpecVersion) -> Result<(), ManifestError> {
        let env = &self.environment;
        // Every platform whose index carries an attestation names the
        // launch measurement that attestation reports (a v2 `simulated`
        // artifact: the sim document's PCR0).
        if crate::evidence::carries_attestation(version, env.platform) && env.measurement.is_none()
        {
            return Err(field_err(
                "environment.measurement",
                format!("required for platform {} in {}", env.platform, self.schema),
            ));
        }
        check_token("environment.runtime.name", &env.runtime.name, 64)?;
        check_version("environment.runtime.version", &env.runtime.version)?;
        if let Some(sb) = &env.sandbox {
            check_token("environment.sandbox.profile", &sb.profile, 32)?;
            check_file("environment.sandbox.record", &sb.record)?;
            if !sb.record.path.starts_with("governance/") {
                return Err(field_err(
                    "environment.sandbox.record.path",
                    "must be under governance/",
                ));
            }
            if sb.blocked_total > MAX_SAFE_INTEGER {
                return Err(field_err(
                    "environment.sandbox.blocked_total",
                    "over 2^53-1",
                ));
            }
        }
        if let Some(gpu) = &env.gpu {
            for (i, d) in gpu.devices.iter().enumerate() {
                check_text(&format!("environment.gpu.devices[{i}]"), d)?;
            }
            check_text("environment.gpu.driver_version", &gpu.driver_version)?;
            check_text("environment.gpu.cuda_version", &gpu.cuda_version)?;
            for (k, v) in &gpu.libraries {
                check_token("environment.gpu.libraries", k, 64)?;
                check_text(&format!("environment.gpu.libraries.{k}"), v)?;
            }
        }
        Ok(())
    }

    /// `metrics`: token names, finite values.
    fn check_metrics(&self) -> Result<(), ManifestError> {
        for (name, value) in &self.metrics {
            check_token("metrics", name, 64)?;
            if !value.is_finite() {
                return Err(field_err(format!("metrics.{name}"), "must be finite"));
            }
        }
        Ok(())
    }

    /// `chain` (a previous receipt iff the sequence is not 0) and `signer`.
    fn check_chain_and_signer(&self) -> Result<(), ManifestError> {
        match (&self.chain.previous, self.chain.sequence) {
            (None, 0) | (Some(_), 1..) => {}
            (None, n) => {
                return Err(field_err(
                    "chain",
                    format!("sequence {n} needs a previous receipt CID"),
                ));
            }
            (Some(_), 0) => return Err(field_err("chain", "sequence 0 cannot have a previous")),
        }
        if self.chain.sequence > MAX_SAFE_INTEGER {
            return Err(field_err("chain.sequence", "over 2^53-1"));
        }
        if self.signer.alg != "Ed25519" {
            return Err(field_err(
                "signer.alg",
                format!("expected \"Ed25519\", found {:?}", self.signer.alg),
            ));
        }
        Ok(())
    }

    /// The sealed files' zip names: unique, and no two colliding.
    fn check_sealed_names(&self) -> Result<(), ManifestError> {
        // No two sealed files may share a zip name, nor collide when
        // unpacked: equal ignoring case, or a file where another needs a
        // directory (docs/container.md, "Entries and names").
        let mut seen = BTreeSet::new();
        for f in self.sealed_files() {
            if !seen.insert(f.path.as_str()) {
                return Err(field_err("files", format!("{:?} listed twice", f.path)));
            }
        }
        crate::container::check_name_collisions(seen)
            .map_err(|e| field_err("files", e.to_string()))?;
        Ok(())
    }
}

/// `evidence.collateral` (v2): sorted, unique, each a collateral slot of
/// `platform` within its size cap.
fn check_collateral(
    version: SpecVersion,
    platform: Platform,
    files: &[FileRecord],
) -> Result<(), ManifestError> {
    check_file_list("evidence.collateral", files, Some("evidence/"))?;
    let slots = evidence_slots(version, platform);
    for (i, f) in files.iter().enumerate() {
        let at = format!("evidence.collateral[{i}]");
        match slots.iter().find(|s| s.path == f.path) {
            Some(s) if s.role == EvidenceRole::Collateral => {
                if f.size > s.max_bytes {
                    return Err(field_err(
                        format!("{at}.size"),
                        format!(
                            "{:?} is {} bytes, over its {}-byte cap",
                            f.path, f.size, s.max_bytes
                        ),
                    ));
                }
            }
            _ => {
                let names: Vec<&str> = slots
                    .iter()
                    .filter(|s| s.role == EvidenceRole::Collateral)
                    .map(|s| s.path)
                    .collect();
                return Err(field_err(
                    format!("{at}.path"),
                    format!(
                        "{:?} is not a collateral file of platform {platform} (collateral: {})",
                        f.path,
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
    Ok(())
}

fn check_token(field: &str, s: &str, max: usize) -> Result<(), ManifestError> {
    if s.is_empty() || s.len() > max {
        return Err(field_err(field, format!("length must be 1..={max}")));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(field_err(
            field,
            format!("character {c:?} not allowed (A-Z a-z 0-9 . _ -)"),
        ));
    }
    Ok(())
}

fn check_version(field: &str, s: &str) -> Result<(), ManifestError> {
    if s.is_empty() || s.len() > 64 || s.chars().any(|c| c.is_control() || c == ' ') {
        return Err(field_err(
            field,
            "must be 1..=64 printable characters without spaces",
        ));
    }
    Ok(())
}

fn check_text(field: &str, s: &str) -> Result<(), ManifestError> {
    if s.is_empty() || s.len() > 256 || s.chars().any(char::is_control) {
        return Err(field_err(field, "must be 1..=256 printable characters"));
    }
    Ok(())
}

fn check_file(field: &str, f: &FileRecord) -> Result<(), ManifestError> {
    crate::container::check_entry_name(&f.path)
        .map_err(|e| field_err(format!("{field}.path"), e.to_string()))?;
    if f.size > MAX_SAFE_INTEGER {
        return Err(field_err(format!("{field}.size"), "over 2^53-1"));
    }
    Ok(())
}

fn check_file_list(
    field: &str,
    files: &[FileRecord],
    prefix: Option<&str>,
) -> Result<(), ManifestError> {
    for (i, f) in files.iter().enumerate() {
        let at = format!("{field}[{i}]");
        check_file(&at, f)?;
        if let Some(p) = prefix
            && !f.path.starts_with(p)
        {
            return Err(field_err(
                format!("{at}.path"),
                format!("must start with {p:?}"),
            ));
        }
    }
    for pair in files.windows(2) {
        if let [a, b] = pair
            && a.path.as_bytes() >= b.path.as_bytes()
        {
            return Err(field_err(
                field,
                format!(
                    "not sorted by path or duplicate: {:?} then {:?}",
                    a.path, b.path
                ),
            ));
        }
    }
    Ok(())
}
