//! The residual stream: an in-place add and a device-to-device copy.

use cudarc::driver::PushKernelArg;

use super::{as_matrix, checked, entry, expect_shape, stride_cfg};
use crate::compile::RESIDUAL;
use crate::{Dtype, Gpu, KernelError, Tensor, ffi};

/// `acc += x`, elementwise; the shapes must match.
pub fn add_inplace<T: Dtype>(
    gpu: &Gpu,
    acc: &mut Tensor<T>,
    x: &Tensor<T>,
) -> Result<(), KernelError> {
    const OP: &str = "add_inplace";
    expect_shape(OP, "x", x, acc.shape())?;
    let n = acc.numel();
    if n == 0 {
        return Ok(());
    }
    // Whether the 16-byte form applies depends on the element count only.
    let width = 16 / std::mem::size_of::<T>();
    let (name, items) = if n.is_multiple_of(width) {
        ("add_inplace_vec", n / width)
    } else {
        ("add_inplace", n)
    };
    let items64 = items as u64;
    let f = gpu.function(&RESIDUAL, &entry::<T>(name))?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&mut acc.data).arg(&x.data).arg(&items64);
    ffi::launch(args, stride_cfg(gpu, items), checked(), OP)
}

/// `dst = src`; the shapes must match.
pub fn copy<T: Dtype>(gpu: &Gpu, src: &Tensor<T>, dst: &mut Tensor<T>) -> Result<(), KernelError> {
    const OP: &str = "copy";
    expect_shape(OP, "dst", dst, src.shape())?;
    if src.numel() == 0 {
        return Ok(());
    }
    // Buffers may be longer than numel (a 0-element tensor holds 1), so copy
    // exactly the tensor's elements.
    let n = src.numel();
    gpu.stream()
        .memcpy_dtod(&src.data.slice(..n), &mut dst.data.slice_mut(..n))
        .map_err(KernelError::driver("copying a tensor on the device"))
}

/// Copies columns `src_offset .. src_offset + width` of every row of `src`
/// into columns `dst_offset ..` of the same rows of `dst`. Both are read as
/// `[rows, columns]` (rank 3 or more: `[dim0 * dim1, rest]`, as
/// [`super::matmul`] reads them); the other columns of `dst` are untouched.
pub fn copy_cols<T: Dtype>(
    gpu: &Gpu,
    src: &Tensor<T>,
    src_offset: usize,
    dst: &mut Tensor<T>,
    dst_offset: usize,
    width: usize,
) -> Result<(), KernelError> {
    const OP: &str = "copy_cols";
    let s = as_matrix(OP, "src", src)?;
    let d = as_matrix(OP, "dst", dst)?;
    if s[0] != d[0] || src_offset + width > s[1] || dst_offset + width > d[1] {
        return Err(KernelError::Shape {
            op: OP,
            tensor: "dst",
            expected: format!(
                "{} rows with columns {dst_offset}..{} (source columns {src_offset}..{} of {:?})",
                s[0],
                dst_offset + width,
                src_offset + width,
                s
            ),
            got: dst.shape().to_vec(),
        });
    }
    let n = s[0] * width;
    if n == 0 {
        return Ok(());
    }
    let chunk = 16 / std::mem::size_of::<T>();
    let vec = [s[1], src_offset, d[1], dst_offset, width]
        .iter()
        .all(|v| v.is_multiple_of(chunk));
    let (name, div) = if vec {
        ("copy_cols_vec".to_owned(), chunk)
    } else {
        (entry::<T>("copy_cols"), 1)
    };
    let a = [s[1], src_offset, d[1], dst_offset, width, n].map(|v| (v / div) as u64);
    let f = gpu.function(&RESIDUAL, &name)?;
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&src.data).arg(&a[0]).arg(&a[1]);
    args.arg(&mut dst.data)
        .arg(&a[2])
        .arg(&a[3])
        .arg(&a[4])
        .arg(&a[5]);
    ffi::launch(args, stride_cfg(gpu, n / div), checked(), OP)
}

/// The rows `first .. first + dst rows` of `src`, read as a matrix (see
/// [`super::matmul`]), widened to `f32` into `dst` `[rows, src columns]`.
/// A block of rows of a row-major matrix is contiguous, so this is one
/// elementwise pass over that range.
pub fn rows_to_f32<T: Dtype>(
    gpu: &Gpu,
    src: &Tensor<T>,
    first: usize,
    dst: &mut Tensor<f32>,
) -> Result<(), KernelError> {
    const OP: &str = "rows_to_f32";
    let range = row_range(
        OP,
        src.shape(),
        first,
        dst.shape(),
        as_matrix(OP, "src", src)?,
    )?;
    let n = range.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&RESIDUAL, &entry::<T>("to_f32"))?;
    let view = src.data.slice(range.clone());
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&view).arg(&mut dst.data).arg(&n);
    ffi::launch(args, stride_cfg(gpu, range.len()), checked(), OP)
}

/// Overwrites rows `first .. first + src rows` of `dst` (read as a matrix)
/// with `src` `[rows, dst columns]` rounded to `T`; the other rows are
/// untouched.
pub fn rows_from_f32<T: Dtype>(
    gpu: &Gpu,
    src: &Tensor<f32>,
    dst: &mut Tensor<T>,
    first: usize,
) -> Result<(), KernelError> {
    const OP: &str = "rows_from_f32";
    let range = row_range(
        OP,
        dst.shape(),
        first,
        src.shape(),
        as_matrix(OP, "dst", dst)?,
    )?;
    let n = range.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&RESIDUAL, &entry::<T>("from_f32"))?;
    let mut view = dst.data.slice_mut(range.clone());
    let mut args = gpu.stream().launch_builder(&f);
    args.arg(&src.data).arg(&mut view).arg(&n);
    ffi::launch(args, stride_cfg(gpu, range.len()), checked(), OP)
}

/// Copies rows `first .. first + dst rows` of the `f32` matrix `src` into
/// `dst` `[rows, src columns]`, exactly.
pub fn copy_rows_f32(
    gpu: &Gpu,
    src: &Tensor<f32>,
    first: usize,
    dst: &mut Tensor<f32>,
) -> Result<(), KernelError> {
    const OP: &str = "copy_rows_f32";
    let range = row_range(
        OP,
        src.shape(),
        first,
        dst.shape(),
        as_matrix(OP, "src", src)?,
    )?;
    let n = range.len();
    if n == 0 {
        return Ok(());
    }
    gpu.stream()
        .memcpy_dtod(&src.data.slice(range), &mut dst.data.slice_mut(..n))
        .map_err(KernelError::driver("copying rows on the device"))
}

/// The element range of rows `first .. first + block rows` of a matrix of
/// `big` `[rows, cols]`, checking that `block` is `[rows', cols]` and that
/// the rows lie inside.
fn row_range(
    op: &'static str,
    big_shape: &[usize],
    first: usize,
    block: &[usize],
    big: [usize; 2],
) -> Result<std::ops::Range<usize>, KernelError> {
    let fits = block.len() == 2
        && block[1] == big[1]
        && first.checked_add(block[0]).is_some_and(|end| end <= big[0]);
    if !fits {
        return Err(KernelError::Shape {
            op,
            tensor: "block",
            expected: format!(
                "[r, {}] with rows {first}..{first} + r inside the {} rows of {big_shape:?}",
                big[1], big[0]
            ),
            got: block.to_vec(),
        });
    }
    Ok(first * big[1]..(first + block[0]) * big[1])
}
