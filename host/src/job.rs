//! The job file `kolm-host run JOB.toml` reads: the job spec the enclave
//! runs (sent as it is, byte for byte: the enclave parses it strictly and
//! the manifest hashes it), the inputs it names (files beside the job file,
//! or under `--inputs DIR`), and the policy (`--policy FILE`, else
//! `policy.toml` beside the job file).
//!
//! The host reads the spec with the enclave's own strict reader
//! ([`kolm_format::job_spec::JobSpec`], every kind) before anything
//! starts: a typo is named by key and line here, not after the enclave
//! started and every input was sent. The policy is parsed as strictly. The enclave still judges both
//! itself; the host's reading only makes mistakes cheap.

use std::io::Read;
use std::path::{Path, PathBuf};

use kolm_format::job_spec::{JobSpec, JobSpecError};
use sha2::{Digest, Sha256};

/// Largest job spec or policy file (the protocol's document limit).
pub const MAX_DOCUMENT_BYTES: u64 = 1024 * 1024;

/// Why a job could not be prepared. Each names the file and the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    // The OS error is part of the message and not a `source`: shown with
    // anyhow's `{:#}`, a source would print it twice.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: larger than {max} bytes")]
    TooLarge { path: String, max: u64 },
    #[error("{path}: not UTF-8 text")]
    NotText { path: String },
    #[error("{path}: {error}")]
    Spec { path: String, error: JobSpecError },
    #[error("policy {path}: {error}")]
    Policy {
        path: String,
        error: kolm_policy::PolicyError,
    },
    #[error("{path}: input {name:?} is not a plain file name (no directories, no leading dot)")]
    InputName { path: String, name: String },
    #[error("{path}: input {name:?} is listed twice")]
    DuplicateInput { path: String, name: String },
    #[error("input {name:?} ({path}) is not a regular file")]
    NotAFile { name: String, path: String },
    #[error("the inputs add up to {total} bytes, over the limit of {max} bytes")]
    InputsTooLarge { total: u64, max: u64 },
}

/// The inputs a spec names, read with the enclave's own strict reader
/// ([`kolm_format::job_spec::JobSpec`]); the message names the key and its
/// line.
fn spec_inputs(text: &str) -> Result<Vec<String>, JobSpecError> {
    JobSpec::from_toml_str(text).map(|spec| spec.inputs().to_vec())
}

/// One input as the host declares it to the enclave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub sha256: [u8; 32],
}

/// A job ready to submit.
#[derive(Debug, Clone)]
pub struct Job {
    pub spec_path: PathBuf,
    pub spec: Vec<u8>,
    pub policy_path: PathBuf,
    pub policy: Vec<u8>,
    pub inputs: Vec<Input>,
}

impl Job {
    /// Bytes of all inputs.
    pub fn input_bytes(&self) -> u64 {
        self.inputs.iter().map(|i| i.size).sum()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JobError + '_ {
    move |error| JobError::Io {
        path: path.display().to_string(),
        error,
    }
}

/// Reads a small document whole, refusing more than `max` bytes.
fn read_document(path: &Path, max: u64) -> Result<Vec<u8>, JobError> {
    let f = std::fs::File::open(path).map_err(io(path))?;
    let mut bytes = Vec::new();
    f.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > max {
        return Err(JobError::TooLarge {
            path: path.display().to_string(),
            max,
        });
    }
    Ok(bytes)
}

/// A plain file name: no separators, no `.`/`..`, no leading dot, no
/// control characters.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
}

/// Reads the job file, its policy and its inputs' sizes and digests.
/// `inputs_dir` defaults to the job file's directory; `policy` to
/// `policy.toml` there. Inputs over `max_input_bytes` in total are refused
/// before any is hashed.
pub fn load(
    spec_path: &Path,
    policy: Option<&Path>,
    inputs_dir: Option<&Path>,
    max_input_bytes: u64,
) -> Result<Job, JobError> {
    let spec = read_document(spec_path, MAX_DOCUMENT_BYTES)?;
    let shown = spec_path.display().to_string();
    let text = std::str::from_utf8(&spec).map_err(|_| JobError::NotText {
        path: shown.clone(),
    })?;
    let spec_names = spec_inputs(text).map_err(|error| JobError::Spec {
        path: shown.clone(),
        error,
    })?;
    let base = spec_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let policy_path = policy.map_or_else(|| base.join("policy.toml"), Path::to_path_buf);
    let policy = read_document(&policy_path, MAX_DOCUMENT_BYTES)?;
    // Parsed here as the enclave and the verifier parse it, so a broken
    // policy is named before anything starts.
    let policy_shown = policy_path.display().to_string();
    let policy_text = std::str::from_utf8(&policy).map_err(|_| JobError::NotText {
        path: policy_shown.clone(),
    })?;
    kolm_policy::Policy::from_toml_str(policy_text).map_err(|error| JobError::Policy {
        path: policy_shown,
        error,
    })?;
    let dir = inputs_dir.unwrap_or(base);

    let mut names = spec_names;
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(JobError::DuplicateInput {
            path: shown,
            name: w[0].clone(),
        });
    }
    let mut sized = Vec::new();
    let mut total = 0u64;
    for name in &names {
        if !plain_name(name) {
            return Err(JobError::InputName {
                path: shown,
                name: name.clone(),
            });
        }
        let path = dir.join(name);
        let meta = std::fs::metadata(&path).map_err(io(&path))?;
        if !meta.is_file() {
            return Err(JobError::NotAFile {
                name: name.clone(),
                path: path.display().to_string(),
            });
        }
        total = total.saturating_add(meta.len());
        sized.push((name.clone(), path));
    }
    if total > max_input_bytes {
        return Err(JobError::InputsTooLarge {
            total,
            max: max_input_bytes,
        });
    }
    let mut inputs = Vec::new();
    for (name, path) in sized {
        let (size, sha256) = hash_file(&path)?;
        inputs.push(Input {
            name,
            path,
            size,
            sha256,
        });
    }
    Ok(Job {
        spec_path: spec_path.to_path_buf(),
        spec,
        policy_path,
        policy,
        inputs,
    })
}

/// Size and SHA-256 of a file, streamed.
pub fn hash_file(path: &Path) -> Result<(u64, [u8; 32]), JobError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size = size.saturating_add(n as u64);
    }
    Ok((size, h.finalize().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY_POLICY: &str = include_str!("../../examples/tiny/policy.toml");

    fn job_dir(spec: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("job.toml"), spec).unwrap();
        std::fs::write(d.path().join("policy.toml"), TINY_POLICY).unwrap();
        d
    }

    #[test]
    fn inputs_beside_the_job_are_hashed_and_the_spec_sent_as_is() {
        let spec = "id = \"x\"\nkind = \"demo\"\ninputs = [\"b.txt\", \"a.txt\"]\n";
        let d = job_dir(spec);
        std::fs::write(d.path().join("a.txt"), b"abc").unwrap();
        std::fs::write(d.path().join("b.txt"), b"").unwrap();
        let job = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap();
        assert_eq!(job.spec, spec.as_bytes());
        let names: Vec<_> = job.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["a.txt", "b.txt"]);
        assert_eq!(job.inputs[0].size, 3);
        assert_eq!(
            hex::encode(job.inputs[0].sha256),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(job.input_bytes(), 3);
    }

    #[test]
    fn bad_jobs_fail_naming_the_file_and_the_problem() {
        let d = job_dir("id = \"x\"\nkind = \"demo\"\ninputs = [\"../etc/passwd\"]\n");
        let e = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap_err();
        assert!(matches!(e, JobError::InputName { .. }), "{e}");
        let d = job_dir("id = \"x\"\nkind = \"demo\"\ninputs = [\"a\", \"a\"]\n");
        let e = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        let d = job_dir("id = \"x\"\nkind = \"demo\"\ninputs = [\"missing.txt\"]\n");
        let e = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("missing.txt"), "{e}");
        let d = job_dir("id = \"x\"\nkind = \"demo\"\ninputs = 3\n");
        let e = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap_err();
        assert!(matches!(e, JobError::Spec { .. }), "{e}");
        let d = job_dir("id = \"x\"\nkind = \"demo\"\ninputs = [\"big\"]\n");
        std::fs::write(d.path().join("big"), vec![0u8; 100]).unwrap();
        let e = load(&d.path().join("job.toml"), None, None, 99).unwrap_err();
        assert!(
            matches!(
                e,
                JobError::InputsTooLarge {
                    total: 100,
                    max: 99
                }
            ),
            "{e}"
        );
        let e = load(
            &d.path().join("job.toml"),
            Some(&d.path().join("nope.toml")),
            None,
            1000,
        )
        .unwrap_err();
        assert!(e.to_string().contains("nope.toml"), "{e}");
    }

    /// The tiny example's spec with `old` replaced by `new` (which must be
    /// there: no silent no-op edit).
    fn tiny_with(old: &str, new: &str) -> String {
        let spec = include_str!("../../examples/tiny/job.toml");
        assert!(spec.contains(old), "{old:?} is not in the tiny spec");
        spec.replacen(old, new, 1)
    }

    fn line_of(spec: &str, needle: &str) -> usize {
        spec.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn a_fine_tune_spec_is_read_strictly_naming_file_key_and_line() {
        // An unknown key (a typo of `lr`).
        let spec = tiny_with("lr = 5e-3", "lrate = 5e-3");
        let d = job_dir(&spec);
        let path = d.path().join("job.toml");
        let e = load(&path, None, None, 1 << 30).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
        assert!(e.contains("lrate"), "{e}");
        assert!(
            e.contains(&format!("line {}", line_of(&spec, "lrate"))),
            "{e}"
        );
        // A value out of range: the typed layer names the dotted key.
        let spec = tiny_with("batch = 8", "batch = 0");
        let d = job_dir(&spec);
        let e = load(&d.path().join("job.toml"), None, None, 1 << 30)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`train.batch`"), "{e}");
        assert!(
            e.contains(&format!("line {}", line_of(&spec, "batch = 0"))),
            "{e}"
        );
    }

    #[test]
    fn a_demo_spec_has_the_enclaves_closed_shape() {
        for (spec, says) in [
            ("id = \"x\"\nkind = \"demo\"\ninputs = []\nfoo = 1\n", "foo"),
            ("id = \"x\"\nkind = \"dmeo\"\ninputs = []\n", "dmeo"),
            ("id = \"x\"\ninputs = []\n", "`kind`"),
            (
                "id = \"x\"\nkind = \"demo\"\ninputs = []\nlinger_seconds = 1\n",
                "linger_seconds",
            ),
        ] {
            let d = job_dir(spec);
            let e = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap_err();
            assert!(matches!(e, JobError::Spec { .. }), "{e}");
            assert!(e.to_string().contains(says), "{spec}: {e}");
        }
    }

    #[test]
    fn a_broken_policy_is_named_before_anything_starts() {
        let d = job_dir("id = \"x\"\nkind = \"demo\"\ninputs = []\n");
        std::fs::write(
            d.path().join("policy.toml"),
            format!("bogus = 1\n{TINY_POLICY}"),
        )
        .unwrap();
        let e = load(&d.path().join("job.toml"), None, None, 1 << 20).unwrap_err();
        assert!(matches!(e, JobError::Policy { .. }), "{e}");
        assert!(e.to_string().contains("policy.toml"), "{e}");
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
