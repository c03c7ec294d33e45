//! Causal grouped-query attention, flash-style (no `T x T` buffer).

use cudarc::driver::PushKernelArg;
use cudarc::driver::sys::CUfunction_attribute;

use super::{cfg, checked, expect_rank, expect_shape, grid_dim, int, stride_cfg};
use crate::compile::{ATTENTION_D64, ATTENTION_D128, ATTENTION_TC, ATTENTION_WG, KernelSource};
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// Query rows per block (forward, dq) and key rows per block (dk, dv): one
/// thread each. Must match `ATTN_BQ` / `ATTN_BKV` in `attention.cu`.
const ROWS_PER_BLOCK: usize = 64;
/// `ATTN_QT` in `attention.cu`.
const Q_TILE: usize = 16;
/// Rows per block of the tensor-core kernels (four warps of 32 rows).
const TC_ROWS_PER_BLOCK: usize = 128;
/// Threads per block of the tensor-core kernels.
const TC_THREADS: u32 = 128;
/// Dynamic shared memory of the tensor-core backward kernel (`TC_DKVQ_SMEM`
/// in attention_tc.cu): ten padded 64 x 72 bf16 tiles (K, V, two stages of
/// Q and dO, dS^T of one step), plus two stages of 64 lse and 64 delta
/// values.
const TC_DKVQ_SMEM: u32 = 10 * 64 * 72 * 2 + 4 * 64 * 4;
/// From this sequence length on, the tensor-core backward kernel runs one
/// block per query head instead of one per kv-head group and a second
/// kernel adds the dk/dv f32 partials in head order. The group's longest
/// block (key block 0 walks every query tile of every head of the group)
/// then shrinks by the group size; the partials cost a fixed 2 x 4 bytes
/// per query-head row and column, which outweighs the shorter block at
/// short lengths (the threshold was measured on the H100:
/// docs/notes/kernel-log.md, attention fourth pass). A function of the
/// sequence length alone, so a row's bits do not depend on the batch size.
const TC_DKV_SPLIT_FROM: usize = 2048;
/// Threads per block of the `wgmma` forward (two warpgroups of 64 rows).
const WG_FWD_THREADS: u32 = 256;
/// Its dynamic shared memory (`WG_FWD_SMEM` in attention_wg_fwd.cu): six
/// swizzled 64 x 64 bf16 tiles (Q, two stages of K and V) and 1 KB to
/// align them to 1024 bytes.
const WG_FWD_SMEM: u32 = 6 * 8192 + 1024;
/// Threads per block of the `wgmma` backward: two MMA warpgroups of 64
/// keys and the dq-writer warpgroup (attention_wg_bwd.cu). It runs at every
/// sequence length with one block per kv-head group, never the per-head
/// split, which measured slower for this kernel at 2048 and 4096
/// (docs/notes/kernel-log.md, attention seventh pass).
const WG_BWD_THREADS: u32 = 384;
/// Dynamic shared memory of the `wgmma` backward (`WGB_SMEM` in
/// attention_wg_bwd.cu): twelve swizzled 64 x 64 bf16 tiles (K and V of
/// the block's 128 keys, three stages of Q and dO, dS^T of 128 keys), three
/// stages of 64 lse and 64 delta values, four parked dq shares of 256 x 16
/// f32, and 1 KB to align the tiles.
const WG_BWD_SMEM: u32 = 12 * 8192 + 6 * 64 * 4 + 4 * 256 * 16 * 4 + 1024;
/// Turn counters per (b, query head, 64-query tile) of the `wgmma`
/// backward: one used, padded to eight (32 bytes) so that tiles' counters
/// do not share a sector.
const WG_BWD_TURNS_PER_TILE: usize = 8;

struct Dims {
    batch: usize,
    seq: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

fn dims<T: Dtype>(
    op: &'static str,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
) -> Result<Dims, KernelError> {
    let qs = expect_rank(op, "q", q, 4)?;
    let ks = expect_rank(op, "k", k, 4)?;
    let d = Dims {
        batch: qs[0],
        seq: qs[1],
        q_heads: qs[2],
        kv_heads: ks[2],
        head_dim: qs[3],
    };
    expect_shape(op, "k", k, &[d.batch, d.seq, d.kv_heads, d.head_dim])?;
    expect_shape(op, "v", v, k.shape())?;
    if d.kv_heads == 0 || !d.q_heads.is_multiple_of(d.kv_heads) {
        return Err(KernelError::Unsupported {
            op,
            what: format!(
                "{} query heads are not a multiple of {} kv heads",
                d.q_heads, d.kv_heads
            ),
        });
    }
    if !matches!(d.head_dim, 64 | 128) {
        return Err(KernelError::Unsupported {
            op,
            what: format!(
                "head dimension {} (kernels exist for 64 and 128)",
                d.head_dim
            ),
        });
    }
    Ok(d)
}

fn name<T: Dtype>(base: &str, d: usize) -> String {
    format!("{base}_{}_d{d}", T::SUFFIX)
}

/// The module instantiated for head dimension `d` (checked by `dims`).
fn module(d: usize) -> &'static KernelSource {
    if d == 128 {
        &ATTENTION_D128
    } else {
        &ATTENTION_D64
    }
}

/// bf16 with head dimension 64 runs on the tensor cores (attention_tc.cu);
/// f32 (which must stay f32-exact) and d = 128 run the FMA kernels.
fn tensor_cores<T: Dtype>(d: usize) -> bool {
    T::SUFFIX == "bf16" && d == 64
}

/// Grid of the tensor-core kernels: (batch * heads, 128-row blocks), so
/// that blocks start head-fastest and each kernel can take its longest
/// blocks first (see attention_tc.cu). The y dimension is capped at 65535.
fn tc_grid(op: &'static str, heads: usize, seq: usize) -> Result<(u32, u32, u32), KernelError> {
    let tiles = seq.div_ceil(TC_ROWS_PER_BLOCK);
    if tiles > 65535 {
        return Err(KernelError::TooLarge {
            op,
            what: "128-row blocks",
            value: tiles,
        });
    }
    Ok((grid_dim(op, "batch * heads", heads)?, tiles as u32, 1))
}

/// Lets `f` use `bytes` of dynamic shared memory (past the default 48 KB).
fn raise_smem(f: &cudarc::driver::CudaFunction, bytes: u32) -> Result<(), KernelError> {
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        bytes as i32,
    )
    .map_err(KernelError::driver(
        "raising a kernel's shared memory limit",
    ))
}

/// `o = softmax(q k^T / sqrt(d) + causal mask) v`; `q`, `o` are
/// `[b, t, hq, d]`, `k`, `v` are `[b, t, hkv, d]`, `lse` is `[b, hq, t]`.
pub fn attention_fwd<T: Dtype>(
    gpu: &Gpu,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &mut Tensor<T>,
    lse: &mut Tensor<f32>,
) -> Result<(), KernelError> {
    const OP: &str = "attention_fwd";
    let d = dims(OP, q, k, v)?;
    expect_shape(OP, "o", o, q.shape())?;
    expect_shape(OP, "lse", lse, &[d.batch, d.q_heads, d.seq])?;
    if q.numel() == 0 {
        return Ok(());
    }
    let (seq, hq, hkv) = (
        int(OP, "seq", d.seq)?,
        int(OP, "q heads", d.q_heads)?,
        int(OP, "kv heads", d.kv_heads)?,
    );
    let scale = (1.0 / (d.head_dim as f64).sqrt()) as f32;
    let tc = tensor_cores::<T>(d.head_dim);
    let wg = tc && gpu.wgmma_attention();
    let (f, threads, smem) = if wg {
        let f = gpu.function(&ATTENTION_WG, "attn_fwd_wg_bf16_d64")?;
        raise_smem(&f, WG_FWD_SMEM)?;
        (f, WG_FWD_THREADS, WG_FWD_SMEM)
    } else if tc {
        let f = gpu.function(&ATTENTION_TC, "attn_fwd_tc_bf16_d64")?;
        (f, TC_THREADS, 0)
    } else {
        let f = gpu.function(module(d.head_dim), &name::<T>("attn_fwd", d.head_dim))?;
        (f, ROWS_PER_BLOCK as u32, 0)
    };
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&q.data)
        .arg(&k.data)
        .arg(&v.data)
        .arg(&mut o.data)
        .arg(&mut lse.data);
    args.arg(&seq).arg(&hq).arg(&hkv).arg(&scale);
    let grid = if tc {
        tc_grid(OP, d.batch * d.q_heads, d.seq)?
    } else {
        (
            grid_dim(OP, "query tiles", d.seq.div_ceil(ROWS_PER_BLOCK))?,
            grid_dim(OP, "batch * q heads", d.batch * d.q_heads)?,
            1,
        )
    };
    ffi::launch(args, cfg(grid, threads, smem), checked(), OP)
}

/// Gradients of [`attention_fwd`]: `dq`, `dk`, `dv` from `dout`, the inputs,
/// and the forward's `o` and `lse`.
#[allow(clippy::too_many_arguments)]
pub fn attention_bwd<T: Dtype>(
    gpu: &Gpu,
    dout: &Tensor<T>,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &mut Tensor<T>,
    dk: &mut Tensor<T>,
    dv: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "attention_bwd";
    let d = dims(OP, q, k, v)?;
    expect_shape(OP, "dout", dout, q.shape())?;
    expect_shape(OP, "o", o, q.shape())?;
    expect_shape(OP, "lse", lse, &[d.batch, d.q_heads, d.seq])?;
    expect_shape(OP, "dq", dq, q.shape())?;
    expect_shape(OP, "dk", dk, k.shape())?;
    expect_shape(OP, "dv", dv, k.shape())?;
    if q.numel() == 0 {
        return Ok(());
    }
    let (seq, hq, hkv) = (
        int(OP, "seq", d.seq)?,
        int(OP, "q heads", d.q_heads)?,
        int(OP, "kv heads", d.kv_heads)?,
    );
    let scale = (1.0 / (d.head_dim as f64).sqrt()) as f32;

    let mut delta = Tensor::<f32>::zeros(gpu, &[d.batch, d.q_heads, d.seq])?;
    let rows = d.batch * d.seq * d.q_heads;
    let rows64 = rows as u64;
    let tc = tensor_cores::<T>(d.head_dim);
    // The tensor-core module's delta kernel gives each row eight threads
    // (16-byte loads); the FMA one, one thread.
    let (f, delta_threads) = if tc {
        (
            gpu.function(&ATTENTION_TC, "attn_bwd_delta_tc_bf16_d64")?,
            rows * 8,
        )
    } else {
        (
            gpu.function(module(d.head_dim), &name::<T>("attn_bwd_delta", d.head_dim))?,
            rows,
        )
    };
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&o.data)
        .arg(&dout.data)
        .arg(&mut delta.data)
        .arg(&seq)
        .arg(&hq)
        .arg(&rows64);
    ffi::launch(args, stride_cfg(gpu, delta_threads), checked(), OP)?;

    if tc {
        let path = if gpu.wgmma_attention() {
            BwdPath::Wgmma
        } else {
            BwdPath::MmaSync
        };
        return tc_dkvq(gpu, &d, dout, q, k, v, lse, &delta, dq, dk, dv, scale, path);
    }
    let f = gpu.function(module(d.head_dim), &name::<T>("attn_bwd_dq", d.head_dim))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&q.data)
        .arg(&k.data)
        .arg(&v.data)
        .arg(&dout.data)
        .arg(&lse.data)
        .arg(&delta.data);
    args.arg(&mut dq.data)
        .arg(&seq)
        .arg(&hq)
        .arg(&hkv)
        .arg(&scale);
    let grid = (
        grid_dim(OP, "query tiles", d.seq.div_ceil(ROWS_PER_BLOCK))?,
        grid_dim(OP, "batch * q heads", d.batch * d.q_heads)?,
        1,
    );
    ffi::launch(args, cfg(grid, ROWS_PER_BLOCK as u32, 0), checked(), OP)?;

    // Shared memory of the dk/dv kernel, as laid out in attention.cu.
    let hd = d.head_dim;
    let floats = 2 * ROWS_PER_BLOCK * (hd + 1) + 2 * Q_TILE * hd + 2 * Q_TILE;
    let smem = (floats * 4) as u32;
    let f = gpu.function(module(d.head_dim), &name::<T>("attn_bwd_dkv", d.head_dim))?;
    raise_smem(&f, smem)?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&q.data)
        .arg(&k.data)
        .arg(&v.data)
        .arg(&dout.data)
        .arg(&lse.data)
        .arg(&delta.data);
    args.arg(&mut dk.data)
        .arg(&mut dv.data)
        .arg(&seq)
        .arg(&hq)
        .arg(&hkv)
        .arg(&scale);
    let grid = (
        grid_dim(OP, "key tiles", d.seq.div_ceil(ROWS_PER_BLOCK))?,
        grid_dim(OP, "batch * kv heads", d.batch * d.kv_heads)?,
        1,
    );
    ffi::launch(args, cfg(grid, ROWS_PER_BLOCK as u32, smem), checked(), OP)
}

/// How many key blocks (the first, longest ones) the `wgmma` backward
/// splits in two pieces by query tiles, from the sequence length alone (so
/// a row's bits do not depend on the batch size). Key block j walks
/// ceil(seq / 64) - 2 j query tiles, so with one block per (batch, kv head,
/// key block) the first blocks are up to twice as long as the average and
/// the launch's last wave runs them nearly alone. Each split costs a
/// second K/V load and the dk/dv exchange, so too many splits lose again;
/// below 2048 every split measured slower. One key block in four
/// (ceil(seq / 128) / 4) is split from 2048 on: the fastest count at 2048
/// and 4096 in a sweep on the H100 (docs/notes/kernel-log.md, attention
/// eighth pass).
fn wg_bwd_split_blocks(seq: usize) -> usize {
    if seq < 2048 {
        return 0;
    }
    // At most half the 64-query tiles: every piece keeps a tile.
    (seq.div_ceil(128) / 4).min(seq.div_ceil(64) / 2)
}

/// Which fused backward kernel [`tc_dkvq`] launches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BwdPath {
    /// `attn_bwd_dkvq_tc_bf16_d64` (mma.sync).
    MmaSync,
    /// `attn_bwd_dkvq_wg_bf16_d64` (wgmma, sm_90a), no per-head split; from
    /// 2048 on its first key blocks split by query tiles
    /// ([`wg_bwd_split_blocks`]).
    Wgmma,
}

/// dq, dk and dv on the tensor cores in one pass: one block per (batch, kv
/// head, 128 keys) walking every query head of the group, or, from
/// `TC_DKV_SPLIT_FROM` on, one block per query head writing dk/dv f32
/// partials that `attn_bwd_dkv_sum_bf16_d64` adds in head order. dq is
/// summed across key blocks in key-block order inside the kernel. `path`
/// picks the kernel: the `wgmma` one (attention_wg_bwd.cu) takes the same
/// arguments and dq scratch as the `mma.sync` one, but never splits by
/// heads; instead, from 2048 on, its grid has [`wg_bwd_split_blocks`] more
/// blocks (near and far pieces of the first key blocks), `part` holds a
/// piece's f32 dk/dv sums, its `hp` argument is the split count, dq's sum
/// runs in `wgb_rank`'s order, and it keeps eight turn counters per tile
/// plus two words per split key block.
#[allow(clippy::too_many_arguments)]
fn tc_dkvq<T: Dtype>(
    gpu: &Gpu,
    d: &Dims,
    dout: &Tensor<T>,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    dq: &mut Tensor<T>,
    dk: &mut Tensor<T>,
    dv: &mut Tensor<T>,
    scale: f32,
    path: BwdPath,
) -> Result<(), KernelError> {
    const OP: &str = "attention_bwd";
    let (seq, hq, hkv) = (
        int(OP, "seq", d.seq)?,
        int(OP, "q heads", d.q_heads)?,
        int(OP, "kv heads", d.kv_heads)?,
    );
    let group = d.q_heads / d.kv_heads;
    // Query heads per block: the whole group, or one.
    // The wgmma kernel never splits by heads (see WG_BWD_THREADS).
    let split_from = match path {
        BwdPath::Wgmma => usize::MAX,
        BwdPath::MmaSync => TC_DKV_SPLIT_FROM,
    };
    let hp = if d.seq >= split_from { 1 } else { group };
    let nparts = group / hp;
    // The wgmma kernel's split key blocks (pieces by query tiles).
    let pieces = match path {
        BwdPath::Wgmma => wg_bwd_split_blocks(d.seq),
        BwdPath::MmaSync => 0,
    };
    let mut grid = tc_grid(OP, d.batch * d.kv_heads * nparts, d.seq)?;
    grid.1 += pieces as u32; // at most seq / 128 more: within tc_grid's check
    let split_i = int(OP, "split key blocks", pieces)?;
    let (f, threads, smem) = match path {
        BwdPath::Wgmma => (
            gpu.function(&ATTENTION_WG, "attn_bwd_dkvq_wg_bf16_d64")?,
            WG_BWD_THREADS,
            WG_BWD_SMEM,
        ),
        BwdPath::MmaSync => (
            gpu.function(&ATTENTION_TC, "attn_bwd_dkvq_tc_bf16_d64")?,
            TC_THREADS,
            TC_DKVQ_SMEM,
        ),
    };
    raise_smem(&f, smem)?;
    // dq's running f32 sum, shaped like dq (key block 0 of each tile stores
    // first, so no fill), and one zeroed u32 turn counter per (b, query
    // head, 64-query tile); zero f32 bits are zero u32 bits.
    let mut dqacc = Tensor::<f32>::scratch(gpu, &[d.batch, d.seq, d.q_heads, d.head_dim])?;
    // (The wgmma form keeps eight per tile, see WG_BWD_TURNS_PER_TILE.)
    let per_tile = match path {
        BwdPath::Wgmma => WG_BWD_TURNS_PER_TILE,
        BwdPath::MmaSync => 1,
    };
    // The wgmma kernel's split key blocks keep two more zeroed words each
    // (ticket, ready) after the turn counters.
    let mut turn = Tensor::<f32>::zeros(
        gpu,
        &[d.batch * d.q_heads * d.seq.div_ceil(64) * per_tile + d.batch * d.kv_heads * pieces * 2],
    )?;
    // f32 partial sums of each part: [b * kv heads * parts, 2, seq, 64],
    // every row below seq written by the kernel; for the wgmma kernel's
    // split key blocks, the first-finished piece's sums: [b * kv heads *
    // split, 2, 128, 64].
    let mut part = if nparts > 1 {
        Some(Tensor::<f32>::scratch(
            gpu,
            &[d.batch * d.kv_heads * nparts, 2, d.seq, 64],
        )?)
    } else if pieces > 0 {
        Some(Tensor::<f32>::scratch(
            gpu,
            &[d.batch * d.kv_heads * pieces, 2, 128, 64],
        )?)
    } else {
        None
    };
    let hp_i = int(OP, "heads per part", hp)?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&q.data).arg(&k.data).arg(&v.data).arg(&dout.data);
    args.arg(&lse.data)
        .arg(&delta.data)
        .arg(&mut dk.data)
        .arg(&mut dv.data);
    args.arg(&seq).arg(&hq).arg(&hkv).arg(&scale);
    // A null `part` makes the kernel store dk and dv itself.
    let null = 0u64;
    match part.as_mut() {
        Some(p) => args.arg(&mut p.data),
        None => args.arg(&null),
    };
    match path {
        BwdPath::Wgmma => args.arg(&split_i),
        BwdPath::MmaSync => args.arg(&hp_i),
    };
    args.arg(&mut dqacc.data)
        .arg(&mut turn.data)
        .arg(&mut dq.data);
    ffi::launch(args, cfg(grid, threads, smem), checked(), OP)?;
    let Some(part) = part.filter(|_| nparts > 1) else {
        return Ok(());
    };
    let f = gpu.function(&ATTENTION_TC, "attn_bwd_dkv_sum_bf16_d64")?;
    let rows = d.batch * d.seq * d.kv_heads;
    let rows64 = rows as u64;
    let np = int(OP, "parts", nparts)?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&part.data)
        .arg(&mut dk.data)
        .arg(&mut dv.data)
        .arg(&seq)
        .arg(&hkv)
        .arg(&np)
        .arg(&rows64)
        .arg(&scale);
    ffi::launch(args, stride_cfg(gpu, rows * 8), checked(), OP)
}
