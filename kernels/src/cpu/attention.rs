//! Causal grouped-query scaled-dot-product attention.
//!
//! The reference materialises the `T x T` probabilities per head; the GPU
//! kernels never do, which is the point of checking them against this.

/// Sizes of one attention call. `q` is `[batch, seq, q_heads, head_dim]`,
/// `k` and `v` are `[batch, seq, kv_heads, head_dim]`; query head `h` reads
/// key/value head `h / (q_heads / kv_heads)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Batch size.
    pub batch: usize,
    /// Sequence length.
    pub seq: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads; divides `q_heads`.
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
}

impl AttentionShape {
    /// The softmax scale `1 / sqrt(head_dim)`.
    pub fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }
    fn q_at(&self, b: usize, t: usize, h: usize) -> usize {
        ((b * self.seq + t) * self.q_heads + h) * self.head_dim
    }
    fn kv_at(&self, b: usize, t: usize, h: usize) -> usize {
        ((b * self.seq + t) * self.kv_heads + h) * self.head_dim
    }
    fn group(&self) -> usize {
        self.q_heads / self.kv_heads
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Row `i`'s causal probabilities over keys `0..=i`, and its log-sum-exp.
fn probs(
    q: &[f64],
    k: &[f64],
    s: &AttentionShape,
    b: usize,
    h: usize,
    i: usize,
) -> (Vec<f64>, f64) {
    let d = s.head_dim;
    let hk = h / s.group();
    let qi = &q[s.q_at(b, i, h)..][..d];
    let logits: Vec<f64> = (0..=i)
        .map(|j| dot(qi, &k[s.kv_at(b, j, hk)..][..d]) * s.scale())
        .collect();
    let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
    (logits.iter().map(|l| (l - lse).exp()).collect(), lse)
}

/// Forward: `(o, lse)` with `o` shaped like `q` and `lse` `[batch, q_heads, seq]`.
pub fn attention_fwd(q: &[f64], k: &[f64], v: &[f64], s: &AttentionShape) -> (Vec<f64>, Vec<f64>) {
    let d = s.head_dim;
    let mut o = vec![0.0; q.len()];
    let mut lse = vec![0.0; s.batch * s.q_heads * s.seq];
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            let hk = h / s.group();
            for i in 0..s.seq {
                let (p, l) = probs(q, k, s, b, h, i);
                lse[(b * s.q_heads + h) * s.seq + i] = l;
                let out = &mut o[s.q_at(b, i, h)..][..d];
                for (j, pj) in p.iter().enumerate() {
                    let vj = &v[s.kv_at(b, j, hk)..][..d];
                    for c in 0..d {
                        out[c] += pj * vj[c];
                    }
                }
            }
        }
    }
    (o, lse)
}

/// Backward: `(dq, dk, dv)` from `do_` (the gradient of `o`).
pub fn attention_bwd(
    do_: &[f64],
    q: &[f64],
    k: &[f64],
    v: &[f64],
    s: &AttentionShape,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let d = s.head_dim;
    let scale = s.scale();
    let mut dq = vec![0.0; q.len()];
    let mut dk = vec![0.0; k.len()];
    let mut dv = vec![0.0; v.len()];
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            let hk = h / s.group();
            for i in 0..s.seq {
                let (p, _) = probs(q, k, s, b, h, i);
                let doi = &do_[s.q_at(b, i, h)..][..d];
                let dp: Vec<f64> = (0..=i)
                    .map(|j| dot(doi, &v[s.kv_at(b, j, hk)..][..d]))
                    .collect();
                let di: f64 = p.iter().zip(&dp).map(|(a, c)| a * c).sum();
                for j in 0..=i {
                    let ds = p[j] * (dp[j] - di) * scale;
                    let (kj, qi) = (s.kv_at(b, j, hk), s.q_at(b, i, h));
                    for c in 0..d {
                        dq[qi + c] += ds * k[kj + c];
                        dk[kj + c] += ds * q[qi + c];
                        dv[kj + c] += p[j] * doi[c];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}
