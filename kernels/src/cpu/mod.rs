//! CPU references for every kernel, in plain `f64` Rust.
//!
//! These are the specification the GPU kernels are tested against: each one
//! is written for clarity, loops in the obvious order, and has its backward
//! checked by finite differences in the tests below. Layouts match the GPU
//! wrappers exactly (row-major, the last dimension contiguous), so a test can
//! hand the same host data to both.

// Index loops mirror the formulas (and the GPU code) more plainly than
// iterator chains; clarity is the point of a reference.
#![allow(clippy::needless_range_loop)]

mod attention;
mod elementwise;
mod linear;
pub mod llama;
mod norm;
mod optim;
mod softmax;

pub use attention::{AttentionShape, attention_bwd, attention_fwd};
pub use elementwise::{
    RopeLayout, RopeTable, rope_bwd, rope_fwd, silu, silu_bwd, swiglu_bwd, swiglu_fwd,
};
pub use linear::{LoraShape, embedding_bwd, embedding_fwd, lora_bwd, lora_fwd, matmul, matmul_bwd};
pub use norm::{rmsnorm_bwd, rmsnorm_fwd};
pub use optim::{AdamWConfig, AdamWScalars, adamw_f32, adamw_step, clip_scale, grad_norm};
pub use softmax::{CrossEntropyRow, cross_entropy_bwd, cross_entropy_fwd};

#[cfg(test)]
mod finite_difference;
