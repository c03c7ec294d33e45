//! `failure.json`: what a failed fine-tune job tells the supervisor. The
//! job's stderr is withheld (it may hold sealed data), so without this a
//! GPU that is missing or a memory pre-flight refusal would read "the job
//! exited with status 1". The message is the job's own typed error (see
//! `FineTuneError`), capped, one line, and the file is read strictly.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Name of the file in the job's output directory.
pub const FAILURE_FILE: &str = "failure.json";
/// Longest message kept.
pub const MAX_MESSAGE: usize = 2048;

/// A failed job's reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// The check that failed (`FineTuneError::check`).
    pub check: String,
    pub message: String,
}

fn clean(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect()
}

/// Writes `failure.json` into `output_dir` (best effort: the job is failing
/// anyway).
pub fn write(output_dir: &Path, check: &str, message: &str) {
    let f = Failure {
        check: clean(check, 64),
        message: clean(message, MAX_MESSAGE),
    };
    if let Ok(bytes) = serde_json::to_vec(&f) {
        let _ = std::fs::write(output_dir.join(FAILURE_FILE), bytes);
    }
}

/// Reads it back from what the job left: `None` when there is none or it
/// is not exactly a failure record.
pub fn read(output_dir: &Path) -> Option<Failure> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // The job owns the directory: never follow a link it planted.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(output_dir.join(FAILURE_FILE))
        .ok()?;
    let mut bytes = Vec::new();
    f.take(4 * MAX_MESSAGE as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    let mut f: Failure = serde_json::from_slice(&bytes).ok()?;
    f.check = clean(&f.check, 64);
    f.message = clean(&f.message, MAX_MESSAGE);
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_cleaned_and_refuses_other_shapes() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()), None);
        write(d.path(), "memory-preflight", "needs 9 GiB\nfree 2 GiB");
        let f = read(d.path()).unwrap();
        assert_eq!(f.check, "memory-preflight");
        assert_eq!(f.message, "needs 9 GiB free 2 GiB");
        std::fs::write(d.path().join(FAILURE_FILE), b"{\"check\":\"x\"}").unwrap();
        assert_eq!(read(d.path()), None);
    }
}
