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

    /// The step's scalars in `f32`, as the GPU kernels (`kernels/cu/optim.cu`
    /// `adamw_one`) and [`adamw_f32`] take them: each hyper-parameter
    /// rounded to `f32`, and `step_size = lr / (1 - b1^t)` and
    /// `bc2_sqrt = sqrt(1 - b2^t)` computed in `f64` and rounded once.
    pub fn f32_scalars(&self) -> AdamWScalars {
        let (bc1, bc2) = self.bias_corrections();
        AdamWScalars {
            lr: self.lr as f32,
            beta1: self.beta1 as f32,
            beta2: self.beta2 as f32,
            eps: self.eps as f32,
            weight_decay: self.weight_decay as f32,
            step_size: (self.lr / bc1) as f32,
            bc2_sqrt: bc2.sqrt() as f32,
        }
    }
}

/// One AdamW step's `f32` scalars ([`AdamWConfig::f32_scalars`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWScalars {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay.
    pub beta1: f32,
    /// Second-moment decay.
    pub beta2: f32,
    /// Added to the denominator.
    pub eps: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
    /// `lr / (1 - beta1^t)`.
    pub step_size: f32,
    /// `sqrt(1 - beta2^t)`.
    pub bc2_sqrt: f32,
}

/// One AdamW step over `f32` master weights on the host, element by element
/// in the GPU kernel's (`kernels/cu/optim.cu` `adamw_one`) order and
/// precision, which is [`adamw_step`]'s formula: the gradient times the
/// clip factor, decoupled decay `p *= 1 - lr wd`, `m += (1 - b1)(g - m)`,
/// `v = b2 v + (1 - b2) g^2`, then
/// `p -= step_size m / (sqrt(v) / bc2_sqrt + eps)`, with the scalars of
/// [`AdamWConfig::f32_scalars`]. The CPU trainer's optimizer.
pub fn adamw_f32(
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    cfg: &AdamWConfig,
    grad_scale: f32,
) {
    let s = cfg.f32_scalars();
    let (lr, b1, b2, eps, wd) = (s.lr, s.beta1, s.beta2, s.eps, s.weight_decay);
    let (step_size, bc2_sqrt) = (s.step_size, s.bc2_sqrt);
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        let g = g * grad_scale;
        let mut pi = *p * (1.0 - lr * wd);
        let mi = *m + (1.0 - b1) * (g - *m);
        let vi = *v * b2 + (1.0 - b2) * g * g;
        let denom = vi.sqrt() / bc2_sqrt + eps;
        pi -= step_size * mi / denom;
        (*p, *m, *v) = (pi, mi, vi);
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
