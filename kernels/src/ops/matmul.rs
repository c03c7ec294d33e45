//! Matrix products through cuBLAS, and LoRA built from them.
//!
//! cuBLAS repeats its bits for the same problem on the same GPU model when
//! it runs on one stream with one fixed workspace, which is how [`Gpu`] sets
//! it up. It does not promise the same bits for the same row at a different
//! number of rows (it may pick another algorithm), so products are
//! deterministic run to run but not batch-invariant.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys::cublasOperation_t};

use super::{as_matrix, checked, expect_shape, int};
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// `c = alpha op(a) op(b) + beta c`, row-major: `op(a)` is `[m, k]` (`a` is
/// stored `[k, m]` when `trans_a`), `op(b)` is `[k, n]` (`b` stored `[n, k]`
/// when `trans_b`), `c` is `[m, n]`. An operand of rank 3 or more is read
/// token-major, as the matrix `[dim0 * dim1, product of the rest]`, so
/// activations shaped `[batch, seq, heads, head_dim]` need no reshape.
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Dtype>(
    gpu: &Gpu,
    a: &Tensor<T>,
    trans_a: bool,
    b: &Tensor<T>,
    trans_b: bool,
    c: &mut Tensor<T>,
    alpha: f32,
    beta: f32,
) -> Result<(), KernelError>
where
    CudaBlas: Gemm<T>,
{
    const OP: &str = "matmul";
    let sa = as_matrix(OP, "a", a)?;
    let (m, k) = if trans_a {
        (sa[1], sa[0])
    } else {
        (sa[0], sa[1])
    };
    let sb = as_matrix(OP, "b", b)?;
    let n = if trans_b { sb[0] } else { sb[1] };
    let b_expected = if trans_b { [n, k] } else { [k, n] };
    if sb != b_expected {
        return Err(shape_error(OP, "b", &b_expected, b));
    }
    if as_matrix(OP, "c", c)? != [m, n] {
        return Err(shape_error(OP, "c", &[m, n], c));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let op = |t: bool| {
        if t {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        }
    };
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: hand
    // cuBLAS b first. A row-major [r, c] matrix is column-major [c, r] with
    // leading dimension c.
    let cfg = GemmConfig {
        transa: op(trans_b),
        transb: op(trans_a),
        m: int(OP, "n", n)?,
        n: int(OP, "m", m)?,
        k: int(OP, "k", k)?,
        alpha: T::from_f64(f64::from(alpha)),
        lda: int(OP, "ldb", sb[1])?,
        ldb: int(OP, "lda", sa[1])?,
        beta: T::from_f64(f64::from(beta)),
        ldc: int(OP, "n", n)?,
    };
    if k == 0 {
        return Err(KernelError::Unsupported {
            op: OP,
            what: "an inner dimension of 0".to_owned(),
        });
    }
    ffi::gemm(gpu.blas(), cfg, &b.data, &a.data, &mut c.data, checked())
}

fn shape_error<T: Dtype>(
    op: &'static str,
    name: &'static str,
    expected: &[usize],
    t: &Tensor<T>,
) -> KernelError {
    KernelError::Shape {
        op,
        tensor: name,
        expected: format!("{expected:?} (rank 3+ read as [dim0 * dim1, rest])"),
        got: t.shape().to_vec(),
    }
}

/// A LoRA adapter on a frozen linear layer `w` `[n, k]`: `a` is `[r, k]`,
/// `b` is `[n, r]`, and the layer computes `x w^T + scale (x a^T) b^T`.
#[derive(Debug)]
pub struct LoraWeights<'a, T: Dtype> {
    /// The frozen base weight `[n, k]`.
    pub w: &'a Tensor<T>,
    /// Down projection `[r, k]`.
    pub a: &'a Tensor<T>,
    /// Up projection `[n, r]`.
    pub b: &'a Tensor<T>,
    /// `alpha / r`.
    pub scale: f32,
}

/// LoRA forward: `y = x w^T + scale (x a^T) b^T`; `xa` (`[m, r]`) is kept
/// for the backward.
pub fn lora_fwd<T: Dtype>(
    gpu: &Gpu,
    x: &Tensor<T>,
    lora: &LoraWeights<'_, T>,
    xa: &mut Tensor<T>,
    y: &mut Tensor<T>,
) -> Result<(), KernelError>
where
    CudaBlas: Gemm<T>,
{
    matmul(gpu, x, false, lora.w, true, y, 1.0, 0.0)?;
    matmul(gpu, x, false, lora.a, true, xa, 1.0, 0.0)?;
    matmul(gpu, xa, false, lora.b, true, y, lora.scale, 1.0)
}

/// LoRA backward: `dx`, `da`, `db` (the base weight is frozen). `dxa` is
/// scratch of `xa`'s shape.
#[allow(clippy::too_many_arguments)]
pub fn lora_bwd<T: Dtype>(
    gpu: &Gpu,
    dy: &Tensor<T>,
    x: &Tensor<T>,
    lora: &LoraWeights<'_, T>,
    xa: &Tensor<T>,
    dxa: &mut Tensor<T>,
    dx: &mut Tensor<T>,
    da: &mut Tensor<T>,
    db: &mut Tensor<T>,
) -> Result<(), KernelError>
where
    CudaBlas: Gemm<T>,
{
    const OP: &str = "lora_bwd";
    expect_shape(OP, "dxa", dxa, xa.shape())?;
    // db = scale dy^T xa; dxa = scale dy b; da = dxa^T x; dx = dy w + dxa a.
    matmul(gpu, dy, true, xa, false, db, lora.scale, 0.0)?;
    matmul(gpu, dy, false, lora.b, false, dxa, lora.scale, 0.0)?;
    matmul(gpu, dxa, true, x, false, da, 1.0, 0.0)?;
    matmul(gpu, dy, false, lora.w, false, dx, 1.0, 0.0)?;
    matmul(gpu, dxa, false, lora.a, false, dx, 1.0, 1.0)
}
