//! The fine-tune job (`kind = "fine-tune"`, docs/jobs.md): inside the
//! sandbox, read the spec and the inputs, load the base model, train it
//! (kolm-train, on the CPU or the GPU), evaluate the result (kolm-eval) and
//! write the artifact's files; the supervisor (`kolm-enclave`) then applies
//! the policy's quality gate, which is binding.
//!
//! - [`base`]: the base model (a pinned GGUF input, or a random preset);
//! - [`data`]: the training files, tokenized;
//! - [`job`]: the job itself, and what it writes (a failed job leaves only
//!   `failure.json`, `kolm_format::job_io::Failure`, so the supervisor can
//!   say why without reading the job's stderr, which may hold data);
//! - [`train`]: the bridge to kolm-train (backend, memory pre-flight,
//!   checkpoints, progress) and this machine's tuple;
//! - [`card`]: the model card and the lineage record;
//! - [`scorer`]: the model as the evaluation's scorer.

pub mod base;
pub mod card;
pub mod data;
mod gpu;
pub mod job;
pub mod scorer;
pub mod train;

/// Why a fine-tune job failed (inside the sandbox). The message of each is
/// built from the spec, the runtime and the machine, never from the
/// customer's data, so [`failure`] can hand it to the supervisor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FineTuneError {
    #[error("job spec: {0}")]
    Spec(String),
    /// The spec's LoRA method does not fit the model.
    #[error("job spec: {error}")]
    Lora {
        error: kolm_train::lora::LayoutError,
    },
    #[error("base model: {reason}")]
    BaseModel { reason: String },
    #[error("training data: {file}{}: {reason}", line.map(|n| format!(" line {n}")).unwrap_or_default())]
    Data {
        file: String,
        line: Option<usize>,
        reason: String,
    },
    /// The job asks for the GPU and cannot have it: it fails, it never
    /// falls back to the CPU.
    #[error("the job asks for the GPU (train.device = \"gpu\") and none is usable: {0}")]
    GpuUnavailable(String),
    /// The memory pre-flight refused the job before anything was allocated.
    #[error("{0}")]
    Memory(String),
    #[error("training: {0}")]
    Train(String),
    #[error("evaluation: {0}")]
    Eval(String),
    #[error("writing {path}: {reason}")]
    Output { path: String, reason: String },
}

impl FineTuneError {
    /// The check that failed, as `failure.json` names it.
    pub fn check(&self) -> &'static str {
        match self {
            FineTuneError::Spec(_) | FineTuneError::Lora { .. } => "spec",
            FineTuneError::BaseModel { .. } => "base-model",
            FineTuneError::Data { .. } => "data",
            FineTuneError::GpuUnavailable(_) => "gpu-unavailable",
            FineTuneError::Memory(_) => "memory-preflight",
            FineTuneError::Train(_) => "train",
            FineTuneError::Eval(_) => "eval",
            FineTuneError::Output { .. } => "output",
        }
    }
}

/// Leaves `failure.json` in `output_dir` for the supervisor (best effort:
/// the job is failing anyway).
pub fn write_failure(output_dir: &std::path::Path, e: &FineTuneError) {
    use kolm_format::job_io::{FAILURE_FILE, Failure};
    if let Ok(bytes) = Failure::new(e.check(), &e.to_string()).to_json_bytes() {
        let _ = std::fs::write(output_dir.join(FAILURE_FILE), bytes);
    }
}

/// Records the admitted pre-flight estimate while the job runs, so that the
/// supervisor can name it when the job is killed (best effort).
fn write_estimate(output_dir: &std::path::Path, bytes: u64) {
    use kolm_format::job_io::{ESTIMATE_FILE, estimate_to_bytes};
    let _ = std::fs::write(output_dir.join(ESTIMATE_FILE), estimate_to_bytes(bytes));
}

/// Removes the estimate record before the outputs are collected (it is
/// not an output).
fn remove_estimate(output_dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(output_dir.join(kolm_format::job_io::ESTIMATE_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
