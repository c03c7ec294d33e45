//! Typed device tensors: a device buffer and the shape it holds.
//!
//! Ops check shapes against each other before launching anything, so a
//! mismatch is a [`KernelError::Shape`], never an out-of-bounds access.

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

use crate::{Gpu, KernelError};

/// Anything a tensor can hold.
pub trait Element:
    DeviceRepr + ValidAsZeroBits + Copy + Default + std::fmt::Debug + 'static
{
}
impl Element for f32 {}
impl Element for f64 {}
impl Element for half::bf16 {}
impl Element for u32 {}
impl Element for u64 {}
impl Element for i32 {}
impl Element for u8 {}

/// A floating-point storage type the kernels are instantiated for. Math is
/// always f32 inside the kernels; this is only how values are stored.
pub trait Dtype: Element {
    /// Suffix of the kernel entry points for this type (`rmsnorm_fwd_bf16`).
    const SUFFIX: &'static str;
    /// A NaN, to poison outputs before a test run.
    const POISON: Self;
    /// Rounds an `f64` to this type (to nearest, ties to even).
    fn from_f64(v: f64) -> Self;
    /// Widens to `f64` exactly.
    fn to_f64(self) -> f64;
}

impl Dtype for f32 {
    const SUFFIX: &'static str = "f32";
    const POISON: Self = f32::NAN;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Dtype for half::bf16 {
    const SUFFIX: &'static str = "bf16";
    const POISON: Self = half::bf16::NAN;
    fn from_f64(v: f64) -> Self {
        bf16_from_f64(v)
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

/// `v` rounded to bf16, to nearest with ties to even, as the kernels' own
/// `f32_to_bf16` rounds. `half::bf16::from_f64` (2.7.1) is not this: it
/// rounds some values just above a tie down (0x3f188001 as f32 gives 0x3f18,
/// not 0x3f19), so a test would expect other bits than the GPU writes.
///
/// Two roundings (f64 to f32, then f32 to bf16) can differ from one only
/// when the first lands exactly on a bf16 tie; rounding the first step to
/// odd (truncate, then set the last bit when inexact) prevents that.
pub(crate) fn bf16_from_f64(v: f64) -> half::bf16 {
    if v.is_nan() {
        return half::bf16::NAN;
    }
    let mut f = v as f32;
    if f.is_finite() && f64::from(f) != v {
        let mut bits = f.to_bits();
        if f64::from(f).abs() > v.abs() {
            bits -= 1; // rounded away from zero: step back toward it
        }
        f = f32::from_bits(bits | 1);
    }
    let x = f.to_bits();
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1));
    half::bf16::from_bits((rounded >> 16) as u16)
}

/// A device buffer with a row-major shape (last dimension contiguous).
#[derive(Debug)]
pub struct Tensor<T: Element> {
    pub(crate) data: CudaSlice<T>,
    shape: Vec<usize>,
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl<T: Element> Tensor<T> {
    /// A zero-filled tensor.
    pub fn zeros(gpu: &Gpu, shape: &[usize]) -> Result<Self, KernelError> {
        let data = gpu
            .stream()
            .alloc_zeros::<T>(numel(shape).max(1))
            .map_err(KernelError::driver("allocating a tensor"))?;
        Ok(Self {
            data,
            shape: shape.to_vec(),
        })
    }

    /// A tensor whose contents are unspecified, for scratch space that a
    /// kernel writes in full before anything reads it (no fill launched).
    pub(crate) fn scratch(gpu: &Gpu, shape: &[usize]) -> Result<Self, KernelError> {
        let data = crate::ffi::alloc_unfilled::<T>(gpu.stream(), numel(shape).max(1))?;
        Ok(Self {
            data,
            shape: shape.to_vec(),
        })
    }

    /// Copies `host` to a new tensor of `shape`.
    pub fn from_host(gpu: &Gpu, host: &[T], shape: &[usize]) -> Result<Self, KernelError> {
        if host.len() != numel(shape) {
            return Err(KernelError::HostLength {
                op: "Tensor::from_host",
                shape: shape.to_vec(),
                expected: numel(shape),
                got: host.len(),
            });
        }
        if host.is_empty() {
            return Self::zeros(gpu, shape);
        }
        let data = gpu
            .stream()
            .clone_htod(host)
            .map_err(KernelError::driver("copying a tensor to the device"))?;
        Ok(Self {
            data,
            shape: shape.to_vec(),
        })
    }

    /// Overwrites the whole tensor with `host`, which must match its size.
    pub fn copy_from_host(&mut self, gpu: &Gpu, host: &[T]) -> Result<(), KernelError> {
        if host.len() != self.numel() {
            return Err(KernelError::HostLength {
                op: "Tensor::copy_from_host",
                shape: self.shape.clone(),
                expected: self.numel(),
                got: host.len(),
            });
        }
        if host.is_empty() {
            return Ok(());
        }
        gpu.stream()
            .memcpy_htod(host, &mut self.data)
            .map_err(KernelError::driver("copying a tensor to the device"))
    }

    /// Copies the tensor back to the host (waits for queued work).
    pub fn to_host(&self, gpu: &Gpu) -> Result<Vec<T>, KernelError> {
        let mut v = gpu
            .stream()
            .clone_dtoh(&self.data)
            .map_err(KernelError::driver("copying a tensor to the host"))?;
        v.truncate(self.numel());
        Ok(v)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// The same buffer under another shape with as many elements.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self, KernelError> {
        if numel(shape) != self.numel() {
            return Err(KernelError::Shape {
                op: "Tensor::reshape",
                tensor: "self",
                expected: format!("{} elements", numel(shape)),
                got: self.shape,
            });
        }
        self.shape = shape.to_vec();
        Ok(self)
    }
}

impl<T: Dtype> Tensor<T> {
    /// Rounds `host` to `T` and copies it to a new tensor.
    pub fn from_f64(gpu: &Gpu, host: &[f64], shape: &[usize]) -> Result<Self, KernelError> {
        let v: Vec<T> = host.iter().map(|&x| T::from_f64(x)).collect();
        Self::from_host(gpu, &v, shape)
    }

    /// Copies back and widens to `f64`.
    pub fn to_f64(&self, gpu: &Gpu) -> Result<Vec<f64>, KernelError> {
        Ok(self.to_host(gpu)?.into_iter().map(T::to_f64).collect())
    }

    /// Fills the tensor with NaN, so a test catches any element a kernel
    /// failed to write.
    pub fn poison(&mut self, gpu: &Gpu) -> Result<(), KernelError> {
        let v = vec![T::POISON; self.numel()];
        self.copy_from_host(gpu, &v)
    }
}

#[cfg(test)]
mod tests {
    use super::bf16_from_f64;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // (f64 input, expected bf16 bits)
        let cases: [(f64, u16); 9] = [
            (f64::from(f32::from_bits(0x3f18_8001)), 0x3f19), // just above a tie: up
            (f64::from(f32::from_bits(0x3f18_8000)), 0x3f18), // tie, even below: down
            (f64::from(f32::from_bits(0x3f19_8000)), 0x3f1a), // tie, odd below: up
            (f64::from(f32::from_bits(0x3f18_7fff)), 0x3f18), // below a tie: down
            // Exactly a tie in f64 but not in f32 after rounding: the
            // f64 value is just above the tie, so it must round up.
            (f64::from(f32::from_bits(0x3f18_8000)) + 1e-12, 0x3f19),
            (-f64::from(f32::from_bits(0x3f18_8001)), 0xbf19),
            (1e39, 0x7f80), // past f32's range: infinity
            (0.0, 0x0000),
            (-0.0, 0x8000),
        ];
        for (v, want) in cases {
            assert_eq!(bf16_from_f64(v).to_bits(), want, "{v:e}");
        }
        assert!(bf16_from_f64(f64::NAN).is_nan());
        // Every f32 is converted as the f32 path converts it.
        let mut s: u64 = 1;
        for _ in 0..200_000 {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let f = f32::from_bits((s >> 32) as u32);
            if f.is_finite() {
                assert_eq!(
                    bf16_from_f64(f64::from(f)).to_bits(),
                    half::bf16::from_f32(f).to_bits(),
                    "{:08x}",
                    f.to_bits()
                );
            }
        }
    }
}
