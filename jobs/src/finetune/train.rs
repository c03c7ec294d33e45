//! The bridge from the job to kolm-train: the backend the spec asks for,
//! the memory pre-flight, the loop with checkpoints, progress.

use std::path::Path;

use kolm_format::job_spec::{Device, FineTuneSpec, Method, Precision};
use kolm_train::checkpoint;
use kolm_train::data::Dataset;
use kolm_train::lora::Layout;
use kolm_train::state::CheckpointPlan;

use super::FineTuneError;
use super::base::Base;
use super::data::Tokens;
use kolm_format::environment::{CpuTuple, Tuple};
use kolm_format::job_io::ProgressMode;

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
    /// The host's available memory as the supervisor read it (the
    /// sandbox hides /proc/meminfo from the job).
    pub host_available_bytes: Option<u64>,
    /// Where the admitted estimate is recorded for the supervisor
    /// (`failure::ESTIMATE_FILE`); `None` records nothing.
    pub output_dir: Option<&'a Path>,
}

/// One step of the training log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogStep {
    pub loss: f64,
    pub lr: f64,
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
    pub memory_estimate_bytes: Option<u64>,
    pub environment: Tuple,
}

/// Checkpoints kept (the newest ones).
const KEEP_CHECKPOINTS: usize = 2;

/// Trains as the spec says.
pub fn train(req: &Request<'_>) -> Result<TrainOutcome, FineTuneError> {
    let t = &req.spec.train;
    let seq = t.seq_len as usize;
    let dataset = dataset(req, seq)?;
    let total_steps = kolm_train::data::steps_for(t.length, dataset.rows(), t.batch as usize)
        .map_err(train_err)?;
    let lora = lora_layout(req)?;
    let batch = t.batch as usize;

    // The backend, after the memory pre-flight: nothing is allocated for a
    // job that cannot fit.
    let (mut backend, admitted, gpu_env) = match t.device {
        Device::Cpu => {
            let (backend, admitted) = cpu_backend(req, lora.as_ref(), batch, seq)?;
            (backend, admitted, None)
        }
        Device::Gpu => {
            let (backend, env, estimate) = super::gpu::backend(req, lora.clone(), batch, seq)?;
            (backend, estimate, Some(env))
        }
    };
    if let Some(dir) = req.output_dir {
        super::write_estimate(dir, admitted);
    }
    let trained = run_loop(req, dataset, total_steps, backend.as_mut())?;
    let log = full_log(req, &trained, total_steps)?;
    Ok(TrainOutcome {
        merged: trained.params,
        adapter: trained.adapter,
        tokens_per_s: if trained.wall_s > 0.0 {
            trained.tokens as f64 / trained.wall_s
        } else {
            0.0
        },
        tokens: trained.tokens,
        log,
        memory_estimate_bytes: Some(admitted),
        environment: environment(t, gpu_env),
    })
}

fn train_err(e: kolm_train::TrainError) -> FineTuneError {
    FineTuneError::Train(e.to_string())
}

/// The training rows: the tokens cut to `seq`, padded with the tokenizer's
/// padding (else end-of-sequence, else 0) token; every token inside the
/// model's vocabulary.
fn dataset(req: &Request<'_>, seq: usize) -> Result<Dataset, FineTuneError> {
    let spec = req.spec;
    let pad = req
        .base
        .tokenizer
        .specials()
        .padding
        .or(req.base.tokenizer.specials().eos)
        .unwrap_or(0);
    let dataset = match &req.tokens {
        Tokens::Text(docs) => Dataset::from_text(docs, None, seq, pad),
        Tokens::Sft(pairs) => Dataset::from_sft(pairs, seq, spec.pack, pad),
    }
    .map_err(|e| FineTuneError::Data {
        file: spec.train_files.join(", "),
        line: None,
        reason: e.to_string(),
    })?;
    if let Some(max) = dataset.max_token()
        && max as usize >= req.base.config.vocab()
    {
        return Err(FineTuneError::Data {
            file: spec.train_files.join(", "),
            line: None,
            reason: format!(
                "token {max} outside the model's vocabulary of {}",
                req.base.config.vocab()
            ),
        });
    }
    Ok(dataset)
}

/// The spec's LoRA adapters on the base model, or `None` for a full
/// fine-tune.
fn lora_layout(req: &Request<'_>) -> Result<Option<Layout>, FineTuneError> {
    match &req.spec.method {
        Method::Full => Ok(None),
        Method::Lora {
            rank,
            alpha,
            targets,
        } => Layout::new(&req.base.config, *rank as usize, *alpha, targets)
            .map(Some)
            .map_err(|error| FineTuneError::Lora { error }),
    }
}

/// The CPU backend after the host pre-flight (the estimate against the
/// host's available memory, failing closed), and the admitted estimate.
fn cpu_backend(
    req: &Request<'_>,
    lora: Option<&Layout>,
    batch: usize,
    seq: usize,
) -> Result<(Box<dyn kolm_train::Backend>, u64), FineTuneError> {
    let t = &req.spec.train;
    if t.precision != Precision::F32 {
        return Err(FineTuneError::Spec("bf16 is a GPU precision".into()));
    }
    // The host pre-flight: the estimate against MemAvailable.
    let cfg = &req.base.config;
    let estimate = kolm_train::memory::estimate_host(cfg, batch, seq, lora).map_err(train_err)?;
    // Fail closed: a pre-flight that cannot see the memory refuses.
    let available = req.host_available_bytes.ok_or_else(|| {
        FineTuneError::Memory(
            "memory pre-flight: the host's available memory cannot be read (the \
             supervisor passes it as --host-available-bytes)"
                .into(),
        )
    })?;
    if !estimate.fits(available) {
        let largest = kolm_train::memory::largest_batch_that_fits(available, |b| {
            kolm_train::memory::estimate_host(cfg, b, seq, lora)
        })
        .map_err(train_err)?;
        let refusal = kolm_train::memory::check(&estimate, available, largest)
            .err()
            .map_or_else(|| "memory pre-flight refused".to_owned(), |r| r.to_string());
        return Err(FineTuneError::Memory(refusal));
    }
    let backend = kolm_train::cpu::CpuBackend::new(
        req.base.config,
        req.base.params.clone(),
        lora.cloned(),
        t.seed,
    )
    .map_err(train_err)?;
    Ok((Box::new(backend), estimate.required_bytes()))
}

/// Where and how often checkpoints are written: every `checkpoint_every`
/// steps keeping the newest [`KEEP_CHECKPOINTS`], or only at the end.
fn checkpoint_plan(req: &Request<'_>, total_steps: u64) -> Option<CheckpointPlan> {
    match (req.checkpoint_dir, req.spec.train.checkpoint_every) {
        (Some(dir), Some(every)) => Some(CheckpointPlan {
            dir: dir.join(CHECKPOINTS),
            every,
            keep: std::num::NonZeroUsize::new(KEEP_CHECKPOINTS)
                .unwrap_or(std::num::NonZeroUsize::MIN),
        }),
        (Some(dir), None) => Some(CheckpointPlan {
            dir: dir.join(CHECKPOINTS),
            every: total_steps,
            keep: std::num::NonZeroUsize::MIN,
        }),
        (None, _) => None,
    }
}

/// The training loop with checkpoints and progress. With checkpoints, each
/// step's loss is appended to `losses.log` in the checkpoint directory
/// (exact bits), so that a resumed run can log the steps it did not run
/// itself.
fn run_loop(
    req: &Request<'_>,
    dataset: Dataset,
    total_steps: u64,
    backend: &mut dyn kolm_train::Backend,
) -> Result<kolm_train::Trained, FineTuneError> {
    let t = &req.spec.train;
    let progress_mode = req.progress;
    let mut loss_file = match req.checkpoint_dir {
        Some(dir) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(LOSS_LOG))
                .map_err(|e| FineTuneError::Train(format!("{LOSS_LOG}: {e}")))?,
        ),
        None => None,
    };
    let mut on_step = |p: &kolm_train::Progress| {
        if let Some(f) = loss_file.as_mut() {
            use std::io::Write;
            let _ = writeln!(f, "{} {:016x}", p.step, p.loss.to_bits());
        }
        show(progress_mode, p);
    };
    let trained = kolm_train::run(
        kolm_train::TrainJob {
            train: t.clone(),
            total_steps,
            dataset,
            job_spec_sha256: kolm_format::hexbytes::HexBytes(req.spec_sha256),
            base_model_sha256: kolm_format::hexbytes::HexBytes(req.base.sha256),
            checkpoint: checkpoint_plan(req, total_steps),
            resume: req.resume,
            stop_after: None,
            progress: &mut on_step,
        },
        backend,
    )
    .map_err(train_err)?;
    if progress_mode == ProgressMode::Bar {
        println!();
    }
    Ok(trained)
}

/// The log covers every step, those before a resume included: the losses
/// come from the run (checkpointed), the rate from the schedule, so a
/// resumed run's log is the uninterrupted run's byte for byte.
fn full_log(
    req: &Request<'_>,
    trained: &kolm_train::Trained,
    total_steps: u64,
) -> Result<Vec<LogStep>, FineTuneError> {
    let mut losses = match req.checkpoint_dir {
        Some(dir) if trained.first_step > 1 => earlier_losses(dir, trained.first_step)?,
        _ => Vec::new(),
    };
    losses.extend(&trained.losses);
    Ok(losses
        .iter()
        .enumerate()
        .map(|(i, &loss)| LogStep {
            loss,
            lr: kolm_train::schedule::lr_at(i as u64 + 1, total_steps, &req.spec.train),
        })
        .collect())
}

/// The environment tuple the run is bound to.
fn environment(
    t: &kolm_format::job_spec::Train,
    gpu: Option<kolm_format::manifest::GpuEnvironment>,
) -> Tuple {
    Tuple {
        // The runtime release, named as before the split (the supervisor
        // and this binary are one workspace at one version): a replay on
        // the same release finds the same tuple.
        runtime: format!("kolm-enclave {}", env!("CARGO_PKG_VERSION")),
        device: match t.device {
            Device::Cpu => "cpu".into(),
            Device::Gpu => "gpu".into(),
        },
        precision: match t.precision {
            Precision::F32 => "f32".into(),
            Precision::Bf16 => "bf16".into(),
        },
        cpu: cpu_tuple(),
        gpu,
    }
}

/// The checkpoints' own directory inside `--checkpoint-dir` (the format
/// allows nothing else in it).
const CHECKPOINTS: &str = "steps";

/// The per-step loss record kept beside the checkpoints.
const LOSS_LOG: &str = "losses.log";

/// The losses of steps `1..first_step` from `losses.log` (a killed run may
/// have logged steps past its last checkpoint, and its last line may be
/// torn: both are ignored; a missing step is an error).
fn earlier_losses(dir: &Path, first_step: u64) -> Result<Vec<f64>, FineTuneError> {
    let text = std::fs::read_to_string(dir.join(LOSS_LOG))
        .map_err(|e| FineTuneError::Train(format!("resuming: {LOSS_LOG}: {e}")))?;
    let mut by_step = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        if let (Some(step), Some(bits), None) = (parts.next(), parts.next(), parts.next())
            && let (Ok(step), Ok(bits)) = (step.parse::<u64>(), u64::from_str_radix(bits, 16))
            && step < first_step
        {
            // A step run twice (before and after a resume) keeps its later
            // value: the same bits by construction.
            by_step.insert(step, f64::from_bits(bits));
        }
    }
    (1..first_step)
        .map(|s| {
            by_step.get(&s).copied().ok_or_else(|| {
                FineTuneError::Train(format!("resuming: {LOSS_LOG} has no loss for step {s}"))
            })
        })
        .collect()
}

/// This machine's CPU facts that change `f32` results (`environment.json`).
pub fn cpu_tuple() -> CpuTuple {
    let mut features = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        for (name, on) in [
            ("avx", std::arch::is_x86_feature_detected!("avx")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ] {
            if on {
                features.push(name.to_owned());
            }
        }
    }
    CpuTuple {
        arch: std::env::consts::ARCH.to_owned(),
        features,
        threads: candle_core::utils::get_num_threads(),
    }
}

fn clock(s: f64) -> String {
    let s = if s.is_finite() { s.max(0.0) as u64 } else { 0 };
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// One progress report: a bar redrawn in place, or a JSON line.
fn show(mode: ProgressMode, p: &kolm_train::Progress) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match mode {
        ProgressMode::None => {}
        ProgressMode::Bar => {
            const WIDTH: u64 = 24;
            let filled = (p.step * WIDTH / p.total.max(1)).min(WIDTH) as usize;
            let _ = write!(
                out,
                "\rtrain [{}{}] step {}/{} loss {:.4} lr {:.2e} {:.0} tok/s ETA {}   ",
                "#".repeat(filled),
                ".".repeat(WIDTH as usize - filled),
                p.step,
                p.total,
                p.loss,
                p.lr,
                p.tokens_per_s,
                clock(p.eta_s)
            );
            let _ = out.flush();
        }
        ProgressMode::Json => {
            let line = serde_json::json!({
                "event": "train-step",
                "step": p.step,
                "total": p.total,
                "loss": p.loss,
                "lr": p.lr,
                "grad_norm": p.grad_norm,
                "tokens_per_s": p.tokens_per_s,
                "elapsed_s": p.elapsed_s,
                "eta_s": p.eta_s,
            });
            let _ = writeln!(out, "{line}");
        }
    }
}
