//! RMSNorm over the last dimension: `y = x / sqrt(mean(x^2) + eps) * w`.

/// Forward over `n` rows of `d`: returns `(y, rstd)` where `rstd[i]` is the
/// row's `1 / sqrt(mean(x^2) + eps)`, kept for the backward.
pub fn rmsnorm_fwd(x: &[f64], w: &[f64], n: usize, d: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(x.len(), n * d, "x is [n, d]");
    assert_eq!(w.len(), d, "w is [d]");
    let mut y = vec![0.0; n * d];
    let mut rstd = vec![0.0; n];
    for i in 0..n {
        let row = &x[i * d..(i + 1) * d];
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let r = 1.0 / (ms + eps).sqrt();
        rstd[i] = r;
        for j in 0..d {
            y[i * d + j] = row[j] * r * w[j];
        }
    }
    (y, rstd)
}

/// Backward: `(dx, dw)` from `dy`, the forward input and its `rstd`.
///
/// With `g = dy * w` and `r = rstd`, `dx = r g - r^3 x (g . x) / d` and
/// `dw = sum over rows of dy x r`.
pub fn rmsnorm_bwd(
    dy: &[f64],
    x: &[f64],
    w: &[f64],
    rstd: &[f64],
    n: usize,
    d: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; n * d];
    let mut dw = vec![0.0; d];
    for i in 0..n {
        let r = rstd[i];
        let base = i * d;
        let c: f64 = (0..d).map(|j| dy[base + j] * w[j] * x[base + j]).sum();
        for j in 0..d {
            dx[base + j] = r * dy[base + j] * w[j] - r * r * r * x[base + j] * c / d as f64;
            dw[j] += dy[base + j] * x[base + j] * r;
        }
    }
    (dx, dw)
}
