//! Where the host puts an artifact it received. The enclave is a peer the
//! host does not trust, so nothing it says becomes a path: the file name
//! is the host's own choice (the job id of the spec the host sent, checked
//! to be a plain name, and the receipt's chain sequence, a number), an
//! existing file is never replaced without `--force`, and an artifact the
//! host rejects is never left at the path of an accepted one.
//!
//! The bytes are first written to a temp file beside the destination
//! (fsynced), verified there, and only then linked into place without
//! replacing anything (`persist_noclobber`), so a crash, a full disk or a
//! race with another run leaves either the old file or the new one, never
//! half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use kolm_format::manifest::Manifest;

use crate::job::Job;

/// Why an artifact could not be put in place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    #[error("{path} exists: not replaced (pass --force to replace it, or choose another --out)")]
    Exists { path: String },
    #[error("writing {path}: {error}")]
    Io { path: String, error: std::io::Error },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.display().to_string(),
        // tempfile's errors repeat the path: the OS error alone, once.
        error: source
            .raw_os_error()
            .map_or(source, std::io::Error::from_raw_os_error),
    }
}

/// The most characters of a job id used in a file name.
const MAX_ID_CHARS: usize = 64;

/// `id` as a file-name stem: itself when it is a plain name (ASCII
/// letters, digits, `.`, `_`, `-`; not starting with `.`; at most 64
/// characters), else `job`.
pub fn safe_stem(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if plain { id.to_string() } else { "job".into() }
}

/// The job id of the spec the host sends (its top-level `id`), if it has
/// one.
pub fn spec_id(spec: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(spec).ok()?;
    let table: toml::Table = toml::from_str(text).ok()?;
    table.get("id")?.as_str().map(str::to_string)
}

/// The default artifact path: `<dir>/<job id>-<sequence>.zip`.
pub fn default_path(dir: &Path, job: &Job, sequence: Option<u64>) -> PathBuf {
    let stem = safe_stem(&spec_id(&job.spec).unwrap_or_default());
    let seq = sequence.map_or_else(|| "unverified".to_string(), |s| s.to_string());
    dir.join(format!("{stem}-{seq}.zip"))
}

/// `path` with `.rejected` before its extension (`a/x-1.zip` ->
/// `a/x-1.rejected.zip`).
pub fn rejected_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "artifact".into());
    path.with_file_name(format!("{stem}.rejected.zip"))
}

/// `path`, or, when it exists, the first of `<stem>.2.zip`,
/// `<stem>.3.zip`, ... that does not.
pub fn first_free(path: &Path) -> PathBuf {
    if !path.exists() {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "artifact".into());
    (2u32..)
        .map(|n| path.with_file_name(format!("{stem}.{n}.zip")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| path.to_path_buf())
}

/// Received bytes in a temp file beside their destination, fsynced, not yet
/// in place.
#[derive(Debug)]
pub struct Staged {
    tmp: tempfile::NamedTempFile,
}

impl Staged {
    /// Writes `bytes` to a hidden temp file in `dir`.
    pub fn write(dir: &Path, bytes: &[u8]) -> Result<Staged, OutputError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".kolm-host-")
            .suffix(".zip.partial")
            .tempfile_in(dir)
            .map_err(io(dir))?;
        tmp.write_all(bytes).map_err(io(tmp.path()))?;
        tmp.as_file().sync_all().map_err(io(dir))?;
        Ok(Staged { tmp })
    }

    /// Where the bytes are now (for the verifier).
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Moves the bytes to `dest`: never over an existing file unless
    /// `force`. The directory is synced after.
    pub fn place(self, dest: &Path, force: bool) -> Result<PathBuf, OutputError> {
        let placed = if force {
            self.tmp.persist(dest).map_err(|e| e.error)
        } else {
            self.tmp.persist_noclobber(dest).map_err(|e| e.error)
        };
        match placed {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(OutputError::Exists {
                    path: dest.display().to_string(),
                });
            }
            Err(e) => return Err(io(dest)(e)),
        }
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
        Ok(dest.to_path_buf())
    }
}

/// Why an artifact is not the one for the job the host sent: one variant
/// per binding that does not hold, the first found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobMismatch {
    /// The verifier could not read the artifact's manifest, so nothing
    /// binds it to the job.
    #[error("the artifact has no readable manifest")]
    NoManifest,
    /// The manifest hashes another job spec.
    #[error(
        "the artifact's job spec has SHA-256 {}, the spec sent has {}",
        hex::encode(.sealed),
        hex::encode(.sent)
    )]
    Spec { sealed: [u8; 32], sent: [u8; 32] },
    /// The manifest hashes another policy.
    #[error(
        "the artifact's policy has SHA-256 {}, the policy sent has {}",
        hex::encode(.sealed),
        hex::encode(.sent)
    )]
    Policy { sealed: [u8; 32], sent: [u8; 32] },
    /// The manifest lists other inputs (names, sizes or SHA-256) than
    /// those sent; both lists sorted by name.
    #[error(
        "the artifact's inputs ({}) are not the inputs sent ({})",
        listed(.sealed, crate::peer_text::shown),
        listed(.sent, str::to_owned)
    )]
    Inputs {
        sealed: Vec<BoundInput>,
        sent: Vec<BoundInput>,
    },
}

/// One input as a manifest binds it or the host sent it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BoundInput {
    pub name: String,
    pub size: u64,
    pub sha256: [u8; 32],
}

/// `name: N bytes, ...`, each name as `show` spells it (the enclave's
/// names are peer text).
fn listed(inputs: &[BoundInput], show: fn(&str) -> String) -> String {
    inputs
        .iter()
        .map(|i| format!("{}: {} bytes", show(&i.name), i.size))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the artifact is the one for `job`: the spec, the policy and
/// every input the host sent, by SHA-256 (an enclave could otherwise hand
/// back a genuine artifact of another job). `Err` names the first
/// difference.
pub fn matches_job(manifest: &Manifest, job: &Job) -> Result<(), JobMismatch> {
    use sha2::{Digest, Sha256};
    let spec: [u8; 32] = Sha256::digest(&job.spec).into();
    if manifest.job.spec_sha256.0 != spec {
        return Err(JobMismatch::Spec {
            sealed: manifest.job.spec_sha256.0,
            sent: spec,
        });
    }
    let policy: [u8; 32] = Sha256::digest(&job.policy).into();
    if manifest.job.policy_sha256.0 != policy {
        return Err(JobMismatch::Policy {
            sealed: manifest.job.policy_sha256.0,
            sent: policy,
        });
    }
    let mut sent: Vec<BoundInput> = job
        .inputs
        .iter()
        .map(|i| BoundInput {
            name: i.name.clone(),
            size: i.size,
            sha256: i.sha256,
        })
        .collect();
    sent.sort();
    let mut sealed: Vec<BoundInput> = manifest
        .inputs
        .iter()
        .map(|i| BoundInput {
            name: i.path.clone(),
            size: i.size,
            sha256: i.sha256.0,
        })
        .collect();
    sealed.sort();
    if sent != sealed {
        return Err(JobMismatch::Inputs { sealed, sent });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_job_id_becomes_a_file_name() {
        assert_eq!(safe_stem("tiny"), "tiny");
        assert_eq!(safe_stem("shakespeare-lora_2.1"), "shakespeare-lora_2.1");
        for hostile in [
            "a\\..\\..\\b",
            "../x",
            "a/b",
            "..",
            ".hidden",
            "",
            "x\u{202e}piz.exe",
            "run\n",
            &"a".repeat(65),
        ] {
            assert_eq!(safe_stem(hostile), "job", "{hostile:?}");
        }
        assert_eq!(
            spec_id(b"id = \"tiny\"\nkind = \"demo\"").as_deref(),
            Some("tiny")
        );
        assert_eq!(spec_id(b"kind = \"demo\""), None);
    }

    #[test]
    fn placing_never_replaces_a_file_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("tiny-0.zip");
        std::fs::write(&dest, b"the first chain's artifact").unwrap();
        let staged = Staged::write(dir.path(), b"a second chain's artifact").unwrap();
        let e = staged.place(&dest, false).unwrap_err();
        assert!(matches!(e, OutputError::Exists { .. }), "{e}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"the first chain's artifact");
        // The refused temp file is gone too.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");

        let free = first_free(&dest);
        assert_eq!(free, dir.path().join("tiny-0.2.zip"));
        let staged = Staged::write(dir.path(), b"a second chain's artifact").unwrap();
        staged.place(&free, false).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"the first chain's artifact");

        let staged = Staged::write(dir.path(), b"replacement").unwrap();
        staged.place(&dest, true).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"replacement");
        assert_eq!(rejected_path(&dest), dir.path().join("tiny-0.rejected.zip"));
    }

    #[test]
    fn a_mismatch_names_the_first_binding_that_does_not_hold() {
        let spec = JobMismatch::Spec {
            sealed: [0xab; 32],
            sent: [0xcd; 32],
        };
        assert_eq!(
            spec.to_string(),
            format!(
                "the artifact's job spec has SHA-256 {}, the spec sent has {}",
                "ab".repeat(32),
                "cd".repeat(32)
            )
        );
        let input = |name: &str, size| BoundInput {
            name: name.into(),
            size,
            sha256: [0; 32],
        };
        let inputs = JobMismatch::Inputs {
            sealed: vec![input("a\u{1b}[2J", 3)],
            sent: vec![input("a.txt", 3), input("b.txt", 4)],
        };
        let text = inputs.to_string();
        assert!(
            text.ends_with("are not the inputs sent (a.txt: 3 bytes, b.txt: 4 bytes)"),
            "{text}"
        );
        // The enclave's names are peer text: shown inert.
        assert!(!text.contains('\u{1b}'), "{text}");
    }
}
