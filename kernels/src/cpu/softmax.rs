//! Softmax cross-entropy over the vocabulary, fused with argmax.

/// One row's cross-entropy result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyRow {
    /// `lse - logits[target]`, or 0 for an ignored row.
    pub loss: f64,
    /// `log(sum(exp(logits)))`, kept for the backward.
    pub lse: f64,
    /// Index of the largest logit; the first one on ties.
    pub argmax: u32,
}

/// Forward over `n` rows of `vocab` logits. A negative target ignores the row.
pub fn cross_entropy_fwd(logits: &[f64], targets: &[i32], vocab: usize) -> Vec<CrossEntropyRow> {
    assert_eq!(logits.len(), targets.len() * vocab, "logits are [n, vocab]");
    logits
        .chunks(vocab)
        .zip(targets)
        .map(|(row, &t)| {
            let mut argmax = 0usize;
            for (j, &v) in row.iter().enumerate() {
                if v > row[argmax] {
                    argmax = j;
                }
            }
            let m = row[argmax];
            let lse = m + row.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
            let loss = usize::try_from(t).map_or(0.0, |t| lse - row[t]);
            CrossEntropyRow {
                loss,
                lse,
                argmax: argmax as u32,
            }
        })
        .collect()
}

/// Backward: `dlogits = dloss[i] (softmax(logits[i]) - onehot(target[i]))`,
/// zero for ignored rows.
pub fn cross_entropy_bwd(logits: &[f64], targets: &[i32], dloss: &[f64], vocab: usize) -> Vec<f64> {
    let rows = cross_entropy_fwd(logits, targets, vocab);
    let mut d = vec![0.0; logits.len()];
    for (i, r) in rows.iter().enumerate() {
        let Ok(t) = usize::try_from(targets[i]) else {
            continue;
        };
        for j in 0..vocab {
            let p = (logits[i * vocab + j] - r.lse).exp();
            let onehot = if j == t { 1.0 } else { 0.0 };
            d[i * vocab + j] = dloss[i] * (p - onehot);
        }
    }
    d
}
