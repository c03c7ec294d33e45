//! The model's hyper-parameters, as read from a GGUF file's metadata.

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

impl ModelConfig {
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
