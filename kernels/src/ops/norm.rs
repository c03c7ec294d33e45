//! RMSNorm.

use cudarc::driver::PushKernelArg;

use super::{cfg, checked, entry, expect_shape, grid_dim, int};
use crate::compile::NORM;
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// Rows per chunk of the first stage of column sums (dw).
const ROWS_PER_CHUNK: usize = 32;

/// Rows per block of the one-pass backward for K = 5..8: a multiple of its 8
/// warps, at least 16, and enough that about 256 blocks cover `rows`. A
/// function of the row count alone (it sets the order of the dw sums, never
/// the bits of dx): fewer, longer blocks than one per 16 rows cut the
/// per-block reduction and the partial sums that `sum_chunks` reads.
fn bwd_rows_per_block(rows: usize) -> usize {
    rows.div_ceil(256).next_multiple_of(8).max(16)
}

/// Most chunks of 16 bytes a lane holds in the vectorised kernels (the
/// largest `K` instantiated in norm.cu).
const VEC_CHUNKS: usize = 8;

/// Whether rows of `d` elements take the one-warp-per-row 16-byte kernels:
/// a function of `d` and the type only, so never of the batch size.
fn vectorised<T: Dtype>(d: usize) -> bool {
    let width = 16 / std::mem::size_of::<T>();
    d.is_multiple_of(width) && d / width <= 32 * VEC_CHUNKS
}

/// The vectorised kernels' name for rows of `d`: `K` = 16-byte chunks per
/// lane, the smallest of 1..=8 that holds the row (a function of d alone).
fn vec_entry<T: Dtype>(base: &str, d: usize) -> String {
    entry::<T>(&format!("{base}{}", vec_k::<T>(d)))
}

/// Chunks of 16 bytes per lane in the vectorised kernels for rows of `d`.
fn vec_k<T: Dtype>(d: usize) -> usize {
    (d / (16 / std::mem::size_of::<T>())).div_ceil(32).max(1)
}

/// Rows per block of the shared-memory backward (K <= 4): a multiple of its
/// 8 warps, at least 16, about 512 blocks (4 per SM fit at once on an H100).
/// A function of the row count alone, as [`bwd_rows_per_block`].
fn svec_rows_per_block(rows: usize) -> usize {
    rows.div_ceil(512).next_multiple_of(8).max(16)
}

/// Lanes per row and chunks per lane of the grouped backward
/// (`rmsnorm_bwd_gvec{L}x{K}`), for rows whose 16-byte chunks split evenly
/// over 8 or 16 lanes at an odd K of 5, 7 or 9 (so one warp per row would
/// leave lanes idle in its last chunk): the smaller L that fits. A function
/// of `d` and the type only.
fn gvec_shape<T: Dtype>(d: usize) -> Option<(usize, usize)> {
    let width = 16 / std::mem::size_of::<T>();
    if !d.is_multiple_of(width) {
        return None;
    }
    let chunks = d / width;
    [8, 16].into_iter().find_map(|l| {
        (chunks.is_multiple_of(l) && matches!(chunks / l, 5 | 7 | 9)).then_some((l, chunks / l))
    })
}

/// Rows per block of the grouped backward: a multiple of the rows its 8
/// warps take at once (8 x 32 / L), about 256 blocks (2 per SM fit at once
/// on an H100). A function of the row count and L alone.
fn gvec_rows_per_block(rows: usize, lanes: usize) -> usize {
    let step = 8 * (32 / lanes);
    rows.div_ceil(256).next_multiple_of(step).max(step)
}

/// Threads per row: a function of the row length only.
pub(super) fn row_block(d: usize) -> u32 {
    if d <= 1024 { 128 } else { 256 }
}

fn rows_of<T: Dtype>(op: &'static str, x: &Tensor<T>, d: usize) -> Result<usize, KernelError> {
    match x.shape().last() {
        Some(&last) if last == d && d > 0 => Ok(x.numel() / d),
        _ => Err(KernelError::Shape {
            op,
            tensor: "x",
            expected: format!("[.., {d}]"),
            got: x.shape().to_vec(),
        }),
    }
}

/// `y = x / sqrt(mean(x^2) + eps) * w` over the last dimension `d` (the
/// length of `w`); `rstd` (one f32 per row) is kept for the backward.
pub fn rmsnorm_fwd<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    w: &Tensor<T>,
    eps: f32,
    y: &mut Tensor<T>,
    rstd: &mut Tensor<f32>,
) -> Result<(), KernelError> {
    fwd(gpu, x, w, eps, y, rstd, None, "rmsnorm_fwd")
}

/// [`rmsnorm_fwd`] that also copies `x` into `x_copy` (the residual
/// stream's next buffer, before a product adds into it with beta = 1): in
/// the 16-byte kernels the copy is written from the row already loaded, so
/// x is read once. The same bits as [`rmsnorm_fwd`] then [`super::copy`].
pub fn rmsnorm_fwd_and_copy<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    w: &Tensor<T>,
    eps: f32,
    y: &mut Tensor<T>,
    rstd: &mut Tensor<f32>,
    x_copy: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "rmsnorm_fwd_and_copy";
    expect_shape(OP, "x_copy", x_copy, x.shape())?;
    fwd(gpu, x, w, eps, y, rstd, Some(x_copy), OP)
}

#[allow(clippy::too_many_arguments)]
fn fwd<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    w: &Tensor<T>,
    eps: f32,
    y: &mut Tensor<T>,
    rstd: &mut Tensor<f32>,
    x_copy: Option<&mut Tensor<T>>,
    op: &'static str,
) -> Result<(), KernelError> {
    let d = w.numel();
    let rows = rows_of(op, x, d)?;
    expect_shape(op, "w", w, &[d])?;
    expect_shape(op, "y", y, x.shape())?;
    expect_shape(op, "rstd", rstd, &[rows])?;
    if rows == 0 {
        return Ok(());
    }
    let d32 = int(op, "d", d)?;
    if vectorised::<T>(d) {
        // Four warps per block, one row each.
        let n32 = int(op, "rows", rows)?;
        let f = gpu.function(&NORM, &vec_entry::<T>("rmsnorm_fwd_vec", d))?;
        let mut args = gpu.stream().launch_builder(&f);
        args.arg(&x.data)
            .arg(&w.data)
            .arg(&mut y.data)
            .arg(&mut rstd.data);
        // A null copy pointer: the kernel writes no copy.
        let null = 0u64;
        match x_copy {
            Some(c) => args.arg(&mut c.data),
            None => args.arg(&null),
        };
        args.arg(&n32).arg(&d32).arg(&eps);
        let grid = (grid_dim(op, "rows / 4", rows.div_ceil(4))?, 1, 1);
        return ffi::launch(args, cfg(grid, 128, 0), checked(), op);
    }
    let f = gpu.function(&NORM, &entry::<T>("rmsnorm_fwd"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&x.data)
        .arg(&w.data)
        .arg(&mut y.data)
        .arg(&mut rstd.data)
        .arg(&d32)
        .arg(&eps);
    let grid = (grid_dim(op, "rows", rows)?, 1, 1);
    ffi::launch(args, cfg(grid, row_block(d), 0), checked(), op)?;
    match x_copy {
        Some(c) => super::copy(gpu, x, c),
        None => Ok(()),
    }
}

/// Backward: writes `dx` and `dw` (added to `dw` when `accumulate_dw`).
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    x: &Tensor<T>,
    w: &Tensor<T>,
    rstd: &Tensor<f32>,
    dx: &mut Tensor<T>,
    dw: &mut Tensor<T>,
    accumulate_dw: bool,
) -> Result<(), KernelError> {
    bwd(
        gpu,
        dy,
        x,
        w,
        rstd,
        dx,
        false,
        dw,
        accumulate_dw,
        "rmsnorm_bwd",
    )
}

/// [`rmsnorm_bwd`] that adds its `dx` into `dx_acc` (the gradient of the
/// residual stream, which flows around the norm's branch): `dx_acc += dx`
/// with `dx` first rounded to `T`, the same bits as [`rmsnorm_bwd`] into a
/// buffer and then [`super::add_inplace`], in one pass in the 16-byte
/// kernels.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_bwd_add<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    x: &Tensor<T>,
    w: &Tensor<T>,
    rstd: &Tensor<f32>,
    dx_acc: &mut Tensor<T>,
    dw: &mut Tensor<T>,
    accumulate_dw: bool,
) -> Result<(), KernelError> {
    bwd(
        gpu,
        dy,
        x,
        w,
        rstd,
        dx_acc,
        true,
        dw,
        accumulate_dw,
        "rmsnorm_bwd_add",
    )
}

#[allow(clippy::too_many_arguments)]
fn bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    x: &Tensor<T>,
    w: &Tensor<T>,
    rstd: &Tensor<f32>,
    dx: &mut Tensor<T>,
    add_dx: bool,
    dw: &mut Tensor<T>,
    accumulate_dw: bool,
    op: &'static str,
) -> Result<(), KernelError> {
    let d = w.numel();
    let rows = rows_of(op, x, d)?;
    expect_shape(op, "w", w, &[d])?;
    expect_shape(op, "dy", dy, x.shape())?;
    expect_shape(op, "dx", dx, x.shape())?;
    expect_shape(op, "dw", dw, &[d])?;
    expect_shape(op, "rstd", rstd, &[rows])?;
    if rows == 0 {
        return Ok(());
    }
    let d32 = int(op, "d", d)?;
    let n32 = int(op, "rows", rows)?;
    // The residual the 16-byte kernels add dx into: dx itself (each element
    // is read and then written by the same thread), or null for none.
    let res = if add_dx {
        ffi::device_address(&dx.data, gpu.stream())
    } else {
        0u64
    };
    if add_dx && !vectorised::<T>(d) {
        // The block kernels have no residual form: dx into a buffer, then
        // the add (the same bits as the fused form).
        let mut branch = Tensor::<T>::scratch(gpu, x.shape())?;
        bwd(
            gpu,
            dy,
            x,
            w,
            rstd,
            &mut branch,
            false,
            dw,
            accumulate_dw,
            op,
        )?;
        return super::add_inplace(gpu, dx, &branch);
    }
    if let Some((lanes, k)) = gvec_shape::<T>(d) {
        // Rows split evenly over 8 or 16 lanes: several rows per warp, dw's
        // partial column sums per block as in the form below.
        let per_block = gvec_rows_per_block(rows, lanes);
        let blocks = rows.div_ceil(per_block);
        let per32 = int(op, "rows per block", per_block)?;
        let f = gpu.function(&NORM, &entry::<T>(&format!("rmsnorm_bwd_gvec{lanes}x{k}")))?;
        // dw is summed in this launch (see the kernel's rms_dw_tail), with
        // the partial sums in the Gpu's persistent buffer; were that too
        // small (it holds the most blocks and columns this form launches),
        // scratch partials and sum_chunks would do it instead, with the
        // same bits.
        let (partials, capacity) = gpu.partials_address();
        let fold = blocks * d <= capacity;
        let mut part = if fold {
            None
        } else {
            Some(Tensor::<f32>::scratch(gpu, &[blocks, d])?)
        };
        // The blocks that sum dw's 16-column slices, launched after the
        // main ones (with the persistent partials only): one per slice, at
        // most the multiprocessor count (so that they never hold every slot
        // the main blocks need: see the kernel's rms_dw_tail). Only the
        // work split depends on it, never the order of a sum.
        let sms = gpu.info().multiprocessors.max(1) as usize;
        let tail = if fold { d.div_ceil(16).min(sms) } else { 0 };
        let tail32 = int(op, "tail blocks", tail)?;
        let acc = i32::from(accumulate_dw);
        let mut args = gpu.stream().launch_builder(&f);
        args.arg(&dy.data).arg(&x.data).arg(&w.data).arg(&rstd.data);
        args.arg(&mut dx.data).arg(&res);
        match &mut part {
            Some(p) => args.arg(&mut p.data),
            None => args.arg(&partials),
        };
        args.arg(&n32)
            .arg(&d32)
            .arg(&per32)
            .arg(&mut dw.data)
            .arg(&acc)
            .arg(&tail32);
        let grid = (grid_dim(op, "row blocks", blocks + tail)?, 1, 1);
        // 8 warps, each a slice of 16 / size_of::<T>() rows of the chunk
        // count padded to 4 mod 16 floats (the kernel's P), then w as d
        // f32 values (at most 42.5 KiB, bf16 d = 1152).
        let chunks = lanes * k;
        let padded = chunks + (4usize.wrapping_sub(chunks) & 15);
        let width = 16 / std::mem::size_of::<T>();
        // (At least the dw tail's 32 x 33 floats, which reuse it.)
        let shared = grid_dim(
            op,
            "shared bytes",
            (8 * width * padded * 4 + d * 4).max(32 * 33 * 4),
        )?;
        ffi::launch(args, cfg(grid, 256, shared), checked(), op)?;
        return match part {
            Some(p) => sum_chunks(gpu, &p, blocks, d, dw, accumulate_dw, op),
            None => Ok(()),
        };
    }
    if vectorised::<T>(d) && vec_k::<T>(d) <= 4 {
        // One pass: dx, and per block of rows the partial column sums of
        // dw (each warp's in shared memory), which `sum_chunks` then adds
        // in block order.
        let per_block = svec_rows_per_block(rows);
        let blocks = rows.div_ceil(per_block);
        let per32 = int(op, "rows per block", per_block)?;
        let mut part = Tensor::<f32>::scratch(gpu, &[blocks, d])?;
        let f = gpu.function(&NORM, &vec_entry::<T>("rmsnorm_bwd_svec", d))?;
        let mut args = gpu.stream().launch_builder(&f);
        args.arg(&dy.data).arg(&x.data).arg(&w.data).arg(&rstd.data);
        args.arg(&mut dx.data)
            .arg(&res)
            .arg(&mut part.data)
            .arg(&n32)
            .arg(&d32)
            .arg(&per32);
        let grid = (grid_dim(op, "row blocks", blocks)?, 1, 1);
        let shared = grid_dim(op, "shared bytes", 8 * d * 4)?;
        ffi::launch(args, cfg(grid, 256, shared), checked(), op)?;
        return sum_chunks(gpu, &part, blocks, d, dw, accumulate_dw, op);
    }
    if vectorised::<T>(d) {
        // Longer rows (K = 5..8): the same, each warp's column sums in
        // registers.
        let per_block = bwd_rows_per_block(rows);
        let blocks = rows.div_ceil(per_block);
        let per32 = int(op, "rows per block", per_block)?;
        let mut part = Tensor::<f32>::scratch(gpu, &[blocks, d])?;
        let f = gpu.function(&NORM, &vec_entry::<T>("rmsnorm_bwd_vec", d))?;
        let mut args = gpu.stream().launch_builder(&f);
        args.arg(&dy.data).arg(&x.data).arg(&w.data).arg(&rstd.data);
        args.arg(&mut dx.data)
            .arg(&res)
            .arg(&mut part.data)
            .arg(&n32)
            .arg(&d32)
            .arg(&per32);
        let grid = (grid_dim(op, "row blocks", blocks)?, 1, 1);
        ffi::launch(args, cfg(grid, 256, 0), checked(), op)?;
        return sum_chunks(gpu, &part, blocks, d, dw, accumulate_dw, op);
    }
    let f = gpu.function(&NORM, &entry::<T>("rmsnorm_bwd_dx"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&dy.data)
        .arg(&x.data)
        .arg(&w.data)
        .arg(&rstd.data)
        .arg(&mut dx.data)
        .arg(&d32);
    let grid = (grid_dim(op, "rows", rows)?, 1, 1);
    ffi::launch(args, cfg(grid, row_block(d), 0), checked(), op)?;

    let chunks = rows.div_ceil(ROWS_PER_CHUNK);
    if chunks > 65_535 {
        return Err(KernelError::TooLarge {
            op,
            what: "rows / 32",
            value: chunks,
        });
    }
    let mut part = Tensor::<f32>::scratch(gpu, &[chunks, d])?;
    let per = int(op, "rows per chunk", ROWS_PER_CHUNK)?;
    let f = gpu.function(&NORM, &entry::<T>("rmsnorm_dw_partial"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&dy.data)
        .arg(&x.data)
        .arg(&rstd.data)
        .arg(&mut part.data);
    args.arg(&n32).arg(&d32).arg(&per);
    let col_blocks = grid_dim(op, "d / 256", d.div_ceil(256))?;
    ffi::launch(
        args,
        cfg((col_blocks, chunks as u32, 1), 256, 0),
        checked(),
        op,
    )?;
    sum_chunks(gpu, &part, chunks, d, dw, accumulate_dw, op)
}

pub(super) fn sum_chunks<T: Dtype>(
    gpu: &Gpu,
    part: &Tensor<f32>,
    chunks: usize,
    d: usize,
    out: &mut Tensor<T>,
    accumulate: bool,
    op: &'static str,
) -> Result<(), KernelError> {
    expect_shape(op, "partial sums", part, &[chunks, d])?;
    expect_shape(op, "column sum", out, &[d])?;
    let f = gpu.function(&NORM, &entry::<T>("sum_chunks"))?;
    let (c32, d32, acc) = (
        int(op, "chunks", chunks)?,
        int(op, "d", d)?,
        i32::from(accumulate),
    );
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&part.data)
        .arg(&c32)
        .arg(&d32)
        .arg(&mut out.data)
        .arg(&acc);
    // 32 columns per block of 32 warps (see the kernel).
    let blocks = grid_dim(op, "d / 32", d.div_ceil(32))?;
    ffi::launch(args, cfg((blocks, 1, 1), 1024, 0), checked(), op)
}
