//! The base model of a fine-tune job: a GGUF file among the inputs (its
//! SHA-256 checked against the spec's pin before it is parsed) or a
//! randomly initialised preset; in both cases the weights come out in the
//! parameter layout of `Config::params`, with the one model configuration
//! that the trainers, the kernels and the evaluation all take, and the
//! tokenizer.

use std::path::Path;

use kolm_format::job_spec::{BaseModel, ModelPreset};
use kolm_kernels::llama::init_params;
use kolm_model::{Config, GgufFile, GgufTokenizer, Rope, RopeLayout, Shape};
use sha2::{Digest, Sha256};

use super::FineTuneError;

/// Standard deviation of a randomly initialised preset's matrices.
const INIT_STD: f64 = 0.02;

/// What the job trains from.
#[derive(Debug)]
pub struct Base {
    /// The model: what both trainers, the kernels and the evaluation's
    /// forward pass take.
    pub config: Config,
    /// `f32` weights in `Config::params` order.
    pub params: Vec<Vec<f32>>,
    pub tokenizer: GgufTokenizer,
    /// SHA-256 of the base file; for a preset, of its description (the
    /// checkpoint format binds a run to a base model digest either way).
    pub sha256: [u8; 32],
    /// For the model card.
    pub card: BaseCard,
}

/// The base model as the model card names it.
#[derive(Debug, Clone)]
pub struct BaseCard {
    pub name: String,
    pub file: Option<String>,
    pub licence: String,
    pub architecture: String,
}

/// The `tiny` preset: the SmolLM2 architecture at a size that trains and
/// evaluates on two CPU cores in about a minute, over the byte-level
/// tokenizer (259 tokens). Head dimension 64: the GPU kernels' size.
pub fn tiny_shape() -> Shape {
    Shape {
        vocab: 259,
        d_model: 64,
        layers: 2,
        q_heads: 2,
        kv_heads: 1,
        head_dim: 64,
        ffn: 192,
        rope: Rope {
            layout: RopeLayout::RotateHalf,
            base: 10_000.0,
        },
        rms_eps: 1e-5,
        context_length: 2048,
    }
}

/// The SmolLM2-135M shape (random weights, byte-level tokenizer: the ids
/// above 258 are never used), for benchmarks of the real size.
pub fn smollm2_135m_shape() -> Shape {
    Shape::smollm2_135m()
}

fn describe(c: &Config) -> String {
    format!(
        "llama: {} layers, d {}, {}/{} heads of {}, ffn {}, vocab {}, RoPE base {} ({:?}), tied embeddings",
        c.layers(),
        c.d_model(),
        c.q_heads(),
        c.kv_heads(),
        c.head_dim(),
        c.ffn(),
        c.vocab(),
        c.rope().base,
        c.rope().layout
    )
}

/// Loads the spec's base model from `input_dir`.
pub fn load(model: &BaseModel, input_dir: &Path) -> Result<Base, FineTuneError> {
    match model {
        BaseModel::File { input, sha256 } => {
            let path = input_dir.join(input);
            let bytes = std::fs::read(&path).map_err(|e| FineTuneError::BaseModel {
                reason: format!("reading {input}: {e}"),
            })?;
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            if &digest != sha256 {
                return Err(FineTuneError::BaseModel {
                    reason: format!(
                        "{input} has SHA-256 {}, the spec pins {} (model.sha256)",
                        hex::encode(digest),
                        hex::encode(sha256)
                    ),
                });
            }
            drop(bytes);
            let bad = |e: kolm_model::ModelError| FineTuneError::BaseModel {
                reason: format!("{input}: {e}"),
            };
            let file = GgufFile::open(&path).map_err(bad)?;
            let tokenizer = file.tokenizer().map_err(bad)?;
            let loaded = file.load_model().map_err(bad)?;
            let params = loaded.weights().kernel_params().map_err(bad)?;
            let config = *loaded.config();
            let name = file
                .metadata()
                .get("general.name")
                .and_then(|v| v.to_string().ok().cloned())
                .unwrap_or_else(|| input.clone());
            let licence = file
                .metadata()
                .get("general.license")
                .and_then(|v| v.to_string().ok().cloned())
                .unwrap_or_else(|| "not stated in the file".into());
            Ok(Base {
                card: BaseCard {
                    name,
                    file: Some(input.clone()),
                    licence,
                    architecture: describe(&config),
                },
                config,
                params,
                tokenizer,
                sha256: digest,
            })
        }
        BaseModel::Random { config, seed } => {
            let (shape, name) = match config {
                ModelPreset::Tiny => (tiny_shape(), "tiny"),
                ModelPreset::Smollm2_135m => (smollm2_135m_shape(), "smollm2-135m"),
            };
            let config = Config::new(shape).map_err(|e| FineTuneError::BaseModel {
                reason: format!("preset {name}: {e}"),
            })?;
            let params = init_params(&config, *seed, INIT_STD);
            let description = format!("random-init {name} seed {seed} std {INIT_STD}");
            Ok(Base {
                card: BaseCard {
                    name: format!("{name} (randomly initialised, seed {seed})"),
                    file: None,
                    licence: "none (randomly initialised)".into(),
                    architecture: describe(&config),
                },
                config,
                params,
                tokenizer: GgufTokenizer::byte_level_chatml(),
                sha256: Sha256::digest(description.as_bytes()).into(),
            })
        }
    }
}
