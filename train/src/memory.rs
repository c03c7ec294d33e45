//! The pre-flight memory gate: before a backend allocates anything, the
//! memory a run needs is estimated and compared with what is free, and a run
//! that cannot fit is refused with the numbers and the largest batch that
//! would fit, instead of failing halfway through allocating (or, on the
//! host, being killed by the OOM killer).
//!
//! GPU: [`estimate_gpu`] counts the allocations of
//! `kolm_kernels::llama::GpuLlama::new` / `new_frozen` through
//! `GpuLlama::planned_bytes` (written next to the allocating code, in the
//! kernels crate, so the two change together) and those of
//! `kolm_kernels::llama::GpuLora::new` through `GpuLora::planned_bytes`:
//!
//! - weights: working copy (2 bytes a parameter in bf16, 4 in f32) + `f32`
//!   masters (4);
//! - gradients: one per parameter in the compute type (LoRA still computes
//!   every `dW`, see `kolm_kernels::llama::GpuLora`);
//! - optimizer: AdamW's `f32` m and v (8 bytes a parameter; full fine-tune
//!   only), or for LoRA the adapters' masters, gradients, moments and AdamW
//!   copies (5 x 4 bytes an adapter parameter) plus one `f32` block per site
//!   shape;
//! - activations: per layer and token `3 d + 2 q + 2 kv + 3 ffn` values in
//!   the compute type and `2 + q_heads` `f32`, the per-layer scratch
//!   (`2 (q + 2 kv) + 2 d + 3 ffn + 2 q + 2 kv` values a token), `layers + 2`
//!   residual streams of `d`, the logits (`vocab` values a token) and the
//!   RoPE tables;
//! - per step: the uploaded batch, the optimiser's address tables and the
//!   largest scratch one op takes and frees (the attention backward's).
//!
//! The CUDA context, the loaded kernel modules, cuBLAS's handle and its
//! 32 MiB workspace and the persistent partial sums exist before the
//! estimate is checked (they are what opening the device costs), so the
//! free memory a [`kolm_kernels::Gpu`] reports already excludes them; they
//! are reported as [`Estimate::context`] ([`GPU_CONTEXT_BYTES`]) for a
//! reader comparing with a device's total memory, not added to the check.
//!
//! The check keeps a safety margin: the estimate plus [`MARGIN_FRACTION`]
//! of it plus [`MARGIN_BYTES`] must be free (allocator rounding, the pool's
//! fragmentation, the driver's own growth during the first launches).
//!
//! Host: [`estimate_host`] is a rough, documented estimate for the CPU
//! backend (candle, `f32`, autograd), not derived from its allocations; see
//! there.

use std::fmt;

use half::bf16;
use kolm_format::job_spec::Precision;
use kolm_kernels::llama::{GpuLlama, GpuLora, LlamaConfig, LoraSite};

use crate::TrainError;
use crate::lora::Layout;

/// What opening the device costs before any model exists: the CUDA context
/// with the kernel modules loaded, cuBLAS's handle and workspace, the
/// persistent partial sums. Measured as 660 MiB on an NVIDIA H200 with
/// driver 580.159.04 (CUDA 13.0), cuBLAS 13.1, NVRTC 13.0: total minus
/// free memory after `Gpu::new` and `warm_up` (train/tests/gpu.rs prints
/// it); reported, not checked (see the module header).
pub const GPU_CONTEXT_BYTES: u64 = 660 << 20;

/// Part of the estimate added as a safety margin.
pub const MARGIN_FRACTION: f64 = 0.05;

/// Bytes added as a safety margin on top of [`MARGIN_FRACTION`].
pub const MARGIN_BYTES: u64 = 256 << 20;

/// Which memory an estimate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Device memory of the GPU.
    Gpu,
    /// Host memory (the CPU backend).
    Host,
}

/// What a run needs, by kind, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// GPU or host.
    pub kind: MemoryKind,
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Weights: the working copy and the `f32` masters.
    pub weights: u64,
    /// Gradients of the weights.
    pub gradients: u64,
    /// Optimiser state: AdamW's moments, or the LoRA adapters with their
    /// gradients and moments.
    pub optimizer: u64,
    /// Activations kept for the backward, scratch and logits.
    pub activations: u64,
    /// The most one step allocates and frees again.
    pub per_step: u64,
    /// The device's fixed cost before the run, already outside the free
    /// memory a device reports (0 for the host); informational.
    pub context: u64,
}

impl Estimate {
    /// What the run allocates: everything but [`Self::context`].
    pub fn run_bytes(&self) -> u64 {
        self.weights + self.gradients + self.optimizer + self.activations + self.per_step
    }

    /// [`Self::run_bytes`] with the safety margin: what must be free.
    pub fn required_bytes(&self) -> u64 {
        let run = self.run_bytes();
        run.saturating_add((run as f64 * MARGIN_FRACTION) as u64)
            .saturating_add(MARGIN_BYTES)
    }

    /// Whether `free_bytes` hold [`Self::required_bytes`].
    pub fn fits(&self, free_bytes: u64) -> bool {
        self.required_bytes() <= free_bytes
    }
}

/// The pre-flight refused the run: the estimate, the free memory, and the
/// largest batch (at the same sequence length) that would fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct MemoryRefusal {
    /// What the run needs.
    pub estimate: Estimate,
    /// What was free.
    pub free_bytes: u64,
    /// The largest batch that fits at the same `seq`; `None` when not even
    /// one sequence does.
    pub largest_batch: Option<usize>,
}

/// `bytes` in GiB with one decimal.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl fmt::Display for MemoryRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.estimate;
        let what = match e.kind {
            MemoryKind::Gpu => "GPU memory",
            MemoryKind::Host => "host memory",
        };
        write!(
            f,
            "memory pre-flight: needs an estimated {} of {what} for batch {} x seq {} \
             (weights {}, gradients {}, optimizer {}, activations {}, step scratch {}; \
             {} with the safety margin), {} free; ",
            gib(e.run_bytes()),
            e.batch,
            e.seq,
            gib(e.weights),
            gib(e.gradients),
            gib(e.optimizer),
            gib(e.activations),
            gib(e.per_step),
            gib(e.required_bytes()),
            gib(self.free_bytes),
        )?;
        match self.largest_batch {
            Some(b) => write!(f, "the largest batch that fits is {b}"),
            None => write!(f, "not even batch 1 fits at seq {}", e.seq),
        }
    }
}

/// The kernels' description of a layout's sites.
pub(crate) fn lora_sites(layout: &Layout) -> Vec<LoraSite> {
    layout
        .sites
        .iter()
        .map(|s| LoraSite {
            param: s.param,
            row_offset: s.row_offset,
            rows: s.rows,
            cols: s.cols,
        })
        .collect()
}

/// What the GPU backend allocates for `[batch, seq]` (see the module
/// header). Refuses a configuration the model would refuse.
pub fn estimate_gpu(
    cfg: &LlamaConfig,
    batch: usize,
    seq: usize,
    lora: Option<&Layout>,
    precision: Precision,
) -> Result<Estimate, TrainError> {
    let moments = lora.is_none();
    let planned = match precision {
        Precision::Bf16 => GpuLlama::<bf16>::planned_bytes(cfg, batch, seq, moments)?,
        Precision::F32 => GpuLlama::<f32>::planned_bytes(cfg, batch, seq, moments)?,
    };
    let adapters = lora.map_or(0, |l| GpuLora::planned_bytes(&lora_sites(l), l.rank));
    Ok(Estimate {
        kind: MemoryKind::Gpu,
        batch,
        seq,
        weights: planned.weights,
        gradients: planned.grads,
        optimizer: planned.optimizer + adapters,
        activations: planned.activations,
        per_step: planned.per_step,
        context: GPU_CONTEXT_BYTES,
    })
}

/// A rough estimate of the CPU backend's host memory (candle, `f32`,
/// reverse-mode autograd that keeps every intermediate of the forward).
/// Not derived from its allocations: an estimate to refuse what plainly
/// cannot fit, with these terms, 4 bytes a value:
///
/// - weights: one value a parameter; full fine-tune adds a gradient and
///   two moments (3 more), LoRA adds 4 a trainable adapter value (value,
///   gradient, two moments) and the base has no gradient;
/// - activations: per layer and token `8 d + 3 q + 3 kv + 4 ffn` values
///   (the norms, projections before and after RoPE, SwiGLU's four, the
///   residuals) and `2 q_heads seq` for the attention scores and
///   probabilities (materialised on the CPU); per token `3 vocab` for the
///   logits, their log-softmax and its gradient; LoRA adds `2 rank` a site
///   and token (`x A^T` and its gradient);
/// - per step: the gradients flowing back through one layer, bounded by
///   one layer's activations.
pub fn estimate_host(
    cfg: &LlamaConfig,
    batch: usize,
    seq: usize,
    lora: Option<&Layout>,
) -> Result<Estimate, TrainError> {
    cfg.validate()?;
    let n = batch
        .checked_mul(seq)
        .filter(|&n| n > 0)
        .ok_or_else(|| TrainError::Invalid(format!("a [{batch}, {seq}] batch")))?
        as u64;
    let params = cfg.num_params() as u64;
    let (d, q, kv, ffn) = (
        cfg.d_model as u64,
        (cfg.q_heads * cfg.head_dim) as u64,
        (cfg.kv_heads * cfg.head_dim) as u64,
        cfg.ffn as u64,
    );
    let per_layer_token = 8 * d + 3 * q + 3 * kv + 4 * ffn + 2 * cfg.q_heads as u64 * seq as u64;
    let layer = 4 * n * per_layer_token;
    let (gradients, optimizer, adapter_acts) = match lora {
        None => (4 * params, 8 * params, 0),
        Some(l) => (
            0,
            16 * l.num_params() as u64,
            4 * n * 2 * l.rank as u64 * l.sites.len() as u64,
        ),
    };
    Ok(Estimate {
        kind: MemoryKind::Host,
        batch,
        seq,
        weights: 4 * params,
        gradients,
        optimizer,
        activations: cfg.layers as u64 * layer + 4 * n * 3 * cfg.vocab as u64 + adapter_acts,
        per_step: layer,
        context: 0,
    })
}

/// Refuses `estimate` when `free_bytes` cannot hold it with the margin;
/// `largest_batch` is what the refusal reports (see
/// [`largest_batch_that_fits`]).
pub fn check(
    estimate: &Estimate,
    free_bytes: u64,
    largest_batch: Option<usize>,
) -> Result<(), MemoryRefusal> {
    if estimate.fits(free_bytes) {
        Ok(())
    } else {
        Err(MemoryRefusal {
            estimate: *estimate,
            free_bytes,
            largest_batch,
        })
    }
}

/// The largest batch at `seq` whose estimate (from `estimate`, a function
/// of the batch such as `|b| estimate_gpu(cfg, b, seq, ..)`) fits
/// `free_bytes`; `None` when batch 1 does not. Estimates grow with the
/// batch, so this is a binary search (at most 2^30 sequences).
pub fn largest_batch_that_fits(
    free_bytes: u64,
    estimate: impl Fn(usize) -> Result<Estimate, TrainError>,
) -> Result<Option<usize>, TrainError> {
    let fits = |b: usize| estimate(b).map(|e| e.fits(free_bytes));
    if !fits(1)? {
        return Ok(None);
    }
    // fits(lo) holds, fits(hi) does not (or hi is past the cap).
    let (mut lo, mut hi) = (1usize, 2usize);
    while hi <= 1 << 30 && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// The GPU pre-flight in one call: the estimate for `[batch, seq]`, checked
/// against `free_bytes` (as `Gpu::memory_info` reports it), with the
/// largest batch that fits in the refusal.
pub fn preflight_gpu(
    cfg: &LlamaConfig,
    batch: usize,
    seq: usize,
    lora: Option<&Layout>,
    precision: Precision,
    free_bytes: u64,
) -> Result<Estimate, TrainError> {
    let estimate = estimate_gpu(cfg, batch, seq, lora, precision)?;
    if estimate.fits(free_bytes) {
        return Ok(estimate);
    }
    let largest =
        largest_batch_that_fits(free_bytes, |b| estimate_gpu(cfg, b, seq, lora, precision))?;
    Err(check(&estimate, free_bytes, largest).err().map_or_else(
        || TrainError::Invalid("memory pre-flight: inconsistent check".into()),
        TrainError::Memory,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lora::TARGETS;

    const GIB: u64 = 1 << 30;

    fn all_targets(cfg: &LlamaConfig, rank: usize) -> Layout {
        let t: Vec<String> = TARGETS.iter().map(|s| s.to_string()).collect();
        Layout::new(cfg, rank, 2.0 * rank as f64, &t).unwrap()
    }

    #[test]
    fn smollm2_full_bf16_terms() {
        let cfg = LlamaConfig::smollm2_135m();
        let e = estimate_gpu(&cfg, 16, 1024, None, Precision::Bf16).unwrap();
        let p = cfg.num_params() as u64;
        // 2 + 4 bytes of weights, 2 of gradient, 8 of moments a parameter
        // (plus one element for nothing: every tensor is non-empty).
        assert_eq!(e.weights, 6 * p);
        assert_eq!(e.gradients, 2 * p);
        assert_eq!(e.optimizer, 8 * p);
        // Activations dominate: per layer and token 7872 bf16 values and
        // 11 f32 = 15788 bytes, 30 layers, 16384 tokens.
        let n = 16 * 1024u64;
        let layers = 30 * n * 15788;
        let scratch = n * 2 * (2 * 960 + 2 * 576 + 1536 + 3072 + 2 * 576 + 2 * 192);
        let rest = 32 * n * 576 * 2 + n * 4 + n * 49152 * 2 + 3 * n * 4 + 2 * 1024 * 32 * 4;
        assert_eq!(e.activations, layers + scratch + rest);
        let total = e.run_bytes() as f64 / GIB as f64;
        assert!((11.0..12.5).contains(&total), "{total} GiB");
        assert_eq!(e.context, GPU_CONTEXT_BYTES);
    }

    #[test]
    fn lora_drops_moments_and_adds_adapter_state() {
        let cfg = LlamaConfig::smollm2_135m();
        let full = estimate_gpu(&cfg, 16, 1024, None, Precision::Bf16).unwrap();
        let layout = all_targets(&cfg, 16);
        let lora = estimate_gpu(&cfg, 16, 1024, Some(&layout), Precision::Bf16).unwrap();
        assert_eq!(lora.weights, full.weights);
        assert_eq!(lora.gradients, full.gradients);
        assert_eq!(lora.activations, full.activations);
        let adapter = layout.num_params() as u64;
        assert!(lora.optimizer >= 20 * adapter && lora.optimizer < 20 * adapter + (16 << 20));
        // f32 compute: 4 + 4 bytes of weights a parameter.
        let f32e = estimate_gpu(&cfg, 16, 1024, None, Precision::F32).unwrap();
        assert_eq!(f32e.weights, 8 * cfg.num_params() as u64);
    }

    #[test]
    fn refusal_names_estimate_free_memory_and_largest_batch() {
        let cfg = LlamaConfig::smollm2_135m();
        let free = 20 * GIB;
        let err = preflight_gpu(&cfg, 64, 1024, None, Precision::Bf16, free).unwrap_err();
        let TrainError::Memory(r) = &err else {
            panic!("{err}")
        };
        let largest = r.largest_batch.unwrap();
        // The largest batch fits, one more does not, and 64 did not.
        let at = |b| estimate_gpu(&cfg, b, 1024, None, Precision::Bf16).unwrap();
        assert!(at(largest).fits(free) && !at(largest + 1).fits(free));
        assert!((20..40).contains(&largest), "{largest}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("memory pre-flight: needs an estimated "),
            "{msg}"
        );
        for part in [
            "of GPU memory for batch 64 x seq 1024",
            "activations",
            "with the safety margin",
            "20.0 GiB free",
            &format!("the largest batch that fits is {largest}"),
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        // What fits passes.
        assert!(preflight_gpu(&cfg, largest, 1024, None, Precision::Bf16, free).is_ok());
    }

    #[test]
    fn nothing_fits_in_too_little_memory() {
        let cfg = LlamaConfig::smollm2_135m();
        let err = preflight_gpu(&cfg, 1, 1024, None, Precision::Bf16, GIB).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("not even batch 1 fits at seq 1024"), "{msg}");
        assert!(matches!(
            err,
            TrainError::Memory(MemoryRefusal {
                largest_batch: None,
                ..
            })
        ));
    }

    #[test]
    fn margin_is_applied() {
        let cfg = LlamaConfig::smollm2_135m();
        let e = estimate_gpu(&cfg, 4, 256, None, Precision::Bf16).unwrap();
        let need = e.run_bytes() + (e.run_bytes() as f64 * MARGIN_FRACTION) as u64 + MARGIN_BYTES;
        assert_eq!(e.required_bytes(), need);
        assert!(check(&e, need, None).is_ok());
        assert!(check(&e, need - 1, Some(3)).is_err());
        assert!(
            check(&e, e.run_bytes(), None).is_err(),
            "the margin is required"
        );
    }

    #[test]
    fn bad_shapes_are_refused_not_panicked() {
        let cfg = LlamaConfig::smollm2_135m();
        assert!(estimate_gpu(&cfg, 0, 1024, None, Precision::Bf16).is_err());
        assert!(estimate_host(&cfg, 4, 0, None).is_err());
        let bad = LlamaConfig {
            head_dim: 48,
            ..cfg
        };
        assert!(estimate_gpu(&bad, 1, 16, None, Precision::Bf16).is_err());
    }

    #[test]
    fn host_estimate_terms() {
        let cfg = LlamaConfig::smollm2_135m();
        let e = estimate_host(&cfg, 2, 128, None).unwrap();
        let p = cfg.num_params() as u64;
        assert_eq!((e.weights, e.gradients, e.optimizer), (4 * p, 4 * p, 8 * p));
        assert_eq!(e.kind, MemoryKind::Host);
        let layout = all_targets(&cfg, 8);
        let l = estimate_host(&cfg, 2, 128, Some(&layout)).unwrap();
        assert_eq!(l.gradients, 0);
        assert_eq!(l.optimizer, 16 * layout.num_params() as u64);
        assert!(l.activations > e.activations);
        let r = check(&e, GIB / 2, Some(1)).unwrap_err().to_string();
        assert!(r.contains("of host memory for batch 2 x seq 128"), "{r}");
    }
}
