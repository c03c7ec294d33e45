//! Kernel benchmark on the shapes of a SmolLM2-135M training step (30
//! layers, d = 576, 9 query / 3 kv heads of 64, SwiGLU 1536, vocab 49152,
//! B = 16, T = 1024, bf16), plus attention at T = 2048 and 4096.
//!
//! Prints one JSON object per line: kernel, median milliseconds, and the
//! bytes and FLOPs that set its floor. `bench/torch_reference.py` times
//! PyTorch on the same shapes and prints both side by side;
//! `bench/torch_attention.py` does the same for attention alone.
//!
//! Each timed launch starts with a cold L2, so tensors that would fit in
//! the 50 MB L2 are not measured from cache. The method (the same in
//! `bench/torch_reference.py`), outside the timed region:
//! 1. a 256 MiB clearing write, then a 256 MiB read of another buffer, so
//!    the L2 holds clean lines and no write-back of the clearing write runs
//!    during the timed kernel;
//! 2. a GPU spin (`ops::gpu_spin`, about 50 µs on clock64) queued just
//!    before the start event, so the host has queued the timed kernel by the
//!    time the start event fires: launch latency is not timed.

mod common;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use common::AttentionKernels;
use cudarc::driver::sys::CUevent_flags;
use half::bf16;
use kolm_kernels::cpu::{AdamWConfig, RopeLayout, RopeTable};
use kolm_kernels::ops::{self, CrossEntropyOut, EmbeddingPlan, RopeTables};
use kolm_kernels::rng::SplitMix64;
use kolm_kernels::{Dtype, Gpu, Tensor, gpu_unavailable_reason};

const B: usize = 16;
const T: usize = 1024;
const N: usize = B * T;
const D: usize = 576;
const F: usize = 1536;
const HQ: usize = 9;
const HKV: usize = 3;
const HD: usize = 64;
const V: usize = 49_152;
/// The spin before each start event: 100k cycles, about 50 µs at the
/// H100's 1.98 GHz, longer than the host takes to queue any timed call
/// (`bench/torch_reference.py` spins as long with `torch.cuda._sleep`).
const SPIN_CYCLES: i64 = 100_000;
/// SmolLM2-135M's parameter count (tied embeddings).
const PARAMS: usize = 134_515_008;

/// Times the kernels of a SmolLM2-135M training step on GPU 0.
///
/// Prints one JSON line per kernel on stdout (kernel, median ms, bytes and
/// FLOPs of its floor) and the device on stderr. Every timed launch starts
/// from a clean, cold L2 with its launch latency hidden behind a GPU spin.
/// `bench/torch_reference.py OUT.jsonl` times PyTorch on the same shapes
/// and prints the table (scripts/gpu-check.sh runs both).
#[derive(Parser)]
#[command(name = "kolm-kernels-bench", version)]
struct Args {
    /// Which kernels run bf16 d = 64 attention.
    #[arg(long, value_enum, default_value_t = AttentionKernels::Auto)]
    attention: AttentionKernels,
    /// Which kernels to time.
    #[arg(long, value_enum, default_value_t = Only::All)]
    only: Only,
}

/// The groups of kernels `--only` picks.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Only {
    /// Every kernel: the small ones, cross-entropy, the matrix products,
    /// attention, AdamW and gradient clipping.
    All,
    /// The memory-bound kernels before cross-entropy: the copy reference,
    /// RMSNorm, SwiGLU, RoPE, rope_qkv and embedding (e.g. for a profiler).
    Small,
    /// Attention forward and backward at T = 1024, 2048 and 4096.
    Attention,
}

struct Bench<'a> {
    gpu: &'a Gpu,
    flush: cudarc::driver::CudaSlice<u8>,
    /// Read after the clearing write, so the L2 holds clean lines (the
    /// clearing write's dirty lines are written back before the timed
    /// launch, not during it).
    clean: Tensor<f32>,
    rng: SplitMix64,
}

impl Bench<'_> {
    /// A random tensor: 16 Mi random values, repeated to fill larger shapes.
    fn random<T: Dtype>(&mut self, shape: &[usize], a: f64) -> Result<Tensor<T>> {
        let n: usize = shape.iter().product();
        let chunk: Vec<T> = (0..n.min(1 << 24))
            .map(|_| T::from_f64(self.rng.symmetric(a)))
            .collect();
        let host: Vec<T> = chunk.iter().copied().cycle().take(n).collect();
        Ok(Tensor::from_host(self.gpu, &host, shape)?)
    }

    /// Median milliseconds of `reps` timed runs of `f` after two untimed ones.
    fn time(&mut self, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        f()?;
        f()?;
        let ctx = self.gpu.context();
        let stream = self.gpu.stream();
        let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let mut ms = Vec::with_capacity(reps);
        for _ in 0..reps {
            stream.memset_zeros(&mut self.flush)?;
            ops::clip_grad_norm(self.gpu, &[&self.clean], 1.0)?;
            // The start event waits behind the spin, and the host queues `f`
            // while the GPU spins.
            ops::gpu_spin(self.gpu, SPIN_CYCLES)?;
            start.record(stream)?;
            f()?;
            end.record(stream)?;
            end.synchronize()?;
            ms.push(f64::from(start.elapsed_ms(&end)?));
        }
        self.gpu.synchronize()?;
        ms.sort_by(f64::total_cmp);
        Ok(ms[ms.len() / 2])
    }
}

fn emit(kernel: &str, ms: f64, bytes: f64, flops: f64) {
    println!(r#"{{"kernel":"{kernel}","ms":{ms:.5},"bytes":{bytes:.0},"flops":{flops:.0}}}"#);
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(reason) = gpu_unavailable_reason() {
        bail!("no GPU: {reason}");
    }
    let gpu = Gpu::new(0).context("opening the GPU")?;
    gpu.warm_up().context("compiling the kernels")?;
    args.attention.apply(&gpu)?;
    let info = gpu.info();
    eprintln!(
        "device: {} (sm_{}{}, {} SMs), NVRTC {}.{}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        info.nvrtc_version.0,
        info.nvrtc_version.1
    );
    let flush = gpu.stream().alloc_zeros::<u8>(256 << 20)?;
    let clean = Tensor::<f32>::zeros(&gpu, &[64 << 20])?;
    let mut b = Bench {
        gpu: &gpu,
        flush,
        clean,
        rng: SplitMix64::new(0x5eed),
    };
    let g = &gpu;
    let e2 = 2.0; // bytes per bf16

    if args.only == Only::Attention {
        return attention(&mut b, g, e2);
    }

    // Reference for the small kernels: a device-to-device copy of one
    // [N, D] bf16 tensor (the bytes of rmsnorm_fwd's floor), timed the same
    // way: what a copy reaches at this size under this method.
    let src = gpu.stream().alloc_zeros::<u8>(N * D * 2)?;
    let mut dst = gpu.stream().alloc_zeros::<u8>(N * D * 2)?;
    let ms = b.time(50, || Ok(g.stream().memcpy_dtod(&src, &mut dst)?))?;
    emit("copy_N_x_D", ms, 2.0 * (N * D) as f64 * e2, 0.0);
    drop((src, dst));

    // RMSNorm [N, D].
    let x = b.random::<bf16>(&[N, D], 2.0)?;
    let w = b.random::<bf16>(&[D], 1.0)?;
    let dy = b.random::<bf16>(&[N, D], 1.0)?;
    let mut y = Tensor::<bf16>::zeros(g, &[N, D])?;
    let mut dx = Tensor::<bf16>::zeros(g, &[N, D])?;
    let mut dw = Tensor::<bf16>::zeros(g, &[D])?;
    let mut rstd = Tensor::<f32>::zeros(g, &[N])?;
    let ms = b.time(50, || {
        Ok(ops::rmsnorm_fwd(g, &x, &w, 1e-5, &mut y, &mut rstd)?)
    })?;
    emit("rmsnorm_fwd", ms, 2.0 * (N * D) as f64 * e2, 0.0);
    let ms = b.time(50, || {
        Ok(ops::rmsnorm_bwd(
            g, &dy, &x, &w, &rstd, &mut dx, &mut dw, false,
        )?)
    })?;
    // dy and x read, dx written; rstd (f32 per row) read; w read and dw
    // written (d each).
    let bwd_small = (N * 4) as f64 + 2.0 * D as f64 * e2;
    emit(
        "rmsnorm_bwd",
        ms,
        3.0 * (N * D) as f64 * e2 + bwd_small,
        0.0,
    );
    // The training step's fused forms: the forward also writing the
    // residual copy, the backward adding into the residual gradient.
    let mut xc = Tensor::<bf16>::zeros(g, &[N, D])?;
    let ms = b.time(50, || {
        Ok(ops::rmsnorm_fwd_and_copy(
            g, &x, &w, 1e-5, &mut y, &mut rstd, &mut xc,
        )?)
    })?;
    emit("rmsnorm_fwd_and_copy", ms, 3.0 * (N * D) as f64 * e2, 0.0);
    let ms = b.time(50, || {
        Ok(ops::rmsnorm_bwd_add(
            g, &dy, &x, &w, &rstd, &mut dx, &mut dw, false,
        )?)
    })?;
    emit(
        "rmsnorm_bwd_add",
        ms,
        4.0 * (N * D) as f64 * e2 + bwd_small,
        0.0,
    );
    drop(xc);

    // SwiGLU [N, F].
    let gate = b.random::<bf16>(&[N, F], 4.0)?;
    let upv = b.random::<bf16>(&[N, F], 2.0)?;
    let dyf = b.random::<bf16>(&[N, F], 1.0)?;
    let mut yf = Tensor::<bf16>::zeros(g, &[N, F])?;
    let mut dg = Tensor::<bf16>::zeros(g, &[N, F])?;
    let mut du = Tensor::<bf16>::zeros(g, &[N, F])?;
    let ms = b.time(50, || Ok(ops::swiglu_fwd(g, &gate, &upv, &mut yf)?))?;
    emit("swiglu_fwd", ms, 3.0 * (N * F) as f64 * e2, 0.0);
    let ms = b.time(50, || {
        Ok(ops::swiglu_bwd(g, &dyf, &gate, &upv, &mut dg, &mut du)?)
    })?;
    emit("swiglu_bwd", ms, 5.0 * (N * F) as f64 * e2, 0.0);
    drop((gate, upv, dyf, yf, dg, du));

    // RoPE on q [B, T, HQ, HD], rotate-half.
    let tables = RopeTables::new(g, &RopeTable::new(T, HD, 10_000.0))?;
    let q = b.random::<bf16>(&[B, T, HQ, HD], 1.0)?;
    let mut qr = Tensor::<bf16>::zeros(g, &[B, T, HQ, HD])?;
    let qbytes = 2.0 * (N * HQ * HD) as f64 * e2;
    let ms = b.time(50, || {
        Ok(ops::rope_fwd(
            g,
            &q,
            &tables,
            RopeLayout::RotateHalf,
            &mut qr,
        )?)
    })?;
    emit("rope_fwd", ms, qbytes, 0.0);
    let ms = b.time(50, || {
        Ok(ops::rope_bwd(
            g,
            &q,
            &tables,
            RopeLayout::RotateHalf,
            &mut qr,
        )?)
    })?;
    emit("rope_bwd", ms, qbytes, 0.0);
    drop((q, qr));
    // The fused q/k/v projection split into rotated q, rotated k and v,
    // and the gradients merged back: one launch each.
    let qkv = b.random::<bf16>(&[N, (HQ + 2 * HKV) * HD], 1.0)?;
    let mut qs = Tensor::<bf16>::zeros(g, &[B, T, HQ, HD])?;
    let mut ks = Tensor::<bf16>::zeros(g, &[B, T, HKV, HD])?;
    let mut vs = Tensor::<bf16>::zeros(g, &[B, T, HKV, HD])?;
    let mut dqkv = Tensor::<bf16>::zeros(g, &[N, (HQ + 2 * HKV) * HD])?;
    let qkv_bytes = 2.0 * (N * (HQ + 2 * HKV) * HD) as f64 * e2;
    let rh = RopeLayout::RotateHalf;
    let ms = b.time(50, || {
        Ok(ops::rope_qkv_split(
            g, &qkv, &tables, rh, &mut qs, &mut ks, &mut vs,
        )?)
    })?;
    emit("rope_qkv_split", ms, qkv_bytes, 0.0);
    let ms = b.time(50, || {
        Ok(ops::rope_qkv_merge(
            g, &qs, &ks, &vs, &tables, rh, &mut dqkv,
        )?)
    })?;
    emit("rope_qkv_merge", ms, qkv_bytes, 0.0);
    drop((qkv, qs, ks, vs, dqkv));

    // Embedding: ids drawn uniformly.
    let ids: Vec<u32> = (0..N).map(|_| b.rng.below(V as u64) as u32).collect();
    let plan = EmbeddingPlan::new(g, &ids, V)?;
    let table = b.random::<bf16>(&[V, D], 1.0)?;
    let mut emb = Tensor::<bf16>::zeros(g, &[N, D])?;
    let mut dtable = Tensor::<bf16>::zeros(g, &[V, D])?;
    let ms = b.time(50, || Ok(ops::embedding_fwd(g, &table, &plan, &mut emb)?))?;
    emit("embedding_fwd", ms, 2.0 * (N * D) as f64 * e2, 0.0);
    let ms = b.time(50, || {
        Ok(ops::embedding_bwd(g, &dy, &plan, &mut dtable, false)?)
    })?;
    emit("embedding_bwd", ms, ((N + V) * D) as f64 * e2, 0.0);
    if args.only == Only::Small {
        return Ok(());
    }

    // Cross-entropy fused with its gradient, in place over bf16 logits.
    let mut logits = b.random::<bf16>(&[N, V], 6.0)?;
    let targets: Vec<i32> = (0..N).map(|_| b.rng.below(V as u64) as i32).collect();
    let targets = Tensor::from_host(g, &targets, &[N])?;
    let mut out = CrossEntropyOut::zeros(g, N)?;
    let ms = b.time(20, || {
        Ok(ops::cross_entropy_fwd_grad_inplace(
            g,
            &mut logits,
            &targets,
            &mut out,
            1.0 / N as f32,
        )?)
    })?;
    emit("xent_fwd_bwd", ms, 2.0 * (N * V) as f64 * e2, 0.0);
    let ms = b.time(20, || {
        Ok(ops::cross_entropy_fwd(
            g, &logits, &targets, &mut out, None,
        )?)
    })?;
    emit("xent_fwd", ms, (N * V) as f64 * e2, 0.0);
    drop(logits);

    // Matrix products of one layer and the lm-head: forward (x w^T),
    // data gradient (dy w) and weight gradient (dy^T x).
    for (name, n_out, k_in) in [
        ("q_o_proj", D, D),
        ("kv_proj", HKV * HD, D),
        ("gate_up_proj", F, D),
        ("down_proj", D, F),
        ("lm_head", V, D),
    ] {
        let xin = b.random::<bf16>(&[N, k_in], 1.0)?;
        let wt = b.random::<bf16>(&[n_out, k_in], 0.05)?;
        let dyo = b.random::<bf16>(&[N, n_out], 1.0)?;
        let mut yo = Tensor::<bf16>::zeros(g, &[N, n_out])?;
        let mut dxi = Tensor::<bf16>::zeros(g, &[N, k_in])?;
        let mut dwt = Tensor::<bf16>::zeros(g, &[n_out, k_in])?;
        let flops = 2.0 * (N * n_out * k_in) as f64;
        let bytes = ((N * k_in) + (n_out * k_in) + (N * n_out)) as f64 * e2;
        let ms = b.time(20, || {
            Ok(ops::matmul(g, &xin, false, &wt, true, &mut yo, 1.0, 0.0)?)
        })?;
        emit(&format!("matmul_{name}_fwd"), ms, bytes, flops);
        let ms = b.time(20, || {
            Ok(ops::matmul(g, &dyo, false, &wt, false, &mut dxi, 1.0, 0.0)?)
        })?;
        emit(&format!("matmul_{name}_dx"), ms, bytes, flops);
        let ms = b.time(20, || {
            Ok(ops::matmul(g, &dyo, true, &xin, false, &mut dwt, 1.0, 0.0)?)
        })?;
        emit(&format!("matmul_{name}_dw"), ms, bytes, flops);
    }

    attention(&mut b, g, e2)?;

    // Optimizer over every parameter, f32 master weights and gradients.
    let mut p = b.random::<f32>(&[PARAMS], 1.0)?;
    let grad = b.random::<f32>(&[PARAMS], 0.01)?;
    let mut m = b.random::<f32>(&[PARAMS], 0.001)?;
    let mut v = Tensor::<f32>::zeros(g, &[PARAMS])?;
    let cfg = AdamWConfig {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 10,
    };
    let clip = ops::clip_grad_norm(g, &[&grad], 1.0)?;
    let ms = b.time(20, || {
        Ok(
            ops::adamw_step(g, &mut p, &grad, &mut m, &mut v, &cfg, Some(&clip.scale))
                .map(|_| ())?,
        )
    })?;
    emit("adamw", ms, 7.0 * PARAMS as f64 * 4.0, 0.0);
    let ms = b.time(
        20,
        || Ok(ops::clip_grad_norm(g, &[&grad], 1.0).map(|_| ())?),
    )?;
    emit("clip_grad_norm", ms, PARAMS as f64 * 4.0, 0.0);
    Ok(())
}

/// Attention, causal GQA, at T = 1024, 2048, 4096 with B * T fixed.
fn attention(b: &mut Bench<'_>, g: &Gpu, e2: f64) -> Result<()> {
    for (bb, tt) in [(16, 1024), (8, 2048), (4, 4096)] {
        let qs = [bb, tt, HQ, HD];
        let ks = [bb, tt, HKV, HD];
        let q = b.random::<bf16>(&qs, 1.0)?;
        let k = b.random::<bf16>(&ks, 1.0)?;
        let v = b.random::<bf16>(&ks, 1.0)?;
        let dout = b.random::<bf16>(&qs, 1.0)?;
        let mut o = Tensor::<bf16>::zeros(g, &qs)?;
        let mut lse = Tensor::<f32>::zeros(g, &[bb, HQ, tt])?;
        let mut dq = Tensor::<bf16>::zeros(g, &qs)?;
        let mut dk = Tensor::<bf16>::zeros(g, &ks)?;
        let mut dv = Tensor::<bf16>::zeros(g, &ks)?;
        // Causal: half of the T x T products; forward 2 matmuls, backward 5.
        let fwd_flops = 4.0 * (bb * HQ * tt * tt * HD) as f64 / 2.0;
        let bytes = (2 * bb * tt * (HQ + HKV) * HD) as f64 * e2;
        let ms = b.time(10, || {
            Ok(ops::attention_fwd(g, &q, &k, &v, &mut o, &mut lse)?)
        })?;
        emit(&format!("attention_fwd_T{tt}"), ms, bytes, fwd_flops);
        let ms = b.time(10, || {
            Ok(ops::attention_bwd(
                g, &dout, &q, &k, &v, &o, &lse, &mut dq, &mut dk, &mut dv,
            )?)
        })?;
        emit(
            &format!("attention_bwd_T{tt}"),
            ms,
            2.0 * bytes,
            2.5 * fwd_flops,
        );
    }

    Ok(())
}
