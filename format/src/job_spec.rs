//! The fine-tune job spec (`kind = "fine-tune"`, docs/jobs.md): what a
//! customer asks the enclave to train and evaluate, read strictly so that
//! an invalid spec fails before any work with a message naming the key and
//! its line.
//!
//! The TOML layer refuses unknown keys, wrong types and missing required
//! keys with toml's own message (key, line, column); the typed layer
//! ([`FineTuneSpec::from_toml_str`]) checks ranges, cross-field rules
//! (a LoRA rank only with `method.kind = "lora"`, exactly one of `steps`
//! and `epochs`, every file named in `inputs`) and names the dotted key and
//! its 1-based line.
//!
//! The quality gate is not here: it is the policy's (`quality.gates`),
//! which the job cannot weaken.

use std::collections::BTreeSet;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

/// The `kind` of a fine-tune job.
pub const FINE_TUNE_KIND: &str = "fine-tune";
/// Most inputs a spec may name.
pub const MAX_INPUTS: usize = 4096;
/// Longest job id, in bytes.
pub const MAX_ID: usize = 128;
/// The LoRA target projections of a Llama block, as the spec spells them.
pub const LORA_TARGETS: [&str; 7] = ["q", "k", "v", "o", "gate", "up", "down"];

/// Why a spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobSpecError {
    /// Not TOML of the spec's shape: toml's message names the key, line and
    /// column.
    #[error("invalid job spec: {message}")]
    Toml { message: String },
    /// A value breaks a rule of the spec.
    #[error("`{key}` (line {line}): {reason}")]
    Invalid {
        /// Dotted key path (`train.lr`, `method.targets[2]`).
        key: String,
        /// 1-based line.
        line: usize,
        reason: String,
    },
    /// A `kind` this runtime does not run.
    #[error(
        "job kind {0:?} is not supported by this runtime version (supported: \"demo\", \
         \"egress-selftest\", \"fine-tune\")"
    )]
    UnsupportedKind(String),
    /// `linger_seconds` in a spec of another kind than `egress-selftest`.
    #[error("linger_seconds is a field of egress-selftest jobs only")]
    LingerOutsideSelftest,
}

/// Where the base weights come from.
#[derive(Debug, Clone, PartialEq)]
pub enum BaseModel {
    /// A GGUF file among the inputs, with its pinned SHA-256.
    File { input: String, sha256: [u8; 32] },
    /// A randomly initialised model of a named architecture (`tiny` for
    /// tests and CI, `smollm2-135m` for the real shape), from `seed`.
    Random { config: ModelPreset, seed: u64 },
}

/// Architectures a spec may initialise at random.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelPreset {
    /// A few-layer model of the SmolLM2 architecture (docs/jobs.md).
    Tiny,
    /// The SmolLM2-135M shape.
    Smollm2_135m,
}

/// How the training data is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFormat {
    /// Plain UTF-8 text; every token is predicted.
    Text,
    /// JSON lines `{"prompt": ..., "response": ...}`; the loss is masked to
    /// the response tokens.
    SftJsonl,
}

/// What is trained.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    /// Every weight.
    Full,
    /// Low-rank adapters on `targets`, merged into the weights on export.
    Lora {
        rank: u32,
        alpha: f64,
        targets: Vec<String>,
    },
}

/// How long training runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    Steps(u64),
    Epochs(u32),
}

/// The learning-rate schedule after warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    Cosine,
    Linear,
    Constant,
}

/// Where the job computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// The CPU (f32).
    Cpu,
    /// The GPU; a job that asks for it and cannot get it fails.
    Gpu,
}

/// Compute precision (master weights are f32 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    Bf16,
}

/// Hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Train {
    pub length: Length,
    pub batch: u32,
    pub seq_len: u32,
    pub lr: f64,
    pub warmup_steps: u64,
    pub schedule: Schedule,
    pub min_lr_ratio: f64,
    pub weight_decay: f64,
    pub clip_norm: Option<f64>,
    pub seed: u64,
    pub device: Device,
    pub precision: Precision,
    pub checkpoint_every: Option<u64>,
}

/// What is evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct Eval {
    /// Held-out text inputs for perplexity.
    pub heldout: Vec<String>,
    /// Questions generated from the held-out text.
    pub qa_questions: u32,
    /// Seed of the question generator.
    pub qa_seed: u64,
    /// Tokens per second the latency score is measured against.
    pub latency_budget_tokens_per_s: f64,
    /// Longest generated answer.
    pub max_new_tokens: u32,
}

/// A validated fine-tune job spec.
#[derive(Debug, Clone, PartialEq)]
pub struct FineTuneSpec {
    pub id: String,
    pub inputs: Vec<String>,
    pub model: BaseModel,
    pub data_format: DataFormat,
    pub train_files: Vec<String>,
    /// Pack short examples into full sequences.
    pub pack: bool,
    pub method: Method,
    pub train: Train,
    pub eval: Eval,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    id: Spanned<String>,
    kind: Spanned<String>,
    inputs: Spanned<Vec<Spanned<String>>>,
    model: Spanned<RawModel>,
    data: RawData,
    method: Spanned<RawMethod>,
    train: Spanned<RawTrain>,
    eval: RawEval,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    file: Option<Spanned<String>>,
    sha256: Option<Spanned<String>>,
    init: Option<Spanned<String>>,
    config: Option<Spanned<String>>,
    seed: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    format: Spanned<String>,
    train: Spanned<Vec<Spanned<String>>>,
    #[serde(default = "yes")]
    pack: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMethod {
    kind: Spanned<String>,
    rank: Option<Spanned<i64>>,
    alpha: Option<Spanned<f64>>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrain {
    steps: Option<Spanned<i64>>,
    epochs: Option<Spanned<i64>>,
    batch: Spanned<i64>,
    seq_len: Spanned<i64>,
    lr: Spanned<f64>,
    #[serde(default)]
    warmup_steps: Option<Spanned<i64>>,
    #[serde(default)]
    schedule: Option<Spanned<String>>,
    #[serde(default)]
    min_lr_ratio: Option<Spanned<f64>>,
    #[serde(default)]
    weight_decay: Option<Spanned<f64>>,
    #[serde(default)]
    clip_norm: Option<Spanned<f64>>,
    seed: u64,
    device: Spanned<String>,
    #[serde(default)]
    precision: Option<Spanned<String>>,
    #[serde(default)]
    checkpoint_every: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEval {
    heldout: Spanned<Vec<Spanned<String>>>,
    qa_questions: Spanned<i64>,
    #[serde(default)]
    qa_seed: u64,
    latency_budget_tokens_per_s: Spanned<f64>,
    max_new_tokens: Spanned<i64>,
}

/// Turns spans into lines and names the failed rule.
struct Check<'a> {
    src: &'a str,
}

impl Check<'_> {
    fn line(&self, span: Range<usize>) -> usize {
        self.src
            .get(..span.start)
            .map_or(0, |before| before.bytes().filter(|&b| b == b'\n').count())
            .saturating_add(1)
    }

    fn fail<T>(
        &self,
        key: &str,
        span: Range<usize>,
        reason: impl Into<String>,
    ) -> Result<T, JobSpecError> {
        Err(JobSpecError::Invalid {
            key: key.to_owned(),
            line: self.line(span),
            reason: reason.into(),
        })
    }

    /// An integer in `lo..=hi`.
    fn int(&self, key: &str, v: &Spanned<i64>, lo: i64, hi: i64) -> Result<u64, JobSpecError> {
        let n = *v.get_ref();
        if n < lo || n > hi {
            return self.fail(key, v.span(), format!("must be {lo} to {hi}, found {n}"));
        }
        u64::try_from(n).or_else(|_| self.fail(key, v.span(), "must not be negative"))
    }

    /// A finite number with `ok(value)`, else `rule`.
    fn real(
        &self,
        key: &str,
        v: &Spanned<f64>,
        ok: impl Fn(f64) -> bool,
        rule: &str,
    ) -> Result<f64, JobSpecError> {
        let x = *v.get_ref();
        if !x.is_finite() || !ok(x) {
            return self.fail(key, v.span(), format!("{rule}, found {x}"));
        }
        Ok(x)
    }

    fn one_of<T: Copy>(
        &self,
        key: &str,
        v: &Spanned<String>,
        choices: &[(&str, T)],
    ) -> Result<T, JobSpecError> {
        match choices.iter().find(|(name, _)| *name == v.get_ref()) {
            Some((_, t)) => Ok(*t),
            None => {
                let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
                self.fail(
                    key,
                    v.span(),
                    format!(
                        "expected one of {}, found {:?}",
                        names.join(", "),
                        v.get_ref()
                    ),
                )
            }
        }
    }

    /// Names that are each listed in `inputs`, at least one, no repeats.
    fn files(
        &self,
        key: &str,
        list: &Spanned<Vec<Spanned<String>>>,
        inputs: &BTreeSet<&str>,
    ) -> Result<Vec<String>, JobSpecError> {
        if list.get_ref().is_empty() {
            return self.fail(key, list.span(), "must name at least one input");
        }
        let mut seen = BTreeSet::new();
        for (i, f) in list.get_ref().iter().enumerate() {
            let k = format!("{key}[{i}]");
            if !inputs.contains(f.get_ref().as_str()) {
                return self.fail(
                    &k,
                    f.span(),
                    format!("{:?} is not one of `inputs`", f.get_ref()),
                );
            }
            if !seen.insert(f.get_ref().as_str()) {
                return self.fail(&k, f.span(), format!("{:?} is listed twice", f.get_ref()));
            }
        }
        Ok(list.get_ref().iter().map(|f| f.get_ref().clone()).collect())
    }
}

impl FineTuneSpec {
    /// Reads and validates a fine-tune spec.
    pub fn from_toml_str(src: &str) -> Result<FineTuneSpec, JobSpecError> {
        let raw: RawSpec = toml::from_str(src).map_err(|e| JobSpecError::Toml {
            message: e.to_string().trim_end().to_owned(),
        })?;
        let c = Check { src };
        if raw.kind.get_ref() != FINE_TUNE_KIND {
            return c.fail(
                "kind",
                raw.kind.span(),
                format!(
                    "expected {FINE_TUNE_KIND:?}, found {:?}",
                    raw.kind.get_ref()
                ),
            );
        }
        let id = raw.id.get_ref();
        if id.is_empty()
            || id.len() > MAX_ID
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return c.fail(
                "id",
                raw.id.span(),
                format!("must be 1 to {MAX_ID} bytes of a-z, A-Z, 0-9, `-`, `_`, `.`"),
            );
        }
        let input_list = raw.inputs.get_ref();
        if input_list.len() > MAX_INPUTS {
            return c.fail(
                "inputs",
                raw.inputs.span(),
                format!("at most {MAX_INPUTS} inputs"),
            );
        }
        let mut inputs = BTreeSet::new();
        for (i, n) in input_list.iter().enumerate() {
            let name = n.get_ref().as_str();
            if name.is_empty()
                || name.starts_with('.')
                || name.contains(['/', '\\'])
                || name.chars().any(char::is_control)
            {
                return c.fail(&format!("inputs[{i}]"), n.span(), "not a plain file name");
            }
            if !inputs.insert(name) {
                return c.fail(
                    &format!("inputs[{i}]"),
                    n.span(),
                    format!("{name:?} is listed twice"),
                );
            }
        }

        let model = model(&c, &raw.model, &inputs)?;
        let data_format = c.one_of(
            "data.format",
            &raw.data.format,
            &[
                ("text", DataFormat::Text),
                ("sft-jsonl", DataFormat::SftJsonl),
            ],
        )?;
        let train_files = c.files("data.train", &raw.data.train, &inputs)?;
        let method = method(&c, &raw.method)?;
        let train = train(&c, &raw.train)?;
        let heldout = c.files("eval.heldout", &raw.eval.heldout, &inputs)?;
        if let Some(f) = heldout.iter().find(|f| train_files.contains(f)) {
            return c.fail(
                "eval.heldout",
                raw.eval.heldout.span(),
                format!("{f:?} is also training data: held-out text must be held out"),
            );
        }
        let eval = Eval {
            heldout,
            qa_questions: u32::try_from(c.int(
                "eval.qa_questions",
                &raw.eval.qa_questions,
                1,
                10_000,
            )?)
            .unwrap_or(u32::MAX),
            qa_seed: raw.eval.qa_seed,
            latency_budget_tokens_per_s: c.real(
                "eval.latency_budget_tokens_per_s",
                &raw.eval.latency_budget_tokens_per_s,
                |x| x > 0.0,
                "must be > 0",
            )?,
            max_new_tokens: u32::try_from(c.int(
                "eval.max_new_tokens",
                &raw.eval.max_new_tokens,
                1,
                4096,
            )?)
            .unwrap_or(u32::MAX),
        };
        Ok(FineTuneSpec {
            id: id.clone(),
            inputs: input_list.iter().map(|n| n.get_ref().clone()).collect(),
            model,
            data_format,
            train_files,
            pack: raw.data.pack,
            method,
            train,
            eval,
        })
    }
}

fn model(
    c: &Check<'_>,
    raw: &Spanned<RawModel>,
    inputs: &BTreeSet<&str>,
) -> Result<BaseModel, JobSpecError> {
    let m = raw.get_ref();
    match (&m.file, &m.init) {
        (Some(file), None) => {
            if m.config.is_some() || m.seed.is_some() {
                return c.fail(
                    "model",
                    raw.span(),
                    "`config` and `seed` go with `init`, not `file`",
                );
            }
            if !inputs.contains(file.get_ref().as_str()) {
                return c.fail(
                    "model.file",
                    file.span(),
                    format!("{:?} is not one of `inputs`", file.get_ref()),
                );
            }
            let Some(sha) = &m.sha256 else {
                return c.fail(
                    "model.sha256",
                    raw.span(),
                    "required with `model.file` (the pinned SHA-256 of the base model)",
                );
            };
            let mut digest = [0u8; 32];
            if sha.get_ref().len() != 64
                || hex::decode_to_slice(sha.get_ref(), &mut digest).is_err()
            {
                return c.fail("model.sha256", sha.span(), "must be 64 hex characters");
            }
            Ok(BaseModel::File {
                input: file.get_ref().clone(),
                sha256: digest,
            })
        }
        (None, Some(init)) => {
            if init.get_ref() != "random" {
                return c.fail(
                    "model.init",
                    init.span(),
                    format!("expected \"random\", found {:?}", init.get_ref()),
                );
            }
            if m.sha256.is_some() {
                return c.fail(
                    "model.sha256",
                    raw.span(),
                    "goes with `model.file`, not `init`",
                );
            }
            let Some(config) = &m.config else {
                return c.fail(
                    "model.config",
                    raw.span(),
                    "required with `init = \"random\"`",
                );
            };
            let config = c.one_of(
                "model.config",
                config,
                &[
                    ("tiny", ModelPreset::Tiny),
                    ("smollm2-135m", ModelPreset::Smollm2_135m),
                ],
            )?;
            let Some(seed) = m.seed else {
                return c.fail(
                    "model.seed",
                    raw.span(),
                    "required with `init = \"random\"`",
                );
            };
            Ok(BaseModel::Random { config, seed })
        }
        _ => c.fail(
            "model",
            raw.span(),
            "exactly one of `file` (a GGUF input) or `init = \"random\"`",
        ),
    }
}

fn method(c: &Check<'_>, raw: &Spanned<RawMethod>) -> Result<Method, JobSpecError> {
    let m = raw.get_ref();
    match m.kind.get_ref().as_str() {
        "full" => {
            if m.rank.is_some() || m.alpha.is_some() || m.targets.is_some() {
                return c.fail(
                    "method",
                    raw.span(),
                    "`rank`, `alpha` and `targets` are LoRA settings: not with `kind = \"full\"`",
                );
            }
            Ok(Method::Full)
        }
        "lora" => {
            let (Some(rank), Some(alpha), Some(targets)) = (&m.rank, &m.alpha, &m.targets) else {
                return c.fail(
                    "method",
                    raw.span(),
                    "`kind = \"lora\"` needs `rank`, `alpha` and `targets`",
                );
            };
            let rank = u32::try_from(c.int("method.rank", rank, 1, 256)?).unwrap_or(u32::MAX);
            let alpha = c.real("method.alpha", alpha, |x| x > 0.0, "must be > 0")?;
            if targets.get_ref().is_empty() {
                return c.fail(
                    "method.targets",
                    targets.span(),
                    "must name at least one projection",
                );
            }
            let mut seen = BTreeSet::new();
            for (i, t) in targets.get_ref().iter().enumerate() {
                let k = format!("method.targets[{i}]");
                if !LORA_TARGETS.contains(&t.get_ref().as_str()) {
                    return c.fail(
                        &k,
                        t.span(),
                        format!("expected one of {LORA_TARGETS:?}, found {:?}", t.get_ref()),
                    );
                }
                if !seen.insert(t.get_ref().as_str()) {
                    return c.fail(&k, t.span(), format!("{:?} is listed twice", t.get_ref()));
                }
            }
            // Canonical order, so that equal specs mean equal adapters.
            let targets = LORA_TARGETS
                .iter()
                .filter(|t| seen.contains(**t))
                .map(|t| (*t).to_owned())
                .collect();
            Ok(Method::Lora {
                rank,
                alpha,
                targets,
            })
        }
        other => c.fail(
            "method.kind",
            m.kind.span(),
            format!("expected \"full\" or \"lora\", found {other:?}"),
        ),
    }
}

fn train(c: &Check<'_>, raw: &Spanned<RawTrain>) -> Result<Train, JobSpecError> {
    let t = raw.get_ref();
    let length = match (&t.steps, &t.epochs) {
        (Some(s), None) => Length::Steps(c.int("train.steps", s, 1, 10_000_000)?),
        (None, Some(e)) => {
            Length::Epochs(u32::try_from(c.int("train.epochs", e, 1, 1000)?).unwrap_or(u32::MAX))
        }
        _ => return c.fail("train", raw.span(), "exactly one of `steps` and `epochs`"),
    };
    let warmup_steps = match &t.warmup_steps {
        Some(w) => {
            let n = c.int("train.warmup_steps", w, 0, 10_000_000)?;
            if let Length::Steps(steps) = length
                && n >= steps
            {
                return c.fail(
                    "train.warmup_steps",
                    w.span(),
                    format!("must be fewer than `train.steps` ({steps}), found {n}"),
                );
            }
            n
        }
        None => 0,
    };
    let device = c.one_of(
        "train.device",
        &t.device,
        &[("cpu", Device::Cpu), ("gpu", Device::Gpu)],
    )?;
    let precision = match &t.precision {
        Some(p) => c.one_of(
            "train.precision",
            p,
            &[("f32", Precision::F32), ("bf16", Precision::Bf16)],
        )?,
        None => Precision::F32,
    };
    if precision == Precision::Bf16
        && device == Device::Cpu
        && let Some(p) = &t.precision
    {
        return c.fail(
            "train.precision",
            p.span(),
            "bf16 compute is GPU only; the CPU path computes in f32",
        );
    }
    Ok(Train {
        length,
        batch: u32::try_from(c.int("train.batch", &t.batch, 1, 4096)?).unwrap_or(u32::MAX),
        seq_len: u32::try_from(c.int("train.seq_len", &t.seq_len, 8, 8192)?).unwrap_or(u32::MAX),
        lr: c.real(
            "train.lr",
            &t.lr,
            |x| x > 0.0 && x < 1.0,
            "must be > 0 and < 1",
        )?,
        warmup_steps,
        schedule: match &t.schedule {
            Some(s) => c.one_of(
                "train.schedule",
                s,
                &[
                    ("cosine", Schedule::Cosine),
                    ("linear", Schedule::Linear),
                    ("constant", Schedule::Constant),
                ],
            )?,
            None => Schedule::Cosine,
        },
        min_lr_ratio: match &t.min_lr_ratio {
            Some(r) => c.real(
                "train.min_lr_ratio",
                r,
                |x| (0.0..=1.0).contains(&x),
                "must be 0 to 1",
            )?,
            None => 0.1,
        },
        weight_decay: match &t.weight_decay {
            Some(w) => c.real(
                "train.weight_decay",
                w,
                |x| (0.0..1.0).contains(&x),
                "must be >= 0 and < 1",
            )?,
            None => 0.0,
        },
        clip_norm: t
            .clip_norm
            .as_ref()
            .map(|n| c.real("train.clip_norm", n, |x| x > 0.0, "must be > 0"))
            .transpose()?,
        seed: t.seed,
        device,
        precision,
        checkpoint_every: t
            .checkpoint_every
            .as_ref()
            .map(|n| c.int("train.checkpoint_every", n, 1, 10_000_000))
            .transpose()?,
    })
}

/// The `kind` of the bundled demo job.
pub const DEMO_KIND: &str = "demo";
/// The `kind` of the egress self-test job.
pub const EGRESS_SELFTEST_KIND: &str = "egress-selftest";
/// Every n-th line of the demo's corpus is held out when the spec does not
/// say (`eval_every`).
pub const DEFAULT_EVAL_EVERY: u32 = 7;

/// A job spec of any kind this runtime runs, read by one strict reader
/// ([`JobSpec::from_toml_str`]): the supervisor reads it before any work,
/// and the job binary (`kolm-jobs`) reads the staged copy of the same
/// bytes, so both act on one reading and no kind string is passed around.
#[derive(Debug, Clone, PartialEq)]
pub enum JobSpec {
    /// `kind = "demo"`: the bundled character-bigram model.
    Demo(DemoSpec),
    /// `kind = "egress-selftest"`: the network probes.
    EgressSelftest(SelftestSpec),
    /// `kind = "fine-tune"` (docs/jobs.md); boxed, it is by far the
    /// largest.
    FineTune(Box<FineTuneSpec>),
}

/// A demo job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSpec {
    pub id: String,
    /// The corpus files, concatenated in this order.
    pub inputs: Vec<String>,
    /// Every n-th line is held out ([`DEFAULT_EVAL_EVERY`] by default).
    pub eval_every: u32,
}

/// An egress self-test job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelftestSpec {
    pub id: String,
    pub inputs: Vec<String>,
    /// Leave a process behind and wait this long (failure tests); 0: none.
    pub linger_seconds: u32,
}

/// The demo and self-test shape (the fine-tune has its own reader).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSimpleSpec {
    id: String,
    kind: String,
    inputs: Vec<String>,
    #[serde(default)]
    eval_every: Option<u32>,
    #[serde(default)]
    linger_seconds: Option<u32>,
}

impl JobSpec {
    /// Reads a spec of any kind: the `kind` first (loosely), then the
    /// kind's own strict reader.
    pub fn from_toml_str(src: &str) -> Result<JobSpec, JobSpecError> {
        #[derive(Deserialize)]
        struct Kind {
            kind: Option<String>,
        }
        let kind = toml::from_str::<Kind>(src).ok().and_then(|k| k.kind);
        if kind.as_deref() == Some(FINE_TUNE_KIND) {
            return FineTuneSpec::from_toml_str(src).map(|s| JobSpec::FineTune(Box::new(s)));
        }
        let raw: RawSimpleSpec = toml::from_str(src).map_err(|e| JobSpecError::Toml {
            message: e.to_string().trim_end().to_owned(),
        })?;
        match raw.kind.as_str() {
            DEMO_KIND => {
                if raw.linger_seconds.is_some() {
                    return Err(JobSpecError::LingerOutsideSelftest);
                }
                Ok(JobSpec::Demo(DemoSpec {
                    id: raw.id,
                    inputs: raw.inputs,
                    eval_every: raw.eval_every.unwrap_or(DEFAULT_EVAL_EVERY),
                }))
            }
            EGRESS_SELFTEST_KIND => Ok(JobSpec::EgressSelftest(SelftestSpec {
                id: raw.id,
                inputs: raw.inputs,
                linger_seconds: raw.linger_seconds.unwrap_or(0),
            })),
            _ => Err(JobSpecError::UnsupportedKind(raw.kind)),
        }
    }

    /// The spec's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            JobSpec::Demo(_) => DEMO_KIND,
            JobSpec::EgressSelftest(_) => EGRESS_SELFTEST_KIND,
            JobSpec::FineTune(_) => FINE_TUNE_KIND,
        }
    }

    /// The spec's `id`.
    pub fn id(&self) -> &str {
        match self {
            JobSpec::Demo(s) => &s.id,
            JobSpec::EgressSelftest(s) => &s.id,
            JobSpec::FineTune(s) => &s.id,
        }
    }

    /// The input files the spec names, in its order.
    pub fn inputs(&self) -> &[String] {
        match self {
            JobSpec::Demo(s) => &s.inputs,
            JobSpec::EgressSelftest(s) => &s.inputs,
            JobSpec::FineTune(s) => &s.inputs,
        }
    }
}
