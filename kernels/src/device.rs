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
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Words of [`Gpu`]'s persistent partial sums: 256 rows (the grouped RMSNorm
/// backward launches at most 256 blocks) of up to 1152 columns (its longest
/// row, bf16 16 lanes x 9 chunks).
const PARTIALS: usize = 256 * 1152;

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
