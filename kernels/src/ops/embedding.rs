//! Embedding lookup and a deterministic backward.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{cfg, checked, entry, expect_rank, expect_shape, grid_dim, int, stride_cfg};
use crate::compile::EMBEDDING;
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// Which positions hold each token id, built on the host from the batch's
/// ids (which the host has anyway: it loaded them). Positions are sorted by
/// `(id, position)`, so the backward sums each token's rows in position
/// order with no atomics, and every vocabulary row is written exactly once.
#[derive(Debug)]
pub struct EmbeddingPlan {
    ids: Tensor<u32>,
    offsets: Tensor<u32>,
    positions: Tensor<u32>,
    vocab: usize,
}

impl EmbeddingPlan {
    /// Checks every id against `vocab` and uploads the ids and their CSR.
    pub fn new(gpu: &Gpu, ids: &[u32], vocab: usize) -> Result<Self, KernelError> {
        const OP: &str = "EmbeddingPlan::new";
        u32::try_from(ids.len()).map_err(|_| KernelError::TooLarge {
            op: OP,
            what: "positions",
            value: ids.len(),
        })?;
        let mut counts = vec![0u32; vocab + 1];
        for (position, &id) in ids.iter().enumerate() {
            let slot = counts
                .get_mut(id as usize + 1)
                .filter(|_| (id as usize) < vocab);
            match slot {
                Some(c) => *c += 1,
                None => {
                    return Err(KernelError::TokenOutOfRange {
                        op: OP,
                        id,
                        position,
                        vocab,
                    });
                }
            }
        }
        // Prefix sums: offsets[v] is where token v's positions start.
        for v in 0..vocab {
            counts[v + 1] += counts[v];
        }
        let offsets = counts;
        let mut fill = offsets.clone();
        let mut positions = vec![0u32; ids.len()];
        // Visiting positions in order keeps each token's list sorted.
        for (p, &id) in ids.iter().enumerate() {
            let at = &mut fill[id as usize];
            positions[*at as usize] = p as u32;
            *at += 1;
        }
        Ok(Self {
            ids: Tensor::from_host(gpu, ids, &[ids.len()])?,
            offsets: Tensor::from_host(gpu, &offsets, &[vocab + 1])?,
            positions: Tensor::from_host(gpu, &positions, &[ids.len()])?,
            vocab,
        })
    }

    /// The ids on the device, for the forward.
    pub fn ids(&self) -> &Tensor<u32> {
        &self.ids
    }
}

/// `out[i] = table[ids[i]]` for the plan's ids; `table` is `[vocab, d]`.
pub fn embedding_fwd<T: Dtype>(
    gpu: &Gpu,
    table: &Tensor<T>,
    plan: &EmbeddingPlan,
    out: &mut Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "embedding_fwd";
    let s = expect_rank(OP, "table", table, 2)?;
    let (vocab, d) = (s[0], s[1]);
    expect_shape(OP, "table", table, &[plan.vocab, d])?;
    let n = plan.ids.numel();
    expect_shape(OP, "out", out, &[n, d])?;
    if n == 0 || d == 0 {
        return Ok(());
    }
    let (n64, d32) = (n as u64, int(OP, "d", d)?);
    let v32 = u32::try_from(vocab).map_err(|_| KernelError::TooLarge {
        op: OP,
        what: "vocab",
        value: vocab,
    })?;
    let width = 16 / std::mem::size_of::<T>();
    if d.is_multiple_of(width) {
        // 16-byte form: one thread per chunk of the output.
        if let Ok(total) = u32::try_from(n * d / width) {
            let f = gpu.function(&EMBEDDING, &entry::<T>("embedding_fwd_vec"))?;
            let mut args = gpu.stream().launch_builder(&f);
            args.arg(&table.data).arg(&plan.ids.data).arg(&mut out.data);
            args.arg(&total).arg(&d32).arg(&v32);
            let blocks = grid_dim(OP, "chunks / 256", (total as usize).div_ceil(256))?;
            return ffi::launch(args, cfg((blocks, 1, 1), 256, 0), checked(), OP);
        }
    }
    let f = gpu.function(&EMBEDDING, &entry::<T>("embedding_fwd"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&table.data).arg(&plan.ids.data).arg(&mut out.data);
    args.arg(&n64).arg(&d32).arg(&v32);
    ffi::launch(args, stride_cfg(gpu, n * d), checked(), OP)
}

/// `dtable[v] (+)= sum of dout[i] over the plan's positions of token v`,
/// in position order; rows of absent tokens get 0 (or keep their value
/// when `accumulate`, e.g. for a weight tied to the lm-head).
pub fn embedding_bwd<T: Dtype>(
    gpu: &Gpu,
    dout: &Tensor<T>,
    plan: &EmbeddingPlan,
    dtable: &mut Tensor<T>,
    accumulate: bool,
) -> Result<(), KernelError> {
    const OP: &str = "embedding_bwd";
    let s = expect_rank(OP, "dtable", dtable, 2)?;
    let d = s[1];
    expect_shape(OP, "dtable", dtable, &[plan.vocab, d])?;
    expect_shape(OP, "dout", dout, &[plan.ids.numel(), d])?;
    if plan.vocab == 0 || d == 0 {
        return Ok(());
    }
    let (d32, acc) = (int(OP, "d", d)?, i32::from(accumulate));
    let width = 16 / std::mem::size_of::<T>();
    if d.is_multiple_of(width) {
        let cpr = d / width;
        // 16-byte form on 2D blocks: a row's chunks along x, rows along y,
        // y chosen so that a block is whole warps (cpr * y a multiple of
        // 32) of at least 256 threads where that fits in 1024.
        let mut rows = 32 / gcd(cpr, 32);
        while cpr > 0 && cpr * rows * 2 <= 512 {
            rows *= 2;
        }
        if cpr > 0
            && cpr * rows <= 1024
            && let Ok(vocab) = u32::try_from(plan.vocab)
        {
            let f = gpu.function(&EMBEDDING, &entry::<T>("embedding_bwd_vec2d"))?;
            let mut args = gpu.stream().launch_builder(&f);
            args.arg(&dout.data)
                .arg(&plan.offsets.data)
                .arg(&plan.positions.data);
            args.arg(&mut dtable.data).arg(&d32).arg(&vocab).arg(&acc);
            let blocks = grid_dim(OP, "vocab / rows", plan.vocab.div_ceil(rows))?;
            let config = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (cpr as u32, rows as u32, 1),
                shared_mem_bytes: 0,
            };
            return ffi::launch(args, config, checked(), OP);
        }
        // 16-byte form: one thread per chunk of dtable.
        if let Ok(total) = u32::try_from(plan.vocab * (d / width)) {
            let f = gpu.function(&EMBEDDING, &entry::<T>("embedding_bwd_vec"))?;
            let mut args = gpu.stream().launch_builder(&f);
            args.arg(&dout.data)
                .arg(&plan.offsets.data)
                .arg(&plan.positions.data);
            args.arg(&mut dtable.data).arg(&d32).arg(&total).arg(&acc);
            let blocks = grid_dim(OP, "chunks / 256", (total as usize).div_ceil(256))?;
            return ffi::launch(args, cfg((blocks, 1, 1), 256, 0), checked(), OP);
        }
    }
    let f = gpu.function(&EMBEDDING, &entry::<T>("embedding_bwd"))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&dout.data)
        .arg(&plan.offsets.data)
        .arg(&plan.positions.data);
    args.arg(&mut dtable.data).arg(&d32).arg(&acc);
    let grid = (grid_dim(OP, "vocab", plan.vocab)?, 1, 1);
    ffi::launch(args, cfg(grid, 128, 0), checked(), OP)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}
