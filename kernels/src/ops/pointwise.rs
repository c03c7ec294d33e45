//! SiLU, SwiGLU and rotary embeddings.

use cudarc::driver::{LaunchConfig, PushKernelArg};

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

/// Where one side of a RoPE launch lives: token row `r`'s heads start at
/// element `r * stride + offset`.
#[derive(Clone, Copy)]
struct Rows {
    stride: usize,
    offset: usize,
}

/// The checks every RoPE form shares: a `[b, t, h, d]` operand against the
/// tables; returns `(batch, seq, heads, d)`.
fn rope_dims<T: Dtype>(
    op: &'static str,
    name: &'static str,
    x: &Tensor<T>,
    tables: &RopeTables,
) -> Result<(usize, usize, usize, usize), KernelError> {
    let s = expect_rank(op, name, x, 4)?;
    let (batch, seq, heads, d) = (s[0], s[1], s[2], s[3]);
    if d != tables.head_dim || !d.is_multiple_of(2) {
        return Err(KernelError::Shape {
            op,
            tensor: name,
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
    Ok((batch, seq, heads, d))
}

/// Checks that `wide` (`[b * t, width]` or `[b, t, width]`) holds `tokens`
/// rows with columns `offset .. offset + cols`; returns its row stride.
fn cols_stride<T: Dtype>(
    op: &'static str,
    name: &'static str,
    wide: &Tensor<T>,
    tokens: usize,
    offset: usize,
    cols: usize,
) -> Result<usize, KernelError> {
    let width = wide.shape().last().copied().unwrap_or(0);
    let rows = wide.numel().checked_div(width).unwrap_or(0);
    if wide.shape().len() < 2 || rows != tokens || offset + cols > width {
        return Err(KernelError::Shape {
            op,
            tensor: name,
            expected: format!(
                "{tokens} token rows holding columns {offset}..{}",
                offset + cols
            ),
            got: wide.shape().to_vec(),
        });
    }
    Ok(width)
}

#[allow(clippy::too_many_arguments)]
fn rope<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    xr: Rows,
    y: &mut Tensor<T>,
    yr: Rows,
    (seq, heads, d): (usize, usize, usize),
    tables: &RopeTables,
    layout: RopeLayout,
    sign: f32,
    op: &'static str,
) -> Result<(), KernelError> {
    let tokens = x.numel().min(y.numel()) / (heads * d).max(1);
    let pairs = tokens * heads * d / 2;
    if pairs == 0 {
        return Ok(());
    }
    let interleaved = i32::from(layout == RopeLayout::Interleaved);
    let (seq32, h32, d32) = (
        int(op, "seq", seq)?,
        int(op, "heads", heads)?,
        int(op, "d", d)?,
    );
    let (xs, xo, ys, yo) = (
        xr.stride as u64,
        xr.offset as u64,
        yr.stride as u64,
        yr.offset as u64,
    );
    // 16-byte form when a chunk of N elements (8 bf16, 4 f32) never spans two
    // vectors, nor (rotate-half) the two halves, and every row start is
    // chunk-aligned.
    let width = 16 / std::mem::size_of::<T>();
    let aligned = [xr.stride, xr.offset, yr.stride, yr.offset]
        .iter()
        .all(|v| v.is_multiple_of(width));
    let per_vec = match layout {
        RopeLayout::Interleaved if d.is_multiple_of(width) => Some(d / width),
        RopeLayout::RotateHalf if (d / 2).is_multiple_of(width) => Some(d / 2 / width),
        _ => None,
    };
    if let (Some(cpv), true) = (per_vec, aligned) {
        let total = tokens * heads * cpv;
        if let (Ok(total32), Ok(cpv32)) = (u32::try_from(total), u32::try_from(cpv)) {
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
            args.arg(&xs).arg(&xo).arg(&ys).arg(&yo);
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
    args.arg(&xs).arg(&xo).arg(&ys).arg(&yo);
    ffi::launch(args, stride_cfg(gpu, pairs), checked(), op)
}

/// Contiguous `[b, t, h, d]` in and out.
fn rope_contiguous<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    y: &mut Tensor<T>,
    sign: f32,
    op: &'static str,
) -> Result<(), KernelError> {
    let (_, seq, heads, d) = rope_dims(op, "x", x, tables)?;
    expect_shape(op, "y", y, x.shape())?;
    let rows = Rows {
        stride: heads * d,
        offset: 0,
    };
    rope(
        gpu,
        x,
        rows,
        y,
        rows,
        (seq, heads, d),
        tables,
        layout,
        sign,
        op,
    )
}

/// Rotates `x` `[b, t, h, d]` by position `t` in the given layout.
pub fn rope_fwd<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    y: &mut Tensor<T>,
) -> Result<(), KernelError> {
    rope_contiguous(gpu, x, tables, layout, y, 1.0, "rope_fwd")
}

/// Backward of [`rope_fwd`]: rotates `dy` back.
pub fn rope_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    dx: &mut Tensor<T>,
) -> Result<(), KernelError> {
    rope_contiguous(gpu, dy, tables, layout, dx, -1.0, "rope_bwd")
}

/// [`rope_fwd`] reading the heads from columns `offset ..` of each token
/// row of `x` (`[b * t, width]` or `[b, t, width]`, e.g. a fused q/k/v
/// projection) into a contiguous `y` `[b, t, h, d]`.
pub fn rope_fwd_from_cols<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    offset: usize,
    tables: &RopeTables,
    layout: RopeLayout,
    y: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "rope_fwd_from_cols";
    let (b, seq, heads, d) = rope_dims(OP, "y", y, tables)?;
    let stride = cols_stride(OP, "x", x, b * seq, offset, heads * d)?;
    let xr = Rows { stride, offset };
    let yr = Rows {
        stride: heads * d,
        offset: 0,
    };
    rope(gpu, x, xr, y, yr, (seq, heads, d), tables, layout, 1.0, OP)
}

/// [`rope_bwd`] from a contiguous `dy` `[b, t, h, d]` into columns
/// `offset ..` of each token row of `dx` (the other columns are untouched).
pub fn rope_bwd_into_cols<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    dx: &mut Tensor<T>,
    offset: usize,
) -> Result<(), KernelError> {
    const OP: &str = "rope_bwd_into_cols";
    let (b, seq, heads, d) = rope_dims(OP, "dy", dy, tables)?;
    let stride = cols_stride(OP, "dx", dx, b * seq, offset, heads * d)?;
    let xr = Rows {
        stride: heads * d,
        offset: 0,
    };
    let yr = Rows { stride, offset };
    rope(
        gpu,
        dy,
        xr,
        dx,
        yr,
        (seq, heads, d),
        tables,
        layout,
        -1.0,
        OP,
    )
}

/// Checks `q` `[b, t, hq, d]`, `k` and `v` `[b, t, hk, d]` against the
/// fused projection `qkv` (`[b * t, (hq + 2 hk) d]` or `[b, t, ..]`);
/// returns `(tokens, seq, hq, hk, d)` and, when the one-launch 16-byte
/// kernel applies, the RoPE chunks per head vector. The choice depends on
/// the shapes and the layout alone.
#[allow(clippy::type_complexity)]
fn qkv_dims<T: Dtype>(
    op: &'static str,
    qkv: &Tensor<T>,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
) -> Result<((usize, usize, usize, usize, usize), Option<usize>), KernelError> {
    let (b, seq, hq, d) = rope_dims(op, "q", q, tables)?;
    let (_, _, hk, _) = rope_dims(op, "k", k, tables)?;
    expect_shape(op, "k", k, &[b, seq, hk, d])?;
    expect_shape(op, "v", v, &[b, seq, hk, d])?;
    let tokens = b * seq;
    let width = cols_stride(op, "qkv", qkv, tokens, 0, (hq + 2 * hk) * d)?;
    if width != (hq + 2 * hk) * d {
        return Err(KernelError::Shape {
            op,
            tensor: "qkv",
            expected: format!("{tokens} token rows of {} columns", (hq + 2 * hk) * d),
            got: qkv.shape().to_vec(),
        });
    }
    let n = 16 / std::mem::size_of::<T>();
    let cpv = match layout {
        RopeLayout::Interleaved if d.is_multiple_of(n) => Some(d / n),
        RopeLayout::RotateHalf if (d / 2).is_multiple_of(n) => Some(d / 2 / n),
        _ => None,
    };
    // The 2D-block kernel holds a token's units in one block.
    let fused =
        cpv.filter(|cpv| (hq + hk) * cpv + hk * d / n <= 1024 && tokens <= u32::MAX as usize);
    Ok(((tokens, seq, hq, hk, d), fused))
}

/// What a `rope_qkv_split` / `rope_qkv_merge` launch takes after its four
/// tensors: the entry point, the scalar arguments and the grid.
struct QkvLaunch {
    entry: String,
    ints: [i32; 5],
    tokens: u32,
    cpv: u32,
    config: LaunchConfig,
}

#[allow(clippy::too_many_arguments)]
fn qkv_launch<T: Dtype>(
    name: &str,
    layout: RopeLayout,
    (tokens, seq, hq, hk, d): (usize, usize, usize, usize, usize),
    cpv: usize,
    op: &'static str,
) -> Result<QkvLaunch, KernelError> {
    let n = 16 / std::mem::size_of::<T>();
    let per_token = (hq + hk) * cpv + hk * d / n;
    let ints = [
        int(op, "seq", seq)?,
        int(op, "q heads", hq)?,
        int(op, "kv heads", hk)?,
        int(op, "d", d)?,
        i32::from(layout == RopeLayout::Interleaved),
    ];
    let tokens32 = u32::try_from(tokens).map_err(|_| KernelError::TooLarge {
        op,
        what: "tokens",
        value: tokens,
    })?;
    // Tokens per block: whole warps (per_token * rows a multiple of 32), at
    // least 256 threads where that fits in 1024.
    let mut rows = 32 / gcd(per_token, 32);
    while per_token * rows * 2 <= 512 {
        rows *= 2;
    }
    while rows > 1 && per_token * rows > 1024 {
        rows /= 2;
    }
    let config = LaunchConfig {
        grid_dim: (grid_dim(op, "tokens / rows", tokens.div_ceil(rows))?, 1, 1),
        block_dim: (per_token as u32, rows as u32, 1),
        shared_mem_bytes: 0,
    };
    Ok(QkvLaunch {
        entry: entry::<T>(name),
        ints,
        tokens: tokens32,
        cpv: cpv as u32,
        config,
    })
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The fused q/k/v projection `qkv` (`[b * t, (hq + 2 hk) d]`, q's heads,
/// then k's, then v's) split in one launch into `q` `[b, t, hq, d]` and `k`
/// `[b, t, hk, d]`, both rotated by position, and `v` `[b, t, hk, d]`
/// copied: the same bits as [`rope_fwd_from_cols`] twice and
/// [`super::copy_cols`]. Shapes the 16-byte kernel does not take run those
/// three instead.
pub fn rope_qkv_split<T: Dtype>(
    gpu: &Gpu,
    qkv: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    q: &mut Tensor<T>,
    k: &mut Tensor<T>,
    v: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "rope_qkv_split";
    let (dims, fused) = qkv_dims(OP, qkv, q, k, v, tables, layout)?;
    let (tokens, _, hq, hk, d) = dims;
    if tokens == 0 {
        return Ok(());
    }
    let Some(cpv) = fused else {
        rope_fwd_from_cols(gpu, qkv, 0, tables, layout, q)?;
        rope_fwd_from_cols(gpu, qkv, hq * d, tables, layout, k)?;
        return super::copy_cols(gpu, qkv, (hq + hk) * d, v, 0, hk * d);
    };
    let l = qkv_launch::<T>("rope_qkv_split", layout, dims, cpv, OP)?;
    let f = gpu.function(&ELEMENTWISE, &l.entry)?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&qkv.data)
        .arg(&mut q.data)
        .arg(&mut k.data)
        .arg(&mut v.data);
    args.arg(&tables.cos.data).arg(&tables.sin.data);
    for i in &l.ints {
        args.arg(i);
    }
    args.arg(&l.tokens).arg(&l.cpv);
    ffi::launch(args, l.config, checked(), OP)
}

/// Backward of [`rope_qkv_split`]: `dq` and `dk` rotated back and `dv`
/// copied into the fused gradient `dqkv`, in one launch; the same bits as
/// [`rope_bwd_into_cols`] twice and [`super::copy_cols`] (which it runs
/// instead for shapes the 16-byte kernel does not take).
pub fn rope_qkv_merge<T: Dtype>(
    gpu: &Gpu,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    tables: &RopeTables,
    layout: RopeLayout,
    dqkv: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "rope_qkv_merge";
    let (dims, fused) = qkv_dims(OP, dqkv, dq, dk, dv, tables, layout)?;
    let (tokens, _, hq, hk, d) = dims;
    if tokens == 0 {
        return Ok(());
    }
    let Some(cpv) = fused else {
        rope_bwd_into_cols(gpu, dq, tables, layout, dqkv, 0)?;
        rope_bwd_into_cols(gpu, dk, tables, layout, dqkv, hq * d)?;
        return super::copy_cols(gpu, dv, 0, dqkv, (hq + hk) * d, hk * d);
    };
    let l = qkv_launch::<T>("rope_qkv_merge", layout, dims, cpv, OP)?;
    let f = gpu.function(&ELEMENTWISE, &l.entry)?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&dq.data)
        .arg(&dk.data)
        .arg(&dv.data)
        .arg(&mut dqkv.data);
    args.arg(&tables.cos.data).arg(&tables.sin.data);
    for i in &l.ints {
        args.arg(i);
    }
    args.arg(&l.tokens).arg(&l.cpv);
    ffi::launch(args, l.config, checked(), OP)
}

/// SwiGLU over a fused gate/up projection: `gu` is `[rows, 2f]` with the
/// gate in a row's first `f` columns and up in the last `f`; `y` is
/// `[rows, f]`. The same bits as [`swiglu_fwd`] on the two halves.
pub fn swiglu_fused_fwd<T: Dtype>(
    gpu: &Gpu,
    gu: &Tensor<T>,
    y: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "swiglu_fused_fwd";
    let (rows, f) = fused_dims(OP, gu)?;
    expect_shape(OP, "y", y, &[rows, f])?;
    let Some(form) = fused_form::<T>(OP, "swiglu_fused_fwd", f, rows * f)? else {
        return Ok(());
    };
    let func = gpu.function(&ELEMENTWISE, &form.name)?;
    let mut args = gpu.stream().launch_builder(&func);
    args.arg(&gu.data).arg(&mut y.data);
    args.arg(&form.items).arg(&form.per);
    ffi::launch(args, stride_cfg(gpu, form.items as usize), checked(), OP)
}

/// Backward of [`swiglu_fused_fwd`]: `dgu` `[rows, 2f]` (gate then up).
pub fn swiglu_fused_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    gu: &Tensor<T>,
    dgu: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "swiglu_fused_bwd";
    let (rows, f) = fused_dims(OP, gu)?;
    expect_shape(OP, "dy", dy, &[rows, f])?;
    expect_shape(OP, "dgu", dgu, gu.shape())?;
    let Some(form) = fused_form::<T>(OP, "swiglu_fused_bwd", f, rows * f)? else {
        return Ok(());
    };
    let func = gpu.function(&ELEMENTWISE, &form.name)?;
    let mut args = gpu.stream().launch_builder(&func);
    args.arg(&dy.data).arg(&gu.data).arg(&mut dgu.data);
    args.arg(&form.items).arg(&form.per);
    ffi::launch(args, stride_cfg(gpu, form.items as usize), checked(), OP)
}

fn fused_dims<T: Dtype>(op: &'static str, gu: &Tensor<T>) -> Result<(usize, usize), KernelError> {
    let s = expect_rank(op, "gu", gu, 2)?;
    if !s[1].is_multiple_of(2) {
        return Err(KernelError::Shape {
            op,
            tensor: "gu",
            expected: "[rows, 2f] (an even number of columns)".to_owned(),
            got: s.to_vec(),
        });
    }
    Ok((s[0], s[1] / 2))
}

struct FusedForm {
    name: String,
    items: u64,
    per: u32,
}

/// The 16-byte form when `f` is a whole number of chunks (a function of
/// the shape only), else the scalar one; `None` when there is nothing to do.
fn fused_form<T: Dtype>(
    op: &'static str,
    base: &str,
    f: usize,
    n: usize,
) -> Result<Option<FusedForm>, KernelError> {
    if n == 0 {
        return Ok(None);
    }
    let width = 16 / std::mem::size_of::<T>();
    let (name, items, per) = if f.is_multiple_of(width) {
        (format!("{base}_vec"), n / width, f / width)
    } else {
        (base.to_owned(), n, f)
    };
    let per = u32::try_from(per).map_err(|_| KernelError::TooLarge {
        op,
        what: "columns",
        value: f,
    })?;
    Ok(Some(FusedForm {
        name: entry::<T>(&name),
        items: items as u64,
        per,
    }))
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
