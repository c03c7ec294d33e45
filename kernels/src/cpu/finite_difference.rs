//! Finite-difference checks of every backward in `f64`, plus value checks of
//! the references against closed forms.
//!
//! Each check draws fresh inputs (the seed is printed), contracts the forward
//! output with a random cotangent `r` to a scalar `L = r . f(x)`, and compares
//! the central difference of `L` along every input coordinate with the
//! analytic gradient from the backward fed `dy = r`.

use super::*;
use crate::rng::SplitMix64;

const H: f64 = 1e-5;
const TOL: f64 = 1e-7;

fn rng(name: &str) -> SplitMix64 {
    let seed = SplitMix64::fresh_seed();
    println!("{name}: seed {seed}");
    SplitMix64::new(seed)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `||fd - analytic|| / ||analytic||` for the gradient of `r . f(x)` in `x`.
fn fd_error(x: &[f64], r: &[f64], analytic: &[f64], f: impl Fn(&[f64]) -> Vec<f64>) -> f64 {
    assert_eq!(x.len(), analytic.len());
    let mut xp = x.to_vec();
    let mut num = 0.0;
    let mut den = 0.0;
    for i in 0..x.len() {
        xp[i] = x[i] + H;
        let lp = dot(r, &f(&xp));
        xp[i] = x[i] - H;
        let lm = dot(r, &f(&xp));
        xp[i] = x[i];
        let fd = (lp - lm) / (2.0 * H);
        num += (fd - analytic[i]).powi(2);
        den += analytic[i].powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

fn assert_fd(name: &str, err: f64) {
    println!("{name}: relative error {err:.3e}");
    assert!(
        err < TOL,
        "{name}: finite-difference error {err:e} >= {TOL:e}"
    );
}

#[test]
fn rmsnorm_backward_matches_finite_differences() {
    let mut g = rng("rmsnorm");
    let (n, d, eps) = (3, 7, 1e-5);
    let x = g.vec(n * d, 2.0);
    let w = g.vec(d, 1.5);
    let (y, rstd) = rmsnorm_fwd(&x, &w, n, d, eps);
    let r = g.vec(y.len(), 1.0);
    let (dx, dw) = rmsnorm_bwd(&r, &x, &w, &rstd, n, d);
    assert_fd(
        "rmsnorm dx",
        fd_error(&x, &r, &dx, |x| rmsnorm_fwd(x, &w, n, d, eps).0),
    );
    assert_fd(
        "rmsnorm dw",
        fd_error(&w, &r, &dw, |w| rmsnorm_fwd(&x, w, n, d, eps).0),
    );
}

#[test]
fn rmsnorm_of_constant_row_is_weight_times_sign() {
    let (y, rstd) = rmsnorm_fwd(&[3.0, 3.0, -3.0, -3.0], &[1.0, 2.0, 3.0, 4.0], 1, 4, 0.0);
    assert_eq!(rstd, vec![1.0 / 3.0]);
    assert_eq!(y, vec![1.0, 2.0, -3.0, -4.0]);
}

#[test]
fn silu_and_swiglu_backward_match_finite_differences() {
    let mut g = rng("swiglu");
    let x = g.vec(11, 4.0);
    let u = g.vec(11, 2.0);
    let r = g.vec(11, 1.0);
    assert_fd("silu dx", fd_error(&x, &r, &silu_bwd(&r, &x), silu));
    let (dg, du) = swiglu_bwd(&r, &x, &u);
    assert_fd("swiglu dgate", fd_error(&x, &r, &dg, |x| swiglu_fwd(x, &u)));
    assert_fd("swiglu dup", fd_error(&u, &r, &du, |u| swiglu_fwd(&x, u)));
}

#[test]
fn rope_backward_matches_finite_differences_in_both_layouts() {
    let mut g = rng("rope");
    let (b, t, h, d) = (2, 5, 3, 8);
    let table = RopeTable::new(t, d, 10_000.0);
    let x = g.vec(b * t * h * d, 1.0);
    let r = g.vec(x.len(), 1.0);
    for layout in [RopeLayout::Interleaved, RopeLayout::RotateHalf] {
        let dx = rope_bwd(&r, &table, t, h, layout);
        let err = fd_error(&x, &r, &dx, |x| rope_fwd(x, &table, t, h, layout));
        assert_fd(&format!("rope {layout:?} dx"), err);
    }
}

#[test]
fn rope_layouts_rotate_the_pairs_they_name() {
    let table = RopeTable::new(2, 4, 10_000.0);
    // Position 0 is the identity in both layouts.
    let x = [1.0, 2.0, 3.0, 4.0, 1.0, 0.0, 0.0, 0.0];
    for layout in [RopeLayout::Interleaved, RopeLayout::RotateHalf] {
        let y = rope_fwd(&x, &table, 2, 1, layout);
        assert_eq!(&y[..4], &x[..4]);
    }
    // At position 1, frequency 0 is 1 radian: element 0 pairs with 1
    // (interleaved) or with 2 (rotate-half).
    let (c, s) = (f64::from(table.cos[2]), f64::from(table.sin[2]));
    let y = rope_fwd(&x, &table, 2, 1, RopeLayout::Interleaved);
    assert_eq!((y[4], y[5]), (c, s));
    let y = rope_fwd(&x, &table, 2, 1, RopeLayout::RotateHalf);
    assert_eq!((y[4], y[6]), (c, s));
}

#[test]
fn cross_entropy_backward_matches_finite_differences() {
    let mut g = rng("cross_entropy");
    let (n, vocab) = (4, 9);
    let logits = g.vec(n * vocab, 3.0);
    let targets = vec![2, -1, 8, 0];
    let dloss = g.vec(n, 1.0);
    let d = cross_entropy_bwd(&logits, &targets, &dloss, vocab);
    let err = fd_error(&logits, &dloss, &d, |l| {
        cross_entropy_fwd(l, &targets, vocab)
            .iter()
            .map(|r| r.loss)
            .collect()
    });
    assert_fd("cross_entropy dlogits", err);
}

#[test]
fn cross_entropy_values_and_argmax_ties() {
    // Uniform logits: loss ln(V), first index wins the tie.
    let rows = cross_entropy_fwd(&[0.5; 8], &[3, -1], 4);
    assert!((rows[0].loss - 4f64.ln()).abs() < 1e-15);
    assert_eq!(rows[0].argmax, 0);
    assert_eq!(rows[1].loss, 0.0);
    let rows = cross_entropy_fwd(&[1.0, 7.0, 7.0, 2.0], &[1], 4);
    assert_eq!(rows[0].argmax, 1);
}

#[test]
fn matmul_backward_matches_finite_differences_for_all_transposes() {
    let mut g = rng("matmul");
    let (m, k, n) = (3, 4, 5);
    for ta in [false, true] {
        for tb in [false, true] {
            let a = g.vec(m * k, 1.0);
            let b = g.vec(k * n, 1.0);
            let r = g.vec(m * n, 1.0);
            let (da, db) = matmul_bwd(&r, &a, ta, &b, tb, m, k, n);
            let ea = fd_error(&a, &r, &da, |a| matmul(a, ta, &b, tb, m, k, n));
            let eb = fd_error(&b, &r, &db, |b| matmul(&a, ta, b, tb, m, k, n));
            assert_fd(&format!("matmul ta={ta} tb={tb} dA"), ea);
            assert_fd(&format!("matmul ta={ta} tb={tb} dB"), eb);
        }
    }
}

#[test]
fn matmul_transposes_agree() {
    // [[1,2],[3,4]] x [[5,6],[7,8]] stored plainly and transposed.
    let a = [1.0, 2.0, 3.0, 4.0];
    let at = [1.0, 3.0, 2.0, 4.0];
    let b = [5.0, 6.0, 7.0, 8.0];
    let bt = [5.0, 7.0, 6.0, 8.0];
    let want = vec![19.0, 22.0, 43.0, 50.0];
    assert_eq!(matmul(&a, false, &b, false, 2, 2, 2), want);
    assert_eq!(matmul(&at, true, &b, false, 2, 2, 2), want);
    assert_eq!(matmul(&a, false, &bt, true, 2, 2, 2), want);
    assert_eq!(matmul(&at, true, &bt, true, 2, 2, 2), want);
}

#[test]
fn embedding_backward_matches_finite_differences() {
    let mut g = rng("embedding");
    let (vocab, d) = (6, 3);
    let table = g.vec(vocab * d, 1.0);
    let ids = [4u32, 1, 4, 0, 4, 5];
    let r = g.vec(ids.len() * d, 1.0);
    let dt = embedding_bwd(&r, &ids, vocab, d);
    assert_fd(
        "embedding dtable",
        fd_error(&table, &r, &dt, |t| embedding_fwd(t, &ids, d)),
    );
    // Rows never looked up get exactly zero.
    assert!(dt[2 * d..4 * d].iter().all(|&v| v == 0.0));
}

#[test]
fn lora_backward_matches_finite_differences() {
    let mut g = rng("lora");
    let s = LoraShape {
        m: 4,
        k: 5,
        n: 3,
        r: 2,
        scale: 16.0 / 2.0,
    };
    let x = g.vec(s.m * s.k, 1.0);
    let w = g.vec(s.n * s.k, 1.0);
    let a = g.vec(s.r * s.k, 1.0);
    let b = g.vec(s.n * s.r, 1.0);
    let r = g.vec(s.m * s.n, 1.0);
    let (dx, da, db) = lora_bwd(&r, &x, &w, &a, &b, s);
    assert_fd(
        "lora dx",
        fd_error(&x, &r, &dx, |x| lora_fwd(x, &w, &a, &b, s)),
    );
    assert_fd(
        "lora dA",
        fd_error(&a, &r, &da, |a| lora_fwd(&x, &w, a, &b, s)),
    );
    assert_fd(
        "lora dB",
        fd_error(&b, &r, &db, |b| lora_fwd(&x, &w, &a, b, s)),
    );
}

#[test]
fn attention_backward_matches_finite_differences() {
    let mut g = rng("attention");
    let s = AttentionShape {
        batch: 2,
        seq: 5,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 4,
    };
    let q = g.vec(s.batch * s.seq * s.q_heads * s.head_dim, 1.0);
    let k = g.vec(s.batch * s.seq * s.kv_heads * s.head_dim, 1.0);
    let v = g.vec(k.len(), 1.0);
    let r = g.vec(q.len(), 1.0);
    let (dq, dk, dv) = attention_bwd(&r, &q, &k, &v, &s);
    assert_fd(
        "attention dq",
        fd_error(&q, &r, &dq, |q| attention_fwd(q, &k, &v, &s).0),
    );
    assert_fd(
        "attention dk",
        fd_error(&k, &r, &dk, |k| attention_fwd(&q, k, &v, &s).0),
    );
    assert_fd(
        "attention dv",
        fd_error(&v, &r, &dv, |v| attention_fwd(&q, &k, v, &s).0),
    );
}

#[test]
fn attention_first_position_returns_its_value() {
    let mut g = rng("attention_first");
    let s = AttentionShape {
        batch: 1,
        seq: 3,
        q_heads: 2,
        kv_heads: 1,
        head_dim: 4,
    };
    let q = g.vec(24, 1.0);
    let k = g.vec(12, 1.0);
    let v = g.vec(12, 1.0);
    let (o, lse) = attention_fwd(&q, &k, &v, &s);
    // Causal: position 0 sees only key 0, with probability 1.
    assert_eq!(&o[0..4], &v[0..4]);
    assert_eq!(&o[4..8], &v[0..4]);
    let l0 = (0..4).map(|c| q[c] * k[c]).sum::<f64>() * s.scale();
    assert!((lse[0] - l0).abs() < 1e-15);
}

#[test]
fn adamw_first_step_is_sign_sized() {
    let cfg = AdamWConfig {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 0.0,
        weight_decay: 0.0,
        step: 1,
    };
    let mut p = vec![1.0, 1.0];
    let mut m = vec![0.0; 2];
    let mut v = vec![0.0; 2];
    adamw_step(&mut p, &[0.5, -2.0], &mut m, &mut v, &cfg, 1.0);
    // With zero moments and bias correction, step 1 moves each weight by lr
    // against its gradient's sign.
    assert!(
        (p[0] - 0.9).abs() < 1e-12 && (p[1] - 1.1).abs() < 1e-12,
        "{p:?}"
    );
    // Weight decay alone shrinks by (1 - lr wd).
    let cfg = AdamWConfig {
        weight_decay: 0.5,
        eps: 1e-8,
        ..cfg
    };
    let mut p = vec![2.0];
    adamw_step(&mut p, &[0.0], &mut [0.0], &mut [0.0], &cfg, 1.0);
    assert!((p[0] - 2.0 * 0.95).abs() < 1e-12);
}

#[test]
fn clipping_scales_only_above_the_limit() {
    let norm = grad_norm(&[&[3.0], &[4.0]]);
    assert_eq!(norm, 5.0);
    assert_eq!(clip_scale(norm, 10.0), 1.0);
    assert!((clip_scale(norm, 1.0) - 1.0 / (5.0 + 1e-6)).abs() < 1e-15);
}
