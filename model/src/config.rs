//! The model's hyper-parameters, as read from a GGUF file's metadata.

use crate::error::ModelError;

/// Which elements of a head vector RoPE rotates together.
///
/// The same two layouts as `kolm_kernels::cpu::RopeLayout`, so a loaded
/// model's choice carries over to the GPU path unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RopeLayout {
    /// Adjacent pairs `(2i, 2i+1)`. GGUF Llama weights need this: llama.cpp's
    /// converter permutes the rows of the Hugging Face q and k projections so
    /// that ggml's "normal" RoPE, which rotates adjacent pairs, computes what
    /// rotate-half computed on the original rows.
    Interleaved,
    /// Halves `(i, i + d/2)`: the Hugging Face Llama layout. On GGUF weights
    /// it is wrong (SmolLM2-135M's perplexity on Hamlet goes from 15.64 to
    /// about 196); it exists for weights converted back and for that check.
    RotateHalf,
}

/// Rotary position embedding: layout and frequency base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// Pairing of head elements.
    pub layout: RopeLayout,
    /// Frequencies are `base^(-2i/head_dim)`.
    pub base: f64,
}

/// A Llama model's sizes, validated against each other and against the
/// tensors of the file they came from (see [`crate::GgufFile::open`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub(crate) vocab: usize,
    pub(crate) d_model: usize,
    pub(crate) layers: usize,
    pub(crate) q_heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) ffn: usize,
    pub(crate) rope: Rope,
    pub(crate) rms_eps: f64,
    pub(crate) context_length: usize,
    pub(crate) tied_embeddings: bool,
}

/// The sizes of a model that no file describes (a randomly initialised
/// one), for [`ModelConfig::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub vocab: usize,
    pub d_model: usize,
    pub layers: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rope: Rope,
    pub rms_eps: f64,
    pub context_length: usize,
}

impl ModelConfig {
    /// A tied-embedding Llama of `shape`, checked as a file's would be:
    /// no empty size, query heads a multiple of key/value heads, an even
    /// head dimension, a positive epsilon and a RoPE base above 1.
    pub fn new(shape: Shape) -> Result<Self, ModelError> {
        let bad = |key: &str, value: String, why: &'static str| ModelError::BadHyperParameter {
            key: key.to_owned(),
            value,
            why,
        };
        for (key, v) in [
            ("vocab", shape.vocab),
            ("d_model", shape.d_model),
            ("layers", shape.layers),
            ("q_heads", shape.q_heads),
            ("kv_heads", shape.kv_heads),
            ("head_dim", shape.head_dim),
            ("ffn", shape.ffn),
            ("context_length", shape.context_length),
        ] {
            if v == 0 {
                return Err(bad(key, "0".into(), "must be at least 1"));
            }
        }
        if !shape.q_heads.is_multiple_of(shape.kv_heads) {
            return Err(bad(
                "q_heads",
                shape.q_heads.to_string(),
                "must be a multiple of kv_heads",
            ));
        }
        if !shape.head_dim.is_multiple_of(2) {
            return Err(bad("head_dim", shape.head_dim.to_string(), "must be even"));
        }
        if !(shape.rms_eps > 0.0 && shape.rms_eps.is_finite()) {
            return Err(bad("rms_eps", shape.rms_eps.to_string(), "must be > 0"));
        }
        if !(shape.rope.base > 1.0 && shape.rope.base.is_finite()) {
            return Err(bad("rope.base", shape.rope.base.to_string(), "must be > 1"));
        }
        Ok(Self {
            vocab: shape.vocab,
            d_model: shape.d_model,
            layers: shape.layers,
            q_heads: shape.q_heads,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            ffn: shape.ffn,
            rope: shape.rope,
            rms_eps: shape.rms_eps,
            context_length: shape.context_length,
            tied_embeddings: true,
        })
    }

    /// Vocabulary size (`llama.vocab_size`, equal to the tokenizer's).
    pub fn vocab(&self) -> usize {
        self.vocab
    }
    /// Hidden size (`llama.embedding_length`).
    pub fn d_model(&self) -> usize {
        self.d_model
    }
    /// Decoder layers (`llama.block_count`).
    pub fn layers(&self) -> usize {
        self.layers
    }
    /// Query heads (`llama.attention.head_count`).
    pub fn q_heads(&self) -> usize {
        self.q_heads
    }
    /// Key/value heads (`llama.attention.head_count_kv`).
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }
    /// Head dimension (`llama.attention.key_length`, else hidden / heads).
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
    /// MLP inner size (`llama.feed_forward_length`).
    pub fn ffn(&self) -> usize {
        self.ffn
    }
    /// RoPE layout and base (`llama.rope.freq_base`).
    pub fn rope(&self) -> Rope {
        self.rope
    }
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub fn rms_eps(&self) -> f64 {
        self.rms_eps
    }
    /// Longest sequence the model was trained for (`llama.context_length`).
    pub fn context_length(&self) -> usize {
        self.context_length
    }
    /// Whether the lm head is the token embedding (no `output.weight`).
    /// Always true today: the loader refuses an untied head.
    pub fn tied_embeddings(&self) -> bool {
        self.tied_embeddings
    }
    /// Width of the stacked q projection, `q_heads * head_dim`.
    pub fn q_dim(&self) -> usize {
        self.q_heads * self.head_dim
    }
    /// Width of each of the k and v projections, `kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The same model with another RoPE: for experiments that show what a
    /// wrong layout or base does (the file's values are the right ones).
    #[must_use]
    pub fn with_rope(&self, rope: Rope) -> Self {
        Self {
            rope,
            ..self.clone()
        }
    }
}
