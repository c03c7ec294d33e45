//! The candle layers of the Llama forward, written once for the CPU model
//! (the scorer's [`crate::Model::forward`]) and the CPU trainer
//! (`kolm_train::cpu`): the linear map, RMSNorm, the softmax, RoPE with the
//! configuration's tables, and the causal mask.
//!
//! Each function is the exact sequence of candle operations both callers
//! ran before they shared it, so neither one's numbers changed: the
//! reductions (RMSNorm's mean, the softmax's max and sum) run over the last,
//! contiguous dimension of whatever the caller hands in, and everything else
//! is element by element. What the two forwards still do differently (the
//! projections' weight layout and the attention products) is in
//! `docs/model.md`, "One forward, two callers".

use candle_core::{D, Device, Tensor};

use crate::config::{RopeLayout, RopeTable};

/// `x W^T` for `x` `[n, in]` and `w` `[out, in]`.
pub fn linear(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.matmul(&w.t()?)
}

/// `x / sqrt(mean(x^2) + eps) * w` over the last dimension. candle adds
/// `eps` to the `f32` mean as an `f32`, so the CPU model's `f64` epsilon
/// and the trainer's `f64::from(Config::eps_f32())` add the same number.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let mean_square = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(mean_square + eps)?.sqrt()?)?
        .broadcast_mul(w)
}

/// Softmax over the last dimension. The max is a constant (softmax is
/// shift-invariant, so its gradient through the max is exactly zero: the
/// trainer's autograd skips it; for the model, which tracks no gradient,
/// detaching changes nothing).
pub fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)
}

/// A RoPE table as `(cos, sin)` tensors, `[positions, head_dim/2]`.
pub fn rope_tensors(table: RopeTable) -> candle_core::Result<(Tensor, Tensor)> {
    let shape = (table.positions, table.head_dim / 2);
    Ok((
        Tensor::from_vec(table.cos, shape, &Device::Cpu)?,
        Tensor::from_vec(table.sin, shape, &Device::Cpu)?,
    ))
}

/// Rotates `x` `[b, t, heads, head_dim]` by position `t`'s angles (`cos`,
/// `sin` `[t, head_dim/2]` from [`rope_tensors`]).
pub fn rope(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    layout: RopeLayout,
) -> candle_core::Result<Tensor> {
    let (b, t, heads, hd) = x.dims4()?;
    let half = hd / 2;
    let rotate = |a: &Tensor, bb: &Tensor, c: &Tensor, s: &Tensor| -> candle_core::Result<_> {
        let ya = (a.broadcast_mul(c)? - bb.broadcast_mul(s)?)?;
        let yb = (a.broadcast_mul(s)? + bb.broadcast_mul(c)?)?;
        Ok((ya, yb))
    };
    match layout {
        RopeLayout::Interleaved => {
            let x = x.reshape((b, t, heads, half, 2))?;
            let (a, bb) = (x.narrow(4, 0, 1)?, x.narrow(4, 1, 1)?);
            let (c, s) = (
                cos.reshape((1, t, 1, half, 1))?,
                sin.reshape((1, t, 1, half, 1))?,
            );
            let (ya, yb) = rotate(&a, &bb, &c, &s)?;
            Tensor::cat(&[ya, yb], 4)?.reshape((b, t, heads, hd))
        }
        RopeLayout::RotateHalf => {
            let (a, bb) = (x.narrow(3, 0, half)?, x.narrow(3, half, half)?);
            let (c, s) = (cos.reshape((1, t, 1, half))?, sin.reshape((1, t, 1, half))?);
            let (ya, yb) = rotate(&a, &bb, &c, &s)?;
            Tensor::cat(&[ya, yb], 3)
        }
    }
}

/// `[t, start + t]`: 0 where query `i` (at position `start + i`) may see key
/// `j`, minus infinity after it.
pub fn causal_mask(start: usize, t: usize) -> candle_core::Result<Tensor> {
    let total = start + t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j <= start + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_vec(mask, (t, total), &Device::Cpu)
}
