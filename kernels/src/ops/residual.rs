//! The residual stream: an in-place add and a device-to-device copy.

use cudarc::driver::PushKernelArg;

use super::{checked, entry, expect_shape, stride_cfg};
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
