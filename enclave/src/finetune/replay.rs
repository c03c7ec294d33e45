//! `kolm-enclave replay ARTIFACT.zip --inputs DIR`: re-run a sealed
//! fine-tune from its sealed spec and the same input bytes, and check its
//! outputs against the artifact's, file by file, byte for byte.
//!
//! Equality is claimed only on the recorded hardware/software tuple
//! (`environment.json`, `kolm_format::environment`): on another one the report
//! names each element that differs and claims nothing.
//!
//! Wall-clock measurements cannot repeat: the evaluation's latency term
//! (generated tokens per second against the job's budget), the K-score
//! that weighs it, and the training throughput. They are the only values
//! allowed to differ, they are named field by field, and a file whose
//! other bytes differ is reported as different.
//!
//! The artifact and the inputs come from whoever runs the replay: the
//! verifier's lint set holds (no unwrap, no indexing, no unchecked
//! arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::io::BufReader;
use std::path::Path;

use kolm_format::container;
use kolm_format::manifest::{MAX_MANIFEST_BYTES, Manifest, OUTPUTS_PREFIX};
use kolm_format::receipt::{self, MAX_RECEIPT_BYTES};
use kolm_format::seal::{MANIFEST_PATH, RECEIPT_PATH};
use serde::Serialize;
use sha2::{Digest, Sha256};

use kolm_format::environment::{ENVIRONMENT_FILE, Tuple};

use crate::run::{self, SEALED_POLICY, SEALED_SPEC};

/// Largest sealed output read back.
const MAX_OUTPUT_BYTES: u64 = 4 << 30;

/// Why a replay could not be made (not: outputs differ).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error("artifact: {0}")]
    Artifact(ArtifactError),
    #[error("input {name}: {reason}")]
    Input { name: String, reason: InputError },
    #[error("re-running the job: {0}")]
    Run(crate::run::RunError),
}

/// Why the artifact cannot be replayed ([`ReplayError::Artifact`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactError {
    #[error("{path}: {error}")]
    Open { path: String, error: std::io::Error },
    /// Not a canonical container.
    #[error("{error}")]
    Container {
        error: Box<container::ContainerError>,
    },
    #[error("no {name} in the artifact")]
    Missing { name: String },
    #[error("{name}: {error}")]
    Entry {
        name: String,
        error: Box<container::ContainerError>,
    },
    #[error("{error}")]
    Manifest {
        error: Box<kolm_format::manifest::ManifestError>,
    },
    /// The receipt does not verify under the manifest's signer.
    #[error("receipt: {error}")]
    Receipt {
        error: Box<kolm_format::receipt::ReceiptError>,
    },
    #[error("job kind {kind:?}: replay re-runs fine-tune jobs")]
    NotFineTune { kind: String },
    #[error("{path} does not match its manifest record")]
    OutputMismatch { path: String },
    /// A runtime that replays seals the spec, the policy and the tuple.
    #[error("no {path}: not sealed by a runtime that replays")]
    NotSealed { path: String },
    #[error("{SEALED_SPEC} is not the spec the receipt names")]
    SpecMismatch,
    #[error("{SEALED_POLICY} is not the policy the receipt names")]
    PolicyMismatch,
    /// The recorded `environment.json` does not read strictly.
    #[error("{error}")]
    Tuple {
        error: kolm_format::environment::TupleError,
    },
    #[error("{error}")]
    SpecNotUtf8 { error: std::str::Utf8Error },
    #[error("sealed spec: {error}")]
    Spec {
        error: kolm_format::job_spec::JobSpecError,
    },
}

/// Why an input given to the replay was refused ([`ReplayError::Input`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    #[error("not among the receipt's inputs")]
    NotInReceipt,
    #[error("{error}")]
    Read { error: std::io::Error },
    /// Other bytes than the run's (both SHA-256s in hex).
    #[error("SHA-256 {found} differs from the receipt's {recorded}")]
    Digest { found: String, recorded: String },
}

impl From<ArtifactError> for ReplayError {
    fn from(e: ArtifactError) -> ReplayError {
        ReplayError::Artifact(e)
    }
}

// By hand, not `#[from]`: the cause is in the message, and a `source`
// would repeat it in a printed chain (anyhow's `{:#}`).
impl From<crate::run::RunError> for ReplayError {
    fn from(e: crate::run::RunError) -> ReplayError {
        ReplayError::Run(e)
    }
}

/// One output file's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum FileVerdict {
    /// Byte for byte.
    Equal,
    /// Equal once the named wall-clock fields are set aside.
    EqualExceptTiming { fields: Vec<String> },
    /// Different bytes beyond any timing field.
    Differs { first_difference: usize },
    /// In the artifact, not written by the replay.
    Missing,
    /// Written by the replay, not in the artifact.
    Extra,
}

/// A replay's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// `element: recorded -> now` for each element of the tuple that
    /// differs; empty on the recorded tuple.
    pub tuple_differences: Vec<String>,
    /// Per output file (sorted by path).
    pub files: Vec<(String, FileVerdict)>,
    /// True only on the recorded tuple with every file equal (timing
    /// fields aside).
    pub equal: bool,
}

/// The wall-clock fields of each file, as JSON pointers.
fn timing_fields(path: &str) -> &'static [&'static str] {
    match path {
        "eval-report.json" => &[
            "/latency/seconds",
            "/latency/tokens_per_s",
            "/latency/latency",
            "/k_score",
        ],
        "metrics.json" => &["/latency", "/k_score", "/train_tokens_per_s"],
        "model-card.json" => &[
            "/metrics/latency",
            "/metrics/k_score",
            "/metrics/train_tokens_per_s",
            "/k_score",
        ],
        _ => &[],
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

/// `replayed` with the timing fields of `path` copied from `recorded`;
/// `None` when either is not JSON.
fn with_recorded_timing(
    path: &str,
    recorded: &[u8],
    replayed: &[u8],
) -> Option<(serde_json::Value, serde_json::Value, Vec<String>)> {
    let rec: serde_json::Value = serde_json::from_slice(recorded).ok()?;
    let mut rep: serde_json::Value = serde_json::from_slice(replayed).ok()?;
    let mut moved = Vec::new();
    for pointer in timing_fields(path) {
        if let (Some(r), Some(slot)) = (rec.pointer(pointer), rep.pointer_mut(pointer))
            && r != slot
        {
            *slot = r.clone();
            moved.push((*pointer).to_owned());
        }
    }
    Some((rec, rep, moved))
}

/// Compares one file.
fn judge(path: &str, recorded: &[u8], replayed: &[u8], cards: &Cards) -> FileVerdict {
    if recorded == replayed {
        return FileVerdict::Equal;
    }
    if !timing_fields(path).is_empty()
        && let Some((rec, rep, moved)) = with_recorded_timing(path, recorded, replayed)
        && rec == rep
        && !moved.is_empty()
    {
        return FileVerdict::EqualExceptTiming { fields: moved };
    }
    if path == "model-card.md" {
        // The Markdown card is a rendering of the JSON card: equal when the
        // replayed card, its timing set aside, renders to the recorded bytes.
        if let Some(fields) = cards.markdown_equal_except_timing(recorded) {
            return FileVerdict::EqualExceptTiming { fields };
        }
    }
    FileVerdict::Differs {
        first_difference: first_difference(recorded, replayed),
    }
}

/// The two JSON cards, for judging the Markdown one.
struct Cards {
    recorded: Option<Vec<u8>>,
    replayed: Option<Vec<u8>>,
}

impl Cards {
    fn markdown_equal_except_timing(&self, recorded_md: &[u8]) -> Option<Vec<String>> {
        let (rec, rep) = (self.recorded.as_ref()?, self.replayed.as_ref()?);
        let (_, substituted, moved) = with_recorded_timing("model-card.json", rec, rep)?;
        let bytes = kolm_format::jcs::to_canonical_vec(&substituted).ok()?;
        let card = kolm_format::model_card::ModelCard::from_canonical_bytes(&bytes).ok()?;
        (card.to_markdown().as_bytes() == recorded_md)
            .then(|| moved.iter().map(|f| format!("(rendered) {f}")).collect())
    }
}

/// Reads the artifact, checks the inputs, re-runs the job, compares. The
/// binaries are found as for a run ([`run::RunRequest`]'s `runtime_exe`
/// and `jobs_exe`).
pub fn replay(
    artifact: &Path,
    inputs_dir: &Path,
    runtime_exe: Option<&Path>,
    jobs_exe: Option<&Path>,
) -> Result<ReplayReport, ReplayError> {
    let Opened { manifest, recorded } = read_artifact(artifact)?;
    let job = sealed_job(&manifest, &recorded)?;
    let inputs = read_inputs(&job.spec, &manifest, inputs_dir)?;

    let rerun = run::rerun_fine_tune(&job.spec, &job.policy, &inputs, runtime_exe, jobs_exe, None)?;
    let now_tuple: Option<Tuple> = rerun
        .files
        .iter()
        .find(|(p, _)| *p == format!("{OUTPUTS_PREFIX}{ENVIRONMENT_FILE}"))
        .and_then(|(_, b)| Tuple::from_json_bytes(b).ok());
    let tuple_differences = match &now_tuple {
        Some(t) => job.tuple.differences(t),
        None => vec!["environment.json: the replay wrote none".into()],
    };
    let files = compare(&recorded, &rerun.files);
    let equal = tuple_differences.is_empty()
        && files.iter().all(|(_, v)| {
            matches!(
                v,
                FileVerdict::Equal | FileVerdict::EqualExceptTiming { .. }
            )
        });
    Ok(ReplayReport {
        tuple_differences,
        files,
        equal,
    })
}

/// The artifact's manifest, its receipt checked against the manifest's
/// signer, of a fine-tune job; and every sealed output, each checked
/// against its manifest record.
fn read_artifact(artifact: &Path) -> Result<Opened, ReplayError> {
    let file = std::fs::File::open(artifact).map_err(|error| ArtifactError::Open {
        path: artifact.display().to_string(),
        error,
    })?;
    let mut f = BufReader::new(file);
    let zip = container::read_canonical_zip(&mut f).map_err(|error| ArtifactError::Container {
        error: Box::new(error),
    })?;
    let mut get = |name: &str, cap: u64| -> Result<Vec<u8>, ReplayError> {
        let e = zip.entry(name).ok_or_else(|| ArtifactError::Missing {
            name: name.to_owned(),
        })?;
        container::read_entry(&mut f, e, cap).map_err(|error| {
            ReplayError::Artifact(ArtifactError::Entry {
                name: name.to_owned(),
                error: Box::new(error),
            })
        })
    };
    let manifest_bytes = get(MANIFEST_PATH, MAX_MANIFEST_BYTES)?;
    let receipt_bytes = get(RECEIPT_PATH, MAX_RECEIPT_BYTES)?;
    let manifest = Manifest::from_canonical_bytes(&manifest_bytes).map_err(|error| {
        ArtifactError::Manifest {
            error: Box::new(error),
        }
    })?;
    let version = manifest
        .version()
        .map_err(|error| ArtifactError::Manifest {
            error: Box::new(error),
        })?;
    receipt::verify_for(
        version,
        &receipt_bytes,
        &manifest_bytes,
        &manifest.signer.public_key.0,
    )
    .map_err(|error| ArtifactError::Receipt {
        error: Box::new(error),
    })?;
    if manifest.job.kind != kolm_format::job_spec::FINE_TUNE_KIND {
        return Err(ArtifactError::NotFineTune {
            kind: manifest.job.kind.clone(),
        }
        .into());
    }
    // Every sealed output, checked against its manifest record.
    let mut recorded = Vec::new();
    for rec in &manifest.outputs {
        let bytes = get(&rec.path, MAX_OUTPUT_BYTES)?;
        if bytes.len() as u64 != rec.size || Sha256::digest(&bytes).as_slice() != rec.sha256.0 {
            return Err(ArtifactError::OutputMismatch {
                path: rec.path.clone(),
            }
            .into());
        }
        recorded.push((rec.path.clone(), bytes));
    }
    Ok(Opened { manifest, recorded })
}

/// An artifact as [`read_artifact`] read it.
struct Opened {
    manifest: Manifest,
    /// Every sealed output `(path, bytes)`, as the manifest lists them.
    recorded: Vec<(String, Vec<u8>)>,
}

/// What the runtime sealed of the job itself.
struct SealedJob {
    spec: Vec<u8>,
    policy: Vec<u8>,
    /// The recorded hardware/software tuple.
    tuple: Tuple,
}

/// The sealed spec and policy, each held to the hash the receipt names,
/// and the recorded tuple.
fn sealed_job(
    manifest: &Manifest,
    recorded: &[(String, Vec<u8>)],
) -> Result<SealedJob, ReplayError> {
    let sealed = |name: &str| -> Result<Vec<u8>, ReplayError> {
        let path = format!("{OUTPUTS_PREFIX}{name}");
        recorded
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| ArtifactError::NotSealed { path }.into())
    };
    let spec = sealed(SEALED_SPEC)?;
    if Sha256::digest(&spec).as_slice() != manifest.job.spec_sha256.0 {
        return Err(ArtifactError::SpecMismatch.into());
    }
    let policy = sealed(SEALED_POLICY)?;
    if Sha256::digest(&policy).as_slice() != manifest.job.policy_sha256.0 {
        return Err(ArtifactError::PolicyMismatch.into());
    }
    let tuple = Tuple::from_json_bytes(&sealed(ENVIRONMENT_FILE)?)
        .map_err(|error| ArtifactError::Tuple { error })?;
    Ok(SealedJob {
        spec,
        policy,
        tuple,
    })
}

/// The same input bytes, in the sealed spec's order, each held to the
/// receipt's record.
fn read_inputs(
    spec: &[u8],
    manifest: &Manifest,
    inputs_dir: &Path,
) -> Result<Vec<Vec<u8>>, ReplayError> {
    let spec_text =
        std::str::from_utf8(spec).map_err(|error| ArtifactError::SpecNotUtf8 { error })?;
    let parsed = kolm_format::job_spec::FineTuneSpec::from_toml_str(spec_text)
        .map_err(|error| ArtifactError::Spec { error })?;
    let mut inputs = Vec::new();
    for name in &parsed.inputs {
        let ierr = |reason: InputError| ReplayError::Input {
            name: name.clone(),
            reason,
        };
        let record = manifest
            .inputs
            .iter()
            .find(|r| &r.path == name)
            .ok_or_else(|| ierr(InputError::NotInReceipt))?;
        let bytes = std::fs::read(inputs_dir.join(name))
            .map_err(|error| ierr(InputError::Read { error }))?;
        if bytes.len() as u64 != record.size || Sha256::digest(&bytes).as_slice() != record.sha256.0
        {
            return Err(ierr(InputError::Digest {
                found: hex::encode(Sha256::digest(&bytes)),
                recorded: hex::encode(record.sha256.0),
            }));
        }
        inputs.push(bytes);
    }
    Ok(inputs)
}

/// Every job-written file's verdict, sorted by name; the runtime's sealed
/// spec and policy are not the job's.
fn compare(
    recorded: &[(String, Vec<u8>)],
    replayed: &[(String, Vec<u8>)],
) -> Vec<(String, FileVerdict)> {
    let strip = |p: &str| p.strip_prefix(OUTPUTS_PREFIX).map(str::to_owned);
    let runtime_files = [SEALED_SPEC, SEALED_POLICY];
    let rec_files: Vec<(String, &[u8])> = recorded
        .iter()
        .filter_map(|(p, b)| strip(p).map(|n| (n, b.as_slice())))
        .filter(|(n, _)| !runtime_files.contains(&n.as_str()))
        .collect();
    let rep_files: Vec<(String, &[u8])> = replayed
        .iter()
        .filter_map(|(p, b)| strip(p).map(|n| (n, b.as_slice())))
        .collect();
    let find = |list: &[(String, &[u8])], n: &str| {
        list.iter().find(|(p, _)| p == n).map(|(_, b)| b.to_vec())
    };
    let cards = Cards {
        recorded: find(&rec_files, "model-card.json"),
        replayed: find(&rep_files, "model-card.json"),
    };
    let mut names: Vec<&String> = rec_files.iter().chain(&rep_files).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            let v = match (find(&rec_files, n), find(&rep_files, n)) {
                (Some(a), Some(b)) => judge(n, &a, &b, &cards),
                (Some(_), None) => FileVerdict::Missing,
                (None, _) => FileVerdict::Extra,
            };
            (n.clone(), v)
        })
        .collect()
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    #[test]
    fn timing_fields_alone_may_differ() {
        let cards = Cards {
            recorded: None,
            replayed: None,
        };
        let a = br#"{"k_score":0.5,"latency":{"latency":0.2,"seconds":1.0,"tokens_per_s":10.0},"qa":{"accuracy":0.5}}"#;
        let b = br#"{"k_score":0.51,"latency":{"latency":0.3,"seconds":0.7,"tokens_per_s":14.0},"qa":{"accuracy":0.5}}"#;
        assert_eq!(
            judge("eval-report.json", a, b, &cards),
            FileVerdict::EqualExceptTiming {
                fields: vec![
                    "/latency/seconds".into(),
                    "/latency/tokens_per_s".into(),
                    "/latency/latency".into(),
                    "/k_score".into()
                ]
            }
        );
        let c = br#"{"k_score":0.51,"latency":{"latency":0.3,"seconds":0.7,"tokens_per_s":14.0},"qa":{"accuracy":0.6}}"#;
        assert!(matches!(
            judge("eval-report.json", a, c, &cards),
            FileVerdict::Differs { .. }
        ));
        // Other files have no timing fields.
        assert!(matches!(
            judge("train-log.jsonl", a, b, &cards),
            FileVerdict::Differs {
                first_difference: 14
            }
        ));
        assert_eq!(judge("x", a, a, &cards), FileVerdict::Equal);
    }
}
