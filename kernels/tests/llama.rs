//! The composed Llama training step on the GPU against the `f64` CPU
//! reference (`cpu::llama`, itself checked by finite differences): loss,
//! every parameter's gradient, and one clipped AdamW step; then whole steps
//! repeated bit for bit, and a loss that falls when a batch is trained on.
//!
//! Without a GPU each test prints `SKIP: <reason>` and returns;
//! `KOLM_REQUIRE_GPU=1` makes that a failure. Each check prints a `RESULT`
//! line.

mod common;

use common::{gpu, rel_l2};
use kolm_kernels::cpu::llama::{Tokens, loss_and_grads};
use kolm_kernels::cpu::{self, AdamWConfig, RopeLayout};
use kolm_kernels::llama::{Config, GpuLlama, Optimizer, Rope, Shape, TrainBatch, init_params};
use kolm_kernels::rng::SplitMix64;
use kolm_kernels::{Dtype, Gpu};

type Bf16 = half::bf16;

fn tiny(layout: RopeLayout) -> Config {
    Config::new(Shape {
        vocab: 96,
        d_model: 64,
        layers: 2,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 64,
        ffn: 96,
        rms_eps: 1e-5,
        rope: Rope {
            layout,
            base: 10_000.0,
        },
        ..Shape::smollm2_135m()
    })
    .unwrap()
}

const OPT: Optimizer = Optimizer {
    lr: 1e-2,
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    weight_decay: 0.1,
    max_grad_norm: 0.5,
};

struct Data {
    batch: usize,
    seq: usize,
    ids: Vec<u32>,
    targets: Vec<i32>,
}

fn data(g: &mut SplitMix64, vocab: usize, batch: usize, seq: usize) -> Data {
    let n = batch * seq;
    let ids: Vec<u32> = (0..n).map(|_| g.below(vocab as u64) as u32).collect();
    let mut targets: Vec<i32> = (0..n).map(|_| g.below(vocab as u64) as i32).collect();
    targets[n / 2] = -1; // one ignored position
    Data {
        batch,
        seq,
        ids,
        targets,
    }
}

fn check(what: &str, dtype: &str, e: f64, tol: f64) {
    let ok = e < tol;
    println!(
        "RESULT parity llama_{what} {dtype} rel_l2={e:.2e} tol={tol:.0e} {}",
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "llama {what} {dtype}: relative error {e:e} >= {tol:e}");
}

/// Tolerances of the composed step: f32 keeps the kernels' 1e-5 per
/// operation, but a gradient here passes through two layers of them;
/// bf16 rounds every stored activation and gradient to 8 bits.
fn tol<T: Dtype>() -> f64 {
    if T::SUFFIX == "f32" { 1e-4 } else { 5e-2 }
}

/// Loss and gradients of one step against the reference, then the AdamW
/// step's update against the reference update.
fn step_parity<T: Dtype>(gpu: &Gpu, layout: RopeLayout)
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
{
    let cfg = tiny(layout);
    let seed = SplitMix64::fresh_seed();
    println!("llama step parity {} {layout:?}: seed {seed}", T::SUFFIX);
    let mut g = SplitMix64::new(seed);
    let params = init_params(&cfg, seed, 0.1);
    let d = data(&mut g, cfg.vocab(), 2, 80);
    let mut model = GpuLlama::<T>::new(gpu, cfg, &params, d.batch, d.seq).expect("model");
    let batch =
        TrainBatch::new(gpu, cfg.vocab(), d.batch, d.seq, &d.ids, &d.targets).expect("batch");
    model
        .forward_backward(gpu, &batch)
        .expect("forward + backward");

    // The reference sees the weights the GPU computed with: rounded to T.
    let working: Vec<Vec<f64>> = params
        .iter()
        .map(|p| {
            p.iter()
                .map(|&x| T::from_f64(f64::from(x)).to_f64())
                .collect()
        })
        .collect();
    let tokens = Tokens {
        batch: d.batch,
        seq: d.seq,
        ids: &d.ids,
        targets: &d.targets,
    };
    let (loss, grads) = loss_and_grads(&cfg, &working, tokens);
    let got_loss = model.last_loss(gpu).expect("loss");
    check(
        "loss",
        T::SUFFIX,
        ((got_loss - loss) / loss).abs(),
        tol::<T>(),
    );
    let infos = cfg.params();
    let mut worst = (0.0f64, String::new());
    for (i, info) in infos.iter().enumerate() {
        let got = model.grads()[i].to_f64(gpu).expect("gradient");
        let e = rel_l2(&got, &grads[i]);
        if e >= worst.0 {
            worst = (e, info.name.clone());
        }
        assert!(
            e < tol::<T>(),
            "llama {} gradient of {}: relative error {e:e}",
            T::SUFFIX,
            info.name
        );
    }
    println!("worst gradient: {} at {:.2e}", worst.1, worst.0);
    check("grads", T::SUFFIX, worst.0, tol::<T>());

    // One clipped AdamW step on the f32 masters, from the GPU's own
    // gradients (so this checks the optimiser, not the gradients again).
    let gpu_grads: Vec<Vec<f64>> = model
        .grads()
        .iter()
        .map(|t| t.to_f64(gpu).expect("gradient"))
        .collect();
    let refs: Vec<&[f64]> = gpu_grads.iter().map(Vec::as_slice).collect();
    let scale = cpu::clip_scale(cpu::grad_norm(&refs), f64::from(OPT.max_grad_norm));
    let config = AdamWConfig {
        lr: OPT.lr,
        beta1: OPT.beta1,
        beta2: OPT.beta2,
        eps: OPT.eps,
        weight_decay: OPT.weight_decay,
        step: 1,
    };
    model.optimizer_step(gpu, &OPT).expect("optimizer step");
    let (mut got_delta, mut want_delta) = (Vec::new(), Vec::new());
    for (i, p) in params.iter().enumerate() {
        let mut want: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
        let (mut m, mut v) = (vec![0.0; p.len()], vec![0.0; p.len()]);
        cpu::adamw_step(&mut want, &gpu_grads[i], &mut m, &mut v, &config, scale);
        let got = model.master()[i].to_f64(gpu).expect("master");
        for j in 0..p.len() {
            got_delta.push(got[j] - f64::from(p[j]));
            want_delta.push(want[j] - f64::from(p[j]));
        }
        // The working copy is the master rounded to T.
        let working = model.weights()[i].to_f64(gpu).expect("working");
        assert!(
            working
                .iter()
                .zip(&got)
                .all(|(w, m)| w.to_bits() == T::from_f64(*m).to_f64().to_bits()),
            "working copy of {} is not the master rounded",
            infos[i].name
        );
    }
    // The update is ~lr, so f32 masters carry it to about 1e-5 relative.
    check(
        "adamw_update",
        T::SUFFIX,
        rel_l2(&got_delta, &want_delta),
        1e-4,
    );
}

#[test]
fn llama_step_matches_reference_f32() {
    let Some(gpu) = gpu() else { return };
    step_parity::<f32>(gpu, RopeLayout::RotateHalf);
    step_parity::<f32>(gpu, RopeLayout::Interleaved);
}

#[test]
fn llama_step_matches_reference_bf16() {
    let Some(gpu) = gpu() else { return };
    step_parity::<Bf16>(gpu, RopeLayout::RotateHalf);
    step_parity::<Bf16>(gpu, RopeLayout::Interleaved);
}

/// The state after `steps` training steps, as bits: master weights, the
/// working copy and every step's loss.
fn run_steps<T: Dtype>(gpu: &Gpu, cfg: Config, seed: u64, d: &Data, steps: usize) -> Vec<u64>
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
{
    let params = init_params(&cfg, seed, 0.02);
    let mut model = GpuLlama::<T>::new(gpu, cfg, &params, d.batch, d.seq).expect("model");
    let batch =
        TrainBatch::new(gpu, cfg.vocab(), d.batch, d.seq, &d.ids, &d.targets).expect("batch");
    let mut bits = Vec::new();
    for _ in 0..steps {
        model.train_step(gpu, &batch, &OPT).expect("step");
        bits.push(model.last_loss(gpu).expect("loss").to_bits());
    }
    for t in model.master() {
        bits.extend(t.to_f64(gpu).expect("master").iter().map(|v| v.to_bits()));
    }
    for t in model.weights() {
        bits.extend(t.to_f64(gpu).expect("working").iter().map(|v| v.to_bits()));
    }
    bits
}

fn repeats<T: Dtype>(gpu: &Gpu)
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
{
    let cfg = Config::new(Shape {
        vocab: 512,
        d_model: 192,
        layers: 3,
        q_heads: 3,
        kv_heads: 1,
        head_dim: 64,
        ffn: 512,
        ..Shape::smollm2_135m()
    })
    .unwrap();
    let seed = SplitMix64::fresh_seed();
    println!("llama repeat {}: seed {seed}", T::SUFFIX);
    let d = data(&mut SplitMix64::new(seed), cfg.vocab(), 3, 200);
    let a = run_steps::<T>(gpu, cfg, seed, &d, 3);
    let b = run_steps::<T>(gpu, cfg, seed, &d, 3);
    let ok = a == b;
    println!(
        "RESULT bitwise_rerun llama_3_steps {} {}",
        T::SUFFIX,
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "three llama steps differ between two runs");
}

#[test]
fn llama_steps_repeat_bit_for_bit() {
    let Some(gpu) = gpu() else { return };
    repeats::<f32>(gpu);
    repeats::<Bf16>(gpu);
}

#[test]
fn llama_training_lowers_the_loss() {
    let Some(gpu) = gpu() else { return };
    let cfg = tiny(RopeLayout::RotateHalf);
    let seed = SplitMix64::fresh_seed();
    println!("llama training: seed {seed}");
    let mut d = data(&mut SplitMix64::new(seed), cfg.vocab(), 4, 64);
    // A learnable task: the next token is a fixed function of this one.
    d.targets = d.ids.iter().map(|&i| ((i * 7 + 3) % 96) as i32).collect();
    let params = init_params(&cfg, seed, 0.02);
    let mut model = GpuLlama::<Bf16>::new(gpu, cfg, &params, d.batch, d.seq).expect("model");
    let batch =
        TrainBatch::new(gpu, cfg.vocab(), d.batch, d.seq, &d.ids, &d.targets).expect("batch");
    let mut losses = Vec::new();
    for _ in 0..30 {
        model.train_step(gpu, &batch, &OPT).expect("step");
        losses.push(model.last_loss(gpu).expect("loss"));
    }
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    // The loss starts near ln(96) = 4.56 and must fall well below it.
    let ok = last < 0.5 * first && losses.iter().all(|l| l.is_finite());
    println!(
        "RESULT training llama_learns bf16 first={first:.3} last={last:.3} {}",
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "loss went {first} -> {last}: {losses:?}");
}

#[test]
fn llama_rejects_bad_input() {
    let Some(gpu) = gpu() else { return };
    let cfg = tiny(RopeLayout::RotateHalf);
    let params = init_params(&cfg, 1, 0.02);
    assert!(GpuLlama::<f32>::new(gpu, cfg, &params[1..], 1, 8).is_err());
    // 4 query heads over 3 kv heads: no `Config` holds it any more.
    assert!(
        Config::new(Shape {
            kv_heads: 3,
            ..cfg.shape()
        })
        .is_err()
    );
    // A head dimension the config allows and the kernels do not.
    let bad = Config::new(Shape {
        head_dim: 32,
        ..cfg.shape()
    })
    .expect("an even head dimension");
    assert!(GpuLlama::<f32>::new(gpu, bad, &init_params(&bad, 1, 0.02), 1, 8).is_err());
    assert!(TrainBatch::new(gpu, cfg.vocab(), 1, 8, &[0; 7], &[0; 8]).is_err());
    assert!(TrainBatch::new(gpu, cfg.vocab(), 0, 8, &[], &[]).is_err());
    assert!(TrainBatch::new(gpu, cfg.vocab(), usize::MAX, 2, &[], &[]).is_err());
    assert!(GpuLlama::<f32>::new(gpu, cfg, &params, 1, 0).is_err());
    assert!(TrainBatch::new(gpu, cfg.vocab(), 1, 2, &[0, 1], &[0, 96]).is_err());
    assert!(TrainBatch::new(gpu, cfg.vocab(), 1, 2, &[0, 96], &[0, 1]).is_err());
    let mut model = GpuLlama::<f32>::new(gpu, cfg, &params, 1, 8).expect("model");
    let other = TrainBatch::new(gpu, cfg.vocab(), 2, 4, &[0; 8], &[0; 8]).expect("batch");
    assert!(model.forward_backward(gpu, &other).is_err());
}

/// The multi-tensor optimiser against the per-tensor kernels (the same bits)
/// and the norm against the reference, on sizes that leave partial chunks
/// and partial groups of four.
fn multi_tensor<T: Dtype>(gpu: &Gpu)
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
{
    use kolm_kernels::Tensor;
    use kolm_kernels::ops::{self, AdamWParam};
    let seed = SplitMix64::fresh_seed();
    println!("multi-tensor optimiser {}: seed {seed}", T::SUFFIX);
    let mut g = SplitMix64::new(seed);
    let sizes = [1usize, 3, 4, 7, 576, 32768, 32769, 100_003];
    let host = |g: &mut SplitMix64, n: usize, a: f64| g.vec(n, a);
    let grads: Vec<Vec<f64>> = sizes.iter().map(|&n| host(&mut g, n, 1.0)).collect();
    let grads_t: Vec<Vec<f64>> = grads
        .iter()
        .map(|v| v.iter().map(|&x| T::from_f64(x).to_f64()).collect())
        .collect();
    let p0: Vec<Vec<f32>> = sizes
        .iter()
        .map(|&n| host(&mut g, n, 1.0).iter().map(|&x| x as f32).collect())
        .collect();
    let up32 = |v: &[f32]| Tensor::from_host(gpu, v, &[v.len()]).expect("upload");
    let up_t = |v: &[f64]| Tensor::<T>::from_f64(gpu, v, &[v.len()]).expect("upload");
    let gts: Vec<Tensor<T>> = grads.iter().map(|v| up_t(v)).collect();
    let refs: Vec<&Tensor<T>> = gts.iter().collect();

    let clip = ops::clip_grad_norm_multi(gpu, &refs, 3.0).expect("norm");
    let slices: Vec<&[f64]> = grads_t.iter().map(Vec::as_slice).collect();
    let want = cpu::grad_norm(&slices);
    let got = f64::from(clip.norm.to_host(gpu).expect("norm")[0]);
    check("multi_norm", T::SUFFIX, ((got - want) / want).abs(), 1e-6);

    let config = AdamWConfig {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 2,
    };
    // Moments start non-zero (step 2), the same for both paths.
    let m0: Vec<Vec<f32>> = sizes
        .iter()
        .map(|&n| host(&mut g, n, 0.1).iter().map(|&x| x as f32).collect())
        .collect();
    let v0: Vec<Vec<f32>> = sizes
        .iter()
        .map(|&n| {
            host(&mut g, n, 0.1)
                .iter()
                .map(|&x| (x * x) as f32)
                .collect()
        })
        .collect();
    let state = || {
        let p: Vec<Tensor<f32>> = p0.iter().map(|v| up32(v)).collect();
        let m: Vec<Tensor<f32>> = m0.iter().map(|v| up32(v)).collect();
        let v: Vec<Tensor<f32>> = v0.iter().map(|v| up32(v)).collect();
        let w: Vec<Tensor<T>> = sizes
            .iter()
            .map(|&n| {
                let mut t = Tensor::<T>::zeros(gpu, &[n]).expect("alloc");
                t.poison(gpu).expect("poison");
                t
            })
            .collect();
        (p, m, v, w)
    };
    let (mut p1, mut m1, mut v1, mut w1) = state();
    for i in 0..sizes.len() {
        ops::adamw_step_with_copy(
            gpu,
            &mut p1[i],
            &gts[i],
            &mut m1[i],
            &mut v1[i],
            &config,
            Some(&clip.scale),
            &mut w1[i],
        )
        .expect("adamw");
    }
    let (mut p2, mut m2, mut v2, mut w2) = state();
    let mut params: Vec<AdamWParam<'_, T>> = p2
        .iter_mut()
        .zip(&gts)
        .zip(m2.iter_mut().zip(v2.iter_mut()))
        .zip(w2.iter_mut())
        .map(|(((master, grad), (m, v)), working)| AdamWParam {
            master,
            grad,
            m,
            v,
            working,
        })
        .collect();
    ops::adamw_multi(gpu, &mut params, &config, &clip.scale).expect("adamw multi");
    drop(params);
    let bits32 = |t: &[Tensor<f32>]| -> Vec<u32> {
        t.iter()
            .flat_map(|x| x.to_host(gpu).expect("download"))
            .map(f32::to_bits)
            .collect()
    };
    let bits_t = |t: &[Tensor<T>]| -> Vec<u64> {
        t.iter()
            .flat_map(|x| x.to_f64(gpu).expect("download"))
            .map(f64::to_bits)
            .collect()
    };
    let ok = bits32(&p1) == bits32(&p2)
        && bits32(&m1) == bits32(&m2)
        && bits32(&v1) == bits32(&v2)
        && bits_t(&w1) == bits_t(&w2);
    println!(
        "RESULT same_bits adamw_multi {} {}",
        T::SUFFIX,
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "adamw_multi differs from adamw_step_with_copy");
}

#[test]
fn multi_tensor_optimizer_matches_per_tensor() {
    let Some(gpu) = gpu() else { return };
    multi_tensor::<f32>(gpu);
    multi_tensor::<Bf16>(gpu);
}
