//! One job, as `kolm-jobs` runs it inside the sandbox: read the staged spec
//! (the bytes the supervisor already read and checked, with the same
//! reader), run the job of its kind, write its files into the output
//! directory: `metrics.json` (a flat JSON object of finite numbers) and
//! anything else, sealed under `outputs/`.
//!
//! The job reads its inputs from a read-only directory the supervisor staged
//! (exactly the bytes whose hashes go into the manifest). It has no network,
//! no key and no view of the supervisor; the supervisor treats everything
//! it wrote as untrusted input.

use std::collections::BTreeMap;
use std::path::Path;

use kolm_format::job_io::{JobArgs, METRICS_FILE};
use kolm_format::job_spec::{DemoSpec, JobSpec, JobSpecError, SelftestSpec};
use kolm_format::manifest::OUTPUTS_PREFIX;

use crate::finetune::FineTuneError;
use crate::{demo_job, selftest_job};

/// Largest staged spec read.
const MAX_SPEC_BYTES: u64 = 1 << 20;
/// Largest single input the demo job reads.
const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// Why the job failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    #[error("reading the staged spec {path}: {reason}")]
    SpecFile { path: String, reason: ReadError },
    #[error("job spec: {0}")]
    Spec(JobSpecError),
    #[error("egress-selftest: {0}")]
    Selftest(std::io::Error),
    #[error("input {path}: {reason}")]
    Input { path: String, reason: ReadError },
    #[error("demo job: {0}")]
    Demo(demo_job::DemoError),
    #[error("writing output {path}: {reason}")]
    Output { path: String, reason: String },
    #[error("{0}")]
    FineTune(FineTuneError),
}

/// Runs the job the staged spec describes.
pub fn run(args: &JobArgs) -> Result<(), JobError> {
    let spec_err = |reason: ReadError| JobError::SpecFile {
        path: args.spec.display().to_string(),
        reason,
    };
    let bytes = read_capped(&args.spec, MAX_SPEC_BYTES).map_err(spec_err)?;
    let text = std::str::from_utf8(&bytes).map_err(|error| spec_err(ReadError::Utf8 { error }))?;
    match JobSpec::from_toml_str(text).map_err(JobError::Spec)? {
        JobSpec::Demo(spec) => demo(&spec, &args.input_dir, &args.output_dir),
        JobSpec::EgressSelftest(spec) => selftest(&spec, &args.output_dir),
        JobSpec::FineTune(spec) => {
            crate::finetune::job::run(args, &bytes, &spec).map_err(JobError::FineTune)
        }
    }
}

/// The demo job: the corpus is the spec's inputs, concatenated in order.
fn demo(spec: &DemoSpec, input_dir: &Path, output_dir: &Path) -> Result<(), JobError> {
    let mut text = String::new();
    for name in &spec.inputs {
        let err = |reason: ReadError| JobError::Input {
            path: name.clone(),
            reason,
        };
        let data = read_capped(&input_dir.join(name), MAX_INPUT_BYTES).map_err(err)?;
        let s = std::str::from_utf8(&data).map_err(|error| err(ReadError::NotUtf8 { error }))?;
        text.push_str(s);
    }
    let out = demo_job::run(&text, spec.eval_every).map_err(JobError::Demo)?;
    for (path, bytes) in out.files {
        let rel = path.strip_prefix(OUTPUTS_PREFIX).unwrap_or(&path);
        write_output(output_dir, rel, &bytes)?;
    }
    let metrics = serde_json::to_vec_pretty(&out.metrics).map_err(|e| JobError::Output {
        path: METRICS_FILE.into(),
        reason: e.to_string(),
    })?;
    // `outputs/metrics.json` is both a sealed output and the metrics the
    // supervisor reads; the demo already writes it.
    if !output_dir.join(METRICS_FILE).exists() {
        write_output(output_dir, METRICS_FILE, &metrics)?;
    }
    Ok(())
}

/// The `egress-selftest` job: every probe, its results and its metrics.
fn selftest(spec: &SelftestSpec, output_dir: &Path) -> Result<(), JobError> {
    let probes = selftest_job::run_probes();
    let refused = probes
        .iter()
        .filter(|p| p.result.starts_with("refused"))
        .count();
    let report = serde_json::to_vec_pretty(&probes).map_err(|e| JobError::Output {
        path: "selftest.json".into(),
        reason: e.to_string(),
    })?;
    write_output(output_dir, "selftest.json", &report)?;
    let metrics: BTreeMap<&str, f64> = BTreeMap::from([
        ("probes", probes.len() as f64),
        ("refused", refused as f64),
        ("reached", (probes.len() - refused) as f64),
    ]);
    let metrics = serde_json::to_vec_pretty(&metrics).map_err(|e| JobError::Output {
        path: METRICS_FILE.into(),
        reason: e.to_string(),
    })?;
    write_output(output_dir, METRICS_FILE, &metrics)?;
    if spec.linger_seconds > 0 {
        selftest_job::linger(spec.linger_seconds).map_err(JobError::Selftest)?;
    }
    Ok(())
}

fn write_output(dir: &Path, rel: &str, bytes: &[u8]) -> Result<(), JobError> {
    let err = |e: std::io::Error| JobError::Output {
        path: rel.to_string(),
        reason: e.to_string(),
    };
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::write(&path, bytes).map_err(err)
}

/// Why a staged file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    // The OS error is the message, not a `source` (no doubled text).
    #[error("{error}")]
    Io { error: std::io::Error },
    #[error("larger than the {cap}-byte cap")]
    TooLarge { cap: u64 },
    /// The staged spec is not UTF-8 (the supervisor checked it: a staged
    /// file that changed).
    #[error("{error}")]
    Utf8 { error: std::str::Utf8Error },
    /// A demo input that is not UTF-8 text.
    #[error("not UTF-8: {error}")]
    NotUtf8 { error: std::str::Utf8Error },
}

fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|error| ReadError::Io { error })?;
    let mut data = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|error| ReadError::Io { error })?;
    if data.len() as u64 > cap {
        return Err(ReadError::TooLarge { cap });
    }
    Ok(data)
}
