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
    let bytes = read_job_file(output_dir, FAILURE_FILE, 4 * MAX_MESSAGE as u64)?;
    let mut f: Failure = serde_json::from_slice(&bytes).ok()?;
    f.check = clean(&f.check, 64);
    f.message = clean(&f.message, MAX_MESSAGE);
    Some(f)
}

/// The file in which the job leaves its admitted memory estimate (bytes,
/// decimal) while it runs, so that the supervisor can name it when the job
/// is killed; removed before a successful job ends (it is not an output).
pub const ESTIMATE_FILE: &str = "memory-estimate";

/// Records the admitted pre-flight estimate (best effort, as [`write`]).
pub fn write_estimate(output_dir: &Path, bytes: u64) {
    let _ = std::fs::write(output_dir.join(ESTIMATE_FILE), bytes.to_string());
}

/// Removes the estimate record before the outputs are collected.
pub fn remove_estimate(output_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(output_dir.join(ESTIMATE_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The estimate the job recorded, read as strictly as [`read`].
fn read_estimate(output_dir: &Path) -> Option<u64> {
    let bytes = read_job_file(output_dir, ESTIMATE_FILE, 32)?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// At most `cap` bytes of the file `name` the job left in `output_dir`.
fn read_job_file(output_dir: &Path, name: &str, cap: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // The job owns the directory: never follow a link it planted.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(output_dir.join(name))
        .ok()?;
    let mut bytes = Vec::new();
    f.take(cap).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The kernel's count of processes its OOM killer has killed since boot
/// (`oom_kill` in /proc/vmstat, Linux 4.13+); `None` when unreadable.
pub fn oom_kills() -> Option<u64> {
    std::fs::read_to_string("/proc/vmstat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// What to say of a fine-tune job that a signal ended: for SIGKILL, whether
/// the kernel's OOM killer did it (its `oom_kill` count rose during the
/// job: `oom_before` and `oom_after`), or most likely did, with the
/// estimate the pre-flight admitted. `None` for other signals (the plain
/// "killed by signal N" says it all).
pub fn killed(
    output_dir: &Path,
    signal: i32,
    oom_before: Option<u64>,
    oom_after: Option<u64>,
) -> Option<Failure> {
    if signal != libc::SIGKILL {
        return None;
    }
    let estimate = match read_estimate(output_dir) {
        Some(b) => format!(
            "the memory pre-flight estimated {:.1} GiB with its margin",
            b as f64 / (1u64 << 30) as f64
        ),
        None => "it was killed before the memory pre-flight admitted it".to_owned(),
    };
    let message = match (oom_before, oom_after) {
        (Some(a), Some(b)) if b > a => format!(
            "killed by signal 9 (SIGKILL) by the kernel's out-of-memory killer \
             (its oom_kill count in /proc/vmstat rose from {a} to {b} during the job); \
             {estimate}: use a smaller train.batch or train.seq_len"
        ),
        _ => format!(
            "killed by signal 9 (SIGKILL): most likely the kernel's out-of-memory killer \
             (kolm itself sends it only on a timeout or a cancel); {estimate}"
        ),
    };
    Some(Failure {
        check: "killed".to_owned(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIGKILL is named as the OOM killer's, with the admitted estimate
    /// (it used to read only "killed by signal 9").
    #[test]
    fn a_sigkill_names_the_oom_killer_and_the_estimate() {
        let d = tempfile::tempdir().unwrap();
        let f = killed(d.path(), 9, Some(3), Some(3)).unwrap();
        assert!(
            f.message
                .contains("most likely the kernel's out-of-memory killer")
                && f.message
                    .contains("before the memory pre-flight admitted it"),
            "{}",
            f.message
        );
        write_estimate(d.path(), 7 << 30);
        let f = killed(d.path(), 9, Some(3), Some(4)).unwrap();
        assert!(
            f.message.contains("by the kernel's out-of-memory killer")
                && f.message.contains("rose from 3 to 4")
                && f.message.contains("estimated 7.0 GiB"),
            "{}",
            f.message
        );
        assert_eq!(f.check, "killed");
        assert!(killed(d.path(), 6, Some(3), Some(4)).is_none());
        remove_estimate(d.path()).unwrap();
        remove_estimate(d.path()).unwrap();
        assert!(!d.path().join(ESTIMATE_FILE).exists());
    }

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
