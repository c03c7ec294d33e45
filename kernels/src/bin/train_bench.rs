//! A real training step, timed: the SmolLM2-135M shape (30 layers, d = 576,
//! 9 / 3 heads of 64, SwiGLU 1536, vocabulary 49152, tied embeddings) at
//! B = 16, T = 1024 in bf16 with f32 master weights, composed from the
//! kernels by `kolm_kernels::llama`: forward, backward, global-norm
//! clipping and AdamW, every launch on one stream.
//!
//! Prints JSON lines: the step time and tokens per second (CUDA events
//! around `--steps` back-to-back steps after `--warmup` untimed ones), the
//! forward + backward and optimiser parts timed separately, and the
//! determinism check: two fresh models from the same seed trained for
//! `--repeat` steps must agree bit for bit (sha256 over every master weight,
//! working weight and loss). Exit status 1 if they do not.
//!
//! With `--lora-rank R` it also times a LoRA step (adapters of rank R on
//! every projection, q k v o gate up down, of every layer; the base frozen)
//! and prints its tokens per second next to the full fine-tune's.
//!
//! Usage: kolm-train-bench [--batch B] [--seq T] [--layers L] [--steps N]
//!        [--warmup N] [--repeat N] [--attention auto|wgmma|mma-sync]
//!        [--lora-rank R]

mod common;

use anyhow::Result;
use clap::Parser;
use common::AttentionKernels;
use cudarc::driver::sys::CUevent_flags;
use half::bf16;
use kolm_kernels::llama::{
    Config, GpuLlama, GpuLora, LoraSite, Optimizer, Shape, TrainBatch, init_params, slot,
};
use kolm_kernels::rng::SplitMix64;
use kolm_kernels::{Gpu, gpu_unavailable_reason};
use sha2::{Digest, Sha256};

const OPT: Optimizer = Optimizer {
    lr: 3e-4,
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    weight_decay: 0.1,
    max_grad_norm: 1.0,
};

/// Times a SmolLM2-135M training step on GPU 0 and checks that it repeats
/// bit for bit.
///
/// Prints JSON lines on stdout: the per-op profile of one step, the step
/// (ms, tokens/s, forward + backward and optimiser parts) and the
/// determinism check (two fresh models from the same seed trained for
/// `--repeat` steps, sha256 over every loss and weight). A summary goes to
/// stderr. Exit status 1 if the two models differ.
#[derive(Parser)]
#[command(name = "kolm-train-bench", version)]
struct Args {
    /// Sequences per batch.
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 1024, value_parser = at_least_one)]
    seq: usize,
    /// Decoder layers (SmolLM2-135M has 30).
    #[arg(long, default_value_t = 30, value_parser = at_least_one)]
    layers: usize,
    /// Timed steps, back to back between two CUDA events.
    #[arg(long, default_value_t = 10, value_parser = at_least_one)]
    steps: usize,
    /// Untimed steps before them.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Steps each of the two models of the determinism check trains
    /// (0 would compare two untrained models: a check that cannot fail).
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    repeat: usize,
    /// Which kernels run bf16 d = 64 attention.
    #[arg(long, value_enum, default_value_t = AttentionKernels::Auto)]
    attention: AttentionKernels,
    /// Also time LoRA of this rank on every projection of every layer.
    #[arg(long, value_parser = at_least_one)]
    lora_rank: Option<usize>,
}

/// LoRA sites and their initial `(A, B)`.
struct LoraInit {
    sites: Vec<LoraSite>,
    adapters: Vec<(Vec<f32>, Vec<f32>)>,
}

/// Every projection of every layer as a LoRA site (q, k, v, o, gate, up,
/// down), with A seeded uniform in +-1/sqrt(cols) and B zero.
fn lora_sites(cfg: &Config, rank: usize, seed: u64) -> LoraInit {
    let (d, qd, kvd, f) = (
        cfg.d_model(),
        cfg.q_heads() * cfg.head_dim(),
        cfg.kv_heads() * cfg.head_dim(),
        cfg.ffn(),
    );
    let mut g = SplitMix64::new(seed);
    let mut sites = Vec::new();
    let mut adapters = Vec::new();
    for l in 0..cfg.layers() {
        let base = Config::layer_base(l);
        for (s, row_offset, rows, cols) in [
            (slot::WQKV, 0, qd, d),
            (slot::WQKV, qd, kvd, d),
            (slot::WQKV, qd + kvd, kvd, d),
            (slot::WO, 0, d, qd),
            (slot::GATE_UP, 0, f, d),
            (slot::GATE_UP, f, f, d),
            (slot::DOWN, 0, d, f),
        ] {
            sites.push(LoraSite {
                param: base + s,
                row_offset,
                rows,
                cols,
            });
            let bound = 1.0 / (cols as f64).sqrt();
            let a = (0..rank * cols)
                .map(|_| g.symmetric(bound) as f32)
                .collect();
            adapters.push((a, vec![0.0; rows * rank]));
        }
    }
    LoraInit { sites, adapters }
}

/// Milliseconds per LoRA step (CUDA events around `a.steps` steps after
/// `a.warmup`), and the last loss.
fn time_lora(gpu: &Gpu, cfg: Config, a: &Args, rank: usize, seed: u64) -> Result<(f64, f64)> {
    let params = init_params(&cfg, seed, 0.02);
    let mut model = GpuLlama::<bf16>::new_frozen(gpu, cfg, &params, a.batch, a.seq)?;
    let init = lora_sites(&cfg, rank, seed);
    let mut lora = GpuLora::new(gpu, &mut model, &init.sites, rank, 2.0, &init.adapters)?;
    let data = batch(gpu, &cfg, a, seed)?;
    let mut step = |model: &mut GpuLlama<bf16>| -> Result<()> {
        model.forward_backward(gpu, &data)?;
        lora.optimizer_step(gpu, model, &OPT)?;
        Ok(())
    };
    for _ in 0..a.warmup {
        step(&mut model)?;
    }
    let ctx = gpu.context();
    let (start, end) = (
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
    );
    start.record(gpu.stream())?;
    for _ in 0..a.steps {
        step(&mut model)?;
    }
    end.record(gpu.stream())?;
    end.synchronize()?;
    let ms = f64::from(start.elapsed_ms(&end)?) / a.steps as f64;
    Ok((ms, model.last_loss(gpu)?))
}

/// A whole number of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Random token ids with next-token targets (the last position ignored).
fn batch(gpu: &Gpu, cfg: &Config, a: &Args, seed: u64) -> Result<TrainBatch> {
    let mut g = SplitMix64::new(seed);
    let n = a.batch * a.seq;
    let ids: Vec<u32> = (0..n).map(|_| g.below(cfg.vocab() as u64) as u32).collect();
    let targets: Vec<i32> = (0..n)
        .map(|i| {
            if (i + 1) % a.seq == 0 {
                -1
            } else {
                ids[i + 1] as i32
            }
        })
        .collect();
    Ok(TrainBatch::new(
        gpu,
        cfg.vocab(),
        a.batch,
        a.seq,
        &ids,
        &targets,
    )?)
}

/// sha256 over the losses of `steps` steps and every weight after them.
fn trained_digest(gpu: &Gpu, cfg: Config, a: &Args, seed: u64) -> Result<(String, f64)> {
    let params = init_params(&cfg, seed, 0.02);
    let mut model = GpuLlama::<bf16>::new(gpu, cfg, &params, a.batch, a.seq)?;
    let data = batch(gpu, &cfg, a, seed)?;
    let mut h = Sha256::new();
    let mut loss = f64::NAN;
    for _ in 0..a.repeat {
        model.train_step(gpu, &data, &OPT)?;
        loss = model.last_loss(gpu)?;
        h.update(loss.to_le_bytes());
    }
    for t in model.master() {
        for v in t.to_host(gpu)? {
            h.update(v.to_le_bytes());
        }
    }
    for t in model.weights() {
        for v in t.to_host(gpu)? {
            h.update(v.to_bits().to_le_bytes());
        }
    }
    let digest = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((digest, loss))
}

fn main() -> Result<()> {
    let a = Args::parse();
    // A benchmark that asked for the GPU and cannot have it fails: it never
    // reports success without having measured anything.
    if let Some(reason) = gpu_unavailable_reason() {
        anyhow::bail!("no GPU: {reason}");
    }
    let gpu = Gpu::new(0)?;
    a.attention.apply(&gpu)?;
    gpu.warm_up()?;
    let cfg = Config::new(Shape {
        layers: a.layers,
        ..Shape::smollm2_135m()
    })?;
    let tokens = a.batch * a.seq;
    eprintln!(
        "{} ({} SMs); {} parameters, B = {}, T = {}, {} layers",
        gpu.info().name,
        gpu.info().multiprocessors,
        cfg.num_params(),
        a.batch,
        a.seq,
        a.layers
    );

    let seed = 0x6b6f_6c6d;
    let params = init_params(&cfg, seed, 0.02);
    let mut model = GpuLlama::<bf16>::new(&gpu, cfg, &params, a.batch, a.seq)?;
    let data = batch(&gpu, &cfg, &a, seed)?;
    for _ in 0..a.warmup {
        model.train_step(&gpu, &data, &OPT)?;
    }
    gpu.synchronize()?;
    let ctx = gpu.context();
    let stream = gpu.stream();
    let ev = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    // Whole steps back to back (the host queues ahead of the GPU).
    let (start, end) = (ev()?, ev()?);
    let wall = std::time::Instant::now();
    start.record(stream)?;
    for _ in 0..a.steps {
        model.train_step(&gpu, &data, &OPT)?;
    }
    end.record(stream)?;
    end.synchronize()?;
    let wall_ms = wall.elapsed().as_secs_f64() * 1e3 / a.steps as f64;
    let step_ms = f64::from(start.elapsed_ms(&end)?) / a.steps as f64;
    let loss = model.last_loss(&gpu)?;
    // The two halves of one step.
    let (s0, s1, s2) = (ev()?, ev()?, ev()?);
    let (mut fb, mut opt) = (0.0, 0.0);
    for _ in 0..a.steps {
        s0.record(stream)?;
        model.forward_backward(&gpu, &data)?;
        s1.record(stream)?;
        model.optimizer_step(&gpu, &OPT)?;
        s2.record(stream)?;
        s2.synchronize()?;
        fb += f64::from(s0.elapsed_ms(&s1)?);
        opt += f64::from(s1.elapsed_ms(&s2)?);
    }
    let (fb, opt) = (fb / a.steps as f64, opt / a.steps as f64);
    // Where the time goes: one step with an event after every op.
    let profile = model.profile_step(&gpu, &data, &OPT)?;
    let total: f64 = profile.iter().map(|p| p.1).sum();
    eprintln!(
        "profiled step: {total:.2} ms in {} kinds of op",
        profile.len()
    );
    for (op, ms, n) in &profile {
        println!(r#"{{"bench":"kolm_train_profile","op":"{op}","ms":{ms:.4},"launches":{n}}}"#);
        eprintln!("  {op:32} {ms:8.3} ms  {:5.1}%  x{n}", 100.0 * ms / total);
    }
    let tps = tokens as f64 / (step_ms / 1e3);
    println!(
        r#"{{"bench":"kolm_train_step","batch":{},"seq":{},"layers":{},"steps":{},"ms_per_step":{step_ms:.3},"wall_ms_per_step":{wall_ms:.3},"tokens_per_s":{tps:.0},"fwd_bwd_ms":{fb:.3},"optimizer_ms":{opt:.3},"last_loss":{loss:.5}}}"#,
        a.batch, a.seq, a.layers, a.steps
    );
    eprintln!(
        "step {step_ms:.2} ms ({wall_ms:.2} ms wall) = {tps:.0} tokens/s; forward+backward {fb:.2} ms, clip+AdamW {opt:.2} ms; loss {loss:.4}"
    );
    drop(model);

    if let Some(rank) = a.lora_rank {
        let (lora_ms, lora_loss) = time_lora(&gpu, cfg, &a, rank, seed)?;
        let lora_tps = tokens as f64 / (lora_ms / 1e3);
        println!(
            r#"{{"bench":"kolm_train_step_lora","rank":{rank},"targets":"q k v o gate up down","batch":{},"seq":{},"layers":{},"ms_per_step":{lora_ms:.3},"tokens_per_s":{lora_tps:.0},"full_tokens_per_s":{tps:.0},"last_loss":{lora_loss:.5}}}"#,
            a.batch, a.seq, a.layers
        );
        eprintln!(
            "LoRA rank {rank} (all projections): {lora_ms:.2} ms = {lora_tps:.0} tokens/s; full fine-tune {tps:.0} tokens/s"
        );
    }

    let (d1, l1) = trained_digest(&gpu, cfg, &a, seed)?;
    let (d2, l2) = trained_digest(&gpu, cfg, &a, seed)?;
    let same = d1 == d2;
    println!(
        r#"{{"bench":"kolm_train_determinism","steps":{},"digest_a":"{d1}","digest_b":"{d2}","loss_a":{l1:.6},"loss_b":{l2:.6},"bitwise_equal":{same}}}"#,
        a.repeat
    );
    eprintln!(
        "determinism: {} steps twice from the same seed: {}",
        a.repeat,
        if same {
            "bit-for-bit equal"
        } else {
            "DIFFERENT"
        }
    );
    if !same {
        std::process::exit(1);
    }
    Ok(())
}
