//! kolm's Llama model configuration, written once.
//!
//! [`Config`] is the one description of a model's sizes, RoPE settings and
//! RMSNorm epsilon that every implementation takes: the CPU model and its
//! scorer (`kolm-model`, which re-exports this crate's types), the CPU and
//! GPU trainers (`kolm-train`) and the GPU kernels with their `f64` CPU
//! reference (`kolm-kernels`). It is built only by [`Config::new`], which
//! checks the sizes against each other, so a `Config` in hand is a valid one.
//!
//! The crate also owns what those implementations must agree on besides the
//! sizes: the parameter layout ([`Config::params`], [`slot`]) and the RoPE
//! tables ([`RopeTable`], built in `f64` and rounded once).
//!
//! No dependencies but `thiserror`: the kernels take it without reaching
//! candle, and the CPU model without reaching CUDA.
#![forbid(unsafe_code)]

/// Which elements of a head vector RoPE rotates together.
///
/// Deliberately exhaustive: every implementation (the CPU model, the CPU
/// trainer, the kernels and their reference) matches on it, so a layout
/// added here fails to compile until each of them rotates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A configuration refused by [`Config::new`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A hyper-parameter is out of range or inconsistent with the others.
    /// (The message is the one `kolm_model::ModelError::BadHyperParameter`
    /// prints, which the CPU model returns for it.)
    #[error("GGUF hyper-parameter `{key}` = {value}: {why}")]
    BadHyperParameter {
        /// The field (`vocab`, `head_dim`, `rope.base`, ...).
        key: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// The sizes of a model, unchecked: what [`Config::new`] takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub d_model: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Head dimension (even).
    pub head_dim: usize,
    /// MLP inner size.
    pub ffn: usize,
    /// RoPE layout and base.
    pub rope: Rope,
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// Longest sequence the model was trained for.
    pub context_length: usize,
}

impl Shape {
    /// SmolLM2-135M: 30 layers, d = 576, 9 / 3 heads of 64, SwiGLU 1536,
    /// vocabulary 49152, RoPE base 100000 (rotate-half, as its Hugging Face
    /// weights), eps `1e-5` as an `f32` (the kernels' precision), context
    /// 8192.
    pub fn smollm2_135m() -> Self {
        Self {
            vocab: 49152,
            d_model: 576,
            layers: 30,
            q_heads: 9,
            kv_heads: 3,
            head_dim: 64,
            ffn: 1536,
            rope: Rope {
                layout: RopeLayout::RotateHalf,
                base: 100_000.0,
            },
            rms_eps: f64::from(1e-5f32),
            context_length: 8192,
        }
    }
}

/// A Llama model's sizes, validated against each other (see
/// [`Config::new`]): token embedding tied to the lm head; per layer
/// RMSNorm, grouped-query causal attention with RoPE on q and k, a residual
/// add, RMSNorm, a SwiGLU MLP and a residual add; a final RMSNorm. No biases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    vocab: usize,
    d_model: usize,
    layers: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    rope: Rope,
    rms_eps: f64,
    context_length: usize,
    tied_embeddings: bool,
}

/// What one parameter tensor is, in [`Config::params`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    /// `embed`, `final_norm`, or `layers.{l}.{attn_norm|wqkv|wo|mlp_norm|gate_up|down}`.
    pub name: String,
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// Norm weights start at 1; matrices are random.
    pub is_norm: bool,
}

/// Index of the tied embedding / lm-head in the parameter list.
pub const EMBED: usize = 0;
/// Index of the final norm's weight.
pub const FINAL_NORM: usize = 1;
/// Parameters per layer, and their offsets inside a layer's group.
pub const PER_LAYER: usize = 6;
/// Offsets of a layer's parameters after [`Config::layer_base`].
///
/// The q, k and v projections are one matrix, as are gate and up: one
/// matrix product each instead of three and two (the small k and v
/// products leave most of the GPU idle). Rows are stacked in that order, so
/// a checkpoint's separate tensors concatenate into them. Linear weights
/// are stored `[out, in]` (the GGUF / Hugging Face layout) and applied as
/// `x W^T`.
pub mod slot {
    /// RMSNorm before attention.
    pub const ATTN_NORM: usize = 0;
    /// q, k, v projections stacked: `[(q_heads + 2 kv_heads) * head_dim, d_model]`.
    pub const WQKV: usize = 1;
    /// Output projection `[d_model, q_heads * head_dim]`.
    pub const WO: usize = 2;
    /// RMSNorm before the MLP.
    pub const MLP_NORM: usize = 3;
    /// Gate and up projections stacked: `[2 ffn, d_model]`.
    pub const GATE_UP: usize = 4;
    /// Down projection `[d_model, ffn]`.
    pub const DOWN: usize = 5;
}

impl Config {
    /// A tied-embedding Llama of `shape`, checked as a file's would be:
    /// no empty size, query heads a multiple of key/value heads, an even
    /// head dimension, a positive epsilon and a RoPE base above 1.
    pub fn new(shape: Shape) -> Result<Self, ConfigError> {
        let bad = |key: &'static str, value: String, why: &'static str| {
            Err(ConfigError::BadHyperParameter { key, value, why })
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
                return bad(key, "0".into(), "must be at least 1");
            }
        }
        if !shape.q_heads.is_multiple_of(shape.kv_heads) {
            return bad(
                "q_heads",
                shape.q_heads.to_string(),
                "must be a multiple of kv_heads",
            );
        }
        if !shape.head_dim.is_multiple_of(2) {
            return bad("head_dim", shape.head_dim.to_string(), "must be even");
        }
        if !(shape.rms_eps > 0.0 && shape.rms_eps.is_finite()) {
            return bad("rms_eps", shape.rms_eps.to_string(), "must be > 0");
        }
        if !(shape.rope.base > 1.0 && shape.rope.base.is_finite()) {
            return bad("rope.base", shape.rope.base.to_string(), "must be > 1");
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

    /// [`Shape::smollm2_135m`], checked.
    pub fn smollm2_135m() -> Self {
        let s = Shape::smollm2_135m();
        // The preset's sizes pass every check of `new` (its unit test).
        Self {
            vocab: s.vocab,
            d_model: s.d_model,
            layers: s.layers,
            q_heads: s.q_heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            ffn: s.ffn,
            rope: s.rope,
            rms_eps: s.rms_eps,
            context_length: s.context_length,
            tied_embeddings: true,
        }
    }

    /// The sizes back, for building a variant (`Shape { .., ..c.shape() }`).
    pub fn shape(&self) -> Shape {
        Shape {
            vocab: self.vocab,
            d_model: self.d_model,
            layers: self.layers,
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            ffn: self.ffn,
            rope: self.rope,
            rms_eps: self.rms_eps,
            context_length: self.context_length,
        }
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
    /// The RMSNorm epsilon rounded to `f32`: what the kernels, their `f64`
    /// reference and the CPU trainer compute with.
    pub fn eps_f32(&self) -> f32 {
        self.rms_eps as f32
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
        Self { rope, ..*self }
    }

    /// Index of layer `l`'s first parameter.
    pub fn layer_base(l: usize) -> usize {
        2 + PER_LAYER * l
    }

    /// Every parameter tensor, in a fixed order: embedding, final norm,
    /// then each layer's six ([`slot`]).
    pub fn params(&self) -> Vec<ParamInfo> {
        let (d, q, kv) = (self.d_model, self.q_dim(), self.kv_dim());
        let p = |name: String, shape: Vec<usize>, is_norm| ParamInfo {
            name,
            shape,
            is_norm,
        };
        let mut out = vec![
            p("embed".into(), vec![self.vocab, d], false),
            p("final_norm".into(), vec![d], true),
        ];
        for l in 0..self.layers {
            let n = |s: &str| format!("layers.{l}.{s}");
            out.extend([
                p(n("attn_norm"), vec![d], true),
                p(n("wqkv"), vec![q + 2 * kv, d], false),
                p(n("wo"), vec![d, q], false),
                p(n("mlp_norm"), vec![d], true),
                p(n("gate_up"), vec![2 * self.ffn, d], false),
                p(n("down"), vec![d, self.ffn], false),
            ]);
        }
        out
    }

    /// Total number of parameters.
    pub fn num_params(&self) -> usize {
        self.params()
            .iter()
            .map(|p| p.shape.iter().product::<usize>())
            .sum()
    }
}

/// RoPE's cosines and sines, `[positions, head_dim/2]` row-major: the angle
/// of position `p`, pair `i` is `p * base^(-2i/head_dim)`, computed in
/// `f64` and rounded to `f32` once. Every implementation reads these
/// tables (the GPU uploads them), so all rotate by the same `f32` values.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeTable {
    /// Head dimension (even).
    pub head_dim: usize,
    /// Number of positions covered.
    pub positions: usize,
    /// `cos(pos * freq_i)` at `[pos * head_dim/2 + i]`.
    pub cos: Vec<f32>,
    /// `sin(pos * freq_i)`, same layout.
    pub sin: Vec<f32>,
}

impl RopeTable {
    /// Tables for positions `0..positions` of an even `head_dim` with the
    /// given base.
    pub fn new(positions: usize, head_dim: usize, base: f64) -> Self {
        Self::starting_at(0, positions, head_dim, base)
    }

    /// Tables for positions `start..start + len` (a KV-cached forward's new
    /// positions); row `r` is position `start + r`.
    pub fn starting_at(start: usize, len: usize, head_dim: usize, base: f64) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        for p in start..start + len {
            for i in 0..half {
                let freq = base.powf(-2.0 * i as f64 / head_dim as f64);
                let angle = p as f64 * freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Self {
            head_dim,
            positions: len,
            cos,
            sin,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smollm2_preset_passes_the_checks() {
        let checked = Config::new(Shape::smollm2_135m()).unwrap();
        assert_eq!(checked, Config::smollm2_135m());
        assert_eq!(Config::smollm2_135m().shape(), Shape::smollm2_135m());
    }

    #[test]
    fn bad_sizes_are_named() {
        let shape = Shape {
            kv_heads: 2,
            ..Shape::smollm2_135m()
        };
        assert_eq!(
            Config::new(shape),
            Err(ConfigError::BadHyperParameter {
                key: "q_heads",
                value: "9".into(),
                why: "must be a multiple of kv_heads",
            })
        );
    }

    #[test]
    fn a_table_from_an_offset_is_the_tail_of_the_whole_table() {
        let whole = RopeTable::new(7, 8, 10_000.0);
        let tail = RopeTable::starting_at(3, 4, 8, 10_000.0);
        assert_eq!(tail.cos, whole.cos[3 * 4..]);
        assert_eq!(tail.sin, whole.sin[3 * 4..]);
    }
}
