//! The fine-tune job inside the sandbox: spec -> base model -> data ->
//! memory pre-flight -> training -> evaluation -> the artifact's files.
//!
//! Files written (sealed under `outputs/`; docs/jobs.md lists them):
//! `model.safetensors` (merged weights), `adapter.safetensors` (LoRA only),
//! `tokenizer.json`, `eval-report.json`, `model-card.json`,
//! `model-card.md`, `lineage.json`, `train-log.jsonl` (one line per step),
//! `environment.json` (the hardware/software tuple replay compares) and
//! `metrics.json` (the flat numbers the manifest carries). A failed job
//! writes only `failure.json` (`kolm_format::job_io::Failure`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use kolm_eval::qa::{self, QaConfig};
use kolm_eval::safety::TrainingIndex;
use kolm_eval::{EvalConfig, evaluate};
use kolm_format::job_spec::FineTuneSpec;
use kolm_model::Model;
use kolm_train::checkpoint;
use sha2::{Digest, Sha256};

use kolm_format::environment::ENVIRONMENT_FILE;
use kolm_format::job_io::{ESTIMATE_FILE, EVAL_REPORT_FILE, JobArgs, METRICS_FILE};

use super::scorer::ModelScorer;
use super::train;
use super::{FineTuneError, base, data};

/// Longest held-out file read, in bytes: the evaluation tokenizes each
/// whole, as training does a text file (see [`data::MAX_TEXT_FILE_BYTES`]).
const MAX_HELDOUT_BYTES: u64 = data::MAX_TEXT_FILE_BYTES;
/// Tokens per perplexity window (capped by the job's `seq_len`).
const PERPLEXITY_WINDOW: usize = 512;
/// Tokens of each held-out file scored for perplexity.
const PERPLEXITY_MAX_TOKENS: usize = 2048;
/// Options per generated QA question.
const QA_OPTIONS: usize = 4;
/// Every fourth question also asks for a structured answer.
const QA_STRUCTURED_EVERY: usize = 4;

/// Runs the job on the staged spec (`spec_bytes`, read by the dispatcher
/// into `spec`); on failure leaves `failure.json` and returns the error.
pub fn run(args: &JobArgs, spec_bytes: &[u8], spec: &FineTuneSpec) -> Result<(), FineTuneError> {
    let result = run_inner(args, spec_bytes, spec);
    if let Err(e) = &result {
        super::write_failure(&args.output_dir, e);
    }
    result
}

fn put(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), FineTuneError> {
    std::fs::write(dir.join(name), bytes).map_err(|e| FineTuneError::Output {
        path: name.to_owned(),
        reason: e.to_string(),
    })
}

fn out_err(path: &str) -> impl Fn(String) -> FineTuneError + '_ {
    move |reason| FineTuneError::Output {
        path: path.to_owned(),
        reason,
    }
}

fn run_inner(args: &JobArgs, spec_bytes: &[u8], spec: &FineTuneSpec) -> Result<(), FineTuneError> {
    let spec_sha256: [u8; 32] = Sha256::digest(spec_bytes).into();
    let quality = read_quality(args)?;

    // A GPU job on a machine without one fails here, in a second, not
    // after the base model is hashed, parsed and dequantised (1 min 49 s
    // and 1.09 GB for the real model on two cores).
    if spec.train.device == kolm_format::job_spec::Device::Gpu {
        super::gpu::check_available()?;
    }
    let base = base::load(&spec.model, &args.input_dir)?;
    let (tokens, train_texts) = data::read(
        spec.data_format,
        &spec.train_files,
        &args.input_dir,
        &base.tokenizer,
    )?;
    let heldout = read_heldout(spec, &args.input_dir)?;

    let outcome = train::train(&train::Request {
        spec,
        spec_sha256,
        base: &base,
        tokens,
        checkpoint_dir: args.checkpoint_dir.as_deref(),
        resume: args.resume,
        progress: args.progress,
        host_available_bytes: args.host_available_bytes,
        output_dir: Some(&args.output_dir),
    })?;
    let (base_nll, report) = evaluate_both(spec, &base, &outcome, &heldout, &train_texts)?;

    // The files.
    let out = &args.output_dir;
    let (model_bytes, adapter_bytes) = write_model_files(out, &base, &outcome, &report)?;
    let metrics = metrics_of(&report, &base_nll, &outcome)?;
    super::card::write(
        out,
        &super::card::CardInput {
            spec,
            base: &base,
            outcome: &outcome,
            report: &report,
            metrics: &metrics,
            base_perplexity: base_nll.perplexity(),
            quality: &quality,
            model_sha256: Sha256::digest(&model_bytes).into(),
            adapter_sha256: adapter_bytes.map(|b| Sha256::digest(&b).into()),
            input_dir: &args.input_dir,
        },
    )?;
    let metrics_bytes =
        serde_json::to_vec_pretty(&metrics).map_err(|e| out_err("metrics.json")(e.to_string()))?;
    put(out, METRICS_FILE, &metrics_bytes)?;
    // The estimate record was for a supervisor naming a kill; it is not an
    // output.
    super::remove_estimate(out).map_err(|e| out_err(ESTIMATE_FILE)(e.to_string()))
}

/// The policy's quality gates (none without a policy).
fn read_quality(args: &JobArgs) -> Result<kolm_policy::QualityPolicy, FineTuneError> {
    Ok(match &args.policy {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| FineTuneError::Spec(format!("reading the policy: {e}")))?;
            kolm_policy::Policy::from_toml_str(&text)
                .map_err(|e| FineTuneError::Spec(format!("policy: {e}")))?
                .quality
        }
        None => kolm_policy::QualityPolicy { gates: Vec::new() },
    })
}

/// Evaluation: the base model's held-out perplexity (the baseline the
/// model card reports), then every term on the tuned model.
fn evaluate_both(
    spec: &FineTuneSpec,
    base: &base::Base,
    outcome: &train::TrainOutcome,
    heldout: &[(String, String)],
    train_texts: &[String],
) -> Result<
    (
        kolm_eval::metrics::NllSum,
        kolm_format::eval_report::EvalReport,
    ),
    FineTuneError,
> {
    let window = PERPLEXITY_WINDOW.min(spec.train.seq_len as usize).max(2);
    let heldout_refs: Vec<&str> = heldout.iter().map(|(_, t)| t.as_str()).collect();
    let eval_err = |e: kolm_model::ModelError| FineTuneError::Eval(e.to_string());
    let base_model = Model::from_kernel_params(base.config, &base.params).map_err(eval_err)?;
    let base_scorer = ModelScorer::new(base_model, base.tokenizer.clone());
    let base_nll = kolm_eval::metrics::held_out_nll(
        &base_scorer,
        &heldout_refs,
        window,
        PERPLEXITY_MAX_TOKENS,
    )
    .map_err(|e| FineTuneError::Eval(format!("base model perplexity: {e}")))?;
    drop(base_scorer);

    let tuned = Model::from_kernel_params(base.config, &outcome.merged).map_err(eval_err)?;
    let scorer = ModelScorer::new(tuned, base.tokenizer.clone());
    let qa_set = qa_set(spec, heldout)?;
    let train_refs: Vec<&str> = train_texts.iter().map(String::as_str).collect();
    let training = TrainingIndex::new(&train_refs);
    let report = evaluate(
        &scorer,
        &EvalConfig {
            heldout: &heldout_refs,
            perplexity_window: window,
            perplexity_max_tokens: PERPLEXITY_MAX_TOKENS,
            qa: &qa_set,
            training: &training,
            max_new_tokens: spec.eval.max_new_tokens as usize,
            latency_budget_tokens_per_s: spec.eval.latency_budget_tokens_per_s,
        },
    )
    .map_err(|e| FineTuneError::Eval(e.to_string()))?;
    Ok((base_nll, report))
}

/// The seeded QA set generated from the held-out plays.
fn qa_set(spec: &FineTuneSpec, heldout: &[(String, String)]) -> Result<qa::QaSet, FineTuneError> {
    let plays = heldout
        .iter()
        .map(|(name, t)| {
            kolm_eval::play::parse_play(t).map_err(|e| {
                FineTuneError::Eval(format!(
                    "held-out {name} is not a play the QA generator reads: {e}"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    qa::generate(
        &plays,
        &QaConfig {
            seed: spec.eval.qa_seed,
            questions: spec.eval.qa_questions as usize,
            options: QA_OPTIONS,
            structured_every: QA_STRUCTURED_EVERY,
        },
    )
    .map_err(|e| FineTuneError::Eval(format!("generating the QA set: {e}")))
}

/// Writes the weights, the adapter (LoRA), the tokenizer, the evaluation
/// report, the training log and the environment tuple; returns the
/// weights' and the adapter's bytes (the model card hashes them).
fn write_model_files(
    out: &Path,
    base: &base::Base,
    outcome: &train::TrainOutcome,
    report: &kolm_format::eval_report::EvalReport,
) -> Result<(Vec<u8>, Option<Vec<u8>>), FineTuneError> {
    let model_bytes = weights_file(&base.config, &outcome.merged)?;
    put(out, "model.safetensors", &model_bytes)?;
    let adapter_bytes = match &outcome.adapter {
        Some(tensors) => {
            let mut tensors = tensors.clone();
            tensors.sort_by(|a, b| a.full_name().cmp(b.full_name()));
            let bytes = checkpoint::tensors_to_bytes(&tensors)
                .map_err(|e| out_err("adapter.safetensors")(e.to_string()))?;
            put(out, "adapter.safetensors", &bytes)?;
            Some(bytes)
        }
        None => None,
    };
    let tokenizer_json = base
        .tokenizer
        .to_json()
        .map_err(|e| out_err("tokenizer.json")(e.to_string()))?;
    put(out, "tokenizer.json", &tokenizer_json)?;
    let report_bytes = report
        .to_canonical_bytes()
        .map_err(|e| out_err(EVAL_REPORT_FILE)(e.to_string()))?;
    put(out, EVAL_REPORT_FILE, &report_bytes)?;

    let mut log = Vec::new();
    for (i, s) in outcome.log.iter().enumerate() {
        let line = serde_json::json!({
            "step": i + 1,
            "loss": s.loss,
            "lr": s.lr,
        });
        writeln!(log, "{line}").map_err(|e| out_err("train-log.jsonl")(e.to_string()))?;
    }
    put(out, "train-log.jsonl", &log)?;
    let env = outcome
        .environment
        .to_json_bytes()
        .map_err(|e| out_err(ENVIRONMENT_FILE)(e.to_string()))?;
    put(out, ENVIRONMENT_FILE, &env)?;
    Ok((model_bytes, adapter_bytes))
}

/// The flat numbers the manifest carries: the report's, the base
/// perplexity and the training's; every one finite.
fn metrics_of(
    report: &kolm_format::eval_report::EvalReport,
    base_nll: &kolm_eval::metrics::NllSum,
    outcome: &train::TrainOutcome,
) -> Result<BTreeMap<String, f64>, FineTuneError> {
    let mut metrics: BTreeMap<String, f64> = report.metrics();
    metrics.insert("base_perplexity".into(), base_nll.perplexity());
    metrics.insert(
        "train_final_loss".into(),
        outcome.log.last().map(|s| s.loss).unwrap_or(f64::NAN),
    );
    metrics.insert("train_steps".into(), outcome.log.len() as f64);
    metrics.insert("train_tokens".into(), outcome.tokens as f64);
    metrics.insert("train_tokens_per_s".into(), outcome.tokens_per_s);
    if let Some(bytes) = outcome.memory_estimate_bytes {
        metrics.insert("train_memory_estimate_bytes".into(), bytes as f64);
    }
    if let Some((_, v)) = metrics.iter().find(|(_, v)| !v.is_finite()) {
        return Err(FineTuneError::Train(format!(
            "a metric is not finite ({v})"
        )));
    }
    Ok(metrics)
}

/// The merged weights as `weight/<kernel parameter name>` f32 tensors.
fn weights_file(cfg: &kolm_model::Config, params: &[Vec<f32>]) -> Result<Vec<u8>, FineTuneError> {
    let err = out_err("model.safetensors");
    let mut tensors = cfg
        .params()
        .into_iter()
        .zip(params)
        .map(|(info, data)| {
            checkpoint::Tensor::new("weight", &info.name, info.shape, data.clone())
                .map_err(|e| err(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    tensors.sort_by(|a, b| a.full_name().cmp(b.full_name()));
    checkpoint::tensors_to_bytes(&tensors).map_err(|e| err(e.to_string()))
}

fn read_heldout(spec: &FineTuneSpec, dir: &Path) -> Result<Vec<(String, String)>, FineTuneError> {
    spec.eval
        .heldout
        .iter()
        .map(|name| {
            let err = |reason: String| FineTuneError::Data {
                file: name.clone(),
                line: None,
                reason,
            };
            let path = dir.join(name);
            let len = std::fs::metadata(&path)
                .map_err(|e| err(e.to_string()))?
                .len();
            if len > MAX_HELDOUT_BYTES {
                return Err(err(format!(
                    "{len} bytes, over the {MAX_HELDOUT_BYTES}-byte cap"
                )));
            }
            let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
            Ok((name.clone(), text))
        })
        .collect()
}
