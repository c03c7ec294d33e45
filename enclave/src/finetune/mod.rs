//! The fine-tune job (`kind = "fine-tune"`, docs/jobs.md): inside the
//! sandbox, read the spec and the inputs, load the base model, train it
//! (kolm-train, on the CPU or the GPU), evaluate the result (kolm-eval) and
//! write the artifact's files; the supervisor then applies the policy's
//! quality gate, which is binding (`crate::run`).
//!
//! - [`base`]: the base model (a pinned GGUF input, or a random preset);
//! - [`data`]: the training files, tokenized;
//! - [`job`]: the job itself, and what it writes;
//! - [`failure`]: the one file a failed job leaves, so the supervisor can
//!   say why without reading the job's stderr (which may hold data);
//! - [`scorer`]: the model as the evaluation's scorer.

pub mod base;
pub mod card;
pub mod data;
pub mod failure;
pub mod gate;
mod gpu;
pub mod job;
pub mod replay;
pub mod scorer;
pub mod train;
pub mod tuple;

/// Why a fine-tune job failed (inside the sandbox). The message of each is
/// built from the spec, the runtime and the machine, never from the
/// customer's data, so [`failure`] can hand it to the supervisor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FineTuneError {
    #[error("job spec: {0}")]
    Spec(String),
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
            FineTuneError::Spec(_) => "spec",
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
