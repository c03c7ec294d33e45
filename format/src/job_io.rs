//! What passes between the supervisor (`kolm-enclave`, which holds the
//! keys) and the job binary it execs inside the sandbox (`kolm-jobs`, which
//! runs the untrusted ML), each side written and read by this one module:
//!
//! - the job's command line ([`JobArgs`]): written by the supervisor, read
//!   by `kolm-jobs`. It names files only; what the job does comes from the
//!   staged spec the supervisor already read with the strict reader
//!   ([`crate::job_spec::JobSpec`]), never from a kind string;
//! - the files of the job's output directory the supervisor reads besides
//!   the outputs it seals: `failure.json` ([`Failure`]: why a job failed,
//!   so that the job's stderr, which may hold sealed data, is never shown)
//!   and `memory-estimate` (the admitted pre-flight estimate, to name a
//!   SIGKILL); and the names of `metrics.json` and the evaluation report.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The flat metrics a job leaves (a JSON object of finite numbers), read by
/// the supervisor for the manifest and sealed as an output.
pub const METRICS_FILE: &str = "metrics.json";
/// A fine-tune's evaluation report among its outputs.
pub const EVAL_REPORT_FILE: &str = "eval-report.json";
/// Why a job failed ([`Failure`]).
pub const FAILURE_FILE: &str = "failure.json";
/// Longest failure message kept.
pub const MAX_FAILURE_MESSAGE: usize = 2048;
/// Largest `failure.json` read back.
pub const MAX_FAILURE_BYTES: u64 = 4 * MAX_FAILURE_MESSAGE as u64;
/// Longest failure check name kept.
const MAX_CHECK: usize = 64;
/// The job's admitted memory estimate (bytes, decimal) while it runs;
/// removed before a successful job ends (it is not an output).
pub const ESTIMATE_FILE: &str = "memory-estimate";
/// Largest `memory-estimate` read back.
pub const MAX_ESTIMATE_BYTES: u64 = 32;

/// How training progress is shown (the job's stdout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    #[default]
    None,
    /// A one-line bar redrawn in place (a terminal).
    Bar,
    /// One JSON object per step.
    Json,
}

impl ProgressMode {
    /// The `--progress` value.
    pub fn as_arg(self) -> &'static str {
        match self {
            ProgressMode::None => "none",
            ProgressMode::Bar => "bar",
            ProgressMode::Json => "json",
        }
    }

    /// Reads a `--progress` value.
    pub fn parse(s: &str) -> Option<ProgressMode> {
        match s {
            "none" => Some(ProgressMode::None),
            "bar" => Some(ProgressMode::Bar),
            "json" => Some(ProgressMode::Json),
            _ => None,
        }
    }
}

/// What `kolm-jobs` is given on its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobArgs {
    /// The staged job spec (read-only), already read and checked by the
    /// supervisor; the job reads it again with the same reader.
    pub spec: PathBuf,
    /// The staged policy (read-only): its quality gates go into a
    /// fine-tune's model card (the supervisor's verdict is the binding one).
    pub policy: Option<PathBuf>,
    /// The staged inputs (read-only), named as in the spec.
    pub input_dir: PathBuf,
    /// Where the job writes; everything in it is untrusted to the supervisor.
    pub output_dir: PathBuf,
    /// Fine-tune: where checkpoints are kept across runs.
    pub checkpoint_dir: Option<PathBuf>,
    /// Fine-tune: continue from the newest checkpoint.
    pub resume: bool,
    /// Fine-tune: training progress on stdout.
    pub progress: ProgressMode,
    /// Fine-tune: `MemAvailable` as the supervisor read it (the sandbox
    /// hides /proc/meminfo from the job).
    pub host_available_bytes: Option<u64>,
}

/// Why a job command line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobArgsError {
    #[error("unknown argument {0:?}")]
    Unknown(String),
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    #[error("{0} is given twice")]
    Repeated(&'static str),
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{flag} {value:?}: {expected}")]
    BadValue {
        flag: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// The flags, in the order [`JobArgs::to_args`] writes them.
const SPEC: &str = "--spec";
const POLICY: &str = "--policy";
const INPUT_DIR: &str = "--input-dir";
const OUTPUT_DIR: &str = "--output-dir";
const CHECKPOINT_DIR: &str = "--checkpoint-dir";
const RESUME: &str = "--resume";
const PROGRESS: &str = "--progress";
const HOST_AVAILABLE_BYTES: &str = "--host-available-bytes";
const FLAGS: [&str; 8] = [
    SPEC,
    POLICY,
    INPUT_DIR,
    OUTPUT_DIR,
    CHECKPOINT_DIR,
    RESUME,
    PROGRESS,
    HOST_AVAILABLE_BYTES,
];

impl JobArgs {
    /// A job on `spec` reading `input_dir` and writing `output_dir`, with
    /// no policy, checkpoints, progress or memory reading (the fine-tune's
    /// options are set on the result).
    pub fn new(spec: PathBuf, input_dir: PathBuf, output_dir: PathBuf) -> JobArgs {
        JobArgs {
            spec,
            policy: None,
            input_dir,
            output_dir,
            checkpoint_dir: None,
            resume: false,
            progress: ProgressMode::None,
            host_available_bytes: None,
        }
    }

    /// The command line (without the program name).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        let mut put = |flag: &str, value: OsString| {
            out.push(flag.into());
            out.push(value);
        };
        put(SPEC, self.spec.clone().into());
        if let Some(p) = &self.policy {
            put(POLICY, p.clone().into());
        }
        put(INPUT_DIR, self.input_dir.clone().into());
        put(OUTPUT_DIR, self.output_dir.clone().into());
        if let Some(d) = &self.checkpoint_dir {
            put(CHECKPOINT_DIR, d.clone().into());
        }
        if self.progress != ProgressMode::None {
            put(PROGRESS, self.progress.as_arg().into());
        }
        if let Some(b) = self.host_available_bytes {
            put(HOST_AVAILABLE_BYTES, b.to_string().into());
        }
        if self.resume {
            out.push(RESUME.into());
        }
        out
    }

    /// Reads a command line (without the program name): every flag at most
    /// once, nothing unknown, `--spec`, `--input-dir` and `--output-dir`
    /// required.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<JobArgs, JobArgsError> {
        let mut seen: Vec<&'static str> = Vec::new();
        let (mut spec, mut policy, mut input_dir, mut output_dir, mut checkpoint_dir) =
            (None, None, None, None, None);
        let mut resume = false;
        let mut progress = ProgressMode::None;
        let mut host_available_bytes = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let text = arg.to_string_lossy();
            let flag = FLAGS
                .iter()
                .copied()
                .find(|f| *f == text)
                .ok_or_else(|| JobArgsError::Unknown(text.into_owned()))?;
            if seen.contains(&flag) {
                return Err(JobArgsError::Repeated(flag));
            }
            seen.push(flag);
            if flag == RESUME {
                resume = true;
                continue;
            }
            let value = args.next().ok_or(JobArgsError::MissingValue(flag))?;
            let bad = |expected: &'static str| JobArgsError::BadValue {
                flag,
                value: value.to_string_lossy().into_owned(),
                expected,
            };
            match flag {
                SPEC => spec = Some(PathBuf::from(value)),
                POLICY => policy = Some(PathBuf::from(value)),
                INPUT_DIR => input_dir = Some(PathBuf::from(value)),
                OUTPUT_DIR => output_dir = Some(PathBuf::from(value)),
                CHECKPOINT_DIR => checkpoint_dir = Some(PathBuf::from(value)),
                PROGRESS => {
                    progress = value
                        .to_str()
                        .and_then(ProgressMode::parse)
                        .ok_or_else(|| bad("none, bar or json"))?;
                }
                _ => {
                    host_available_bytes = Some(
                        value
                            .to_str()
                            .and_then(|v| v.parse::<u64>().ok())
                            .ok_or_else(|| bad("a number of bytes"))?,
                    );
                }
            }
        }
        Ok(JobArgs {
            spec: spec.ok_or(JobArgsError::Missing(SPEC))?,
            policy,
            input_dir: input_dir.ok_or(JobArgsError::Missing(INPUT_DIR))?,
            output_dir: output_dir.ok_or(JobArgsError::Missing(OUTPUT_DIR))?,
            checkpoint_dir,
            resume,
            progress,
            host_available_bytes,
        })
    }
}

/// A failed job's reason (`failure.json`). Its message is the job's own
/// typed error, built from the spec, the runtime and the machine, never
/// from the customer's data; one line, capped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// The check that failed (`spec`, `gpu-unavailable`, `memory-preflight`...).
    pub check: String,
    pub message: String,
}

fn clean(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect()
}

impl Failure {
    /// A record with both fields on one line and capped.
    pub fn new(check: &str, message: &str) -> Failure {
        Failure {
            check: clean(check, MAX_CHECK),
            message: clean(message, MAX_FAILURE_MESSAGE),
        }
    }

    /// The file's bytes.
    pub fn to_json_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// The strict reader: `None` unless the bytes (at most
    /// [`MAX_FAILURE_BYTES`]) are exactly a failure record; what it returns
    /// is cleaned as [`Failure::new`] cleans.
    pub fn from_json_bytes(bytes: &[u8]) -> Option<Failure> {
        if u64::try_from(bytes.len()).map_or(true, |n| n > MAX_FAILURE_BYTES) {
            return None;
        }
        let f: Failure = serde_json::from_slice(bytes).ok()?;
        Some(Failure::new(&f.check, &f.message))
    }
}

/// The `memory-estimate` file's bytes for `bytes`.
pub fn estimate_to_bytes(bytes: u64) -> Vec<u8> {
    bytes.to_string().into_bytes()
}

/// The estimate a job recorded, read strictly: at most
/// [`MAX_ESTIMATE_BYTES`] of one decimal number.
pub fn estimate_from_bytes(bytes: &[u8]) -> Option<u64> {
    if u64::try_from(bytes.len()).map_or(true, |n| n > MAX_ESTIMATE_BYTES) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_command_line_round_trips() {
        let a = JobArgs {
            spec: "/w/spec/job.toml".into(),
            policy: Some("/w/spec/policy.toml".into()),
            input_dir: "/w/input".into(),
            output_dir: "/w/output".into(),
            checkpoint_dir: Some("/c".into()),
            resume: true,
            progress: ProgressMode::Json,
            host_available_bytes: Some(1 << 33),
        };
        assert_eq!(JobArgs::parse(a.to_args()).unwrap(), a);
        let b = JobArgs {
            policy: None,
            checkpoint_dir: None,
            resume: false,
            progress: ProgressMode::None,
            host_available_bytes: None,
            ..a
        };
        assert_eq!(b.to_args().len(), 6);
        assert_eq!(JobArgs::parse(b.to_args()).unwrap(), b);
    }

    #[test]
    fn the_reader_refuses_what_the_writer_never_writes() {
        let base = ["--spec", "s", "--input-dir", "i", "--output-dir", "o"];
        assert!(JobArgs::parse(args(&base)).is_ok());
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            JobArgs::parse(args(&v)).unwrap_err()
        };
        assert_eq!(
            with(&["--kind", "demo"]),
            JobArgsError::Unknown("--kind".into())
        );
        assert_eq!(with(&["--spec", "t"]), JobArgsError::Repeated("--spec"));
        assert_eq!(with(&["--policy"]), JobArgsError::MissingValue("--policy"));
        assert!(matches!(
            with(&["--progress", "loud"]),
            JobArgsError::BadValue { .. }
        ));
        assert!(matches!(
            with(&["--host-available-bytes", "-1"]),
            JobArgsError::BadValue { .. }
        ));
        assert_eq!(
            JobArgs::parse(args(&base[2..])).unwrap_err(),
            JobArgsError::Missing("--spec")
        );
    }

    #[test]
    fn failures_round_trip_cleaned_and_other_shapes_are_refused() {
        let f = Failure::new("memory-preflight", "needs 9 GiB\nfree 2 GiB");
        assert_eq!(f.message, "needs 9 GiB free 2 GiB");
        let bytes = f.to_json_bytes().unwrap();
        assert_eq!(Failure::from_json_bytes(&bytes), Some(f));
        assert_eq!(Failure::from_json_bytes(b"{\"check\":\"x\"}"), None);
        let long = Failure::new("x", &"y".repeat(10_000));
        assert_eq!(long.message.len(), MAX_FAILURE_MESSAGE);
        assert_eq!(
            estimate_from_bytes(&estimate_to_bytes(7 << 30)),
            Some(7 << 30)
        );
        assert_eq!(estimate_from_bytes(b"12 GiB"), None);
    }
}
