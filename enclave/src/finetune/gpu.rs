//! The GPU side of a fine-tune: the device opened or a clear refusal (a
//! job that asks for the GPU never falls back to the CPU), the memory
//! pre-flight before any allocation (inside `GpuBackend::new`), and the
//! `environment.gpu` record.

use std::sync::Arc;

use kolm_format::manifest::GpuEnvironment;
use kolm_kernels::Gpu;

use super::FineTuneError;
use super::train::Request;

/// The backend, the device's facts, and the admitted estimate (bytes).
pub fn backend(
    req: &Request<'_>,
    lora: Option<kolm_train::lora::Layout>,
    batch: usize,
    seq: usize,
) -> Result<(Box<dyn kolm_train::Backend>, GpuEnvironment, u64), FineTuneError> {
    if let Some(reason) = kolm_kernels::gpu_unavailable_reason() {
        return Err(FineTuneError::GpuUnavailable(reason));
    }
    let gpu = Gpu::new(0).map_err(|e| FineTuneError::GpuUnavailable(e.to_string()))?;
    let gpu = Arc::new(gpu);
    let env = kolm_train::gpu::environment(&gpu)
        .map_err(|e| FineTuneError::GpuUnavailable(e.to_string()))?;
    let backend = kolm_train::gpu::GpuBackend::new(
        gpu,
        req.base.kernels,
        &req.base.params,
        lora,
        req.spec.train.seed,
        batch,
        seq,
        req.spec.train.precision,
    )
    .map_err(|e| match e {
        kolm_train::TrainError::Memory(m) => FineTuneError::Memory(m.to_string()),
        other => FineTuneError::Train(other.to_string()),
    })?;
    let admitted = backend.estimate().required_bytes();
    Ok((Box::new(backend), env, admitted))
}
