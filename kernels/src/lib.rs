//! kolm-kernels: bitwise-deterministic CUDA kernels (CUDA C compiled at run
//! time by NVRTC, launched through cudarc) with CPU references.
//!
//! Nothing is implemented yet: this crate only reserves its place in the
//! workspace. It claims no feature.
#![forbid(unsafe_code)]
