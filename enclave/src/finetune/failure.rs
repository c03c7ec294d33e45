//! The supervisor's reading of a failed fine-tune: the job's stderr is
//! withheld (it may hold sealed data), so without `failure.json` a GPU that
//! is missing or a memory pre-flight refusal would read "the job exited
//! with status 1". The files are `kolm_format::job_io`'s (the job writes
//! them with the same code); here they are opened without following a link
//! the job planted, and a SIGKILL is named (the OOM killer's, with the
//! admitted estimate).
//!
//! What the job wrote is untrusted: the verifier's lint set holds (no
//! unwrap, no indexing, no unchecked arithmetic).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::path::Path;

use kolm_format::job_io::{
    ESTIMATE_FILE, FAILURE_FILE, Failure, MAX_ESTIMATE_BYTES, MAX_FAILURE_BYTES,
    estimate_from_bytes,
};

/// What the job left in `output_dir`: `None` when there is none or it is
/// not exactly a failure record.
pub fn read(output_dir: &Path) -> Option<Failure> {
    Failure::from_json_bytes(&read_job_file(output_dir, FAILURE_FILE, MAX_FAILURE_BYTES)?)
}

/// The estimate the job recorded, read as strictly as [`read`].
fn read_estimate(output_dir: &Path) -> Option<u64> {
    estimate_from_bytes(&read_job_file(
        output_dir,
        ESTIMATE_FILE,
        MAX_ESTIMATE_BYTES,
    )?)
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

/// `MemAvailable` from /proc/meminfo, in bytes; `None` when it cannot be
/// read. The job cannot read it inside the sandbox: the supervisor reads
/// it and passes it on (`--host-available-bytes`).
pub fn host_available_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb.saturating_mul(1024))
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
    Some(Failure::new("killed", &message))
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
        std::fs::write(
            d.path().join(ESTIMATE_FILE),
            kolm_format::job_io::estimate_to_bytes(7 << 30),
        )
        .unwrap();
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
    }

    #[test]
    fn reads_what_the_job_writes_and_refuses_other_shapes_and_links() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()), None);
        let f = Failure::new("memory-preflight", "needs 9 GiB\nfree 2 GiB");
        std::fs::write(d.path().join(FAILURE_FILE), f.to_json_bytes().unwrap()).unwrap();
        assert_eq!(read(d.path()), Some(f));
        std::fs::write(d.path().join(FAILURE_FILE), b"{\"check\":\"x\"}").unwrap();
        assert_eq!(read(d.path()), None);
        let other = tempfile::tempdir().unwrap();
        let real = Failure::new("spec", "planted");
        std::fs::write(other.path().join("f"), real.to_json_bytes().unwrap()).unwrap();
        std::fs::remove_file(d.path().join(FAILURE_FILE)).unwrap();
        std::os::unix::fs::symlink(other.path().join("f"), d.path().join(FAILURE_FILE)).unwrap();
        assert_eq!(read(d.path()), None, "a link is not followed");
    }
}
