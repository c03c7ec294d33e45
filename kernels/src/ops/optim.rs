//! AdamW and global gradient-norm clipping.

use cudarc::driver::PushKernelArg;

use super::{cfg, checked, entry, expect_shape, stride_cfg};
use crate::compile::OPTIM;
use crate::cpu::AdamWConfig;
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// Blocks of the norm's first stage: fixed, not taken from the device, so
/// the summation order (and the bits) are the same on any GPU.
const NORM_BLOCKS: usize = 1024;

/// The global gradient norm and the clip factor, both on the device.
#[derive(Debug)]
pub struct ClipFactor {
    /// `sqrt(sum of squares)` over every gradient, `[1]`.
    pub norm: Tensor<f32>,
    /// `min(1, max_norm / (norm + 1e-6))`, `[1]`; AdamW can read it directly.
    pub scale: Tensor<f32>,
}

/// Computes the global L2 norm of `grads` and the clip factor for
/// `max_norm`, without a host round trip. Apply it with [`scale_by`] or pass
/// `Some(&clip.scale)` to [`adamw_step`].
pub fn clip_grad_norm<T: Dtype>(
    gpu: &Gpu,
    grads: &[&Tensor<T>],
    max_norm: f32,
) -> Result<ClipFactor, KernelError> {
    const OP: &str = "clip_grad_norm";
    let slots = grads.len().max(1) * NORM_BLOCKS;
    let mut partial = Tensor::<f64>::zeros(gpu, &[slots])?;
    let f = gpu.function(&OPTIM, &entry::<T>("sumsq_partial"))?;
    for (i, g) in grads.iter().enumerate() {
        let n = g.numel() as u64;
        let mut slice = partial
            .data
            .slice_mut(i * NORM_BLOCKS..(i + 1) * NORM_BLOCKS);
        let mut args = gpu.stream().launch_builder(&f);
        args.arg(&g.data).arg(&n).arg(&mut slice);
        ffi::launch(args, cfg((NORM_BLOCKS as u32, 1, 1), 256, 0), checked(), OP)?;
    }
    let mut clip = ClipFactor {
        norm: Tensor::zeros(gpu, &[1])?,
        scale: Tensor::zeros(gpu, &[1])?,
    };
    let count = i32::try_from(slots).map_err(|_| KernelError::TooLarge {
        op: OP,
        what: "tensors",
        value: grads.len(),
    })?;
    let f = gpu.function(&OPTIM, "clip_finalize")?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&partial.data).arg(&count).arg(&max_norm);
    args.arg(&mut clip.norm.data).arg(&mut clip.scale.data);
    ffi::launch(args, cfg((1, 1, 1), 256, 0), checked(), OP)?;
    Ok(clip)
}

/// `g *= scale[0]` in place.
pub fn scale_by<T: Dtype>(
    gpu: &Gpu,
    g: &mut Tensor<T>,
    scale: &Tensor<f32>,
) -> Result<(), KernelError> {
    const OP: &str = "scale_by";
    expect_shape(OP, "scale", scale, &[1])?;
    let n = g.numel() as u64;
    let launch = stride_cfg(gpu, g.numel());
    let f = gpu.function(&OPTIM, &entry::<T>("scale"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&mut g.data).arg(&n).arg(&scale.data);
    ffi::launch(args, launch, checked(), OP)
}

/// One AdamW step on f32 master weights `p` with moments `m`, `v` and
/// gradient `g` (times `grad_scale[0]` when given: the clip factor).
pub fn adamw_step<T: Dtype>(
    gpu: &Gpu,
    p: &mut Tensor<f32>,
    g: &Tensor<T>,
    m: &mut Tensor<f32>,
    v: &mut Tensor<f32>,
    config: &AdamWConfig,
    grad_scale: Option<&Tensor<f32>>,
) -> Result<(), KernelError> {
    adamw(gpu, p, g, m, v, config, grad_scale, None)
}

/// [`adamw_step`] that also writes the new weights rounded to `T` into
/// `working` (the copy the next forward pass reads), in the same pass.
#[allow(clippy::too_many_arguments)]
pub fn adamw_step_with_copy<T: Dtype>(
    gpu: &Gpu,
    p: &mut Tensor<f32>,
    g: &Tensor<T>,
    m: &mut Tensor<f32>,
    v: &mut Tensor<f32>,
    config: &AdamWConfig,
    grad_scale: Option<&Tensor<f32>>,
    working: &mut Tensor<T>,
) -> Result<(), KernelError> {
    adamw(gpu, p, g, m, v, config, grad_scale, Some(working))
}

#[allow(clippy::too_many_arguments)]
fn adamw<T: Dtype>(
    gpu: &Gpu,
    p: &mut Tensor<f32>,
    g: &Tensor<T>,
    m: &mut Tensor<f32>,
    v: &mut Tensor<f32>,
    config: &AdamWConfig,
    grad_scale: Option<&Tensor<f32>>,
    working: Option<&mut Tensor<T>>,
) -> Result<(), KernelError> {
    const OP: &str = "adamw_step";
    expect_shape(OP, "g", g, p.shape())?;
    if let Some(w) = &working {
        expect_shape(OP, "working", w, p.shape())?;
    }
    expect_shape(OP, "m", m, p.shape())?;
    expect_shape(OP, "v", v, p.shape())?;
    if let Some(s) = grad_scale {
        expect_shape(OP, "grad_scale", s, &[1])?;
    }
    if config.step == 0 {
        return Err(KernelError::Unsupported {
            op: OP,
            what: "step numbers start at 1".to_owned(),
        });
    }
    let (bc1, bc2) = config.bias_corrections();
    let n = p.numel() as u64;
    let lr = config.lr as f32;
    let (b1, b2, eps, wd) = (
        config.beta1 as f32,
        config.beta2 as f32,
        config.eps as f32,
        config.weight_decay as f32,
    );
    let step_size = (config.lr / bc1) as f32;
    let bc2_sqrt = bc2.sqrt() as f32;
    let null: u64 = 0;
    let launch = stride_cfg(gpu, p.numel());
    let f = gpu.function(&OPTIM, &entry::<T>("adamw"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&mut p.data)
        .arg(&g.data)
        .arg(&mut m.data)
        .arg(&mut v.data)
        .arg(&n);
    args.arg(&lr)
        .arg(&b1)
        .arg(&b2)
        .arg(&eps)
        .arg(&wd)
        .arg(&step_size)
        .arg(&bc2_sqrt);
    match grad_scale {
        Some(s) => args.arg(&s.data),
        None => args.arg(&null),
    };
    match working {
        Some(w) => args.arg(&mut w.data),
        None => args.arg(&null),
    };
    ffi::launch(args, launch, checked(), OP)
}
