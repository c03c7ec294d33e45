//! The training step on the GPU: forward, backward, gradient clipping and
//! AdamW, every launch on the device's one stream.
//!
//! Determinism: each kernel gives the same bits on every run (see the crate
//! documentation) and this module launches them in a fixed order with fixed
//! shapes, so a step from the same weights and tokens repeats bit for bit.
//! Weights are kept twice: `f32` masters that AdamW updates, and the working
//! copy in `T` that the forward and backward read (AdamW writes both in one
//! pass). Gradients are in `T`.

use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::CudaEvent;
use cudarc::driver::sys::CUevent_flags;

use super::{Config, EMBED, FINAL_NORM, slot, validate};
use crate::cpu::{AdamWConfig, RopeTable};
use crate::ops::{
    self, AdamWParam, ClipFactor, CrossEntropyOut, EmbeddingPlan, RopeTables, matmul,
};
use crate::{Dtype, Gpu, KernelError, Tensor};

/// One step's tokens on the device.
#[derive(Debug)]
pub struct TrainBatch {
    batch: usize,
    seq: usize,
    plan: EmbeddingPlan,
    targets: Tensor<i32>,
    valid: usize,
}

impl TrainBatch {
    /// `ids` and `targets` are `[batch, seq]` row-major; a negative target
    /// is ignored by the loss. Fails on an id or target outside the
    /// vocabulary.
    pub fn new(
        gpu: &Gpu,
        vocab: usize,
        batch: usize,
        seq: usize,
        ids: &[u32],
        targets: &[i32],
    ) -> Result<Self, KernelError> {
        let n = tokens("TrainBatch::new", batch, seq)?;
        for len in [ids.len(), targets.len()] {
            if len != n {
                return Err(KernelError::HostLength {
                    op: "TrainBatch::new (ids and targets are [batch, seq])",
                    shape: vec![batch, seq],
                    expected: n,
                    got: len,
                });
            }
        }
        if let Some(&t) = targets.iter().find(|&&t| t >= 0 && t as usize >= vocab) {
            return Err(KernelError::Unsupported {
                op: "TrainBatch::new",
                what: format!("target {t} outside the vocabulary of {vocab}"),
            });
        }
        Ok(Self {
            batch,
            seq,
            plan: EmbeddingPlan::new(gpu, ids, vocab)?,
            targets: Tensor::from_host(gpu, targets, &[n])?,
            valid: targets.iter().filter(|&&t| t >= 0).count(),
        })
    }
}

/// `batch * seq`, refusing an empty or overflowing shape.
fn tokens(op: &'static str, batch: usize, seq: usize) -> Result<usize, KernelError> {
    match batch.checked_mul(seq) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(KernelError::Unsupported {
            op,
            what: format!(
                "a [{batch}, {seq}] batch (needs at least one token, and batch * seq must fit)"
            ),
        }),
    }
}

/// Elements per block of the multi-tensor optimiser kernels (ops/optim.rs).
const MT_CHUNK: usize = 32768;

/// Device memory a [`GpuLlama`] holds, by kind, in bytes; see
/// [`GpuLlama::planned_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlannedBytes {
    /// The working copy in `T` and the `f32` masters.
    pub weights: u64,
    /// The gradients, in `T`.
    pub grads: u64,
    /// AdamW's two `f32` moments (0 for a frozen model).
    pub optimizer: u64,
    /// What the backward reads, the per-layer scratch, the logits, the RoPE
    /// tables.
    pub activations: u64,
    /// The most one step allocates and frees again (the batch, optimiser
    /// tables, an op's scratch).
    pub per_step: u64,
}

impl PlannedBytes {
    /// Everything.
    pub fn total(&self) -> u64 {
        self.weights + self.grads + self.optimizer + self.activations + self.per_step
    }
}

/// A model's weights, masters and gradients borrowed at once.
pub(super) struct Parts<'a, T: Dtype> {
    pub(super) weights: &'a mut [Tensor<T>],
    pub(super) master: &'a [Tensor<f32>],
    pub(super) grads: &'a [Tensor<T>],
}

/// Optimiser settings (AdamW with global gradient-norm clipping).
#[derive(Debug, Clone, Copy)]
pub struct Optimizer {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay (applied to every parameter).
    pub weight_decay: f64,
    /// Global gradient-norm clip.
    pub max_grad_norm: f32,
}

/// CUDA events between the ops of a step, when profiling: each event ends
/// the op named with it.
#[derive(Debug, Default)]
struct Marks {
    on: bool,
    events: Vec<(&'static str, CudaEvent)>,
}

impl Marks {
    fn mark(&mut self, gpu: &Gpu, label: &'static str) -> Result<(), KernelError> {
        if self.on {
            let event = gpu
                .context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(KernelError::driver("creating a profiling event"))?;
            event
                .record(gpu.stream())
                .map_err(KernelError::driver("recording a profiling event"))?;
            self.events.push((label, event));
        }
        Ok(())
    }
}

/// What one layer's backward reads.
#[derive(Debug)]
struct Layer<T: Dtype> {
    h: Tensor<T>,
    r1: Tensor<f32>,
    q: Tensor<T>,
    k: Tensor<T>,
    v: Tensor<T>,
    o: Tensor<T>,
    lse: Tensor<f32>,
    x1: Tensor<T>,
    h2: Tensor<T>,
    r2: Tensor<f32>,
    /// The fused gate/up projection `[tokens, 2 ffn]`.
    gu: Tensor<T>,
    act: Tensor<T>,
}

/// Buffers reused by every layer.
#[derive(Debug)]
struct Scratch<T: Dtype> {
    /// The fused q/k/v projection `[tokens, q + 2 kv]` before RoPE.
    qkv: Tensor<T>,
    dx: Tensor<T>,
    dh: Tensor<T>,
    dact: Tensor<T>,
    dgu: Tensor<T>,
    dout: Tensor<T>,
    dq_rot: Tensor<T>,
    dk_rot: Tensor<T>,
    dv: Tensor<T>,
    dqkv: Tensor<T>,
}

/// A Llama model on the GPU with its optimiser state and the activation
/// buffers of one `[batch, seq]` shape.
#[derive(Debug)]
pub struct GpuLlama<T: Dtype> {
    cfg: Config,
    batch: usize,
    seq: usize,
    weights: Vec<Tensor<T>>,
    master: Vec<Tensor<f32>>,
    grads: Vec<Tensor<T>>,
    m: Vec<Tensor<f32>>,
    v: Vec<Tensor<f32>>,
    step: u32,
    rope: RopeTables,
    xs: Vec<Tensor<T>>,
    layers: Vec<Layer<T>>,
    hf: Tensor<T>,
    rf: Tensor<f32>,
    logits: Tensor<T>,
    xent: CrossEntropyOut,
    scratch: Scratch<T>,
    valid: usize,
    clip: Option<ClipFactor>,
    marks: Marks,
}

impl<T: Dtype> GpuLlama<T>
where
    CudaBlas: Gemm<T>,
{
    /// Uploads `params` (in [`Config::params`] order) and allocates
    /// every buffer a step of `[batch, seq]` tokens needs.
    /// [`Self::planned_bytes`] counts these allocations.
    pub fn new(
        gpu: &Gpu,
        cfg: Config,
        params: &[Vec<f32>],
        batch: usize,
        seq: usize,
    ) -> Result<Self, KernelError> {
        Self::build(gpu, cfg, params, batch, seq, true)
    }

    /// [`Self::new`] for a frozen base model (a LoRA run, see
    /// [`super::GpuLora`]): no AdamW moments (8 bytes a parameter less);
    /// [`Self::optimizer_step`] refuses. Gradients are still computed in
    /// full by [`Self::forward_backward`] (the adapters' are made from them).
    pub fn new_frozen(
        gpu: &Gpu,
        cfg: Config,
        params: &[Vec<f32>],
        batch: usize,
        seq: usize,
    ) -> Result<Self, KernelError> {
        Self::build(gpu, cfg, params, batch, seq, false)
    }

    /// Device bytes [`Self::new`] (`moments`) or [`Self::new_frozen`]
    /// allocates for `[batch, seq]`, and the most a step allocates on top
    /// and frees again. Counted from the same shapes as `build` below: a
    /// change there must change this (tests/llama.rs measures both).
    pub fn planned_bytes(
        cfg: &Config,
        batch: usize,
        seq: usize,
        moments: bool,
    ) -> Result<PlannedBytes, KernelError> {
        validate(cfg)?;
        let n = tokens("GpuLlama::planned_bytes", batch, seq)?;
        let t = std::mem::size_of::<T>() as u64;
        let bytes = |numel: usize, size: u64| numel.max(1) as u64 * size;
        let infos = cfg.params();
        let (mut weights, mut grads, mut optimizer) = (0, 0, 0);
        for info in &infos {
            let numel: usize = info.shape.iter().product();
            weights += bytes(numel, t) + bytes(numel, 4); // working + master
            grads += bytes(numel, t);
            if moments {
                optimizer += 2 * bytes(numel, 4);
            }
        }
        let (d, hd) = (cfg.d_model(), cfg.head_dim());
        let (qd, kvd) = (cfg.q_heads() * hd, cfg.kv_heads() * hd);
        let qkv = qd + 2 * kvd;
        // One layer's `Layer`: h, q, k, v, o, x1, h2, gu, act in T; r1, r2,
        // lse in f32.
        let layer = bytes(n * d, t) * 3
            + bytes(n * qd, t) * 2
            + bytes(n * kvd, t) * 2
            + bytes(n * 2 * cfg.ffn(), t)
            + bytes(n * cfg.ffn(), t)
            + bytes(n, 4) * 2
            + bytes(batch * cfg.q_heads() * seq, 4);
        // `Scratch`: qkv, dqkv, dx, dh, dact, dgu, dout, dq_rot, dk_rot, dv.
        let scratch = bytes(n * qkv, t) * 2
            + bytes(n * d, t) * 2
            + bytes(n * cfg.ffn(), t)
            + bytes(n * 2 * cfg.ffn(), t)
            + bytes(n * qd, t) * 2
            + bytes(n * kvd, t) * 2;
        // xs (layers + 1 residual streams), hf, rf, logits, the loss
        // outputs (loss, lse, argmax: 4 bytes a row), the RoPE tables.
        let activations = cfg.layers() as u64 * layer
            + scratch
            + (cfg.layers() as u64 + 2) * bytes(n * d, t) // xs and hf
            + bytes(n, 4)
            + bytes(n * cfg.vocab(), t)
            + 3 * bytes(n, 4)
            + 2 * bytes(seq * hd / 2, 4);
        // Per step: the uploaded batch (ids, positions, targets, the
        // vocabulary's offsets), the clip and AdamW address tables, and
        // the largest scratch an op takes and frees (the attention
        // backward's dq sum, delta and parts, bounded by q heads x (head
        // dim + 1 + 128) f32 a token; the RMSNorm backward's branch and
        // partial sums, bounded by d x (T + f32) a token).
        let chunks: usize = infos
            .iter()
            .map(|i| i.shape.iter().product::<usize>().div_ceil(MT_CHUNK))
            .sum();
        let tables = 2 * (bytes(infos.len() * 6, 8) + bytes(chunks * 2, 4)) + bytes(chunks, 8) + 8;
        let batch_upload = 3 * bytes(n, 4) + bytes(cfg.vocab() + 1, 4);
        let op_scratch = bytes(n * cfg.q_heads() * (hd + 1 + 128), 4).max(bytes(n * d, t + 4));
        Ok(PlannedBytes {
            weights,
            grads,
            optimizer,
            activations,
            per_step: batch_upload + tables + op_scratch,
        })
    }

    fn build(
        gpu: &Gpu,
        cfg: Config,
        params: &[Vec<f32>],
        batch: usize,
        seq: usize,
        moments: bool,
    ) -> Result<Self, KernelError> {
        validate(&cfg)?;
        let infos = cfg.params();
        if params.len() != infos.len() {
            return Err(KernelError::Unsupported {
                op: "GpuLlama::new",
                what: format!(
                    "{} parameter tensors, expected {}",
                    params.len(),
                    infos.len()
                ),
            });
        }
        let (mut weights, mut master, mut grads, mut m, mut v) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (p, info) in params.iter().zip(&infos) {
            let working: Vec<T> = p.iter().map(|&x| T::from_f64(f64::from(x))).collect();
            weights.push(Tensor::from_host(gpu, &working, &info.shape)?);
            master.push(Tensor::from_host(gpu, p, &info.shape)?);
            grads.push(Tensor::zeros(gpu, &info.shape)?);
            if moments {
                m.push(Tensor::zeros(gpu, &info.shape)?);
                v.push(Tensor::zeros(gpu, &info.shape)?);
            }
        }
        let n = tokens("GpuLlama::new", batch, seq)?;
        let (d, hd) = (cfg.d_model(), cfg.head_dim());
        let qs = [batch, seq, cfg.q_heads(), hd];
        let kvs = [batch, seq, cfg.kv_heads(), hd];
        let z = |shape: &[usize]| Tensor::<T>::zeros(gpu, shape);
        let zf = |shape: &[usize]| Tensor::<f32>::zeros(gpu, shape);
        let mut layers = Vec::with_capacity(cfg.layers());
        for _ in 0..cfg.layers() {
            layers.push(Layer {
                h: z(&[n, d])?,
                r1: zf(&[n])?,
                q: z(&qs)?,
                k: z(&kvs)?,
                v: z(&kvs)?,
                o: z(&qs)?,
                lse: zf(&[batch, cfg.q_heads(), seq])?,
                x1: z(&[n, d])?,
                h2: z(&[n, d])?,
                r2: zf(&[n])?,
                gu: z(&[n, 2 * cfg.ffn()])?,
                act: z(&[n, cfg.ffn()])?,
            });
        }
        let qkv_width = (cfg.q_heads() + 2 * cfg.kv_heads()) * hd;
        let scratch = Scratch {
            qkv: z(&[n, qkv_width])?,
            dx: z(&[n, d])?,
            dh: z(&[n, d])?,
            dact: z(&[n, cfg.ffn()])?,
            dgu: z(&[n, 2 * cfg.ffn()])?,
            dout: z(&qs)?,
            dq_rot: z(&qs)?,
            dk_rot: z(&kvs)?,
            dv: z(&kvs)?,
            dqkv: z(&[n, qkv_width])?,
        };
        Ok(Self {
            rope: RopeTables::new(gpu, &RopeTable::new(seq, hd, cfg.rope().base))?,
            xs: (0..=cfg.layers())
                .map(|_| z(&[n, d]))
                .collect::<Result<_, _>>()?,
            layers,
            hf: z(&[n, d])?,
            rf: zf(&[n])?,
            logits: z(&[n, cfg.vocab()])?,
            xent: CrossEntropyOut::zeros(gpu, n)?,
            scratch,
            cfg,
            batch,
            seq,
            weights,
            master,
            grads,
            m,
            v,
            step: 0,
            valid: 0,
            clip: None,
            marks: Marks::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The working weights, in [`Config::params`] order.
    pub fn weights(&self) -> &[Tensor<T>] {
        &self.weights
    }

    /// The `f32` master weights.
    pub fn master(&self) -> &[Tensor<f32>] {
        &self.master
    }

    /// The gradients of the last [`Self::forward_backward`].
    pub fn grads(&self) -> &[Tensor<T>] {
        &self.grads
    }

    /// Optimiser steps taken.
    pub fn steps(&self) -> u32 {
        self.step
    }

    /// AdamW's moments `(m, v)` per parameter (empty for a frozen model).
    pub fn moments(&self) -> (&[Tensor<f32>], &[Tensor<f32>]) {
        (&self.m, &self.v)
    }

    /// Replaces the master weights, the working copy (the masters rounded
    /// to `T`), AdamW's moments and the step count, to resume a run; every
    /// tensor in [`Config::params`] order and shape. A frozen model
    /// takes empty `m` and `v`.
    pub fn load_state(
        &mut self,
        gpu: &Gpu,
        master: &[Vec<f32>],
        m: &[Vec<f32>],
        v: &[Vec<f32>],
        step: u32,
    ) -> Result<(), KernelError> {
        const OP: &str = "GpuLlama::load_state";
        let moments = self.m.len();
        for (what, got, want) in [
            ("master weights", master.len(), self.master.len()),
            ("first moments", m.len(), moments),
            ("second moments", v.len(), moments),
        ] {
            if got != want {
                return Err(KernelError::Unsupported {
                    op: OP,
                    what: format!("{got} {what} for {want} tensors"),
                });
            }
        }
        for (i, p) in master.iter().enumerate() {
            self.master[i].copy_from_host(gpu, p)?;
            let working: Vec<T> = p.iter().map(|&x| T::from_f64(f64::from(x))).collect();
            self.weights[i].copy_from_host(gpu, &working)?;
        }
        for (i, (mi, vi)) in m.iter().zip(v).enumerate() {
            self.m[i].copy_from_host(gpu, mi)?;
            self.v[i].copy_from_host(gpu, vi)?;
        }
        self.step = step;
        Ok(())
    }

    /// The working weights, masters and gradients at once, for the LoRA
    /// update (which writes the working rows of its sites).
    pub(super) fn parts_mut(&mut self) -> Parts<'_, T> {
        Parts {
            weights: &mut self.weights,
            master: &self.master,
            grads: &self.grads,
        }
    }

    /// Forward and backward over `batch`: fills every gradient (the loss is
    /// the mean cross-entropy over the batch's valid targets).
    pub fn forward_backward(&mut self, gpu: &Gpu, batch: &TrainBatch) -> Result<(), KernelError> {
        if (batch.batch, batch.seq) != (self.batch, self.seq) {
            return Err(KernelError::Unsupported {
                op: "GpuLlama::forward_backward",
                what: format!(
                    "a [{}, {}] batch for buffers of [{}, {}]",
                    batch.batch, batch.seq, self.batch, self.seq
                ),
            });
        }
        self.valid = batch.valid;
        let Self {
            cfg,
            weights,
            grads,
            rope,
            xs,
            layers,
            hf,
            rf,
            logits,
            xent,
            scratch: s,
            marks,
            ..
        } = self;
        marks.mark(gpu, "start")?;
        let (eps, layout) = (cfg.eps_f32(), cfg.rope().layout);

        // Forward.
        ops::embedding_fwd(gpu, &weights[EMBED], &batch.plan, &mut xs[0])?;
        marks.mark(gpu, "embedding_fwd")?;
        for (l, ly) in layers.iter_mut().enumerate() {
            let w = &weights[Config::layer_base(l)..][..super::PER_LAYER];
            let (done, rest) = xs.split_at_mut(l + 1);
            let (x, next) = (&done[l], &mut rest[0]);
            // x1 = x + o Wo^T: the residual add rides on the Wo product's
            // beta, so x1 starts as a copy of x, written by the norm that
            // reads x anyway.
            ops::rmsnorm_fwd_and_copy(
                gpu,
                x,
                &w[slot::ATTN_NORM],
                eps,
                &mut ly.h,
                &mut ly.r1,
                &mut ly.x1,
            )?;
            marks.mark(gpu, "rmsnorm_fwd_and_copy")?;
            matmul(
                gpu,
                &ly.h,
                false,
                &w[slot::WQKV],
                true,
                &mut s.qkv,
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_qkv_fwd")?;
            ops::rope_qkv_split(gpu, &s.qkv, rope, layout, &mut ly.q, &mut ly.k, &mut ly.v)?;
            marks.mark(gpu, "rope_qkv_split")?;
            ops::attention_fwd(gpu, &ly.q, &ly.k, &ly.v, &mut ly.o, &mut ly.lse)?;
            marks.mark(gpu, "attention_fwd")?;
            matmul(gpu, &ly.o, false, &w[slot::WO], true, &mut ly.x1, 1.0, 1.0)?;
            marks.mark(gpu, "matmul_wo_fwd")?;
            // next = x1 + act Wdown^T, the same way.
            ops::rmsnorm_fwd_and_copy(
                gpu,
                &ly.x1,
                &w[slot::MLP_NORM],
                eps,
                &mut ly.h2,
                &mut ly.r2,
                next,
            )?;
            marks.mark(gpu, "rmsnorm_fwd_and_copy")?;
            matmul(
                gpu,
                &ly.h2,
                false,
                &w[slot::GATE_UP],
                true,
                &mut ly.gu,
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_gate_up_fwd")?;
            ops::swiglu_fused_fwd(gpu, &ly.gu, &mut ly.act)?;
            marks.mark(gpu, "swiglu_fwd")?;
            matmul(gpu, &ly.act, false, &w[slot::DOWN], true, next, 1.0, 1.0)?;
            marks.mark(gpu, "matmul_down_fwd")?;
        }
        let last = &xs[cfg.layers()];
        ops::rmsnorm_fwd(gpu, last, &weights[FINAL_NORM], eps, hf, rf)?;
        marks.mark(gpu, "rmsnorm_fwd_final")?;
        matmul(gpu, hf, false, &weights[EMBED], true, logits, 1.0, 0.0)?;
        marks.mark(gpu, "matmul_lm_head_fwd")?;
        // The mean over valid targets; all-ignored batches give zero
        // gradients rather than a division by zero.
        let scale = 1.0 / batch.valid.max(1) as f32;
        ops::cross_entropy_fwd_grad_inplace(gpu, logits, &batch.targets, xent, scale)?;
        marks.mark(gpu, "cross_entropy_fwd_grad_inplace")?;

        // Backward; `logits` now holds d loss / d logits.
        matmul(
            gpu,
            logits,
            false,
            &weights[EMBED],
            false,
            &mut s.dh,
            1.0,
            0.0,
        )?;
        marks.mark(gpu, "matmul_lm_head_dx")?;
        let (gf, _) = grads.split_at_mut(FINAL_NORM + 1);
        ops::rmsnorm_bwd(
            gpu,
            &s.dh,
            last,
            &weights[FINAL_NORM],
            rf,
            &mut s.dx,
            &mut gf[FINAL_NORM],
            false,
        )?;
        marks.mark(gpu, "rmsnorm_bwd_final")?;
        for (l, ly) in layers.iter().enumerate().rev() {
            let base = Config::layer_base(l);
            let w = &weights[base..][..super::PER_LAYER];
            let g = &mut grads[base..][..super::PER_LAYER];
            // MLP: dx is d loss / d (layer output).
            matmul(
                gpu,
                &s.dx,
                false,
                &w[slot::DOWN],
                false,
                &mut s.dact,
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_down_dx")?;
            matmul(
                gpu,
                &s.dx,
                true,
                &ly.act,
                false,
                &mut g[slot::DOWN],
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_down_dw")?;
            ops::swiglu_fused_bwd(gpu, &s.dact, &ly.gu, &mut s.dgu)?;
            marks.mark(gpu, "swiglu_bwd")?;
            matmul(
                gpu,
                &s.dgu,
                false,
                &w[slot::GATE_UP],
                false,
                &mut s.dh,
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_gate_up_dx")?;
            matmul(
                gpu,
                &s.dgu,
                true,
                &ly.h2,
                false,
                &mut g[slot::GATE_UP],
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_gate_up_dw")?;
            // The branch's gradient added into the residual stream's.
            ops::rmsnorm_bwd_add(
                gpu,
                &s.dh,
                &ly.x1,
                &w[slot::MLP_NORM],
                &ly.r2,
                &mut s.dx,
                &mut g[slot::MLP_NORM],
                false,
            )?;
            marks.mark(gpu, "rmsnorm_bwd_add")?;
            // Attention: dx is now d loss / d x1.
            matmul(
                gpu,
                &s.dx,
                false,
                &w[slot::WO],
                false,
                &mut s.dout,
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_wo_dx")?;
            matmul(gpu, &s.dx, true, &ly.o, false, &mut g[slot::WO], 1.0, 0.0)?;
            marks.mark(gpu, "matmul_wo_dw")?;
            ops::attention_bwd(
                gpu,
                &s.dout,
                &ly.q,
                &ly.k,
                &ly.v,
                &ly.o,
                &ly.lse,
                &mut s.dq_rot,
                &mut s.dk_rot,
                &mut s.dv,
            )?;
            marks.mark(gpu, "attention_bwd")?;
            // Back into one [tokens, q + 2 kv] gradient for the fused products.
            ops::rope_qkv_merge(gpu, &s.dq_rot, &s.dk_rot, &s.dv, rope, layout, &mut s.dqkv)?;
            marks.mark(gpu, "rope_qkv_merge")?;
            matmul(
                gpu,
                &s.dqkv,
                false,
                &w[slot::WQKV],
                false,
                &mut s.dh,
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_qkv_dx")?;
            matmul(
                gpu,
                &s.dqkv,
                true,
                &ly.h,
                false,
                &mut g[slot::WQKV],
                1.0,
                0.0,
            )?;
            marks.mark(gpu, "matmul_qkv_dw")?;
            ops::rmsnorm_bwd_add(
                gpu,
                &s.dh,
                &xs[l],
                &w[slot::ATTN_NORM],
                &ly.r1,
                &mut s.dx,
                &mut g[slot::ATTN_NORM],
                false,
            )?;
            marks.mark(gpu, "rmsnorm_bwd_add")?;
        }
        // The tied table: the embedding's gradient, then the lm-head's added.
        ops::embedding_bwd(gpu, &s.dx, &batch.plan, &mut grads[EMBED], false)?;
        marks.mark(gpu, "embedding_bwd")?;
        matmul(gpu, logits, true, hf, false, &mut grads[EMBED], 1.0, 1.0)?;
        marks.mark(gpu, "matmul_lm_head_dw")
    }

    /// Clips the gradients to `opt.max_grad_norm` (global L2 norm) and takes
    /// one AdamW step on every parameter, refreshing the working copy.
    pub fn optimizer_step(&mut self, gpu: &Gpu, opt: &Optimizer) -> Result<(), KernelError> {
        if self.m.len() != self.grads.len() {
            return Err(KernelError::Unsupported {
                op: "GpuLlama::optimizer_step",
                what: "a frozen model (GpuLlama::new_frozen) has no optimiser state".to_owned(),
            });
        }
        self.step += 1;
        // Two launches each for the norm and AdamW over all the tensors
        // (per-tensor launches cost more than the arithmetic at this size).
        let refs: Vec<&Tensor<T>> = self.grads.iter().collect();
        let clip = ops::clip_grad_norm_multi(gpu, &refs, opt.max_grad_norm)?;
        let config = AdamWConfig {
            lr: opt.lr,
            beta1: opt.beta1,
            beta2: opt.beta2,
            eps: opt.eps,
            weight_decay: opt.weight_decay,
            step: self.step,
        };
        let mut params: Vec<AdamWParam<'_, T>> = self
            .master
            .iter_mut()
            .zip(&self.grads)
            .zip(self.m.iter_mut().zip(self.v.iter_mut()))
            .zip(self.weights.iter_mut())
            .map(|(((master, grad), (m, v)), working)| AdamWParam {
                master,
                grad,
                m,
                v,
                working,
            })
            .collect();
        ops::adamw_multi(gpu, &mut params, &config, &clip.scale)?;
        self.clip = Some(clip);
        Ok(())
    }

    /// One training step: [`Self::forward_backward`] then
    /// [`Self::optimizer_step`].
    pub fn train_step(
        &mut self,
        gpu: &Gpu,
        batch: &TrainBatch,
        opt: &Optimizer,
    ) -> Result<(), KernelError> {
        self.forward_backward(gpu, batch)?;
        self.optimizer_step(gpu, opt)
    }

    /// One training step with a CUDA event after every op: milliseconds per
    /// op kind (summed over the layers), largest first, and the number of
    /// launches of each. Events between ops cost a little time, so the sum
    /// is slightly above an unprofiled step.
    pub fn profile_step(
        &mut self,
        gpu: &Gpu,
        batch: &TrainBatch,
        opt: &Optimizer,
    ) -> Result<Vec<(&'static str, f64, usize)>, KernelError> {
        self.marks.on = true;
        let run = self.forward_backward(gpu, batch).and_then(|()| {
            self.optimizer_step(gpu, opt)?;
            self.marks.mark(gpu, "clip_and_adamw")
        });
        self.marks.on = false;
        let events = std::mem::take(&mut self.marks.events);
        run?;
        gpu.synchronize()?;
        let mut totals: Vec<(&'static str, f64, usize)> = Vec::new();
        for pair in events.windows(2) {
            let ms = f64::from(
                pair[0]
                    .1
                    .elapsed_ms(&pair[1].1)
                    .map_err(KernelError::driver("reading a profiling event"))?,
            );
            match totals.iter_mut().find(|t| t.0 == pair[1].0) {
                Some(t) => {
                    t.1 += ms;
                    t.2 += 1;
                }
                None => totals.push((pair[1].0, ms, 1)),
            }
        }
        totals.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(totals)
    }

    /// The last forward's mean loss (waits for the GPU; sums the rows on the
    /// host in `f64`, in row order).
    pub fn last_loss(&self, gpu: &Gpu) -> Result<f64, KernelError> {
        let rows = self.xent.loss.to_host(gpu)?;
        let sum: f64 = rows.iter().map(|&l| f64::from(l)).sum();
        Ok(sum / self.valid.max(1) as f64)
    }

    /// The gradient norm before clipping of the last optimiser step.
    pub fn last_grad_norm(&self, gpu: &Gpu) -> Result<Option<f32>, KernelError> {
        match &self.clip {
            Some(c) => Ok(Some(c.norm.to_host(gpu)?[0])),
            None => Ok(None),
        }
    }

    /// The last forward's argmax per position (greedy next-token guesses).
    pub fn last_argmax(&self, gpu: &Gpu) -> Result<Vec<i32>, KernelError> {
        self.xent.argmax.to_host(gpu)
    }
}
