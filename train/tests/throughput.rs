//! CPU training throughput (ignored by default; run with
//! `cargo test -p kolm-train --test throughput -- --ignored --nocapture`).
//! Prints input tokens per second of one optimiser step (forward, backward,
//! clip, AdamW), full fine-tune and LoRA, after one warm-up step.

use std::time::Instant;

use kolm_kernels::cpu::RopeLayout;
use kolm_kernels::llama::{Config, Rope, Shape, init_params};
use kolm_kernels::rng::SplitMix64;
use kolm_train::cpu::CpuBackend;
use kolm_train::lora::{Layout, TARGETS};
use kolm_train::{Backend, Batch, StepConfig};

fn measure(name: &str, cfg: Config, batch: usize, seq: usize, rank: Option<usize>, steps: usize) {
    let layout = rank.map(|r| {
        let all: Vec<String> = TARGETS.iter().map(|s| s.to_string()).collect();
        Layout::new(&cfg, r, 2.0 * r as f64, &all).unwrap()
    });
    let mut be = CpuBackend::new(cfg, init_params(&cfg, 1, 0.02), layout, 2).unwrap();
    let mut rng = SplitMix64::new(4);
    let n = batch * seq;
    let ids: Vec<u32> = (0..n)
        .map(|_| rng.below(cfg.vocab() as u64) as u32)
        .collect();
    let targets = (0..n)
        .map(|_| rng.below(cfg.vocab() as u64) as i32)
        .collect();
    let b = Batch {
        batch,
        seq,
        ids,
        targets,
    };
    let sc = StepConfig {
        lr: 1e-4,
        weight_decay: 0.0,
        clip_norm: Some(1.0),
    };
    be.step(&b, &sc).unwrap();
    let t = Instant::now();
    for _ in 0..steps {
        be.step(&b, &sc).unwrap();
    }
    let s = t.elapsed().as_secs_f64() / steps as f64;
    let what = rank.map_or("full".to_string(), |r| format!("LoRA r{r} all targets"));
    eprintln!(
        "{name} {what}, batch {batch} x seq {seq}: {s:.3} s/step, {:.0} tokens/s",
        n as f64 / s
    );
}

#[test]
#[ignore = "a measurement, minutes on a small machine"]
fn cpu_tokens_per_second() {
    let tiny = Config::new(Shape {
        vocab: 259,
        d_model: 64,
        layers: 2,
        q_heads: 2,
        kv_heads: 1,
        head_dim: 64,
        ffn: 172,
        rms_eps: 1e-5,
        rope: Rope {
            layout: RopeLayout::RotateHalf,
            base: 10_000.0,
        },
        ..Shape::smollm2_135m()
    })
    .unwrap();
    eprintln!("threads: {:?}", std::thread::available_parallelism());
    measure("tiny (d 64, 2 layers, vocab 259)", tiny, 8, 128, None, 10);
    measure(
        "tiny (d 64, 2 layers, vocab 259)",
        tiny,
        8,
        128,
        Some(16),
        10,
    );
    let smol = Config::smollm2_135m();
    measure("SmolLM2-135M shape", smol, 1, 128, Some(16), 3);
    measure("SmolLM2-135M shape", smol, 1, 128, None, 3);
}
