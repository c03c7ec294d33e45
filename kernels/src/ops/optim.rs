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

/// Elements per block of the multi-tensor kernels (`MT_CHUNK` in optim.cu).
const MT_CHUNK: usize = 32768;

/// One parameter's tensors for [`adamw_multi`]; all have the same shape.
#[derive(Debug)]
pub struct AdamWParam<'a, T: Dtype> {
    /// `f32` master weights, updated in place.
    pub master: &'a mut Tensor<f32>,
    /// The gradient.
    pub grad: &'a Tensor<T>,
    /// First moment.
    pub m: &'a mut Tensor<f32>,
    /// Second moment.
    pub v: &'a mut Tensor<f32>,
    /// The working copy, overwritten with the new master rounded to `T`.
    pub working: &'a mut Tensor<T>,
}

/// The multi-tensor kernels' tables: per tensor six u64 (addresses of
/// master, gradient, m, v, working copy, then the element count; absent
/// addresses are 0), and per block (tensor, first element). The partition
/// depends on the tensors' sizes only.
fn multi_tables(
    gpu: &Gpu,
    op: &'static str,
    entries: &[[u64; 6]],
) -> Result<(Tensor<u64>, Tensor<u32>, u32), KernelError> {
    let mut chunks = Vec::new();
    for (t, e) in entries.iter().enumerate() {
        let n = usize::try_from(e[5]).unwrap_or(usize::MAX);
        for start in (0..n).step_by(MT_CHUNK) {
            let start32 = u32::try_from(start).map_err(|_| KernelError::TooLarge {
                op,
                what: "elements in one tensor",
                value: n,
            })?;
            chunks.extend([t as u32, start32]);
        }
    }
    let blocks = chunks.len() / 2;
    let grid = super::grid_dim(op, "chunks", blocks)?;
    let flat: Vec<u64> = entries.iter().flatten().copied().collect();
    Ok((
        Tensor::from_host(gpu, &flat, &[entries.len(), 6])?,
        Tensor::from_host(gpu, &chunks, &[blocks.max(1), 2])?,
        grid,
    ))
}

/// [`clip_grad_norm`] in two launches whatever the number of tensors: the
/// sum of squares over fixed chunks of every tensor, then the ordered sum
/// of the chunks.
pub fn clip_grad_norm_multi<T: Dtype>(
    gpu: &Gpu,
    grads: &[&Tensor<T>],
    max_norm: f32,
) -> Result<ClipFactor, KernelError> {
    const OP: &str = "clip_grad_norm_multi";
    let entries: Vec<[u64; 6]> = grads
        .iter()
        .map(|g| {
            let addr = ffi::device_address(&g.data, gpu.stream());
            [0, addr, 0, 0, 0, g.numel() as u64]
        })
        .collect();
    let (table, chunks, grid) = multi_tables(gpu, OP, &entries)?;
    let mut clip = ClipFactor {
        norm: Tensor::zeros(gpu, &[1])?,
        scale: Tensor::zeros(gpu, &[1])?,
    };
    if grid == 0 {
        return Ok(clip);
    }
    let mut partial = Tensor::<f64>::scratch(gpu, &[grid as usize])?;
    let f = gpu.function(&OPTIM, &entry::<T>("sumsq_multi"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&table.data)
        .arg(&chunks.data)
        .arg(&mut partial.data);
    ffi::launch(args, cfg((grid, 1, 1), 256, 0), checked(), OP)?;
    let count = grid as i32;
    let f = gpu.function(&OPTIM, "clip_finalize")?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&partial.data).arg(&count).arg(&max_norm);
    args.arg(&mut clip.norm.data).arg(&mut clip.scale.data);
    ffi::launch(args, cfg((1, 1, 1), 256, 0), checked(), OP)?;
    Ok(clip)
}

/// [`adamw_step_with_copy`] over many parameters in one launch, every
/// gradient times `grad_scale[0]` (the clip factor). Each element gets the
/// same arithmetic as in [`adamw_step`], so the bits are the same.
pub fn adamw_multi<T: Dtype>(
    gpu: &Gpu,
    params: &mut [AdamWParam<'_, T>],
    config: &AdamWConfig,
    grad_scale: &Tensor<f32>,
) -> Result<(), KernelError> {
    const OP: &str = "adamw_multi";
    expect_shape(OP, "grad_scale", grad_scale, &[1])?;
    if config.step == 0 {
        return Err(KernelError::Unsupported {
            op: OP,
            what: "step numbers start at 1".to_owned(),
        });
    }
    let stream = gpu.stream();
    let mut entries = Vec::with_capacity(params.len());
    for p in params.iter() {
        let shape = p.grad.shape();
        expect_shape(OP, "master", p.master, shape)?;
        expect_shape(OP, "m", p.m, shape)?;
        expect_shape(OP, "v", p.v, shape)?;
        expect_shape(OP, "working", p.working, shape)?;
        entries.push([
            ffi::device_address(&p.master.data, stream),
            ffi::device_address(&p.grad.data, stream),
            ffi::device_address(&p.m.data, stream),
            ffi::device_address(&p.v.data, stream),
            ffi::device_address(&p.working.data, stream),
            p.grad.numel() as u64,
        ]);
    }
    let (table, chunks, grid) = multi_tables(gpu, OP, &entries)?;
    if grid == 0 {
        return Ok(());
    }
    let s = config.f32_scalars();
    let (lr, b1, b2, eps, wd) = (s.lr, s.beta1, s.beta2, s.eps, s.weight_decay);
    let (step_size, bc2_sqrt) = (s.step_size, s.bc2_sqrt);
    let f = gpu.function(&OPTIM, &entry::<T>("adamw_multi"))?;
    let mut args = stream.launch_builder(&f);
    args.arg(&table.data).arg(&chunks.data);
    args.arg(&lr)
        .arg(&b1)
        .arg(&b2)
        .arg(&eps)
        .arg(&wd)
        .arg(&step_size)
        .arg(&bc2_sqrt)
        .arg(&grad_scale.data);
    // The kernel writes master, m, v and the working copy through the
    // table; `params` holds them mutably borrowed for this call.
    ffi::launch(args, cfg((grid, 1, 1), 256, 0), checked(), OP)
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
    let n = p.numel() as u64;
    let s = config.f32_scalars();
    let (lr, b1, b2, eps, wd) = (s.lr, s.beta1, s.beta2, s.eps, s.weight_decay);
    let (step_size, bc2_sqrt) = (s.step_size, s.bc2_sqrt);
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
