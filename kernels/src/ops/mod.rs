//! Safe wrappers: each checks every tensor's shape against the others, then
//! launches. Shape errors are [`KernelError::Shape`]; nothing is launched
//! unless all checks pass.
//!
//! Conventions: row-major tensors, the last dimension contiguous; math in
//! f32 whatever the storage type; every launch on [`Gpu::stream`]. Block
//! sizes of row-wise kernels depend on the row length only, never on the
//! number of rows, so a row gives the same bits at any batch size.

mod attention;
mod embedding;
mod matmul;
mod norm;
mod optim;
mod pointwise;
mod residual;
mod xent;

pub use attention::{attention_bwd, attention_fwd};
pub use embedding::{EmbeddingPlan, embedding_bwd, embedding_fwd};
pub use matmul::{LoraWeights, lora_bwd, lora_fwd, matmul};
pub use norm::{rmsnorm_bwd, rmsnorm_bwd_add, rmsnorm_fwd, rmsnorm_fwd_and_copy};
pub use optim::{
    AdamWParam, ClipFactor, adamw_multi, adamw_step, adamw_step_with_copy, clip_grad_norm,
    clip_grad_norm_multi, scale_by,
};
pub use pointwise::{
    RopeTables, gpu_spin, rope_bwd, rope_bwd_into_cols, rope_fwd, rope_fwd_from_cols,
    rope_qkv_merge, rope_qkv_split, silu_bwd, silu_fwd, swiglu_bwd, swiglu_fused_bwd,
    swiglu_fused_fwd, swiglu_fwd,
};
pub use residual::{add_inplace, copy, copy_cols, copy_rows_f32, rows_from_f32, rows_to_f32};
pub use xent::{
    CrossEntropyOut, cross_entropy_bwd, cross_entropy_fwd, cross_entropy_fwd_grad_inplace,
};

use cudarc::driver::LaunchConfig;

use crate::ffi::ShapesChecked;
use crate::{Gpu, KernelError, Tensor, tensor::Element};

/// Fails unless `t` has exactly `expected` as its shape.
fn expect_shape<T: Element>(
    op: &'static str,
    name: &'static str,
    t: &Tensor<T>,
    expected: &[usize],
) -> Result<(), KernelError> {
    if t.shape() == expected {
        Ok(())
    } else {
        Err(KernelError::Shape {
            op,
            tensor: name,
            expected: format!("{expected:?}"),
            got: t.shape().to_vec(),
        })
    }
}

/// Fails unless `t` has `rank` dimensions; returns them.
fn expect_rank<'a, T: Element>(
    op: &'static str,
    name: &'static str,
    t: &'a Tensor<T>,
    rank: usize,
) -> Result<&'a [usize], KernelError> {
    if t.shape().len() == rank {
        Ok(t.shape())
    } else {
        Err(KernelError::Shape {
            op,
            tensor: name,
            expected: format!("{rank} dimensions"),
            got: t.shape().to_vec(),
        })
    }
}

/// `t` as a matrix: itself when 2-D, else token-major `[dim0 * dim1,
/// product of the rest]` (activations `[batch, seq, heads, head_dim]` are
/// `[tokens, heads * head_dim]`).
fn as_matrix<T: Element>(
    op: &'static str,
    name: &'static str,
    t: &Tensor<T>,
) -> Result<[usize; 2], KernelError> {
    match t.shape() {
        [r, c] => Ok([*r, *c]),
        [b, s, rest @ ..] if !rest.is_empty() => Ok([b * s, rest.iter().product()]),
        other => Err(KernelError::Shape {
            op,
            tensor: name,
            expected: "at least 2 dimensions".to_owned(),
            got: other.to_vec(),
        }),
    }
}

/// `v` as the kernels' 32-bit `int`.
fn int(op: &'static str, what: &'static str, v: usize) -> Result<i32, KernelError> {
    i32::try_from(v).map_err(|_| KernelError::TooLarge { op, what, value: v })
}

/// `v` as a 32-bit grid dimension.
fn grid_dim(op: &'static str, what: &'static str, v: usize) -> Result<u32, KernelError> {
    u32::try_from(v).map_err(|_| KernelError::TooLarge { op, what, value: v })
}

fn cfg(grid: (u32, u32, u32), block: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: shared,
    }
}

/// Grid for a grid-stride elementwise loop over `n` items: enough blocks to
/// fill the device, which changes no result (items are independent).
fn stride_cfg(gpu: &Gpu, n: usize) -> LaunchConfig {
    const BLOCK: u32 = 256;
    let wanted = n.div_ceil(BLOCK as usize).max(1);
    let cap = gpu.info().multiprocessors as usize * 16;
    cfg((wanted.min(cap) as u32, 1, 1), BLOCK, 0)
}

/// The entry point `base_<suffix>`.
fn entry<T: crate::Dtype>(base: &str) -> String {
    format!("{base}_{}", T::SUFFIX)
}

fn checked() -> ShapesChecked {
    ShapesChecked::new()
}
