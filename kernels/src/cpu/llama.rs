//! The Llama training step's loss and gradients in `f64`, composed from the
//! other references: the specification [`crate::llama::GpuLlama`] is tested
//! against, and itself checked by finite differences.

use super::{
    AttentionShape, RopeTable, attention_bwd, attention_fwd, cross_entropy_bwd, cross_entropy_fwd,
    embedding_bwd, embedding_fwd, matmul, rmsnorm_bwd, rmsnorm_fwd, rope_bwd, rope_fwd, swiglu_bwd,
    swiglu_fwd,
};
use crate::llama::{Config, EMBED, FINAL_NORM, slot};

/// Tokens of one step: `ids` and `targets` are `[batch, seq]` row-major; a
/// negative target is ignored.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    /// Batch size.
    pub batch: usize,
    /// Sequence length.
    pub seq: usize,
    /// Input token ids.
    pub ids: &'a [u32],
    /// Next-token targets.
    pub targets: &'a [i32],
}

/// `x W^T` for `x` `[n, in]` and `w` `[out, in]`.
fn linear(x: &[f64], w: &[f64], n: usize, inp: usize, out: usize) -> Vec<f64> {
    matmul(x, false, w, true, n, inp, out)
}

/// `dy W` (the input gradient of [`linear`]).
fn linear_dx(dy: &[f64], w: &[f64], n: usize, inp: usize, out: usize) -> Vec<f64> {
    matmul(dy, false, w, false, n, out, inp)
}

/// `dy^T x` (the weight gradient of [`linear`]), `[out, in]`.
fn linear_dw(dy: &[f64], x: &[f64], n: usize, inp: usize, out: usize) -> Vec<f64> {
    matmul(dy, true, x, false, out, n, inp)
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

struct Saved {
    x: Vec<f64>,
    h: Vec<f64>,
    r1: Vec<f64>,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    o: Vec<f64>,
    x1: Vec<f64>,
    h2: Vec<f64>,
    r2: Vec<f64>,
    gate: Vec<f64>,
    up: Vec<f64>,
    act: Vec<f64>,
}

/// Mean cross-entropy over the valid targets, and the gradient of every
/// parameter (in [`Config::params`] order).
///
/// # Panics
/// If `params` or the tokens do not match `cfg`.
pub fn loss_and_grads(
    cfg: &Config,
    params: &[Vec<f64>],
    tokens: Tokens<'_>,
) -> (f64, Vec<Vec<f64>>) {
    let shapes = cfg.params();
    assert_eq!(params.len(), shapes.len(), "one vector per parameter");
    let n = tokens.batch * tokens.seq;
    assert_eq!(tokens.ids.len(), n, "ids are [batch, seq]");
    assert_eq!(tokens.targets.len(), n, "targets are [batch, seq]");
    let (d, hd) = (cfg.d_model(), cfg.head_dim());
    let (qd, kvd) = (cfg.q_heads() * hd, cfg.kv_heads() * hd);
    let eps = f64::from(cfg.eps_f32());
    let table = RopeTable::new(tokens.seq, hd, cfg.rope().base);
    let shape = AttentionShape {
        batch: tokens.batch,
        seq: tokens.seq,
        q_heads: cfg.q_heads(),
        kv_heads: cfg.kv_heads(),
        head_dim: hd,
    };
    let w = |l: usize, s: usize| &params[Config::layer_base(l) + s][..];
    // The stacked projections, split back into their parts.
    let wq = |l: usize| &w(l, slot::WQKV)[..qd * d];
    let wk = |l: usize| &w(l, slot::WQKV)[qd * d..(qd + kvd) * d];
    let wv = |l: usize| &w(l, slot::WQKV)[(qd + kvd) * d..];
    let wgate = |l: usize| &w(l, slot::GATE_UP)[..cfg.ffn() * d];
    let wup = |l: usize| &w(l, slot::GATE_UP)[cfg.ffn() * d..];

    // Forward, keeping what the backward reads.
    let mut x = embedding_fwd(&params[EMBED], tokens.ids, d);
    let mut saved = Vec::with_capacity(cfg.layers());
    for l in 0..cfg.layers() {
        let (h, r1) = rmsnorm_fwd(&x, w(l, slot::ATTN_NORM), n, d, eps);
        let q = rope_fwd(
            &linear(&h, wq(l), n, d, qd),
            &table,
            tokens.seq,
            cfg.q_heads(),
            cfg.rope().layout,
        );
        let k = rope_fwd(
            &linear(&h, wk(l), n, d, kvd),
            &table,
            tokens.seq,
            cfg.kv_heads(),
            cfg.rope().layout,
        );
        let v = linear(&h, wv(l), n, d, kvd);
        let (o, _lse) = attention_fwd(&q, &k, &v, &shape);
        let x1 = add(&x, &linear(&o, w(l, slot::WO), n, qd, d));
        let (h2, r2) = rmsnorm_fwd(&x1, w(l, slot::MLP_NORM), n, d, eps);
        let gate = linear(&h2, wgate(l), n, d, cfg.ffn());
        let up = linear(&h2, wup(l), n, d, cfg.ffn());
        let act = swiglu_fwd(&gate, &up);
        let next = add(&x1, &linear(&act, w(l, slot::DOWN), n, cfg.ffn(), d));
        saved.push(Saved {
            x,
            h,
            r1,
            q,
            k,
            v,
            o,
            x1,
            h2,
            r2,
            gate,
            up,
            act,
        });
        x = next;
    }
    let (hf, rf) = rmsnorm_fwd(&x, &params[FINAL_NORM], n, d, eps);
    let logits = linear(&hf, &params[EMBED], n, d, cfg.vocab());
    let rows = cross_entropy_fwd(&logits, tokens.targets, cfg.vocab());
    let valid = tokens.targets.iter().filter(|&&t| t >= 0).count().max(1) as f64;
    let loss = rows.iter().map(|r| r.loss).sum::<f64>() / valid;

    // Backward.
    let mut grads: Vec<Vec<f64>> = shapes
        .iter()
        .map(|p| vec![0.0; p.shape.iter().product()])
        .collect();
    let dloss = vec![1.0 / valid; n];
    let dlogits = cross_entropy_bwd(&logits, tokens.targets, &dloss, cfg.vocab());
    let dhf = linear_dx(&dlogits, &params[EMBED], n, d, cfg.vocab());
    let head_dw = linear_dw(&dlogits, &hf, n, d, cfg.vocab());
    let (mut dx, dwf) = rmsnorm_bwd(&dhf, &x, &params[FINAL_NORM], &rf, n, d);
    grads[FINAL_NORM] = dwf;
    for l in (0..cfg.layers()).rev() {
        let s = &saved[l];
        let base = Config::layer_base(l);
        // MLP.
        let dact = linear_dx(&dx, w(l, slot::DOWN), n, cfg.ffn(), d);
        grads[base + slot::DOWN] = linear_dw(&dx, &s.act, n, cfg.ffn(), d);
        let (dgate, dup) = swiglu_bwd(&dact, &s.gate, &s.up);
        let dh2 = add(
            &linear_dx(&dgate, wgate(l), n, d, cfg.ffn()),
            &linear_dx(&dup, wup(l), n, d, cfg.ffn()),
        );
        grads[base + slot::GATE_UP] = [
            linear_dw(&dgate, &s.h2, n, d, cfg.ffn()),
            linear_dw(&dup, &s.h2, n, d, cfg.ffn()),
        ]
        .concat();
        let (dx1_branch, dw2) = rmsnorm_bwd(&dh2, &s.x1, w(l, slot::MLP_NORM), &s.r2, n, d);
        grads[base + slot::MLP_NORM] = dw2;
        let dx1 = add(&dx, &dx1_branch);
        // Attention.
        let dout = linear_dx(&dx1, w(l, slot::WO), n, qd, d);
        grads[base + slot::WO] = linear_dw(&dx1, &s.o, n, qd, d);
        let (dq, dk, dv) = attention_bwd(&dout, &s.q, &s.k, &s.v, &shape);
        let dq = rope_bwd(&dq, &table, tokens.seq, cfg.q_heads(), cfg.rope().layout);
        let dk = rope_bwd(&dk, &table, tokens.seq, cfg.kv_heads(), cfg.rope().layout);
        let dh = add(
            &add(
                &linear_dx(&dq, wq(l), n, d, qd),
                &linear_dx(&dk, wk(l), n, d, kvd),
            ),
            &linear_dx(&dv, wv(l), n, d, kvd),
        );
        grads[base + slot::WQKV] = [
            linear_dw(&dq, &s.h, n, d, qd),
            linear_dw(&dk, &s.h, n, d, kvd),
            linear_dw(&dv, &s.h, n, d, kvd),
        ]
        .concat();
        let (dx_branch, dw1) = rmsnorm_bwd(&dh, &s.x, w(l, slot::ATTN_NORM), &s.r1, n, d);
        grads[base + slot::ATTN_NORM] = dw1;
        dx = add(&dx1, &dx_branch);
    }
    grads[EMBED] = add(&embedding_bwd(&dx, tokens.ids, cfg.vocab(), d), &head_dw);
    (loss, grads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::RopeLayout;
    use crate::llama::{Config, Rope, Shape};
    use crate::rng::SplitMix64;

    fn tiny(layout: RopeLayout) -> Config {
        Config::new(Shape {
            vocab: 11,
            d_model: 8,
            layers: 2,
            q_heads: 2,
            kv_heads: 1,
            head_dim: 64,
            ffn: 12,
            rms_eps: 1e-5,
            rope: Rope {
                layout,
                base: 10_000.0,
            },
            ..Shape::smollm2_135m()
        })
        .unwrap()
    }

    /// Central differences on a spread of coordinates of every parameter
    /// tensor, against the analytic gradient.
    #[test]
    fn gradients_match_finite_differences() {
        for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
            let cfg = tiny(layout);
            let mut rng = SplitMix64::new(7);
            // Norm weights away from 1 so their gradients are exercised.
            let mut params: Vec<Vec<f64>> = cfg
                .params()
                .iter()
                .map(|p| {
                    let n = p.shape.iter().product();
                    if p.is_norm {
                        (0..n).map(|_| 1.0 + rng.symmetric(0.3)).collect()
                    } else {
                        rng.vec(n, 0.5)
                    }
                })
                .collect();
            let (batch, seq) = (2, 5);
            let ids: Vec<u32> = (0..batch * seq).map(|_| rng.below(11) as u32).collect();
            let mut targets: Vec<i32> = (0..batch * seq).map(|_| rng.below(11) as i32).collect();
            targets[3] = -1; // an ignored position
            let tokens = Tokens {
                batch,
                seq,
                ids: &ids,
                targets: &targets,
            };
            let (loss, grads) = loss_and_grads(&cfg, &params, tokens);
            assert!(loss.is_finite() && loss > 0.0);
            let h = 1e-5;
            for p in 0..params.len() {
                let len = params[p].len();
                for i in [0, len / 3, len / 2, len - 1] {
                    let orig = params[p][i];
                    params[p][i] = orig + h;
                    let (up, _) = loss_and_grads(&cfg, &params, tokens);
                    params[p][i] = orig - h;
                    let (down, _) = loss_and_grads(&cfg, &params, tokens);
                    params[p][i] = orig;
                    let fd = (up - down) / (2.0 * h);
                    let an = grads[p][i];
                    assert!(
                        (fd - an).abs() <= 1e-6 + 1e-5 * an.abs().max(fd.abs()),
                        "{layout:?} {} [{i}]: finite difference {fd}, analytic {an}",
                        cfg.params()[p].name
                    );
                }
            }
        }
    }
}
