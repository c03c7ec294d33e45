//! Every `unsafe` call of the crate: library probes, NVRTC's version, kernel
//! launches and cuBLAS calls. Callers above this module have checked shapes;
//! the SAFETY comments say which check each call relies on.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas_sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchArgs, LaunchConfig};

use crate::KernelError;

/// Proof that an op checked its tensors' shapes against the kernel's
/// indexing before building launch arguments. Only `ops` makes one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShapesChecked(());

impl ShapesChecked {
    /// Called by an op once every tensor's shape has been validated.
    pub(crate) fn new() -> Self {
        Self(())
    }
}

pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries `dlopen` on libcuda's candidate names and drops what
    // it opened; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: as above, for libnvrtc.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

pub(crate) fn cublas_present() -> bool {
    // SAFETY: as above, for libcublas.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

pub(crate) fn cublaslt_present() -> bool {
    // SAFETY: as above, for libcublasLt.
    unsafe { cudarc::cublaslt::sys::is_culib_present() }
}

pub(crate) fn nvrtc_version() -> Result<(i32, i32), KernelError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the caller checked libnvrtc loads; nvrtcVersion writes two ints
    // through pointers to live locals.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    status.result().map_err(|e| KernelError::Compile {
        source_name: "nvrtcVersion",
        options: Vec::new(),
        log: format!("{e:?}"),
    })?;
    Ok((major, minor))
}

/// Launches a kernel whose arguments `args` holds.
pub(crate) fn launch(
    mut args: LaunchArgs<'_>,
    cfg: LaunchConfig,
    _checked: ShapesChecked,
    context: &'static str,
) -> Result<(), KernelError> {
    // SAFETY: the op that built `args` pushed them in the order and types of
    // the kernel's C signature and, as `ShapesChecked` attests, validated
    // every tensor against the sizes passed, so the kernel's indexing stays
    // inside each buffer. Buffers are borrowed by `args` until the launch is
    // queued, and cudarc's stream tracking orders later frees after it.
    unsafe { args.launch(cfg) }
        .map(|_| ())
        .map_err(KernelError::driver(context))
}

/// The device address of `data`, for the address tables of the
/// multi-tensor kernels. Safe to take; what makes using it sound is the
/// caller's borrow of the tensor for the launch (as for any argument) and
/// the stream ordering every free in this crate follows.
pub(crate) fn device_address<T>(data: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (ptr, _record) = data.device_ptr(stream);
    ptr
}

/// A device buffer of `len` elements, not filled: for scratch space that the
/// next kernel on `stream` writes in full before anything reads it.
pub(crate) fn alloc_unfilled<T: cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, KernelError> {
    // SAFETY: the memory is device memory that Rust code never reads
    // directly; its only users are kernels that write every element before
    // reading it (the callers of `Tensor::scratch`), and reading it back to
    // the host goes through cudarc's copies, which are defined for any bits
    // of these plain-data element types.
    unsafe { stream.alloc::<T>(len) }.map_err(KernelError::driver("allocating scratch space"))
}

/// Gives the cuBLAS handle a fixed workspace, so its algorithm choice never
/// depends on what memory happens to be free.
pub(crate) fn set_blas_workspace(
    blas: &CudaBlas,
    stream: &CudaStream,
    workspace: &CudaSlice<u8>,
) -> Result<(), KernelError> {
    let (ptr, _sync) = workspace.device_ptr(stream);
    // SAFETY: `workspace` is a live device allocation of `len()` bytes that
    // `Gpu` owns for as long as the handle; the handle is used on `stream`
    // only.
    let status = unsafe {
        blas_sys::cublasSetWorkspace_v2(
            *blas.handle(),
            ptr as *mut core::ffi::c_void,
            workspace.len(),
        )
    };
    status_ok(status, "setting the cuBLAS workspace")
}

/// Default math (no TF32 for f32 products) without reduced-precision
/// reductions: split-K partial sums of bf16 products stay in f32.
pub(crate) fn set_blas_math_mode(blas: &CudaBlas) -> Result<(), KernelError> {
    // SAFETY: a valid handle and an enum value cuBLAS defines.
    let status = unsafe {
        blas_sys::cublasSetMathMode(
            *blas.handle(),
            blas_sys::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
        )
    };
    status_ok(status, "setting the cuBLAS math mode")
}

fn status_ok(status: blas_sys::cublasStatus_t, context: &'static str) -> Result<(), KernelError> {
    if status == blas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(KernelError::Blas {
            context,
            source: cudarc::cublas::result::CublasError(status),
        })
    }
}

/// A row-major product through cuBLAS; `ops::matmul` checked that `a`, `b`
/// and `c` hold the sizes `cfg` describes.
pub(crate) fn gemm<T>(
    blas: &CudaBlas,
    cfg: GemmConfig<T>,
    a: &CudaSlice<T>,
    b: &CudaSlice<T>,
    c: &mut CudaSlice<T>,
    _checked: ShapesChecked,
) -> Result<(), KernelError>
where
    CudaBlas: Gemm<T>,
{
    // SAFETY: the op checked every matrix against m, n, k and the leading
    // dimensions in `cfg`, so cuBLAS reads and writes inside the buffers.
    unsafe { blas.gemm(cfg, a, b, c) }.map_err(KernelError::blas("running a GEMM"))
}

/// The CUDA driver API version the installed driver supports (`13000` for
/// 13.0), from `cuDriverGetVersion`.
pub(crate) fn driver_version() -> Result<i32, KernelError> {
    let mut v = 0;
    // SAFETY: the caller holds a `Gpu`, so libcuda is loaded and
    // initialised; the call writes one int through a pointer to a live local.
    let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    status
        .result()
        .map_err(KernelError::driver("reading the driver version"))?;
    Ok(v)
}

/// cuBLAS's version number (`major * 10000 + minor * 100 + patch`), from
/// `cublasGetVersion_v2` on the crate's handle.
pub(crate) fn cublas_version(blas: &CudaBlas) -> Result<i32, KernelError> {
    let mut v = 0;
    // SAFETY: a valid handle owned by `Gpu`; the call writes one int
    // through a pointer to a live local.
    let status = unsafe { blas_sys::cublasGetVersion_v2(*blas.handle(), &mut v) };
    status_ok(status, "reading the cuBLAS version")?;
    Ok(v)
}
