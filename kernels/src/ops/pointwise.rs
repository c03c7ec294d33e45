//! SiLU, SwiGLU and rotary embeddings.

use cudarc::driver::PushKernelArg;

use super::{cfg, checked, entry, expect_rank, expect_shape, grid_dim, int, stride_cfg};
use crate::compile::ELEMENTWISE;
use crate::cpu::{RopeLayout, RopeTable};
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

fn same_shape<T: Dtype>(
    op: &'static str,
    reference: &Tensor<T>,
    others: &[(&'static str, &[usize])],
) -> Result<(), KernelError> {
    for (name, shape) in others {
        if *shape != reference.shape() {
            return Err(KernelError::Shape {
                op,
                tensor: name,
                expected: format!("{:?}", reference.shape()),
                got: shape.to_vec(),
            });
        }
    }
    Ok(())
}

/// The 16-byte kernel and its chunk count when `n` is a whole number of
/// chunks, else the scalar kernel and `n`. Elementwise results are the same
/// either way.
fn vec_or_scalar<T: Dtype>(base: &'static str, n: usize) -> (&'static str, usize) {
    let width = 16 / std::mem::size_of::<T>();
    if n.is_multiple_of(width) {
        match base {
            "swiglu_fwd" => ("swiglu_fwd_vec", n / width),
            _ => ("swiglu_bwd_vec", n / width),
        }
    } else {
        (base, n)
    }
}

/// `y = x * sigmoid(x)`.
pub fn silu_fwd<T: Dtype>(gpu: &Gpu, x: &Tensor<T>, y: &mut Tensor<T>) -> Result<(), KernelError> {
    const OP: &str = "silu_fwd";
    same_shape(OP, x, &[("y", y.shape())])?;
    let n = x.numel() as u64;
    let f = gpu.function(&ELEMENTWISE, &entry::<T>("silu_fwd"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&x.data).arg(&mut y.data).arg(&n);
    ffi::launch(args, stride_cfg(gpu, x.numel()), checked(), OP)
}

/// Backward of [`silu_fwd`].
pub fn silu_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    x: &Tensor<T>,
    dx: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "silu_bwd";
    same_shape(OP, x, &[("dy", dy.shape()), ("dx", dx.shape())])?;
    let n = x.numel() as u64;
    let f = gpu.function(&ELEMENTWISE, &entry::<T>("silu_bwd"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&dy.data).arg(&x.data).arg(&mut dx.data).arg(&n);
    ffi::launch(args, stride_cfg(gpu, x.numel()), checked(), OP)
}

/// `y = silu(gate) * up`.
pub fn swiglu_fwd<T: Dtype>(
    gpu: &Gpu,
    gate: &Tensor<T>,
    up: &Tensor<T>,
    y: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "swiglu_fwd";
    same_shape(OP, gate, &[("up", up.shape()), ("y", y.shape())])?;
    let (name, items) = vec_or_scalar::<T>("swiglu_fwd", gate.numel());
    let n = items as u64;
    let f = gpu.function(&ELEMENTWISE, &entry::<T>(name))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&gate.data).arg(&up.data).arg(&mut y.data).arg(&n);
    ffi::launch(args, stride_cfg(gpu, items), checked(), OP)
}

/// Backward of [`swiglu_fwd`]: `dgate` and `dup`.
pub fn swiglu_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    gate: &Tensor<T>,
    up: &Tensor<T>,
    dgate: &mut Tensor<T>,
    dup: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "swiglu_bwd";
    same_shape(
        OP,
        gate,
        &[
            ("dy", dy.shape()),
            ("up", up.shape()),
            ("dgate", dgate.shape()),
            ("dup", dup.shape()),
        ],
    )?;
    let (name, items) = vec_or_scalar::<T>("swiglu_bwd", gate.numel());
    let n = items as u64;
    let f = gpu.function(&ELEMENTWISE, &entry::<T>(name))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&dy.data).arg(&gate.data).arg(&up.data);
    args.arg(&mut dgate.data).arg(&mut dup.data).arg(&n);
    ffi::launch(args, stride_cfg(gpu, items), checked(), OP)
}

/// A [`RopeTable`] on the device.
#[derive(Debug)]
pub struct RopeTables {
    cos: Tensor<f32>,
    sin: Tensor<f32>,
    head_dim: usize,
    positions: usize,
}

impl RopeTables {
    /// Uploads the host tables (the GPU rotates by exactly these values).
    pub fn new(gpu: &Gpu, table: &RopeTable) -> Result<Self, KernelError> {
        let shape = [table.positions, table.head_dim / 2];
        Ok(Self {
            cos: Tensor::from_host(gpu, &table.cos, &shape)?,
            sin: Tensor::from_host(gpu, &table.sin, &shape)?,
            head_dim: table.head_dim,
            positions: table.positions,
        })
    }
}

fn rope<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    y: &mut Tensor<T>,
    sign: f32,
    op: &'static str,
) -> Result<(), KernelError> {
    let s = expect_rank(op, "x", x, 4)?;
    let (seq, heads, d) = (s[1], s[2], s[3]);
    if d != tables.head_dim || !d.is_multiple_of(2) {
        return Err(KernelError::Shape {
            op,
            tensor: "x",
            expected: format!("[b, t, h, {}] with an even head dimension", tables.head_dim),
            got: s.to_vec(),
        });
    }
    if seq > tables.positions {
        return Err(KernelError::Unsupported {
            op,
            what: format!(
                "sequence length {seq} exceeds the table's {} positions",
                tables.positions
            ),
        });
    }
    expect_shape(op, "y", y, x.shape())?;
    let pairs = x.numel() / 2;
    let interleaved = i32::from(layout == RopeLayout::Interleaved);
    let (seq32, h32, d32) = (
        int(op, "seq", seq)?,
        int(op, "heads", heads)?,
        int(op, "d", d)?,
    );
    // 16-byte form when a chunk of N elements (8 bf16, 4 f32) never spans two
    // vectors, nor (rotate-half) the two halves.
    let width = 16 / std::mem::size_of::<T>();
    let per_vec = match layout {
        RopeLayout::Interleaved if d.is_multiple_of(width) => Some(d / width),
        RopeLayout::RotateHalf if (d / 2).is_multiple_of(width) => Some(d / 2 / width),
        _ => None,
    };
    if let Some(cpv) = per_vec {
        let total = (x.numel() / d) * cpv;
        if let (Ok(total32), Ok(cpv32)) = (u32::try_from(total), u32::try_from(cpv)) {
            if total == 0 {
                return Ok(());
            }
            let f = gpu.function(&ELEMENTWISE, &entry::<T>("rope_vec"))?;
            let mut args = gpu.stream().launch_builder(&f);
            args.arg(&x.data)
                .arg(&mut y.data)
                .arg(&tables.cos.data)
                .arg(&tables.sin.data);
            args.arg(&seq32)
                .arg(&h32)
                .arg(&d32)
                .arg(&interleaved)
                .arg(&sign)
                .arg(&total32)
                .arg(&cpv32);
            let blocks = grid_dim(op, "chunks / 256", total.div_ceil(256))?;
            return ffi::launch(args, cfg((blocks, 1, 1), 256, 0), checked(), op);
        }
    }
    let pairs64 = pairs as u64;
    let f = gpu.function(&ELEMENTWISE, &entry::<T>("rope"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&x.data)
        .arg(&mut y.data)
        .arg(&tables.cos.data)
        .arg(&tables.sin.data);
    args.arg(&seq32)
        .arg(&h32)
        .arg(&d32)
        .arg(&interleaved)
        .arg(&sign)
        .arg(&pairs64);
    ffi::launch(args, stride_cfg(gpu, pairs), checked(), op)
}

/// Rotates `x` `[b, t, h, d]` by position `t` in the given layout.
pub fn rope_fwd<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    y: &mut Tensor<T>,
) -> Result<(), KernelError> {
    rope(gpu, x, tables, layout, y, 1.0, "rope_fwd")
}

/// Backward of [`rope_fwd`]: rotates `dy` back.
pub fn rope_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    dx: &mut Tensor<T>,
) -> Result<(), KernelError> {
    rope(gpu, dy, tables, layout, dx, -1.0, "rope_bwd")
}

/// Queues a one-thread kernel that busy-waits `cycles` SM clocks (for
/// benchmarks: work queued behind it starts back to back, with no launch
/// latency in between). Reads and writes no memory.
pub fn gpu_spin(gpu: &Gpu, cycles: i64) -> Result<(), KernelError> {
    const OP: &str = "gpu_spin";
    let f = gpu.function(&ELEMENTWISE, "gpu_spin")?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&cycles);
    ffi::launch(args, cfg((1, 1, 1), 1, 0), checked(), OP)
}
