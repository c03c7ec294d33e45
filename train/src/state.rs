//! Checkpoints of a training run: what the loop writes every N steps and
//! reads back on resume (`crate::checkpoint`, docs/jobs.md
//! "Checkpoints").
//!
//! Tensor groups and names (both backends):
//!
//! | group | full fine-tune | LoRA |
//! |---|---|---|
//! | `param` | every parameter, by its `ParamInfo` name | (none: the base is frozen and bound by its SHA-256) |
//! | `lora_a`, `lora_b` | (none) | each site's `A` / `B`, by site name (`layers.{l}.{target}`) |
//! | `adam_m`, `adam_v` | the parameter's name | `lora_a.<site>` / `lora_b.<site>` |
//!
//! `rng_state` is the loader's permutation seed (8 bytes, big-endian) after
//! a one-byte version: the loop draws no other randomness (every epoch's
//! permutation is a function of that seed and the epoch), so this is the
//! whole random state, and a resume checks it against the job's seed.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use crate::checkpoint::{self, Checkpoint, DataLoaderPosition, OptimizerState, TrainState};
use kolm_format::hexbytes::Sha256Digest;

use crate::{Backend, TrainError};

/// Version byte of [`rng_state`].
const RNG_STATE_V1: u8 = 1;

/// Largest tensor file a resume reads: twice the f32 state of a
/// 2-billion-parameter full fine-tune (weights and two moments).
pub const MAX_CHECKPOINT_BYTES: u64 = 48 << 30;

/// Where and how often a run checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPlan {
    pub dir: PathBuf,
    /// A checkpoint after every `every` steps (and after the last step).
    pub every: u64,
    /// Complete checkpoints kept (older ones are removed).
    pub keep: NonZeroUsize,
}

/// The checkpoint's `rng_state` for a loader seeded with `permutation_seed`.
pub fn rng_state(permutation_seed: u64) -> Vec<u8> {
    let mut out = vec![RNG_STATE_V1];
    out.extend_from_slice(&permutation_seed.to_be_bytes());
    out
}

/// What a checkpoint binds a run to, and where it stops.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub total_steps: u64,
    pub job_spec_sha256: Sha256Digest,
    pub base_model_sha256: Sha256Digest,
    pub permutation_seed: u64,
}

/// Writes the state after `step` steps to `plan.dir`.
pub fn save(
    plan: &CheckpointPlan,
    binding: &Binding,
    step: u64,
    loader: DataLoaderPosition,
    backend: &dyn Backend,
) -> Result<PathBuf, TrainError> {
    let state = TrainState {
        step,
        total_steps: binding.total_steps,
        job_spec_sha256: binding.job_spec_sha256,
        base_model_sha256: binding.base_model_sha256,
        rng_state: rng_state(loader.permutation_seed),
        data_loader: loader,
        optimizer: OptimizerState {
            step: backend.optimizer_steps(),
        },
    };
    let ckpt = Checkpoint::new(state, backend.state_tensors()?)?;
    Ok(checkpoint::write(&plan.dir, &ckpt, plan.keep)?)
}

/// A run's state read back from its newest checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// Steps completed.
    pub step: u64,
    pub loader: DataLoaderPosition,
    /// The checkpoint's directory.
    pub path: PathBuf,
}

/// Loads the newest checkpoint of `dir` into `backend`, or `None` when
/// there is none (the run starts from step 1). Refuses a checkpoint of
/// another job or base model (`CheckpointError::OtherJob` names the field),
/// of another length, or of another data order.
pub fn restore(
    dir: &Path,
    binding: &Binding,
    backend: &mut dyn Backend,
) -> Result<Option<Resumed>, TrainError> {
    let Some(latest) = checkpoint::latest(dir, MAX_CHECKPOINT_BYTES)? else {
        return Ok(None);
    };
    let ckpt = latest.checkpoint;
    ckpt.check_resumes(&binding.job_spec_sha256, &binding.base_model_sha256)?;
    let (state, tensors) = ckpt.into_parts();
    let at = latest.path.display();
    if state.total_steps != binding.total_steps {
        return Err(TrainError::Invalid(format!(
            "checkpoint {at}: total_steps is {}, this run's is {}",
            state.total_steps, binding.total_steps
        )));
    }
    if state.data_loader.permutation_seed != binding.permutation_seed
        || state.rng_state != rng_state(binding.permutation_seed)
    {
        return Err(TrainError::Invalid(format!(
            "checkpoint {at}: its data loader seed (rng_state {}) is not this job's",
            state
                .rng_state
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )));
    }
    backend.load_state(&tensors, state.optimizer.step)?;
    Ok(Some(Resumed {
        step: state.step,
        loader: state.data_loader,
        path: latest.path,
    }))
}
