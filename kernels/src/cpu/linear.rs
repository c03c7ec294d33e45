//! Matrix products, embeddings and LoRA.

/// `C[m, n] = op(A) op(B)` with `op(A)` of shape `[m, k]` and `op(B)` of
/// shape `[k, n]`. `A` is stored `[k, m]` when `trans_a`, else `[m, k]`;
/// `B` is stored `[n, k]` when `trans_b`, else `[k, n]`.
#[allow(clippy::too_many_arguments)] // the BLAS signature, spelled out
pub fn matmul(
    a: &[f64],
    trans_a: bool,
    b: &[f64],
    trans_b: bool,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    assert_eq!(a.len(), m * k, "A holds m * k");
    assert_eq!(b.len(), k * n, "B holds k * n");
    let at = |i: usize, p: usize| if trans_a { a[p * m + i] } else { a[i * k + p] };
    let bt = |p: usize, j: usize| if trans_b { b[j * k + p] } else { b[p * n + j] };
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

/// Backward of [`matmul`]: `(dA, dB)` in the storage layouts of `A` and `B`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_bwd(
    dc: &[f64],
    a: &[f64],
    trans_a: bool,
    b: &[f64],
    trans_b: bool,
    m: usize,
    k: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    // d op(A) = dC op(B)^T; stored transposed again when A is.
    let da = if trans_a {
        matmul(b, trans_b, dc, true, k, n, m)
    } else {
        matmul(dc, false, b, !trans_b, m, n, k)
    };
    // d op(B) = op(A)^T dC.
    let db = if trans_b {
        matmul(dc, true, a, trans_a, n, m, k)
    } else {
        matmul(a, !trans_a, dc, false, k, m, n)
    };
    (da, db)
}

/// Embedding lookup: row `ids[i]` of `table[vocab, d]` for every position.
pub fn embedding_fwd(table: &[f64], ids: &[u32], d: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(ids.len() * d);
    for &id in ids {
        let row = id as usize * d;
        out.extend_from_slice(&table[row..row + d]);
    }
    out
}

/// Embedding backward: `dtable[v] = sum of dout[i] over positions with ids[i] == v`.
pub fn embedding_bwd(dout: &[f64], ids: &[u32], vocab: usize, d: usize) -> Vec<f64> {
    let mut dtable = vec![0.0; vocab * d];
    for (i, &id) in ids.iter().enumerate() {
        let row = id as usize * d;
        for j in 0..d {
            dtable[row + j] += dout[i * d + j];
        }
    }
    dtable
}

/// Sizes of a LoRA-adapted linear layer `y = x W^T + s (x A^T) B^T`.
#[derive(Debug, Clone, Copy)]
pub struct LoraShape {
    /// Rows of `x` (tokens).
    pub m: usize,
    /// Input features (`x` is `[m, k]`, `W` is `[n, k]`, `A` is `[r, k]`).
    pub k: usize,
    /// Output features (`B` is `[n, r]`).
    pub n: usize,
    /// Adapter rank.
    pub r: usize,
    /// The adapter scale `alpha / r`.
    pub scale: f64,
}

/// LoRA forward: `y = x W^T + scale (x A^T) B^T`, with `W` frozen.
pub fn lora_fwd(x: &[f64], w: &[f64], a: &[f64], b: &[f64], s: LoraShape) -> Vec<f64> {
    let base = matmul(x, false, w, true, s.m, s.k, s.n);
    let xa = matmul(x, false, a, true, s.m, s.k, s.r);
    let up = matmul(&xa, false, b, true, s.m, s.r, s.n);
    base.iter().zip(&up).map(|(y, u)| y + s.scale * u).collect()
}

/// LoRA backward: `(dx, dA, dB)`; `W` is frozen and gets no gradient.
pub fn lora_bwd(
    dy: &[f64],
    x: &[f64],
    w: &[f64],
    a: &[f64],
    b: &[f64],
    s: LoraShape,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let xa = matmul(x, false, a, true, s.m, s.k, s.r);
    // dB = scale dy^T (x A^T): [n, r].
    let db: Vec<f64> = matmul(dy, true, &xa, false, s.n, s.m, s.r)
        .into_iter()
        .map(|v| v * s.scale)
        .collect();
    // d(xA^T) = scale dy B: [m, r].
    let dxa: Vec<f64> = matmul(dy, false, b, false, s.m, s.n, s.r)
        .into_iter()
        .map(|v| v * s.scale)
        .collect();
    // dA = d(xA^T)^T x: [r, k].
    let da = matmul(&dxa, true, x, false, s.r, s.m, s.k);
    // dx = dy W + d(xA^T) A: [m, k].
    let dx_base = matmul(dy, false, w, false, s.m, s.n, s.k);
    let dx_lora = matmul(&dxa, false, a, false, s.m, s.r, s.k);
    let dx = dx_base.iter().zip(&dx_lora).map(|(p, q)| p + q).collect();
    (dx, da, db)
}
