//! The dequantised `f32` master weights, by role.
//!
//! Matrices keep the GGUF / Hugging Face `[out, in]` layout (applied as
//! `x W^T`), the layout `kolm_kernels::llama` uses too; q and k rows keep
//! the GGUF order, which pairs with [`crate::RopeLayout::Interleaved`].

use candle_core::Tensor;

use crate::config::Config;
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
    /// The weights as [`Config::params`](crate::Config::params) lists them,
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

    /// The inverse of [`Self::kernel_params`]: weights from tensors in
    /// [`Config::params`](crate::Config::params) order (q/k/v and gate/up
    /// stacked by rows), each checked against `config`'s shapes.
    pub fn from_kernel_params(config: &Config, params: &[Vec<f32>]) -> Result<Self, ModelError> {
        let (d, q, kv, ffn) = (
            config.d_model(),
            config.q_dim(),
            config.kv_dim(),
            config.ffn(),
        );
        let expected = 2 + 6 * config.layers();
        if params.len() != expected {
            return Err(ModelError::ParamShape {
                index: params.len(),
                what: "the list: 2 + 6 per layer",
                expected,
                found: params.len(),
            });
        }
        let tensor =
            |i: usize, what: &'static str, shape: &[usize]| -> Result<Tensor, ModelError> {
                let p = &params[i];
                let n: usize = shape.iter().product();
                if p.len() != n {
                    return Err(ModelError::ParamShape {
                        index: i,
                        what,
                        expected: n,
                        found: p.len(),
                    });
                }
                Ok(Tensor::from_slice(p, shape, &candle_core::Device::Cpu)?)
            };
        let rows = |t: &Tensor, at: usize, n: usize| -> Result<Tensor, ModelError> {
            Ok(t.narrow(0, at, n)?.contiguous()?)
        };
        let mut layers = Vec::with_capacity(config.layers());
        for l in 0..config.layers() {
            let b = 2 + 6 * l;
            let qkv = tensor(b + 1, "wqkv", &[q + 2 * kv, d])?;
            let gu = tensor(b + 4, "gate_up", &[2 * ffn, d])?;
            layers.push(LayerWeights {
                attn_norm: tensor(b, "attn_norm", &[d])?,
                wq: rows(&qkv, 0, q)?,
                wk: rows(&qkv, q, kv)?,
                wv: rows(&qkv, q + kv, kv)?,
                wo: tensor(b + 2, "wo", &[d, q])?,
                mlp_norm: tensor(b + 3, "mlp_norm", &[d])?,
                gate: rows(&gu, 0, ffn)?,
                up: rows(&gu, ffn, ffn)?,
                down: tensor(b + 5, "down", &[d, ffn])?,
            });
        }
        Ok(Self {
            embed: tensor(0, "embed", &[config.vocab(), d])?,
            final_norm: tensor(1, "final_norm", &[d])?,
            layers,
        })
    }

    /// The q and k rows reordered for [`crate::RopeLayout::RotateHalf`]:
    /// within each head, the GGUF row `2i` becomes row `i` and row `2i+1`
    /// becomes row `i + head_dim/2` (the inverse of llama.cpp's conversion
    /// permutation). The model computes the same function with those
    /// weights and rotate-half RoPE as with these and interleaved RoPE.
    pub fn to_rotate_half(&self, config: &Config) -> Result<Self, ModelError> {
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
