//! One sealed run: read the job spec and inputs, enforce the enclave policy,
//! run the job, build the manifest, obtain evidence bound to it, sign and seal
//! the artifact, then advance the receipt chain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kolm_policy::Policy;
use kolm_verifier::artifact::{self, EvidenceBundle};
use kolm_verifier::binding;
use kolm_verifier::container::{self, EntryData};
use kolm_verifier::content_id::ContentId;
use kolm_verifier::hexbytes::HexBytes;
use kolm_verifier::manifest::{
    CHECKSUMS_PATH, ChainLink, Environment, FileRecord, Governance, JobRecord, MANIFEST_SCHEMA_V1,
    Manifest, Runtime, SBOM_PATH, Signer,
};
use kolm_verifier::timefmt;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::attest::AttestationProvider;
use crate::chain_state::ChainState;
use crate::{demo_job, sbom};

/// Largest input file the demo job reads into memory.
const MAX_DEMO_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// Why a run failed. Nothing is written when it does.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("job spec: {0}")]
    Spec(String),
    #[error("policy: {0}")]
    Policy(String),
    #[error("policy forbids this run: {0}")]
    PolicyViolation(String),
    #[error("input {path}: {reason}")]
    Input { path: String, reason: String },
    #[error("job failed: {0}")]
    Job(String),
    #[error("attestation: {0}")]
    Attest(#[from] crate::attest::AttestError),
    #[error("sbom: {0}")]
    Sbom(#[from] sbom::SbomError),
    #[error("sealing: {0}")]
    Seal(#[from] artifact::SealError),
    #[error("manifest: {0}")]
    Manifest(#[from] kolm_verifier::manifest::ManifestError),
    #[error("chain state: {0}")]
    Chain(#[from] crate::chain_state::ChainStateError),
    #[error("signing key: {0}")]
    Key(String),
    #[error("clock: {0}")]
    Clock(String),
}

/// The job spec file (TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub id: String,
    pub kind: String,
    pub inputs: Vec<String>,
    #[serde(default)]
    pub eval_every: Option<u32>,
}

/// Everything a run needs.
#[derive(Debug)]
pub struct RunRequest<'a> {
    pub spec: &'a [u8],
    pub policy: &'a [u8],
    pub input_dir: &'a Path,
    /// Directory the artifact and chain state are written to.
    pub out_dir: &'a Path,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub artifact: PathBuf,
    pub cid: ContentId,
    pub sequence: u64,
    pub metrics: BTreeMap<String, f64>,
    /// Quality gate violation, if the enclave's own policy gate failed (the
    /// artifact is still sealed so the failure is on record).
    pub gate_failure: Option<String>,
}

/// Name of the chain state file in the output directory.
pub const CHAIN_STATE_FILE: &str = "chain-state.json";

/// Runs and seals one job.
pub fn run(
    req: &RunRequest<'_>,
    provider: &dyn AttestationProvider,
) -> Result<RunResult, RunError> {
    let started = now()?;
    let spec_text = std::str::from_utf8(req.spec).map_err(|e| RunError::Spec(e.to_string()))?;
    let spec: JobSpec = toml::from_str(spec_text).map_err(|e| RunError::Spec(e.to_string()))?;
    let policy_text =
        std::str::from_utf8(req.policy).map_err(|e| RunError::Policy(e.to_string()))?;
    let policy = Policy::from_toml_str(policy_text).map_err(|e| RunError::Policy(e.to_string()))?;
    policy
        .check_platform(provider.platform())
        .map_err(|v| RunError::PolicyViolation(v.to_string()))?;

    let mut inputs = Vec::new();
    let mut input_bytes = Vec::new();
    for name in &spec.inputs {
        container::check_entry_name(name).map_err(|e| RunError::Input {
            path: name.clone(),
            reason: e.to_string(),
        })?;
        let path = req.input_dir.join(name);
        let data = read_capped(&path, MAX_DEMO_INPUT_BYTES).map_err(|reason| RunError::Input {
            path: name.clone(),
            reason,
        })?;
        inputs.push(FileRecord {
            path: name.clone(),
            size: data.len() as u64,
            sha256: HexBytes(Sha256::digest(&data).into()),
        });
        input_bytes.push(data);
    }
    inputs.sort_by(|a, b| a.path.cmp(&b.path));
    if inputs
        .windows(2)
        .any(|w| w.first().map(|f| &f.path) == w.get(1).map(|f| &f.path))
    {
        return Err(RunError::Spec("an input is listed twice".into()));
    }

    let output = match spec.kind.as_str() {
        "demo" => {
            let mut text = String::new();
            for data in &input_bytes {
                text.push_str(
                    std::str::from_utf8(data)
                        .map_err(|e| RunError::Job(format!("input is not UTF-8: {e}")))?,
                );
            }
            demo_job::run(&text, spec.eval_every.unwrap_or(7))
                .map_err(|e| RunError::Job(e.to_string()))?
        }
        other => {
            return Err(RunError::Spec(format!(
                "job kind {other:?} is not supported by this runtime version (supported: \"demo\")"
            )));
        }
    };
    let gate_failure = policy
        .check_quality(&output.metrics)
        .err()
        .map(|v| v.to_string());
    let finished = now()?;
    let finished_text = timefmt::format_utc_seconds(finished).map_err(RunError::Clock)?;

    // Governance files.
    let sbom_bytes = sbom::runtime_sbom(&finished_text)?;
    let mut files: Vec<(String, EntryData)> = output
        .files
        .into_iter()
        .map(|(p, b)| (p, EntryData::Bytes(b)))
        .collect();
    files.push((SBOM_PATH.to_string(), EntryData::Bytes(sbom_bytes)));
    let mut records = files
        .iter()
        .map(|(p, d)| artifact::file_record(p, d))
        .collect::<Result<Vec<_>, _>>()?;
    let sums = artifact::checksums_text(&records.iter().collect::<Vec<_>>());
    let sums_record = artifact::file_record(CHECKSUMS_PATH, &EntryData::Bytes(sums.clone()))?;
    files.push((CHECKSUMS_PATH.to_string(), EntryData::Bytes(sums)));
    let sbom_record = records
        .iter()
        .position(|r| r.path == SBOM_PATH)
        .map(|i| records.remove(i))
        .ok_or_else(|| RunError::Job("sbom record lost".into()))?;
    records.sort_by(|a, b| a.path.cmp(&b.path));

    // A fresh key per run; it never leaves this process.
    let rng = SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|e| RunError::Key(e.to_string()))?;
    let key =
        Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|e| RunError::Key(e.to_string()))?;
    let mut public_key = [0u8; 32];
    public_key.copy_from_slice(key.public_key().as_ref());

    let state_path = req.out_dir.join(CHAIN_STATE_FILE);
    let state = ChainState::load(&state_path)?;
    let manifest = Manifest {
        schema: MANIFEST_SCHEMA_V1.to_string(),
        job: JobRecord {
            id: spec.id.clone(),
            kind: spec.kind.clone(),
            spec_sha256: HexBytes(Sha256::digest(req.spec).into()),
            policy_sha256: HexBytes(Sha256::digest(req.policy).into()),
            started_at: timefmt::format_utc_seconds(started).map_err(RunError::Clock)?,
            finished_at: finished_text,
            exit_code: 0,
        },
        inputs,
        environment: Environment {
            platform: provider.platform(),
            measurement: provider.measurement().map(kolm_verifier::hexbytes::HexVec),
            runtime: Runtime {
                name: "kolm-enclave".to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            sandbox: None,
            gpu: None,
        },
        outputs: records,
        metrics: output.metrics.clone(),
        governance: Governance {
            sbom: sbom_record,
            checksums: sums_record,
        },
        chain: ChainLink {
            previous: state.previous,
            sequence: state.sequence,
        },
        signer: Signer {
            alg: "Ed25519".to_string(),
            public_key: HexBytes(public_key),
        },
    };
    let cid = manifest.content_id()?;
    let evidence: EvidenceBundle = provider.attest(&binding::report_data(&cid))?;

    std::fs::create_dir_all(req.out_dir).map_err(|e| RunError::Input {
        path: req.out_dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let artifact_path = req
        .out_dir
        .join(format!("{}-{}.zip", spec.id, state.sequence));
    let sealed = artifact::seal(&artifact_path, &manifest, files, &evidence, &key)?;
    state.advance(sealed).store(&state_path)?;
    Ok(RunResult {
        artifact: artifact_path,
        cid: sealed,
        sequence: state.sequence,
        metrics: output.metrics,
        gate_failure,
    })
}

fn now() -> Result<OffsetDateTime, RunError> {
    Ok(OffsetDateTime::now_utc())
}

fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut data = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if data.len() as u64 > cap {
        return Err(format!("larger than the {cap}-byte cap"));
    }
    Ok(data)
}
