//! The job side of a sealed run: what `kolm-enclave __job` does inside the
//! sandbox, and how the supervisor collects what it wrote.
//!
//! The job reads its inputs from a read-only directory the supervisor staged
//! (exactly the bytes whose hashes go into the manifest) and writes its
//! files into an output directory: `metrics.json` (a flat JSON object of
//! finite numbers) and anything else, sealed under `outputs/`. The job has
//! no network, no key and no view of the supervisor; the supervisor treats
//! everything it wrote as untrusted input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kolm_format::container;
use kolm_format::manifest::OUTPUTS_PREFIX;

use crate::demo_job;

/// Name of the metrics file in the output directory.
pub const METRICS_FILE: &str = "metrics.json";
/// Largest single input the demo job reads.
const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;
/// Most files a job may leave in its output directory.
pub const MAX_OUTPUT_FILES: usize = 10_000;
/// Most bytes a job may leave in its output directory, all files together.
pub const MAX_OUTPUT_BYTES: u64 = 1024 * 1024 * 1024;

/// Why the job (inside the sandbox) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    #[error("job kind {0:?} is not supported (supported: \"demo\")")]
    Kind(String),
    #[error("input {path}: {reason}")]
    Input { path: String, reason: String },
    #[error("demo job: {0}")]
    Demo(#[from] demo_job::DemoError),
    #[error("writing output {path}: {reason}")]
    Output { path: String, reason: String },
}

/// Runs job `kind` on `inputs` (names under `input_dir`, in spec order),
/// writing into `output_dir`.
pub fn run_job(
    kind: &str,
    input_dir: &Path,
    inputs: &[String],
    eval_every: u32,
    output_dir: &Path,
) -> Result<(), JobError> {
    if kind != "demo" {
        return Err(JobError::Kind(kind.to_string()));
    }
    let mut text = String::new();
    for name in inputs {
        let err = |reason: String| JobError::Input {
            path: name.clone(),
            reason,
        };
        let data = read_capped(&input_dir.join(name), MAX_INPUT_BYTES).map_err(err)?;
        let s = std::str::from_utf8(&data).map_err(|e| err(format!("not UTF-8: {e}")))?;
        text.push_str(s);
    }
    let out = demo_job::run(&text, eval_every)?;
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

fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut data = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| e.to_string())?;
    if data.len() as u64 > cap {
        return Err(format!("larger than the {cap}-byte cap"));
    }
    Ok(data)
}

/// Why the supervisor refused what a job left behind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    #[error("output {path}: {reason}")]
    Entry { path: String, reason: String },
    #[error("output directory holds more than {MAX_OUTPUT_FILES} files")]
    TooManyFiles,
    #[error("output directory holds more than {MAX_OUTPUT_BYTES} bytes")]
    TooLarge,
    #[error("metrics: {0}")]
    Metrics(String),
}

/// What a job produced, read once by the supervisor: the bytes hashed are
/// the bytes sealed.
#[derive(Debug, Clone)]
pub struct Collected {
    /// `(outputs/<relative path>, bytes)`, sorted by path.
    pub files: Vec<(String, Vec<u8>)>,
    pub metrics: BTreeMap<String, f64>,
}

/// Reads every regular file under `dir` (no symlinks, devices or other
/// types; capped in number and size) and the metrics.
pub fn collect_outputs(dir: &Path) -> Result<Collected, CollectError> {
    let mut files = Vec::new();
    let mut total: u64 = 0;
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel_dir) = stack.pop() {
        let abs = dir.join(&rel_dir);
        let entry_err = |reason: String| CollectError::Entry {
            path: rel_dir.display().to_string(),
            reason,
        };
        let mut entries = std::fs::read_dir(&abs)
            .map_err(|e| entry_err(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| entry_err(e.to_string()))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let rel = rel_dir.join(e.file_name());
            let name = rel
                .to_str()
                .ok_or_else(|| CollectError::Entry {
                    path: rel.display().to_string(),
                    reason: "name is not UTF-8".into(),
                })?
                .to_string();
            let err = |reason: String| CollectError::Entry {
                path: name.clone(),
                reason,
            };
            // symlink_metadata: a link is reported as a link, never followed.
            let meta = e.metadata().map_err(|x| err(x.to_string()))?;
            let ft = meta.file_type();
            if ft.is_dir() {
                stack.push(rel);
            } else if ft.is_file() {
                if files.len() >= MAX_OUTPUT_FILES {
                    return Err(CollectError::TooManyFiles);
                }
                let entry = format!("{OUTPUTS_PREFIX}{name}");
                container::check_entry_name(&entry).map_err(|x| err(x.to_string()))?;
                let room = MAX_OUTPUT_BYTES.saturating_sub(total);
                let bytes =
                    read_capped(&dir.join(&rel), room).map_err(|_| CollectError::TooLarge)?;
                total = total.saturating_add(bytes.len() as u64);
                files.push((entry, bytes));
            } else {
                return Err(err("not a regular file or directory".into()));
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let metrics_entry = format!("{OUTPUTS_PREFIX}{METRICS_FILE}");
    let metrics_bytes = files
        .iter()
        .find(|(p, _)| *p == metrics_entry)
        .map(|(_, b)| b.as_slice())
        .ok_or_else(|| CollectError::Metrics(format!("the job wrote no {METRICS_FILE}")))?;
    let metrics: BTreeMap<String, f64> =
        serde_json::from_slice(metrics_bytes).map_err(|e| CollectError::Metrics(e.to_string()))?;
    if let Some((k, _)) = metrics.iter().find(|(_, v)| !v.is_finite()) {
        return Err(CollectError::Metrics(format!("{k} is not finite")));
    }
    Ok(Collected { files, metrics })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_job_round_trips_through_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (input, output) = (dir.path().join("in"), dir.path().join("out"));
        std::fs::create_dir_all(&input).unwrap();
        std::fs::create_dir_all(&output).unwrap();
        std::fs::write(input.join("c.txt"), "abab\nabab\nabab\nbaba\n").unwrap();
        run_job("demo", &input, &["c.txt".into()], 2, &output).unwrap();
        let got = collect_outputs(&output).unwrap();
        let in_process = demo_job::run("abab\nabab\nabab\nbaba\n", 2).unwrap();
        assert_eq!(got.metrics, in_process.metrics);
        let mut want = in_process.files.clone();
        want.sort();
        assert_eq!(got.files, want);
    }

    #[test]
    fn collection_refuses_links_and_missing_metrics() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), b"x").unwrap();
        assert!(matches!(
            collect_outputs(dir.path()),
            Err(CollectError::Metrics(_))
        ));
        std::fs::write(dir.path().join(METRICS_FILE), b"{\"m\": 1.0}").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("leak")).unwrap();
        assert!(matches!(
            collect_outputs(dir.path()),
            Err(CollectError::Entry { .. })
        ));
        std::fs::remove_file(dir.path().join("leak")).unwrap();
        let got = collect_outputs(dir.path()).unwrap();
        assert_eq!(got.metrics["m"], 1.0);
        assert_eq!(got.files.len(), 2);
    }

    #[test]
    fn other_kinds_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            run_job("train", dir.path(), &[], 2, dir.path()),
            Err(JobError::Kind(_))
        ));
    }
}
