//! One sealed run: read the job spec and inputs, enforce the enclave policy,
//! run the job in the egress = 0 sandbox (a separate process: see
//! `crate::sandbox` and `docs/sandbox.md`), obtain the platform's
//! collateral, build the manifest (receipt v2) with the sandbox summary and
//! the collateral's file records, obtain the attestation bound to it, sign
//! and seal the artifact (the full sandbox record included), then advance
//! the receipt chain.
//!
//! There is no unsandboxed path: if the sandbox cannot be set up, the run
//! fails and nothing is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kolm_format::binding;
use kolm_format::container::{self, EntryData};
use kolm_format::content_id::ContentId;
use kolm_format::hexbytes::HexBytes;
use kolm_format::manifest::{
    CHECKSUMS_PATH, ChainLink, Environment, FileRecord, Governance, JobRecord, Manifest, Runtime,
    SBOM_PATH, SandboxSummary, Signer,
};
use kolm_format::seal::{self as artifact, EvidenceBundle};
use kolm_format::timefmt;
use kolm_format::version::SpecVersion;
use kolm_policy::Policy;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use kolm_format::job_io::{JobArgs, ProgressMode};
use kolm_format::job_spec::{FineTuneSpec, JobSpec};

use crate::attest::AttestationProvider;
use crate::chain_state::{ChainState, StateLock};
use crate::job::{self, CollectError};
use crate::sandbox::{self, OutputMode, Profile, SandboxCommand, SandboxError};
use crate::sbom;

/// Largest input file the demo job reads into memory.
const MAX_DEMO_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// Why a run failed. Nothing is written when it does.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("job spec: {0}")]
    Spec(SpecError),
    #[error("policy: {0}")]
    Policy(PolicyFileError),
    #[error("policy forbids this run: {0}")]
    PolicyViolation(kolm_policy::PolicyViolation),
    #[error("input {path}: {reason}")]
    Input { path: String, reason: InputError },
    /// The output directory could not be made (at the very end, before
    /// sealing).
    #[error("input {path}: {error}")]
    OutDir { path: String, error: std::io::Error },
    #[error("job failed: {0}")]
    Job(JobError),
    /// The fine-tune job stopped at one of its checks (`failure.json`): a
    /// missing GPU, the memory pre-flight, bad data... Nothing is sealed.
    #[error("fine-tune job failed ({check}): {message}")]
    FineTune { check: String, message: String },
    /// The evaluated model is below the policy's `quality.gates`. The gate
    /// is binding for fine-tune jobs: nothing is sealed, and no flag
    /// overrides it.
    #[error("quality gate failed, nothing sealed: {0}")]
    QualityGate(crate::finetune::gate::GateFailure),
    /// The sandbox record shows the job did not end cleanly: nothing is
    /// sealed.
    #[error("not sealed: {0}")]
    NotSealable(NotSealable),
    #[error("job sandbox: {0}")]
    Sandbox(SandboxError),
    #[error("job outputs: {0}")]
    Outputs(CollectError),
    /// This process's own executable (the default runtime binary) could
    /// not be found.
    #[error("runtime binary: {error}")]
    RuntimeExe { error: std::io::Error },
    /// The job binary (`kolm-jobs`) is not where it was looked for.
    #[error(
        "jobs binary {path}: {reason} (every job runs from it: build it beside kolm-enclave \
         with `cargo build --locked --bins`, or name it with --jobs-bin PATH)"
    )]
    JobsExe { path: String, reason: JobsExeError },
    /// A step of making the job's work directory failed (`step` names it).
    #[error("job work directory: {step}: {error}")]
    WorkDir {
        step: &'static str,
        error: std::io::Error,
    },
    /// The CUDA library directories do not join into one search path.
    #[error("job work directory: library path: {error}")]
    LibraryPath { error: std::env::JoinPathsError },
    #[error("attestation: {0}")]
    Attest(crate::attest::AttestError),
    #[error("sbom: {0}")]
    Sbom(sbom::SbomError),
    #[error("sealing: {0}")]
    Seal(artifact::SealError),
    #[error("manifest: {0}")]
    Manifest(kolm_format::manifest::ManifestError),
    #[error("{0}")]
    Chain(crate::chain_state::ChainStateError),
    /// A fresh signing key could not be generated.
    #[error("signing key: {error}")]
    KeyGeneration { error: ring::error::Unspecified },
    /// The freshly generated key was refused when loaded.
    #[error("signing key: {error}")]
    KeyRejected { error: ring::error::KeyRejected },
    #[error("clock: {0}")]
    Clock(kolm_format::timefmt::TimestampError),
    /// A cancel came before the commit point ([`CommitPoint`]): nothing is
    /// sealed and the chain does not advance.
    #[error("cancelled before the commit point; nothing sealed, the chain state is unchanged")]
    Cancelled,
}

/// Why the job spec was refused ([`RunError::Spec`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    #[error("{error}")]
    NotUtf8 { error: std::str::Utf8Error },
    /// The strict reader refused it (it names the key and line).
    #[error("{error}")]
    Invalid {
        error: kolm_format::job_spec::JobSpecError,
    },
    #[error("an input is listed twice")]
    InputListedTwice { path: String },
    /// A replay was given another number of inputs than the spec names.
    #[error("{given} inputs given, the spec names {named}")]
    InputCount { given: usize, named: usize },
}

/// Why the policy was refused ([`RunError::Policy`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyFileError {
    #[error("{error}")]
    NotUtf8 { error: std::str::Utf8Error },
    #[error("{error}")]
    Invalid { error: kolm_policy::PolicyError },
}

/// Why an input of the spec was refused ([`RunError::Input`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// Its name breaks the container's portable name rules.
    #[error("{error}")]
    Name {
        error: Box<kolm_format::container::ContainerError>,
    },
    #[error("{path}: {error}")]
    Open { path: String, error: std::io::Error },
    #[error("{path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("larger than the {cap}-byte cap")]
    TooLarge { cap: u64 },
}

/// What is wrong with what the job did or left ([`RunError::Job`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A fine-tune left one of the files the supervisor judges it by
    /// unwritten.
    #[error("the fine-tune job wrote no {name}")]
    MissingFile { name: &'static str },
    /// The evaluation report does not read strictly.
    #[error("{file}: {error}")]
    EvalReport {
        file: &'static str,
        error: kolm_format::eval_report::EvalReportError,
    },
    /// `metrics.json` does not hold the report's own number for a term.
    #[error("metrics.json {name} = {claimed:?} disagrees with {file} ({value})")]
    MetricDisagrees {
        name: String,
        claimed: Option<f64>,
        file: &'static str,
        value: f64,
    },
    /// `environment.json` does not read strictly.
    #[error("{error}")]
    Environment {
        error: kolm_format::environment::TupleError,
    },
    /// The job wrote a file of the runtime's own (the sealed spec or
    /// policy).
    #[error("the job wrote {path}, which the runtime seals")]
    WroteSealedFile { path: String },
    #[error("sandbox record: {error}")]
    Record { error: serde_json::Error },
    /// The process status disagrees with the sandbox record's clean end.
    #[error("the job process ended with {status} ({stderr_bytes} bytes of stderr withheld)")]
    ProcessFailed {
        status: std::process::ExitStatus,
        stderr_bytes: usize,
    },
}

/// Why the job binary cannot be used ([`RunError::JobsExe`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobsExeError {
    #[error("not a regular file")]
    NotAFile,
    /// It is not there (or cannot be looked at).
    #[error("{error}")]
    Stat { error: std::io::Error },
}

// By hand, not `#[from]`: the cause is in each message, and a `source`
// would repeat it in a printed chain (anyhow's `{:#}`).
impl From<NotSealable> for RunError {
    fn from(e: NotSealable) -> RunError {
        RunError::NotSealable(e)
    }
}
impl From<SandboxError> for RunError {
    fn from(e: SandboxError) -> RunError {
        RunError::Sandbox(e)
    }
}
impl From<CollectError> for RunError {
    fn from(e: CollectError) -> RunError {
        RunError::Outputs(e)
    }
}
impl From<crate::attest::AttestError> for RunError {
    fn from(e: crate::attest::AttestError) -> RunError {
        RunError::Attest(e)
    }
}
impl From<sbom::SbomError> for RunError {
    fn from(e: sbom::SbomError) -> RunError {
        RunError::Sbom(e)
    }
}
impl From<artifact::SealError> for RunError {
    fn from(e: artifact::SealError) -> RunError {
        RunError::Seal(e)
    }
}
impl From<kolm_format::manifest::ManifestError> for RunError {
    fn from(e: kolm_format::manifest::ManifestError) -> RunError {
        RunError::Manifest(e)
    }
}
impl From<crate::chain_state::ChainStateError> for RunError {
    fn from(e: crate::chain_state::ChainStateError) -> RunError {
        RunError::Chain(e)
    }
}

/// The commit point of a job the host may cancel: the moment the job's
/// outputs are collected and judged and sealing begins. A cancel before it
/// stops the job and nothing is sealed; a cancel after it is too late: the
/// artifact is sealed, the chain advances and the host gets the artifact.
/// Exactly one of the two wins, decided by one atomic swap.
#[derive(Debug, Default)]
pub struct CommitPoint(std::sync::atomic::AtomicU8);

const RUNNING: u8 = 0;
const SEALING: u8 = 1;
const CANCELLED: u8 = 2;

impl CommitPoint {
    pub fn new() -> CommitPoint {
        CommitPoint::default()
    }

    /// The job, at the commit point: whether it may seal (no cancel came
    /// first; none will be honoured from now on).
    pub fn enter_sealing(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.0
            .compare_exchange(RUNNING, SEALING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The host's cancel: `true` if it came before the commit point (the
    /// job will not be sealed), `false` if sealing had begun.
    pub fn cancel(&self) -> bool {
        use std::sync::atomic::Ordering;
        match self
            .0
            .compare_exchange(RUNNING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == CANCELLED,
        }
    }
}

/// Why a finished job's outputs are not sealed. Each names what the sandbox
/// record says; a run that ends in one of these writes no artifact, so an
/// artifact always means a job that ran to a clean end (exit status 0, no
/// signal) with no process of it left behind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotSealable {
    /// The seccomp listener failed; the job was killed.
    #[error("the seccomp listener failed ({0}); the job was killed")]
    ListenerFailed(String),
    /// The job never started.
    #[error("the job could not start: {0}")]
    NotStarted(String),
    /// The job was killed by a signal.
    #[error("the job was killed by signal {0}")]
    Signal(i32),
    /// The job exited with a non-zero status.
    #[error("the job exited with status {0}")]
    ExitCode(i32),
    /// The record has neither an exit code nor a signal.
    #[error("the sandbox record has no exit status")]
    NoExitStatus,
    /// A process of the job was still alive when the record was closed
    /// (`listener.all_processes_gone` is false): it could still change the
    /// outputs, so they are not collected.
    #[error(
        "a process of the job outlived it (listener.all_processes_gone is false); outputs not collected"
    )]
    ProcessesSurvived,
}

/// Decides from the sandbox record alone whether the job's outputs may be
/// collected and sealed; returns the exit code the manifest records (0).
/// Checked in this order: listener, start, signal, exit code, survivors.
pub fn check_sealable(record: &sandbox::SandboxRecord) -> Result<i32, NotSealable> {
    if !record.listener.alive_whole_run {
        return Err(NotSealable::ListenerFailed(
            record
                .listener
                .error
                .clone()
                .unwrap_or_else(|| "unknown".into()),
        ));
    }
    if let Some(e) = &record.exit.exec_error {
        return Err(NotSealable::NotStarted(e.clone()));
    }
    match (record.exit.code, record.exit.signal) {
        (_, Some(sig)) => return Err(NotSealable::Signal(sig)),
        (Some(0), None) => {}
        (Some(code), None) => return Err(NotSealable::ExitCode(code)),
        (None, None) => return Err(NotSealable::NoExitStatus),
    }
    if !record.listener.all_processes_gone {
        return Err(NotSealable::ProcessesSurvived);
    }
    Ok(0)
}

/// Largest input of a fine-tune job (a base model file), in bytes.
const MAX_FINE_TUNE_INPUT_BYTES: u64 = 4 << 30;

/// Name of the sealed copy of the job spec (under `outputs/`): replay
/// re-runs the job from it, and its SHA-256 is the manifest's
/// `job.spec_sha256`.
pub const SEALED_SPEC: &str = "job/spec.toml";
/// Name of the sealed copy of the policy the run was gated by.
pub const SEALED_POLICY: &str = "job/policy.toml";

/// The techniques a fine-tune enabled, for the manifest.
fn techniques(spec: &FineTuneSpec) -> kolm_format::manifest::Techniques {
    use kolm_format::job_spec::{Device, Method, Precision};
    let (method, lora_rank) = match &spec.method {
        Method::Full => ("full", None),
        Method::Lora { rank, .. } => ("lora", Some(*rank)),
    };
    kolm_format::manifest::Techniques {
        method: method.to_owned(),
        lora_rank,
        precision: match spec.train.precision {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
        .to_owned(),
        device: match spec.train.device {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
        .to_owned(),
        determinism: kolm_format::manifest::DETERMINISM_BITWISE_ON_RECORDED_TUPLE.to_owned(),
    }
}

/// What a fine-tune run takes besides its spec.
#[derive(Debug, Clone, Default)]
pub struct FineTuneRunOptions {
    /// Checkpoints are kept here (created if missing), outside the job's
    /// throw-away work directory, so that a killed run can resume.
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from the newest checkpoint in `checkpoint_dir`.
    pub resume: bool,
    /// Training progress on this process's stdout.
    pub progress: Option<ProgressMode>,
    /// Instead: each line of the job's stdout, the job asked for JSON
    /// progress (`train_progress` reads it; the service relays it).
    pub progress_lines: Option<std::sync::mpsc::Sender<String>>,
}

/// Everything a run needs.
#[derive(Debug)]
pub struct RunRequest<'a> {
    pub spec: &'a [u8],
    pub policy: &'a [u8],
    pub input_dir: &'a Path,
    /// Directory the artifact and chain state are written to.
    pub out_dir: &'a Path,
    /// The `kolm-enclave` binary whose hidden subcommand runs the sandbox's
    /// stage 2; `None`: this process's own executable.
    pub runtime_exe: Option<&'a Path>,
    /// The job binary the sandbox execs (`kolm-jobs`); `None`: `kolm-jobs`
    /// in the directory of the runtime binary.
    pub jobs_exe: Option<&'a Path>,
    /// Fine-tune jobs only.
    pub fine_tune: FineTuneRunOptions,
}

/// The name of the job binary, looked for beside the runtime binary.
pub const JOBS_BINARY: &str = "kolm-jobs";

/// The two binaries of a run: the runtime (`kolm-enclave`, stage 2 of the
/// sandbox) and the job binary it execs (`kolm-jobs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub runtime: PathBuf,
    pub jobs: PathBuf,
}

impl Binaries {
    /// `runtime_exe`, or this process's executable; `jobs_exe`, or
    /// [`JOBS_BINARY`] beside the runtime. The job binary must be a regular
    /// file: a missing one is an error naming the path, before any input is
    /// staged.
    pub fn find(runtime_exe: Option<&Path>, jobs_exe: Option<&Path>) -> Result<Binaries, RunError> {
        let runtime = match runtime_exe {
            Some(p) => p.to_path_buf(),
            None => std::env::current_exe().map_err(|error| RunError::RuntimeExe { error })?,
        };
        let jobs = match jobs_exe {
            Some(p) => p.to_path_buf(),
            None => runtime.parent().unwrap_or(Path::new(".")).join(JOBS_BINARY),
        };
        match std::fs::metadata(&jobs) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(RunError::JobsExe {
                    path: jobs.display().to_string(),
                    reason: JobsExeError::NotAFile,
                });
            }
            Err(error) => {
                return Err(RunError::JobsExe {
                    path: jobs.display().to_string(),
                    reason: JobsExeError::Stat { error },
                });
            }
        }
        Ok(Binaries { runtime, jobs })
    }
}

/// Sandbox profile of sealed jobs.
pub const JOB_PROFILE: Profile = Profile::Default;

/// Most bytes of the job's stderr kept (and never logged: it may hold
/// sealed data).
const JOB_STDERR_LIMIT: usize = 64 * 1024;

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
    /// Public lines for the job's log: a new receipt chain started, and why.
    pub notices: Vec<String>,
}

/// Name of the chain state file in the output directory.
pub const CHAIN_STATE_FILE: &str = "chain-state.json";

/// Runs and seals one job, its receipt signed by a fresh key that never
/// leaves this process.
pub fn run(
    req: &RunRequest<'_>,
    provider: &dyn AttestationProvider,
) -> Result<RunResult, RunError> {
    run_signed(req, provider, None)
}

/// [`run`], its receipt signed by `key` when given: the enclave service's
/// identity key, which it announced to the host (`hello`), so the host can
/// check the artifact came from the enclave it talked to.
pub fn run_signed(
    req: &RunRequest<'_>,
    provider: &dyn AttestationProvider,
    key: Option<&Ed25519KeyPair>,
) -> Result<RunResult, RunError> {
    run_cancellable(req, provider, key, None)
}

/// [`run_signed`], the job killed (and nothing sealed) as soon as `cancel`
/// fires, or when it has run longer than the policy's
/// `limits.max_job_seconds`.
pub fn run_cancellable(
    req: &RunRequest<'_>,
    provider: &dyn AttestationProvider,
    key: Option<&Ed25519KeyPair>,
    cancel: Option<sandbox::CancelSignal>,
) -> Result<RunResult, RunError> {
    // Before the clock is read for started_at: a receipt of this chain
    // never starts before the previous one finished.
    let lock = StateLock::acquire(
        req.out_dir,
        &format!("kolm-enclave run (pid {})", std::process::id()),
    )?;
    run_held(&lock, req, provider, key, cancel, None)
}

/// [`run_cancellable`] in a state directory the caller already holds
/// (`lock`, taken before anything of the job was stored), with the commit
/// point `commit` shared with whoever may cancel.
pub fn run_held(
    _lock: &StateLock,
    req: &RunRequest<'_>,
    provider: &dyn AttestationProvider,
    key: Option<&Ed25519KeyPair>,
    cancel: Option<sandbox::CancelSignal>,
    commit: Option<&CommitPoint>,
) -> Result<RunResult, RunError> {
    let started = OffsetDateTime::now_utc();
    let (spec, policy) = read_spec_and_policy(req, provider)?;
    let fine_tune = match &spec {
        JobSpec::FineTune(ft) => Some(ft.as_ref()),
        _ => None,
    };
    // A fine-tune's base model is larger than any demo input.
    let input_cap = fine_tune.map_or(MAX_DEMO_INPUT_BYTES, |_| MAX_FINE_TUNE_INPUT_BYTES);
    let (inputs, input_bytes) = read_inputs(&spec, req.input_dir, input_cap)?;

    let binaries = Binaries::find(req.runtime_exe, req.jobs_exe)?;
    let timeout = policy.limits.max_job_seconds.map(Duration::from_secs);
    let staged = Staged {
        spec: &spec,
        spec_bytes: req.spec,
        policy_bytes: req.policy,
        fine_tune: fine_tune.map(|_| &req.fine_tune),
        gpu: fine_tune.is_some_and(|f| f.train.device == kolm_format::job_spec::Device::Gpu),
    };
    let Sandboxed {
        outputs: mut output,
        record,
        exit_code: sandboxed_exit_code,
    } = run_sandboxed(&staged, &binaries, &input_bytes, cancel, timeout)?;
    let judged = judge_outputs(req, fine_tune.is_some(), &policy, &mut output)?;
    // The commit point: from here on the job is sealed whatever the host
    // says (a cancel that came first wins, and nothing is sealed).
    if let Some(c) = commit
        && !c.enter_sealing()
    {
        return Err(RunError::Cancelled);
    }
    // The collateral comes before the clock is read for finished_at: every
    // date signed into it is then no later than finished_at (the verifier
    // rejects an artifact that finished before its collateral was issued).
    let collateral = provider.collateral()?;
    let collateral_binding = collateral.binding()?;
    let finished = OffsetDateTime::now_utc();
    let finished_text = timefmt::format_utc_seconds(finished).map_err(RunError::Clock)?;
    let metrics = output.metrics.clone();
    let sealing = governance_files(output.files, &record, &finished_text)?;

    // The caller's key, or a fresh one that never leaves this process.
    let fresh;
    let key = match key {
        Some(k) => k,
        None => {
            fresh = fresh_key()?;
            &fresh
        }
    };
    let state_path = req.out_dir.join(CHAIN_STATE_FILE);
    let measurement = provider.measurement();
    let (state, new_chain) =
        ChainState::load(&state_path)?.for_enclave(provider.platform(), measurement.as_deref());
    let notices: Vec<String> = new_chain.iter().map(ToString::to_string).collect();
    let version = SpecVersion::CURRENT;
    let manifest = Manifest {
        schema: version.manifest_schema().to_string(),
        job: JobRecord {
            id: spec.id().to_owned(),
            kind: spec.kind().to_owned(),
            spec_sha256: HexBytes(Sha256::digest(req.spec).into()),
            policy_sha256: HexBytes(Sha256::digest(req.policy).into()),
            started_at: timefmt::format_utc_seconds(started).map_err(RunError::Clock)?,
            finished_at: finished_text,
            exit_code: sandboxed_exit_code,
            techniques: fine_tune.map(techniques),
        },
        inputs,
        environment: environment(
            provider.platform(),
            measurement.clone(),
            sealing.sandbox_summary,
            judged.gpu_environment,
        ),
        outputs: sealing.outputs,
        metrics: metrics.clone(),
        governance: Governance {
            sbom: sealing.sbom,
            checksums: sealing.checksums,
        },
        chain: ChainLink {
            previous: state.previous,
            sequence: state.sequence,
        },
        signer: Signer {
            alg: "Ed25519".to_string(),
            public_key: HexBytes(public_key(key)),
        },
        evidence: Some(collateral_binding),
    };
    let cid = manifest.content_id()?;
    let evidence: EvidenceBundle = provider
        .attest(&binding::report_data_for(version, &cid))?
        .with_collateral(collateral)?;
    create_out_dir(req.out_dir)?;
    let artifact_path = req.out_dir.join(state.artifact_name(spec.id()));
    let sealed = artifact::seal(&artifact_path, &manifest, sealing.files, &evidence, key)?;
    state
        .advance(sealed, provider.platform(), measurement.as_deref())
        .store(&state_path)?;
    Ok(RunResult {
        artifact: artifact_path,
        cid: sealed,
        sequence: state.sequence,
        metrics,
        gate_failure: judged.gate_failure,
        notices,
    })
}

/// The spec and the policy, each read strictly, and the policy's verdict
/// on this platform: before any work.
fn read_spec_and_policy(
    req: &RunRequest<'_>,
    provider: &dyn AttestationProvider,
) -> Result<(JobSpec, Policy), RunError> {
    let spec_text = std::str::from_utf8(req.spec)
        .map_err(|error| RunError::Spec(SpecError::NotUtf8 { error }))?;
    // One strict reader for every kind: an unknown kind, a field of another
    // kind, a bad fine-tune value are refused here, before any work.
    let spec = JobSpec::from_toml_str(spec_text)
        .map_err(|error| RunError::Spec(SpecError::Invalid { error }))?;
    let policy_text = std::str::from_utf8(req.policy)
        .map_err(|error| RunError::Policy(PolicyFileError::NotUtf8 { error }))?;
    let policy = Policy::from_toml_str(policy_text)
        .map_err(|error| RunError::Policy(PolicyFileError::Invalid { error }))?;
    policy
        .check_platform(provider.platform())
        .map_err(RunError::PolicyViolation)?;
    Ok((spec, policy))
}

/// Reads each input the spec names from `dir` (at most `cap` bytes each):
/// its manifest record (sorted by path; a name twice is refused) and its
/// bytes, in the spec's order, the very bytes hashed.
fn read_inputs(
    spec: &JobSpec,
    dir: &Path,
    cap: u64,
) -> Result<(Vec<FileRecord>, Vec<Vec<u8>>), RunError> {
    let mut inputs = Vec::new();
    let mut input_bytes = Vec::new();
    for name in spec.inputs() {
        container::check_entry_name(name).map_err(|error| RunError::Input {
            path: name.clone(),
            reason: InputError::Name {
                error: Box::new(error),
            },
        })?;
        let path = dir.join(name);
        let data = read_capped(&path, cap).map_err(|reason| RunError::Input {
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
    if let Some(twice) = inputs
        .windows(2)
        .find(|w| w.first().map(|f| &f.path) == w.get(1).map(|f| &f.path))
        .and_then(|w| w.first())
    {
        return Err(RunError::Spec(SpecError::InputListedTwice {
            path: twice.path.clone(),
        }));
    }
    Ok((inputs, input_bytes))
}

/// What the supervisor concluded from the job's outputs, before sealing.
struct Judgement {
    /// The enclave policy's gate failure of a job that is sealed anyway.
    gate_failure: Option<String>,
    /// A fine-tune's `environment.gpu`.
    gpu_environment: Option<kolm_format::manifest::GpuEnvironment>,
}

/// A fine-tune: the binding gate (below it nothing is sealed), and the
/// spec and policy added to the outputs under the runtime's own names.
/// Any other job: the policy's quality gate, on record only.
fn judge_outputs(
    req: &RunRequest<'_>,
    fine_tune: bool,
    policy: &Policy,
    output: &mut job::Collected,
) -> Result<Judgement, RunError> {
    if !fine_tune {
        return Ok(Judgement {
            gate_failure: policy
                .check_quality(&output.metrics)
                .err()
                .map(|v| v.to_string()),
            gpu_environment: None,
        });
    }
    // Binding: below the gate nothing is sealed.
    let judged = crate::finetune::gate::judge(output, policy)?;
    for (name, bytes) in [(SEALED_SPEC, req.spec), (SEALED_POLICY, req.policy)] {
        let path = format!("{}{name}", kolm_format::manifest::OUTPUTS_PREFIX);
        if output.files.iter().any(|(p, _)| *p == path) {
            return Err(RunError::Job(JobError::WroteSealedFile { path }));
        }
        output.files.push((path, bytes.to_vec()));
    }
    output.files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Judgement {
        gate_failure: None,
        gpu_environment: judged.gpu,
    })
}

/// Every file of the artifact but the manifest, receipt and evidence, and
/// their manifest records.
struct Sealing {
    files: Vec<(String, EntryData)>,
    /// The job's outputs' records, sorted by path.
    outputs: Vec<FileRecord>,
    sbom: FileRecord,
    checksums: FileRecord,
    sandbox_summary: SandboxSummary,
}

/// Governance files: the SBOM and the sandbox record, then the checksum
/// list over every sealed file but itself.
fn governance_files(
    outputs: Vec<(String, Vec<u8>)>,
    record: &sandbox::SandboxRecord,
    finished_text: &str,
) -> Result<Sealing, RunError> {
    let sbom_bytes = sbom::runtime_sbom(finished_text)?;
    let record_bytes = record
        .to_json_bytes()
        .map_err(|error| RunError::Job(JobError::Record { error }))?;
    let mut files: Vec<(String, EntryData)> = outputs
        .into_iter()
        .map(|(p, b)| (p, EntryData::Bytes(b)))
        .collect();
    let mut records = files
        .iter()
        .map(|(p, d)| artifact::file_record(p, d))
        .collect::<Result<Vec<_>, _>>()?;
    records.sort_by(|a, b| a.path.cmp(&b.path));
    let sbom_data = EntryData::Bytes(sbom_bytes);
    let sbom_record = artifact::file_record(SBOM_PATH, &sbom_data)?;
    files.push((SBOM_PATH.to_string(), sbom_data));
    let record_data = EntryData::Bytes(record_bytes);
    let sandbox_record = artifact::file_record(sandbox::RECORD_PATH, &record_data)?;
    files.push((sandbox::RECORD_PATH.to_string(), record_data));
    let mut sealed: Vec<&FileRecord> = records.iter().collect();
    sealed.push(&sbom_record);
    sealed.push(&sandbox_record);
    let sums = artifact::checksums_text(&sealed);
    let sums_record = artifact::file_record(CHECKSUMS_PATH, &EntryData::Bytes(sums.clone()))?;
    files.push((CHECKSUMS_PATH.to_string(), EntryData::Bytes(sums)));
    let sandbox_summary = SandboxSummary {
        profile: record.profile.to_string(),
        egress_blocked: record.egress_blocked,
        blocked_total: record.blocked_total,
        record: sandbox_record,
    };
    Ok(Sealing {
        files,
        outputs: records,
        sbom: sbom_record,
        checksums: sums_record,
        sandbox_summary,
    })
}

/// The manifest's `environment`: where the job ran, this runtime, its
/// sandbox and a fine-tune's GPU.
fn environment(
    platform: kolm_policy::Platform,
    measurement: Option<Vec<u8>>,
    sandbox: SandboxSummary,
    gpu: Option<kolm_format::manifest::GpuEnvironment>,
) -> Environment {
    Environment {
        platform,
        measurement: measurement.map(kolm_format::hexbytes::HexVec),
        runtime: Runtime {
            name: "kolm-enclave".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        sandbox: Some(sandbox),
        gpu,
    }
}

fn create_out_dir(dir: &Path) -> Result<(), RunError> {
    std::fs::create_dir_all(dir).map_err(|error| RunError::OutDir {
        path: dir.display().to_string(),
        error,
    })
}

/// A fresh Ed25519 key that never leaves this process.
fn fresh_key() -> Result<Ed25519KeyPair, RunError> {
    let rng = SystemRandom::new();
    let pkcs8 =
        Ed25519KeyPair::generate_pkcs8(&rng).map_err(|error| RunError::KeyGeneration { error })?;
    Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|error| RunError::KeyRejected { error })
}

/// The key's public half, as the manifest's signer records it.
fn public_key(key: &Ed25519KeyPair) -> [u8; 32] {
    let mut public_key = [0u8; 32];
    public_key.copy_from_slice(key.public_key().as_ref());
    public_key
}

/// Runs a fine-tune job again, exactly as [`run`] would (same sandbox,
/// same staging of the same input bytes), and returns what it wrote,
/// unsealed: what `kolm-enclave replay` compares with an artifact's files.
/// `inputs` are `(name, bytes)` in the spec's order, already checked
/// against the artifact's input records by the caller.
pub fn rerun_fine_tune(
    spec_bytes: &[u8],
    policy_bytes: &[u8],
    inputs: &[Vec<u8>],
    runtime_exe: Option<&Path>,
    jobs_exe: Option<&Path>,
    progress: Option<ProgressMode>,
) -> Result<job::Collected, RunError> {
    let spec_text = std::str::from_utf8(spec_bytes)
        .map_err(|error| RunError::Spec(SpecError::NotUtf8 { error }))?;
    let ft = FineTuneSpec::from_toml_str(spec_text)
        .map_err(|error| RunError::Spec(SpecError::Invalid { error }))?;
    if inputs.len() != ft.inputs.len() {
        return Err(RunError::Spec(SpecError::InputCount {
            given: inputs.len(),
            named: ft.inputs.len(),
        }));
    }
    let gpu = ft.train.device == kolm_format::job_spec::Device::Gpu;
    let spec = JobSpec::FineTune(Box::new(ft));
    let binaries = Binaries::find(runtime_exe, jobs_exe)?;
    let options = FineTuneRunOptions {
        checkpoint_dir: None,
        resume: false,
        progress,
        progress_lines: None,
    };
    let staged = Staged {
        spec: &spec,
        spec_bytes,
        policy_bytes,
        fine_tune: Some(&options),
        gpu,
    };
    Ok(run_sandboxed(&staged, &binaries, inputs, None, None)?.outputs)
}

/// What the sandboxed job left behind.
struct Sandboxed {
    outputs: job::Collected,
    record: sandbox::SandboxRecord,
    /// Always 0: [`check_sealable`] refuses anything else.
    exit_code: i32,
}

/// The job as the sandbox gets it.
struct Staged<'a> {
    spec: &'a JobSpec,
    spec_bytes: &'a [u8],
    /// The policy, for the fine-tune's model card (the gate itself is the
    /// supervisor's).
    policy_bytes: &'a [u8],
    fine_tune: Option<&'a FineTuneRunOptions>,
    /// The job computes on the GPU (`train.device = "gpu"`).
    gpu: bool,
}

/// Files a GPU job loads from outside the system directories: the CUDA
/// user-space libraries (pip wheels keep NVRTC and cuBLAS under
/// site-packages). Only directories holding one of them are handed on.
const CUDA_LIBRARY_PREFIXES: [&str; 4] = ["libnvrtc", "libcublas", "libcuda", "libnvJitLink"];

/// The directories of this process's `LD_LIBRARY_PATH` that hold a CUDA
/// library and lie outside the system directories (which every job has):
/// what a GPU job needs to load NVRTC and cuBLAS, and nothing else of the
/// operator's environment.
fn cuda_library_dirs() -> Vec<PathBuf> {
    let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") else {
        return Vec::new();
    };
    let system = ["/usr", "/lib", "/lib64", "/lib32"];
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(&paths) {
        let Ok(dir) = dir.canonicalize() else {
            continue;
        };
        if system.iter().any(|s| dir.starts_with(s)) || out.contains(&dir) {
            continue;
        }
        let holds_cuda = std::fs::read_dir(&dir).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                CUDA_LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
            })
        });
        if holds_cuda {
            out.push(dir);
        }
    }
    out
}

/// Stages the inputs (exactly the bytes already hashed), the spec and the
/// policy into fresh read-only directories, runs the job binary
/// (`kolm-jobs`, started by the runtime's stage 2) under the sandbox with
/// an empty output directory, and collects what it wrote.
fn run_sandboxed(
    staged: &Staged<'_>,
    binaries: &Binaries,
    input_bytes: &[Vec<u8>],
    cancel: Option<sandbox::CancelSignal>,
    timeout: Option<Duration>,
) -> Result<Sandboxed, RunError> {
    // Held until the outputs are collected: dropping it removes the tree.
    let dirs = stage(staged, input_bytes)?;
    let output_dir = dirs.output.clone();
    let mut cmd = sandbox_command(
        staged,
        binaries,
        dirs.input,
        dirs.spec,
        dirs.output,
        dirs.args,
    )?;
    cmd.cancel = cancel;
    cmd.timeout = timeout;
    cmd.stderr = OutputMode::Capture {
        limit: JOB_STDERR_LIMIT,
    };
    // The kernel's OOM-kill count around the job, to name a SIGKILL.
    let oom_before = crate::finetune::failure::oom_kills();
    let outcome = cmd.run()?;
    let exit_code = judge_exit(staged, &outcome, &output_dir, oom_before)?;
    // Every job process is gone (checked by `judge_exit`): nothing can
    // change the output tree while it is read, and it is read without
    // following links.
    let outputs = job::collect_outputs(&output_dir)?;
    drop(dirs.work);
    Ok(Sandboxed {
        outputs,
        record: outcome.record,
        exit_code,
    })
}

/// The job's work directory, staged by [`stage`].
struct StagedDirs {
    /// Removes the whole tree when dropped.
    work: crate::fsutil::JobDir,
    input: PathBuf,
    output: PathBuf,
    spec: PathBuf,
    /// The job's command line so far (spec, policy, input and output).
    args: JobArgs,
}

/// The [`RunError::WorkDir`] of a failed `step`.
fn werr(step: &'static str) -> impl FnOnce(std::io::Error) -> RunError {
    move |error| RunError::WorkDir { step, error }
}

/// Makes the work directory: the inputs (read-only), an empty output
/// directory the job's uid owns, the spec and the policy (read-only).
fn stage(staged: &Staged<'_>, input_bytes: &[Vec<u8>]) -> Result<StagedDirs, RunError> {
    use std::os::unix::fs::PermissionsExt;
    // World-traversable so the job's uid can reach its directories;
    // what is in it is only what the job may see anyway. Memory-backed
    // where the machine has it (`fsutil::staging_root`), locked while this
    // process lives (a killed one's is swept by the next service start),
    // removed without recursion however deep the job nested its outputs.
    let work = crate::fsutil::JobDir::create(
        &crate::fsutil::staging_root(),
        crate::fsutil::JOB_DIR_PREFIX,
        0o755,
    )
    .map_err(werr("creating"))?;
    let input_dir = work.path().join("input");
    let output_dir = work.path().join("output");
    std::fs::create_dir(&input_dir).map_err(werr("input dir"))?;
    for (name, data) in staged.spec.inputs().iter().zip(input_bytes) {
        let path = input_dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(werr("input dir"))?;
        }
        std::fs::write(&path, data).map_err(werr("staging an input"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))
            .map_err(werr("staging an input"))?;
    }
    std::fs::create_dir(&output_dir).map_err(werr("output dir"))?;
    std::fs::set_permissions(&output_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(werr("output dir"))?;
    let as_root = std::fs::metadata(work.path())
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if as_root {
        std::os::unix::fs::chown(&output_dir, Some(sandbox::JOB_UID), Some(sandbox::JOB_UID))
            .map_err(werr("handing the output dir to the job uid"))?;
    }

    // The spec and the policy, beside the inputs, read-only: the job reads
    // what it is to do from the spec, with the reader the supervisor used.
    let spec_dir = work.path().join("spec");
    std::fs::create_dir(&spec_dir).map_err(werr("spec dir"))?;
    let staged_file = |name: &str, bytes: &[u8]| -> Result<PathBuf, RunError> {
        let path = spec_dir.join(name);
        std::fs::write(&path, bytes).map_err(werr("staging the spec"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))
            .map_err(werr("staging the spec"))?;
        Ok(path)
    };
    let mut args = JobArgs::new(
        staged_file("job.toml", staged.spec_bytes)?,
        input_dir.clone(),
        output_dir.clone(),
    );
    args.policy = Some(staged_file("policy.toml", staged.policy_bytes)?);
    Ok(StagedDirs {
        work,
        input: input_dir,
        output: output_dir,
        spec: spec_dir,
        args,
    })
}

/// The sandbox command of the job: the inputs and spec read-only, the
/// output directory writable, and for a fine-tune its checkpoints, the
/// host's memory reading, the CUDA libraries of a GPU job and where its
/// progress goes.
fn sandbox_command(
    staged: &Staged<'_>,
    binaries: &Binaries,
    input_dir: PathBuf,
    spec_dir: PathBuf,
    output_dir: PathBuf,
    mut args: JobArgs,
) -> Result<SandboxCommand, RunError> {
    let mut cmd = SandboxCommand::new(&binaries.runtime, &binaries.jobs);
    cmd.profile = JOB_PROFILE;
    cmd.read_only = vec![input_dir, spec_dir];
    cmd.read_write = vec![output_dir];
    cmd.stdout = OutputMode::Discard;
    if let Some(ft) = staged.fine_tune {
        if let Some(dir) = &ft.checkpoint_dir {
            std::fs::create_dir_all(dir).map_err(werr("checkpoint dir"))?;
            // The sandbox hands the tree to the run's ids (and back after).
            let dir = dir.canonicalize().map_err(werr("checkpoint dir"))?;
            args.checkpoint_dir = Some(dir.clone());
            cmd.read_write.push(dir);
            args.resume = ft.resume;
        }
        // The job cannot read /proc/meminfo inside the sandbox: the host
        // memory pre-flight takes the supervisor's reading.
        args.host_available_bytes = crate::finetune::failure::host_available_bytes();
        if staged.gpu {
            // NVRTC and cuBLAS, read-only and loadable, on the loader's path.
            let dirs = cuda_library_dirs();
            if !dirs.is_empty() {
                let joined =
                    std::env::join_paths(&dirs).map_err(|error| RunError::LibraryPath { error })?;
                cmd.env.push(("LD_LIBRARY_PATH".into(), joined));
                cmd.library_dirs = dirs;
            }
        }
        if let Some(tx) = &ft.progress_lines {
            args.progress = ProgressMode::Json;
            cmd.stdout = OutputMode::Lines(tx.clone());
        } else if let Some(p) = ft.progress {
            args.progress = p;
            cmd.stdout = OutputMode::Inherit;
        }
    }
    cmd.args = args.to_args();
    Ok(cmd)
}

/// The exit code the manifest records (0), decided on the sandbox record
/// (what gets sealed), with which the process status must agree. A
/// fine-tune that stopped at one of its checks, or was killed (most likely
/// by the OOM killer), says why.
fn judge_exit(
    staged: &Staged<'_>,
    outcome: &sandbox::SandboxOutcome,
    output_dir: &Path,
    oom_before: Option<u64>,
) -> Result<i32, RunError> {
    let exit_code = match check_sealable(&outcome.record) {
        Ok(code) => code,
        // A fine-tune job that stopped at one of its checks says which.
        Err(NotSealable::ExitCode(code)) if staged.fine_tune.is_some() => {
            return Err(match crate::finetune::failure::read(output_dir) {
                Some(f) => RunError::FineTune {
                    check: f.check,
                    message: f.message,
                },
                None => NotSealable::ExitCode(code).into(),
            });
        }
        // A fine-tune job killed by SIGKILL: most likely the OOM killer.
        Err(NotSealable::Signal(sig)) if staged.fine_tune.is_some() && !outcome.timed_out => {
            let oom_after = crate::finetune::failure::oom_kills();
            return Err(
                match crate::finetune::failure::killed(output_dir, sig, oom_before, oom_after) {
                    Some(f) => RunError::FineTune {
                        check: f.check,
                        message: f.message,
                    },
                    None => NotSealable::Signal(sig).into(),
                },
            );
        }
        Err(e) => return Err(e.into()),
    };
    if !outcome.status.success() {
        // The job's stderr is not shown: it may contain sealed data.
        return Err(RunError::Job(JobError::ProcessFailed {
            status: outcome.status,
            stderr_bytes: outcome.stderr.len(),
        }));
    }
    Ok(exit_code)
}

fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, InputError> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|error| InputError::Open {
        path: path.display().to_string(),
        error,
    })?;
    let mut data = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|error| InputError::Read {
            path: path.display().to_string(),
            error,
        })?;
    if data.len() as u64 > cap {
        return Err(InputError::TooLarge { cap });
    }
    Ok(data)
}
