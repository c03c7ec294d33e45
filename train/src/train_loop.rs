//! The training loop: batches from the seeded loader, the scheduled rate,
//! one backend step per batch, progress reports, checkpoints and resume.
//!
//! The contract: a run killed after a checkpoint and resumed ends with the
//! same bytes (every merged weight, every loss after the resume point) as
//! the run never interrupted. It holds because everything a step reads is
//! either in the checkpoint (weights, moments, optimizer step count, loader
//! position) or a pure function of the job (the batch order from the
//! permutation seed, the rate from the step number), and each backend step
//! is deterministic.

use std::time::Instant;

use crate::checkpoint;
use kolm_format::hexbytes::Sha256Digest;
use kolm_format::job_spec::Train;

use crate::data::{Dataset, Loader, permutation_seed};
use crate::schedule::lr_at;
use crate::state::{self, Binding, CheckpointPlan};
use crate::{Backend, StepConfig, TrainError};

/// One run to train.
pub struct TrainJob<'a> {
    /// The spec's hyper-parameters (`length` is already resolved into
    /// `total_steps`; `checkpoint_every` into `checkpoint`).
    pub train: Train,
    /// Optimiser steps of the whole run (`data::steps_for`).
    pub total_steps: u64,
    /// Rows of `train.seq_len` positions.
    pub dataset: Dataset,
    /// SHA-256 of the job spec's bytes and of the base model file: a
    /// checkpoint resumes only the run that wrote it.
    pub job_spec_sha256: Sha256Digest,
    pub base_model_sha256: Sha256Digest,
    /// Where checkpoints go; `None`: the run writes none.
    pub checkpoint: Option<CheckpointPlan>,
    /// Continue from the newest checkpoint in `checkpoint.dir` (from step 1
    /// when it holds none).
    pub resume: bool,
    /// Stop after this step (checkpointing it first when checkpoints are
    /// on) with `TrainError::Stopped`; a step at or past the end is ignored.
    pub stop_after: Option<u64>,
    /// Called after every step.
    pub progress: &'a mut dyn FnMut(&Progress),
}

impl std::fmt::Debug for TrainJob<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainJob")
            .field("train", &self.train)
            .field("total_steps", &self.total_steps)
            .field("rows", &self.dataset.rows())
            .field("checkpoint", &self.checkpoint)
            .field("resume", &self.resume)
            .field("stop_after", &self.stop_after)
            .finish_non_exhaustive()
    }
}

/// What one step reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// 1-based step just completed.
    pub step: u64,
    pub total: u64,
    /// Mean cross-entropy of the step's batch (nats).
    pub loss: f64,
    pub lr: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Input tokens (`batch * seq`, padding included) per second over the
    /// steps this invocation ran.
    pub tokens_per_s: f64,
    /// Seconds since this invocation started stepping.
    pub elapsed_s: f64,
    /// Remaining steps at the average step time so far.
    pub eta_s: f64,
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    /// The first step this invocation ran (1, or the resumed step + 1).
    pub first_step: u64,
    /// The loss of each step from `first_step` to the end.
    pub losses: Vec<f64>,
    /// Final weights in `Config::params` order, adapters merged.
    pub params: Vec<Vec<f32>>,
    /// LoRA adapter tensors (`lora_a/<site>`, `lora_b/<site>`), or `None`.
    pub adapter: Option<Vec<checkpoint::Tensor>>,
    /// Scored targets trained on by this invocation.
    pub tokens: u64,
    /// Wall-clock seconds of this invocation's steps.
    pub wall_s: f64,
}

/// Trains `backend` (fresh, or restored from the newest checkpoint when
/// `job.resume`) to `job.total_steps`.
pub fn run(job: TrainJob<'_>, backend: &mut dyn Backend) -> Result<Trained, TrainError> {
    let TrainJob {
        train,
        total_steps,
        dataset,
        job_spec_sha256,
        base_model_sha256,
        checkpoint,
        resume,
        stop_after,
        progress,
    } = job;
    let batch = train.batch as usize;
    if batch == 0 || total_steps == 0 {
        return Err(TrainError::Invalid(format!(
            "batch {batch} and total_steps {total_steps}: both must be > 0"
        )));
    }
    if dataset.seq() != train.seq_len as usize {
        return Err(TrainError::Invalid(format!(
            "the dataset's rows are {} positions, train.seq_len is {}",
            dataset.seq(),
            train.seq_len
        )));
    }
    if let Some(plan) = &checkpoint
        && plan.every == 0
    {
        return Err(TrainError::Invalid("checkpoint_every of 0".into()));
    }
    let binding = Binding {
        total_steps,
        job_spec_sha256,
        base_model_sha256,
        permutation_seed: permutation_seed(train.seed),
    };
    let resumed = match (&checkpoint, resume) {
        (Some(plan), true) => state::restore(&plan.dir, &binding, backend)?,
        (None, true) => {
            return Err(TrainError::Invalid(
                "resume asked for, but the run has no checkpoint directory".into(),
            ));
        }
        (_, false) => None,
    };
    let (done, mut loader) = match resumed {
        Some(r) => (r.step, Loader::resume(&dataset, batch, r.loader)?),
        None => (0, Loader::new(&dataset, batch, binding.permutation_seed)?),
    };
    if backend.optimizer_steps() != done {
        return Err(TrainError::Invalid(format!(
            "the backend has taken {} optimizer steps; the run continues after step {done}",
            backend.optimizer_steps()
        )));
    }

    let start = Instant::now();
    let mut losses = Vec::new();
    let mut tokens = 0u64;
    let mut inputs = 0u64;
    for step in done + 1..=total_steps {
        let b = loader.next_batch();
        let lr = lr_at(step, total_steps, &train);
        let stats = backend.step(
            &b,
            &StepConfig {
                lr,
                weight_decay: train.weight_decay,
                clip_norm: train.clip_norm,
            },
        )?;
        losses.push(stats.loss);
        tokens += b.valid_targets() as u64;
        inputs += (b.batch * b.seq) as u64;
        let elapsed_s = start.elapsed().as_secs_f64();
        let ran = (step - done) as f64;
        progress(&Progress {
            step,
            total: total_steps,
            loss: stats.loss,
            lr,
            grad_norm: stats.grad_norm,
            tokens_per_s: inputs as f64 / elapsed_s.max(1e-9),
            elapsed_s,
            eta_s: elapsed_s / ran * (total_steps - step) as f64,
        });
        let stopping = stop_after == Some(step) && step < total_steps;
        if let Some(plan) = &checkpoint
            && (step % plan.every == 0 || step == total_steps || stopping)
        {
            state::save(plan, &binding, step, loader.position(), backend)?;
        }
        if stopping {
            return Err(TrainError::Stopped { step });
        }
    }
    Ok(Trained {
        first_step: done + 1,
        losses,
        params: backend.merged_params()?,
        adapter: backend.adapter()?,
        tokens,
        wall_s: start.elapsed().as_secs_f64(),
    })
}
