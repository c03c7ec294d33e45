//! A Llama-architecture decoder (the SmolLM2 family) composed from the
//! kernels: the training step kolm runs, on the GPU ([`GpuLlama`]) and as an
//! `f64` CPU reference ([`crate::cpu::llama`]) that the GPU is tested
//! against.
//!
//! Architecture: token embedding tied to the lm-head; per layer RMSNorm,
//! grouped-query causal attention with RoPE on q and k, a residual add,
//! RMSNorm, a SwiGLU MLP `down(silu(gate x) * up x)` and a residual add; a
//! final RMSNorm. No biases. Linear weights are stored `[out, in]` (the
//! GGUF / Hugging Face layout) and applied as `x W^T`.

mod gpu;
mod lora;

pub use gpu::{GpuLlama, Optimizer, PlannedBytes, TrainBatch};
pub use lora::{GpuLora, LoraSite};

use crate::KernelError;
use crate::cpu::RopeLayout;
use crate::rng::SplitMix64;

/// Sizes of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlamaConfig {
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
    /// Head dimension (64 or 128: the attention kernels' sizes).
    pub head_dim: usize,
    /// MLP inner size.
    pub ffn: usize,
    /// RoPE frequency base.
    pub rope_base: f64,
    /// Which elements RoPE rotates together.
    pub rope_layout: RopeLayout,
    /// RMSNorm epsilon.
    pub eps: f32,
}

/// What one parameter tensor is, in [`LlamaConfig::params`] order.
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
/// Offsets of a layer's parameters after [`LlamaConfig::layer_base`].
///
/// The q, k and v projections are one matrix, as are gate and up: one
/// matrix product each instead of three and two (the small k and v
/// products leave most of the GPU idle). Rows are stacked in that order, so
/// a checkpoint's separate tensors concatenate into them.
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

impl LlamaConfig {
    /// SmolLM2-135M: 30 layers, d = 576, 9 / 3 heads of 64, SwiGLU 1536,
    /// vocabulary 49152, RoPE base 100000 (rotate-half, as its Hugging Face
    /// weights), eps 1e-5.
    pub fn smollm2_135m() -> Self {
        Self {
            vocab: 49152,
            d_model: 576,
            layers: 30,
            q_heads: 9,
            kv_heads: 3,
            head_dim: 64,
            ffn: 1536,
            rope_base: 100_000.0,
            rope_layout: RopeLayout::RotateHalf,
            eps: 1e-5,
        }
    }

    /// Checks the sizes fit together.
    pub fn validate(&self) -> Result<(), KernelError> {
        let bad = |what: String| Err(KernelError::Unsupported { op: "llama", what });
        if self.vocab == 0 || self.d_model == 0 || self.layers == 0 || self.ffn == 0 {
            return bad(format!("an empty dimension in {self:?}"));
        }
        if self.kv_heads == 0 || !self.q_heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} query heads are not a multiple of {} kv heads",
                self.q_heads, self.kv_heads
            ));
        }
        if !matches!(self.head_dim, 64 | 128) {
            return bad(format!("head dimension {} (64 or 128)", self.head_dim));
        }
        if !(self.eps > 0.0 && self.rope_base > 1.0) {
            return bad(format!("eps {} / rope base {}", self.eps, self.rope_base));
        }
        Ok(())
    }

    /// Index of layer `l`'s first parameter.
    pub fn layer_base(l: usize) -> usize {
        2 + PER_LAYER * l
    }

    /// Every parameter tensor, in a fixed order: embedding, final norm,
    /// then each layer's six.
    pub fn params(&self) -> Vec<ParamInfo> {
        let (d, q, kv) = (
            self.d_model,
            self.q_heads * self.head_dim,
            self.kv_heads * self.head_dim,
        );
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

    /// Seeded initial weights: norms 1, matrices uniform with standard
    /// deviation `std` (so the same seed gives the same model everywhere).
    pub fn init(&self, seed: u64, std: f64) -> Vec<Vec<f32>> {
        let mut rng = SplitMix64::new(seed);
        let a = std * 3f64.sqrt();
        self.params()
            .iter()
            .map(|p| {
                let n = p.shape.iter().product();
                if p.is_norm {
                    vec![1.0; n]
                } else {
                    (0..n).map(|_| rng.symmetric(a) as f32).collect()
                }
            })
            .collect()
    }
}
