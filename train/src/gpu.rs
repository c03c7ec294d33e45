//! The GPU backend: [`GpuBackend`] trains on `kolm_kernels::llama::GpuLlama`
//! (bf16 compute with `f32` masters, or `f32` throughout), full fine-tune or
//! LoRA (`kolm_kernels::llama::GpuLora`: the adapters' gradients are made
//! from the full `dW` the backward computes anyway, see there for the cost),
//! after the memory pre-flight ([`crate::memory`]) has accepted the run.
//! Also [`environment`]: the device and software versions for a receipt.
//!
//! Determinism: every launch is on the device's one stream in a fixed order
//! with fixed shapes (see `kolm_kernels`), so the same step from the same
//! state gives the same bits.
//!
//! Checkpoint tensors (the CPU backend uses the same names): full fine-tune,
//! groups `param`, `adam_m`, `adam_v`, each tensor named by its
//! `ParamInfo` name (`embed`, `layers.0.wqkv`, ...); LoRA, groups `lora_a`
//! and `lora_b` named by site (`layers.0.q`), and `adam_m` / `adam_v` named
//! `lora_a.<site>` / `lora_b.<site>`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::checkpoint;
use cudarc::cublas::{CudaBlas, Gemm};
use half::bf16;
use kolm_format::job_spec::Precision;
use kolm_format::manifest::GpuEnvironment;
use kolm_kernels::llama::{GpuLlama, GpuLora, Optimizer, TrainBatch};
use kolm_kernels::{Dtype, Gpu, KernelError};
use kolm_model_config::Config;

use crate::lora::Layout;
use crate::memory::{self, Estimate};
use crate::{ADAM_EPS, BETA1, BETA2, Backend, Batch, StepConfig, StepStats, TrainError};

/// The model in its compute type.
#[derive(Debug)]
enum Model {
    Bf16(GpuLlama<bf16>),
    F32(GpuLlama<f32>),
}

/// `$body` with `$m` bound to the model whatever its type.
macro_rules! with_model {
    ($model:expr, $m:ident => $body:expr) => {
        match $model {
            Model::Bf16($m) => $body,
            Model::F32($m) => $body,
        }
    };
}

/// A LoRA run's adapters.
#[derive(Debug)]
struct Adapters {
    layout: Layout,
    gpu: GpuLora,
}

/// Trains a Llama model on one GPU (see the module header).
#[derive(Debug)]
pub struct GpuBackend {
    gpu: Arc<Gpu>,
    cfg: Config,
    batch: usize,
    seq: usize,
    model: Model,
    lora: Option<Adapters>,
    estimate: Estimate,
}

impl GpuBackend {
    /// Checks the run fits the device's free memory (refusing with
    /// [`TrainError::Memory`] before allocating anything), then uploads
    /// `params` (in `Config::params` order) and, for LoRA, the
    /// adapters `lora.init(seed)`. `batch` and `seq` fix the shape of every
    /// step.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: Arc<Gpu>,
        cfg: Config,
        params: &[Vec<f32>],
        lora: Option<Layout>,
        seed: u64,
        batch: usize,
        seq: usize,
        precision: Precision,
    ) -> Result<Self, TrainError> {
        let infos = cfg.params();
        if params.len() != infos.len() {
            return Err(TrainError::Invalid(format!(
                "{} parameter tensors, the model has {}",
                params.len(),
                infos.len()
            )));
        }
        if let Some((p, info)) = params
            .iter()
            .zip(&infos)
            .find(|(p, i)| p.len() != i.shape.iter().product::<usize>())
        {
            return Err(TrainError::Invalid(format!(
                "parameter {} has {} values, its shape {:?} needs {}",
                info.name,
                p.len(),
                info.shape,
                info.shape.iter().product::<usize>()
            )));
        }
        let (free, _) = gpu.memory_info()?;
        let estimate =
            memory::preflight_gpu(&cfg, batch, seq, lora.as_ref(), precision, free as u64)?;
        let frozen = lora.is_some();
        let mut model = match (precision, frozen) {
            (Precision::Bf16, false) => Model::Bf16(GpuLlama::new(&gpu, cfg, params, batch, seq)?),
            (Precision::Bf16, true) => {
                Model::Bf16(GpuLlama::new_frozen(&gpu, cfg, params, batch, seq)?)
            }
            (Precision::F32, false) => Model::F32(GpuLlama::new(&gpu, cfg, params, batch, seq)?),
            (Precision::F32, true) => {
                Model::F32(GpuLlama::new_frozen(&gpu, cfg, params, batch, seq)?)
            }
        };
        let lora = match lora {
            None => None,
            Some(layout) => {
                let sites = memory::lora_sites(&layout);
                let init = layout.init(seed);
                let scale = layout.scale() as f32;
                let adapters = with_model!(&mut model, m => {
                    GpuLora::new(&gpu, m, &sites, layout.rank, scale, &init)?
                });
                Some(Adapters {
                    layout,
                    gpu: adapters,
                })
            }
        };
        Ok(Self {
            gpu,
            cfg,
            batch,
            seq,
            model,
            lora,
            estimate,
        })
    }

    /// The pre-flight's estimate this backend was admitted with.
    pub fn estimate(&self) -> &Estimate {
        &self.estimate
    }

    /// The device.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

/// The kernels' optimiser settings for `config`; refuses a learning rate,
/// decay or clip that is not finite (or a clip that is not positive).
fn optimizer(config: &StepConfig) -> Result<Optimizer, TrainError> {
    if !(config.lr.is_finite() && config.lr >= 0.0) {
        return Err(TrainError::Invalid(format!("learning rate {}", config.lr)));
    }
    if !(config.weight_decay.is_finite() && config.weight_decay >= 0.0) {
        return Err(TrainError::Invalid(format!(
            "weight decay {}",
            config.weight_decay
        )));
    }
    let max_grad_norm = match config.clip_norm {
        Some(c) if c.is_finite() && c > 0.0 => c as f32,
        Some(c) => return Err(TrainError::Invalid(format!("gradient clip {c}"))),
        // The clip kernel computes min(1, max / (norm + 1e-6)) and turns a
        // NaN factor into 1, so an infinite bound scales by exactly 1.
        None => f32::INFINITY,
    };
    Ok(Optimizer {
        lr: config.lr,
        beta1: BETA1,
        beta2: BETA2,
        eps: ADAM_EPS,
        weight_decay: config.weight_decay,
        max_grad_norm,
    })
}

/// One step on `m` (and the adapters when LoRA): loss and gradient norm.
fn step_on<T: Dtype>(
    gpu: &Gpu,
    m: &mut GpuLlama<T>,
    lora: Option<&mut Adapters>,
    data: &TrainBatch,
    opt: &Optimizer,
) -> Result<(f64, Option<f32>), KernelError>
where
    CudaBlas: Gemm<T>,
{
    m.forward_backward(gpu, data)?;
    let norm = match lora {
        None => {
            m.optimizer_step(gpu, opt)?;
            m.last_grad_norm(gpu)?
        }
        Some(a) => {
            a.gpu.optimizer_step(gpu, m, opt)?;
            a.gpu.last_grad_norm(gpu)?
        }
    };
    Ok((m.last_loss(gpu)?, norm))
}

/// Device tensors to host `f32` vectors.
fn to_host(gpu: &Gpu, ts: &[kolm_kernels::Tensor<f32>]) -> Result<Vec<Vec<f32>>, TrainError> {
    ts.iter()
        .map(|t| t.to_host(gpu).map_err(TrainError::from))
        .collect()
}

/// A checkpoint tensor, its name checked by the format.
fn tensor(
    group: &str,
    name: &str,
    shape: &[usize],
    data: Vec<f32>,
) -> Result<checkpoint::Tensor, TrainError> {
    Ok(checkpoint::Tensor::new(group, name, shape.to_vec(), data)?)
}

/// The tensors handed to `load_state`, by full name, each taken once:
/// refuses a duplicate, and (via [`Self::finish`]) any left over.
struct Given<'a> {
    by_name: HashMap<&'a str, &'a checkpoint::Tensor>,
}

impl<'a> Given<'a> {
    fn new(tensors: &'a [checkpoint::Tensor]) -> Result<Self, TrainError> {
        let mut by_name = HashMap::new();
        for t in tensors {
            if by_name.insert(t.full_name(), t).is_some() {
                return Err(TrainError::Invalid(format!(
                    "state tensor {} given twice",
                    t.full_name()
                )));
            }
        }
        Ok(Self { by_name })
    }

    fn take(&mut self, group: &str, name: &str, shape: &[usize]) -> Result<Vec<f32>, TrainError> {
        let full = format!("{group}/{name}");
        let t = self
            .by_name
            .remove(full.as_str())
            .ok_or_else(|| TrainError::Invalid(format!("state tensor {full} is missing")))?;
        if t.shape() != shape {
            return Err(TrainError::Invalid(format!(
                "state tensor {full} has shape {:?}, expected {shape:?}",
                t.shape()
            )));
        }
        Ok(t.data().to_vec())
    }

    fn finish(self) -> Result<(), TrainError> {
        let mut extra: Vec<&str> = self.by_name.into_keys().collect();
        extra.sort_unstable();
        match extra.first() {
            None => Ok(()),
            Some(first) => Err(TrainError::Invalid(format!(
                "{} unexpected state tensor(s), first {first}",
                extra.len()
            ))),
        }
    }
}

impl Backend for GpuBackend {
    fn step(&mut self, batch: &Batch, config: &StepConfig) -> Result<StepStats, TrainError> {
        if (batch.batch, batch.seq) != (self.batch, self.seq) {
            return Err(TrainError::Invalid(format!(
                "a [{}, {}] batch for a backend built for [{}, {}]",
                batch.batch, batch.seq, self.batch, self.seq
            )));
        }
        if batch.valid_targets() == 0 {
            return Err(TrainError::Invalid(
                "a batch with no scored target".to_owned(),
            ));
        }
        let opt = optimizer(config)?;
        let gpu = &*self.gpu;
        let data = TrainBatch::new(
            gpu,
            self.cfg.vocab(),
            batch.batch,
            batch.seq,
            &batch.ids,
            &batch.targets,
        )?;
        let lora = self.lora.as_mut();
        let (loss, norm) = with_model!(&mut self.model, m => step_on(gpu, m, lora, &data, &opt)?);
        let step = self.optimizer_steps();
        if !loss.is_finite() {
            return Err(TrainError::NotFinite { step, what: "loss" });
        }
        let grad_norm = f64::from(norm.unwrap_or(f32::NAN));
        if !grad_norm.is_finite() {
            return Err(TrainError::NotFinite {
                step,
                what: "gradient norm",
            });
        }
        Ok(StepStats { loss, grad_norm })
    }

    fn optimizer_steps(&self) -> u64 {
        match &self.lora {
            Some(a) => u64::from(a.gpu.steps()),
            None => u64::from(with_model!(&self.model, m => m.steps())),
        }
    }

    fn state_tensors(&self) -> Result<Vec<checkpoint::Tensor>, TrainError> {
        let gpu = &*self.gpu;
        let mut out = Vec::new();
        match &self.lora {
            None => {
                let (master, (m, v)) = with_model!(&self.model, x => (to_host(gpu, x.master())?, {
                    let (m, v) = x.moments();
                    (to_host(gpu, m)?, to_host(gpu, v)?)
                }));
                for (group, values) in [("param", master), ("adam_m", m), ("adam_v", v)] {
                    for (info, data) in self.cfg.params().iter().zip(values) {
                        out.push(tensor(group, &info.name, &info.shape, data)?);
                    }
                }
            }
            Some(a) => {
                let [ma, va, mb, vb] = a.gpu.moments();
                let (lists, rank) = (
                    [
                        to_host(gpu, a.gpu.a())?,
                        to_host(gpu, a.gpu.b())?,
                        to_host(gpu, ma)?,
                        to_host(gpu, mb)?,
                        to_host(gpu, va)?,
                        to_host(gpu, vb)?,
                    ],
                    a.layout.rank,
                );
                let [la, lb, ma, mb, va, vb] = lists;
                for (i, s) in a.layout.sites.iter().enumerate() {
                    let (sa, sb) = ([rank, s.cols], [s.rows, rank]);
                    let (na, nb) = (format!("lora_a.{}", s.name), format!("lora_b.{}", s.name));
                    out.push(tensor("lora_a", &s.name, &sa, la[i].clone())?);
                    out.push(tensor("lora_b", &s.name, &sb, lb[i].clone())?);
                    out.push(tensor("adam_m", &na, &sa, ma[i].clone())?);
                    out.push(tensor("adam_m", &nb, &sb, mb[i].clone())?);
                    out.push(tensor("adam_v", &na, &sa, va[i].clone())?);
                    out.push(tensor("adam_v", &nb, &sb, vb[i].clone())?);
                }
            }
        }
        Ok(out)
    }

    fn load_state(
        &mut self,
        tensors: &[checkpoint::Tensor],
        optimizer_steps: u64,
    ) -> Result<(), TrainError> {
        let step = u32::try_from(optimizer_steps).map_err(|_| {
            TrainError::Invalid(format!(
                "{optimizer_steps} optimiser steps (at most 2^32 - 1)"
            ))
        })?;
        let mut given = Given::new(tensors)?;
        let gpu = &*self.gpu;
        match &mut self.lora {
            None => {
                let infos = self.cfg.params();
                let mut lists: [Vec<Vec<f32>>; 3] = Default::default();
                for (list, group) in lists.iter_mut().zip(["param", "adam_m", "adam_v"]) {
                    for info in &infos {
                        list.push(given.take(group, &info.name, &info.shape)?);
                    }
                }
                given.finish()?;
                let [master, m, v] = lists;
                with_model!(&mut self.model, x => x.load_state(gpu, &master, &m, &v, step)?);
            }
            Some(a) => {
                let rank = a.layout.rank;
                let mut adapters = Vec::new();
                let mut moments: [Vec<Vec<f32>>; 4] = Default::default();
                for s in &a.layout.sites {
                    let (sa, sb) = ([rank, s.cols], [s.rows, rank]);
                    let (na, nb) = (format!("lora_a.{}", s.name), format!("lora_b.{}", s.name));
                    adapters.push((
                        given.take("lora_a", &s.name, &sa)?,
                        given.take("lora_b", &s.name, &sb)?,
                    ));
                    moments[0].push(given.take("adam_m", &na, &sa)?);
                    moments[1].push(given.take("adam_v", &na, &sa)?);
                    moments[2].push(given.take("adam_m", &nb, &sb)?);
                    moments[3].push(given.take("adam_v", &nb, &sb)?);
                }
                given.finish()?;
                let [ma, va, mb, vb] = &moments;
                let refs = [&ma[..], &va[..], &mb[..], &vb[..]];
                with_model!(&mut self.model, x => a.gpu.load_state(gpu, x, &adapters, refs, step)?);
            }
        }
        Ok(())
    }

    fn merged_params(&self) -> Result<Vec<Vec<f32>>, TrainError> {
        let gpu = &*self.gpu;
        // For LoRA the masters are the frozen base: merge on the host in
        // f64 as the CPU backend does (Layout::merge_into).
        let mut params = with_model!(&self.model, x => to_host(gpu, x.master())?);
        if let Some(a) = &self.lora {
            let adapters: Vec<(Vec<f32>, Vec<f32>)> = to_host(gpu, a.gpu.a())?
                .into_iter()
                .zip(to_host(gpu, a.gpu.b())?)
                .collect();
            a.layout.merge_into(&mut params, &adapters);
        }
        Ok(params)
    }

    fn adapter(&self) -> Result<Option<Vec<checkpoint::Tensor>>, TrainError> {
        let Some(a) = &self.lora else {
            return Ok(None);
        };
        let gpu = &*self.gpu;
        let rank = a.layout.rank;
        let (la, lb) = (to_host(gpu, a.gpu.a())?, to_host(gpu, a.gpu.b())?);
        let mut out = Vec::with_capacity(2 * la.len());
        for ((s, ai), bi) in a.layout.sites.iter().zip(la).zip(lb) {
            out.push(tensor("lora_a", &s.name, &[rank, s.cols], ai)?);
            out.push(tensor("lora_b", &s.name, &[s.rows, rank], bi)?);
        }
        Ok(Some(out))
    }
}

/// The device and the software it runs with, for a run's manifest:
/// `devices` is `"<name> (sm_<major><minor>, <n> SMs)"`, `driver_version`
/// the kernel driver's version (`/proc/driver/nvidia/version`; where that
/// is unreadable, `"CUDA driver API <major>.<minor>"`), `cuda_version` the
/// CUDA driver API version (`cuDriverGetVersion`, `"13.0"`), and
/// `libraries` cuBLAS's and NVRTC's versions.
pub fn environment(gpu: &Gpu) -> Result<GpuEnvironment, TrainError> {
    let info = gpu.info();
    let v = gpu.software_versions()?;
    let (cc_major, cc_minor) = info.compute_capability;
    let cuda = format!("{}.{}", v.cuda_driver_api.0, v.cuda_driver_api.1);
    let (b0, b1, b2) = v.cublas;
    let libraries = BTreeMap::from([
        ("cublas".to_owned(), format!("{b0}.{b1}.{b2}")),
        ("nvrtc".to_owned(), format!("{}.{}", v.nvrtc.0, v.nvrtc.1)),
    ]);
    Ok(GpuEnvironment {
        devices: vec![format!(
            "{} (sm_{cc_major}{cc_minor}, {} SMs)",
            info.name, info.multiprocessors
        )],
        driver_version: v
            .driver
            .unwrap_or_else(|| format!("CUDA driver API {cuda}")),
        cuda_version: cuda,
        libraries,
    })
}
