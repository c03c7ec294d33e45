//! Softmax cross-entropy with argmax (the lm-head's loss).

use cudarc::driver::PushKernelArg;

use super::{cfg, checked, entry, expect_rank, expect_shape, grid_dim, int};
use crate::compile::XENT;
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// Per-row outputs of the forward.
#[derive(Debug)]
pub struct CrossEntropyOut {
    /// `lse - logit[target]`; 0 for a negative (ignored) target, NaN for a
    /// target at or past the vocabulary size.
    pub loss: Tensor<f32>,
    /// Log-sum-exp of the row, for the backward.
    pub lse: Tensor<f32>,
    /// Index of the first largest logit.
    pub argmax: Tensor<i32>,
}

impl CrossEntropyOut {
    /// Outputs for `rows` rows.
    pub fn zeros(gpu: &Gpu, rows: usize) -> Result<Self, KernelError> {
        Ok(Self {
            loss: Tensor::zeros(gpu, &[rows])?,
            lse: Tensor::zeros(gpu, &[rows])?,
            argmax: Tensor::zeros(gpu, &[rows])?,
        })
    }
}

/// The 16-byte forward when a row is a whole number of 16-byte chunks (a
/// function of the vocabulary size only, so never of the batch size).
fn fwd_kernel<T: Dtype>(vocab: usize) -> &'static str {
    if vocab.is_multiple_of(16 / std::mem::size_of::<T>()) {
        "xent_fwd_vec"
    } else {
        "xent_fwd"
    }
}

/// Threads per row: a function of the vocabulary size only.
fn block(vocab: usize) -> u32 {
    if vocab >= 8192 { 1024 } else { 128 }
}

fn check<T: Dtype>(
    op: &'static str,
    logits: &Tensor<T>,
    targets: &Tensor<i32>,
    out: &CrossEntropyOut,
) -> Result<(usize, usize), KernelError> {
    let s = expect_rank(op, "logits", logits, 2)?;
    let (rows, vocab) = (s[0], s[1]);
    expect_shape(op, "targets", targets, &[rows])?;
    expect_shape(op, "loss", &out.loss, &[rows])?;
    expect_shape(op, "lse", &out.lse, &[rows])?;
    expect_shape(op, "argmax", &out.argmax, &[rows])?;
    Ok((rows, vocab))
}

/// Forward over `logits` `[n, vocab]`. With `grad = Some((dlogits, scale))`
/// the same launch also writes `dlogits = scale (softmax - onehot)` (pass
/// `1 / valid rows` for a mean loss).
pub fn cross_entropy_fwd<T: Dtype>(
    gpu: &Gpu,
    logits: &Tensor<T>,
    targets: &Tensor<i32>,
    out: &mut CrossEntropyOut,
    grad: Option<(&mut Tensor<T>, f32)>,
) -> Result<(), KernelError> {
    const OP: &str = "cross_entropy_fwd";
    let (rows, vocab) = check(OP, logits, targets, out)?;
    if let Some((d, _)) = &grad {
        expect_shape(OP, "dlogits", d, logits.shape())?;
    }
    if rows == 0 {
        return Ok(());
    }
    let v32 = int(OP, "vocab", vocab)?;
    // A null dlogits pointer tells the kernel to skip the gradient.
    let null: u64 = 0;
    let scale = grad.as_ref().map_or(0.0, |(_, s)| *s);
    let f = gpu.function(&XENT, &entry::<T>(fwd_kernel::<T>(vocab)))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&logits.data).arg(&targets.data);
    args.arg(&mut out.loss.data)
        .arg(&mut out.lse.data)
        .arg(&mut out.argmax.data);
    match grad {
        Some((d, _)) => args.arg(&mut d.data),
        None => args.arg(&null),
    };
    args.arg(&scale).arg(&v32);
    let grid = (grid_dim(OP, "rows", rows)?, 1, 1);
    ffi::launch(args, cfg(grid, block(vocab), 0), checked(), OP)
}

/// Forward that overwrites `logits` with `scale (softmax - onehot)`: the
/// training path, with no second `[n, vocab]` buffer.
pub fn cross_entropy_fwd_grad_inplace<T: Dtype>(
    gpu: &Gpu,
    logits: &mut Tensor<T>,
    targets: &Tensor<i32>,
    out: &mut CrossEntropyOut,
    scale: f32,
) -> Result<(), KernelError> {
    const OP: &str = "cross_entropy_fwd_grad_inplace";
    let (rows, vocab) = check(OP, logits, targets, out)?;
    if rows == 0 {
        return Ok(());
    }
    let v32 = int(OP, "vocab", vocab)?;
    let f = gpu.function(&XENT, &entry::<T>(fwd_kernel::<T>(vocab)))?;
    let mut args = gpu.stream().launch_builder(&f);
    // The kernel reads a row fully (and the target's logit) before a
    // barrier, then each thread rewrites only the elements it read.
    args.arg(&logits.data).arg(&targets.data);
    args.arg(&mut out.loss.data)
        .arg(&mut out.lse.data)
        .arg(&mut out.argmax.data);
    args.arg(&logits.data).arg(&scale).arg(&v32);
    let grid = (grid_dim(OP, "rows", rows)?, 1, 1);
    ffi::launch(args, cfg(grid, block(vocab), 0), checked(), OP)
}

/// Backward with a per-row upstream gradient `dloss` `[n]`.
pub fn cross_entropy_bwd<T: Dtype>(
    gpu: &Gpu,
    logits: &Tensor<T>,
    targets: &Tensor<i32>,
    lse: &Tensor<f32>,
    dloss: &Tensor<f32>,
    dlogits: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "cross_entropy_bwd";
    let s = expect_rank(OP, "logits", logits, 2)?;
    let (rows, vocab) = (s[0], s[1]);
    expect_shape(OP, "targets", targets, &[rows])?;
    expect_shape(OP, "lse", lse, &[rows])?;
    expect_shape(OP, "dloss", dloss, &[rows])?;
    expect_shape(OP, "dlogits", dlogits, logits.shape())?;
    if rows == 0 {
        return Ok(());
    }
    let v32 = int(OP, "vocab", vocab)?;
    let f = gpu.function(&XENT, &entry::<T>("xent_bwd"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&logits.data)
        .arg(&targets.data)
        .arg(&lse.data)
        .arg(&dloss.data);
    args.arg(&mut dlogits.data).arg(&v32);
    let grid = (grid_dim(OP, "rows", rows)?, 1, 1);
    ffi::launch(args, cfg(grid, block(vocab), 0), checked(), OP)
}
