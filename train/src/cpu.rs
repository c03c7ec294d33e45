//! The CPU backend: the kernels' Llama architecture in candle's CPU `f32`
//! tensors, gradients from candle's autograd, then global-norm clipping and
//! AdamW on `f32` master weights held in plain host vectors.
//!
//! The forward is the one `kolm_kernels::cpu::llama::loss_and_grads`
//! specifies (and `model/src/forward.rs` runs for inference): tied
//! embedding, RMSNorm with `cfg.eps`, the stacked `wqkv` split into q/k/v,
//! RoPE in `cfg.rope_layout` with `kolm_kernels::cpu::RopeTable`'s tables
//! (built in `f64`, rounded once), grouped-query causal attention scaled by
//! `1/sqrt(head_dim)`, SwiGLU `down(silu(gate) * up)`, a final RMSNorm and
//! the lm head `embed^T`; the loss is the mean cross-entropy over scored
//! targets, through a max-subtracted log-softmax.
//!
//! LoRA builds each adapted matrix's effective value every step,
//! `W + (alpha/rank) B A` on the site's rows (the base rows are constants,
//! `A` and `B` are the only variables), and runs the same forward on it:
//! one code path for both methods, and the merged weights
//! ([`Backend::merged_params`]) are exactly what was trained (up to the
//! `f64` rounding of `Layout::merge_into`).
//!
//! Clipping and AdamW follow `kolm_kernels::cpu::optim` (and the GPU's
//! `adamw_multi`) step for step: the squared gradient norm is summed in
//! `f64` in a fixed tensor order, the clip factor is rounded to `f32`, and
//! each element gets the kernel's `f32` arithmetic in the kernel's order.
//!
//! Determinism: candle's CPU matmul is `gemm`, which splits the output
//! (never the reduction) across threads, so its bits do not depend on the
//! thread count or scheduling; every other op here is a sequential loop.
//! `same_run_gives_the_same_bits` checks it.

use candle_core::{D, DType, Device, Tensor, Var};
use kolm_format::checkpoint;
use kolm_kernels::cpu::{AdamWConfig, RopeLayout, RopeTable, clip_scale};
use kolm_kernels::llama::{EMBED, FINAL_NORM, LlamaConfig, slot};

use crate::lora::Layout;
use crate::{ADAM_EPS, BETA1, BETA2, Backend, Batch, StepConfig, StepStats, TrainError};

/// One trained tensor with its AdamW moments.
#[derive(Debug, Clone)]
struct Trained {
    /// Checkpoint group: `param`, `lora_a` or `lora_b`.
    group: &'static str,
    /// Name in that group (a `ParamInfo` name or a LoRA site name).
    name: String,
    /// Name of its moments in `adam_m` / `adam_v`.
    moment_name: String,
    shape: Vec<usize>,
    w: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

impl Trained {
    fn new(
        group: &'static str,
        name: String,
        moment_name: String,
        shape: Vec<usize>,
        w: Vec<f32>,
    ) -> Self {
        let n = w.len();
        Trained {
            group,
            name,
            moment_name,
            shape,
            w,
            m: vec![0.0; n],
            v: vec![0.0; n],
        }
    }
}

/// A CPU trainer of one model (see the module docs).
#[derive(Debug)]
pub struct CpuBackend {
    cfg: LlamaConfig,
    /// LoRA: the layout and the frozen base weights (host copy for merging,
    /// constant tensors for the forward).
    lora: Option<LoraBase>,
    /// Full: every parameter in `LlamaConfig::params` order. LoRA: `A` then
    /// `B` of each site, in site order. This is also the order of the
    /// gradient norm's sum.
    trained: Vec<Trained>,
    steps: u64,
}

#[derive(Debug)]
struct LoraBase {
    layout: Layout,
    params: Vec<Vec<f32>>,
    tensors: Vec<Tensor>,
}

fn invalid(msg: String) -> TrainError {
    TrainError::Invalid(msg)
}

impl CpuBackend {
    /// A trainer of `cfg` starting from `params` (in `LlamaConfig::params`
    /// order and shapes): a full fine-tune, or LoRA with `method`'s layout,
    /// its adapters initialised from `seed` (`Layout::init`).
    pub fn new(
        cfg: LlamaConfig,
        params: Vec<Vec<f32>>,
        method: Option<Layout>,
        seed: u64,
    ) -> Result<CpuBackend, TrainError> {
        cfg.validate()
            .map_err(|e| invalid(format!("model config: {e}")))?;
        let infos = cfg.params();
        if params.len() != infos.len() {
            return Err(invalid(format!(
                "{} parameter tensors given, the config has {}",
                params.len(),
                infos.len()
            )));
        }
        for (p, info) in params.iter().zip(&infos) {
            let n: usize = info.shape.iter().product();
            if p.len() != n {
                return Err(invalid(format!(
                    "parameter {} has {} values, its shape {:?} needs {n}",
                    info.name,
                    p.len(),
                    info.shape
                )));
            }
        }
        let (lora, trained) = match method {
            None => {
                let trained = params
                    .into_iter()
                    .zip(infos)
                    .map(|(w, info)| {
                        Trained::new("param", info.name.clone(), info.name, info.shape, w)
                    })
                    .collect();
                (None, trained)
            }
            Some(layout) => {
                for s in &layout.sites {
                    let fits = infos.get(s.param).is_some_and(|i| {
                        i.shape.len() == 2
                            && i.shape[1] == s.cols
                            && s.row_offset + s.rows <= i.shape[0]
                    });
                    if !fits {
                        return Err(invalid(format!(
                            "LoRA site {} does not fit the model",
                            s.name
                        )));
                    }
                }
                let mut trained = Vec::with_capacity(2 * layout.sites.len());
                for (s, (a, b)) in layout.sites.iter().zip(layout.init(seed)) {
                    trained.push(Trained::new(
                        "lora_a",
                        s.name.clone(),
                        format!("lora_a.{}", s.name),
                        vec![layout.rank, s.cols],
                        a,
                    ));
                    trained.push(Trained::new(
                        "lora_b",
                        s.name.clone(),
                        format!("lora_b.{}", s.name),
                        vec![s.rows, layout.rank],
                        b,
                    ));
                }
                let tensors = params
                    .iter()
                    .zip(&infos)
                    .map(|(p, i)| Tensor::from_slice(p, i.shape.as_slice(), &Device::Cpu))
                    .collect::<Result<_, _>>()?;
                (
                    Some(LoraBase {
                        layout,
                        params,
                        tensors,
                    }),
                    trained,
                )
            }
        };
        Ok(CpuBackend {
            cfg,
            lora,
            trained,
            steps: 0,
        })
    }

    /// The loss of `batch` and the gradient of every trained tensor (full:
    /// `LlamaConfig::params` order; LoRA: `A`, `B` per site), without
    /// updating anything.
    pub fn loss_and_grads(&self, batch: &Batch) -> Result<(f64, Vec<Vec<f32>>), TrainError> {
        self.check_batch(batch)?;
        let vars = self
            .trained
            .iter()
            .map(|t| Var::from_slice(&t.w, t.shape.as_slice(), &Device::Cpu))
            .collect::<Result<Vec<_>, _>>()?;
        let params = self.effective_params(&vars)?;
        let loss = forward_loss(&self.cfg, &params, batch)?;
        let grads = loss.backward()?;
        let mut out = Vec::with_capacity(vars.len());
        for (v, t) in vars.iter().zip(&self.trained) {
            out.push(match grads.get(v.as_tensor()) {
                Some(g) => g.flatten_all()?.to_vec1::<f32>()?,
                // A tensor the loss does not reach (cannot happen for this
                // architecture, but the gradient is then exactly zero).
                None => vec![0.0; t.w.len()],
            });
        }
        Ok((f64::from(loss.to_scalar::<f32>()?), out))
    }

    /// The forward's weights: the trained variables themselves (full), or
    /// the base with `scale * B A` added on each site's rows (LoRA).
    fn effective_params(&self, vars: &[Var]) -> Result<Vec<Tensor>, TrainError> {
        let Some(lora) = &self.lora else {
            return Ok(vars.iter().map(|v| v.as_tensor().clone()).collect());
        };
        let scale = lora.layout.scale();
        let mut out = lora.tensors.clone();
        for (p, base) in lora.tensors.iter().enumerate() {
            let mut sites: Vec<(usize, &crate::lora::Site)> = lora
                .layout
                .sites
                .iter()
                .enumerate()
                .filter(|(_, s)| s.param == p)
                .collect();
            if sites.is_empty() {
                continue;
            }
            sites.sort_by_key(|(_, s)| s.row_offset);
            let total = base.dim(0)?;
            let mut pieces = Vec::new();
            let mut row = 0;
            for (i, s) in sites {
                if s.row_offset > row {
                    pieces.push(base.narrow(0, row, s.row_offset - row)?);
                }
                let (a, b) = (vars[2 * i].as_tensor(), vars[2 * i + 1].as_tensor());
                let delta = (b.matmul(a)? * scale)?;
                pieces.push((base.narrow(0, s.row_offset, s.rows)? + delta)?);
                row = s.row_offset + s.rows;
            }
            if row < total {
                pieces.push(base.narrow(0, row, total - row)?);
            }
            out[p] = if pieces.len() == 1 {
                pieces.remove(0)
            } else {
                Tensor::cat(&pieces, 0)?
            };
        }
        Ok(out)
    }

    fn check_batch(&self, b: &Batch) -> Result<(), TrainError> {
        let n = b.batch.checked_mul(b.seq).filter(|&n| n > 0);
        let Some(n) = n else {
            return Err(invalid(format!(
                "a batch of shape [{}, {}]",
                b.batch, b.seq
            )));
        };
        if b.ids.len() != n || b.targets.len() != n {
            return Err(invalid(format!(
                "a batch of shape [{}, {}] has {} ids and {} targets",
                b.batch,
                b.seq,
                b.ids.len(),
                b.targets.len()
            )));
        }
        let vocab = self.cfg.vocab;
        if let Some(&id) = b.ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(invalid(format!(
                "token id {id} is outside the vocabulary of {vocab}"
            )));
        }
        if let Some(&t) = b.targets.iter().find(|&&t| t >= 0 && t as usize >= vocab) {
            return Err(invalid(format!(
                "target {t} is outside the vocabulary of {vocab}"
            )));
        }
        if b.valid_targets() == 0 {
            return Err(invalid("a batch with no scored target".into()));
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn step(&mut self, batch: &Batch, config: &StepConfig) -> Result<StepStats, TrainError> {
        let step = self.steps + 1;
        let (loss, grads) = self.loss_and_grads(batch)?;
        if !loss.is_finite() {
            return Err(TrainError::NotFinite { step, what: "loss" });
        }
        let refs: Vec<&[f32]> = grads.iter().map(Vec::as_slice).collect();
        let norm = grad_norm_f32(&refs);
        if !norm.is_finite() {
            return Err(TrainError::NotFinite {
                step,
                what: "gradient norm",
            });
        }
        let scale = config
            .clip_norm
            .map_or(1.0, |max| clip_scale(norm, max) as f32);
        let adam = AdamWConfig {
            lr: config.lr,
            beta1: BETA1,
            beta2: BETA2,
            eps: ADAM_EPS,
            weight_decay: config.weight_decay,
            step: u32::try_from(step).map_err(|_| invalid(format!("step {step} is past 2^32")))?,
        };
        for (t, g) in self.trained.iter_mut().zip(&grads) {
            adamw_f32(&mut t.w, g, &mut t.m, &mut t.v, &adam, scale);
        }
        self.steps = step;
        Ok(StepStats {
            loss,
            grad_norm: norm,
        })
    }

    fn optimizer_steps(&self) -> u64 {
        self.steps
    }

    fn state_tensors(&self) -> Result<Vec<checkpoint::Tensor>, TrainError> {
        let mut out = Vec::with_capacity(3 * self.trained.len());
        for t in &self.trained {
            out.push(checkpoint::Tensor::new(
                t.group,
                &t.name,
                t.shape.clone(),
                t.w.clone(),
            )?);
            out.push(checkpoint::Tensor::new(
                "adam_m",
                &t.moment_name,
                t.shape.clone(),
                t.m.clone(),
            )?);
            out.push(checkpoint::Tensor::new(
                "adam_v",
                &t.moment_name,
                t.shape.clone(),
                t.v.clone(),
            )?);
        }
        Ok(out)
    }

    fn load_state(
        &mut self,
        tensors: &[checkpoint::Tensor],
        optimizer_steps: u64,
    ) -> Result<(), TrainError> {
        if tensors.len() != 3 * self.trained.len() {
            return Err(invalid(format!(
                "a state of {} tensors; this run has {} (each trained tensor and its two moments)",
                tensors.len(),
                3 * self.trained.len()
            )));
        }
        let find = |group: &str, name: &str, shape: &[usize]| -> Result<Vec<f32>, TrainError> {
            let t = tensors
                .iter()
                .find(|t| t.group() == group && t.name() == name)
                .ok_or_else(|| invalid(format!("the state has no tensor {group}/{name}")))?;
            if t.shape() != shape {
                return Err(invalid(format!(
                    "state tensor {group}/{name} has shape {:?}, this run's is {shape:?}",
                    t.shape()
                )));
            }
            Ok(t.data().to_vec())
        };
        // Read everything before changing anything: a refused state leaves
        // the backend as it was.
        let mut loaded = Vec::with_capacity(self.trained.len());
        for t in &self.trained {
            loaded.push((
                find(t.group, &t.name, &t.shape)?,
                find("adam_m", &t.moment_name, &t.shape)?,
                find("adam_v", &t.moment_name, &t.shape)?,
            ));
        }
        for (t, (w, m, v)) in self.trained.iter_mut().zip(loaded) {
            (t.w, t.m, t.v) = (w, m, v);
        }
        self.steps = optimizer_steps;
        Ok(())
    }

    fn merged_params(&self) -> Result<Vec<Vec<f32>>, TrainError> {
        match &self.lora {
            None => Ok(self.trained.iter().map(|t| t.w.clone()).collect()),
            Some(lora) => {
                let mut params = lora.params.clone();
                lora.layout.merge_into(&mut params, &self.adapters());
                Ok(params)
            }
        }
    }

    fn adapter(&self) -> Result<Option<Vec<checkpoint::Tensor>>, TrainError> {
        if self.lora.is_none() {
            return Ok(None);
        }
        self.trained
            .iter()
            .map(|t| checkpoint::Tensor::new(t.group, &t.name, t.shape.clone(), t.w.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
            .map_err(Into::into)
    }
}

impl CpuBackend {
    /// `(A, B)` per site, as `Layout::merge_into` takes them.
    fn adapters(&self) -> Vec<(Vec<f32>, Vec<f32>)> {
        self.trained
            .chunks(2)
            .map(|ab| (ab[0].w.clone(), ab[1].w.clone()))
            .collect()
    }
}

/// The global L2 norm of `f32` gradients: squares summed in `f64`, tensor
/// by tensor in the given order, element by element.
pub fn grad_norm_f32(grads: &[&[f32]]) -> f64 {
    let mut acc = 0f64;
    for g in grads {
        for &x in *g {
            let x = f64::from(x);
            acc += x * x;
        }
    }
    acc.sqrt()
}

/// One AdamW step over `f32` master weights, element by element in the GPU
/// kernel's (`kernels/cu/optim.cu` `adamw_one`) order and precision, which
/// is `kolm_kernels::cpu::adamw_step`'s formula: the gradient times the
/// clip factor, decoupled decay `p *= 1 - lr wd`, `m += (1 - b1)(g - m)`,
/// `v = b2 v + (1 - b2) g^2`, then `p -= step_size m / (sqrt(v) / bc2_sqrt
/// + eps)` with `step_size = lr / (1 - b1^t)` and `bc2_sqrt = sqrt(1 -
/// b2^t)` computed in `f64` and rounded once.
pub fn adamw_f32(
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    cfg: &AdamWConfig,
    grad_scale: f32,
) {
    let (bc1, bc2) = cfg.bias_corrections();
    let (lr, b1, b2, eps, wd) = (
        cfg.lr as f32,
        cfg.beta1 as f32,
        cfg.beta2 as f32,
        cfg.eps as f32,
        cfg.weight_decay as f32,
    );
    let step_size = (cfg.lr / bc1) as f32;
    let bc2_sqrt = bc2.sqrt() as f32;
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        let g = g * grad_scale;
        let mut pi = *p * (1.0 - lr * wd);
        let mi = *m + (1.0 - b1) * (g - *m);
        let vi = *v * b2 + (1.0 - b2) * g * g;
        let denom = vi.sqrt() / bc2_sqrt + eps;
        pi -= step_size * mi / denom;
        (*p, *m, *v) = (pi, mi, vi);
    }
}

/// `x W^T` for `x` `[n, in]` and `w` `[out, in]`.
fn linear(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.matmul(&w.t()?)
}

/// `x / sqrt(mean(x^2) + eps) * w` over the last dimension.
fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + f64::from(eps))?.sqrt()?)?
        .broadcast_mul(w)
}

/// Softmax over the last dimension; the max is a constant (softmax is
/// shift-invariant, so its gradient through the max is exactly zero).
fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)
}

/// Rotates `x` `[b, t, heads, hd]` by position `t`'s angles (`cos`, `sin`
/// `[t, hd/2]`).
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> candle_core::Result<Tensor> {
    let (b, t, heads, hd) = x.dims4()?;
    let half = hd / 2;
    let rotate = |a: &Tensor, bb: &Tensor, c: &Tensor, s: &Tensor| -> candle_core::Result<_> {
        let ya = (a.broadcast_mul(c)? - bb.broadcast_mul(s)?)?;
        let yb = (a.broadcast_mul(s)? + bb.broadcast_mul(c)?)?;
        Ok((ya, yb))
    };
    match layout {
        RopeLayout::Interleaved => {
            let x = x.reshape((b, t, heads, half, 2))?;
            let (a, bb) = (x.narrow(4, 0, 1)?, x.narrow(4, 1, 1)?);
            let (c, s) = (
                cos.reshape((1, t, 1, half, 1))?,
                sin.reshape((1, t, 1, half, 1))?,
            );
            let (ya, yb) = rotate(&a, &bb, &c, &s)?;
            Tensor::cat(&[ya, yb], 4)?.reshape((b, t, heads, hd))
        }
        RopeLayout::RotateHalf => {
            let (a, bb) = (x.narrow(3, 0, half)?, x.narrow(3, half, half)?);
            let (c, s) = (cos.reshape((1, t, 1, half))?, sin.reshape((1, t, 1, half))?);
            let (ya, yb) = rotate(&a, &bb, &c, &s)?;
            Tensor::cat(&[ya, yb], 3)
        }
        // The enum is non-exhaustive: a layout added later is refused
        // rather than rotated wrongly.
        _ => Err(candle_core::Error::Msg(format!(
            "RoPE layout {layout:?} is not supported"
        ))),
    }
}

/// The mean cross-entropy over `batch`'s scored targets (see the module
/// docs for the architecture). `params` are in `LlamaConfig::params` order.
fn forward_loss(cfg: &LlamaConfig, params: &[Tensor], batch: &Batch) -> Result<Tensor, TrainError> {
    let dev = &Device::Cpu;
    let (b, t) = (batch.batch, batch.seq);
    let n = b * t;
    let (hd, hq, hkv, ffn) = (cfg.head_dim, cfg.q_heads, cfg.kv_heads, cfg.ffn);
    let (qd, kvd, group) = (hq * hd, hkv * hd, hq / hkv);
    let table = RopeTable::new(t, hd, cfg.rope_base);
    let cos = Tensor::from_vec(table.cos, (t, hd / 2), dev)?;
    let sin = Tensor::from_vec(table.sin, (t, hd / 2), dev)?;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    let mask = Tensor::from_vec(mask, (t, t), dev)?;
    let scale = 1.0 / (hd as f64).sqrt();

    let ids = Tensor::from_slice(&batch.ids, n, dev)?;
    let mut x = params[EMBED].index_select(&ids, 0)?; // [n, d]
    for l in 0..cfg.layers {
        let w = |s: usize| &params[LlamaConfig::layer_base(l) + s];
        let h = rms_norm(&x, w(slot::ATTN_NORM), cfg.eps)?;
        let qkv = linear(&h, w(slot::WQKV))?; // [n, qd + 2 kvd]
        let q = qkv.narrow(1, 0, qd)?.reshape((b, t, hq, hd))?;
        let k = qkv.narrow(1, qd, kvd)?.reshape((b, t, hkv, hd))?;
        let v = qkv.narrow(1, qd + kvd, kvd)?.reshape((b, t, hkv, hd))?;
        let q = rope(&q, &cos, &sin, cfg.rope_layout)?;
        let k = rope(&k, &cos, &sin, cfg.rope_layout)?;
        // Query head h reads kv head h / group: the group's query heads
        // become the rows of one product per (batch, kv head).
        let q = q
            .reshape((b, t, hkv, group, hd))?
            .permute((0, 2, 3, 1, 4))?
            .contiguous()?
            .reshape((b, hkv, group * t, hd))?;
        let k = k.permute((0, 2, 3, 1))?.contiguous()?; // [b, hkv, hd, t]
        let v = v.permute((0, 2, 1, 3))?.contiguous()?; // [b, hkv, t, hd]
        let scores = (q.matmul(&k)? * scale)?
            .reshape((b, hkv, group, t, t))?
            .broadcast_add(&mask)?;
        let p = softmax_last(&scores)?.reshape((b, hkv, group * t, t))?;
        let o = p
            .matmul(&v)?
            .reshape((b, hkv, group, t, hd))?
            .permute((0, 3, 1, 2, 4))?
            .contiguous()?
            .reshape((n, qd))?;
        x = (x + linear(&o, w(slot::WO))?)?;
        let h = rms_norm(&x, w(slot::MLP_NORM), cfg.eps)?;
        let gu = linear(&h, w(slot::GATE_UP))?; // [n, 2 ffn]
        let act = (gu.narrow(1, 0, ffn)?.silu()? * gu.narrow(1, ffn, ffn)?)?;
        x = (x + linear(&act, w(slot::DOWN))?)?;
    }
    let x = rms_norm(&x, &params[FINAL_NORM], cfg.eps)?;
    let logits = linear(&x, &params[EMBED])?; // [n, vocab]
    let max = logits.max_keepdim(1)?.detach();
    let shifted = logits.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(1)?.log()?;
    let logp = shifted.broadcast_sub(&lse)?;
    // A constant [n, vocab] weight: 1/valid at each scored target, so the
    // weighted sum is the mean over scored targets.
    let valid = batch.valid_targets().max(1) as f32;
    let mut weights = vec![0f32; n * cfg.vocab];
    for (i, &tg) in batch.targets.iter().enumerate() {
        if tg >= 0 {
            weights[i * cfg.vocab + tg as usize] = 1.0 / valid;
        }
    }
    let weights = Tensor::from_vec(weights, (n, cfg.vocab), dev)?;
    Ok((logp * weights)?.sum_all()?.neg()?.to_dtype(DType::F32)?)
}
