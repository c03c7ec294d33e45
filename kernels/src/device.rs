//! The device: one CUDA context, one stream, one cuBLAS handle with a fixed
//! workspace, and the compiled modules.
//!
//! Everything runs on the one stream, in launch order; that and the fixed
//! workspace are what cuBLAS needs to repeat its bits, and the custom kernels
//! repeat theirs by construction.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;

use crate::KernelError;
use crate::compile::{Compiler, KernelSource, options_for_source};
use crate::ffi;

/// cuBLAS workspace: 32 MiB, what cuBLAS recommends for Hopper.
pub const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Words of [`Gpu`]'s persistent partial sums: 256 rows (the grouped RMSNorm
/// backward launches at most 256 blocks) of up to 1152 columns (its longest
/// row, bf16 16 lanes x 9 chunks).
pub(crate) const PARTIALS: usize = 256 * 1152;

/// The bits of an unwritten partial sum (norm.cu's RMS_PART_EMPTY, an f32
/// signalling NaN, which no f32 add returns).
const PART_EMPTY: u32 = 0x7f80_0001;

/// Facts about the device, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The device's name as the driver reports it.
    pub name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// Number of multiprocessors.
    pub multiprocessors: u32,
    /// NVRTC's `(major, minor)` version.
    pub nvrtc_version: (i32, i32),
}

/// The software versions the device runs with, for a run's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftwareVersions {
    /// The CUDA driver API version the driver supports, `(major, minor)`
    /// (`cuDriverGetVersion`: 13000 is 13.0).
    pub cuda_driver_api: (i32, i32),
    /// The kernel driver's own version string (`580.65.06`), read from
    /// `/proc/driver/nvidia/version` without NVML; `None` where that file
    /// is absent or unreadable.
    pub driver: Option<String>,
    /// cuBLAS's `(major, minor, patch)`.
    pub cublas: (i32, i32, i32),
    /// NVRTC's `(major, minor)`.
    pub nvrtc: (i32, i32),
}

/// Where the NVIDIA kernel module reports its version.
const DRIVER_VERSION_FILE: &str = "/proc/driver/nvidia/version";

/// The version in the `NVRM version:` line of [`DRIVER_VERSION_FILE`]'s
/// text: the first word made of digits and at least one dot
/// (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul ...`).
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

/// Why no GPU can be used here, or `None` when one can: the libraries are
/// checked before anything is called, since cudarc's loader panics on a
/// missing library.
pub fn gpu_unavailable_reason() -> Option<String> {
    if let Some(library) = missing_library() {
        return Some(format!("lib{library} is not loadable by this process"));
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the driver sees no CUDA device".to_owned()),
        Err(e) => Some(format!("the driver could not count devices: {e:?}")),
    }
}

/// The first CUDA library this process cannot load, if any.
fn missing_library() -> Option<&'static str> {
    [
        (ffi::driver_present as fn() -> bool, "cuda"),
        (ffi::nvrtc_present, "nvrtc"),
        (ffi::cublas_present, "cublas"),
        (ffi::cublaslt_present, "cublasLt"),
    ]
    .into_iter()
    .find(|(present, _)| !present())
    .map(|(_, name)| name)
}

/// One GPU with the state every kernel needs.
#[derive(Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    // Owned for as long as `blas` uses it.
    _workspace: CudaSlice<u8>,
    /// Partial column sums that one launch writes and reads back itself
    /// (the RMSNorm backward's dw), every word [`PART_EMPTY`] between
    /// launches: each kernel that uses it sets what it wrote back.
    partials: CudaSlice<u32>,
    compiler: Compiler,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    info: GpuInfo,
    wgmma_attention: AtomicBool,
}

impl Gpu {
    /// Opens device `ordinal` with an in-memory kernel cache.
    pub fn new(ordinal: usize) -> Result<Self, KernelError> {
        Self::with_compiler(ordinal, Compiler::new())
    }

    /// Opens device `ordinal` compiling through `compiler` (e.g. one with a
    /// disk cache).
    pub fn with_compiler(ordinal: usize, compiler: Compiler) -> Result<Self, KernelError> {
        if let Some(library) = missing_library() {
            return Err(KernelError::LibraryMissing { library });
        }
        if !matches!(CudaContext::device_count(), Ok(n) if n > 0) {
            return Err(KernelError::NoDevice);
        }
        let ctx = CudaContext::new(ordinal).map_err(KernelError::driver("creating the context"))?;
        let stream = ctx.default_stream();
        let blas =
            CudaBlas::new(stream.clone()).map_err(KernelError::blas("creating the handle"))?;
        let workspace = stream
            .alloc_zeros::<u8>(BLAS_WORKSPACE_BYTES)
            .map_err(KernelError::driver("allocating the cuBLAS workspace"))?;
        ffi::set_blas_workspace(&blas, &stream, &workspace)?;
        let partials = stream
            .clone_htod(&vec![PART_EMPTY; PARTIALS])
            .map_err(KernelError::driver("allocating the partial sums"))?;
        ffi::set_blas_math_mode(&blas)?;
        let compute_capability = ctx
            .compute_capability()
            .map_err(KernelError::driver("reading the compute capability"))?;
        let multiprocessors = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(KernelError::driver("reading the multiprocessor count"))?;
        let info = GpuInfo {
            name: ctx
                .name()
                .map_err(KernelError::driver("reading the device name"))?,
            compute_capability,
            multiprocessors: u32::try_from(multiprocessors).unwrap_or(1),
            nvrtc_version: crate::compile::nvrtc_version()?,
        };
        Ok(Self {
            ctx,
            stream,
            blas,
            _workspace: workspace,
            partials,
            compiler,
            modules: Mutex::default(),
            functions: Mutex::default(),
            wgmma_attention: AtomicBool::new(compute_capability == (9, 0)),
            info,
        })
    }

    /// What the device is.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// `(free, total)` bytes of device memory now, as the driver counts
    /// them (`cuMemGetInfo`): memory other processes hold is not free.
    pub fn memory_info(&self) -> Result<(usize, usize), KernelError> {
        self.ctx
            .mem_get_info()
            .map_err(KernelError::driver("reading free device memory"))
    }

    /// The driver, cuBLAS and NVRTC versions in use.
    pub fn software_versions(&self) -> Result<SoftwareVersions, KernelError> {
        self.ctx
            .bind_to_thread()
            .map_err(KernelError::driver("binding the context"))?;
        let api = ffi::driver_version()?;
        let blas = ffi::cublas_version(&self.blas)?;
        Ok(SoftwareVersions {
            cuda_driver_api: (api / 1000, (api % 1000) / 10),
            driver: std::fs::read_to_string(DRIVER_VERSION_FILE)
                .ok()
                .and_then(|t| parse_driver_version(&t)),
            cublas: (blas / 10000, (blas % 10000) / 100, blas % 100),
            nvrtc: self.info.nvrtc_version,
        })
    }

    /// The one stream every op runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context (for events and timing).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device address of the persistent partial sums (see the field)
    /// and their length in f32 words.
    pub(crate) fn partials_address(&self) -> (u64, usize) {
        (ffi::device_address(&self.partials, &self.stream), PARTIALS)
    }

    pub(crate) fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// Waits for everything queued so far and reports any launch error.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.stream
            .synchronize()
            .map_err(KernelError::driver("synchronizing the stream"))
    }

    /// Compiles (or fetches from cache) and loads every kernel source, so
    /// later launches and timings include no compilation.
    pub fn warm_up(&self) -> Result<(), KernelError> {
        for s in &crate::compile::SOURCES {
            if s.sm90a && !self.has_sm90a() {
                continue;
            }
            self.module(s)?;
        }
        Ok(())
    }

    /// Whether bf16 attention with head dimension 64 runs the `wgmma`
    /// kernels (attention_wg_*.cu). On by default on a compute capability
    /// 9.0 device, where they are the fastest.
    pub fn wgmma_attention(&self) -> bool {
        self.wgmma_attention.load(Ordering::Relaxed)
    }

    /// Chooses between the `wgmma` attention kernels and the `mma.sync`
    /// ones (attention_tc.cu), e.g. to test or time both on one Hopper
    /// device. Nothing promises the two the same bits (from seq 2048 the
    /// `mma.sync` backward sums dk/dv per head, another order), so a
    /// training run keeps one choice throughout. Asking for `wgmma` on a
    /// device without sm_90a is an error.
    pub fn set_wgmma_attention(&self, on: bool) -> Result<(), KernelError> {
        if on && !self.has_sm90a() {
            return Err(KernelError::Unsupported {
                op: "set_wgmma_attention",
                what: format!(
                    "wgmma needs sm_90a, the device is sm_{}{}",
                    self.info.compute_capability.0, self.info.compute_capability.1
                ),
            });
        }
        self.wgmma_attention.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this device runs `sm_90a` modules (Hopper's `wgmma`).
    pub fn has_sm90a(&self) -> bool {
        self.info.compute_capability == (9, 0)
    }

    fn module(&self, source: &KernelSource) -> Result<Arc<CudaModule>, KernelError> {
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(source.name) {
            return Ok(m.clone());
        }
        let (major, minor) = self.info.compute_capability;
        let options = options_for_source(source, major, minor)?;
        let ptx = self.compiler.ptx(source, &options)?;
        let module = self
            .ctx
            .load_module(Ptx::from_src(ptx.to_string()))
            .map_err(KernelError::driver("loading a compiled module"))?;
        modules.insert(source.name, module.clone());
        Ok(module)
    }

    /// The entry point `name` of `source`.
    pub(crate) fn function(
        &self,
        source: &KernelSource,
        name: &str,
    ) -> Result<CudaFunction, KernelError> {
        {
            let functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = functions.get(name) {
                return Ok(f.clone());
            }
        }
        let f = self
            .module(source)?
            .load_function(name)
            .map_err(KernelError::driver("looking up a kernel entry point"))?;
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        functions.insert(name.to_owned(), f.clone());
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_driver_version;

    #[test]
    fn driver_version_from_the_proc_file() {
        let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:55:17 UTC 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(
            parse_driver_version(proprietary).as_deref(),
            Some("580.65.06")
        );
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jul  8 17:35:00 UTC 2025\n";
        assert_eq!(parse_driver_version(open).as_deref(), Some("570.172.08"));
        assert_eq!(parse_driver_version("GCC version: 12.2.0\n"), None);
        assert_eq!(parse_driver_version("NVRM version: unknown\n"), None);
    }
}
