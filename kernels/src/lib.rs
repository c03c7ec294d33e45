//! kolm-kernels: bitwise-deterministic GPU kernels for training and serving,
//! each with a CPU reference.
//!
//! Sealed jobs are replayed and checked byte for byte, so every kernel here
//! gives the same bits on every run: every sum runs in an order fixed by the
//! shapes alone, and matrix products go through cuBLAS on one stream with a
//! fixed workspace. The bits come from that order, not from avoiding
//! atomics: where blocks combine partial sums (dq across key blocks in the
//! tensor-core attention backward) they take turns behind counters, one
//! contributor at a time in a fixed order, and the Hopper backward adds its
//! dq shares with float atomics (`red.add`) inside those turns, never two
//! at once on an element. Kernels are CUDA C sources (`cu/`)
//! compiled at run time by NVRTC for the device in hand and cached by the
//! sha256 of source, options and NVRTC version ([`compile`]); the CUDA
//! libraries are loaded at run time, so building needs no CUDA install.
//!
//! - [`cpu`]: the `f64` references, the specification the GPU is tested against.
//! - [`Gpu`] and [`Tensor`]: the device, its stream, and typed device tensors.
//! - [`ops`]: safe wrappers that check shapes and launch the kernels.
//! - [`llama`]: the kernels composed into a Llama training step.
#![deny(unsafe_code)]

pub mod compile;
pub mod cpu;
mod device;
mod error;
#[allow(unsafe_code)] // the only module with unsafe: FFI calls and kernel launches
mod ffi;
pub mod llama;
pub mod ops;
pub mod rng;
mod tensor;

pub use device::{
    BLAS_WORKSPACE_BYTES, Gpu, GpuInfo, SoftwareVersions, gpu_unavailable_reason,
    parse_driver_version,
};
pub use error::KernelError;
pub use tensor::{Dtype, Tensor};
