//! The bridge from the job to kolm-train: the backend the spec asks for,
//! the memory pre-flight, the loop with checkpoints, progress.

use std::path::Path;

use kolm_format::checkpoint;
use kolm_format::job_spec::FineTuneSpec;

use super::FineTuneError;
use super::base::Base;
use super::data::Tokens;
use super::job::ProgressMode;
use super::tuple::Tuple;

/// What training needs.
#[derive(Debug)]
pub struct Request<'a> {
    pub spec: &'a FineTuneSpec,
    pub spec_sha256: [u8; 32],
    pub base: &'a Base,
    pub tokens: Tokens,
    pub checkpoint_dir: Option<&'a Path>,
    pub resume: bool,
    pub progress: ProgressMode,
}

/// One step of the training log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogStep {
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
}

/// What training produced.
#[derive(Debug)]
pub struct TrainOutcome {
    /// Weights in the kernels' layout, LoRA merged.
    pub merged: Vec<Vec<f32>>,
    /// LoRA adapter tensors (`lora_a/...`, `lora_b/...`).
    pub adapter: Option<Vec<checkpoint::Tensor>>,
    /// Every step, the resumed ones included.
    pub log: Vec<LogStep>,
    pub tokens: u64,
    pub tokens_per_s: f64,
    pub peak_memory_bytes: Option<u64>,
    pub environment: Tuple,
}

/// Trains as the spec says.
pub fn train(req: &Request<'_>) -> Result<TrainOutcome, FineTuneError> {
    let _ = req;
    Err(FineTuneError::Train("the trainer is being merged".into()))
}
