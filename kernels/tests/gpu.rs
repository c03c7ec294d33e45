//! GPU parity and determinism: every kernel against its `f64` CPU reference
//! by `||out - ref|| / ||ref||` (f32 < 1e-5, bf16 < 1e-2), on fresh random
//! inputs (the seed is printed), with outputs poisoned with NaN before each
//! run so an unwritten element fails the check; then two runs compared bit
//! for bit, and row-wise kernels compared across batch sizes.
//!
//! Without a GPU each test prints `SKIP: <reason>` and returns;
//! `KOLM_REQUIRE_GPU=1` (set by scripts/gpu-check.sh) makes that a failure.
//! Each check prints one `RESULT` line that the script gathers into a table.

mod common;

use common::{gpu, rel_l2};
use kolm_kernels::cpu::{self, AdamWConfig, AttentionShape, LoraShape, RopeLayout, RopeTable};
use kolm_kernels::ops::{self, CrossEntropyOut, EmbeddingPlan, LoraWeights, RopeTables};
use kolm_kernels::rng::SplitMix64;
use kolm_kernels::{Dtype, Gpu, Tensor};

type Bf16 = half::bf16;

fn rng(test: &str) -> SplitMix64 {
    let seed = SplitMix64::fresh_seed();
    println!("{test}: seed {seed}");
    SplitMix64::new(seed)
}

fn tol<T: Dtype>() -> f64 {
    if T::SUFFIX == "f32" { 1e-5 } else { 1e-2 }
}

/// Random values already rounded to `T`, as `f64` for the reference.
fn input<T: Dtype>(g: &mut SplitMix64, len: usize, a: f64) -> Vec<f64> {
    g.vec(len, a)
        .into_iter()
        .map(|v| T::from_f64(v).to_f64())
        .collect()
}

fn up<T: Dtype>(gpu: &Gpu, v: &[f64], shape: &[usize]) -> Tensor<T> {
    Tensor::from_f64(gpu, v, shape).expect("upload")
}

fn poisoned<T: Dtype>(gpu: &Gpu, shape: &[usize]) -> Tensor<T> {
    let mut t = Tensor::zeros(gpu, shape).expect("alloc");
    t.poison(gpu).expect("poison");
    t
}

fn host<T: Dtype>(gpu: &Gpu, t: &Tensor<T>) -> Vec<f64> {
    t.to_f64(gpu).expect("download")
}

fn parity(name: &str, dtype: &str, got: &[f64], want: &[f64], tol: f64) {
    let e = rel_l2(got, want);
    let ok = e < tol;
    println!(
        "RESULT parity {name} {dtype} rel_l2={e:.2e} tol={tol:.0e} {}",
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "{name} {dtype}: relative L2 error {e:e} >= {tol:e}");
}

fn same_bits(name: &str, dtype: &str, what: &str, a: &[f64], b: &[f64]) {
    let ok = a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    println!(
        "RESULT {what} {name} {dtype} {}",
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "{name} {dtype}: {what} differs");
}

// ---------------------------------------------------------------- RMSNorm

fn rmsnorm<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, n: usize, d: usize) {
    let eps = 1e-5;
    let x = input::<T>(g, n * d, 2.0);
    let w = input::<T>(g, d, 1.5);
    let dy = input::<T>(g, n * d, 1.0);
    let (xt, wt, dyt) = (
        up::<T>(gpu, &x, &[n, d]),
        up::<T>(gpu, &w, &[d]),
        up::<T>(gpu, &dy, &[n, d]),
    );
    let run = |xt: &Tensor<T>, dyt: &Tensor<T>, rows: usize| {
        let mut y = poisoned::<T>(gpu, &[rows, d]);
        let mut rstd = poisoned::<f32>(gpu, &[rows]);
        let mut dx = poisoned::<T>(gpu, &[rows, d]);
        let mut dw = poisoned::<T>(gpu, &[d]);
        ops::rmsnorm_fwd(gpu, xt, &wt, eps as f32, &mut y, &mut rstd).unwrap();
        ops::rmsnorm_bwd(gpu, dyt, xt, &wt, &rstd, &mut dx, &mut dw, false).unwrap();
        (host(gpu, &y), host(gpu, &dx), host(gpu, &dw))
    };
    let (y, dx, dw) = run(&xt, &dyt, n);
    let (y_ref, rstd_ref) = cpu::rmsnorm_fwd(&x, &w, n, d, eps);
    let (dx_ref, dw_ref) = cpu::rmsnorm_bwd(&dy, &x, &w, &rstd_ref, n, d);
    let ty = T::SUFFIX;
    parity("rmsnorm_fwd", ty, &y, &y_ref, tol::<T>());
    parity("rmsnorm_bwd_dx", ty, &dx, &dx_ref, tol::<T>());
    parity("rmsnorm_bwd_dw", ty, &dw, &dw_ref, tol::<T>());
    let (y2, dx2, dw2) = run(&xt, &dyt, n);
    same_bits(
        "rmsnorm",
        ty,
        "rerun",
        &[y, dx.clone(), dw].concat(),
        &[y2.clone(), dx2, dw2].concat(),
    );
    // The first rows alone give the same bits for those rows.
    let k = n / 3;
    let (xs, dys) = (
        up::<T>(gpu, &x[..k * d], &[k, d]),
        up::<T>(gpu, &dy[..k * d], &[k, d]),
    );
    let (ys, dxs, _) = run(&xs, &dys, k);
    same_bits(
        "rmsnorm",
        ty,
        "batch-invariance",
        &[ys, dxs].concat(),
        &[&y2[..k * d], &dx[..k * d]].concat(),
    );
}

#[test]
fn rmsnorm_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rmsnorm");
    rmsnorm::<f32>(gpu, &mut g, 67, 576);
    rmsnorm::<Bf16>(gpu, &mut g, 67, 576);
    rmsnorm::<f32>(gpu, &mut g, 9, 2049);
    // The vectorised kernels at the smallest and largest chunks per lane,
    // with a last block of partial rows (16 rows per block in the backward).
    rmsnorm::<f32>(gpu, &mut g, 40, 64);
    rmsnorm::<f32>(gpu, &mut g, 300, 1024);
    rmsnorm::<Bf16>(gpu, &mut g, 70, 2048);
    rmsnorm::<Bf16>(gpu, &mut g, 33, 8);
    // Many blocks in the backward, with a last block of partial rows: at
    // d = 576 bf16 (K = 3, column sums in shared memory) 16 rows per block
    // up to 8192 rows, 24 at 9000; at d = 1024 f32 (K = 8, in registers)
    // 24 rows per block at 4500.
    rmsnorm::<Bf16>(gpu, &mut g, 5000, 576);
    rmsnorm::<Bf16>(gpu, &mut g, 9000, 576);
    rmsnorm::<f32>(gpu, &mut g, 4500, 1024);
}

/// The grouped backward (`rmsnorm_bwd_gvec{L}x{K}`: several rows per warp,
/// L lanes per row) at each lane count and chunk count it serves, with a
/// last group of rows cut short (16383 = 4 rows short of a block's 64 at
/// d = 576 bf16, one short of a warp's 4) and tiny batches (rows of a warp's
/// group that do not exist): parity, rerun bits and batch invariance.
#[test]
fn rmsnorm_grouped_backward_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rmsnorm_gvec");
    rmsnorm::<Bf16>(gpu, &mut g, 16383, 576); // 8 x 9
    rmsnorm::<Bf16>(gpu, &mut g, 3, 576);
    rmsnorm::<Bf16>(gpu, &mut g, 1001, 320); // 8 x 5
    rmsnorm::<Bf16>(gpu, &mut g, 999, 448); // 8 x 7
    rmsnorm::<Bf16>(gpu, &mut g, 517, 1152); // 16 x 9
    rmsnorm::<Bf16>(gpu, &mut g, 130, 640); // 16 x 5
    rmsnorm::<f32>(gpu, &mut g, 2049, 576); // 16 x 9
    rmsnorm::<f32>(gpu, &mut g, 5, 448); // 16 x 7
    rmsnorm::<f32>(gpu, &mut g, 123, 160); // 8 x 5
}

/// dw of the 16-byte backward (per-block partial sums, then `sum_chunks`
/// in block order) at the bench's shape, with a short last block, and with
/// warps that get no rows: against the CPU, with `accumulate_dw`, and rerun
/// bit for bit after launches of other block counts. (The seeds keep the
/// names of the fifth pass's in-launch fold, whose run these inputs are
/// from.)
fn rmsnorm_dw<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, n: usize, d: usize) {
    let ty = T::SUFFIX;
    let name = format!("rmsnorm_dw_{n}x{d}");
    let x = input::<T>(g, n * d, 2.0);
    let w = input::<T>(g, d, 1.5);
    let dy = input::<T>(g, n * d, 1.0);
    let old = input::<T>(g, d, 1.0);
    let (xt, wt, dyt) = (
        up::<T>(gpu, &x, &[n, d]),
        up::<T>(gpu, &w, &[d]),
        up::<T>(gpu, &dy, &[n, d]),
    );
    let mut y = poisoned::<T>(gpu, &[n, d]);
    let mut rstd = poisoned::<f32>(gpu, &[n]);
    ops::rmsnorm_fwd(gpu, &xt, &wt, 1e-5, &mut y, &mut rstd).unwrap();
    let bwd = |accumulate: bool| {
        let mut dx = poisoned::<T>(gpu, &[n, d]);
        let mut dw = if accumulate {
            up::<T>(gpu, &old, &[d])
        } else {
            poisoned::<T>(gpu, &[d])
        };
        ops::rmsnorm_bwd(gpu, &dyt, &xt, &wt, &rstd, &mut dx, &mut dw, accumulate).unwrap();
        host(gpu, &dw)
    };
    let dw = bwd(false);
    let dw_acc = bwd(true);
    let (_, rstd_ref) = cpu::rmsnorm_fwd(&x, &w, n, d, 1e-5);
    let (_, dw_ref) = cpu::rmsnorm_bwd(&dy, &x, &w, &rstd_ref, n, d);
    all_finite(
        &format!("{name}_{ty}"),
        &[dw.clone(), dw_acc.clone()].concat(),
    );
    parity(&name, ty, &dw, &dw_ref, tol::<T>());
    let acc_ref: Vec<f64> = old.iter().zip(&dw_ref).map(|(a, b)| a + b).collect();
    parity(
        &format!("{name}_accumulate"),
        ty,
        &dw_acc,
        &acc_ref,
        tol::<T>(),
    );
    // Other block counts in between, then the same bits again.
    let mut g2 = rng("rmsnorm_dw_fold_other");
    rmsnorm::<T>(gpu, &mut g2, 100, d);
    same_bits(
        &name,
        ty,
        "rerun",
        &[dw, dw_acc].concat(),
        &[bwd(false), bwd(true)].concat(),
    );
}

#[test]
fn rmsnorm_dw_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rmsnorm_dw_fold");
    // bf16 576 (shared-memory backward): 512 blocks of 32 rows (the bench's
    // shape); 417 blocks of 40 rows (a last block of 20 rows); 3 blocks of
    // 16 rows (the last has 3 rows, so 5 of its warps have none). f32 512
    // (shared memory, K = 4) and 1024 (registers, K = 8).
    rmsnorm_dw::<Bf16>(gpu, &mut g, 16384, 576);
    rmsnorm_dw::<Bf16>(gpu, &mut g, 16660, 576);
    rmsnorm_dw::<Bf16>(gpu, &mut g, 35, 576);
    rmsnorm_dw::<Bf16>(gpu, &mut g, 16383, 576);
    rmsnorm_dw::<f32>(gpu, &mut g, 7000, 512);
    rmsnorm_dw::<f32>(gpu, &mut g, 3000, 1024);
}

/// dw of the grouped backward, summed in its own launch by tail blocks
/// launched after the main ones (column slices of 16, one tail block per
/// slice up to the multiprocessor count): more tail blocks than main blocks
/// (2 main blocks and 36 tail blocks; 1 main block of 1 row), 72 slices
/// (bf16 1152, 16 lanes: several slices per tail block on a device of fewer
/// than 72 multiprocessors), a short last block, f32 forms; each against
/// the CPU, with `accumulate_dw`, and rerun bit for bit after launches of
/// other block and tail counts (every partial must be back at its marker
/// after every launch).
#[test]
fn rmsnorm_dw_tail_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rmsnorm_dw_tail");
    rmsnorm_dw::<Bf16>(gpu, &mut g, 40, 576); // 2 blocks, a short last one
    rmsnorm_dw::<Bf16>(gpu, &mut g, 1, 576); // 1 block of 1 row
    rmsnorm_dw::<Bf16>(gpu, &mut g, 700, 1152); // 44 blocks, 36 slices
    rmsnorm_dw::<Bf16>(gpu, &mut g, 20001, 1152); // 251 blocks, a 1-row last one
    rmsnorm_dw::<Bf16>(gpu, &mut g, 5000, 320);
    rmsnorm_dw::<f32>(gpu, &mut g, 2049, 576); // 16 x 9
    rmsnorm_dw::<f32>(gpu, &mut g, 300, 160); // 8 x 5
    // Back to back, no host synchronisation in between, then again.
    let cases: Vec<_> = [(16384, 576), (3, 576), (517, 1152), (16383, 576)]
        .into_iter()
        .map(|(n, d)| {
            let x = input::<Bf16>(&mut g, n * d, 2.0);
            let w = input::<Bf16>(&mut g, d, 1.5);
            let dy = input::<Bf16>(&mut g, n * d, 1.0);
            (n, d, x, w, dy)
        })
        .collect();
    let run = || {
        let mut out = Vec::new();
        for (n, d, x, w, dy) in &cases {
            let (n, d) = (*n, *d);
            let (xt, wt, dyt) = (
                up::<Bf16>(gpu, x, &[n, d]),
                up::<Bf16>(gpu, w, &[d]),
                up::<Bf16>(gpu, dy, &[n, d]),
            );
            let mut y = poisoned::<Bf16>(gpu, &[n, d]);
            let mut rstd = poisoned::<f32>(gpu, &[n]);
            let mut dx = poisoned::<Bf16>(gpu, &[n, d]);
            let mut dw = poisoned::<Bf16>(gpu, &[d]);
            ops::rmsnorm_fwd(gpu, &xt, &wt, 1e-5, &mut y, &mut rstd).unwrap();
            for _ in 0..3 {
                ops::rmsnorm_bwd(gpu, &dyt, &xt, &wt, &rstd, &mut dx, &mut dw, false).unwrap();
            }
            let (_, rstd_ref) = cpu::rmsnorm_fwd(x, w, n, d, 1e-5);
            let (_, dw_ref) = cpu::rmsnorm_bwd(dy, x, w, &rstd_ref, n, d);
            let got = host(gpu, &dw);
            parity(
                &format!("rmsnorm_dw_tail_chain_{n}x{d}"),
                "bf16",
                &got,
                &dw_ref,
                tol::<Bf16>(),
            );
            out.extend(got);
        }
        out
    };
    let a = run();
    let b = run();
    same_bits("rmsnorm_dw_tail_chain", "bf16", "rerun", &a, &b);
}

// --------------------------------------------------------- SiLU / SwiGLU

fn swiglu<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, n: usize) {
    let ty = T::SUFFIX;
    let x = input::<T>(g, n, 6.0);
    let u = input::<T>(g, n, 2.0);
    let dy = input::<T>(g, n, 1.0);
    let (xt, ut, dyt) = (
        up::<T>(gpu, &x, &[n]),
        up::<T>(gpu, &u, &[n]),
        up::<T>(gpu, &dy, &[n]),
    );
    let run = || {
        let mut y = poisoned::<T>(gpu, &[n]);
        let mut dx = poisoned::<T>(gpu, &[n]);
        let mut s = poisoned::<T>(gpu, &[n]);
        let mut dg = poisoned::<T>(gpu, &[n]);
        let mut du = poisoned::<T>(gpu, &[n]);
        ops::silu_fwd(gpu, &xt, &mut y).unwrap();
        ops::silu_bwd(gpu, &dyt, &xt, &mut dx).unwrap();
        ops::swiglu_fwd(gpu, &xt, &ut, &mut s).unwrap();
        ops::swiglu_bwd(gpu, &dyt, &xt, &ut, &mut dg, &mut du).unwrap();
        [&y, &dx, &s, &dg, &du].map(|t| host(gpu, t))
    };
    let out = run();
    let (dg_ref, du_ref) = cpu::swiglu_bwd(&dy, &x, &u);
    parity("silu_fwd", ty, &out[0], &cpu::silu(&x), tol::<T>());
    parity("silu_bwd", ty, &out[1], &cpu::silu_bwd(&dy, &x), tol::<T>());
    parity(
        "swiglu_fwd",
        ty,
        &out[2],
        &cpu::swiglu_fwd(&x, &u),
        tol::<T>(),
    );
    parity("swiglu_bwd_dgate", ty, &out[3], &dg_ref, tol::<T>());
    parity("swiglu_bwd_dup", ty, &out[4], &du_ref, tol::<T>());
    same_bits("silu/swiglu", ty, "rerun", &out.concat(), &run().concat());
}

#[test]
fn silu_swiglu_match_reference_and_repeat() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("swiglu");
    // A multiple of 8 takes the 16-byte kernels, an odd count the scalar ones.
    for n in [100_000, 100_003] {
        swiglu::<f32>(gpu, &mut g, n);
        swiglu::<Bf16>(gpu, &mut g, n);
    }
}

// ------------------------------------------------------------------ RoPE

fn rope<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, layout: RopeLayout, d: usize) {
    let ty = T::SUFFIX;
    let (b, t, h) = (2, 77, 3);
    let table = RopeTable::new(128, d, 10_000.0);
    let tables = RopeTables::new(gpu, &table).unwrap();
    let x = input::<T>(g, b * t * h * d, 1.0);
    let dy = input::<T>(g, x.len(), 1.0);
    let (xt, dyt) = (
        up::<T>(gpu, &x, &[b, t, h, d]),
        up::<T>(gpu, &dy, &[b, t, h, d]),
    );
    let run = || {
        let mut y = poisoned::<T>(gpu, &[b, t, h, d]);
        let mut dx = poisoned::<T>(gpu, &[b, t, h, d]);
        ops::rope_fwd(gpu, &xt, &tables, layout, &mut y).unwrap();
        ops::rope_bwd(gpu, &dyt, &tables, layout, &mut dx).unwrap();
        (host(gpu, &y), host(gpu, &dx))
    };
    let (y, dx) = run();
    let name = format!("rope_{layout:?}_d{d}");
    parity(
        &format!("{name}_fwd"),
        ty,
        &y,
        &cpu::rope_fwd(&x, &table, t, h, layout),
        tol::<T>(),
    );
    parity(
        &format!("{name}_bwd"),
        ty,
        &dx,
        &cpu::rope_bwd(&dy, &table, t, h, layout),
        tol::<T>(),
    );
    let (y2, dx2) = run();
    same_bits(&name, ty, "rerun", &[y, dx].concat(), &[y2, dx2].concat());
}

#[test]
fn rope_matches_reference_in_both_layouts() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rope");
    // d = 64: the 16-byte kernel; d = 12: the scalar one, except f32
    // interleaved (three chunks of 4).
    for d in [64, 12] {
        for layout in [RopeLayout::Interleaved, RopeLayout::RotateHalf] {
            rope::<f32>(gpu, &mut g, layout, d);
            rope::<Bf16>(gpu, &mut g, layout, d);
        }
    }
}

// --------------------------------------------------------- cross-entropy

fn xent<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, n: usize, vocab: usize) {
    let ty = T::SUFFIX;
    let logits = input::<T>(g, n * vocab, 8.0);
    let targets: Vec<i32> = (0..n)
        .map(|i| {
            if i % 7 == 3 {
                -1
            } else {
                g.below(vocab as u64) as i32
            }
        })
        .collect();
    let dloss = input::<f32>(g, n, 1.0);
    let lt = up::<T>(gpu, &logits, &[n, vocab]);
    let tt = Tensor::from_host(gpu, &targets, &[n]).unwrap();
    let dlt = up::<f32>(gpu, &dloss, &[n]);
    let scale = 1.0 / n as f32;
    let run = |lt: &Tensor<T>, tt: &Tensor<i32>, rows: usize| {
        let mut out = CrossEntropyOut::zeros(gpu, rows).unwrap();
        out.loss.poison(gpu).unwrap();
        out.lse.poison(gpu).unwrap();
        let mut dfused = poisoned::<T>(gpu, &[rows, vocab]);
        ops::cross_entropy_fwd(gpu, lt, tt, &mut out, Some((&mut dfused, scale))).unwrap();
        let mut dl = poisoned::<T>(gpu, &[rows, vocab]);
        let dlt = up::<f32>(gpu, &dloss[..rows], &[rows]);
        ops::cross_entropy_bwd(gpu, lt, tt, &out.lse, &dlt, &mut dl).unwrap();
        let argmax = out.argmax.to_host(gpu).unwrap();
        (
            host(gpu, &out.loss),
            argmax,
            host(gpu, &dfused),
            host(gpu, &dl),
        )
    };
    let (loss, argmax, dfused, dl) = run(&lt, &tt, n);
    let rows = cpu::cross_entropy_fwd(&logits, &targets, vocab);
    let loss_ref: Vec<f64> = rows.iter().map(|r| r.loss).collect();
    parity(
        "xent_fwd_loss",
        ty,
        &loss,
        &loss_ref,
        tol::<f32>().max(if ty == "f32" { 0.0 } else { 1e-5 }),
    );
    let argmax_ok = argmax.iter().zip(&rows).all(|(a, r)| *a as u32 == r.argmax);
    println!(
        "RESULT exact xent_argmax {ty} {}",
        if argmax_ok { "PASS" } else { "FAIL" }
    );
    assert!(argmax_ok, "argmax differs from the reference");
    let uniform = vec![f64::from(scale); n];
    parity(
        "xent_fwd_fused_grad",
        ty,
        &dfused,
        &cpu::cross_entropy_bwd(&logits, &targets, &uniform, vocab),
        tol::<T>(),
    );
    parity(
        "xent_bwd",
        ty,
        &dl,
        &cpu::cross_entropy_bwd(&logits, &targets, &dloss, vocab),
        tol::<T>(),
    );
    // In place: the gradient overwrites the logits.
    let mut inplace = up::<T>(gpu, &logits, &[n, vocab]);
    let mut out = CrossEntropyOut::zeros(gpu, n).unwrap();
    ops::cross_entropy_fwd_grad_inplace(gpu, &mut inplace, &tt, &mut out, scale).unwrap();
    same_bits(
        "xent_inplace",
        ty,
        "equals-fused",
        &host(gpu, &inplace),
        &dfused,
    );
    let _ = dlt;
    let (loss2, _, dfused2, dl2) = run(&lt, &tt, n);
    same_bits(
        "xent",
        ty,
        "rerun",
        &[loss.clone(), dfused.clone(), dl].concat(),
        &[loss2, dfused2, dl2].concat(),
    );
    let k = n / 2;
    let ls = up::<T>(gpu, &logits[..k * vocab], &[k, vocab]);
    let ts = Tensor::from_host(gpu, &targets[..k], &[k]).unwrap();
    let (loss_s, _, dfused_s, _) = run(&ls, &ts, k);
    same_bits(
        "xent",
        ty,
        "batch-invariance",
        &[loss_s, dfused_s].concat(),
        &[&loss[..k], &dfused[..k * vocab]].concat(),
    );
}

#[test]
fn cross_entropy_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("xent");
    // 1000 takes the 16-byte kernel, 1001 the scalar one.
    xent::<f32>(gpu, &mut g, 37, 1000);
    xent::<Bf16>(gpu, &mut g, 37, 1000);
    xent::<f32>(gpu, &mut g, 37, 1001);
    xent::<Bf16>(gpu, &mut g, 37, 1001);
    xent::<f32>(gpu, &mut g, 9, 49_152);
    xent::<Bf16>(gpu, &mut g, 9, 49_152);
}

// -------------------------------------------------------------- embedding

fn embedding<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, d: usize) {
    let ty = T::SUFFIX;
    let (vocab, n) = (301, 1000);
    let table = input::<T>(g, vocab * d, 1.0);
    // Small ids repeat often; some tokens never appear.
    let ids: Vec<u32> = (0..n)
        .map(|_| {
            let range = if g.below(2) == 0 { 8 } else { 250 };
            g.below(range) as u32
        })
        .collect();
    let dout = input::<T>(g, n * d, 1.0);
    let plan = EmbeddingPlan::new(gpu, &ids, vocab).unwrap();
    let (tt, dt) = (
        up::<T>(gpu, &table, &[vocab, d]),
        up::<T>(gpu, &dout, &[n, d]),
    );
    let run = || {
        let mut out = poisoned::<T>(gpu, &[n, d]);
        let mut dtable = poisoned::<T>(gpu, &[vocab, d]);
        ops::embedding_fwd(gpu, &tt, &plan, &mut out).unwrap();
        ops::embedding_bwd(gpu, &dt, &plan, &mut dtable, false).unwrap();
        (host(gpu, &out), host(gpu, &dtable))
    };
    let (out, dtable) = run();
    parity(
        "embedding_fwd",
        ty,
        &out,
        &cpu::embedding_fwd(&table, &ids, d),
        tol::<T>(),
    );
    parity(
        "embedding_bwd",
        ty,
        &dtable,
        &cpu::embedding_bwd(&dout, &ids, vocab, d),
        tol::<T>(),
    );
    // accumulate: dtable starts as the table, gets the sums added.
    let mut acc = up::<T>(gpu, &table, &[vocab, d]);
    ops::embedding_bwd(gpu, &dt, &plan, &mut acc, true).unwrap();
    let acc_ref: Vec<f64> = cpu::embedding_bwd(&dout, &ids, vocab, d)
        .iter()
        .zip(&table)
        .map(|(g, t)| g + t)
        .collect();
    parity(
        "embedding_bwd_accumulate",
        ty,
        &host(gpu, &acc),
        &acc_ref,
        tol::<T>(),
    );
    let (out2, dtable2) = run();
    same_bits(
        "embedding",
        ty,
        "rerun",
        &[out, dtable].concat(),
        &[out2, dtable2].concat(),
    );
    assert!(
        EmbeddingPlan::new(gpu, &[0, vocab as u32], vocab).is_err(),
        "an id >= vocab is refused"
    );
}

#[test]
fn embedding_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("embedding");
    // d = 64: the 16-byte kernels; d = 5: the scalar ones; d = 576 (72
    // chunks of bf16, 144 of f32): rows that are not a multiple of 32 chunks;
    // d = 8192 f32: 2048 chunks, more than a 2D block holds (the flat form).
    for d in [64, 5, 576, 8192] {
        embedding::<f32>(gpu, &mut g, d);
        embedding::<Bf16>(gpu, &mut g, d);
    }
}

// ------------------------------------------------------ AdamW and clipping

fn optim<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64) {
    let ty = T::SUFFIX;
    let sizes = [10_007usize, 300_000, 513];
    let grads: Vec<Vec<f64>> = sizes.iter().map(|&n| input::<T>(g, n, 0.5)).collect();
    let gts: Vec<Tensor<T>> = grads
        .iter()
        .zip(&sizes)
        .map(|(v, &n)| up::<T>(gpu, v, &[n]))
        .collect();
    let refs: Vec<&Tensor<T>> = gts.iter().collect();
    let max_norm = 1.0;
    let clip = ops::clip_grad_norm(gpu, &refs, max_norm).unwrap();
    let norm = host(gpu, &clip.norm)[0];
    let scale = host(gpu, &clip.scale)[0];
    let gr: Vec<&[f64]> = grads.iter().map(Vec::as_slice).collect();
    let norm_ref = cpu::grad_norm(&gr);
    parity("grad_norm", ty, &[norm], &[norm_ref], 1e-6);
    parity(
        "clip_scale",
        ty,
        &[scale],
        &[cpu::clip_scale(norm_ref, max_norm as f64)],
        1e-6,
    );
    let clip2 = ops::clip_grad_norm(gpu, &refs, max_norm).unwrap();
    same_bits(
        "grad_norm",
        ty,
        "rerun",
        &[norm, scale],
        &[host(gpu, &clip2.norm)[0], host(gpu, &clip2.scale)[0]],
    );
    let mut scaled = up::<T>(gpu, &grads[2], &[sizes[2]]);
    ops::scale_by(gpu, &mut scaled, &clip.scale).unwrap();
    let want: Vec<f64> = grads[2].iter().map(|v| v * scale).collect();
    parity("clip_apply", ty, &host(gpu, &scaled), &want, tol::<T>());

    let n = sizes[0];
    let p0 = input::<f32>(g, n, 1.0);
    let m0 = input::<f32>(g, n, 0.1);
    let v0: Vec<f64> = input::<f32>(g, n, 0.01).iter().map(|x| x.abs()).collect();
    let cfg = AdamWConfig {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 7,
    };
    let run = || {
        let mut p = up::<f32>(gpu, &p0, &[n]);
        let mut m = up::<f32>(gpu, &m0, &[n]);
        let mut v = up::<f32>(gpu, &v0, &[n]);
        ops::adamw_step(
            gpu,
            &mut p,
            &gts[0],
            &mut m,
            &mut v,
            &cfg,
            Some(&clip.scale),
        )
        .unwrap();
        (host(gpu, &p), host(gpu, &m), host(gpu, &v))
    };
    let (p, m, v) = run();
    let (mut pr, mut mr, mut vr) = (p0.clone(), m0.clone(), v0.clone());
    // The reference gets the GPU's f32 clip factor: the factor itself was
    // checked above; here the update is under test.
    cpu::adamw_step(&mut pr, &grads[0], &mut mr, &mut vr, &cfg, scale);
    let delta = |a: &[f64]| a.iter().zip(&p0).map(|(x, y)| x - y).collect::<Vec<_>>();
    parity("adamw_update", ty, &delta(&p), &delta(&pr), 1e-5);
    parity("adamw_m", ty, &m, &mr, 1e-5);
    parity("adamw_v", ty, &v, &vr, 1e-5);
    let (p2, m2, v2) = run();
    same_bits(
        "adamw",
        ty,
        "rerun",
        &[p, m, v].concat(),
        &[p2, m2, v2].concat(),
    );
}

#[test]
fn adamw_and_clipping_match_reference_and_repeat() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("optim");
    optim::<f32>(gpu, &mut g);
    optim::<Bf16>(gpu, &mut g);
}

// ---------------------------------------------------------- matmul / LoRA

fn matmul<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64)
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
{
    let ty = T::SUFFIX;
    let (m, k, n) = (67, 129, 33);
    for ta in [false, true] {
        for tb in [false, true] {
            let a = input::<T>(g, m * k, 1.0);
            let b = input::<T>(g, k * n, 1.0);
            let at = up::<T>(gpu, &a, &if ta { [k, m] } else { [m, k] });
            let bt = up::<T>(gpu, &b, &if tb { [n, k] } else { [k, n] });
            let run = || {
                let mut c = poisoned::<T>(gpu, &[m, n]);
                ops::matmul(gpu, &at, ta, &bt, tb, &mut c, 1.0, 0.0).unwrap();
                host(gpu, &c)
            };
            let c = run();
            let name = format!("matmul_ta{}_tb{}", u8::from(ta), u8::from(tb));
            parity(
                &name,
                ty,
                &c,
                &cpu::matmul(&a, ta, &b, tb, m, k, n),
                tol::<T>(),
            );
            same_bits(&name, ty, "rerun", &c, &run());
        }
    }
    // A wrong shape is an error, not a launch.
    let a = Tensor::<T>::zeros(gpu, &[4, 5]).unwrap();
    let mut c = Tensor::<T>::zeros(gpu, &[4, 4]).unwrap();
    assert!(ops::matmul(gpu, &a, false, &a, false, &mut c, 1.0, 0.0).is_err());

    let s = LoraShape {
        m: 70,
        k: 96,
        n: 80,
        r: 8,
        scale: 2.0,
    };
    let x = input::<T>(g, s.m * s.k, 1.0);
    let w = input::<T>(g, s.n * s.k, 0.2);
    let a = input::<T>(g, s.r * s.k, 0.2);
    let b = input::<T>(g, s.n * s.r, 0.2);
    let dy = input::<T>(g, s.m * s.n, 1.0);
    let (xt, wt, at, bt, dyt) = (
        up::<T>(gpu, &x, &[s.m, s.k]),
        up::<T>(gpu, &w, &[s.n, s.k]),
        up::<T>(gpu, &a, &[s.r, s.k]),
        up::<T>(gpu, &b, &[s.n, s.r]),
        up::<T>(gpu, &dy, &[s.m, s.n]),
    );
    let lora = LoraWeights {
        w: &wt,
        a: &at,
        b: &bt,
        scale: s.scale as f32,
    };
    let mut xa = poisoned::<T>(gpu, &[s.m, s.r]);
    let mut y = poisoned::<T>(gpu, &[s.m, s.n]);
    ops::lora_fwd(gpu, &xt, &lora, &mut xa, &mut y).unwrap();
    let mut dxa = poisoned::<T>(gpu, &[s.m, s.r]);
    let mut dx = poisoned::<T>(gpu, &[s.m, s.k]);
    let mut da = poisoned::<T>(gpu, &[s.r, s.k]);
    let mut db = poisoned::<T>(gpu, &[s.n, s.r]);
    ops::lora_bwd(
        gpu, &dyt, &xt, &lora, &xa, &mut dxa, &mut dx, &mut da, &mut db,
    )
    .unwrap();
    let (dx_r, da_r, db_r) = cpu::lora_bwd(&dy, &x, &w, &a, &b, s);
    parity(
        "lora_fwd",
        ty,
        &host(gpu, &y),
        &cpu::lora_fwd(&x, &w, &a, &b, s),
        tol::<T>(),
    );
    parity("lora_bwd_dx", ty, &host(gpu, &dx), &dx_r, tol::<T>());
    parity("lora_bwd_da", ty, &host(gpu, &da), &da_r, tol::<T>());
    parity("lora_bwd_db", ty, &host(gpu, &db), &db_r, tol::<T>());
}

#[test]
fn matmul_and_lora_match_reference_and_repeat() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("matmul");
    matmul::<f32>(gpu, &mut g);
    matmul::<Bf16>(gpu, &mut g);
}

// -------------------------------------------------------------- attention

fn attention<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, s: AttentionShape) {
    let ty = T::SUFFIX;
    let qs = [s.batch, s.seq, s.q_heads, s.head_dim];
    let ks = [s.batch, s.seq, s.kv_heads, s.head_dim];
    let q = input::<T>(g, qs.iter().product(), 1.0);
    let k = input::<T>(g, ks.iter().product(), 1.0);
    let v = input::<T>(g, k.len(), 1.0);
    let dout = input::<T>(g, q.len(), 1.0);
    let run = |b: usize| {
        let qs = [b, s.seq, s.q_heads, s.head_dim];
        let ks = [b, s.seq, s.kv_heads, s.head_dim];
        let (nq, nk) = (qs.iter().product::<usize>(), ks.iter().product::<usize>());
        let (qt, kt, vt, dt) = (
            up::<T>(gpu, &q[..nq], &qs),
            up::<T>(gpu, &k[..nk], &ks),
            up::<T>(gpu, &v[..nk], &ks),
            up::<T>(gpu, &dout[..nq], &qs),
        );
        let mut o = poisoned::<T>(gpu, &qs);
        let mut lse = poisoned::<f32>(gpu, &[b, s.q_heads, s.seq]);
        ops::attention_fwd(gpu, &qt, &kt, &vt, &mut o, &mut lse).unwrap();
        let (mut dq, mut dk, mut dv) = (
            poisoned::<T>(gpu, &qs),
            poisoned::<T>(gpu, &ks),
            poisoned::<T>(gpu, &ks),
        );
        ops::attention_bwd(gpu, &dt, &qt, &kt, &vt, &o, &lse, &mut dq, &mut dk, &mut dv).unwrap();
        [&o, &dq, &dk, &dv]
            .map(|t| host(gpu, t))
            .into_iter()
            .chain([host(gpu, &lse)])
            .collect::<Vec<_>>()
    };
    let out = run(s.batch);
    let (o_ref, lse_ref) = cpu::attention_fwd(&q, &k, &v, &s);
    let (dq_ref, dk_ref, dv_ref) = cpu::attention_bwd(&dout, &q, &k, &v, &s);
    let name = format!("attention_d{}", s.head_dim);
    parity(&format!("{name}_fwd"), ty, &out[0], &o_ref, tol::<T>());
    parity(&format!("{name}_lse"), ty, &out[4], &lse_ref, 1e-5);
    parity(&format!("{name}_bwd_dq"), ty, &out[1], &dq_ref, tol::<T>());
    parity(&format!("{name}_bwd_dk"), ty, &out[2], &dk_ref, tol::<T>());
    parity(&format!("{name}_bwd_dv"), ty, &out[3], &dv_ref, tol::<T>());
    let again = run(s.batch);
    same_bits(&name, ty, "rerun", &out.concat(), &again.concat());
    // Batch element 0 alone gives the same bits.
    let one = run(1);
    let nq = s.seq * s.q_heads * s.head_dim;
    let nk = s.seq * s.kv_heads * s.head_dim;
    let nl = s.q_heads * s.seq;
    same_bits(
        &name,
        ty,
        "batch-invariance",
        &one.concat(),
        &[
            &out[0][..nq],
            &out[1][..nq],
            &out[2][..nk],
            &out[3][..nk],
            &out[4][..nl],
        ]
        .concat(),
    );
}

#[test]
fn attention_matches_reference_and_repeats() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("attention");
    let s = AttentionShape {
        batch: 2,
        seq: 150,
        q_heads: 6,
        kv_heads: 2,
        head_dim: 64,
    };
    attention::<f32>(gpu, &mut g, s);
    attention::<Bf16>(gpu, &mut g, s);
    let s = AttentionShape {
        batch: 2,
        seq: 70,
        q_heads: 4,
        kv_heads: 4,
        head_dim: 128,
    };
    attention::<f32>(gpu, &mut g, s);
    attention::<Bf16>(gpu, &mut g, s);
    // Five tiles of the tensor-core kernels (masked, skipped and full key
    // tiles), a group of three query heads per kv head.
    let s = AttentionShape {
        batch: 2,
        seq: 300,
        q_heads: 3,
        kv_heads: 1,
        head_dim: 64,
    };
    attention::<Bf16>(gpu, &mut g, s);
    // 128-row blocks of the tensor-core kernels (four warps of 32 rows):
    // one block of 17 rows (only warp 0 has rows), and five blocks of which
    // the last holds 8 rows (warps 1 to 3 have none).
    let s = AttentionShape {
        batch: 3,
        seq: 17,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 64,
    };
    attention::<Bf16>(gpu, &mut g, s);
    let s = AttentionShape {
        batch: 2,
        seq: 520,
        q_heads: 6,
        kv_heads: 2,
        head_dim: 64,
    };
    attention::<Bf16>(gpu, &mut g, s);
    // Long enough (seq >= 2048) for dk/dv per query head, f32 partials
    // summed in head order; 17 blocks of 128 rows, the last with 52.
    let s = AttentionShape {
        batch: 2,
        seq: 2100,
        q_heads: 2,
        kv_heads: 1,
        head_dim: 64,
    };
    attention::<Bf16>(gpu, &mut g, s);
}

/// More backward blocks than fit on an H100 at once (B = 16, T = 1024, 9
/// query heads over 3 kv heads: 384 blocks of the tensor-core backward for
/// 264 slots), so key blocks of one head run in different waves and dq's
/// key-block order must hold across them. Parity for batch element 0 (the
/// CPU reference at full batch would take minutes), bit-for-bit reruns,
/// and batch-size invariance against a batch of one.
///
/// Also at T = 2100 (33 query tiles, an odd count, 17 key blocks), where
/// the `wgmma` backward (the default on Hopper) splits its first key blocks
/// into near and far pieces with their own place in dq's order
/// (attention_wg_bwd.cu): 16 x 21 blocks (4 key blocks split) in several waves.
#[test]
fn attention_bwd_keeps_its_order_across_waves() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("attention_waves");
    for s in [
        AttentionShape {
            batch: 16,
            seq: 1024,
            q_heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
        AttentionShape {
            batch: 16,
            seq: 2100,
            q_heads: 3,
            kv_heads: 1,
            head_dim: 64,
        },
    ] {
        attention_bwd_waves(gpu, &mut g, s);
    }
}

fn attention_bwd_waves(gpu: &Gpu, g: &mut SplitMix64, s: AttentionShape) {
    let qs = [s.batch, s.seq, s.q_heads, s.head_dim];
    let ks = [s.batch, s.seq, s.kv_heads, s.head_dim];
    let q = input::<Bf16>(g, qs.iter().product(), 1.0);
    let k = input::<Bf16>(g, ks.iter().product(), 1.0);
    let v = input::<Bf16>(g, k.len(), 1.0);
    let dout = input::<Bf16>(g, q.len(), 1.0);
    let run = |b: usize| {
        let qs = [b, s.seq, s.q_heads, s.head_dim];
        let ks = [b, s.seq, s.kv_heads, s.head_dim];
        let (nq, nk) = (qs.iter().product::<usize>(), ks.iter().product::<usize>());
        let (qt, kt, vt, dt) = (
            up::<Bf16>(gpu, &q[..nq], &qs),
            up::<Bf16>(gpu, &k[..nk], &ks),
            up::<Bf16>(gpu, &v[..nk], &ks),
            up::<Bf16>(gpu, &dout[..nq], &qs),
        );
        let mut o = poisoned::<Bf16>(gpu, &qs);
        let mut lse = poisoned::<f32>(gpu, &[b, s.q_heads, s.seq]);
        ops::attention_fwd(gpu, &qt, &kt, &vt, &mut o, &mut lse).unwrap();
        let (mut dq, mut dk, mut dv) = (
            poisoned::<Bf16>(gpu, &qs),
            poisoned::<Bf16>(gpu, &ks),
            poisoned::<Bf16>(gpu, &ks),
        );
        ops::attention_bwd(gpu, &dt, &qt, &kt, &vt, &o, &lse, &mut dq, &mut dk, &mut dv).unwrap();
        [host(gpu, &dq), host(gpu, &dk), host(gpu, &dv)]
    };
    let out = run(s.batch);
    let nq = s.seq * s.q_heads * s.head_dim;
    let nk = s.seq * s.kv_heads * s.head_dim;
    // Batch element 0 against the reference.
    let s1 = AttentionShape { batch: 1, ..s };
    let (dq_ref, dk_ref, dv_ref) =
        cpu::attention_bwd(&dout[..nq], &q[..nq], &k[..nk], &v[..nk], &s1);
    let name = format!("attention_d64_waves_T{}", s.seq);
    let name = name.as_str();
    parity(
        &format!("{name}_bwd_dq"),
        "bf16",
        &out[0][..nq],
        &dq_ref,
        1e-2,
    );
    parity(
        &format!("{name}_bwd_dk"),
        "bf16",
        &out[1][..nk],
        &dk_ref,
        1e-2,
    );
    parity(
        &format!("{name}_bwd_dv"),
        "bf16",
        &out[2][..nk],
        &dv_ref,
        1e-2,
    );
    // Every element of every batch element written (no poison left).
    let finite = out.iter().all(|t| t.iter().all(|x| x.is_finite()));
    println!(
        "RESULT written {name} bf16 {}",
        if finite { "PASS" } else { "FAIL" }
    );
    assert!(finite, "{name}: an output element was left unwritten");
    let again = run(s.batch);
    same_bits(name, "bf16", "rerun", &out.concat(), &again.concat());
    let one = run(1);
    same_bits(
        name,
        "bf16",
        "batch-invariance",
        &one.concat(),
        &[&out[0][..nq], &out[1][..nk], &out[2][..nk]].concat(),
    );
}

/// Forward on `fg`, backward on `bg` (each with its own attention-path
/// switch), inputs uploaded to each: `[o, lse, dq, dk, dv]`.
#[allow(clippy::too_many_arguments)]
fn attention_on(
    fg: &Gpu,
    bg: &Gpu,
    s: AttentionShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    dout: &[f64],
) -> Vec<Vec<f64>> {
    let qs = [s.batch, s.seq, s.q_heads, s.head_dim];
    let ks = [s.batch, s.seq, s.kv_heads, s.head_dim];
    let ls = [s.batch, s.q_heads, s.seq];
    let mut o = poisoned::<Bf16>(fg, &qs);
    let mut lse = poisoned::<f32>(fg, &ls);
    ops::attention_fwd(
        fg,
        &up::<Bf16>(fg, q, &qs),
        &up::<Bf16>(fg, k, &ks),
        &up::<Bf16>(fg, v, &ks),
        &mut o,
        &mut lse,
    )
    .unwrap();
    let (o, lse) = (host(fg, &o), host(fg, &lse));
    let (mut dq, mut dk, mut dv) = (
        poisoned::<Bf16>(bg, &qs),
        poisoned::<Bf16>(bg, &ks),
        poisoned::<Bf16>(bg, &ks),
    );
    ops::attention_bwd(
        bg,
        &up::<Bf16>(bg, dout, &qs),
        &up::<Bf16>(bg, q, &qs),
        &up::<Bf16>(bg, k, &ks),
        &up::<Bf16>(bg, v, &ks),
        &up::<Bf16>(bg, &o, &qs),
        &up::<f32>(bg, &lse, &ls),
        &mut dq,
        &mut dk,
        &mut dv,
    )
    .unwrap();
    vec![o, lse, host(bg, &dq), host(bg, &dk), host(bg, &dv)]
}

/// Both bf16 d = 64 attention paths on one Hopper device: the `wgmma`
/// kernels (attention_wg_*.cu, the default there) and the `mma.sync` ones
/// (attention_tc.cu), each against the reference and rerun bit for bit, and
/// the `wgmma` backward also fed the `mma.sync` forward's o and lse (so a
/// backward failure is told apart from a forward one). Each path runs on a
/// `Gpu` of its own, so the shared one's switch never changes under the
/// other tests.
#[test]
fn attention_wgmma_and_mma_sync_paths_match_reference() {
    let Some(shared) = gpu() else { return };
    if !shared.has_sm90a() {
        let (major, minor) = shared.info().compute_capability;
        println!(
            "SKIP: attention_wgmma_and_mma_sync_paths_match_reference: the device is sm_{major}{minor}, wgmma needs sm_90a"
        );
        return;
    }
    let wg = Gpu::new(0).expect("a second handle on the GPU");
    wg.set_wgmma_attention(true).unwrap();
    let tc = Gpu::new(0).expect("a third handle on the GPU");
    tc.set_wgmma_attention(false).unwrap();
    let mut g = rng("attention_paths");
    // Partial tiles, a group of three, and a length where the mma.sync
    // backward splits into per-head dk/dv partials and the wgmma one splits
    // its first key blocks by query tiles.
    for s in [
        AttentionShape {
            batch: 2,
            seq: 300,
            q_heads: 6,
            kv_heads: 2,
            head_dim: 64,
        },
        AttentionShape {
            batch: 1,
            seq: 2100,
            q_heads: 3,
            kv_heads: 1,
            head_dim: 64,
        },
    ] {
        let qn = s.batch * s.seq * s.q_heads * s.head_dim;
        let kn = s.batch * s.seq * s.kv_heads * s.head_dim;
        let q = input::<Bf16>(&mut g, qn, 1.0);
        let k = input::<Bf16>(&mut g, kn, 1.0);
        let v = input::<Bf16>(&mut g, kn, 1.0);
        let dout = input::<Bf16>(&mut g, qn, 1.0);
        let (o_ref, lse_ref) = cpu::attention_fwd(&q, &k, &v, &s);
        let (dq_ref, dk_ref, dv_ref) = cpu::attention_bwd(&dout, &q, &k, &v, &s);
        let refs = [&o_ref, &lse_ref, &dq_ref, &dk_ref, &dv_ref];
        for (path, fg, bg) in [
            ("mma_sync", &tc, &tc),
            ("wgmma", &wg, &wg),
            ("mma_sync_fwd_wgmma_bwd", &tc, &wg),
        ] {
            let name = format!("attention_d64_T{}_{path}", s.seq);
            let out = attention_on(fg, bg, s, &q, &k, &v, &dout);
            for (i, what) in ["fwd", "lse", "bwd_dq", "bwd_dk", "bwd_dv"]
                .into_iter()
                .enumerate()
            {
                let tol = if what == "lse" { 1e-5 } else { 1e-2 };
                parity(&format!("{name}_{what}"), "bf16", &out[i], refs[i], tol);
            }
            let again = attention_on(fg, bg, s, &q, &k, &v, &dout);
            same_bits(&name, "bf16", "rerun", &out.concat(), &again.concat());
        }
    }
}

#[test]
fn shape_mismatches_are_errors() {
    let Some(gpu) = gpu() else { return };
    let x = Tensor::<f32>::zeros(gpu, &[4, 8]).unwrap();
    let w = Tensor::<f32>::zeros(gpu, &[7]).unwrap();
    let mut y = Tensor::<f32>::zeros(gpu, &[4, 8]).unwrap();
    let mut r = Tensor::<f32>::zeros(gpu, &[4]).unwrap();
    let e = ops::rmsnorm_fwd(gpu, &x, &w, 1e-5, &mut y, &mut r).unwrap_err();
    println!("RESULT errors shape-check all PASS ({e})");
    let q = Tensor::<f32>::zeros(gpu, &[1, 4, 3, 64]).unwrap();
    let k = Tensor::<f32>::zeros(gpu, &[1, 4, 2, 64]).unwrap();
    let mut o = Tensor::<f32>::zeros(gpu, &[1, 4, 3, 64]).unwrap();
    let mut lse = Tensor::<f32>::zeros(gpu, &[1, 3, 4]).unwrap();
    assert!(
        ops::attention_fwd(gpu, &q, &k, &k, &mut o, &mut lse).is_err(),
        "3 heads over 2 kv heads"
    );
}

// ------------------------------------------- fused projections' plumbing

/// RoPE read from (and its backward written into) columns of a wider
/// token-row tensor, as the fused q/k/v projection is used: the same bits
/// as the contiguous kernels on the extracted columns, other columns left
/// alone. Offsets that are and are not 16-byte aligned cover both kernels.
fn rope_cols<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, layout: RopeLayout, d: usize, off: usize) {
    let ty = T::SUFFIX;
    let (b, t, h) = (2, 45, 3);
    let width = off + h * d + 5;
    let table = RopeTable::new(64, d, 10_000.0);
    let tables = RopeTables::new(gpu, &table).unwrap();
    let wide = input::<T>(g, b * t * width, 1.0);
    let cols: Vec<f64> = wide
        .chunks(width)
        .flat_map(|r| r[off..off + h * d].to_vec())
        .collect();
    let wide_t = up::<T>(gpu, &wide, &[b * t, width]);
    let cols_t = up::<T>(gpu, &cols, &[b, t, h, d]);
    let name = format!("rope_cols_{layout:?}_d{d}_off{off}");

    let mut y = poisoned::<T>(gpu, &[b, t, h, d]);
    ops::rope_fwd_from_cols(gpu, &wide_t, off, &tables, layout, &mut y).unwrap();
    let mut y_ref = poisoned::<T>(gpu, &[b, t, h, d]);
    ops::rope_fwd(gpu, &cols_t, &tables, layout, &mut y_ref).unwrap();
    same_bits(
        &format!("{name}_fwd"),
        ty,
        "vs_contiguous",
        &host(gpu, &y),
        &host(gpu, &y_ref),
    );

    // Backward into the columns of a copy of `wide`: the rest must survive.
    let mut dx = up::<T>(gpu, &wide, &[b * t, width]);
    ops::rope_bwd_into_cols(gpu, &cols_t, &tables, layout, &mut dx, off).unwrap();
    let mut dx_ref = poisoned::<T>(gpu, &[b, t, h, d]);
    ops::rope_bwd(gpu, &cols_t, &tables, layout, &mut dx_ref).unwrap();
    let dx = host(gpu, &dx);
    let dx_ref = host(gpu, &dx_ref);
    let mut want = wide.clone();
    for (r, chunk) in dx_ref.chunks(h * d).enumerate() {
        want[r * width + off..r * width + off + h * d].copy_from_slice(chunk);
    }
    same_bits(&format!("{name}_bwd"), ty, "vs_contiguous", &dx, &want);
    // Out-of-range columns are a shape error, not a write past the row.
    let mut small = poisoned::<T>(gpu, &[b * t, h * d]);
    assert!(ops::rope_bwd_into_cols(gpu, &cols_t, &tables, layout, &mut small, 1).is_err());
}

#[test]
fn rope_through_fused_projection_columns() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rope_cols");
    for layout in [RopeLayout::Interleaved, RopeLayout::RotateHalf] {
        for off in [0, 64, 3] {
            rope_cols::<f32>(gpu, &mut g, layout, 64, off);
            rope_cols::<Bf16>(gpu, &mut g, layout, 64, off);
        }
    }
}

/// SwiGLU on a fused `[rows, 2f]` gate/up projection gives the unfused
/// kernels' bits (f a multiple of the chunk: 16-byte form; f = 13: scalar).
fn swiglu_fused<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, rows: usize, f: usize) {
    let ty = T::SUFFIX;
    let gu = input::<T>(g, rows * 2 * f, 3.0);
    let dy = input::<T>(g, rows * f, 1.0);
    let gate: Vec<f64> = gu.chunks(2 * f).flat_map(|r| r[..f].to_vec()).collect();
    let upv: Vec<f64> = gu.chunks(2 * f).flat_map(|r| r[f..].to_vec()).collect();
    let (gut, dyt) = (
        up::<T>(gpu, &gu, &[rows, 2 * f]),
        up::<T>(gpu, &dy, &[rows, f]),
    );
    let (gt, ut) = (
        up::<T>(gpu, &gate, &[rows, f]),
        up::<T>(gpu, &upv, &[rows, f]),
    );
    let mut y = poisoned::<T>(gpu, &[rows, f]);
    let mut dgu = poisoned::<T>(gpu, &[rows, 2 * f]);
    ops::swiglu_fused_fwd(gpu, &gut, &mut y).unwrap();
    ops::swiglu_fused_bwd(gpu, &dyt, &gut, &mut dgu).unwrap();
    let mut y_ref = poisoned::<T>(gpu, &[rows, f]);
    let (mut dg, mut du) = (
        poisoned::<T>(gpu, &[rows, f]),
        poisoned::<T>(gpu, &[rows, f]),
    );
    ops::swiglu_fwd(gpu, &gt, &ut, &mut y_ref).unwrap();
    ops::swiglu_bwd(gpu, &dyt, &gt, &ut, &mut dg, &mut du).unwrap();
    let name = format!("swiglu_fused_f{f}");
    same_bits(
        &format!("{name}_fwd"),
        ty,
        "vs_unfused",
        &host(gpu, &y),
        &host(gpu, &y_ref),
    );
    let (dg, du) = (host(gpu, &dg), host(gpu, &du));
    let want: Vec<f64> = dg
        .chunks(f)
        .zip(du.chunks(f))
        .flat_map(|(a, b)| [a, b].concat())
        .collect();
    same_bits(
        &format!("{name}_bwd"),
        ty,
        "vs_unfused",
        &host(gpu, &dgu),
        &want,
    );
    parity(
        &format!("{name}_fwd"),
        ty,
        &host(gpu, &y),
        &cpu::swiglu_fwd(&gate, &upv),
        tol::<T>(),
    );
}

#[test]
fn swiglu_on_fused_gate_up() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("swiglu_fused");
    for f in [1536, 13] {
        swiglu_fused::<f32>(gpu, &mut g, 37, f);
        swiglu_fused::<Bf16>(gpu, &mut g, 37, f);
    }
}

/// Column-block copies, 16-byte and scalar forms: exact, and nothing else
/// in the destination changes.
#[test]
fn copy_cols_is_exact() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("copy_cols");
    for (sw, so, dw, dof, w) in [(960, 768, 192, 0, 192), (50, 3, 40, 7, 21)] {
        let rows = 33;
        let src = input::<Bf16>(&mut g, rows * sw, 1.0);
        let dst0 = input::<Bf16>(&mut g, rows * dw, 1.0);
        let st = up::<Bf16>(gpu, &src, &[rows, sw]);
        let mut dt = up::<Bf16>(gpu, &dst0, &[rows, dw]);
        ops::copy_cols(gpu, &st, so, &mut dt, dof, w).unwrap();
        let mut want = dst0.clone();
        for r in 0..rows {
            want[r * dw + dof..r * dw + dof + w]
                .copy_from_slice(&src[r * sw + so..r * sw + so + w]);
        }
        same_bits(
            &format!("copy_cols_w{w}"),
            "bf16",
            "exact",
            &host(gpu, &dt),
            &want,
        );
        assert!(ops::copy_cols(gpu, &st, so, &mut dt, dw, w).is_err());
    }
}

// ------------------------------------------------ training-step fusions

fn all_finite(name: &str, v: &[f64]) {
    let ok = v.iter().all(|x| x.is_finite());
    println!("RESULT finite {name} {}", if ok { "PASS" } else { "FAIL" });
    assert!(ok, "{name}: an output is not finite (unwritten?)");
}

/// `rmsnorm_fwd_and_copy` and `rmsnorm_bwd_add` against the unfused ops
/// they replace in the training step (`rmsnorm_fwd` then `copy`,
/// `rmsnorm_bwd` then `add_inplace`): the same bits, every output written
/// (poisoned first), and the same bits again on a rerun.
fn rmsnorm_fused<T: Dtype>(gpu: &Gpu, g: &mut SplitMix64, n: usize, d: usize) {
    let ty = T::SUFFIX;
    let name = format!("rmsnorm_fused_{n}x{d}");
    let x = input::<T>(g, n * d, 2.0);
    let w = input::<T>(g, d, 1.5);
    let dy = input::<T>(g, n * d, 1.0);
    let res = input::<T>(g, n * d, 1.0);
    let (xt, wt, dyt) = (
        up::<T>(gpu, &x, &[n, d]),
        up::<T>(gpu, &w, &[d]),
        up::<T>(gpu, &dy, &[n, d]),
    );
    let fused = || {
        let mut y = poisoned::<T>(gpu, &[n, d]);
        let mut rstd = poisoned::<f32>(gpu, &[n]);
        let mut xc = poisoned::<T>(gpu, &[n, d]);
        ops::rmsnorm_fwd_and_copy(gpu, &xt, &wt, 1e-5, &mut y, &mut rstd, &mut xc).unwrap();
        let mut acc = up::<T>(gpu, &res, &[n, d]);
        let mut dw = poisoned::<T>(gpu, &[d]);
        ops::rmsnorm_bwd_add(gpu, &dyt, &xt, &wt, &rstd, &mut acc, &mut dw, false).unwrap();
        [
            host(gpu, &y),
            host(gpu, &rstd),
            host(gpu, &xc),
            host(gpu, &acc),
            host(gpu, &dw),
        ]
    };
    let got = fused();
    let mut y = poisoned::<T>(gpu, &[n, d]);
    let mut rstd = poisoned::<f32>(gpu, &[n]);
    let mut xc = poisoned::<T>(gpu, &[n, d]);
    ops::rmsnorm_fwd(gpu, &xt, &wt, 1e-5, &mut y, &mut rstd).unwrap();
    ops::copy(gpu, &xt, &mut xc).unwrap();
    let mut branch = poisoned::<T>(gpu, &[n, d]);
    let mut dw = poisoned::<T>(gpu, &[d]);
    ops::rmsnorm_bwd(gpu, &dyt, &xt, &wt, &rstd, &mut branch, &mut dw, false).unwrap();
    let mut acc = up::<T>(gpu, &res, &[n, d]);
    ops::add_inplace(gpu, &mut acc, &branch).unwrap();
    let want = [
        host(gpu, &y),
        host(gpu, &rstd),
        host(gpu, &xc),
        host(gpu, &acc),
        host(gpu, &dw),
    ];
    all_finite(&format!("{name}_{ty}"), &got.concat());
    same_bits(&name, ty, "vs_unfused", &got.concat(), &want.concat());
    same_bits(&name, ty, "copy_exact", &got[2], &x);
    same_bits(&name, ty, "rerun", &got.concat(), &fused().concat());
    // Shape errors, not launches.
    let mut small = poisoned::<T>(gpu, &[n, d + 1]);
    let mut y = poisoned::<T>(gpu, &[n, d]);
    let mut rstd = poisoned::<f32>(gpu, &[n]);
    assert!(ops::rmsnorm_fwd_and_copy(gpu, &xt, &wt, 1e-5, &mut y, &mut rstd, &mut small).is_err());
}

#[test]
fn rmsnorm_fused_forms_match_unfused() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rmsnorm_fused");
    // bf16 576: the shared-memory backward (K = 3); 2048: the register
    // backward (K = 8); f32 576: K = 5; 100: the block kernels (no 16-byte
    // form), where the fused ops run the unfused ones.
    rmsnorm_fused::<Bf16>(gpu, &mut g, 5000, 576);
    rmsnorm_fused::<Bf16>(gpu, &mut g, 300, 2048);
    rmsnorm_fused::<f32>(gpu, &mut g, 1000, 576);
    rmsnorm_fused::<Bf16>(gpu, &mut g, 16383, 576);
    rmsnorm_fused::<Bf16>(gpu, &mut g, 999, 448);
    rmsnorm_fused::<Bf16>(gpu, &mut g, 77, 100);
    rmsnorm_fused::<f32>(gpu, &mut g, 77, 100);
}

/// `rope_qkv_split` / `rope_qkv_merge` against two column RoPE launches and
/// a column copy: the same bits, every output written, rerun bit for bit.
fn rope_qkv<T: Dtype>(
    gpu: &Gpu,
    g: &mut SplitMix64,
    layout: RopeLayout,
    (b, t, hq, hk, d): (usize, usize, usize, usize, usize),
) {
    let ty = T::SUFFIX;
    let name = format!("rope_qkv_{layout:?}_h{hq}_{hk}_d{d}");
    let width = (hq + 2 * hk) * d;
    let table = RopeTable::new(t + 3, d, 10_000.0);
    let tables = RopeTables::new(gpu, &table).unwrap();
    let qkv = up::<T>(gpu, &input::<T>(g, b * t * width, 1.0), &[b * t, width]);
    let (qs, ks) = ([b, t, hq, d], [b, t, hk, d]);
    let dq = up::<T>(gpu, &input::<T>(g, b * t * hq * d, 1.0), &qs);
    let dk = up::<T>(gpu, &input::<T>(g, b * t * hk * d, 1.0), &ks);
    let dv = up::<T>(gpu, &input::<T>(g, b * t * hk * d, 1.0), &ks);
    let fused = || {
        let (mut q, mut k, mut v) = (
            poisoned::<T>(gpu, &qs),
            poisoned::<T>(gpu, &ks),
            poisoned::<T>(gpu, &ks),
        );
        ops::rope_qkv_split(gpu, &qkv, &tables, layout, &mut q, &mut k, &mut v).unwrap();
        let mut dqkv = poisoned::<T>(gpu, &[b * t, width]);
        ops::rope_qkv_merge(gpu, &dq, &dk, &dv, &tables, layout, &mut dqkv).unwrap();
        [
            host(gpu, &q),
            host(gpu, &k),
            host(gpu, &v),
            host(gpu, &dqkv),
        ]
    };
    let got = fused();
    let (mut q, mut k, mut v) = (
        poisoned::<T>(gpu, &qs),
        poisoned::<T>(gpu, &ks),
        poisoned::<T>(gpu, &ks),
    );
    ops::rope_fwd_from_cols(gpu, &qkv, 0, &tables, layout, &mut q).unwrap();
    ops::rope_fwd_from_cols(gpu, &qkv, hq * d, &tables, layout, &mut k).unwrap();
    ops::copy_cols(gpu, &qkv, (hq + hk) * d, &mut v, 0, hk * d).unwrap();
    let mut dqkv = poisoned::<T>(gpu, &[b * t, width]);
    ops::rope_bwd_into_cols(gpu, &dq, &tables, layout, &mut dqkv, 0).unwrap();
    ops::rope_bwd_into_cols(gpu, &dk, &tables, layout, &mut dqkv, hq * d).unwrap();
    ops::copy_cols(gpu, &dv, 0, &mut dqkv, (hq + hk) * d, hk * d).unwrap();
    let want = [
        host(gpu, &q),
        host(gpu, &k),
        host(gpu, &v),
        host(gpu, &dqkv),
    ];
    all_finite(&format!("{name}_{ty}"), &got.concat());
    same_bits(&name, ty, "vs_unfused", &got.concat(), &want.concat());
    same_bits(&name, ty, "rerun", &got.concat(), &fused().concat());
    // A qkv of the wrong width is a shape error.
    let bad = poisoned::<T>(gpu, &[b * t, width + 8]);
    let (mut q, mut k, mut v) = (
        poisoned::<T>(gpu, &qs),
        poisoned::<T>(gpu, &ks),
        poisoned::<T>(gpu, &ks),
    );
    assert!(ops::rope_qkv_split(gpu, &bad, &tables, layout, &mut q, &mut k, &mut v).is_err());
}

#[test]
fn rope_qkv_split_and_merge_match_unfused() {
    let Some(gpu) = gpu() else { return };
    let mut g = rng("rope_qkv");
    for layout in [RopeLayout::Interleaved, RopeLayout::RotateHalf] {
        // SmolLM2's heads (9 q, 3 kv, d = 64); one q per kv head; and d = 6,
        // which no 16-byte kernel takes (the unfused ops run instead).
        for shape in [(2, 37, 9, 3, 64), (1, 20, 2, 2, 64), (2, 11, 4, 2, 6)] {
            rope_qkv::<f32>(gpu, &mut g, layout, shape);
            rope_qkv::<Bf16>(gpu, &mut g, layout, shape);
        }
    }
}
