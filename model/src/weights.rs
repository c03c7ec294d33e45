//! The dequantised `f32` master weights, by role.
//!
//! Matrices keep the GGUF / Hugging Face `[out, in]` layout (applied as
//! `x W^T`), the layout `kolm_kernels::llama` uses too; q and k rows keep
//! the GGUF order, which pairs with [`crate::RopeLayout::Interleaved`].

use candle_core::Tensor;

use crate::config::ModelConfig;
use crate::error::ModelError;

/// One decoder layer's weights.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// RMSNorm before attention, `[d]` (`blk.N.attn_norm`).
    pub(crate) attn_norm: Tensor,
    /// Query projection, `[q_heads * head_dim, d]` (`blk.N.attn_q`).
    pub(crate) wq: Tensor,
    /// Key projection, `[kv_heads * head_dim, d]` (`blk.N.attn_k`).
    pub(crate) wk: Tensor,
    /// Value projection, `[kv_heads * head_dim, d]` (`blk.N.attn_v`).
    pub(crate) wv: Tensor,
    /// Output projection, `[d, q_heads * head_dim]` (`blk.N.attn_output`).
    pub(crate) wo: Tensor,
    /// RMSNorm before the MLP, `[d]` (`blk.N.ffn_norm`).
    pub(crate) mlp_norm: Tensor,
    /// SwiGLU gate, `[ffn, d]` (`blk.N.ffn_gate`).
    pub(crate) gate: Tensor,
    /// SwiGLU up, `[ffn, d]` (`blk.N.ffn_up`).
    pub(crate) up: Tensor,
    /// Down projection, `[d, ffn]` (`blk.N.ffn_down`).
    pub(crate) down: Tensor,
}

/// All weights of a tied-embedding Llama. Cloning shares the tensors.
#[derive(Debug, Clone)]
pub struct Weights {
    /// Token embedding and lm head, `[vocab, d]` (`token_embd`).
    pub(crate) embed: Tensor,
    /// Final RMSNorm, `[d]` (`output_norm`).
    pub(crate) final_norm: Tensor,
    /// The decoder layers in order.
    pub(crate) layers: Vec<LayerWeights>,
}

fn flat(t: &Tensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

fn stacked(parts: &[&Tensor]) -> Result<Vec<f32>, ModelError> {
    let mut out = Vec::new();
    for p in parts {
        out.extend(flat(p)?);
    }
    Ok(out)
}

impl Weights {
    /// The weights as `kolm_kernels::llama::LlamaConfig::params` lists them,
    /// row-major `f32`: embedding, final norm, then per layer the attention
    /// norm, q/k/v stacked by rows, output, MLP norm, gate/up stacked, down.
    /// With a kernels config of the same sizes and
    /// `RopeLayout::Interleaved`, the GPU path computes this model.
    pub fn kernel_params(&self) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out = vec![flat(&self.embed)?, flat(&self.final_norm)?];
        for l in &self.layers {
            out.push(flat(&l.attn_norm)?);
            out.push(stacked(&[&l.wq, &l.wk, &l.wv])?);
            out.push(flat(&l.wo)?);
            out.push(flat(&l.mlp_norm)?);
            out.push(stacked(&[&l.gate, &l.up])?);
            out.push(flat(&l.down)?);
        }
        Ok(out)
    }

    /// The q and k rows reordered for [`crate::RopeLayout::RotateHalf`]:
    /// within each head, the GGUF row `2i` becomes row `i` and row `2i+1`
    /// becomes row `i + head_dim/2` (the inverse of llama.cpp's conversion
    /// permutation). The model computes the same function with those
    /// weights and rotate-half RoPE as with these and interleaved RoPE.
    pub fn to_rotate_half(&self, config: &ModelConfig) -> Result<Self, ModelError> {
        let hd = config.head_dim();
        let unpermute = |w: &Tensor, heads: usize| -> Result<Tensor, ModelError> {
            let cols = w.dim(1)?;
            // [heads, half, 2, cols] -> [heads, 2, half, cols]
            Ok(w.reshape((heads, hd / 2, 2, cols))?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((heads * hd, cols))?)
        };
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(LayerWeights {
                    wq: unpermute(&l.wq, config.q_heads())?,
                    wk: unpermute(&l.wk, config.kv_heads())?,
                    ..l.clone()
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Self {
            layers,
            ..self.clone()
        })
    }
}
