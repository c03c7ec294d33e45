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
use crate::rng::SplitMix64;

/// The model's sizes and parameter layout: the one configuration the CPU
/// model, the trainers and these kernels take (`kolm_model::Config`).
pub use kolm_model_config::{Config, EMBED, FINAL_NORM, PER_LAYER, ParamInfo, Rope, Shape, slot};

/// Checks that the kernels run `cfg`: besides what [`Config::new`] checks,
/// a head dimension of 64 or 128 (the attention kernels' sizes) and an
/// epsilon that stays positive in `f32`.
pub fn validate(cfg: &Config) -> Result<(), KernelError> {
    let bad = |what: String| Err(KernelError::Unsupported { op: "llama", what });
    if cfg.vocab() == 0 || cfg.d_model() == 0 || cfg.layers() == 0 || cfg.ffn() == 0 {
        return bad(format!("an empty dimension in {cfg:?}"));
    }
    if cfg.kv_heads() == 0 || !cfg.q_heads().is_multiple_of(cfg.kv_heads()) {
        return bad(format!(
            "{} query heads are not a multiple of {} kv heads",
            cfg.q_heads(),
            cfg.kv_heads()
        ));
    }
    if !matches!(cfg.head_dim(), 64 | 128) {
        return bad(format!("head dimension {} (64 or 128)", cfg.head_dim()));
    }
    if !(cfg.eps_f32() > 0.0 && cfg.rope().base > 1.0) {
        return bad(format!(
            "eps {} / rope base {}",
            cfg.eps_f32(),
            cfg.rope().base
        ));
    }
    Ok(())
}

/// Seeded initial weights in [`Config::params`] order: norms 1, matrices
/// uniform with standard deviation `std` (so the same seed gives the same
/// model everywhere).
pub fn init_params(cfg: &Config, seed: u64, std: f64) -> Vec<Vec<f32>> {
    let mut rng = SplitMix64::new(seed);
    let a = std * 3f64.sqrt();
    cfg.params()
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
