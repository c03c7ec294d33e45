//! AdamW and gradient-norm clipping.

/// AdamW hyper-parameters for one step.
#[derive(Debug, Clone, Copy)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// The step number, starting at 1 (used for bias correction).
    pub step: u32,
}

impl AdamWConfig {
    /// `(1 - beta1^t, 1 - beta2^t)`.
    pub fn bias_corrections(&self) -> (f64, f64) {
        let t = i32::try_from(self.step).unwrap_or(i32::MAX);
        (1.0 - self.beta1.powi(t), 1.0 - self.beta2.powi(t))
    }
}

/// One AdamW step in place, in PyTorch's order: decay the weight, update the
/// moments with the gradient times `grad_scale` (the clipping factor), then
/// `p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)`.
pub fn adamw_step(
    p: &mut [f64],
    g: &[f64],
    m: &mut [f64],
    v: &mut [f64],
    cfg: &AdamWConfig,
    grad_scale: f64,
) {
    let (bc1, bc2) = cfg.bias_corrections();
    for i in 0..p.len() {
        let gi = g[i] * grad_scale;
        p[i] *= 1.0 - cfg.lr * cfg.weight_decay;
        m[i] += (1.0 - cfg.beta1) * (gi - m[i]);
        v[i] = v[i] * cfg.beta2 + (1.0 - cfg.beta2) * gi * gi;
        let denom = v[i].sqrt() / bc2.sqrt() + cfg.eps;
        p[i] -= cfg.lr / bc1 * m[i] / denom;
    }
}

/// The global L2 norm over several gradient tensors.
pub fn grad_norm(grads: &[&[f64]]) -> f64 {
    grads
        .iter()
        .flat_map(|g| g.iter())
        .map(|v| v * v)
        .sum::<f64>()
        .sqrt()
}

/// The factor clipping scales every gradient by: `min(1, max_norm / (norm + 1e-6))`,
/// as PyTorch's `clip_grad_norm_`.
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    (max_norm / (norm + 1e-6)).min(1.0)
}
