//! kolm's trainer: one training loop ([`run`]) over two backends, the CPU
//! ([`cpu::CpuBackend`]: candle's CPU tensors and autograd in `f32`) and
//! the GPU ([`gpu::GpuBackend`]: `kolm_kernels::llama::GpuLlama`).
//!
//! The loop owns everything both backends share so that they compute the
//! same run: the data loader and its seeded epoch permutations
//! ([`data`]), the learning-rate schedule ([`schedule`]), the LoRA layout
//! and its seeded initialisation ([`lora`]), checkpoints and resume
//! ([`state`]) and progress reports. A backend owns the weights, the
//! gradients and AdamW's moments, and takes one step at a time.
//!
//! Weights are always in `kolm_kernels::llama::Config::params` order
//! and layout (q/k/v stacked, gate/up stacked, `[out, in]` matrices).

pub mod checkpoint;
pub mod cpu;
pub mod data;
pub mod gpu;
pub mod lora;
pub mod memory;
pub mod schedule;
pub mod state;
mod train_loop;

pub use train_loop::{Progress, TrainJob, Trained, run};

/// AdamW's first-moment decay (both backends).
pub const BETA1: f64 = 0.9;
/// AdamW's second-moment decay (both backends).
pub const BETA2: f64 = 0.95;
/// AdamW's denominator epsilon (both backends).
pub const ADAM_EPS: f64 = 1e-8;

/// One step's tokens: `ids` and `targets` are `[batch, seq]` row-major; a
/// negative target is not scored (padding, a prompt token of an SFT
/// example, the last position of a window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub batch: usize,
    pub seq: usize,
    pub ids: Vec<u32>,
    pub targets: Vec<i32>,
}

impl Batch {
    /// Targets that are scored.
    pub fn valid_targets(&self) -> usize {
        self.targets.iter().filter(|&&t| t >= 0).count()
    }
}

/// What one optimiser step measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Mean cross-entropy over the batch's scored targets (nats).
    pub loss: f64,
    /// Global gradient L2 norm before clipping.
    pub grad_norm: f64,
}

/// Optimiser settings of one step (the schedule picks `lr`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepConfig {
    pub lr: f64,
    /// Decoupled weight decay, applied to every trained tensor.
    pub weight_decay: f64,
    /// Global gradient-norm clip; `None`: no clipping.
    pub clip_norm: Option<f64>,
}

/// A device that trains: forward, backward, clipping and AdamW on its own
/// weights. Both backends keep `f32` master weights and AdamW moments.
pub trait Backend {
    /// One optimiser step on `batch` (the loss is the mean over its scored
    /// targets; a batch with none is refused).
    fn step(&mut self, batch: &Batch, config: &StepConfig) -> Result<StepStats, TrainError>;

    /// AdamW updates applied so far.
    fn optimizer_steps(&self) -> u64;

    /// Everything a checkpoint must hold to resume bit for bit: the trained
    /// tensors and their moments (groups `param`, `adam_m`, `adam_v`, and
    /// `lora_a`, `lora_b` for LoRA; see [`state`] for the names).
    fn state_tensors(&self) -> Result<Vec<checkpoint::Tensor>, TrainError>;

    /// Puts back what [`Self::state_tensors`] gave, after `optimizer_steps`
    /// updates. Refuses a missing, extra or misshapen tensor.
    fn load_state(
        &mut self,
        tensors: &[checkpoint::Tensor],
        optimizer_steps: u64,
    ) -> Result<(), TrainError>;

    /// The model's weights now, LoRA adapters merged (`W + alpha/rank B A`),
    /// in `Config::params` order.
    fn merged_params(&self) -> Result<Vec<Vec<f32>>, TrainError>;

    /// The LoRA adapter tensors (`lora_a/...`, `lora_b/...`), or `None` for
    /// a full fine-tune.
    fn adapter(&self) -> Result<Option<Vec<checkpoint::Tensor>>, TrainError>;
}

/// Why training failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The configuration, data or state handed in does not fit.
    #[error("{0}")]
    Invalid(String),
    /// The loss or a gradient stopped being finite.
    #[error("step {step}: {what} is not finite")]
    NotFinite { step: u64, what: &'static str },
    /// The CPU backend's tensor library failed.
    #[error("cpu backend: {0}")]
    Cpu(candle_core::Error),
    /// The GPU backend failed.
    #[error("gpu backend: {0}")]
    Gpu(kolm_kernels::KernelError),
    /// The memory pre-flight refused the run.
    #[error(transparent)]
    Memory(#[from] memory::MemoryRefusal),
    /// A checkpoint could not be written or read.
    #[error("checkpoint: {0}")]
    Checkpoint(checkpoint::CheckpointError),
    /// The run was asked to stop (after its last checkpoint).
    #[error("stopped after step {step}")]
    Stopped { step: u64 },
}

// By hand, not `#[from]`: the cause is in each message, and a `source`
// would repeat it in a printed chain (anyhow's `{:#}`).
impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> TrainError {
        TrainError::Cpu(e)
    }
}
impl From<kolm_kernels::KernelError> for TrainError {
    fn from(e: kolm_kernels::KernelError) -> TrainError {
        TrainError::Gpu(e)
    }
}
impl From<checkpoint::CheckpointError> for TrainError {
    fn from(e: checkpoint::CheckpointError) -> TrainError {
        TrainError::Checkpoint(e)
    }
}
