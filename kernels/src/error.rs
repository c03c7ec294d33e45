//! The crate's error type. Every variant names the operation and the tensor
//! or library call that failed, so a caller can tell a shape bug from a
//! missing driver.

use std::path::PathBuf;

/// Everything a kernel wrapper, the compiler cache or the device set-up can
/// fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A tensor handed to `op` does not have the shape the op needs.
    #[error("{op}: tensor `{tensor}` has shape {got:?}, expected {expected}")]
    Shape {
        /// The operation that checked the shape.
        op: &'static str,
        /// Which argument was wrong.
        tensor: &'static str,
        /// What was expected, in words (`[n, d]` with the values filled in).
        expected: String,
        /// The shape that came in.
        got: Vec<usize>,
    },
    /// A scalar argument is outside what the kernel supports.
    #[error("{op}: {what}")]
    Unsupported {
        /// The operation that refused the argument.
        op: &'static str,
        /// What was refused and why.
        what: String,
    },
    /// A size does not fit the 32-bit index the kernel uses.
    #[error("{op}: {what} = {value} does not fit the kernel's 32-bit index")]
    TooLarge {
        /// The operation.
        op: &'static str,
        /// The size that overflowed.
        what: &'static str,
        /// Its value.
        value: usize,
    },
    /// A host slice does not hold as many elements as the shape says.
    #[error("{op}: host data has {got} elements, shape {shape:?} needs {expected}")]
    HostLength {
        /// The operation.
        op: &'static str,
        /// The shape asked for.
        shape: Vec<usize>,
        /// Elements the shape needs.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A token id is not below the vocabulary size.
    #[error("{op}: token id {id} at position {position} is not below the vocabulary size {vocab}")]
    TokenOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending id.
        id: u32,
        /// Where it was.
        position: usize,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A CUDA library (libcuda, NVRTC, cuBLAS) could not be loaded.
    #[error("CUDA library `{library}` not found by the dynamic loader")]
    LibraryMissing {
        /// The library's short name.
        library: &'static str,
    },
    /// No CUDA device is visible.
    #[error("no CUDA device is visible")]
    NoDevice,
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {context}: {source}")]
    Driver {
        /// What was being done.
        context: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS call failed while {context}: {source}")]
    Blas {
        /// What was being done.
        context: &'static str,
        /// cuBLAS's error.
        #[source]
        source: cudarc::cublas::result::CublasError,
    },
    /// NVRTC refused a kernel source; the log says why.
    #[error("NVRTC could not compile `{source_name}` with {options:?}: {log}")]
    Compile {
        /// The kernel source's name.
        source_name: &'static str,
        /// The options it was compiled with.
        options: Vec<String>,
        /// NVRTC's error and program log.
        log: String,
    },
    /// The on-disk compile cache could not be read or written.
    #[error("kernel cache at {path}: {source}")]
    Cache {
        /// The cache file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl KernelError {
    /// Shorthand for a [`KernelError::Driver`] with its context.
    pub(crate) fn driver(
        context: &'static str,
    ) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        move |source| Self::Driver { context, source }
    }

    /// Shorthand for a [`KernelError::Blas`] with its context.
    pub(crate) fn blas(
        context: &'static str,
    ) -> impl FnOnce(cudarc::cublas::result::CublasError) -> Self {
        move |source| Self::Blas { context, source }
    }
}
