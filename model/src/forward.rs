//! The Llama forward pass on the CPU in `f32`, with a KV cache; perplexity
//! and greedy decoding on top of it.
//!
//! Per layer: RMSNorm, q/k/v projections, RoPE on q and k, grouped-query
//! causal attention, output projection, residual add; RMSNorm, SwiGLU MLP
//! `down(silu(gate x) * up x)`, residual add. Then the final RMSNorm and the
//! lm head (the tied embedding). Matrix products go through candle's CPU
//! backend (the `gemm` crate: blocked, SIMD, multithreaded); a query group
//! shares one product with its key/value head instead of copying the heads.

use candle_core::{Device, Tensor};

use crate::config::{Config, RopeLayout, RopeTable};
use crate::error::ModelError;
use crate::layers::{self, causal_mask, linear, rms_norm, rope_tensors, softmax_last};
use crate::weights::Weights;

/// A loaded model: configuration and `f32` weights.
#[derive(Debug, Clone)]
pub struct Model {
    config: Config,
    weights: Weights,
}

/// Keys (after RoPE) and values of the positions seen so far, per layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// Per layer: `[kv_heads, len, head_dim]` keys and values.
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Which positions' logits a forward call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Every input position's (for scoring).
    All,
    /// Only the last position's (for decoding: the lm head is the largest
    /// product, so this skips most of it).
    Last,
}

/// Logits, row-major `[rows, vocab]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Logits {
    data: Vec<f32>,
    vocab: usize,
}

impl Logits {
    /// Number of positions.
    pub fn rows(&self) -> usize {
        self.data.len() / self.vocab
    }

    /// The logits of row `i`.
    ///
    /// # Panics
    /// If `i >= self.rows()`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }

    /// All rows, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
}

/// Perplexity of a token sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// Tokens predicted (the sequence length minus one).
    pub predicted: usize,
    /// Mean negative log-likelihood (nats) of the predicted tokens.
    pub mean_nll: f64,
    /// `exp(mean_nll)`.
    pub perplexity: f64,
}

/// Index of the largest value; the lowest index wins a tie, so decoding is
/// deterministic.
fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

/// `log(sum(exp(x)))` in `f64`.
fn log_sum_exp(xs: &[f32]) -> f64 {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = xs.iter().map(|&x| f64::from(x - max).exp()).sum();
    f64::from(max) + sum.ln()
}

/// Cosine and sine for positions `start..start+len`, `[len, head_dim/2]`
/// (the configuration's [`RopeTable`]: angles in `f64`, rounded once).
fn rope_tables(
    start: usize,
    len: usize,
    head_dim: usize,
    base: f64,
) -> candle_core::Result<(Tensor, Tensor)> {
    rope_tensors(RopeTable::starting_at(start, len, head_dim, base))
}

/// Rotates one sequence `x` `[t, heads, head_dim]` by the tables' angles:
/// the shared [`layers::rope`] on a batch of one.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> candle_core::Result<Tensor> {
    layers::rope(&x.unsqueeze(0)?, cos, sin, layout)?.squeeze(0)
}

impl Model {
    pub(crate) fn new(config: Config, weights: Weights) -> Self {
        Self { config, weights }
    }

    /// A model from weights in the kernels' layout (what the trainer
    /// returns), checked against `config`.
    pub fn from_kernel_params(config: Config, params: &[Vec<f32>]) -> Result<Self, ModelError> {
        let weights = Weights::from_kernel_params(&config, params)?;
        Ok(Self { config, weights })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The same weights run with another configuration of the same sizes
    /// (from [`Config::with_rope`]); shares the tensors.
    ///
    /// Returns [`ModelError::BadHyperParameter`] if `config` changes a size.
    pub fn with_config(&self, config: Config) -> Result<Self, ModelError> {
        let same_rope = config.with_rope(self.config.rope());
        if same_rope != self.config {
            return Err(ModelError::BadHyperParameter {
                key: "config".to_owned(),
                value: format!("{config:?}"),
                why: "only the RoPE settings may differ from the loaded model's",
            });
        }
        Ok(Self {
            config,
            weights: self.weights.clone(),
        })
    }

    /// The same function with q/k rows in the Hugging Face order and
    /// rotate-half RoPE (see [`Weights::to_rotate_half`]).
    pub fn to_rotate_half(&self) -> Result<Self, ModelError> {
        if self.config.rope().layout != RopeLayout::Interleaved {
            return Err(ModelError::BadHyperParameter {
                key: "rope.layout".to_owned(),
                value: format!("{:?}", self.config.rope().layout),
                why: "only interleaved (GGUF) weights are converted to rotate-half",
            });
        }
        let mut rope = self.config.rope();
        rope.layout = RopeLayout::RotateHalf;
        Ok(Self {
            config: self.config.with_rope(rope),
            weights: self.weights.to_rotate_half(&self.config)?,
        })
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache {
            layers: vec![None; self.config.layers()],
            len: 0,
        }
    }

    fn check_tokens(&self, tokens: &[u32], start: usize) -> Result<(), ModelError> {
        let vocab = self.config.vocab();
        if let Some((position, &id)) = tokens
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= vocab)
        {
            return Err(ModelError::TokenOutOfRange {
                id,
                position,
                vocab,
            });
        }
        if start + tokens.len() > self.config.context_length() {
            return Err(ModelError::ContextTooLong {
                len: start + tokens.len(),
                max: self.config.context_length(),
            });
        }
        Ok(())
    }

    /// Runs `tokens` at the positions after those in `cache`, appends their
    /// keys and values to it, and returns the logits of `output`'s rows.
    ///
    /// Input errors are found before the cache changes; after a
    /// [`ModelError::Compute`] (a bug) the cache is not usable.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        output: Output,
    ) -> Result<Logits, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::TooFewTokens {
                what: "a forward pass",
                needed: 1,
                got: 0,
            });
        }
        if cache.layers.len() != self.config.layers() {
            return Err(ModelError::BadHyperParameter {
                key: "cache".to_owned(),
                value: format!("{} layers", cache.layers.len()),
                why: "the cache belongs to another model",
            });
        }
        self.check_tokens(tokens, cache.len)?;
        let logits = self.forward_tensors(tokens, cache, output)?;
        cache.len += tokens.len();
        Ok(Logits {
            data: logits.flatten_all()?.to_vec1::<f32>()?,
            vocab: self.config.vocab(),
        })
    }

    fn forward_tensors(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        output: Output,
    ) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let w = &self.weights;
        let (t, start) = (tokens.len(), cache.len);
        let (hq, hkv, hd) = (c.q_heads(), c.kv_heads(), c.head_dim());
        let group = hq / hkv;
        let eps = c.rms_eps();
        let rope_cfg = c.rope();
        let (cos, sin) = rope_tables(start, t, hd, rope_cfg.base)?;
        let mask = if t > 1 {
            Some(causal_mask(start, t)?)
        } else {
            None
        };
        let scale = 1.0 / (hd as f64).sqrt();

        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = w.embed.index_select(&ids, 0)?; // [t, d]
        for (layer, slot) in w.layers.iter().zip(cache.layers.iter_mut()) {
            let h = rms_norm(&x, &layer.attn_norm, eps)?;
            let q = linear(&h, &layer.wq)?.reshape((t, hq, hd))?;
            let k = linear(&h, &layer.wk)?.reshape((t, hkv, hd))?;
            let v = linear(&h, &layer.wv)?.reshape((t, hkv, hd))?;
            let q = rope(&q, &cos, &sin, rope_cfg.layout)?;
            let k = rope(&k, &cos, &sin, rope_cfg.layout)?;
            let k = k.transpose(0, 1)?.contiguous()?; // [hkv, t, hd]
            let v = v.transpose(0, 1)?.contiguous()?;
            let (k, v) = match slot.take() {
                Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 1)?, Tensor::cat(&[&pv, &v], 1)?),
                None => (k, v),
            };
            let total = k.dim(1)?;
            // Query head h reads kv head h / group: group the query heads of
            // one kv head into the rows of one product.
            let q = q
                .reshape((t, hkv, group, hd))?
                .permute((1, 2, 0, 3))?
                .contiguous()?
                .reshape((hkv, group * t, hd))?;
            let scores = (q.matmul(&k.t()?)? * scale)?.reshape((hkv, group, t, total))?;
            let scores = match &mask {
                Some(m) => scores.broadcast_add(m)?,
                None => scores,
            };
            let p = softmax_last(&scores)?.reshape((hkv, group * t, total))?;
            let o = p
                .matmul(&v)?
                .reshape((hkv, group, t, hd))?
                .permute((2, 0, 1, 3))?
                .contiguous()?
                .reshape((t, hq * hd))?;
            x = (x + linear(&o, &layer.wo)?)?;
            *slot = Some((k, v));

            let h = rms_norm(&x, &layer.mlp_norm, eps)?;
            let act = (linear(&h, &layer.gate)?.silu()? * linear(&h, &layer.up)?)?;
            x = (x + linear(&act, &layer.down)?)?;
        }
        let x = match output {
            Output::All => x,
            Output::Last => x.narrow(0, t - 1, 1)?,
        };
        let x = rms_norm(&x, &w.final_norm, eps)?;
        linear(&x, &w.embed)
    }

    /// Logits of every position of `tokens`, from an empty cache.
    pub fn logits(&self, tokens: &[u32]) -> Result<Logits, ModelError> {
        self.forward(tokens, &mut self.new_cache(), Output::All)
    }

    /// Perplexity of `tokens`: `exp` of the mean negative log-likelihood of
    /// tokens `1..n` given the ones before (the first token is context only,
    /// no BOS is added). Log-softmax is taken in `f64`.
    pub fn perplexity(&self, tokens: &[u32]) -> Result<Perplexity, ModelError> {
        if tokens.len() < 2 {
            return Err(ModelError::TooFewTokens {
                what: "perplexity",
                needed: 2,
                got: tokens.len(),
            });
        }
        let logits = self.logits(&tokens[..tokens.len() - 1])?;
        let predicted = tokens.len() - 1;
        let total: f64 = (0..predicted)
            .map(|i| {
                let row = logits.row(i);
                log_sum_exp(row) - f64::from(row[tokens[i + 1] as usize])
            })
            .sum();
        let mean_nll = total / predicted as f64;
        Ok(Perplexity {
            predicted,
            mean_nll,
            perplexity: mean_nll.exp(),
        })
    }

    /// The `n` tokens greedy decoding appends to `prompt` (the most likely
    /// token at each step, the lowest id on a tie), with a KV cache.
    pub fn greedy(&self, prompt: &[u32], n: usize) -> Result<Vec<u32>, ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::TooFewTokens {
                what: "greedy decoding",
                needed: 1,
                got: 0,
            });
        }
        // The last token is produced, never fed: checked before any work.
        let positions = prompt.len() + n.saturating_sub(1);
        if positions > self.config.context_length() {
            return Err(ModelError::ContextTooLong {
                len: positions,
                max: self.config.context_length(),
            });
        }
        let mut cache = self.new_cache();
        let mut out = Vec::with_capacity(n);
        let mut next_input = prompt.to_vec();
        for _ in 0..n {
            let logits = self.forward(&next_input, &mut cache, Output::Last)?;
            // The vocabulary is a GGUF array: its indices fit in u32.
            let next = u32::try_from(argmax(logits.row(0))).map_err(|e| ModelError::Compute {
                reason: e.to_string(),
            })?;
            out.push(next);
            next_input = vec![next];
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_of_equal_maxima() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, -5.0]), 1);
    }

    #[test]
    fn log_sum_exp_is_stable_for_large_logits() {
        let x = [1000.0_f32, 1000.0];
        assert!((log_sum_exp(&x) - (1000.0 + 2f64.ln())).abs() < 1e-9);
    }

    #[test]
    fn mask_lets_each_query_see_its_prefix_only() {
        let m = causal_mask(2, 2).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(m[0][..3], [0.0, 0.0, 0.0]);
        assert_eq!(m[0][3], f32::NEG_INFINITY);
        assert_eq!(m[1], [0.0; 4]);
    }

    /// Both layouts rotate the same pairs by the same angle once the
    /// elements are reordered, and a rotation keeps the vector's norm.
    #[test]
    fn rope_layouts_agree_up_to_the_pair_order() {
        let (t, hd) = (3, 8);
        let x: Vec<f32> = (0..t * hd).map(|i| (i as f32 * 0.37).sin()).collect();
        let inter = Tensor::from_vec(x.clone(), (t, 1, hd), &Device::Cpu).unwrap();
        // Interleaved pair (2i, 2i+1) is rotate-half pair (i, i + hd/2).
        let half_order: Vec<f32> = (0..t)
            .flat_map(|p| {
                let row = &x[p * hd..(p + 1) * hd];
                (0..hd / 2)
                    .map(|i| row[2 * i])
                    .chain((0..hd / 2).map(|i| row[2 * i + 1]))
                    .collect::<Vec<_>>()
            })
            .collect();
        let half = Tensor::from_vec(half_order, (t, 1, hd), &Device::Cpu).unwrap();
        let (cos, sin) = rope_tables(5, t, hd, 10_000.0).unwrap();
        let a = rope(&inter, &cos, &sin, RopeLayout::Interleaved).unwrap();
        let b = rope(&half, &cos, &sin, RopeLayout::RotateHalf).unwrap();
        let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for p in 0..t {
            for i in 0..hd / 2 {
                assert_eq!(a[p * hd + 2 * i], b[p * hd + i]);
                assert_eq!(a[p * hd + 2 * i + 1], b[p * hd + hd / 2 + i]);
            }
            let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>();
            let before = norm(&x[p * hd..(p + 1) * hd]);
            assert!((norm(&a[p * hd..(p + 1) * hd]) - before).abs() < 1e-5);
        }
        // Position 5 rotates: the output differs from the input.
        assert_ne!(a, x);
    }
}
